// SPDX-License-Identifier: Apache-2.0
// The fuzzer's input format. An input is a Recipe: one rope_dispatch() call written as a list of
// choices (a style, a head_dim, a memory plan, an edit to one stride, ...). Every choice is one
// byte that selects a named code, or an escape byte followed by a raw value for anything no code
// names (huge sizes, odd enum values, NaN bases). One schema function drives both directions, so
// the seed writer encodes exactly what the harness decodes; missing bytes decode as zero, and
// code 0 of every field is the ordinary, valid choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ropegen/rope.h"

namespace ropegen::fuzz {

/// One choice: a code in [0, count) of the field's enum or table, or a raw value.
struct Pick {
    uint8_t code = 0;
    bool is_raw = false;
    int64_t raw = 0;

    template <typename Code>
    static Pick of(Code code) {
        return Pick{static_cast<uint8_t>(code), false, 0};
    }
    static Pick raw_value(int64_t value) {
        return Pick{0, true, value};
    }
};

// --- fields whose codes index a table of values ------------------------------------------------
// Appended, never reordered: a code keeps its value in the committed corpus and regressions.
inline constexpr int32_t kIsaCaps[] = {ROPE_ISA_NONE, ROPE_ISA_SSE41, ROPE_ISA_AVX2, ROPE_ISA_AVX512, 4, -1,
                                       ROPE_ISA_NEON, ROPE_ISA_NEON_FP16};
inline constexpr int32_t kAbiVersions[] = {ROPE_ABI_VERSION, 0, ROPE_ABI_VERSION + 1};
inline constexpr int32_t kStyles[] = {ROPE_STYLE_HALF, ROPE_STYLE_INTERLEAVED, 2, -1};
inline constexpr int32_t kDirections[] = {ROPE_FORWARD, ROPE_INVERSE, 2};
inline constexpr int32_t kSources[] = {ROPE_SOURCE_CACHE, ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE, 3};
inline constexpr int32_t kDtypes[] = {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16, 3, -1};
inline constexpr int32_t kNumThreads[] = {0, 1, 2, 3, 8, -1};
inline constexpr int32_t kPositionKinds[] = {ROPE_POSITIONS_OFFSET, ROPE_POSITIONS_TABLE, 2};
inline constexpr int32_t kIndexTypes[] = {ROPE_INDEX_INT32, ROPE_INDEX_INT64, 2};
inline constexpr int64_t kBatches[] = {1, 2, 3, 0, 4, -1};
inline constexpr int64_t kSeqs[] = {1, 2, 5, 0, 8, 3, -1};
inline constexpr int64_t kHeads[] = {1, 2, 3, 4, 0, -1};
/// The specialised head_dims (64, 128, 256) and others for the any-head_dim kernel, then invalid ones.
inline constexpr int64_t kHeadDims[] = {64, 128, 8, 2, 4, 6, 10, 16, 30, 66, 130, 256, 0, 1, 3, -2};
inline constexpr double kBases[] = {0,   10000, 500000, 1e6, 2, 1.5, 1.0000001, 1, 0.5, -10000,
                                    std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                    1e300, 1e-300};
inline constexpr float kAttnFactors[] = {0, 1, 0.5f, 2, -1, 0.125f, 1e-40f, 1e30f, -0.0f,
                                         std::numeric_limits<float>::quiet_NaN(),
                                         std::numeric_limits<float>::infinity()};
inline constexpr int32_t kScalingTypes[] = {ROPE_SCALING_NONE,     ROPE_SCALING_LINEAR,   ROPE_SCALING_DYNAMIC,
                                            ROPE_SCALING_YARN,     ROPE_SCALING_LONGROPE, ROPE_SCALING_LLAMA3,
                                            ROPE_SCALING_INV_FREQ, 7,                     -1};
/// scaling.factor: usual factors, factors below 1 (they raise inv_freq, so they lower the largest
/// position a computed source takes: 2^-29 leaves 8), then invalid ones and a subnormal.
inline constexpr float kScalingFactors[] = {1, 2, 4, 8, 0.5f, 0.25f, 0x1p-29f, 0, -2,
                                            std::numeric_limits<float>::quiet_NaN(),
                                            std::numeric_limits<float>::infinity(), 1e-40f};
/// LLAMA3's low_freq_factor and high_freq_factor: Llama 3.1's, another valid pair, then equal,
/// inverted and invalid ones.
struct FreqFactors {
    float low, high;
};
inline constexpr FreqFactors kFreqFactors[] = {{1, 4}, {0.5f, 8}, {2, 2}, {4, 1}, {0, 4}, {-1, 4},
                                               {1, std::numeric_limits<float>::infinity()},
                                               {std::numeric_limits<float>::quiet_NaN(), 4}};
/// YARN's beta_fast, beta_slow, mscale and mscale_all_dim (0: each one's default).
inline constexpr float kYarnParams[] = {0, 32, 1, 16, 2, 0.707f, 0.5f, -1, std::numeric_limits<float>::quiet_NaN(),
                                        std::numeric_limits<float>::infinity()};
/// varlen.num_seqs: a few sequences over the packed tokens, then none (valid for no tokens only)
/// and invalid counts.
inline constexpr int64_t kNumSeqs[] = {2, 1, 3, 5, 8, 0, -1, int64_t{1} << 31};
/// round_cos_sin: off, then any non-zero value turns the parity mode on.
inline constexpr int32_t kRoundCosSin[] = {0, 1, -1, 2};

// --- fields whose codes are resolved against other fields --------------------------------------
enum class StructSize : uint8_t { Exact, Zero, Eight, Shorter, Longer, Count };
enum class ReportSize : uint8_t { Exact, Zero, Four, Shorter, Longer, Count };
/// A pointer the call passes as NULL.
enum class NullTarget : uint8_t { None, Params, Report, Q, QOut, KOut, PositionsData, CosCache, SinCache, Count };
/// rotary_dim relative to head_dim D.
enum class RotaryDim : uint8_t { Default, Full, Half, Two, AllButTwo, PlusTwo, Odd, Negative, Count };
/// rotary_offset relative to D and the rotary dim R.
enum class RotaryOffset : uint8_t { Zero, Max, Middle, One, PastMax, Negative, Count };
/// The dtype of k, q_out or k_out.
enum class OtherDtype : uint8_t { AsQ, F32, F16, BF16, Invalid, Count };
/// The sizes of k, q_out or k_out against their partner (q for k and q_out, k for k_out).
enum class ShapeEdit : uint8_t { Same, BatchPlusOne, SeqPlusOne, HeadsPlusOne, HeadDimPlusTwo, HeadDimMinusTwo, Count };
/// Where the four tensors live.
enum class Memory : uint8_t {
    Separate,          ///< four buffers
    InPlace,           ///< q_out == q, k_out == k
    PackedQkv,         ///< q and k are views into one [B, S, Hq + 2 Hk, D] buffer (with v); outputs separate
                       ///< (per_head_qkv: [B, S, max(Hq, Hk), 3 D], q, k, v lanes of each head's slot)
    PackedQkvInPlace,  ///< the same, rotated in place
    PackedOutputs,     ///< q_out and k_out are views into one [B, S, Hq + Hk, D] buffer
    Count
};
/// Memory order of a separate buffer; Default: BSHD for inputs, the input's order for outputs.
enum class Layout : uint8_t { Default, BSHD, BHSD, SBHD, Count };
/// An edit of one stride after the layout is set (raw: the stride itself).
enum class StrideOp : uint8_t { None, Zero, Negate, PlusOne, MinusOne, Double, FromQ, Huge, Count };
/// Moves k, q_out or k_out into another tensor's buffer (raw offset: elements, modulo 4096).
enum class PlacementTarget : uint8_t { AsPlanned, IntoQ, IntoK, IntoQOut, IntoKOut, Count };
enum class PlacementOffset : uint8_t { SameStart, One, HalfSpan, AfterEnd, HeadDim, Count };
/// Strides of the positions array.
enum class PositionsLayout : uint8_t { Packed, Transposed, SharedRows, Padded, ZeroStrides, NegativeStride, Count };
/// Values stored in a position table or offsets array.
enum class PositionValues : uint8_t {
    Ascending,     ///< table: b * seq + s; offsets: 3 b
    RandomSmall,   ///< [0, 64)
    RandomWide,    ///< [0, 2^31)
    NearInt32Max,  ///< 2^31 - 1 - [0, 4) (table) / 2^31 - seq (offsets)
    OneNegative,   ///< small, one entry -1
    OneHuge,       ///< small, one entry 2^31 (int32: wraps to INT32_MIN) or INT64_MAX
    AllZero,
    RandomBits,
    Count
};
/// The scalar offset (OFFSET positions without data) relative to seq.
enum class ScalarOffset : uint8_t {
    Zero,
    One,
    Small,
    Thousand,
    PreciseLimit,  ///< the last position is 2^24 - 1
    Int32Limit,    ///< the last position is 2^31 - 1
    PastInt32,     ///< the last position is 2^31
    Negative,
    Int64Max,
    Count
};
/// cache_len relative to the largest position used.
enum class CacheLen : uint8_t { MaxPlusOne, MaxPlusThree, EqualMax, Zero, Negative, One, Huge, Overflow, Count };
/// cache_row_stride relative to P = R/2.
enum class RowStride : uint8_t { Default, Pairs, PairsPlusOne, PairsPlusSeven, PairsMinusOne, Int32Limit, Count };
enum class CacheDtype : uint8_t { F32, TensorDtype, F16, BF16, Count };
/// Values of the input tensors.
enum class Fill : uint8_t { Uniform, Nonzero, Adversarial, RandomBits, Count };
/// scaling.original_max_positions relative to the largest position m of the call.
enum class OriginalMax : uint8_t {
    LongestLength,   ///< m + 1: no sequence is longer than orig
    LargestPosition, ///< m (at least 1): the longest sequence is one token longer than orig
    HalfLargest,     ///< m / 2 (at least 1)
    Zero,
    Negative,
    Int32Limit,      ///< 2^31
    Count
};
/// scaling.max_positions (LONGROPE) relative to original_max_positions.
enum class MaxPositions : uint8_t { Default, SixteenOriginal, Original, Negative, Count };
/// A per-pair table of the scaling: short_factor, long_factor, inv_freq.
enum ScalingTable { kShortFactor, kLongFactor, kInvFreq, kScalingTableCount };
/// Values of a scaling table.
enum class ScalingTableMode : uint8_t {
    Valid,        ///< short_factor in [1, 2), long_factor in [1, 16), inv_freq in [-1, 1)
    Null,
    OneZero,      ///< valid, one entry 0
    OneNegative,  ///< valid, one entry negated
    OneNaN,
    OneInf,
    OneSteep,     ///< valid, one entry that makes |inv_freq| 2^20 (a factor of 2^-20)
    Count
};

/// varlen.cu_seqlens: NULL (no varlen), a split of the packed tokens into num_seqs sequences
/// (empty ones included), or such a split with one rule of cu_seqlens broken.
enum class Varlen : uint8_t {
    None,
    Split,
    FirstNonZero,  ///< cu_seqlens[0] = 1
    Decreasing,    ///< an inner entry above the next (num_seqs >= 2)
    LastShort,     ///< cu_seqlens[num_seqs] = total_tokens - 1
    LastLong,      ///< cu_seqlens[num_seqs] = total_tokens + 1
    Count
};
/// mrope.sections, pairs of the temporal, height and width streams, against P = rotary_dim/2.
enum class MropeSections : uint8_t {
    None,         ///< all 0: no mrope
    Qwen,         ///< P/4, then the rest in halves (Qwen2-VL's 16, 24, 24 of 64 pairs)
    RandomSplit,  ///< any split of P
    AllTemporal,  ///< P, 0, 0
    AllWidth,     ///< 0, 0, P
    SumShort,     ///< Qwen's, one pair short of P
    SumLong,      ///< Qwen's, one pair more than P
    Negative,     ///< sums to P with a negative section
    Count
};
/// mrope.stream_stride against the span S of one [batch][seq] stream of positions.data.
enum class StreamStride : uint8_t {
    Gapped,       ///< S + 3: unused entries (-1) between the streams
    Adjacent,     ///< S
    Shared,       ///< 0: all three streams read one table
    Overlapping,  ///< S / 2 (at least 1 when S > 1): streams share some entries
    Negative,     ///< -1
    Limit,        ///< 2^30, just beyond the largest allowed
    Count
};

/// The four tensors of a call, in the order recipes index them.
enum TensorIndex { kQ, kK, kQOut, kKOut, kTensorCount };

inline constexpr int kStrideEdits = 3;
inline constexpr int kPlacements = 3;  ///< k, q_out, k_out

struct StrideEdit {
    uint8_t target = 0;  ///< tensor = target % 4 (TensorIndex), axis = target / 4 % 4
    Pick op;             ///< StrideOp

