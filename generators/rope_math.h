// SPDX-License-Identifier: Apache-2.0
// The RoPE mathematics of ../shared/ROPE_SPEC.md as Halide expressions, with no scheduling:
// frequencies (spec §1, §5), vectorizable sin/cos with full range reduction (spec §5), and the
// 2x2 rotation (spec §2-§3). The generator composes these; nothing else defines the math.
#pragma once

#include "Halide.h"

namespace ropegen {

/// The frequency scaling of a call (spec §6), as the kernel's scalar inputs; `type` holds a
/// rope_scaling_type. Validation (runtime/src/validate.cpp) has applied the defaults.
struct Scaling {
    Halide::Expr type;                               ///< int32
    Halide::Expr factor;                             ///< f32: LINEAR, DYNAMIC, YARN, LLAMA3
    Halide::Expr original_max;                       ///< int32: DYNAMIC, YARN, LONGROPE, LLAMA3
    Halide::Expr low_freq_factor, high_freq_factor;  ///< f32: LLAMA3
    Halide::Expr beta_fast, beta_slow;               ///< f32: YARN
    Halide::Expr yarn_truncate;                      ///< bool: YARN
    Halide::Expr short_factor, long_factor;          ///< f32 of the pair: LONGROPE
    Halide::Expr given_inv_freq;                     ///< f32 of the pair: INV_FREQ
};

/// True for the scalings whose frequencies depend on the length of the sequence (DYNAMIC, LONGROPE).
Halide::Expr depends_on_length(const Scaling &scaling);

/// inv_freq of `pair` under `scaling`, for a sequence of `length` tokens (its largest position + 1,
/// an int64: 2^31 for a sequence that ends at the last int32 position; read only when
/// depends_on_length). compat: f32, following transformers' float32 arithmetic
/// step by step (modeling_rope_utils.py); precise: f64, the formulas of spec §6.
Halide::Expr scaled_inv_freq(bool compat, const Halide::Expr &pair, const Halide::Expr &base,
                             const Halide::Expr &rotary_dim, const Scaling &scaling, const Halide::Expr &length);

/// sin and cos of an f64 angle, both f64, vectorizable (no libm call). The angle is reduced by
/// k*pi/2 with a four-part Cody-Waite constant whose leading parts are exact when multiplied by
/// k < 2^32 (|angle| < 2^32 pi/2), so large angles (long contexts) keep full accuracy; the
/// dispatcher holds calls to position x |inv_freq| < 2^32, which leaves a margin of pi/2 for f32
/// rounding; then short polynomials on
/// [-pi/4, pi/4], accurate to a fifth of an f32 ulp. Needs the strict_float target feature (every
/// ropegen kernel has it): reassociation would fold the rounding to an integer and the reduction.
std::pair<Halide::Expr, Halide::Expr> sin_cos(const Halide::Expr &angle);

/// The block rotation of spec §2 applied to one pair (x_a, x_b) with c = cos, s = sin; the
/// inverse direction (spec §3) is the same map with s negated by the caller.
Halide::Tuple rotate_pair(const Halide::Expr &x_a, const Halide::Expr &x_b, const Halide::Expr &c, const Halide::Expr &s);

/// cos and sin as one lane of a pair takes them (rotate_lane): sin negated for the pair's first
/// lane (`first`).
Halide::Tuple lane_cos_sin(const Halide::Expr &c, const Halide::Expr &s, const Halide::Expr &first);

/// One lane of the rotation of spec §2: `x` is the lane, `partner` the other lane of its pair,
/// `c` and `s` as lane_cos_sin gives them. Bit for bit the lane rotate_pair gives:
/// x_a * c + x_b * (-s) is x_a * c - x_b * s, as negation is exact.
Halide::Expr rotate_lane(const Halide::Expr &x, const Halide::Expr &partner, const Halide::Expr &c, const Halide::Expr &s);

/// A bfloat16 value widened to f32 exactly, through its bit pattern (its 16 high bits).
Halide::Expr bf16_to_f32_bits(const Halide::Expr &x);

/// An f32 value rounded to bfloat16 to nearest even through its bit pattern; NaN stays NaN (quiet,
/// sign kept) and values past the largest bf16 become infinities, as a conversion would.
Halide::Expr f32_to_bf16_bits(const Halide::Expr &value);

}  // namespace ropegen
