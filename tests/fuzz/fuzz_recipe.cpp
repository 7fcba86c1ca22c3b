// SPDX-License-Identifier: Apache-2.0
#include "fuzz_recipe.h"

namespace ropegen::fuzz {
namespace {

// A pick is one byte b: b % (count + 1) == count is the escape, followed by `raw_bytes` bytes of
// a little-endian, sign-extended raw value; any other b selects code b % (count + 1). A field
// without a raw form (raw_bytes == 0) takes code b % count.
class Reader {
public:
    Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {
    }
    uint8_t byte() {
        return position_ < size_ ? data_[position_++] : 0;
    }
    void pick(Pick &pick, size_t count, int raw_bytes) {
        const uint8_t b = byte();
        pick = Pick{};
        if (raw_bytes == 0) {
            pick.code = static_cast<uint8_t>(b % count);
            return;
        }
        if (b % (count + 1) != count) {
            pick.code = static_cast<uint8_t>(b % (count + 1));
            return;
        }
        uint64_t value = 0;
        for (int i = 0; i < raw_bytes; i++) {
            value |= static_cast<uint64_t>(byte()) << (8 * i);
        }
        const int unused_bits = 64 - 8 * raw_bytes;
        pick.is_raw = true;
        pick.raw = static_cast<int64_t>(value << unused_bits) >> unused_bits;  // sign-extend
    }
    void flag(bool &value) {
        value = (byte() & 1) != 0;
    }
    void word(uint32_t &value) {
        value = 0;
        for (int i = 0; i < 4; i++) {
            value |= static_cast<uint32_t>(byte()) << (8 * i);
        }
    }
    void raw_byte(uint8_t &value) {
        value = byte();
    }
    void optional_tail() {
    }

private:
    const uint8_t *data_;
    size_t size_;
    size_t position_ = 0;
};

class Writer {
public:
    void pick(const Pick &pick, size_t count, int raw_bytes) {
        if (!pick.is_raw || raw_bytes == 0) {
            bytes_.push_back(pick.code);
            return;
        }
        bytes_.push_back(static_cast<uint8_t>(count));
        for (int i = 0; i < raw_bytes; i++) {
            bytes_.push_back(static_cast<uint8_t>(static_cast<uint64_t>(pick.raw) >> (8 * i)));
        }
    }
    void flag(const bool &value) {
        bytes_.push_back(value ? 1 : 0);
    }
    void word(const uint32_t &value) {
        for (int i = 0; i < 4; i++) {
            bytes_.push_back(static_cast<uint8_t>(value >> (8 * i)));
        }
    }
    void raw_byte(const uint8_t &value) {
        bytes_.push_back(value);
    }
    void optional_tail() {
        optional_from_ = bytes_.size();
    }
    /// Without the zero bytes that end the optional tail: the reader reads them back as zero.
    std::vector<uint8_t> bytes() const {
        size_t end = bytes_.size();
        while (end > optional_from_ && bytes_[end - 1] == 0) {
            end--;
        }
        return {bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(end)};
    }

private:
    std::vector<uint8_t> bytes_;
    size_t optional_from_ = SIZE_MAX;
};

// Widths of raw values in bytes.
constexpr int kRaw32 = 4, kRaw64 = 8, kNoRaw = 0;

// The one description of the format: field order, code counts and raw widths. `R` is Recipe or
// const Recipe, so that Reader fills a recipe and Writer reads one.
template <typename Io, typename R>
void visit(Io &io, R &r) {
    io.pick(r.isa_cap, code_count(kIsaCaps), kRaw32);
    io.pick(r.struct_size, code_count<StructSize>(), kRaw32);
    io.pick(r.abi_version, code_count(kAbiVersions), kRaw32);
    io.pick(r.report_size, code_count<ReportSize>(), kRaw32);
    io.pick(r.null_target, code_count<NullTarget>(), kNoRaw);
    io.pick(r.style, code_count(kStyles), kRaw32);
    io.pick(r.direction, code_count(kDirections), kRaw32);
    io.pick(r.source, code_count(kSources), kRaw32);
    io.pick(r.num_threads, code_count(kNumThreads), kRaw32);
    io.pick(r.batch, code_count(kBatches), kRaw64);
    io.pick(r.seq, code_count(kSeqs), kRaw64);
    io.pick(r.q_heads, code_count(kHeads), kRaw64);
    io.pick(r.head_dim, code_count(kHeadDims), kRaw64);
    io.flag(r.has_k);
    io.pick(r.k_heads, code_count(kHeads), kRaw64);
    io.pick(r.rotary_dim, code_count<RotaryDim>(), kRaw32);
    io.pick(r.rotary_offset, code_count<RotaryOffset>(), kRaw32);
    io.pick(r.dtype, code_count(kDtypes), kRaw32);
    for (int i = 0; i < 3; i++) {
        io.pick(r.other_dtype[i], code_count<OtherDtype>(), kRaw32);
        io.pick(r.other_shape[i], code_count<ShapeEdit>(), kNoRaw);
    }
    for (auto &layout : r.layout) {
        io.pick(layout, code_count<Layout>(), kNoRaw);
    }
    io.pick(r.memory, code_count<Memory>(), kNoRaw);
    io.pick(r.head_pad, 4, kNoRaw);
    for (auto &edit : r.stride_edits) {
        io.raw_byte(edit.target);
        io.pick(edit.op, code_count<StrideOp>(), kRaw64);
    }
    for (auto &placement : r.placements) {
        io.pick(placement.target, code_count<PlacementTarget>(), kNoRaw);
        io.pick(placement.offset, code_count<PlacementOffset>(), 2);
    }
    io.flag(r.flush_start);
    io.pick(r.positions_kind, code_count(kPositionKinds), kRaw32);
    io.pick(r.index_type, code_count(kIndexTypes), kRaw32);
    io.flag(r.positions_data);
    io.pick(r.positions_layout, code_count<PositionsLayout>(), kNoRaw);
    io.pick(r.position_values, code_count<PositionValues>(), kNoRaw);
    io.pick(r.scalar_offset, code_count<ScalarOffset>(), kRaw64);
    io.pick(r.cache_len, code_count<CacheLen>(), kRaw64);
    io.pick(r.cache_row_stride, code_count<RowStride>(), kRaw64);
    io.pick(r.cache_dtype, code_count<CacheDtype>(), kRaw32);
    io.pick(r.base, code_count(kBases), kRaw64);
    io.pick(r.attn_factor, code_count(kAttnFactors), kRaw32);
    io.pick(r.fill, code_count<Fill>(), kNoRaw);
    io.word(r.seed);
    io.pick(r.scaling_type, code_count(kScalingTypes), kRaw32);
    io.pick(r.scaling_factor, code_count(kScalingFactors), kRaw32);
    io.pick(r.original_max, code_count<OriginalMax>(), kRaw64);
    io.pick(r.max_positions, code_count<MaxPositions>(), kRaw64);
    io.pick(r.freq_factors, code_count(kFreqFactors), kNoRaw);
    for (auto &param : r.yarn_params) {
        io.pick(param, code_count(kYarnParams), kRaw32);
    }
    io.flag(r.yarn_no_truncate);
    // Indexed: GCC 12 at -O3 takes the range-for form for a write past the Recipe (a false
    // -Wstringop-overflow, an error in the release build).
    for (int table = 0; table < kScalingTableCount; table++) {
        io.pick(r.scaling_tables[table], code_count<ScalingTableMode>(), kNoRaw);
    }
    io.pick(r.varlen, code_count<Varlen>(), kNoRaw);
    io.pick(r.num_seqs, code_count(kNumSeqs), kRaw64);
    io.pick(r.varlen_index_type, code_count(kIndexTypes), kRaw32);
    io.pick(r.mrope_sections, code_count<MropeSections>(), kNoRaw);
    io.pick(r.stream_stride, code_count<StreamStride>(), kRaw64);
    io.pick(r.round_cos_sin, code_count(kRoundCosSin), kRaw32);
    // Fields from here on are written only up to the last non-zero byte, so that appending one
    // leaves the committed seeds as they are (their recipes ended above).
    io.optional_tail();
    io.flag(r.per_head_qkv);
}

}  // namespace

Recipe decode_recipe(const uint8_t *data, size_t size) {
    Reader reader(data, size);
    Recipe recipe;
    visit(reader, recipe);
    return recipe;
}

std::vector<uint8_t> encode_recipe(const Recipe &recipe) {
    Writer writer;
    visit(writer, recipe);
    return writer.bytes();
}

}  // namespace ropegen::fuzz