    static constexpr uint8_t target_of(TensorIndex tensor, int axis) {
        return static_cast<uint8_t>(tensor + 4 * axis);
    }
};

struct Placement {
    Pick target;  ///< PlacementTarget
    Pick offset;  ///< PlacementOffset
};

struct Recipe {
    Pick isa_cap;      ///< kIsaCaps; rope_set_max_isa before the call
    Pick struct_size;  ///< StructSize
    Pick abi_version;  ///< kAbiVersions
    Pick report_size;  ///< ReportSize
    Pick null_target;  ///< NullTarget
    Pick style, direction, source, num_threads;
    Pick batch, seq, q_heads, head_dim;
    bool has_k = false;
    Pick k_heads;
    Pick rotary_dim, rotary_offset;
    Pick dtype;                                         ///< q's, kDtypes
    Pick other_dtype[3], other_shape[3], layout[4];     ///< OtherDtype, ShapeEdit (k, q_out, k_out); Layout
    Pick memory;                                        ///< Memory
    Pick head_pad;                                      ///< unused elements after every head: code % 4
    StrideEdit stride_edits[kStrideEdits];
    Placement placements[kPlacements];
    bool flush_start = false;  ///< buffers touch their guard page with their first byte, not their last
    Pick positions_kind, index_type;
    bool positions_data = false;  ///< OFFSET: per-batch offsets instead of the scalar
    Pick positions_layout, position_values, scalar_offset;
    Pick cache_len, cache_row_stride, cache_dtype;
    Pick base;         ///< kBases; raw: the bits of a double
    Pick attn_factor;  ///< kAttnFactors; raw: the bits of a float
    Pick fill;         ///< Fill
    uint32_t seed = 0; ///< values of tensors, positions and cache tables
    // Frequency scaling (spec §6), appended: inputs from before it decode as no scaling.
    Pick scaling_type;    ///< kScalingTypes
    Pick scaling_factor;  ///< kScalingFactors; raw: the bits of a float
    Pick original_max;    ///< OriginalMax
    Pick max_positions;   ///< MaxPositions
    Pick freq_factors;    ///< kFreqFactors
    Pick yarn_params[4];  ///< kYarnParams of beta_fast, beta_slow, mscale, mscale_all_dim; raw: float bits
    bool yarn_no_truncate = false;
    Pick scaling_tables[kScalingTableCount];  ///< ScalingTableMode
    // Packed variable-length batches (THD), mrope and the parity mode, appended: inputs from
    // before them decode as none of them.
    Pick varlen;             ///< Varlen
    Pick num_seqs;           ///< kNumSeqs
    Pick varlen_index_type;  ///< kIndexTypes of cu_seqlens
    Pick mrope_sections;     ///< MropeSections
    Pick stream_stride;      ///< StreamStride; raw: the stride
    Pick round_cos_sin;      ///< kRoundCosSin
    // Appended after a mark: left out of an encoding while zero, so older seeds keep their bytes.
    bool per_head_qkv = false;  ///< packed QKV plans: GPT-NeoX's [B, S, max(Hq, Hk), 3 D] buffer; others ignore it
};

/// Decodes any bytes (missing ones read as zero).
Recipe decode_recipe(const uint8_t *data, size_t size);
/// The bytes decode_recipe() turns back into `recipe` (raw values truncated to their field's width).
std::vector<uint8_t> encode_recipe(const Recipe &recipe);

/// The number of codes of a field's table or enum.
template <typename T, size_t N>
constexpr size_t code_count(const T (&)[N]) {
    return N;
}
template <typename Enum>
constexpr size_t code_count() {
    return static_cast<size_t>(Enum::Count);
}

}  // namespace ropegen::fuzz
