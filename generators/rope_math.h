// SPDX-License-Identifier: Apache-2.0
// The RoPE mathematics of ../shared/ROPE_SPEC.md as Halide expressions, with no scheduling:
// frequencies (spec §1, §5), vectorizable sin/cos with full range reduction (spec §5), and the
// 2x2 rotation (spec §2-§3). The generator composes these; nothing else defines the math.
#pragma once

#include "Halide.h"

namespace ropegen {

/// inv_freq[i] = base^(-2i/R) the way transformers computes it in float32 (spec §5 `compat`):
/// f32(1 / f32(powf(base, f32(2i)/R))). powf is evaluated in f64 (to ~2^-48) and rounded once,
/// as a good libm's powf rounds.
Halide::Expr compat_inv_freq(const Halide::Expr &pair, const Halide::Expr &base, const Halide::Expr &rotary_dim);

/// inv_freq[i] = base^(-2i/R) in f64 (spec §5 `precise`).
Halide::Expr precise_inv_freq(const Halide::Expr &pair, const Halide::Expr &base, const Halide::Expr &rotary_dim);

/// sin and cos of an f64 angle |angle| < 2^31, both f64, vectorizable (no libm call). The angle
/// is reduced by k*pi/2 with a four-part Cody-Waite constant whose parts are exact when multiplied
/// by k < 2^31, so large angles (long contexts) keep full accuracy; then short polynomials on
/// [-pi/4, pi/4], accurate far below one f32 ulp.
std::pair<Halide::Expr, Halide::Expr> sin_cos(const Halide::Expr &angle);

/// The block rotation of spec §2 applied to one pair (x_a, x_b) with c = cos, s = sin; the
/// inverse direction (spec §3) is the same map with s negated by the caller.
Halide::Tuple rotate_pair(const Halide::Expr &x_a, const Halide::Expr &x_b, const Halide::Expr &c, const Halide::Expr &s);

/// A bfloat16 value widened to f32 exactly, through its bit pattern (its 16 high bits).
Halide::Expr bf16_to_f32_bits(const Halide::Expr &x);

/// An f32 value rounded to bfloat16 to nearest even through its bit pattern; NaN stays NaN (quiet,
/// sign kept) and values past the largest bf16 become infinities, as a conversion would.
Halide::Expr f32_to_bf16_bits(const Halide::Expr &value);

}  // namespace ropegen
