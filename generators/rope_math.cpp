// SPDX-License-Identifier: Apache-2.0
// The RoPE mathematics as Halide expressions (see rope_math.h).
#include "rope_math.h"

#include <cmath>

#include "ropegen/rope.h"

namespace ropegen {

using Halide::cast;
using Halide::Expr;
using Halide::select;

namespace {
// Halide reads a bare double as f32; the sin/cos core is f64 throughout.
Expr f64(double value) {
    return Expr(value);
}
}  // namespace

namespace {

// 2^x in f64 for |x| < 1000, vectorizable: 2^round(x) from the exponent bits times a Taylor
// series of 2^f = e^(f ln 2) on |f| <= 1/2 (first omitted term below 2^-57), in Horner form with
// the coefficients 1/k! as constants: no division (a vector f64 divide costs ~20 multiplies).
Expr exp2_f64(const Expr &x) {
    constexpr double kLn2 = 0x1.62e42fefa39efp-1;
    constexpr int kTerms = 14;
    Expr n = Halide::round(x);
    Expr t = (x - n) * f64(kLn2);
    double inverse_factorials[kTerms + 1] = {1.0};
    for (int k = 1; k <= kTerms; k++) {
        inverse_factorials[k] = inverse_factorials[k - 1] / k;
    }
    Expr sum = f64(inverse_factorials[kTerms]);
    for (int k = kTerms - 1; k >= 0; k--) {
        sum = sum * t + f64(inverse_factorials[k]);
    }
    Expr scale = Halide::reinterpret<double>((cast<int64_t>(n) + 1023) << 52);
    return sum * scale;
}

// base^exponent for base > 1 as 2^(exponent * log2(base)): log2(base) is one scalar per call,
// the rest is vector arithmetic (a libm pow per pair costs more than the whole decode step).
Expr power_f64(const Expr &base, const Expr &exponent) {
    constexpr double kInvLn2 = 0x1.71547652b82fep+0;
    return exp2_f64(exponent * (Halide::log(base) * f64(kInvLn2)));
}

}  // namespace

Expr depends_on_length(const Scaling &scaling) {
    return scaling.type == ROPE_SCALING_DYNAMIC || scaling.type == ROPE_SCALING_LONGROPE;
}

Expr scaled_inv_freq(bool compat, const Expr &pair, const Expr &base, const Expr &rotary_dim, const Scaling &sc,
                     const Expr &length) {
    // compat computes in f32 where transformers does (torch tensors) and in f64 where it uses
    // Python floats (scalars of the config), converting at the same points; the kernels'
    // strict_float target keeps each step rounded as written (no fused multiply-add).
    const Halide::Type real = compat ? Halide::Float(32) : Halide::Float(64);
    auto to_real = [&](const Expr &value) { return cast(real, value); };
    auto pow_real = [&](const Expr &x, const Expr &y) {  // powf / pow, x > 0
        return to_real(power_f64(cast<double>(x), cast<double>(y)));
    };
    const Expr one = to_real(1), two_pi = to_real(f64(2 * M_PI));
    const Expr rotary = cast<double>(rotary_dim), orig = cast<double>(sc.original_max);
    const Expr factor = to_real(sc.factor);

    // DYNAMIC: a sequence longer than orig rotates with base' = base * (f*L/orig - (f-1))^(R/(R-2)).
    const Expr longer = length > sc.original_max;
    Expr grown = compat ? to_real(sc.factor) * cast<float>(length) / cast<float>(sc.original_max) -
                              cast<float>(cast<double>(sc.factor) - 1)
                        : cast<double>(sc.factor) * cast<double>(length) / orig - (cast<double>(sc.factor) - 1);
    grown = to_real(base) * pow_real(grown, rotary / (rotary - 2));  // torch keeps a Python float exponent in f64
    const Expr dynamic_base = select(sc.type == ROPE_SCALING_DYNAMIC && longer, grown, to_real(base));

    // base^(2i/R) and the unscaled inv_freq (spec §1, §5).
    const Expr exponent = compat ? Expr(cast<float>(2 * pair) / cast<float>(rotary_dim)) : Expr(cast<double>(2 * pair) / rotary);
    const Expr pos_freq = pow_real(dynamic_base, exponent);
    const Expr inv_freq = one / pos_freq;

    // YARN: interpolation (inv_freq / f) ramped into extrapolation (inv_freq) between the pairs that
    // turn beta_fast and beta_slow times over orig positions.
    auto correction = [&](const Expr &rotations) {
        return rotary * Halide::log(orig / (cast<double>(rotations) * f64(2 * M_PI))) / (2 * Halide::log(cast<double>(base)));
    };
    Expr low = correction(sc.beta_fast), high = correction(sc.beta_slow);
    // Both bounds clamped to [0, R-1] (transformers clamps low only below and high only above,
    // which inverts the ramp when every pair lies on one side of it).
    low = Halide::clamp(select(sc.yarn_truncate, Halide::floor(low), low), f64(0), rotary - 1);
    high = Halide::clamp(select(sc.yarn_truncate, Halide::ceil(high), high), f64(0), rotary - 1);
    high = select(low == high, high + f64(0.001), high);
    const Expr ramp = Halide::clamp((to_real(pair) - to_real(low)) / to_real(high - low), to_real(0), one);
    const Expr extrapolation = one - ramp;
    const Expr yarn = (one / (factor * pos_freq)) * (one - extrapolation) + inv_freq * extrapolation;

    // LONGROPE: per-pair factors, long ones for a sequence longer than orig.
    const Expr longrope = one / (to_real(select(longer, sc.long_factor, sc.short_factor)) * pos_freq);

    // LLAMA3: wavelengths beyond orig/low_freq_factor are interpolated, those below
    // orig/high_freq_factor kept, smoothly in between.
    // torch divides a Python scalar by a tensor as the tensor's reciprocal times the scalar (two
    // roundings); compat does the same (a tensor divided by a scalar is a true division).
    const Expr wavelen = (one / inv_freq) * two_pi;
    const Expr low_wavelen = to_real(orig / cast<double>(sc.low_freq_factor));
    const Expr high_wavelen = to_real(orig / cast<double>(sc.high_freq_factor));
    const Expr interpolated = select(wavelen > low_wavelen, inv_freq / factor, inv_freq);
    const Expr smooth = ((one / wavelen) * to_real(orig) - to_real(sc.low_freq_factor)) /
                        to_real(cast<double>(sc.high_freq_factor) - cast<double>(sc.low_freq_factor));
    const Expr smoothed = (one - smooth) * interpolated / factor + smooth * interpolated;
    const Expr medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    const Expr llama3 = select(medium, smoothed, interpolated);

    const Expr scaled = select(sc.type == ROPE_SCALING_LINEAR, inv_freq / factor,     //
                               sc.type == ROPE_SCALING_YARN, yarn,                    //
                               sc.type == ROPE_SCALING_LONGROPE, longrope,            //
                               sc.type == ROPE_SCALING_LLAMA3, llama3,                //
                               sc.type == ROPE_SCALING_INV_FREQ, to_real(sc.given_inv_freq),  //
                               inv_freq);                                             // NONE, DYNAMIC
    return scaled;
}

std::pair<Expr, Expr> sin_cos(const Expr &angle) {
    // pi/2 split into four parts: 21, 21 and 22 significant bits, then the f64 remainder. For
    // k < 2^32 (|angle| < 2^32 pi/2) k times either of the first two is exact and so are their
    // subtractions; the third's product rounds by at most 2^-65, and the last two subtractions by
    // half an ulp of r.
    constexpr double kPiOver2Part1 = 0x1.921fb00000000p+0;
    constexpr double kPiOver2Part2 = 0x1.5110b00000000p-22;
    constexpr double kPiOver2Part3 = 0x1.1846980000000p-44;
    constexpr double kPiOver2Part4 = 0x1.3198a2e037073p-69;
    constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;

    // k = round(angle * 2/pi) by adding 1.5 * 2^52, which leaves no fraction bits (ties to even,
    // as round does, for |k| < 2^51): cheaper than a vector round and a conversion, and the sum's
    // low bits are k in two's complement, so the quadrant needs no conversion either.
    constexpr double kRoundingShift = 0x1.8p52;
    Expr shifted = angle * f64(kTwoOverPi) + f64(kRoundingShift);
    Expr k = shifted - f64(kRoundingShift);
    Expr r = angle - k * f64(kPiOver2Part1);
    r = r - k * f64(kPiOver2Part2);
    r = r - k * f64(kPiOver2Part3);
    r = r - k * f64(kPiOver2Part4);
    Expr quadrant = Halide::reinterpret<uint64_t>(shifted) & 3;

    // Polynomials in r^2 on |r| <= pi/4, Horner from the highest coefficient: sin(r) = r * S(r^2),
    // cos(r) = C(r^2). S and C keep the exact 1 and -1/2 of the Taylor series; the other
    // coefficients are Chebyshev fits (mpmath.chebyfit at 50 digits) of (sin(r)/r - 1)/r^2 and
    // (cos(r) - 1 + r^2/2)/r^4. Evaluated in f64, the errors are below 1e-8 (sin) and 1e-9
    // (cos): 0.16 and 0.02 of an f32 ulp at 0.7, so the f32 rounding that follows dominates,
    // with fewer operations than a Taylor series of that accuracy.
    Expr r2 = r * r;
    auto horner = [&](std::initializer_list<double> coefficients) {  // ascending powers of r^2
        auto it = std::rbegin(coefficients);
        Expr sum = f64(*it);
        for (++it; it != std::rend(coefficients); ++it) {
            sum = sum * r2 + f64(*it);
        }
        return sum;
    };
    Expr sin_r = r * horner({1.0, -0x1.555552a4a4a44p-3, 0x1.110c28a771a24p-7, -0x1.9ac9b03bb7fbbp-13});
    Expr cos_r = horner({1.0, -0.5, 0x1.5555544178832p-5, -0x1.6c12d2ef379dcp-10, 0x1.9bd89bc2b0a75p-16});

    // sin(k*pi/2 + r) and cos(k*pi/2 + r) by quadrant.
    // The signs flip through the sign bit, which is what negation does (-0 included).
    Expr odd = (quadrant & 1) != 0;
    Expr sin_base = select(odd, cos_r, sin_r);
    Expr cos_base = select(odd, sin_r, cos_r);
    auto negated_if = [](const Expr &value, const Expr &bit_1) {  // bit_1: 2 to negate, else 0
        return Halide::reinterpret<double>(Halide::reinterpret<uint64_t>(value) ^ (bit_1 << 62));
    };
    Expr sin_value = negated_if(sin_base, quadrant & 2);
    Expr cos_value = negated_if(cos_base, (quadrant + 1) & 2);
    return {sin_value, cos_value};
}

Halide::Tuple rotate_pair(const Expr &x_a, const Expr &x_b, const Expr &c, const Expr &s) {
    return {x_a * c - x_b * s, x_b * c + x_a * s};
}

Halide::Tuple lane_cos_sin(const Expr &c, const Expr &s, const Expr &first) {
    return {c, s * select(first, -1.0f, 1.0f)};
}

Expr rotate_lane(const Expr &x, const Expr &partner, const Expr &c, const Expr &s) {
    return x * c + partner * s;
}

Expr bf16_to_f32_bits(const Expr &x) {
    return Halide::reinterpret<float>(cast<uint32_t>(Halide::reinterpret<uint16_t>(x)) << 16);
}

Expr f32_to_bf16_bits(const Expr &value) {
    const Expr bits = Halide::reinterpret<uint32_t>(value);
    auto u32 = [](uint32_t value) -> Expr { return Halide::Internal::UIntImm::make(Halide::UInt(32), value); };
    const Expr rounded = (bits + (u32(0x7fff) + ((bits >> 16) & u32(1)))) >> 16;
    const Expr is_nan = (bits & u32(0x7fffffff)) > u32(0x7f800000);
    const Expr quiet_nan = (bits >> 16) | u32(0x40);
    return Halide::reinterpret(Halide::BFloat(16), cast<uint16_t>(select(is_nan, quiet_nan, rounded)));
}

}  // namespace ropegen
