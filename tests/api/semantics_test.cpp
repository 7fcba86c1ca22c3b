// SPDX-License-Identifier: Apache-2.0
// What rope_dispatch() does with legal but unusual arguments: empty tensors, broadcast inputs
// (zero strides), the cache source with an attn_factor set, and outputs that overlap themselves.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <limits>
#include <string>

#include "support/kernels.h"
#include "support/rope_case.h"
#include "support/sparse_buffer.h"

namespace ropegen::test {
namespace {

CaseSpec small_case() {
    CaseSpec c;
    c.batch = 2;
    c.seq = 3;
    c.q_heads = 3;
    c.k_heads = 2;
    c.head_dim = 64;
    c.positions.scalar_offset = 4;
    return c;
}

// A size of 0 on any token or head axis is a valid call that writes nothing.
TEST(ApiSemantics, EmptyTensorsAreANoOp) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    for (int axis = 0; axis < 3; axis++) {
        SCOPED_TRACE(axis);
        RopeCall call(small_case());
        const Runner empty_axis = [axis](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            for (rope_tensor *t : {&p.q, &p.q_out, &p.k, &p.k_out}) {
                if (axis < 2 || t == &p.q || t == &p.q_out) {  // k keeps its heads when q has none
                    t->sizes[axis] = 0;
                }
            }
            return rope_dispatch(&p, report);
        };
        EXPECT_EQ(call.run(empty_axis), ROPE_OK) << call.report().message;
        if (axis == 2) {
            // q has no heads, k is still rotated.
            EXPECT_TRUE(call.check_untouched_outside_outputs());
        } else {
            EXPECT_TRUE(call.check_all_unchanged());
        }
    }
}

// Inputs may repeat themselves through a zero stride (one head read as three): each output head
// is the rotation of the same lanes.
TEST(ApiSemantics, BroadcastInputThroughZeroStride) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    CaseSpec c = small_case();
    RopeCall call(c);
    const Tensor one_head = Tensor::make(c.dtype, {c.batch, c.seq, 1, c.head_dim});
    std::mt19937_64 rng(3);
    Tensor filled = one_head;
    fill_uniform(filled, rng);
    Sizes strides = one_head.strides();
    strides[2] = 0;
    call.q = one_head.view({c.batch, c.seq, c.q_heads, c.head_dim}, 0, strides);
    call.modify_inputs([](Tensor &, Tensor &) {});
    ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
    EXPECT_TRUE(call.check_outputs());
    EXPECT_TRUE(call.check_untouched_outside_outputs());
}

// cos/sin tables already hold attn_factor (spec §5): the cache source must not scale again.
TEST(ApiSemantics, CacheSourceIgnoresAttnFactor) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    RopeCall call(small_case());  // cache built with attn_factor 1
    const Runner with_attn = [](const rope_params *params, rope_report *report) {
        rope_params p = *params;
        p.angles.attn_factor = 0.5f;
        return rope_dispatch(&p, report);
    };
    ASSERT_EQ(call.run(with_attn), ROPE_OK) << call.report().message;
    EXPECT_TRUE(call.check_outputs());
}

// An output whose head stride is 0 writes several heads to one place: in place, head 1 would
// read what head 0 wrote and be rotated twice. That is an output overlapping itself.
TEST(ApiSemantics, OutputOverlappingItselfIsRejected) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    for (const bool in_place : {true, false}) {
        SCOPED_TRACE(in_place ? "in place" : "out of place");
        CaseSpec c = small_case();
        c.k_heads = 0;
        c.memory = in_place ? Memory::InPlace : Memory::Separate;
        RopeCall call(c);
        const Runner zero_head_stride = [in_place](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            p.q_out.strides[2] = 0;
            if (in_place) {
                p.q = p.q_out;
            }
            return rope_dispatch(&p, report);
        };
        EXPECT_EQ(call.run(zero_head_stride), ROPE_ERR_OVERLAP) << call.report().kernel;
        EXPECT_TRUE(call.check_all_unchanged());
    }
}

