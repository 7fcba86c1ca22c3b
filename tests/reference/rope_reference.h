// SPDX-License-Identifier: Apache-2.0
// The test oracle: RoPE in fp64 from the rotation-matrix definition of ROPE_SPEC.md §2, plus what
// the tests need around it (the angles of each source, a cos/sin cache, f16/bf16 rounding, ulp
// distances and the §7 tolerances). Nothing here uses the library, so it can judge it.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

#include "ropegen/rope.h"

namespace ropegen::reference {

// --- spec §7 tolerances, as fractions of max(|x_pair|) ---------------------------------------
/// f32 with the cache source: a couple of ulps.
inline constexpr double kCacheRelTol = 0x1p-22;
/// compat source: against the fp64 rotation by the same f32 angles.
inline constexpr double kCompatRelTol = 0x1p-22;
/// precise source: against the exact rotation, positions below 2^24.
inline constexpr double kPreciseRelTol = 0x1p-21;
/// f16/bf16: the alternative absolute bound to "within kHalfUlps of y_ref rounded".
inline constexpr double kSixteenBitRelTol = 0x1p-22;
/// f16/bf16: ulps allowed against y_ref rounded to the dtype.
inline constexpr int64_t kSixteenBitUlps = 1;
/// The spec's positions bound for the precise source.
inline constexpr int64_t kPreciseMaxPosition = (int64_t{1} << 24) - 1;
/// Absolute slack for f32 results in the subnormal range, where the relative bound above is
/// smaller than one subnormal step: the f32 rotation rounds three times (two products, one sum),
/// each by at most half a subnormal step. The spec is silent there; "a couple of ulps" holds.
inline constexpr double kF32SubnormalSlack = 2 * 0x1p-149;

/// The tolerance of §7 for an f32 result of `source` (relative to max(|x_pair|)), scaled by
/// 2 |attn_factor| when |attn_factor| exceeds 1 (the spec assumes <= 1): cos and sin are scaled
/// by it, and rounded in binades whose ulp is at least twice that of values below 1. |attn_factor|
/// alone would bound a cache of true cos/sin (worst case 0.71 of it), but not a computed source,
/// which rounds cos x attn_factor once more (1.41), nor the fuzzer's tables of any values, whose
/// |c| and |s| are bounded apart (1.0).
double relative_tolerance(rope_source source, double attn_factor = 1.0);
/// The f16/bf16 alternative bound of §7 (kSixteenBitRelTol, relative to max(|x_pair|)), scaled
/// like relative_tolerance: the rotation runs in f32 on cos and sin scaled by attn_factor.
double sixteen_bit_tolerance(double attn_factor = 1.0);

// --- storage dtypes --------------------------------------------------------------------------
size_t dtype_size(rope_dtype dtype);
const char *dtype_name(rope_dtype dtype);
const char *style_name(rope_style style);
const char *source_name(rope_source source);

/// Rounds to nearest even into IEEE binary16; NaN stays NaN (quiet, top payload bits kept).
uint16_t f16_from_double(double value);
double f16_to_double(uint16_t bits);
/// Rounds to nearest even into bfloat16; NaN stays NaN.
uint16_t bf16_from_double(double value);
double bf16_to_double(uint16_t bits);

/// The storage bits of `value` rounded (once, nearest even) to `dtype`; for f32 the low 32 bits.
uint32_t encode(double value, rope_dtype dtype);
/// The exact value of storage bits of `dtype`.
double decode(uint32_t bits, rope_dtype dtype);
/// `value` rounded once to `dtype`, as a double.
double round_to(double value, rope_dtype dtype);
/// Distance in ulps between two finite or infinite values of `dtype` given as bits (-0 == +0).
int64_t ulp_distance(uint32_t a_bits, uint32_t b_bits, rope_dtype dtype);

// --- frequencies and angles (spec §1, §5) ----------------------------------------------------
/// compat inv_freq: f32(1 / f32(powf(base, f32(2i)/R))), powf correctly rounded.
std::vector<float> compat_inv_freq(double base, int rotary_dim);
/// compat angle: f32(float(m) * inv_freq), one rounding.
float compat_angle(int64_t position, float inv_freq);
/// The exact angle m * base^(-2i/R), in long double (64-bit mantissa).
long double exact_angle(int64_t position, int pair, int rotary_dim, double base);

/// cos and sin of the P pairs of one token, already multiplied by attn_factor.
struct CosSin {
    std::vector<double> cos, sin;
};

// --- frequency scaling (spec §6) ---------------------------------------------------------------
/// A scaling as the ABI's rope_scaling holds it, with the per-pair tables owned here.
struct Scaling {
    rope_scaling_type type = ROPE_SCALING_NONE;
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4, beta_fast = 32, beta_slow = 1;
    int64_t original_max = 0, max_positions = 0;
    double mscale = 0, mscale_all_dim = 0;
    bool truncate = true;
    std::vector<float> short_factor, long_factor, inv_freq;
};
/// True when the frequencies depend on the sequence length (DYNAMIC, LONGROPE).
bool depends_on_length(const Scaling &scaling);
/// The attention factor the scaling derives (YARN, LONGROPE; 1 for the others).
double scaling_attn_factor(const Scaling &scaling);
/// compat: transformers' float32 arithmetic (modeling_rope_utils.py) step by step, powf correctly
/// rounded, for a sequence of `length` tokens.
std::vector<float> compat_scaled_inv_freq(double base, int rotary_dim, const Scaling &scaling, int64_t length);
/// precise: the formulas of spec §6 in long double.
std::vector<long double> exact_scaled_inv_freq(double base, int rotary_dim, const Scaling &scaling, int64_t length);
/// cos/sin of the compat f32 angles (compat_angle) of `inv_freq`, times attn_factor.
CosSin compat_cos_sin(int64_t position, const std::vector<float> &inv_freq, double attn_factor);
/// cos/sin of the exact angles position * inv_freq, times attn_factor.
CosSin exact_cos_sin(int64_t position, const std::vector<long double> &inv_freq, double attn_factor);
/// The parity mode (spec §4): each value as an f32 rounded to `dtype`, as the kernel rounds it.
CosSin rounded_to_dtype(CosSin cs, rope_dtype dtype);
/// compat: exact cos/sin of the f32 angles of compat_angle().
CosSin compat_cos_sin(int64_t position, int rotary_dim, double base, double attn_factor);
/// precise: cos/sin of the exact angles.
CosSin exact_cos_sin(int64_t position, int rotary_dim, double base, double attn_factor);

/// A cos/sin table for the cache source: rows 0..len-1, row_stride >= P floats a row, each the
/// exact cos/sin times attn_factor rounded to f32; padding holds NaN so that reading it shows.
struct CosSinCache {
    int64_t len = 0, row_stride = 0;
    std::vector<float> cos, sin;
};
/// With `rows` given, only those rows are filled and every other value stays NaN: a kernel that
/// reads a row no position names fails the comparison (and long double sin/cos of unused rows,
/// slow where long double is software, such as aarch64, is skipped).
CosSinCache build_cache(int64_t len, int rotary_dim, int64_t row_stride, double base, double attn_factor,
                        const std::vector<int64_t> &rows = {});
/// The values the cache source reads for `position` (the f32 table entries, exactly).
CosSin cache_cos_sin(const CosSinCache &cache, int64_t position, int rotary_dim);

/// The inverse direction (spec §3) is the same rotation with s -> -s.
CosSin for_direction(CosSin cs, rope_direction direction);
/// mrope (spec §6): the first `temporal_pairs` pairs keep `temporal`'s cos/sin, the next
/// `height_pairs` take `height`'s, the rest `width`'s.
CosSin mrope_cos_sin(CosSin temporal, const CosSin &height, const CosSin &width, int temporal_pairs, int height_pairs);

// --- the rotation (spec §2) --------------------------------------------------------------------
/// The two lanes of pair i (absolute lanes, offset o included).
struct PairLanes {
    int a, b;
};
PairLanes pair_lanes(rope_style style, int pair, int rotary_dim, int rotary_offset);
/// The other lane of `lane`'s pair, or -1 for a lane outside the rotary slice.
int partner_lane(rope_style style, int lane, int rotary_dim, int rotary_offset);

/// The D x D block rotation of one token: identity outside [o, o+R), [[c,-s],[s,c]] on the lanes
/// of each pair. `structural[j*D+k]` marks entries that are part of the definition (the
/// identity's diagonal and the 2x2 blocks) as opposed to the zeros around them.
struct RotationMatrix {
    int dim = 0;
    std::vector<double> m;
    std::vector<bool> structural;
    /// y = M x, summing only structural entries: an Inf in x must not turn a lane it does not
    /// feed into NaN through a structural 0 * Inf; a block's 0 (sin at position 0) still does,
    /// as it does in the kernel's arithmetic.
    std::vector<double> apply(const std::vector<double> &x) const;
};
RotationMatrix rotation_matrix(int head_dim, int rotary_dim, int rotary_offset, rope_style style, const CosSin &cs);

/// The pair form of §2 (y[a] = x[a]c - x[b]s, y[b] = x[b]c + x[a]s); lanes outside copied.
std::vector<double> rotate_pairs(const std::vector<double> &x, int rotary_dim, int rotary_offset, rope_style style,
                                 const CosSin &cs);
/// The complex form of §8: (x_a + i x_b) * (c + i s).
std::vector<double> rotate_complex(const std::vector<double> &x, int rotary_dim, int rotary_offset, rope_style style,
                                   const CosSin &cs);

/// Lane permutation Pm of §2: lane i -> 2i and lane i+P -> 2i+1 within the rotary slice.
std::vector<int> half_to_interleaved_permutation(int head_dim, int rotary_dim, int rotary_offset);

}  // namespace ropegen::reference
