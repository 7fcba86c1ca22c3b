// SPDX-License-Identifier: Apache-2.0
// The kernel table, expanded from the build's kernels.inc; the generated headers are included
// so that a kernel whose signature differs from KernelFunction fails to compile here.
#include "internal/kernel_table.h"

#include "kernel_headers.h"

namespace ropegen {
namespace {

const KernelEntry kKernels[] = {
#define ROPE_KERNEL(name, isa, style, source, dtype, head_dim) {#name, isa, style, source, dtype, head_dim, &name},
#include "kernels.inc"
#undef ROPE_KERNEL
};

}  // namespace

const KernelEntry *kernel_table(size_t *count) {
    *count = sizeof(kKernels) / sizeof(kKernels[0]);
    return kKernels;
}

}  // namespace ropegen
