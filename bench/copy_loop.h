// SPDX-License-Identifier: Apache-2.0
// Copy baselines: the vector loads and stores a compiler makes of a plain byte loop, out of place
// and in place.
#pragma once

#include <cstddef>

namespace ropebench {

/// Copies `bytes` from `src` to `dst` through ordinary vector stores, as a kernel stores: built
/// -O3 -march=native without the compiler's memcpy idiom (bench/CMakeLists.txt). glibc's memcpy
/// may instead use `rep movsb`, which on AMD CPUs writes whole cache lines without first reading
/// them, so a kernel's floor in cache can lie above memcpy's time (bench/README.md).
void copy_loop(void *dst, const void *src, size_t bytes);

/// The in-place floor: reads every byte of `dst` and writes it back unchanged (`src` must be
/// `dst`), through the same vector loads and stores, as a rotation in place touches each line.
void rewrite_loop(void *dst, const void *src, size_t bytes);

}  // namespace ropebench