// q holds no heads, k does: the call still rotates k (only a call where neither has any is a no-op).
TEST(ApiSemantics, KIsRotatedWhenQHasNoHeads) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    RopeCall whole(small_case());
    ASSERT_EQ(whole.run(dispatch_runner()), ROPE_OK) << whole.report().message;
    ASSERT_TRUE(whole.check_outputs());
    RopeCall k_only(small_case());
    const Runner no_q_heads = [](const rope_params *params, rope_report *report) {
        rope_params p = *params;
        p.q.sizes[2] = p.q_out.sizes[2] = 0;
        return rope_dispatch(&p, report);
    };
    ASSERT_EQ(k_only.run(no_q_heads), ROPE_OK) << k_only.report().message;
    EXPECT_TRUE(same_bits(k_only.k_out, whole.k_out)) << "k must be rotated as in the call where q has heads";
    EXPECT_TRUE(k_only.check_untouched_outside_outputs());
}

// A stride of q beyond int32 on one token or head axis (the dispatcher then runs the kernels slice
// by slice, k included): the results are bit for bit those of a compact copy of the same input,
// for a position table and for positions given as offsets (each slice of tokens then starts at its
// own position: the offset plus the index of its first token).
class HugeStrideTest : public ::testing::TestWithParam<int> {
protected:
    static void expect_same_bits_as_a_compact_copy(int axis, PositionMode mode);
};

TEST_P(HugeStrideTest, SameBitsAsACompactCopy) {
    expect_same_bits_as_a_compact_copy(GetParam(), PositionMode::Table);
}

TEST_P(HugeStrideTest, OffsetPositionsSameBitsAsACompactCopy) {
    for (const PositionMode mode : {PositionMode::ScalarOffset, PositionMode::BatchOffsets}) {
        SCOPED_TRACE(mode == PositionMode::ScalarOffset ? "scalar offset" : "batch offsets");
        expect_same_bits_as_a_compact_copy(GetParam(), mode);
    }
}

// The compact call of HugeStrideTest: the compat source, a 16-bit dtype if the build has one (a
// 2^31-element stride then spans 4 GiB, not 8), positions from a table or as offsets.
CaseSpec huge_stride_case(PositionMode mode, rope_index_type index_type) {
    CaseSpec c;
    c.source = ROPE_SOURCE_COMPAT;
    c.dtype = ROPE_DTYPE_F32;
    for (rope_dtype dtype : {ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
        if (missing_kernel_reason(c.style, c.source, dtype, 64).empty()) {
            c.dtype = dtype;
        }
    }
    c.batch = 2;
    c.seq = 3;
    c.q_heads = 2;
    c.k_heads = 3;  // compact, and more heads than q: slices along heads cover both counts
    c.head_dim = 64;
    c.positions = random_table(c, 0, 1000, index_type, 5);
    c.positions.mode = mode;
    c.positions.scalar_offset = 100;
    return c;
}

void HugeStrideTest::expect_same_bits_as_a_compact_copy(int axis, PositionMode mode) {
    const CaseSpec c = huge_stride_case(mode, ROPE_INDEX_INT32);
    ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, 64);
    RopeCall compact(c);
    ASSERT_EQ(compact.run(dispatch_runner()), ROPE_OK) << compact.report().message;
    ASSERT_TRUE(compact.check_outputs());

    // The same logical tensor with strides[axis] = 2^31 + 64 elements.
    int64_t strides[4] = {c.seq * c.q_heads * 64, c.q_heads * 64, 64, 1};
    strides[axis] = (int64_t{1} << 31) + 64;
    int64_t span = 1;
    for (int a = 0; a < 3; a++) {
        span += (std::array<int64_t, 3>{c.batch, c.seq, c.q_heads}[a] - 1) * strides[a];
    }
    span += 63;
    const auto element = static_cast<int64_t>(reference::dtype_size(c.dtype));
    SparseBuffer huge(static_cast<size_t>(span * element));
    if (huge.data() == nullptr) {
        GTEST_SKIP() << "cannot reserve " << span * element << " bytes of address space for the huge view";
    }
    compact.q_in.for_each_head([&](int64_t b, int64_t s, int64_t h) {
        for (int64_t d = 0; d < 64; d++) {
            const uint32_t bits = compact.q_in.bits(b, s, h, d);  // little-endian: low bytes first
            std::memcpy(huge.data() + element * (b * strides[0] + s * strides[1] + h * strides[2] + d), &bits,
                        static_cast<size_t>(element));
        }
    });
    // Through rope_dispatch, and through a plan (which runs such a call slice by slice too).
    for (const bool planned : {false, true}) {
        SCOPED_TRACE(planned ? "a plan" : "rope_dispatch");
        const Runner runner = planned ? plan_runner() : dispatch_runner();
        RopeCall sliced(c);  // its q_out starts as canary; its q is replaced by the huge view
        const Runner with_huge_q = [&](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            p.q.data = huge.data();
            std::memcpy(p.q.strides, strides, sizeof(strides));
            return runner(&p, report);
        };
        ASSERT_EQ(sliced.run(with_huge_q), ROPE_OK) << sliced.report().message;
        EXPECT_TRUE(same_bits(sliced.q_out, compact.q_out));
        EXPECT_TRUE(same_bits(sliced.k_out, compact.k_out));
    }
}

