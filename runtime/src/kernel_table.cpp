// SPDX-License-Identifier: Apache-2.0
// The kernel table, expanded from the build's kernels.inc; the generated headers are included
// so that a kernel whose signature differs from KernelFunction fails to compile here.
#include "internal/kernel_table.h"

#include "kernel_headers.h"

namespace ropegen {
namespace {

const KernelEntry kKernels[] = {
#define ROPE_KERNEL(name, isa, style, source, dtype, head_dim, pair_words, min_call_bytes, in_place) \
    {#name, isa, style, source, dtype, head_dim, &name, 0, 0, pair_words != 0, min_call_bytes, in_place != 0},
#define ROPE_CUDA_KERNEL(...)
#include "kernels.inc"
#undef ROPE_KERNEL
#undef ROPE_CUDA_KERNEL
};

// Ends with an empty entry, so that a build without CUDA kernels still has an array.
const KernelEntry kCudaKernels[] = {
#define ROPE_KERNEL(...)
#define ROPE_CUDA_KERNEL(name, capability, style, source, dtype, head_dim, vector_elements) \
    {#name, ROPE_ISA_NONE, style, source, dtype, head_dim, &name, capability, vector_elements},
#include "kernels.inc"
#undef ROPE_KERNEL
#undef ROPE_CUDA_KERNEL
    {},
};

}  // namespace

const KernelEntry *kernel_table(size_t *count) {
    *count = sizeof(kKernels) / sizeof(kKernels[0]);
    return kKernels;
}

const KernelEntry *cuda_kernel_table(size_t *count) {
    *count = sizeof(kCudaKernels) / sizeof(kCudaKernels[0]) - 1;
    return kCudaKernels;
}

}  // namespace ropegen
