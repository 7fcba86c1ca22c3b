// SPDX-License-Identifier: Apache-2.0
// One test per validation rule of rope_dispatch(): the exact status, a message that names the
// argument, the same answer from rope_query(), and not one byte of any buffer written (outputs
// start as a canary pattern). Plus the small API surface around it: rope_query, status strings,
// NULL and short reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "internal/enum_value.h"
#include "internal/validate.h"
#include "support/kernels.h"
#include "support/rope_case.h"
#include "support/sparse_buffer.h"

namespace ropegen::test {
namespace {

/// `message` contains `name` (the argument a failure must name).
::testing::AssertionResult mentions(const char *message, const std::string &name) {
    if (std::string(message).find(name) != std::string::npos) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "the message should name '" << name << "': \"" << message << "\"";
}

/// The elements from a view's first to its last, both included (a view with elements).
int64_t elements_spanned(const rope_tensor &t) {
    int64_t span = 1;
    for (int axis = 0; axis < 4; axis++) {
        span += (t.sizes[axis] - 1) * t.strides[axis];
    }
    return span;
}

constexpr int64_t kBatch = 2, kSeq = 3, kQHeads = 2, kKHeads = 1, kHeadDim = 64;

class Validation : public ::testing::Test {
public:  // the helpers below also serve free functions of this file
    /// A valid f32 call (half style, cache source, q and k, a position table) that each test
    /// breaks in one way.
    static CaseSpec valid_case() {
        CaseSpec c;
        c.batch = kBatch;
        c.seq = kSeq;
        c.q_heads = kQHeads;
        c.k_heads = kKHeads;
        c.head_dim = kHeadDim;
        c.positions = random_table(c, 0, 10, ROPE_INDEX_INT32, 1);
        c.cache_len = 16;
        return c;
    }

    Validation() : call_(valid_case()) {
        for (const Tensor *t : {&call_.q, &call_.k, &call_.q_out, &call_.k_out}) {
            snapshot_.add(*t);
        }
    }

    rope_params valid() const {
        return call_.params();
    }

    /// Records more buffers that must stay unchanged.
    void watch(const Tensor &tensor) {
        snapshot_.add(tensor);
    }

    /// `params` must fail with `status` and a message containing every one of `names`, leave
    /// every buffer as it was, and rope_query() must say the same.
    void expect_rejected(const rope_params &params, rope_status status, const std::vector<std::string> &names) const {
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_dispatch(&params, &report), status) << "message: " << report.message;
        EXPECT_EQ(report.status, status);
        for (const std::string &name : names) {
            EXPECT_TRUE(mentions(report.message, name));
        }
        EXPECT_STREQ(report.kernel, "") << "no kernel is named for a rejected call";
        EXPECT_TRUE(snapshot_.unchanged());
        rope_report query = rope_report_init();
        EXPECT_EQ(rope_query(&params, &query), status);
        EXPECT_STREQ(query.message, report.message);
    }

    /// A valid call: rope_query accepts it (UNSUPPORTED where this build lacks its kernel).
    void expect_accepted(const rope_params &params) const {
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_query(&params, &report), missing_kernel_reason(params).empty() ? ROPE_OK : ROPE_ERR_UNSUPPORTED)
            << report.message;
    }

    /// An output over a table in `memory` the call reads: refused, by rope_query first (a dispatch
    /// of a call wrongly accepted could read what it wrote), then as expect_rejected, with
    /// `memory` untouched.
    void expect_overlap_refused(const rope_params &params, const std::vector<std::string> &names,
                                const std::vector<float> &memory) const {
        const std::vector<float> before = memory;
        rope_report refused = rope_report_init();
        ASSERT_EQ(rope_query(&params, &refused), ROPE_ERR_OVERLAP) << refused.message;
        expect_rejected(params, ROPE_ERR_OVERLAP, names);
        EXPECT_EQ(memory, before);
    }

    /// A new int32 position table [batch][seq] for the call (kept alive by the fixture).
    const void *positions32(std::vector<int32_t> values) {
        tables32_.push_back(std::move(values));
        return tables32_.back().data();
    }
    const void *positions64(std::vector<int64_t> values) {
        tables64_.push_back(std::move(values));
        return tables64_.back().data();
    }

    RopeCall call_;
    Snapshot snapshot_;
    std::vector<std::vector<int32_t>> tables32_;
    std::vector<std::vector<int64_t>> tables64_;
};

// The baseline is valid, so every rejection below comes from the one thing its test broke.
TEST_F(Validation, BaselineIsAccepted) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    const rope_status status = call_.run(dispatch_runner());
    ASSERT_EQ(status, ROPE_OK) << call_.report().message;
    EXPECT_TRUE(call_.check_outputs());
}

// --- pointers ------------------------------------------------------------------------------------

TEST_F(Validation, NullParams) {
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(nullptr, &report), ROPE_ERR_NULL_POINTER);
    EXPECT_TRUE(mentions(report.message, "params"));
    EXPECT_EQ(rope_query(nullptr, &report), ROPE_ERR_NULL_POINTER);
}

TEST_F(Validation, NullQData) {
    rope_params p = valid();
    p.q.data = nullptr;
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"q.data"});
}

TEST_F(Validation, NullQOutData) {
    rope_params p = valid();
    p.q_out.data = nullptr;
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"q_out"});
}

TEST_F(Validation, KWithoutKOut) {
    rope_params p = valid();
    p.k_out = rope_tensor{};
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"k_out"});
}

TEST_F(Validation, NullCosCache) {
    rope_params p = valid();
    p.angles.cos_cache = nullptr;
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"cos_cache"});
}

TEST_F(Validation, NullSinCache) {
    rope_params p = valid();
    p.angles.sin_cache = nullptr;
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"sin_cache"});
}

TEST_F(Validation, CacheDtypeOtherThanF32OrTensorDtype) {
    rope_params p = valid();
    p.angles.cache_dtype = p.q.dtype == ROPE_DTYPE_BF16 ? ROPE_DTYPE_F16 : ROPE_DTYPE_BF16;
    expect_rejected(p, ROPE_ERR_DTYPE_MISMATCH, {"cache_dtype"});
}

TEST_F(Validation, UnknownCacheDtype) {
    rope_params p = valid();
    store_raw(p.angles.cache_dtype, 6);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"cache_dtype", "6"});
}

TEST_F(Validation, PositionTableWithoutData) {
    rope_params p = valid();
    p.positions.data = nullptr;
    expect_rejected(p, ROPE_ERR_NULL_POINTER, {"positions"});
}

// --- dtypes and shapes ---------------------------------------------------------------------------

TEST_F(Validation, DtypeMismatch) {
    rope_params p = valid();
    p.k.dtype = ROPE_DTYPE_BF16;
    expect_rejected(p, ROPE_ERR_DTYPE_MISMATCH, {"k.dtype"});
    p = valid();
    p.q_out.dtype = ROPE_DTYPE_F16;
    expect_rejected(p, ROPE_ERR_DTYPE_MISMATCH, {"q_out.dtype"});
}

TEST_F(Validation, OddHeadDim) {
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[3] = 63;
    }
    expect_rejected(p, ROPE_ERR_BAD_HEAD_DIM, {"head_dim", "63"});
}

TEST_F(Validation, ZeroHeadDim) {
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[3] = 0;
    }
    expect_rejected(p, ROPE_ERR_BAD_HEAD_DIM, {"head_dim"});
}

TEST_F(Validation, HeadDimOfTwoPow32) {  // even and positive, but beyond the kernels' int32
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[3] = int64_t{1} << 32;
        t->sizes[0] = t->sizes[1] = 1;  // a view of one head: no byte span overflows
        t->sizes[2] = 1;
    }
    expect_rejected(p, ROPE_ERR_BAD_HEAD_DIM, {"head_dim", "4294967296", "below 2^31"});
}

TEST_F(Validation, HeadDimDiffersBetweenQAndK) {
    rope_params p = valid();
    p.k.sizes[3] = p.k_out.sizes[3] = 32;
    expect_rejected(p, ROPE_ERR_BAD_HEAD_DIM, {"k.sizes[3]", "head_dim"});
}

TEST_F(Validation, RotaryDimOdd) {
    rope_params p = valid();
    p.rotary_dim = 31;
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_dim", "31"});
}

TEST_F(Validation, RotaryDimAboveHeadDim) {
    rope_params p = valid();
    p.rotary_dim = kHeadDim + 2;
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_dim"});
}

TEST_F(Validation, RotaryDimBelowTwo) {
    rope_params p = valid();
    p.rotary_dim = -2;  // even, so only the lower bound is broken (0 means head_dim)
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_dim"});
}

TEST_F(Validation, RotarySliceBeyondHeadDim) {
    rope_params p = valid();
    p.rotary_dim = 32;
    p.rotary_offset = 34;
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_offset"});
}

TEST_F(Validation, NegativeRotaryOffset) {
    rope_params p = valid();
    p.rotary_dim = 32;
    p.rotary_offset = -2;
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_offset"});
}

TEST_F(Validation, NegativeSizes) {
    for (int axis = 0; axis < 3; axis++) {
        SCOPED_TRACE(axis);
        rope_params p = valid();
        p.q.sizes[axis] = p.q_out.sizes[axis] = -1;
        expect_rejected(p, ROPE_ERR_BAD_SHAPE, {"sizes[" + std::to_string(axis) + "]"});
    }
}

TEST_F(Validation, BatchDiffersBetweenQAndK) {
    rope_params p = valid();
    p.k.sizes[0] = p.k_out.sizes[0] = 1;
    expect_rejected(p, ROPE_ERR_BAD_SHAPE, {"k.sizes[0]"});
}

TEST_F(Validation, SeqDiffersBetweenQAndK) {
    rope_params p = valid();
    p.k.sizes[1] = p.k_out.sizes[1] = 2;
    expect_rejected(p, ROPE_ERR_BAD_SHAPE, {"k.sizes[1]"});
}

TEST_F(Validation, OutputShapeDiffersFromInput) {
    rope_params p = valid();
    p.q_out.sizes[2] = kQHeads - 1;
    expect_rejected(p, ROPE_ERR_BAD_SHAPE, {"q_out.sizes[2]"});
}

// q alone, of `sizes` ([batch, seq, heads, head_dim]) and `strides`: a view far larger than
// memory, which validation must refuse before touching anything.
rope_params q_alone(rope_params p, const std::array<int64_t, 4> &sizes, const std::array<int64_t, 4> &strides) {
    for (rope_tensor *t : {&p.q, &p.q_out}) {
        std::copy(sizes.begin(), sizes.end(), t->sizes);
        std::copy(strides.begin(), strides.end(), t->strides);
    }
    p.k = p.k_out = rope_tensor{};
    p.positions = rope_positions{};
    return p;
}

