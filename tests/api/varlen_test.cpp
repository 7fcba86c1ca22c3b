// SPDX-License-Identifier: Apache-2.0
// Packed variable-length batches (THD, spec §4): a varlen call over uneven sequences (empty ones
// included) gives, bit for bit, what a dense call on each sequence alone gives, for every way of
// passing positions, with and without per-sequence scalings; and one test per varlen rule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reference/rope_reference.h"
#include "ropegen/rope.h"

namespace ropegen::test {
namespace {

namespace ref = reference;

constexpr int64_t kHeads = 3, kHeadDim = 64;
const std::vector<int64_t> kCuSeqlens = {0, 5, 5, 6, 23, 26};  // lengths 5, 0, 1, 17, 3

enum class Positions { PerToken, PerSequenceOffsets, ScalarOffset };

struct VarlenCase {
    rope_dtype dtype;
    Positions positions;
    rope_scaling_type scaling;
};

std::string case_name(const ::testing::TestParamInfo<VarlenCase> &info) {
    static const char *const positions[] = {"PerToken", "PerSequenceOffsets", "ScalarOffset"};
    static const char *const scalings[] = {"none", "linear", "dynamic", "yarn", "longrope", "llama3", "inv_freq"};
    return std::string(ref::dtype_name(info.param.dtype)) + "_" + positions[static_cast<int>(info.param.positions)] + "_" +
           scalings[info.param.scaling];
}

class VarlenTest : public ::testing::TestWithParam<VarlenCase> {
protected:
    void SetUp() override {
        const VarlenCase c = GetParam();
        element_ = ref::dtype_size(c.dtype);
        tokens_ = kCuSeqlens.back();
        std::mt19937 rng(3);
        std::uniform_real_distribution<double> value(-2, 2);
        x_.resize(static_cast<size_t>(tokens_ * kHeads * kHeadDim) * element_);
        for (size_t i = 0; i < x_.size() / element_; i++) {
            const uint32_t bits = ref::encode(value(rng), c.dtype);
            std::memcpy(&x_[i * element_], &bits, element_);
        }
        std::uniform_int_distribution<int64_t> position(0, 300);
        for (int64_t t = 0; t < tokens_; t++) {
            token_positions_.push_back(position(rng));
        }
        offsets_ = {7, 900, 0, 250, 40};
        factors_.assign(kHeadDim / 2, 1.5f);
        long_factors_.assign(kHeadDim / 2, 6.0f);
    }

    rope_params params(void *data, void *out, int64_t start, int64_t length) const {
        const VarlenCase c = GetParam();
        rope_params p = rope_params_init();
        p.q = rope_tensor{static_cast<uint8_t *>(data) + start * kHeads * kHeadDim * element_, c.dtype,
                          {1, length, kHeads, kHeadDim}, {length * kHeads * kHeadDim, kHeads * kHeadDim, kHeadDim, 1}};
        p.q_out = p.q;
        p.q_out.data = static_cast<uint8_t *>(out) + start * kHeads * kHeadDim * element_;
        p.angles.source = ROPE_SOURCE_COMPAT;
        p.scaling.type = c.scaling;
        p.scaling.factor = 4;
        p.scaling.original_max_positions = 64;  // some sequences below it, some beyond
        p.scaling.low_freq_factor = 1;
        p.scaling.high_freq_factor = 4;
        p.scaling.short_factor = factors_.data();
        p.scaling.long_factor = long_factors_.data();
        p.scaling.inv_freq = factors_.data();
        return p;
    }

