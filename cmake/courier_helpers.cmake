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

# courier_library_finish(target name): the part every library shares: the Courier::name alias,
# public include directory, installation, the header self-check and the tests folder.
function(courier_library_finish target name)
    add_library(Courier::${name} ALIAS ${target})
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
    target_compile_features(${target} PUBLIC cxx_std_20)
    target_include_directories(${target} PUBLIC
        $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    install(TARGETS ${target} EXPORT CourierTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    if(COURIER_CHECK_HEADERS)
        courier_check_headers(${target} ${CMAKE_CURRENT_SOURCE_DIR}/include)
    endif()
    if(COURIER_BUILD_TESTS AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/tests/CMakeLists.txt)
        add_subdirectory(tests)
    endif()
endfunction()