constexpr int64_t k2Pow30 = int64_t{1} << 30;

// 2^30 items of 2^30 tokens of 2^30 heads of 128 lanes: 2^97 elements, rows broadcast.
TEST_F(Validation, ElementCountOverflows) {
    expect_rejected(q_alone(valid(), {k2Pow30, k2Pow30, k2Pow30, 128}, {0, 0, 128, 1}), ROPE_ERR_SIZE_OVERFLOW,
                    {"q (sizes [1073741824, 1073741824, 1073741824, 128], strides [0, 0, 128, 1])",
                     "the element count up to heads overflows 64 bits"});
}

// 2^26 items of 2^30 heads of 64 f32 lanes, dense: 2^62 elements fit in int64, their 2^64 bytes
// do not.
TEST_F(Validation, ByteCountOverflows) {
    expect_rejected(q_alone(valid(), {int64_t{1} << 26, 1, k2Pow30, 64}, {int64_t{1} << 36, 0, 64, 1}),
                    ROPE_ERR_SIZE_OVERFLOW,
                    {"q (sizes [67108864, 1, 1073741824, 64], strides [68719476736, 0, 64, 1])",
                     "the byte span of the view overflows 64 bits"});
}

/// q alone in place, of `sizes` with dense strides, the precise source (no tables): a view far
/// larger than memory, which rope_query accepts or refuses without touching it.
rope_params dense_q_in_place(rope_params p, const std::array<int64_t, 4> &sizes) {
    const int64_t heads = sizes[2], head_dim = sizes[3];
    p = q_alone(p, sizes, {sizes[1] * heads * head_dim, heads * head_dim, head_dim, 1});
    p.q_out = p.q;  // in place: views this large, two buffers apart, would overlap
    p.angles.source = ROPE_SOURCE_PRECISE;
    return p;
}

// A span of exactly INT64_MAX elements (two items INT64_MAX - 63 apart, 64 lanes): its byte count,
// span + 1 elements, must be found to overflow without computing span + 1 (UBSan's check).
TEST_F(Validation, SpanOfInt64Max) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    expect_rejected(q_alone(valid(), {2, 1, 1, 64}, {kMax - 63, 0, 64, 1}), ROPE_ERR_SIZE_OVERFLOW,
                    {"q (sizes [2, 1, 1, 64], strides [9223372036854775744, 0, 64, 1])",
                     "the byte span of the view overflows 64 bits"});
}

// Three items 2^62 elements apart: the element count (192) fits, the span (2^63) does not.
TEST_F(Validation, ElementSpanOverflows) {
    expect_rejected(q_alone(valid(), {3, 1, 1, 64}, {int64_t{1} << 62, 0, 0, 1}), ROPE_ERR_SIZE_OVERFLOW,
                    {"q (sizes [3, 1, 1, 64], strides [4611686018427387904, 0, 0, 1])",
                     "the element span up to batch overflows 64 bits"});
}

// Halide's extents are int32: a batch, seq or heads size of 2^31 is refused; heads of 2^31 - 1
// are accepted (a tensor may hold far more than 2^31 elements).
TEST_F(Validation, SizesOfTwoPow31) {
    const char *const axes[] = {"batch", "seq", "heads"};
    for (int axis = 0; axis < 3; axis++) {
        SCOPED_TRACE(axes[axis]);
        std::array<int64_t, 4> sizes{1, 1, 1, 2};
        sizes[axis] = int64_t{1} << 31;
        expect_rejected(dense_q_in_place(valid(), sizes), ROPE_ERR_BAD_SHAPE,
                        {"q.sizes[" + std::to_string(axis) + "] (" + axes[axis] + ")=2147483648", "below 2^31"});
    }
    expect_accepted(dense_q_in_place(valid(), {1, 1, (int64_t{1} << 31) - 1, 2}));
}

// The kernels' loops count a call's tokens (batch x seq) with 32-bit integers: at most 2^30.
TEST_F(Validation, TokensOfACall) {
    constexpr int64_t k2Pow15 = int64_t{1} << 15;
    for (const auto &[batch, seq] : {std::pair{k2Pow30, int64_t{1}}, std::pair{int64_t{1}, k2Pow30}, std::pair{k2Pow15, k2Pow15}}) {
        SCOPED_TRACE(std::to_string(batch) + " x " + std::to_string(seq));
        expect_accepted(dense_q_in_place(valid(), {batch, seq, 1, 2}));
    }
    expect_rejected(dense_q_in_place(valid(), {1, k2Pow30 + 1, 1, 2}), ROPE_ERR_BAD_SHAPE,
                    {"q.sizes[0] x q.sizes[1] (batch x seq)=1 x 1073741825", "at most 2^30"});
    expect_rejected(dense_q_in_place(valid(), {k2Pow15 + 1, k2Pow15, 1, 2}), ROPE_ERR_BAD_SHAPE,
                    {"(batch x seq)=32769 x 32768"});
}

TEST_F(Validation, HeadDimStrideNotOne) {
    rope_params p = valid();
    p.k.strides[3] = 2;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"k.strides[3]"});
}

TEST_F(Validation, NegativeStride) {
    rope_params p = valid();
    p.q_out.strides[1] = -p.q_out.strides[1];
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"q_out.strides[1]"});
}

// The boundary of the stride rule: -1 is the first negative stride.
TEST_F(Validation, StrideOfMinusOne) {
    rope_params p = valid();
    p.q.strides[1] = -1;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"q.strides[1] (seq)=-1", ">= 0"});
}

// The lane axis must be contiguous as soon as it holds two lanes: one pair, two lanes apart.
TEST_F(Validation, HeadDimStrideNotOneWithOnePair) {
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[3] = 2;
    }
    p.k.strides[3] = 2;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"k.strides[3] (head_dim)=2", "contiguous"});
}

// 2^30 items of 2^30 tokens of 4 heads of 4 lanes, all broadcast from one head (strides 0): the
// span is 3 elements, the element count 2^64 overflows (at the lanes). Refused as an overflow of
// q, not later as q_out overlapping itself.
TEST_F(Validation, ElementCountOverflowsWithABroadcastAxis) {
    expect_rejected(q_alone(valid(), {k2Pow30, k2Pow30, 4, 4}, {0, 0, 0, 1}), ROPE_ERR_SIZE_OVERFLOW,
                    {"q (sizes [1073741824, 1073741824, 4, 4]", "the element count up to head_dim overflows 64 bits"});
}

// A cache row stride must stay below 2^31 (the kernels index the tables with int32).
TEST_F(Validation, CacheRowStrideOfTwoPow31) {
    rope_params p = valid();
    p.positions.data = positions32(std::vector<int32_t>(kBatch * kSeq, 0));  // row 0 only
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    p.angles.cache_len = 1;
    p.angles.cache_row_stride = int64_t{1} << 31;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"angles.cache_row_stride=2147483648", "2^31"});
}

TEST_F(Validation, CacheRowStrideBelowPairs) {
    rope_params p = valid();
    p.angles.cache_row_stride = kHeadDim / 2 - 1;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE, {"cache_row_stride"});
}

// --- positions (checked before any kernel runs: the bad one is the last token) ----------------------

TEST_F(Validation, NegativePositionInt32Table) {
    rope_params p = valid();
    std::vector<int32_t> table(kBatch * kSeq, 1);
    table.back() = -1;
    p.positions.data = positions32(table);
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions", "-1"});
}

TEST_F(Validation, NegativePositionInt64Table) {
    rope_params p = valid();
    std::vector<int64_t> table(kBatch * kSeq, 1);
    table.back() = std::numeric_limits<int64_t>::min();
    p.positions.index_type = ROPE_INDEX_INT64;
    p.positions.data = positions64(table);
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions"});
}

TEST_F(Validation, NegativeScalarOffset) {
    rope_params p = valid();
    p.positions = rope_positions{};
    p.positions.kind = ROPE_POSITIONS_OFFSET;
    p.positions.offset = -1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions.offset=-1 is negative"});
}

TEST_F(Validation, NegativeBatchOffset) {
    rope_params p = valid();
    p.positions = rope_positions{};
    p.positions.kind = ROPE_POSITIONS_OFFSET;
    p.positions.index_type = ROPE_INDEX_INT64;
    p.positions.data = positions64({4, -3});
    p.positions.strides[0] = 1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions"});
}

// Strides whose last entry lies beyond 64-bit byte offsets: reading it would wrap around memory.
TEST_F(Validation, PositionStridesWhoseLastEntryOverflowsByteOffsets) {
    rope_params offsets = valid();
    offsets.positions = rope_positions{};
    offsets.positions.kind = ROPE_POSITIONS_OFFSET;
    offsets.positions.data = positions32({1, 1});
    offsets.positions.strides[0] = int64_t{1} << 61;  // item 1 at byte 2^63
    expect_rejected(offsets, ROPE_ERR_SIZE_OVERFLOW, {"positions.strides", "2305843009213693952"});

    rope_params table = valid();
    table.positions.strides[1] = int64_t{1} << 62;  // token 2 at element 2^63
    expect_rejected(table, ROPE_ERR_SIZE_OVERFLOW, {"positions.strides", "4611686018427387904"});
}

TEST_F(Validation, PositionAtCacheLen) {
    rope_params p = valid();
    std::vector<int32_t> table(kBatch * kSeq, 0);
    table.back() = static_cast<int32_t>(p.angles.cache_len);  // one past the last row
    p.positions.data = positions32(table);
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"cache_len"});
}

// offset + s reaches cache_len on the last token only.
TEST_F(Validation, OffsetRunsPastCacheLen) {
    rope_params p = valid();
    p.positions = rope_positions{};
    p.positions.offset = p.angles.cache_len - kSeq + 1;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"cache_len"});
    p.positions.offset = p.angles.cache_len - kSeq;  // the last token reads the last row: valid
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
}

