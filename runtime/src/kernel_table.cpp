// SPDX-License-Identifier: Apache-2.0
// The kernel table, expanded from the build's kernels.inc; the generated headers are included
// so that a kernel whose signature differs from KernelFunction fails to compile here.
#include "internal/kernel_table.h"

#include "kernel_headers.h"

namespace ropegen {
namespace {

constexpr KernelEntry kKernels[] = {
#define ROPE_KERNEL(name, isa, style, source, dtype, head_dim, pair_words, min_call_bytes, in_place) \
    {#name, isa, style, source, dtype, head_dim, &name, 0, 0, pair_words != 0, min_call_bytes, in_place != 0},
#define ROPE_CUDA_KERNEL(...)
#include "kernels.inc"
#undef ROPE_KERNEL
#undef ROPE_CUDA_KERNEL
};

// Ends with an empty entry, so that a build without CUDA kernels still has an array.
constexpr KernelEntry kCudaKernels[] = {
#define ROPE_KERNEL(...)
#define ROPE_CUDA_KERNEL(name, capability, style, source, dtype, head_dim, vector_elements) \
    {#name, ROPE_ISA_NONE, style, source, dtype, head_dim, &name, capability, vector_elements},
#include "kernels.inc"
#undef ROPE_KERNEL
#undef ROPE_CUDA_KERNEL
    {},
};

constexpr size_t kKernelCount = sizeof(kKernels) / sizeof(kKernels[0]);
constexpr size_t kCudaKernelCount = sizeof(kCudaKernels) / sizeof(kCudaKernels[0]) - 1;

// A key's run spans from its first entry to its last at a level, so an entry of another key
// inside it would only cost a look (kernel_matches tells them apart); a table of more levels than
// kMaxLevels fails to compile here.
constexpr KernelIndex index_of(const KernelEntry *table, size_t count) {
    KernelIndex index;
    for (size_t i = 0; i < count; i++) {
        const KernelEntry &kernel = table[i];
        if (index.levels == 0 || index.level[index.levels - 1] != kernel_level(kernel)) {
            index.level[index.levels++] = kernel_level(kernel);
        }
        KernelRun &run = index.runs[index.levels - 1][kernel.style][kernel.source][kernel.dtype];
        if (run.begin == nullptr) {
            run.begin = &kernel;
        }
        run.end = &kernel + 1;
    }
    return index;
}

constexpr KernelIndex kIndex = index_of(kKernels, kKernelCount);
constexpr KernelIndex kCudaIndex = index_of(kCudaKernels, kCudaKernelCount);

// The dispatcher takes the first level that serves a call: each level once, best first.
constexpr bool best_level_first(const KernelIndex &index) {
    for (int level = 1; level < index.levels; level++) {
        if (index.level[level] >= index.level[level - 1]) {
            return false;
        }
    }
    return true;
}
static_assert(best_level_first(kIndex) && best_level_first(kCudaIndex),
              "kernels.inc must list each level's kernels together, the best level first");

}  // namespace

const KernelEntry *kernel_table(size_t *count) {
    *count = kKernelCount;
    return kKernels;
}

const KernelEntry *cuda_kernel_table(size_t *count) {
    *count = kCudaKernelCount;
    return kCudaKernels;
}

const KernelIndex &kernel_index() {
    return kIndex;
}

const KernelIndex &cuda_kernel_index() {
    return kCudaIndex;
}

}  // namespace ropegen
