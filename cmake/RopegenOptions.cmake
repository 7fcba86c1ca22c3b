# SPDX-License-Identifier: Apache-2.0
# The build's options. ropegen_option() prints every option that differs from its default, so a
# build log says how it was configured.
function(ropegen_option name doc default)
    if (NOT DEFINED ${name})
        set(${name} "${default}" CACHE STRING "${doc}")
    endif ()
    if (NOT "${${name}}" STREQUAL "${default}")
        message(STATUS "ropegen: ${name}=${${name}} (default: ${default})")
    endif ()
endfunction()

ropegen_option(ROPEGEN_BUILD_TESTS "Build the GoogleTest suite" ON)
ropegen_option(ROPEGEN_BUILD_BENCH "Build the Google Benchmark programs" ON)
ropegen_option(ROPEGEN_BUILD_DEMO "Build the demo that links the static library" ON)
ropegen_option(ROPEGEN_WERROR "Treat warnings as errors" OFF)
ropegen_option(ROPEGEN_ISAS "x86 levels to generate kernels for" "avx512;avx2;sse41")
ropegen_option(ROPEGEN_DTYPES "Storage dtypes to generate kernels for" "f32;f16;bf16")
ropegen_option(ROPEGEN_HEAD_DIMS "head_dims with specialized kernels (0 = the any-head_dim kernel, required)" "64;128;256;0")
ropegen_option(ROPEGEN_SANITIZE "Sanitizers for the library, tests and demo (e.g. address;undefined, or thread)" "")
ropegen_option(ROPEGEN_BUILD_FUZZERS "Build the libFuzzer harness (clang only)" OFF)