// Random tables, a few entries out of range, against the rule applied entry by entry: the check
// bounds the whole table first and walks it only to name the first bad entry, which must be the
// one the message gives. Strides vary (0, padded, [s][b] order); the storage between the entries
// holds values out of range, so reading anything but the entries is caught too.
TEST_F(Validation, PositionChecksAgreeWithTheRuleEntryByEntry) {
    std::mt19937_64 rng(7);
    auto below = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    const int64_t limit = valid().angles.cache_len;
    for (int trial = 0; trial < 2000; trial++) {
        const bool table = trial % 2 == 0, wide = trial % 4 >= 2;
        const int64_t rows = table ? kSeq : 1;  // entries per batch item: [b][s], or one offset [b]
        const int64_t last_token = table ? 0 : kSeq - 1;  // an offset covers its sequence's tokens
        const int64_t batch_strides[] = {0, rows, rows + 2, 1}, row_strides[] = {0, 1, kBatch};
        const int64_t batch_stride = batch_strides[below(4)];
        const int64_t row_stride = table ? row_strides[below(3)] : 0;
        std::vector<int64_t> storage(static_cast<size_t>((kBatch - 1) * batch_stride + (rows - 1) * row_stride + 1),
                                     limit + 5);
        auto at = [&](int64_t b, int64_t s) -> int64_t & {
            return storage[static_cast<size_t>(b * batch_stride + s * row_stride)];
        };
        for (int64_t b = 0; b < kBatch; b++) {
            for (int64_t s = 0; s < rows; s++) {
                const bool stray = below(4) == 0;
                const int64_t near_edge = below(5) - 2 + (below(2) ? limit - last_token : 0);
                at(b, s) = stray ? near_edge : below(limit - last_token);
            }
        }
        std::string first_bad;  // as the message names it
        for (int64_t b = 0; b < kBatch && first_bad.empty(); b++) {
            for (int64_t s = 0; s < rows && first_bad.empty(); s++) {
                if (at(b, s) < 0 || at(b, s) + last_token >= limit) {
                    first_bad = table ? "[" + std::to_string(b) + "][" + std::to_string(s) + "]"
                                      : " (offsets)[" + std::to_string(b) + "]";
                }
            }
        }
        rope_params p = valid();
        p.positions = rope_positions{};
        p.positions.kind = table ? ROPE_POSITIONS_TABLE : ROPE_POSITIONS_OFFSET;
        p.positions.index_type = wide ? ROPE_INDEX_INT64 : ROPE_INDEX_INT32;
        p.positions.data = wide ? positions64(storage) : positions32(std::vector<int32_t>(storage.begin(), storage.end()));
        p.positions.strides[0] = batch_stride;
        p.positions.strides[1] = row_stride;
        SCOPED_TRACE("trial " + std::to_string(trial));
        if (first_bad.empty()) {
            rope_report report = rope_report_init();
            EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
            continue;
        }
        expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions.data" + first_bad});
    }
}

TEST_F(Validation, CacheLenNotPositive) {
    for (int64_t cache_len : {0, -1}) {
        rope_params p = valid();
        p.positions = rope_positions{};
        p.angles.cache_len = cache_len;
        expect_rejected(p, ROPE_ERR_BAD_VALUE, {"cache_len"});
    }
}

TEST_F(Validation, NegativePositionSeqStride) {
    rope_params p = valid();
    p.positions.data = static_cast<const int32_t *>(positions32(std::vector<int32_t>(2 * kBatch * kSeq, 0))) + kBatch * kSeq;
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = -1;
    expect_rejected(p, ROPE_ERR_BAD_STRIDE,
                    {"positions.strides=[3, -1]", ">= 0"});
}

// cache_len = 2^31 - 1, the largest cache: its limit is cache_len, not 2^31, so position
// 2^31 - 1 is one past the last row.
TEST_F(Validation, PositionAtACacheLenOfTwoPow31MinusOne) {
    rope_params p = valid();
    std::vector<int32_t> table(kBatch * kSeq, 0);
    table.back() = std::numeric_limits<int32_t>::max();
    p.positions.data = positions32(table);
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    p.angles.cache_len = std::numeric_limits<int32_t>::max();
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_query(&p, &report), ROPE_ERR_POSITION_OUT_OF_RANGE) << report.message;  // no kernel reads the row
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions.data[1][2]", "positions must be < 2147483647", "cache_len"});
}

// Computed sources: an int64 position beyond int32 must be rejected or rotated by its true value,
// never by a truncated one (2^32 + 5 read as 5).
TEST(ValidationLargePositions, Int64PositionBeyondInt32) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_PRECISE, ROPE_DTYPE_F32, 64);
    CaseSpec c;
    c.source = ROPE_SOURCE_PRECISE;
    c.batch = 1;
    c.seq = 2;
    c.q_heads = 1;
    c.k_heads = 0;
    c.positions.mode = PositionMode::Table;
    c.positions.index_type = ROPE_INDEX_INT64;
    c.positions.values = {(int64_t{1} << 32) + 5, 7};
    RopeCall call(c);
    const rope_status status = call.run(dispatch_runner());
    if (status == ROPE_OK) {
        EXPECT_TRUE(call.check_outputs());
    } else {
        EXPECT_EQ(status, ROPE_ERR_POSITION_OUT_OF_RANGE) << call.report().message;
        EXPECT_TRUE(call.check_all_unchanged());
    }
}

// --- aliasing ------------------------------------------------------------------------------------

// q_out is q shifted by one element: each output overwrites the input of its neighbour.
TEST_F(Validation, QOutShiftedByOneElementOverlapsQ) {
    const Tensor buffer = Tensor::make(ROPE_DTYPE_F32, {kBatch, kSeq, kQHeads, kHeadDim}, Layout::BSHD, 1);
    watch(buffer);
    rope_params p = valid();
    p.q = buffer.view(buffer.sizes(), 0, buffer.strides()).rope();
    p.q_out = buffer.view(buffer.sizes(), 1, buffer.strides()).rope();
    expect_rejected(p, ROPE_ERR_OVERLAP, {"q_out", "q"});
}

// Same data pointer, same footprint, other strides (BSHD read, SBHD written): token (b, s) would
// land on another token's lanes, so this is not "exactly its input".
TEST_F(Validation, QOutSameDataOtherStridesOverlapsQ) {
    rope_params p = valid();
    p.q_out = p.q;
    p.q_out.strides[0] = kQHeads * kHeadDim;
    p.q_out.strides[1] = kBatch * kQHeads * kHeadDim;
    expect_rejected(p, ROPE_ERR_OVERLAP, {"q_out"});
}

TEST_F(Validation, QOutOverlapsKOut) {
    rope_params p = valid();
    p.k_out.data = p.q_out.data;
    p.k_out.strides[0] = p.q_out.strides[0];
    p.k_out.strides[1] = p.q_out.strides[1];
    p.k_out.strides[2] = p.q_out.strides[2];
    expect_rejected(p, ROPE_ERR_OVERLAP, {"k_out"});
}

// An output over the positions table: the kernels would read positions the call had already
// overwritten with rotated values (a crash when they are read as cache rows). One byte apart
// is fine.
TEST_F(Validation, QOutOverlapsThePositionTable) {
    const size_t q_elements = kBatch * kSeq * kQHeads * kHeadDim;
    std::vector<float> memory(q_elements + kBatch * kSeq, 0.0f);  // zeros: valid int32 positions too
    rope_params p = valid();
    p.q_out.data = memory.data();
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    p.positions.data = memory.data() + q_elements - 1;  // the last element of q_out
    expect_overlap_refused(p, {"q_out", "positions.data"}, memory);

    p.positions.data = memory.data() + q_elements;
    expect_accepted(p);
}

// The same for the other tables a call reads.
TEST_F(Validation, KOutOverlapsTheCosCache) {
    rope_params p = valid();
    p.angles.cos_cache = p.k_out.data;  // validation reads no cache value
    expect_rejected(p, ROPE_ERR_OVERLAP, {"k_out (bytes [", ") overlaps angles.cos_cache (bytes ["});
}

// A position table that ends just before q_out is disjoint from it; one entry further, its last
// entry is q_out's first element.
TEST_F(Validation, PositionTableEndingAtQOut) {
    rope_params p = valid();
    const int64_t entries = kBatch * kSeq;
    std::vector<float> memory(static_cast<size_t>(entries + 1 + elements_spanned(p.q_out)), 0.0f);  // zeros: positions 0
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    p.positions.data = memory.data();
    p.q_out.data = memory.data() + entries;
    expect_accepted(p);

    p.positions.data = memory.data() + 1;
    expect_overlap_refused(p, {"q_out", "positions.data"}, memory);
}

// The other tables an output must not share a byte with: the sin table, and the last row of a
// cache (its pairs after the first) with an output just behind that row being fine.
TEST_F(Validation, KOutOverlapsTheSinCacheOrTheLastCacheRow) {
    rope_params p = valid();
    p.angles.sin_cache = p.k_out.data;
    expect_rejected(p, ROPE_ERR_OVERLAP, {"k_out", "angles.sin_cache"});

    p = valid();
    const int64_t pairs = kHeadDim / 2, table = p.angles.cache_len * pairs;
    ASSERT_EQ(p.angles.cache_row_stride == 0 ? pairs : p.angles.cache_row_stride, pairs);
    std::vector<float> memory(static_cast<size_t>(table + elements_spanned(p.k_out)), 0.0f);
    p.angles.cos_cache = memory.data();
    p.k_out.data = memory.data() + table;  // just after the last row
    expect_accepted(p);
    p.k_out.data = memory.data() + table - pairs + 1;  // the last row's second pair
    expect_overlap_refused(p, {"k_out", "angles.cos_cache"}, memory);
}

// cu_seqlens is read by the kernels too: an output over its last entry is refused.
TEST_F(Validation, QOutOverlapsCuSeqlens) {
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[0] = 1;  // packed: [1, total_tokens, heads, head_dim]
    }
    p.positions = rope_positions{};
    const int64_t span = elements_spanned(p.q_out);
    std::vector<float> memory(static_cast<size_t>(span + 2), 0.0f);
    const int32_t cu_seqlens[2] = {0, static_cast<int32_t>(kSeq)};
    p.q_out.data = memory.data();
    p.varlen.num_seqs = 1;
    auto seqlens_at = [&](int64_t at) {
        std::memcpy(memory.data() + at, cu_seqlens, sizeof(cu_seqlens));
        p.varlen.cu_seqlens = memory.data() + at;
    };
    seqlens_at(span);  // just after q_out
    expect_accepted(p);
    seqlens_at(span - 1);  // over its last element
    expect_overlap_refused(p, {"q_out", "varlen.cu_seqlens"}, memory);
}

