# SPDX-License-Identifier: Apache-2.0
# Cross build for 64-bit ARM Linux with Debian's cross compilers (g++-aarch64-linux-gnu); programs
# run under qemu-user with the cross sysroot, so ctest runs the aarch64 tests on this x86 host.
# The Halide generator is a host program: the cross build imports it from a host build
# (ropegen-halide_generators_ROOT, set by the aarch64 preset to the "generators" preset's tree).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(ROPEGEN_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH "${ROPEGEN_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${ROPEGEN_AARCH64_SYSROOT}")