    /// `packed`, the output of a packed call, holds bit for bit what each sequence rotated on its
    /// own by its positions (as the case gives them) gives.
    void expect_each_sequence_alone(const std::vector<uint8_t> &packed) {
        std::vector<uint8_t> alone(x_.size(), 0xEE);
        for (size_t b = 0; b + 1 < kCuSeqlens.size(); b++) {
            const int64_t start = kCuSeqlens[b], length = kCuSeqlens[b + 1] - start;
            if (length == 0) {
                continue;
            }
            rope_params one = params(x_.data(), alone.data(), start, length);
            one.positions.index_type = ROPE_INDEX_INT64;
            switch (GetParam().positions) {
                case Positions::PerToken:
                    one.positions.kind = ROPE_POSITIONS_TABLE;
                    one.positions.data = token_positions_.data() + start;
                    one.positions.strides[1] = 1;
                    break;
                case Positions::PerSequenceOffsets: one.positions.offset = offsets_[b]; break;
                case Positions::ScalarOffset: one.positions.offset = 11; break;
            }
            rope_report r = rope_report_init();
            ASSERT_EQ(rope_dispatch(&one, &r), ROPE_OK) << r.message;
        }
        for (size_t i = 0; i < packed.size(); i += element_) {
            ASSERT_EQ(std::memcmp(&packed[i], &alone[i], element_), 0)
                << "token " << i / element_ / (kHeads * kHeadDim) << " differs from its sequence rotated alone";
        }
    }