// q_out 18 bytes (4.5 f32 elements) after q, tokens 8 elements apart: the output straddles the
// gap after q's token 0 and its second token begins with the last 2 bytes of q's token 1.
TEST_F(Validation, QOutHalfAnElementAfterQOverlapsIt) {
    const Tensor buffer = Tensor::make(ROPE_DTYPE_F32, {1, 1, 1, 32});
    watch(buffer);
    const Sizes sizes{1, 2, 1, 4};
    const Sizes strides{16, 8, 4, 1};
    rope_params p = valid();
    p.q = buffer.view(sizes, 0, strides).rope();
    p.q_out = p.q;
    p.q_out.data = static_cast<uint8_t *>(p.q.data) + 18;
    p.k = p.k_out = rope_tensor{};
    p.positions = rope_positions{};
    // The message gives both views' bytes, first and last.
    const auto bytes = [](const rope_tensor &t) {
        std::ostringstream text;
        text << "(bytes [" << t.data << ", "
             << static_cast<void *>(static_cast<uint8_t *>(t.data) + elements_spanned(t) * sizeof(float) - 1) << "])";
        return text.str();
    };
    const std::string q_bytes = "q " + bytes(p.q), q_out_bytes = "q_out " + bytes(p.q_out) + " partially overlaps ";
    expect_rejected(p, ROPE_ERR_OVERLAP, {q_out_bytes + q_bytes, "exactly its input"});
}

TEST_F(Validation, KOutOverlapsQ) {
    rope_params p = valid();
    p.k_out.data = p.q.data;
    p.k_out.strides[0] = p.q.strides[0];
    p.k_out.strides[1] = p.q.strides[1];
    p.k_out.strides[2] = p.q.strides[2];
    expect_rejected(p, ROPE_ERR_OVERLAP, {"k_out"});
}

// SBHD views of one [seq, batch+1, heads, D] buffer, the output one batch item further: output
// item b is input item b+1. Both views have identical strides and sit in one buffer.
TEST_F(Validation, QOutShiftedByOneBatchItemInSbhdOverlapsQ) {
    const Tensor buffer = Tensor::make(ROPE_DTYPE_F32, {kBatch + 1, kSeq, kQHeads, kHeadDim}, Layout::SBHD);
    watch(buffer);
    const Sizes sizes{kBatch, kSeq, kQHeads, kHeadDim};
    rope_params p = valid();
    p.q = buffer.view(sizes, 0, buffer.strides()).rope();
    p.q_out = buffer.view(sizes, buffer.strides()[0], buffer.strides()).rope();
    expect_rejected(p, ROPE_ERR_OVERLAP, {"q_out"});
}

// A batch stride that is not a multiple of the token stride: the shifted output's batch 0,
// token 1 lands on the input's batch 1, token 0.
TEST_F(Validation, OverlapThroughAnUnalignedBatchStride) {
    // One head of 4 lanes; token stride 8, batch stride 12: input elements {0..3, 8..11} and
    // {12..15, 20..23}; the output (4 elements later) {4..7, 12..15} and {16..19, 24..27}.
    const Tensor buffer = Tensor::make(ROPE_DTYPE_F32, {1, 1, 1, 32});
    watch(buffer);
    const Sizes sizes{2, 2, 1, 4};
    const Sizes strides{12, 8, 4, 1};
    rope_params p = valid();
    p.q = buffer.view(sizes, 0, strides).rope();
    p.q_out = buffer.view(sizes, 4, strides).rope();
    p.k = p.k_out = rope_tensor{};
    p.positions = rope_positions{};
    expect_rejected(p, ROPE_ERR_OVERLAP, {"q_out"});
}

// Packed QKV: q and k are disjoint head ranges of one buffer, so rotating them in place is valid.
TEST_F(Validation, PackedQkvViewsAreNotAnOverlap) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    CaseSpec c = valid_case();
    c.memory = Memory::PackedQkvInPlace;
    expect_correct(c, dispatch_runner());
}

// In place, an output may describe an axis of one item with another stride than its input (the
// stride is never stepped): a decode step's q seen as BSHD, its output as BHSD, say.
TEST_F(Validation, InPlaceOutputsMayGiveAnAxisOfOneItemAnotherStride) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    CaseSpec c = valid_case();
    c.seq = 1;
    c.positions = random_table(c, 0, 10, ROPE_INDEX_INT32, 1);
    c.memory = Memory::InPlace;
    expect_correct(c, [](const rope_params *params, rope_report *report) {
        rope_params p = *params;
        p.q_out.strides[1] = p.q.strides[2];
        p.k_out.strides[1] = p.k.strides[2];
        return rope_dispatch(&p, report);
    });
}

// GPT-NeoX's fused QKV ([B][S][H][3D]): q and k are lanes [0, D) and [D, 2D) of each head's slot,
// interleaved within every token, so rotating them in place is valid. One element closer, they
// share elements.
TEST_F(Validation, PerHeadQkvViewsAreNotAnOverlap) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    CaseSpec c = valid_case();
    c.memory = Memory::PerHeadQkvInPlace;
    c.k_heads = c.q_heads;
    expect_correct(c, dispatch_runner());
    RopeCall call(c);
    rope_params p = call.params();
    p.k.data = static_cast<float *>(p.k.data) - 1;
    p.k_out = p.k;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&p, &report), ROPE_ERR_OVERLAP) << report.message;
    EXPECT_TRUE(mentions(report.message, "q_out")) << report.message;
    EXPECT_TRUE(mentions(report.message, "partially overlaps k")) << report.message;
}

// Views too large to exist, with the token lattice of packed views and 2^15 x 2^15 tokens (the
// most a call takes): one bf16 lane pair per token, 4 elements apart, so an output 2 elements
// further is disjoint and one 1 element further overlaps. Decided exactly without walking an axis.
TEST(ValidationHugeLattice, DisjointAndOverlappingViewsOfTwoPow30Tokens) {
    static uint16_t storage[16];  // never touched: a query reads no tensor data
    const auto view = [](int64_t offset) {
        rope_tensor t{};
        t.data = storage + offset;
        t.dtype = ROPE_DTYPE_BF16;
        const int64_t sizes[4] = {int64_t{1} << 15, int64_t{1} << 15, 1, 2};
        const int64_t strides[4] = {int64_t{1} << 17, 4, 4, 1};
        std::memcpy(t.sizes, sizes, sizeof(sizes));
        std::memcpy(t.strides, strides, sizeof(strides));
        return t;
    };
    rope_params p = rope_params_init();
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.q = view(0);
    // Validation comes before the kernel search: a valid call is OK, or UNSUPPORTED in a build
    // without a bf16 any-head_dim kernel.
    const rope_status valid = missing_kernel_reason(p).empty() ? ROPE_OK : ROPE_ERR_UNSUPPORTED;
    for (const auto &[offset, expected] : {std::pair{2, valid}, std::pair{1, ROPE_ERR_OVERLAP}, std::pair{6, valid}}) {
        p.q_out = view(offset);
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_query(&p, &report), expected) << "q_out " << offset << " elements after q: " << report.message;
    }
}

// The lattice test of the validation (db*sb + ds*ss strictly between lo and hi, |db| < nb,
// |ds| < ns) against a walk over every point, on small random instances: zero strides, strides
// that divide each other and ones that do not, intervals around, inside and beyond the lattice.
TEST(ValidationHugeLattice, LatticeTestMatchesAWalkOverEveryPoint) {
    std::mt19937_64 random(20261126);
    const auto draw = [&](int64_t low, int64_t high) {
        return std::uniform_int_distribution<int64_t>(low, high)(random);
    };
    for (int i = 0; i < 200000; i++) {
        const int64_t sb = draw(0, 40), nb = draw(1, 9), ss = draw(0, 40), ns = draw(1, 9);
        const int64_t lo = draw(-500, 500), hi = lo + draw(0, 60);
        bool meets = false;
        for (int64_t db = 1 - nb; db < nb && !meets; db++) {
            for (int64_t ds = 1 - ns; ds < ns && !meets; ds++) {
                meets = lo < db * sb + ds * ss && db * sb + ds * ss < hi;
            }
        }
        ASSERT_EQ(token_lattice_meets(sb, nb, ss, ns, lo, hi), meets)
            << "sb=" << sb << " nb=" << nb << " ss=" << ss << " ns=" << ns << " lo=" << lo << " hi=" << hi;
    }
}

// Sizes of 2^30 and strides near the limits, where the answers are known: every even value in
// range is a point, no odd one is; nothing lies beyond the largest point.
TEST(ValidationHugeLattice, LatticeTestAtTwoPow30Sizes) {
    const int64_t sb = int64_t{1} << 31, nb = int64_t{1} << 30, ss = 2, ns = int64_t{1} << 30;
    const int64_t largest = sb * (nb - 1) + ss * (ns - 1);
    EXPECT_TRUE(token_lattice_meets(sb, nb, ss, ns, 4095, 4097));
    EXPECT_FALSE(token_lattice_meets(sb, nb, ss, ns, 4096, 4098));
    EXPECT_TRUE(token_lattice_meets(sb, nb, ss, ns, -largest - 1, -largest + 1));
    EXPECT_TRUE(token_lattice_meets(sb, nb, ss, ns, largest - 1, largest + 1));
    EXPECT_FALSE(token_lattice_meets(sb, nb, ss, ns, largest, std::numeric_limits<int64_t>::max()));
    EXPECT_FALSE(token_lattice_meets(sb, nb, ss, ns, std::numeric_limits<int64_t>::min(), -largest));
    // Strides with no common factor: every integer is a point once both axes are long enough.
    EXPECT_TRUE(token_lattice_meets(1000003, nb, 999983, ns, 12345, 12347));
}

