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
# The architecture the kernels and the library are built for (the toolchain's, when cross-compiling).
if (CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(ROPEGEN_ARCH x86_64)
elseif (CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    set(ROPEGEN_ARCH aarch64)
else ()
    message(FATAL_ERROR "ropegen builds for x86_64 and aarch64 Linux; CMAKE_SYSTEM_PROCESSOR is ${CMAKE_SYSTEM_PROCESSOR}")
endif ()

ropegen_option(ROPEGEN_ISAS "ISA levels to generate kernels for (all, or some of avx512;avx2;sse41; aarch64 has neon alone)" "all")
# CUDA kernels (PTX inside the library, run through the Halide CUDA runtime on the caller's
# context and stream). Generating them needs no CUDA toolkit; checking them needs ptxas.
if (ROPEGEN_ARCH STREQUAL "x86_64")
    set(ropegen_cuda_default all)
else ()
    set(ropegen_cuda_default none)
endif ()
ropegen_option(ROPEGEN_CUDA_LEVELS "CUDA levels to generate kernels for (all, none, or some of sm86;sm80)" "${ropegen_cuda_default}")
if (ROPEGEN_CUDA_LEVELS STREQUAL "none")
    set(ROPEGEN_CUDA OFF)
else ()
    set(ROPEGEN_CUDA ON)
endif ()
ropegen_option(ROPEGEN_DTYPES "Storage dtypes to generate kernels for" "f32;f16;bf16")
ropegen_option(ROPEGEN_HEAD_DIMS "head_dims with specialized kernels (0 = the any-head_dim kernel, required)" "64;128;256;0")
# The autotuner's schedules (schedules/README.md, "Tuned files").
ropegen_option(ROPEGEN_TUNED_MACHINE "Tuned schedules (schedules/tuned/<target>/<machine>.json) to build with: host (this machine's, when tuned), none, or a machine name" "host")
ropegen_option(ROPEGEN_SANITIZE "Sanitizers for the library, tests and demo (e.g. address;undefined, or thread)" "")
ropegen_option(ROPEGEN_BUILD_FUZZERS "Build the libFuzzer harness (clang only)" OFF)
# The sanitizer presets take release's kernels: Halide's machine code is the same in every build
# of a target, and the sanitizers never instrument it (runtime/CMakeLists.txt).
ropegen_option(ROPEGEN_KERNELS_FROM "A build tree of these sources whose kernels and Halide runtime this build links instead of generating its own (empty: generate)" "")
if (ROPEGEN_KERNELS_FROM)
    get_filename_component(ROPEGEN_KERNELS_FROM "${ROPEGEN_KERNELS_FROM}" ABSOLUTE BASE_DIR "${CMAKE_BINARY_DIR}")
endif ()