    size_t element_ = 4;
    int64_t tokens_ = 0;
    std::vector<uint8_t> x_;
    std::vector<int64_t> token_positions_, offsets_;
    std::vector<float> factors_, long_factors_;
};

TEST_P(VarlenTest, EqualsEachSequenceAlone) {
    const VarlenCase c = GetParam();
    std::vector<uint8_t> packed(x_.size(), 0xEE);
    rope_params p = params(x_.data(), packed.data(), 0, tokens_);
    p.varlen.cu_seqlens = kCuSeqlens.data();
    p.varlen.index_type = ROPE_INDEX_INT64;
    p.varlen.num_seqs = static_cast<int64_t>(kCuSeqlens.size()) - 1;
    p.positions.index_type = ROPE_INDEX_INT64;
    switch (c.positions) {
        case Positions::PerToken:
            p.positions.kind = ROPE_POSITIONS_TABLE;
            p.positions.data = token_positions_.data();
            p.positions.strides[1] = 1;
            break;
        case Positions::PerSequenceOffsets:
            p.positions.data = offsets_.data();
            p.positions.strides[0] = 1;
            break;
        case Positions::ScalarOffset: p.positions.offset = 11; break;
    }
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;

    expect_each_sequence_alone(packed);
}

std::vector<VarlenCase> varlen_cases() {
    std::vector<VarlenCase> cases;
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_BF16}) {
        for (Positions positions : {Positions::PerToken, Positions::PerSequenceOffsets, Positions::ScalarOffset}) {
            for (rope_scaling_type scaling : {ROPE_SCALING_NONE, ROPE_SCALING_DYNAMIC, ROPE_SCALING_LONGROPE, ROPE_SCALING_YARN}) {
                cases.push_back({dtype, positions, scaling});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Varlen, VarlenTest, ::testing::ValuesIn(varlen_cases()), case_name);

// Per-sequence offsets may be strided (positions.strides[0]) and of either index type: sequence b
// takes the entry at b * stride, never one of the entries between (here other valid positions).
class VarlenStridedOffsetsTest : public VarlenTest {};

TEST_P(VarlenStridedOffsetsTest, EachSequenceTakesItsOwnEntry) {
    constexpr int64_t kStride = 3;
    const int64_t num_seqs = static_cast<int64_t>(kCuSeqlens.size()) - 1;
    std::vector<int32_t> offsets32;
    std::vector<int64_t> offsets64;
    for (int64_t b = 0; b < num_seqs; b++) {
        for (int64_t j = 0; j < kStride; j++) {
            const int64_t value = j == 0 ? offsets_[static_cast<size_t>(b)] : 500 + 10 * b + j;
            offsets32.push_back(static_cast<int32_t>(value));
            offsets64.push_back(value);
        }
    }
    for (const rope_index_type index_type : {ROPE_INDEX_INT32, ROPE_INDEX_INT64}) {
        SCOPED_TRACE(index_type == ROPE_INDEX_INT32 ? "int32 offsets" : "int64 offsets");
        std::vector<uint8_t> packed(x_.size(), 0xEE);
        rope_params p = params(x_.data(), packed.data(), 0, tokens_);
        p.varlen.cu_seqlens = kCuSeqlens.data();
        p.varlen.index_type = ROPE_INDEX_INT64;
        p.varlen.num_seqs = num_seqs;
        p.positions.index_type = index_type;
        p.positions.data = index_type == ROPE_INDEX_INT32 ? static_cast<const void *>(offsets32.data())
                                                          : static_cast<const void *>(offsets64.data());
        p.positions.strides[0] = kStride;
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
        expect_each_sequence_alone(packed);
    }
}

std::vector<VarlenCase> strided_offset_cases() {
    std::vector<VarlenCase> cases;
    for (const VarlenCase &c : varlen_cases()) {
        if (c.positions == Positions::PerSequenceOffsets) {
            cases.push_back(c);
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Varlen, VarlenStridedOffsetsTest, ::testing::ValuesIn(strided_offset_cases()), case_name);

TEST(VarlenValidation, RulesWriteNothing) {
    std::vector<float> x(10 * 2 * 8, 1.0f), out(x.size(), 7.0f);
    const std::vector<int32_t> good = {0, 4, 10};
    auto base = [&](const std::vector<int32_t> &cu) {
        rope_params p = rope_params_init();
        p.q = rope_tensor{x.data(), ROPE_DTYPE_F32, {1, 10, 2, 8}, {160, 16, 8, 1}};
        p.q_out = p.q;
        p.q_out.data = out.data();
        p.angles.source = ROPE_SOURCE_COMPAT;
        p.varlen.cu_seqlens = cu.data();
        p.varlen.num_seqs = static_cast<int64_t>(cu.size()) - 1;
        return p;
    };
    struct Bad {
        std::vector<int32_t> cu;
        rope_status status;
        const char *words;
        void (*edit)(rope_params &);
    };
    const std::vector<int64_t> offsets = {0, 2147483644};
    static const int64_t *offsets_data = nullptr;
    offsets_data = offsets.data();
    const Bad bads[] = {
        {{1, 4, 10}, ROPE_ERR_BAD_SHAPE, "varlen.cu_seqlens[0]=1", [](rope_params &) {}},
        {{0, 6, 4, 10}, ROPE_ERR_BAD_SHAPE, "varlen.cu_seqlens[2]=4", [](rope_params &) {}},
        {{0, 4, 9}, ROPE_ERR_BAD_SHAPE, "q.sizes[1]=10", [](rope_params &) {}},
        {good, ROPE_ERR_BAD_SHAPE, "varlen.num_seqs=-1", [](rope_params &p) { p.varlen.num_seqs = -1; }},
        {good, ROPE_ERR_BAD_ENUM, "varlen.index_type=5", [](rope_params &p) { std::memset(&p.varlen.index_type, 5, 1); }},
        {good, ROPE_ERR_BAD_SHAPE, "packed tensors", [](rope_params &p) {
             p.q.sizes[0] = p.q_out.sizes[0] = 2;
             p.q.sizes[1] = p.q_out.sizes[1] = 5;
         }},
        {good, ROPE_ERR_POSITION_OUT_OF_RANGE, "positions.data (offsets)[1]", [](rope_params &p) {
             p.positions.data = offsets_data;
             p.positions.index_type = ROPE_INDEX_INT64;
             p.positions.strides[0] = 1;
         }},
        // One scalar offset for all: the first sequence that runs past the limit is named.
        {good, ROPE_ERR_POSITION_OUT_OF_RANGE, "positions.offset (varlen sequence 1) gives position 2147483648",
         [](rope_params &p) { p.positions.offset = 2147483643; }},
    };
    for (const Bad &bad : bads) {
        rope_params p = base(bad.cu);
        bad.edit(p);
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_dispatch(&p, &report), bad.status) << bad.words << ": " << report.message;
        EXPECT_NE(std::string(report.message).find(bad.words), std::string::npos) << report.message;
        EXPECT_EQ(out, std::vector<float>(x.size(), 7.0f));
    }
}

}  // namespace
}  // namespace ropegen::test