// An output that writes an element twice is rejected (spec §4). On small random views of every
// axis order, repeated strides and strides of 0 among them: an accepted q_out maps every element
// to its own address (a walk over all of them), and the verdict is the rule validation states,
// evaluated here pairwise (ordered by stride, ties by index, each stride above the span of the
// axes before it), whatever order validation takes the axes in.
TEST(ValidationSelfOverlap, AnAcceptedOutputWritesEachElementOnce) {
    std::mt19937_64 random(20261127);
    const auto draw = [&](int64_t low, int64_t high) {
        return std::uniform_int_distribution<int64_t>(low, high)(random);
    };
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 20000; i++) {
        const int64_t sizes[4] = {draw(1, 3), draw(1, 3), draw(1, 3), 2 * draw(1, 2)};
        const int64_t strides[4] = {draw(0, 12), draw(0, 12), draw(0, 12), 1};
        bool rule_holds = true;
        for (int axis = 0; axis < 4; axis++) {
            int64_t inner_span = 0;
            for (int other = 0; other < 4; other++) {
                const bool before = strides[other] < strides[axis] || (strides[other] == strides[axis] && other < axis);
                inner_span += before ? (sizes[other] - 1) * strides[other] : 0;
            }
            rule_holds = rule_holds && (sizes[axis] == 1 || strides[axis] > inner_span);
        }
        std::vector<int64_t> offsets;
        for (int64_t b = 0; b < sizes[0]; b++)
            for (int64_t s = 0; s < sizes[1]; s++)
                for (int64_t h = 0; h < sizes[2]; h++)
                    for (int64_t l = 0; l < sizes[3]; l++)
                        offsets.push_back(b * strides[0] + s * strides[1] + h * strides[2] + l * strides[3]);
        std::vector<float> in(offsets.size()), out(*std::max_element(offsets.begin(), offsets.end()) + 1);
        rope_params p = rope_params_init();
        p.q.data = in.data();
        p.q_out.data = out.data();
        for (int axis = 0; axis < 4; axis++) {
            p.q.sizes[axis] = p.q_out.sizes[axis] = sizes[axis];
            p.q.strides[axis] = axis == 3 ? 1 : (axis == 2 ? sizes[3] : (axis == 1 ? sizes[2] * sizes[3] : sizes[1] * sizes[2] * sizes[3]));
            p.q_out.strides[axis] = strides[axis];
        }
        p.angles.source = ROPE_SOURCE_PRECISE;  // no tables; positions are the scalar offset 0 + s
        rope_report report = rope_report_init();
        const rope_status status = rope_query(&p, &report);
        const std::string context = "sizes [" + std::to_string(sizes[0]) + ", " + std::to_string(sizes[1]) + ", " +
                                    std::to_string(sizes[2]) + ", " + std::to_string(sizes[3]) + "] strides [" +
                                    std::to_string(strides[0]) + ", " + std::to_string(strides[1]) + ", " +
                                    std::to_string(strides[2]) + ", 1]: " + report.message;
        if (rule_holds) {
            ASSERT_TRUE(status == ROPE_OK || status == ROPE_ERR_UNSUPPORTED) << context;
            std::sort(offsets.begin(), offsets.end());
            ASSERT_TRUE(std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end()) << context;
            accepted++;
        } else {
            ASSERT_EQ(status, ROPE_ERR_OVERLAP) << context;
            ASSERT_TRUE(mentions(report.message, "q_out overlaps itself")) << context;
            rejected++;
        }
    }
    EXPECT_GT(accepted, 1000);  // both verdicts are exercised
    EXPECT_GT(rejected, 1000);
}

// An output and an input of one buffer (q_out and q): on small random views whose heads sit in
// slots of one stride, interleaved within tokens (GPT-NeoX's fused QKV) or not, with token strides
// that are multiples of that stride or not, an accepted pair shares no element (a walk over all of
// them), and a pair whose lanes lie apart in every slot is accepted.
TEST(ValidationPairOverlap, AnAcceptedOutputSharesNoElementWithAnInput) {
    std::mt19937_64 random(20261130);
    const auto draw = [&](int64_t low, int64_t high) {
        return std::uniform_int_distribution<int64_t>(low, high)(random);
    };
    constexpr int64_t kBase = 512;  // both views start here or within 3 slots of it
    std::vector<float> memory(4096);
    int accepted = 0, rejected = 0, lanes_apart = 0;
    for (int i = 0; i < 20000; i++) {
        const int64_t lanes = 2 * draw(1, 3), slot = lanes + draw(0, 2 * lanes), delta = draw(-3 * slot, 3 * slot);
        const int64_t sizes[4] = {draw(1, 3), draw(1, 3), draw(1, 3), lanes};
        // Token strides over the heads' slots: one more slot now and then, one element more sometimes.
        const auto strides_of = [&]() -> std::array<int64_t, 4> {
            const int64_t seq = slot * (sizes[2] + draw(0, 1)) + (draw(0, 7) == 0 ? 1 : 0);
            return {seq * sizes[1] + slot * draw(0, 1), seq, slot, 1};
        };
        const std::array<int64_t, 4> out_strides = strides_of(), in_strides = draw(0, 1) ? out_strides : strides_of();
        const auto elements = [&](int64_t start, const std::array<int64_t, 4> &strides) {
            std::vector<int64_t> at;
            for (int64_t b = 0; b < sizes[0]; b++)
                for (int64_t s = 0; s < sizes[1]; s++)
                    for (int64_t h = 0; h < sizes[2]; h++)
                        for (int64_t l = 0; l < sizes[3]; l++)
                            at.push_back(start + b * strides[0] + s * strides[1] + h * strides[2] + l);
            std::sort(at.begin(), at.end());
            return at;
        };
        const std::vector<int64_t> out = elements(kBase + delta, out_strides), in = elements(kBase, in_strides);
        std::vector<int64_t> shared;
        std::set_intersection(out.begin(), out.end(), in.begin(), in.end(), std::back_inserter(shared));
        rope_params p = rope_params_init();
        p.q.data = memory.data() + kBase;
        p.q_out.data = memory.data() + kBase + delta;
        for (int axis = 0; axis < 4; axis++) {
            p.q.sizes[axis] = p.q_out.sizes[axis] = sizes[axis];
            p.q.strides[axis] = in_strides[axis];
            p.q_out.strides[axis] = out_strides[axis];
        }
        p.angles.source = ROPE_SOURCE_PRECISE;  // no tables; positions are the scalar offset 0 + s
        rope_report report = rope_report_init();
        const rope_status status = rope_query(&p, &report);
        const auto text = [](const std::array<int64_t, 4> &strides) {
            return "[" + std::to_string(strides[0]) + ", " + std::to_string(strides[1]) + ", " + std::to_string(strides[2]) + ", 1]";
        };
        const std::string context = "sizes [" + std::to_string(sizes[0]) + ", " + std::to_string(sizes[1]) + ", " +
                                    std::to_string(sizes[2]) + ", " + std::to_string(lanes) + "], q_out " +
                                    std::to_string(delta) + " elements after q, strides " + text(out_strides) + " and " +
                                    text(in_strides) + ": " + report.message;
        const bool out_once = std::adjacent_find(out.begin(), out.end()) == out.end();
        const int64_t r = (delta % slot + slot) % slot;
        const bool steps_in_slots = std::all_of(out_strides.begin(), out_strides.end() - 1, [&](int64_t v) { return v % slot == 0; }) &&
                                    std::all_of(in_strides.begin(), in_strides.end() - 1, [&](int64_t v) { return v % slot == 0; });
        // In place: the same elements (strides along axes of one item may differ).
        const bool in_place = delta == 0 && out == in && out_once;
        if (status == ROPE_OK || status == ROPE_ERR_UNSUPPORTED) {
            ASSERT_TRUE((shared.empty() || in_place) && out_once) << context;
            accepted++;
        } else {
            ASSERT_EQ(status, ROPE_ERR_OVERLAP) << context;
            rejected++;
        }
        if (out_once && delta != 0 && steps_in_slots && lanes <= r && lanes <= slot - r) {
            ASSERT_NE(status, ROPE_ERR_OVERLAP) << "lanes apart in every slot: " << context;
            lanes_apart++;
        }
    }
    EXPECT_GT(accepted, 2000);  // every verdict is exercised
    EXPECT_GT(rejected, 2000);
    EXPECT_GT(lanes_apart, 500);
}

// --- enums ---------------------------------------------------------------------------------------

TEST_F(Validation, UnknownStyle) {
    rope_params p = valid();
    store_raw(p.style, 7);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"style", "7"});
}

TEST_F(Validation, UnknownDirection) {
    rope_params p = valid();
    store_raw(p.direction, 9);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"direction", "9"});
}

TEST_F(Validation, UnknownDtype) {
    rope_params p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        store_raw(t->dtype, 5);
    }
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"dtype", "5"});
}

TEST_F(Validation, UnknownSource) {
    rope_params p = valid();
    store_raw(p.angles.source, 9);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"source", "9"});
}

TEST_F(Validation, UnknownPositionsKind) {
    rope_params p = valid();
    store_raw(p.positions.kind, 4);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"kind", "4"});
}

TEST_F(Validation, UnknownIndexType) {
    rope_params p = valid();
    store_raw(p.positions.index_type, 3);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"index_type", "3"});
}

// --- ABI header ----------------------------------------------------------------------------------

TEST_F(Validation, StructSizeTooSmall) {
    for (uint32_t size : {uint32_t{0}, uint32_t{8}, static_cast<uint32_t>(sizeof(rope_params) - 4)}) {
        rope_params p = valid();
        p.struct_size = size;
        expect_rejected(p, ROPE_ERR_ABI_MISMATCH, {"struct_size"});
    }
}

// A caller compiled against a newer header, whose struct this library does not know.
TEST_F(Validation, StructSizeFromANewerCaller) {
    rope_params p = valid();
    p.struct_size = static_cast<uint32_t>(sizeof(rope_params) + 8);
    expect_rejected(p, ROPE_ERR_ABI_MISMATCH, {"params.struct_size=" + std::to_string(sizeof(rope_params) + 8)});
}

// A caller compiled before device and stream were appended passes the first layout's size; the
// library reads no byte past num_threads (what lies there is padding to it) and runs on the CPU.
TEST_F(Validation, FirstLayoutIsReadWithoutTheAppendedFields) {
    rope_params p = valid();
    p.struct_size = static_cast<uint32_t>((offsetof(rope_params, device) + 7) / 8 * 8);
    store_raw(p.device, 7);
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
    EXPECT_EQ(std::string(report.kernel).find("cuda"), std::string::npos) << report.kernel;
}

// A caller compiled before scaling and round_cos_sin: garbage past its struct is never read.
TEST_F(Validation, SecondLayoutIsReadWithoutScaling) {
    rope_params p = valid();
    p.struct_size = static_cast<uint32_t>((offsetof(rope_params, scaling) + 7) / 8 * 8);
    store_raw(p.scaling.type, 99);
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
}

TEST_F(Validation, UnknownDevice) {
    rope_params p = valid();
    store_raw(p.device, 7);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"device", "7"});
}

TEST_F(Validation, UnknownAbiVersion) {
    for (uint32_t version : {uint32_t{0}, uint32_t{ROPE_ABI_VERSION + 1}}) {
        rope_params p = valid();
        p.abi_version = version;
        expect_rejected(p, ROPE_ERR_ABI_MISMATCH, {"abi_version"});
    }
}

// --- scalars -------------------------------------------------------------------------------------

TEST_F(Validation, NegativeNumThreads) {
    rope_params p = valid();
    p.num_threads = -1;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"num_threads", "-1"});
}

