# SPDX-License-Identifier: BSL-1.0
# Writes checkpoint files with the old type definitions (WRITER) into DIR, then reads them with
# the new ones (READER).
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(COMMAND ${WRITER} ${DIR} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${WRITER} ${DIR} failed: ${rc}")
endif()
execute_process(COMMAND ${READER} ${DIR} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${READER} ${DIR} failed: ${rc}")
endif()
