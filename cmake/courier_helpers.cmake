# SPDX-License-Identifier: BSL-1.0
# Two small helpers: project-wide warning/sanitizer flags, and the header self-containment check.

add_library(courier_build_flags INTERFACE)
target_compile_options(courier_build_flags INTERFACE
    $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
    $<$<BOOL:${COURIER_WERROR}>:-Werror>)
if(COURIER_BUILD_FUZZERS)
    # Coverage instrumentation for everything, sanitizers for the fuzz run.
    add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
    add_link_options(-fsanitize=address,undefined)
endif()
if(COURIER_SANITIZER)
    set(_san -fsanitize=${COURIER_SANITIZER} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    add_compile_options(${_san})
    add_link_options(${_san})
endif()

# courier_check_headers(target include_dir): one translation unit per public header that
# includes only that header, so a header that forgets an include fails the build.
function(courier_check_headers target include_dir)
    file(GLOB_RECURSE headers RELATIVE ${include_dir} CONFIGURE_DEPENDS ${include_dir}/*.hpp)
    set(sources)
    foreach(h IN LISTS headers)
        string(MAKE_C_IDENTIFIER ${h} id)
        set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
        file(CONFIGURE OUTPUT ${src} CONTENT "#include <${h}>\n#include <${h}>\n")
        list(APPEND sources ${src})
    endforeach()
    if(sources)
        add_library(${target}_header_check OBJECT ${sources})
        target_link_libraries(${target}_header_check PRIVATE ${target} courier_build_flags)
    endif()
endfunction()