TEST_F(Validation, BaseNotPositiveOrNaN) {
    for (rope_source source : {ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE}) {
        for (double base : {-1.0, -10000.0, std::nan(""), -std::numeric_limits<double>::infinity()}) {
            SCOPED_TRACE(base);
            rope_params p = valid();
            p.angles = rope_angles{};
            p.angles.source = source;
            p.angles.base = base;
            expect_rejected(p, ROPE_ERR_BAD_VALUE, {"base"});
        }
    }
}

// compat evaluates inv_freq in f32 (spec §5): a finite base beyond f32's range is refused there
// and accepted by precise, which evaluates in f64.
TEST_F(Validation, CompatBaseBeyondF32) {
    rope_params p = valid();
    p.angles = rope_angles{};
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.angles.base = 1e39;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"angles.base=1e+39", "must fit in f32", "compat source"});
    p.angles.source = ROPE_SOURCE_PRECISE;
    expect_accepted(p);
}

// The cache's described bytes, cache_len rows of the row stride, must fit 64 bits (validation
// reads no cache value, so the tables need not be that large).
TEST_F(Validation, CacheTableBytesOverflow) {
    rope_params p = valid();
    p.angles.cache_len = int64_t{1} << 62;
    p.angles.cache_row_stride = 64;
    expect_rejected(p, ROPE_ERR_SIZE_OVERFLOW, {"angles.cache_len=4611686018427387904 x row stride 64", "overflows 64 bits"});
}

TEST_F(Validation, AttnFactorNaN) {
    rope_params p = valid();
    p.angles = rope_angles{};
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.angles.attn_factor = std::nanf("");
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"attn_factor"});
}

// base must be finite and above 1: 1 itself, a base below 1 (frequencies above 1) and +inf.
TEST_F(Validation, BaseOfOneBelowOneOrInfinite) {
    for (rope_source source : {ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE}) {
        for (double base : {1.0, 0.5, std::numeric_limits<double>::infinity()}) {
            SCOPED_TRACE(base);
            rope_params p = valid();
            p.angles = rope_angles{};
            p.angles.source = source;
            p.angles.base = base;
            std::ostringstream value;
            value << "angles.base=" << base;
            expect_rejected(p, ROPE_ERR_BAD_VALUE, {value.str(), "> 1"});
        }
    }
}

// --- frequency scaling (spec §6) ----------------------------------------------------------------

/// valid() with a computed source and `type`, its required fields set.
rope_params scaled(const rope_params &base, rope_scaling_type type) {
    static const std::vector<float> factors(kHeadDim / 2, 1.5f);
    rope_params p = base;
    p.angles = rope_angles{};
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.scaling.type = type;
    p.scaling.factor = 4;
    p.scaling.original_max_positions = 4096;
    p.scaling.low_freq_factor = 1;
    p.scaling.high_freq_factor = 4;
    p.scaling.short_factor = factors.data();
    p.scaling.long_factor = factors.data();
    p.scaling.inv_freq = factors.data();
    return p;
}

TEST_F(Validation, UnknownScalingType) {
    rope_params p = scaled(valid(), ROPE_SCALING_NONE);
    store_raw(p.scaling.type, 9);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"scaling.type", "9"});
}

TEST_F(Validation, NegativeScalingType) {
    rope_params p = scaled(valid(), ROPE_SCALING_NONE);
    store_raw(p.scaling.type, -1);
    expect_rejected(p, ROPE_ERR_BAD_ENUM, {"scaling.type=-1", "rope_scaling_type"});
}

TEST_F(Validation, ScalingNeedsAComputedSource) {
    rope_params p = valid();
    p.scaling.type = ROPE_SCALING_LINEAR;
    p.scaling.factor = 2;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.type", "computed source", "rope_build_cos_sin_cache"});
}

TEST_F(Validation, ScalingFactorNotPositive) {
    for (rope_scaling_type type : {ROPE_SCALING_LINEAR, ROPE_SCALING_DYNAMIC, ROPE_SCALING_YARN, ROPE_SCALING_LLAMA3}) {
        for (float factor : {0.0f, -2.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
            SCOPED_TRACE(::testing::Message() << type << " " << factor);
            rope_params p = scaled(valid(), type);
            p.scaling.factor = factor;
            expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.factor", "> 0"});
        }
    }
}

TEST_F(Validation, OriginalMaxPositionsOutOfRange) {
    for (rope_scaling_type type : {ROPE_SCALING_DYNAMIC, ROPE_SCALING_YARN, ROPE_SCALING_LONGROPE, ROPE_SCALING_LLAMA3}) {
        for (int64_t orig : {int64_t{0}, int64_t{-5}, int64_t{1} << 31}) {
            SCOPED_TRACE(::testing::Message() << type << " " << orig);
            rope_params p = scaled(valid(), type);
            p.scaling.original_max_positions = orig;
            expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.original_max_positions", std::to_string(orig)});
        }
    }
}

// One element of q_out over the first entry of each per-pair scaling table the call reads.
TEST_F(Validation, QOutOverlapsAScalingTable) {
    struct Case {
        rope_scaling_type type;
        const float *rope_scaling::*table;
        const char *name;
    };
    for (const Case &c : {Case{ROPE_SCALING_LONGROPE, &rope_scaling::short_factor, "scaling.short_factor"},
                          Case{ROPE_SCALING_LONGROPE, &rope_scaling::long_factor, "scaling.long_factor"},
                          Case{ROPE_SCALING_INV_FREQ, &rope_scaling::inv_freq, "scaling.inv_freq"}}) {
        SCOPED_TRACE(c.name);
        rope_params p = scaled(valid(), c.type);
        const int64_t span = elements_spanned(p.q_out);
        std::vector<float> memory(static_cast<size_t>(span + kHeadDim / 2), 1.5f);  // valid factors and frequencies
        p.q_out.data = memory.data();
        p.scaling.*c.table = memory.data() + span - 1;
        expect_overlap_refused(p, {"q_out", c.name}, memory);
    }
}

// The largest original_max_positions, 2^31 - 1, is in range.
TEST_F(Validation, OriginalMaxPositionsOfTwoPow31MinusOneIsAccepted) {
    for (rope_scaling_type type : {ROPE_SCALING_DYNAMIC, ROPE_SCALING_YARN, ROPE_SCALING_LONGROPE, ROPE_SCALING_LLAMA3}) {
        SCOPED_TRACE(::testing::Message() << "scaling " << type);
        rope_params p = scaled(valid(), type);
        p.scaling.original_max_positions = std::numeric_limits<int32_t>::max();
        expect_accepted(p);
    }
}

TEST_F(Validation, DynamicNeedsRotaryDimFour) {
    rope_params p = scaled(valid(), ROPE_SCALING_DYNAMIC);
    p.rotary_dim = 2;
    expect_rejected(p, ROPE_ERR_BAD_ROTARY, {"rotary_dim=2", "dynamic"});
}

TEST_F(Validation, DynamicAcceptsRotaryDimFour) {
    rope_params p = scaled(valid(), ROPE_SCALING_DYNAMIC);
    p.rotary_dim = 4;
    expect_accepted(p);
}

// A sequence stride beyond 2^31 elements splits the call along the sequence axis, and each
// part would measure its own length: refused by validation, so rope_query says so too.
TEST_F(Validation, PerSequenceScalingWithASequenceStrideBeyondInt32) {
    // q in place (no k) in reserved address space of its own, so that its 40 GiB span meets no
    // other buffer and no table of the call.
    const SparseBuffer space(int64_t{48} << 30);
    if (space.data() == nullptr) {
        GTEST_SKIP() << "cannot reserve 48 GiB of address space";
    }
    for (rope_scaling_type type : {ROPE_SCALING_DYNAMIC, ROPE_SCALING_LONGROPE}) {
        rope_params p = scaled(valid(), type);
        p.k = p.k_out = rope_tensor{};
        p.q.data = space.data();
        p.q.strides[1] = int64_t{1} << 31;
        p.q.strides[0] = kSeq * p.q.strides[1];
        p.q_out = p.q;
        expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"scaling.type", "sequence stride beyond 2^31 elements", "q 2147483648"});

        // The positions' sequence stride alone: an int64 table whose tokens lie 8 GiB apart
        // along each row, in the reserved space (every entry 0).
        p = scaled(valid(), type);
        p.positions.index_type = ROPE_INDEX_INT64;
        p.positions.data = space.data();
        p.positions.strides[0] = 1;
        p.positions.strides[1] = int64_t{1} << 30;  // read as int32 pairs: 2^31
        expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"scaling.type", "positions 1073741824, int64 entries counting twice"});

        // One token a sequence: that stride is never stepped, so nothing is split.
        for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
            t->sizes[1] = 1;
        }
        expect_accepted(p);
    }
}

// A CPU kernel of a computed source builds one cos/sin table for the call, [batch][seq][pair],
// whose batch stride Halide keeps in 32 bits: once seq x rotary_dim/2 passes 2^31 - 1, the
// dispatcher runs the call one batch item at a time (decided from the sizes: running it would take
// 16 GiB of tables a batch item).
TEST_F(Validation, AComputedSourcesTablePastInt32ElementsASequenceSlicesTheBatch) {
    constexpr int64_t kTokens = int64_t{1} << 25, kHeadDimHere = 128;  // 2^25 x 64 pairs = 2^31
    const SparseBuffer space(static_cast<size_t>(2 * kTokens * kHeadDimHere * sizeof(float)));
    if (space.data() == nullptr) {
        GTEST_SKIP() << "cannot reserve 32 GiB of address space";
    }
    rope_params p = valid();
    p.k = p.k_out = rope_tensor{};
    p.q.data = space.data();
    // SBHD, so that no tensor stride passes 2^31 - 1 (a BSHD batch stride would, and slice it anyway).
    const int64_t sizes[4] = {2, kTokens, 1, kHeadDimHere}, strides[4] = {kHeadDimHere, 2 * kHeadDimHere, kHeadDimHere, 1};
    std::copy(sizes, sizes + 4, p.q.sizes);
    std::copy(strides, strides + 4, p.q.strides);
    p.q_out = p.q;
    p.rotary_dim = kHeadDimHere;
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.positions.kind = ROPE_POSITIONS_OFFSET;
    p.positions.data = nullptr;
    p.positions.offset = 0;
    const auto batch_sliced = [](const rope_params &params) {
        ValidCall call;
        std::string message;
        EXPECT_EQ(validate(&params, &call, &message), ROPE_OK) << message;
        return axes_beyond_int32_strides(call).axis[0];
    };
    EXPECT_TRUE(batch_sliced(p));
    rope_params one_pair_fewer = p;
    one_pair_fewer.rotary_dim = kHeadDimHere - 2;  // 2^25 x 63 pairs
    EXPECT_FALSE(batch_sliced(one_pair_fewer));
    rope_params one_sequence = p;
    one_sequence.q.sizes[0] = one_sequence.q_out.sizes[0] = 1;
    EXPECT_FALSE(batch_sliced(one_sequence));
    ValidCall cache;  // a call of the cache source reads the caller's table and builds none
    std::string message;
    ASSERT_EQ(validate(&p, &cache, &message), ROPE_OK) << message;
    cache.params.angles.source = ROPE_SOURCE_CACHE;
    EXPECT_FALSE(axes_beyond_int32_strides(cache).axis[0]);
}

