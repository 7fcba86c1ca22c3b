// SPDX-License-Identifier: Apache-2.0
// The calls every GPU kernel is judged on, shared by the CUDA tests (on a GPU) and the OpenCL
// run of the same schedule (on PoCL): every layout, position form and direction, GQA, q alone,
// packed QKV and per-head fused QKV in place, a long prefill, adversarial values, 16-bit cache
// tables, a partial rotary slice.
#pragma once

#include <vector>

#include "support/rope_case.h"

namespace ropegen::test {

/// Variations of `base` (a call of one kernel's key at its head_dim; `any_head_dim`: the kernel
/// takes any head_dim, so also a partial slice).
inline std::vector<CaseSpec> gpu_kernel_cases(const CaseSpec &base, bool any_head_dim) {
    std::vector<CaseSpec> cases;
    for (const Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD}) {
        CaseSpec c = base;
        c.layout = layout;
        c.positions = random_table(c, 0, 3000, layout == Layout::BHSD ? ROPE_INDEX_INT32 : ROPE_INDEX_INT64, 3);
        cases.push_back(c);
    }
    CaseSpec inverse = base;
    inverse.direction = ROPE_INVERSE;
    inverse.positions.mode = PositionMode::BatchOffsets;
    inverse.positions.values = {7, 40000};
    cases.push_back(inverse);
    CaseSpec in_place = base;
    in_place.memory = Memory::PackedQkvInPlace;
    in_place.q_heads = 8;
    in_place.k_heads = 2;
    in_place.positions = random_table(in_place, 0, 100, ROPE_INDEX_INT64, 5);
    cases.push_back(in_place);
    CaseSpec per_head = in_place;  // GPT-NeoX's fused QKV: q and k lanes of each head's slot, in place
    per_head.memory = Memory::PerHeadQkvInPlace;
    cases.push_back(per_head);
    CaseSpec q_only = base;
    q_only.k_heads = 0;
    q_only.seq = 1;
    q_only.batch = 7;
    cases.push_back(q_only);
    CaseSpec long_prefill = base;  // a block's shared cos/sin must not grow with the sequence
    long_prefill.batch = 1;
    long_prefill.seq = 2048;
    long_prefill.q_heads = 2;
    long_prefill.k_heads = 1;
    long_prefill.positions.mode = PositionMode::BatchOffsets;
    long_prefill.positions.values = {5};
    cases.push_back(long_prefill);
    CaseSpec adversarial = base;
    adversarial.fill = Fill::Adversarial;
    cases.push_back(adversarial);
    if (base.source == ROPE_SOURCE_CACHE && base.dtype != ROPE_DTYPE_F32) {
        CaseSpec narrow = base;
        narrow.cache_in_dtype = true;
        cases.push_back(narrow);
    }
    if (any_head_dim) {
        CaseSpec partial = base;
        partial.rotary_dim = 32;
        partial.rotary_offset = 16;
        cases.push_back(partial);
    }
    return cases;
}

}  // namespace ropegen::test
