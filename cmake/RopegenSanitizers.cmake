# SPDX-License-Identifier: Apache-2.0
# Sanitizer and fuzzer instrumentation for every target created after this file is included: the
# library, tests, benchmarks and demo, but not the generators, which run at build time only.
# The generated kernels are machine code from Halide and are never instrumented; the guard-page
# buffers of the tests and of the fuzzer catch their out-of-bounds accesses instead.
if (ROPEGEN_SANITIZE)
    list(JOIN ROPEGEN_SANITIZE "," sanitizers)
    # A finding must fail the run, never scroll by: no recovery after the first report.
    add_compile_options(-fsanitize=${sanitizers} -fno-sanitize-recover=all -fno-omit-frame-pointer)
    add_link_options(-fsanitize=${sanitizers})
    # The library is C++: a C program linking it needs the sanitizers' C++ runtime parts too.
    if (CMAKE_C_COMPILER_ID STREQUAL "Clang")
        add_link_options($<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime>)
    endif ()
endif ()
if (ROPEGEN_BUILD_FUZZERS)
    if (NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
        message(FATAL_ERROR "ROPEGEN_BUILD_FUZZERS=ON needs clang (libFuzzer); CMAKE_CXX_COMPILER is ${CMAKE_CXX_COMPILER}")
    endif ()
    # Coverage feedback from the dispatcher and validation code; the harness links libFuzzer itself.
    add_compile_options(-fsanitize=fuzzer-no-link)
endif ()