TEST_F(Validation, YarnBetasAndMscales) {
    rope_params p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.beta_fast = -1;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.beta_fast", "-1"});
    p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.beta_slow = std::nanf("");
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.beta_slow"});
    p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.mscale_all_dim = -0.5f;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.mscale_all_dim", "-0.5"});
}

// The attention factor YaRN derives, mscale's over mscale_all_dim's, must be an f32 as a given
// one is; a given attn_factor replaces it.
TEST_F(Validation, YarnDerivedAttentionFactorBeyondF32) {
    rope_params p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.factor = 1e30f;
    p.scaling.mscale = 3e38f;
    p.scaling.mscale_all_dim = 1e-30f;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.mscale=3e+38", "mscale_all_dim=1e-30", "beyond f32's range"});
    p.angles.attn_factor = 1;
    expect_accepted(p);
}

TEST_F(Validation, YarnMscalesInfinite) {
    rope_params p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.mscale = std::numeric_limits<float>::infinity();
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.mscale=inf", "finite"});
    p = scaled(valid(), ROPE_SCALING_YARN);
    p.scaling.mscale = 1;
    p.scaling.mscale_all_dim = std::numeric_limits<float>::infinity();
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.mscale_all_dim=inf", "finite"});
}

TEST_F(Validation, Llama3FrequencyFactors) {
    rope_params p = scaled(valid(), ROPE_SCALING_LLAMA3);
    p.scaling.high_freq_factor = 1;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.high_freq_factor=1", "low_freq_factor=1"});
    p = scaled(valid(), ROPE_SCALING_LLAMA3);
    p.scaling.low_freq_factor = 0;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.low_freq_factor=0"});
}

/// A per-pair table of `type`: NULL is rejected, and so is `bad` at index `at`.
void expect_table_rules(const Validation &test, rope_scaling_type type, const float *rope_scaling::*table,
                        const std::string &name, float bad, int at) {
    rope_params p = scaled(test.valid(), type);
    p.scaling.*table = nullptr;
    test.expect_rejected(p, ROPE_ERR_NULL_POINTER, {"scaling." + name, "NULL"});
    std::vector<float> values(kHeadDim / 2, 0.5f);
    values[at] = bad;
    p = scaled(test.valid(), type);
    p.scaling.*table = values.data();
    std::ostringstream value;
    value << bad;
    test.expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling." + name + "[" + std::to_string(at) + "]=" + value.str()});
}

TEST_F(Validation, LongRopeFactorTables) {
    expect_table_rules(*this, ROPE_SCALING_LONGROPE, &rope_scaling::long_factor, "long_factor", 0.0f, 3);
    expect_table_rules(*this, ROPE_SCALING_LONGROPE, &rope_scaling::short_factor, "short_factor", -1.0f, 5);
    rope_params p = scaled(valid(), ROPE_SCALING_LONGROPE);
    p.scaling.max_positions = -1;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.max_positions=-1"});
}

// LongRoPE's derived attention factor divides by ln(original_max_positions): not for orig = 1.
TEST_F(Validation, LongRopeDerivedAttnFactorNeedsOrigAboveOne) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, kHeadDim);
    rope_params p = scaled(valid(), ROPE_SCALING_LONGROPE);
    p.scaling.original_max_positions = 1;
    p.scaling.max_positions = 4;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.original_max_positions=1", "max_positions=4", "attn_factor"});
    p.angles.attn_factor = 1.5f;  // a given factor derives nothing
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
}

// The derived factor's rule holds from the first ratio above 1 (max_positions 2 over orig 1);
// at ratio 1 nothing is derived, so orig 1 is fine.
TEST_F(Validation, LongRopeOrigOneAtTheRatioBoundary) {
    rope_params p = scaled(valid(), ROPE_SCALING_LONGROPE);
    p.scaling.original_max_positions = 1;
    p.scaling.max_positions = 2;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.original_max_positions=1", "max_positions=2", "attn_factor"});
    p.scaling.max_positions = 1;
    expect_accepted(p);
}

// Every pair's entry is checked, the last one (rotary_dim/2 - 1) included.
TEST_F(Validation, ScalingTablesUpToTheLastPair) {
    expect_table_rules(*this, ROPE_SCALING_LONGROPE, &rope_scaling::long_factor, "long_factor", 0.0f, kHeadDim / 2 - 1);
    expect_table_rules(*this, ROPE_SCALING_LONGROPE, &rope_scaling::short_factor, "short_factor",
                       std::numeric_limits<float>::infinity(), kHeadDim / 2 - 1);
    expect_table_rules(*this, ROPE_SCALING_INV_FREQ, &rope_scaling::inv_freq, "inv_freq",
                       -std::numeric_limits<float>::infinity(), kHeadDim / 2 - 1);
}

TEST_F(Validation, CallersInvFreq) {
    expect_table_rules(*this, ROPE_SCALING_INV_FREQ, &rope_scaling::inv_freq, "inv_freq",
                       std::numeric_limits<float>::infinity(), 0);
}

// The computed sources reduce angles exactly while position x |inv_freq| < 2^32: a scaling that
// raises the frequencies above 1 lowers the largest position, and the message gives it.
TEST_F(Validation, PositionsWhoseAnglesLeaveTheExactlyReducedRange) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, kHeadDim);
    std::vector<float> short_factor(kHeadDim / 2, 1.5f), inv_freq(kHeadDim / 2, 0.5f);
    short_factor[5] = 0.125f;  // inv_freq up to 8: positions below 2^29
    inv_freq[7] = -16.0f;      // |inv_freq| up to 16: below 2^28
    struct Case {
        rope_scaling_type type;
        int64_t limit;       // 2^32 / the largest |inv_freq|
        const char *field;   // the field the message names
    };
    for (const Case &c : {Case{ROPE_SCALING_LINEAR, int64_t{1} << 30, "scaling.factor"},
                          Case{ROPE_SCALING_YARN, int64_t{1} << 30, "scaling.factor"},
                          Case{ROPE_SCALING_LLAMA3, int64_t{1} << 30, "high_freq_factor"},
                          Case{ROPE_SCALING_LONGROPE, int64_t{1} << 29, "scaling.short/long_factor"},
                          Case{ROPE_SCALING_INV_FREQ, int64_t{1} << 28, "scaling.inv_freq"}}) {
        SCOPED_TRACE(::testing::Message() << "scaling " << c.type);
        rope_params p = scaled(valid(), c.type);
        p.scaling.factor = 0.25f;  // inv_freq / factor up to 4: positions below 2^30
        p.scaling.short_factor = short_factor.data();
        p.scaling.inv_freq = inv_freq.data();
        p.positions = rope_positions{};
        p.positions.offset = c.limit - kSeq + 1;  // the last token at the nominal limit
        expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"positions.offset", "2^32", c.field});
        // The message's limit is the nominal one, but for LLAMA3, whose bound allows for the f32
        // rounding of its smoothing (a few in 10^6). A last token one below it is accepted.
        rope_report report = rope_report_init();
        rope_query(&p, &report);
        const std::string message = report.message, before_limit = "positions must be < ";
        ASSERT_NE(message.find(before_limit), std::string::npos) << message;
        const int64_t limit = std::stoll(message.substr(message.find(before_limit) + before_limit.size()));
        EXPECT_LE(limit, c.limit);
        EXPECT_GE(limit, c.type == ROPE_SCALING_LLAMA3 ? c.limit - (c.limit >> 16) : c.limit);
        p.positions.offset = limit - kSeq;
        report = rope_report_init();
        EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
        p.positions.offset++;
        expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE, {"position " + std::to_string(limit)});
    }
    // Unscaled frequencies are at most 1: every position below 2^31 keeps its angle in range.
    rope_params p = scaled(valid(), ROPE_SCALING_NONE);
    p.positions = rope_positions{};
    p.positions.offset = (int64_t{1} << 31) - kSeq;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
}

// A largest |inv_freq| of 3 does not divide 2^32: positions p with 3p < 2^32 run up to
// 1431655765 (3p = 2^32 - 1), so the limit is 2^32 / 3 rounded up, 1431655766.
TEST_F(Validation, AngleLimitOfAFrequencyThatDoesNotDivideTwoPow32) {
    std::vector<float> inv_freq(kHeadDim / 2, 0.5f);
    inv_freq[9] = 3.0f;
    rope_params p = scaled(valid(), ROPE_SCALING_INV_FREQ);
    p.scaling.inv_freq = inv_freq.data();
    p.positions = rope_positions{};
    p.positions.offset = 1431655765 - (kSeq - 1);  // the last token at the largest position
    expect_accepted(p);
    p.positions.offset++;
    expect_rejected(p, ROPE_ERR_POSITION_OUT_OF_RANGE,
                    {"position 1431655766", "positions must be < 1431655766", "scaling.inv_freq"});
}

// compat computes inv_freq in f32: a factor whose inverse overflows f32 is refused, since even
// position 0 would rotate by 0 x inf = NaN.
TEST_F(Validation, CompatFactorWhoseInverseOverflowsF32) {
    for (rope_scaling_type type : {ROPE_SCALING_LINEAR, ROPE_SCALING_YARN, ROPE_SCALING_LLAMA3}) {
        SCOPED_TRACE(::testing::Message() << "scaling " << type);
        rope_params p = scaled(valid(), type);
        p.scaling.factor = 1e-40f;  // subnormal, so > 0
        expect_rejected(p, ROPE_ERR_BAD_VALUE, {"scaling.factor", "beyond f32"});
    }
    std::vector<float> long_factor(kHeadDim / 2, 2.0f);
    long_factor[3] = 1e-40f;
    rope_params p = scaled(valid(), ROPE_SCALING_LONGROPE);
    p.scaling.long_factor = long_factor.data();
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"long_factor", "beyond f32"});
}

