// SPDX-License-Identifier: Apache-2.0
// What the stress tests share: the kernel keys of the build, a spread of calls for one key
// (layouts, memory, positions, direction, partial rotary), and bitwise comparison of results.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "reference/rope_reference.h"
#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {

/// One kernel per key (style, source, dtype, head_dim) of this build, of the best ISA this CPU
/// runs and of every call (no call class); the any-head_dim kernels included.
inline std::vector<const KernelEntry *> one_kernel_per_key() {
    std::map<std::string, const KernelEntry *> best;
    for (const KernelEntry *kernel : all_kernels()) {
        if (kernel->isa <= detected_isa() && *call_class_suffix(*kernel) == '\0') {
            best.emplace(kernel_key(*kernel), kernel);  // the table lists the best ISA first
        }
    }
    std::vector<const KernelEntry *> kernels;
    for (const auto &entry : best) {
        kernels.push_back(entry.second);
    }
    return kernels;
}

/// Calls of `kernel`'s key that differ in everything a kernel's loop nest depends on: layout
/// (BSHD, BHSD, SBHD and the strided fallback), in place or not, packed QKV, q only, decode,
/// position kinds, direction, partial rotary (any-head_dim kernels only: the dispatcher sends
/// partial rotary there), cache tables in the tensor dtype or padded, scaling. Small: a few
/// thousand elements each.
inline std::vector<CaseSpec> varied_cases(const KernelEntry &kernel, uint64_t seed) {
    CaseSpec base = kernel_case(kernel, 80);
    base.batch = 2;
    base.seq = 19;
    base.q_heads = 3;
    base.k_heads = 2;
    // Computed sources are checked far out; a cache needs a row per position (and the test
    // support builds the rows in fp64, which takes a while).
    const int64_t max_position = kernel.source == ROPE_SOURCE_CACHE ? 200 : int64_t{1} << 22;
    std::vector<CaseSpec> cases;
    auto add = [&](auto &&edit) {
        CaseSpec c = base;
        c.seed = seed + cases.size();
        edit(c);
        cases.push_back(c);
    };
    add([&](CaseSpec &c) { c.positions = random_table(c, 0, max_position, ROPE_INDEX_INT32, c.seed); });
    add([&](CaseSpec &c) {
        c.layout = Layout::BHSD;
        c.memory = Memory::InPlace;
        c.direction = ROPE_INVERSE;
        c.positions.mode = PositionMode::BatchOffsets;
        c.positions.values = {7, max_position - c.seq};
    });
    add([&](CaseSpec &c) {
        c.layout = Layout::SBHD;
        c.out_layout = Layout::BSHD;
        c.positions = random_table(c, 0, max_position, ROPE_INDEX_INT64, c.seed);
        c.positions.transposed = true;
    });
    add([&](CaseSpec &c) {
        c.memory = Memory::PackedQkvInPlace;
        c.batch = 1;  // a batch stride of 0: the kernels' strided fallback loop nest
        c.seq = 23;
        c.positions.scalar_offset = max_position / 2;
    });
    add([&](CaseSpec &c) {
        c.batch = 6;
        c.seq = 1;  // a decode step: split into parts at 2, 3 and 6 threads, not at 4 or 5
        c.k_heads = 0;
        c.row_pad = 8;
        c.positions.mode = PositionMode::BatchOffsets;
        c.positions.values = {0, 1, max_position - 1, 17, max_position / 3, 5};
    });
    add([&](CaseSpec &c) {
        c.layout = Layout::BHSD;
        c.fill = Fill::Adversarial;  // NaN, Inf, subnormals, huge values
        c.positions = random_table(c, 0, max_position, ROPE_INDEX_INT32, c.seed);
        if (kernel.source == ROPE_SOURCE_CACHE) {
            c.cache_in_dtype = kernel.dtype != ROPE_DTYPE_F32;
            c.cache_row_pad = 3;
        } else {
            c.base = 500000;
            c.attn_factor = 0.75f;
        }
    });
    if (kernel.head_dim == 0) {
        add([&](CaseSpec &c) {
            c.rotary_dim = static_cast<int>(c.head_dim) - 32;
            c.rotary_offset = 12;
            c.fill = Fill::RandomBits;  // pass-through lanes must be copied bit for bit
            c.positions = random_table(c, 0, max_position, ROPE_INDEX_INT32, c.seed);
        });
    }
    return cases;
}

/// A spread of thread settings a call may run with: params.num_threads values, and whether the
/// library's pool or an engine's runs the loops.
inline const std::vector<int32_t> &varied_num_threads() {
    static const std::vector<int32_t> values{0, 1, 2, 3, 8};
    return values;
}

/// The outputs of a finished call, kept for later comparison.
struct Outputs {
    Tensor q, k;  ///< k empty for q-only calls

    static Outputs of(const RopeCall &call) {
        return {call.q_out.clone(), call.spec().k_heads > 0 ? call.k_out.clone() : Tensor()};
    }
};

/// How two results must agree: every bit, or every bit except NaN payloads and signs (both NaN).
enum class Agreement { Bits, BitsOrBothNan };

inline ::testing::AssertionResult agree(const Tensor &got, const Tensor &want, Agreement agreement) {
    if (want.storage() == nullptr) {
        return ::testing::AssertionSuccess();
    }
    int64_t differences = 0;
    std::ostringstream first;
    got.for_each_head([&](int64_t b, int64_t s, int64_t h) {
        for (int64_t d = 0; d < got.head_dim(); d++) {
            const uint32_t x = got.bits(b, s, h, d), y = want.bits(b, s, h, d);
            if (x == y || (agreement == Agreement::BitsOrBothNan && std::isnan(got.get(b, s, h, d)) &&
                           std::isnan(want.get(b, s, h, d)))) {
                continue;
            }
            if (differences++ == 0) {
                first << "[" << b << "," << s << "," << h << "," << d << "]: 0x" << std::hex << x << " vs 0x" << y;
            }
        }
    });
    if (differences == 0) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << differences << " elements differ, the first at " << first.str();
}

/// Both outputs of `call` agree with `want`.
inline ::testing::AssertionResult agree(const RopeCall &call, const Outputs &want,
                                        Agreement agreement = Agreement::Bits) {
    ::testing::AssertionResult q = agree(call.q_out, want.q, agreement);
    if (!q) {
        return ::testing::AssertionFailure() << "q: " << q.message();
    }
    ::testing::AssertionResult k = agree(call.k_out, want.k, agreement);
    if (!k) {
        return ::testing::AssertionFailure() << "k: " << k.message();
    }
    return ::testing::AssertionSuccess();
}

/// Refills the outputs of a call with canary bytes, so that running it again proves it wrote them.
inline void reset_outputs(RopeCall &call) {
    for (Tensor *out : {&call.q_out, &call.k_out}) {
        if (out->storage() != nullptr && !out->shares_storage(call.q) && !out->shares_storage(call.k)) {
            GuardedBytes &bytes = out->storage()->bytes;
            std::fill(bytes.data(), bytes.data() + bytes.size(), kCanaryByte);
        }
    }
}

}  // namespace ropegen::test