INSTANTIATE_TEST_SUITE_P(ApiSemantics, HugeStrideTest, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int> &info) {
                             return std::string(info.param == 0 ? "batch" : info.param == 1 ? "seq" : "heads");
                         });

// A position table of int64 entries whose stride along batch or seq is beyond int32 once counted
// in the int32 halves the kernels read (2^30 + 1 entries): the call is sliced along that axis,
// each slice reading its own positions, bit for bit those of the compact table.
TEST(ApiSemantics, Int64PositionStrideBeyondInt32SameBitsAsACompactTable) {
    const CaseSpec c = huge_stride_case(PositionMode::Table, ROPE_INDEX_INT64);
    ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, 64);
    RopeCall compact(c);
    ASSERT_EQ(compact.run(dispatch_runner()), ROPE_OK) << compact.report().message;
    ASSERT_TRUE(compact.check_outputs());

    const int64_t huge = (int64_t{1} << 30) + 1;
    SparseBuffer table(static_cast<size_t>((c.batch + c.seq) * huge) * sizeof(int64_t));
    if (table.data() == nullptr) {
        GTEST_SKIP() << "cannot reserve " << table.size() << " bytes of address space for the position table";
    }
    for (int axis = 0; axis < 2; axis++) {
        SCOPED_TRACE(axis == 0 ? "batch" : "seq");
        const int64_t strides[2] = {axis == 0 ? huge : 1, axis == 1 ? huge : 1};
        auto *positions = reinterpret_cast<int64_t *>(table.data());
        for (int64_t b = 0; b < c.batch; b++) {
            for (int64_t s = 0; s < c.seq; s++) {
                positions[b * strides[0] + s * strides[1]] = c.positions.values[static_cast<size_t>(b * c.seq + s)];
            }
        }
        RopeCall sliced(c);
        const Runner with_huge_table = [&](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            p.positions.data = positions;
            p.positions.strides[0] = strides[0], p.positions.strides[1] = strides[1];
            return rope_dispatch(&p, report);
        };
        ASSERT_EQ(sliced.run(with_huge_table), ROPE_OK) << sliced.report().message;
        EXPECT_TRUE(same_bits(sliced.q_out, compact.q_out));
        EXPECT_TRUE(same_bits(sliced.k_out, compact.k_out));
    }
}

// A position table's stride along an axis of one item is never stepped, so validation bounds it
// not at all: INT64_MAX there once overflowed as it was doubled for the int64 entries' words
// (UBSan, the asan preset, stops on that).
TEST(ApiSemantics, PositionStrideAlongAnAxisOfOneItemIsNeverStepped) {
    for (int axis = 0; axis < 2; axis++) {
        SCOPED_TRACE(axis == 0 ? "batch of one" : "one token a sequence");
        CaseSpec c = huge_stride_case(PositionMode::Table, ROPE_INDEX_INT64);
        ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, 64);
        (axis == 0 ? c.batch : c.seq) = 1;
        c.positions = random_table(c, 0, 1000, ROPE_INDEX_INT64, 6);
        RopeCall call(c);
        const Runner never_stepped = [axis](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            p.positions.strides[axis] = std::numeric_limits<int64_t>::max();
            return rope_dispatch(&p, report);
        };
        ASSERT_EQ(call.run(never_stepped), ROPE_OK) << call.report().message;
        EXPECT_TRUE(call.check_outputs());
    }
}

}  // namespace
}  // namespace ropegen::test