TEST_F(Validation, ParityModeNeedsCacheTablesInTheDtype) {
    rope_params p = valid();
    p.q.dtype = p.k.dtype = p.q_out.dtype = p.k_out.dtype = ROPE_DTYPE_BF16;
    p.round_cos_sin = 1;
    expect_rejected(p, ROPE_ERR_BAD_VALUE, {"round_cos_sin=1", "angles.cache_dtype=0", "tensors' dtype"});
}

// --- mrope (spec §6) ------------------------------------------------------------------------------

/// valid() as an mrope call: three int32 streams of [batch][seq] positions, one after the other.
rope_params with_mrope(const rope_params &base, const std::vector<int32_t> &streams) {
    rope_params p = base;
    p.angles = rope_angles{};
    p.angles.source = ROPE_SOURCE_COMPAT;
    p.positions = rope_positions{};
    p.positions.kind = ROPE_POSITIONS_TABLE;
    p.positions.data = streams.data();
    p.positions.strides[0] = kSeq;
    p.positions.strides[1] = 1;
    p.mrope.sections[0] = 8;
    p.mrope.sections[1] = 12;
    p.mrope.sections[2] = 12;
    p.mrope.stream_stride = kBatch * kSeq;
    return p;
}

TEST_F(Validation, MropeRules) {
    const std::vector<int32_t> streams(3 * kBatch * kSeq, 1);
    struct Case {
        rope_status status;
        std::vector<std::string> words;
        void (*edit)(rope_params &);
    };
    const Case cases[] = {
        {ROPE_ERR_BAD_VALUE, {"mrope.sections=[8, 12, 13]", "rotary_dim/2=32"}, [](rope_params &p) { p.mrope.sections[2] = 13; }},
        {ROPE_ERR_BAD_VALUE, {"mrope.sections=[-1"}, [](rope_params &p) { p.mrope.sections[0] = -1; p.mrope.sections[1] = 21; }},
        {ROPE_ERR_BAD_VALUE, {"half style"}, [](rope_params &p) { p.style = ROPE_STYLE_INTERLEAVED; }},
        {ROPE_ERR_BAD_VALUE, {"angles.source=0", "computed source"}, [](rope_params &p) { p.angles.source = ROPE_SOURCE_CACHE; }},
        // An unknown kind is an unknown enum, with mrope as without.
        {ROPE_ERR_BAD_ENUM, {"positions.kind=7", "rope_positions_kind"},
         [](rope_params &p) { store_raw(p.positions.kind, 7); }},
        {ROPE_ERR_BAD_VALUE, {"positions.kind=0", "ROPE_POSITIONS_TABLE"}, [](rope_params &p) { p.positions.kind = ROPE_POSITIONS_OFFSET; }},
        {ROPE_ERR_BAD_VALUE, {"scaling.type=2"}, [](rope_params &p) {
             p.scaling.type = ROPE_SCALING_DYNAMIC;
             p.scaling.factor = 2;
             p.scaling.original_max_positions = 16;
         }},
        {ROPE_ERR_BAD_STRIDE, {"mrope.stream_stride=-1"}, [](rope_params &p) { p.mrope.stream_stride = -1; }},
        {ROPE_ERR_BAD_STRIDE, {"mrope.stream_stride=1073741824", "[0, 2^30)"},
         [](rope_params &p) { p.mrope.stream_stride = int64_t{1} << 30; }},
    };
    for (const Case &c : cases) {
        rope_params p = with_mrope(valid(), streams);
        c.edit(p);
        expect_rejected(p, c.status, c.words);
    }
}

TEST_F(Validation, MropeStreamPositionNegative) {
    std::vector<int32_t> streams(3 * kBatch * kSeq, 1);
    streams[2 * kBatch * kSeq + 4] = -7;
    expect_rejected(with_mrope(valid(), streams), ROPE_ERR_POSITION_OUT_OF_RANGE, {"mrope stream 2", "-7"});
}

TEST_F(Validation, MropeNegativeSectionInEachStream) {
    const std::vector<int32_t> streams(3 * kBatch * kSeq, 1);
    for (int stream = 1; stream < 3; stream++) {
        rope_params p = with_mrope(valid(), streams);
        p.mrope.sections[0] = 8;
        p.mrope.sections[stream] = -1;
        p.mrope.sections[3 - stream] = 25;  // the sum stays rotary_dim/2 = 32
        const std::string sections = stream == 1 ? "[8, -1, 25]" : "[8, 25, -1]";
        expect_rejected(p, ROPE_ERR_BAD_VALUE, {"mrope.sections=" + sections, ">= 0"});
    }
}

// The kernels read all three streams: an output over the last entry of the third one overlaps.
TEST_F(Validation, QOutOverlapsTheLastMropeStream) {
    const int64_t entries = 3 * kBatch * kSeq;
    rope_params p = with_mrope(valid(), std::vector<int32_t>(entries, 0));
    std::vector<float> memory(static_cast<size_t>(entries + elements_spanned(p.q_out)), 0.0f);  // zeros: positions 0
    p.positions.data = memory.data();
    p.q_out.data = memory.data() + entries;  // just after the streams
    expect_accepted(p);
    p.q_out.data = memory.data() + entries - 1;
    expect_overlap_refused(p, {"q_out", "positions.data"}, memory);
}

// Rules of device=ROPE_DEVICE_CUDA that validation decides, before any driver is loaded: no
// frequency scaling, no mrope, no varlen, and cos/sin tables below 2^31 elements.
TEST_F(Validation, CudaCallRules) {
    rope_params p = scaled(valid(), ROPE_SCALING_LINEAR);
    p.device = ROPE_DEVICE_CUDA;
    expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"scaling.type=1", "CUDA calls support ROPE_SCALING_NONE only"});

    const std::vector<int32_t> streams(3 * kBatch * kSeq, 1);
    p = with_mrope(valid(), streams);
    p.device = ROPE_DEVICE_CUDA;
    expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"mrope: CUDA calls take no mrope"});

    p = valid();
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        t->sizes[0] = 1;
    }
    const int32_t cu_seqlens[2] = {0, static_cast<int32_t>(kSeq)};
    p.varlen.cu_seqlens = cu_seqlens;
    p.varlen.num_seqs = 1;
    p.device = ROPE_DEVICE_CUDA;
    expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"varlen: CUDA calls take no cu_seqlens"});

    p = valid();
    p.device = ROPE_DEVICE_CUDA;
    p.angles.cache_len = (int64_t{1} << 31) / (kHeadDim / 2);  // 2^31 elements: one too many
    expect_rejected(p, ROPE_ERR_UNSUPPORTED, {"angles.cache_len=67108864", "fewer than 2^31 elements"});
}

// --- the rest of the surface -----------------------------------------------------------------------

TEST_F(Validation, QueryNamesAKernelWithoutTouchingOutputs) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    const rope_params p = valid();
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
    EXPECT_EQ(report.status, ROPE_OK);
    EXPECT_EQ(std::string(report.kernel).rfind("ropegen_half_cache_", 0), 0u) << report.kernel;
    EXPECT_TRUE(snapshot_.unchanged());
    // The kernel a query names is the one a dispatch runs.
    rope_report ran = rope_report_init();
    ASSERT_EQ(rope_dispatch(&p, &ran), ROPE_OK) << ran.message;
    EXPECT_STREQ(ran.kernel, report.kernel);
}

TEST(StatusStrings, EveryStatusHasItsName) {
    const char *const names[] = {"ROPE_OK",
                                 "ROPE_ERR_NULL_POINTER",
                                 "ROPE_ERR_BAD_ENUM",
                                 "ROPE_ERR_DTYPE_MISMATCH",
                                 "ROPE_ERR_BAD_HEAD_DIM",
                                 "ROPE_ERR_BAD_ROTARY",
                                 "ROPE_ERR_BAD_SHAPE",
                                 "ROPE_ERR_SIZE_OVERFLOW",
                                 "ROPE_ERR_BAD_STRIDE",
                                 "ROPE_ERR_POSITION_OUT_OF_RANGE",
                                 "ROPE_ERR_OVERLAP",
                                 "ROPE_ERR_BAD_VALUE",
                                 "ROPE_ERR_ABI_MISMATCH",
                                 "ROPE_ERR_UNSUPPORTED",
                                 "ROPE_ERR_INTERNAL",
                                 "ROPE_ERR_DEVICE",
                                 "ROPE_ERR_BAD_POINTER"};
    for (int status = ROPE_OK; status <= ROPE_ERR_BAD_POINTER; status++) {
        const char *text = rope_status_string(static_cast<rope_status>(status));
        ASSERT_NE(text, nullptr);
        EXPECT_EQ(std::string(text).rfind(names[status], 0), 0u) << text;
        EXPECT_GT(std::strlen(text), std::strlen(names[status])) << "the text should explain the status";
    }
    // An unknown status (an int no rope_status names) is checked from C in abi_c_test.c.
}

TEST(Version, StringAndAbi) {
    int major = -1, minor = -1, patch = -1;
    char rest = 0;
    EXPECT_EQ(std::sscanf(rope_version_string(), "%d.%d.%d%c", &major, &minor, &patch, &rest), 3)
        << "\"" << rope_version_string() << "\" is not major.minor.patch";
    EXPECT_EQ(rope_abi_version(), static_cast<uint32_t>(ROPE_ABI_VERSION));
}

TEST_F(Validation, NullReportIsAccepted) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kHeadDim);
    rope_params bad = valid();
    bad.rotary_dim = 31;
    EXPECT_EQ(rope_dispatch(&bad, nullptr), ROPE_ERR_BAD_ROTARY);
    EXPECT_EQ(rope_query(&bad, nullptr), ROPE_ERR_BAD_ROTARY);
    EXPECT_TRUE(snapshot_.unchanged());
    EXPECT_EQ(call_.run([](const rope_params *p, rope_report *) { return rope_dispatch(p, nullptr); }), ROPE_OK);
    EXPECT_TRUE(call_.check_outputs());
}

// A report whose struct_size the library does not know is not written at all.
TEST_F(Validation, ShortReportIsNotWritten) {
    rope_params bad = valid();
    bad.rotary_dim = 31;
    rope_report report;
    std::memset(&report, 0xab, sizeof(report));
    report.struct_size = 8;
    rope_report before;
    std::memcpy(&before, &report, sizeof(report));
    EXPECT_EQ(rope_dispatch(&bad, &report), ROPE_ERR_BAD_ROTARY);
    EXPECT_EQ(std::memcmp(&before, &report, sizeof(report)), 0);
}

}  // namespace
}  // namespace ropegen::test
