// SPDX-License-Identifier: Apache-2.0
// The fp64 oracle (see rope_reference.h). Written from ROPE_SPEC.md only.
#include "rope_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace ropegen::reference {

namespace {

// Rounds a finite positive `value` to nearest even in a binary format with `precision` bits of
// significand (hidden bit included) and minimum normal exponent `min_exponent`; values beyond
// `max_finite` after rounding become infinity (IEEE overflow under round-to-nearest).
double round_to_format(double value, int precision, int min_exponent, double max_finite) {
    const int exponent = std::max(std::ilogb(value), min_exponent);
    const double quantum = std::ldexp(1.0, exponent - precision + 1);
    // Scaling by a power of two is exact; nearbyint rounds ties to even in the default mode.
    const double rounded = std::nearbyint(value / quantum) * quantum;
    return rounded > max_finite ? std::numeric_limits<double>::infinity() : rounded;
}

constexpr double kF16Max = 65504.0;
constexpr double kBf16Max = 0x1.fep127;

template <typename To, typename From>
To bit_cast(const From &from) {
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}

}  // namespace

namespace {
double attn_scale(double attn_factor) {
    return std::fabs(attn_factor) > 1 ? 2 * std::fabs(attn_factor) : 1.0;
}
}  // namespace

double sixteen_bit_tolerance(double attn_factor) {
    return kSixteenBitRelTol * attn_scale(attn_factor);
}

double relative_tolerance(rope_source source, double attn_factor) {
    const double scale = attn_scale(attn_factor);
    switch (source) {
        case ROPE_SOURCE_CACHE: return kCacheRelTol * scale;
        case ROPE_SOURCE_COMPAT: return kCompatRelTol * scale;
        case ROPE_SOURCE_PRECISE: return kPreciseRelTol * scale;
    }
    throw std::invalid_argument("relative_tolerance: unknown source");
}

size_t dtype_size(rope_dtype dtype) {
    return dtype == ROPE_DTYPE_F32 ? 4 : 2;
}

const char *dtype_name(rope_dtype dtype) {
    switch (dtype) {
        case ROPE_DTYPE_F32: return "f32";
        case ROPE_DTYPE_F16: return "f16";
        case ROPE_DTYPE_BF16: return "bf16";
    }
    return "unknown-dtype";
}

const char *style_name(rope_style style) {
    return style == ROPE_STYLE_HALF ? "half" : style == ROPE_STYLE_INTERLEAVED ? "interleaved" : "unknown-style";
}

const char *source_name(rope_source source) {
    switch (source) {
        case ROPE_SOURCE_CACHE: return "cache";
        case ROPE_SOURCE_COMPAT: return "compat";
        case ROPE_SOURCE_PRECISE: return "precise";
    }
    return "unknown-source";
}

uint16_t f16_from_double(double value) {
    const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
    if (std::isnan(value)) {
        return sign | 0x7e00;
    }
    const double magnitude = std::fabs(value);
    if (magnitude == 0) {
        return sign;
    }
    const double rounded = std::isinf(magnitude) ? magnitude : round_to_format(magnitude, 11, -14, kF16Max);
    if (std::isinf(rounded)) {
        return sign | 0x7c00;
    }
    if (rounded < 0x1p-14) {  // subnormal: a multiple of 2^-24
        return sign | static_cast<uint16_t>(rounded * 0x1p24);
    }
    const int exponent = std::ilogb(rounded);
    const auto significand = static_cast<uint16_t>(std::ldexp(rounded, 10 - exponent));  // 1024..2047
    return sign | static_cast<uint16_t>((exponent + 15) << 10) | static_cast<uint16_t>(significand - 1024);
}

double f16_to_double(uint16_t bits) {
    const double sign = (bits & 0x8000) ? -1.0 : 1.0;
    const int exponent = (bits >> 10) & 0x1f;
    const int mantissa = bits & 0x3ff;
    if (exponent == 0x1f) {
        return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
    }
    if (exponent == 0) {
        return sign * std::ldexp(mantissa, -24);
    }
    return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

uint16_t bf16_from_double(double value) {
    if (std::isnan(value)) {
        return std::signbit(value) ? 0xffc0 : 0x7fc0;
    }
    double rounded = value;
    if (std::isfinite(value) && value != 0) {
        rounded = std::copysign(round_to_format(std::fabs(value), 8, -126, kBf16Max), value);
    }
    // `rounded` is a bf16 value, so its f32 image is exact and the top half holds it.
    return static_cast<uint16_t>(bit_cast<uint32_t>(static_cast<float>(rounded)) >> 16);
}

double bf16_to_double(uint16_t bits) {
    return bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint32_t encode(double value, rope_dtype dtype) {
    switch (dtype) {
        case ROPE_DTYPE_F32: return bit_cast<uint32_t>(static_cast<float>(value));
        case ROPE_DTYPE_F16: return f16_from_double(value);
        case ROPE_DTYPE_BF16: return bf16_from_double(value);
    }
    throw std::invalid_argument("encode: unknown dtype");
}

double decode(uint32_t bits, rope_dtype dtype) {
    switch (dtype) {
        case ROPE_DTYPE_F32: return bit_cast<float>(bits);
        case ROPE_DTYPE_F16: return f16_to_double(static_cast<uint16_t>(bits));
        case ROPE_DTYPE_BF16: return bf16_to_double(static_cast<uint16_t>(bits));
    }
    throw std::invalid_argument("decode: unknown dtype");
}

double round_to(double value, rope_dtype dtype) {
    return decode(encode(value, dtype), dtype);
}

int64_t ulp_distance(uint32_t a_bits, uint32_t b_bits, rope_dtype dtype) {
    // Sign-magnitude to a monotonic integer line on which -0 and +0 coincide.
    const int sign_bit = dtype == ROPE_DTYPE_F32 ? 31 : 15;
    const auto ordered = [sign_bit](uint32_t bits) {
        const int64_t magnitude = bits & ((uint32_t{1} << sign_bit) - 1);
        return (bits >> sign_bit) & 1 ? -magnitude : magnitude;
    };
    const int64_t difference = ordered(a_bits) - ordered(b_bits);
    return difference < 0 ? -difference : difference;
}

std::vector<float> compat_inv_freq(double base, int rotary_dim) {
    std::vector<float> inv_freq(rotary_dim / 2);
    const float base_f32 = static_cast<float>(base);
    for (int i = 0; i < rotary_dim / 2; i++) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);  // f32 division
        // powf correctly rounded: the f64 pow of the same f32 operands, rounded once.
        const auto power = static_cast<float>(std::pow(static_cast<double>(base_f32), static_cast<double>(exponent)));
        inv_freq[i] = 1.0f / power;  // f32 division
    }
    return inv_freq;
}

float compat_angle(int64_t position, float inv_freq) {
    // The product of two floats is exact in double, so this rounds once, like an f32 multiply.
    return static_cast<float>(static_cast<double>(static_cast<float>(position)) * static_cast<double>(inv_freq));
}

long double exact_angle(int64_t position, int pair, int rotary_dim, double base) {
    const long double exponent = -static_cast<long double>(2 * pair) / static_cast<long double>(rotary_dim);
    return static_cast<long double>(position) * std::pow(static_cast<long double>(base), exponent);
}

CosSin compat_cos_sin(int64_t position, int rotary_dim, double base, double attn_factor) {
    return compat_cos_sin(position, compat_inv_freq(base, rotary_dim), attn_factor);
}

CosSin exact_cos_sin(int64_t position, int rotary_dim, double base, double attn_factor) {
    CosSin cs;
    for (int i = 0; i < rotary_dim / 2; i++) {
        const long double angle = exact_angle(position, i, rotary_dim, base);
        cs.cos.push_back(static_cast<double>(std::cos(angle)) * attn_factor);
        cs.sin.push_back(static_cast<double>(std::sin(angle)) * attn_factor);
    }
    return cs;
}

bool depends_on_length(const Scaling &scaling) {
    return scaling.type == ROPE_SCALING_DYNAMIC || scaling.type == ROPE_SCALING_LONGROPE;
}

double scaling_attn_factor(const Scaling &sc) {
    auto g = [](double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; };
    if (sc.type == ROPE_SCALING_YARN) {
        return sc.mscale != 0 && sc.mscale_all_dim != 0 ? g(sc.factor, sc.mscale) / g(sc.factor, sc.mscale_all_dim)
                                                        : g(sc.factor, 1.0);
    }
    if (sc.type == ROPE_SCALING_LONGROPE && sc.max_positions > sc.original_max) {
        const double ratio = static_cast<double>(sc.max_positions) / static_cast<double>(sc.original_max);
        return std::sqrt(1 + std::log(ratio) / std::log(static_cast<double>(sc.original_max)));
    }
    return 1.0;
}

namespace {

// YaRN's ramp bounds (spec §6), in double as transformers computes them (Python floats).
std::pair<double, double> yarn_bounds(double base, int rotary_dim, const Scaling &sc) {
    auto correction = [&](double rotations) {
        return rotary_dim * std::log(static_cast<double>(sc.original_max) / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction(sc.beta_fast), high = correction(sc.beta_slow);
    if (sc.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::clamp(low, 0.0, rotary_dim - 1.0);  // both bounds (spec §6), unlike transformers
    high = std::clamp(high, 0.0, rotary_dim - 1.0);
    return {low, low == high ? high + 0.001 : high};
}

}  // namespace

std::vector<float> compat_scaled_inv_freq(double base, int rotary_dim, const Scaling &sc, int64_t length) {
    auto powf_rounded = [](float x, float y) { return static_cast<float>(std::pow(static_cast<double>(x), static_cast<double>(y))); };
    const bool longer = length > sc.original_max;
    const auto factor = static_cast<float>(sc.factor);
    float base_f32 = static_cast<float>(base);
    if (sc.type == ROPE_SCALING_DYNAMIC && longer) {
        const float grown = factor * static_cast<float>(length) / static_cast<float>(sc.original_max) -
                            static_cast<float>(sc.factor - 1);
        base_f32 = base_f32 * static_cast<float>(std::pow(static_cast<double>(grown), rotary_dim / (rotary_dim - 2.0)));
    }
    const auto [low, high] = yarn_bounds(base, rotary_dim, sc);
    const int pairs = rotary_dim / 2;
    std::vector<float> result(pairs);
    for (int i = 0; i < pairs; i++) {
        const float pos_freq = powf_rounded(base_f32, static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
        const float inv_freq = 1.0f / pos_freq;
        float value = inv_freq;
        switch (sc.type) {
            case ROPE_SCALING_LINEAR: value = inv_freq / factor; break;
            case ROPE_SCALING_YARN: {
                const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                              0.0f, 1.0f);
                const float extrapolation = 1.0f - ramp;
                const float interpolation = 1.0f / (factor * pos_freq);
                const float kept = interpolation * (1.0f - extrapolation);  // separate statements: no fused multiply-add
                const float extrapolated = inv_freq * extrapolation;
                value = kept + extrapolated;
                break;
            }
            case ROPE_SCALING_LONGROPE:
                value = 1.0f / ((longer ? sc.long_factor : sc.short_factor)[i] * pos_freq);
                break;
            case ROPE_SCALING_LLAMA3: {
                // torch's scalar / tensor: the reciprocal times the scalar.
                const float wavelen = (1.0f / inv_freq) * static_cast<float>(2 * M_PI);
                const auto low_wavelen = static_cast<float>(sc.original_max / sc.low_freq_factor);
                const auto high_wavelen = static_cast<float>(sc.original_max / sc.high_freq_factor);
                const float interpolated = wavelen > low_wavelen ? inv_freq / factor : inv_freq;
                const float smooth = ((1.0f / wavelen) * static_cast<float>(sc.original_max) - static_cast<float>(sc.low_freq_factor)) /
                                     static_cast<float>(sc.high_freq_factor - sc.low_freq_factor);
                const float scaled_down = (1.0f - smooth) * interpolated / factor;
                const float kept = smooth * interpolated;
                const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
                value = medium ? scaled_down + kept : interpolated;
                break;
            }
            case ROPE_SCALING_INV_FREQ: value = sc.inv_freq[i]; break;
            default: break;  // NONE, DYNAMIC
        }
        result[i] = value;
    }
    return result;
}

std::vector<long double> exact_scaled_inv_freq(double base, int rotary_dim, const Scaling &sc, int64_t length) {
    using real = long double;
    const bool longer = length > sc.original_max;
    const real factor = sc.factor, orig = static_cast<real>(sc.original_max), r = rotary_dim;
    real base_l = base;
    if (sc.type == ROPE_SCALING_DYNAMIC && longer) {
        base_l *= std::pow(factor * static_cast<real>(length) / orig - (factor - 1), r / (r - 2));
    }
    const auto [low, high] = yarn_bounds(base, rotary_dim, sc);
    std::vector<real> result(rotary_dim / 2);
    for (int i = 0; i < rotary_dim / 2; i++) {
        const real inv_freq = std::pow(base_l, -static_cast<real>(2 * i) / r);
        real value = inv_freq;
        switch (sc.type) {
            case ROPE_SCALING_LINEAR: value = inv_freq / factor; break;
            case ROPE_SCALING_YARN: {
                const real extra = 1 - std::clamp((i - static_cast<real>(low)) / static_cast<real>(high - low), real(0), real(1));
                value = inv_freq / factor * (1 - extra) + inv_freq * extra;
                break;
            }
            case ROPE_SCALING_LONGROPE: value = inv_freq / (longer ? sc.long_factor : sc.short_factor)[i]; break;
            case ROPE_SCALING_LLAMA3: {
                const real wavelen = 2 * static_cast<real>(M_PI) / inv_freq;
                const real low_wavelen = orig / sc.low_freq_factor, high_wavelen = orig / sc.high_freq_factor;
                if (wavelen > low_wavelen) {
                    value = inv_freq / factor;
                } else if (wavelen >= high_wavelen) {
                    const real smooth = (orig / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
                    value = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
                }
                break;
            }
            case ROPE_SCALING_INV_FREQ: value = sc.inv_freq[i]; break;
            default: break;
        }
        result[i] = value;
    }
    return result;
}

CosSin compat_cos_sin(int64_t position, const std::vector<float> &inv_freq, double attn_factor) {
    CosSin cs;
    for (float frequency : inv_freq) {
        const long double angle = compat_angle(position, frequency);
        cs.cos.push_back(static_cast<double>(std::cos(angle)) * attn_factor);
        cs.sin.push_back(static_cast<double>(std::sin(angle)) * attn_factor);
    }
    return cs;
}

CosSin exact_cos_sin(int64_t position, const std::vector<long double> &inv_freq, double attn_factor) {
    CosSin cs;
    for (long double frequency : inv_freq) {
        const long double angle = static_cast<long double>(position) * frequency;
        cs.cos.push_back(static_cast<double>(std::cos(angle)) * attn_factor);
        cs.sin.push_back(static_cast<double>(std::sin(angle)) * attn_factor);
    }
    return cs;
}

CosSin rounded_to_dtype(CosSin cs, rope_dtype dtype) {
    for (std::vector<double> *values : {&cs.cos, &cs.sin}) {
        for (double &value : *values) {
            value = round_to(static_cast<float>(value), dtype);
        }
    }
    return cs;
}

CosSinCache build_cache(int64_t len, int rotary_dim, int64_t row_stride, double base, double attn_factor,
                        const std::vector<int64_t> &rows) {
    const int pairs = rotary_dim / 2;
    if (row_stride < pairs) {
        throw std::invalid_argument("build_cache: row_stride < rotary_dim / 2");
    }
    CosSinCache cache;
    cache.len = len;
    cache.row_stride = row_stride;
    cache.cos.assign(static_cast<size_t>(len * row_stride), std::numeric_limits<float>::quiet_NaN());
    cache.sin.assign(cache.cos.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<bool> wanted(static_cast<size_t>(len), rows.empty());
    for (int64_t row : rows) {
        if (row < 0 || row >= len) {
            throw std::invalid_argument("build_cache: a row is outside [0, len)");
        }
        wanted[static_cast<size_t>(row)] = true;
    }
    for (int64_t row = 0; row < len; row++) {
        if (!wanted[static_cast<size_t>(row)]) {
            continue;
        }
        const CosSin cs = exact_cos_sin(row, rotary_dim, base, attn_factor);
        for (int i = 0; i < pairs; i++) {
            cache.cos[row * row_stride + i] = static_cast<float>(cs.cos[i]);
            cache.sin[row * row_stride + i] = static_cast<float>(cs.sin[i]);
        }
    }
    return cache;
}

CosSin cache_cos_sin(const CosSinCache &cache, int64_t position, int rotary_dim) {
    CosSin cs;
    for (int i = 0; i < rotary_dim / 2; i++) {
        cs.cos.push_back(cache.cos.at(position * cache.row_stride + i));
        cs.sin.push_back(cache.sin.at(position * cache.row_stride + i));
    }
    return cs;
}

CosSin for_direction(CosSin cs, rope_direction direction) {
    if (direction == ROPE_INVERSE) {
        for (double &s : cs.sin) {
            s = -s;
        }
    }
    return cs;
}

CosSin mrope_cos_sin(CosSin temporal, const CosSin &height, const CosSin &width, int temporal_pairs, int height_pairs) {
    for (size_t i = static_cast<size_t>(temporal_pairs); i < temporal.cos.size(); i++) {
        const CosSin &stream = i < static_cast<size_t>(temporal_pairs + height_pairs) ? height : width;
        temporal.cos[i] = stream.cos[i];
        temporal.sin[i] = stream.sin[i];
    }
    return temporal;
}

PairLanes pair_lanes(rope_style style, int pair, int rotary_dim, int rotary_offset) {
    if (style == ROPE_STYLE_HALF) {
        return {rotary_offset + pair, rotary_offset + pair + rotary_dim / 2};
    }
    return {rotary_offset + 2 * pair, rotary_offset + 2 * pair + 1};
}

int partner_lane(rope_style style, int lane, int rotary_dim, int rotary_offset) {
    const int relative = lane - rotary_offset, pairs = rotary_dim / 2;
    if (relative < 0 || relative >= rotary_dim) {
        return -1;
    }
    if (style == ROPE_STYLE_HALF) {
        return relative < pairs ? lane + pairs : lane - pairs;
    }
    return relative % 2 == 0 ? lane + 1 : lane - 1;
}

RotationMatrix rotation_matrix(int head_dim, int rotary_dim, int rotary_offset, rope_style style, const CosSin &cs) {
    RotationMatrix r;
    r.dim = head_dim;
    r.m.assign(static_cast<size_t>(head_dim) * head_dim, 0.0);
    r.structural.assign(r.m.size(), false);
    const auto set = [&](int row, int column, double value) {
        r.m[row * head_dim + column] = value;
        r.structural[row * head_dim + column] = true;
    };
    for (int lane = 0; lane < head_dim; lane++) {
        if (lane < rotary_offset || lane >= rotary_offset + rotary_dim) {
            set(lane, lane, 1.0);
        }
    }
    for (int i = 0; i < rotary_dim / 2; i++) {
        const PairLanes lanes = pair_lanes(style, i, rotary_dim, rotary_offset);
        set(lanes.a, lanes.a, cs.cos[i]);
        set(lanes.a, lanes.b, -cs.sin[i]);
        set(lanes.b, lanes.a, cs.sin[i]);
        set(lanes.b, lanes.b, cs.cos[i]);
    }
    return r;
}

std::vector<double> RotationMatrix::apply(const std::vector<double> &x) const {
    std::vector<double> y(dim, 0.0);
    for (int row = 0; row < dim; row++) {
        double sum = 0.0;
        for (int column = 0; column < dim; column++) {
            if (structural[row * dim + column]) {
                sum += m[row * dim + column] * x[column];
            }
        }
        y[row] = sum;
    }
    return y;
}

std::vector<double> rotate_pairs(const std::vector<double> &x, int rotary_dim, int rotary_offset, rope_style style,
                                 const CosSin &cs) {
    std::vector<double> y = x;
    for (int i = 0; i < rotary_dim / 2; i++) {
        const PairLanes lanes = pair_lanes(style, i, rotary_dim, rotary_offset);
        y[lanes.a] = x[lanes.a] * cs.cos[i] - x[lanes.b] * cs.sin[i];
        y[lanes.b] = x[lanes.b] * cs.cos[i] + x[lanes.a] * cs.sin[i];
    }
    return y;
}

std::vector<double> rotate_complex(const std::vector<double> &x, int rotary_dim, int rotary_offset, rope_style style,
                                   const CosSin &cs) {
    std::vector<double> y = x;
    for (int i = 0; i < rotary_dim / 2; i++) {
        const PairLanes lanes = pair_lanes(style, i, rotary_dim, rotary_offset);
        const std::complex<double> z = std::complex<double>(x[lanes.a], x[lanes.b]) *
                                       std::complex<double>(cs.cos[i], cs.sin[i]);
        y[lanes.a] = z.real();
        y[lanes.b] = z.imag();
    }
    return y;
}

std::vector<int> half_to_interleaved_permutation(int head_dim, int rotary_dim, int rotary_offset) {
    std::vector<int> permutation(head_dim);
    for (int lane = 0; lane < head_dim; lane++) {
        permutation[lane] = lane;
    }
    for (int i = 0; i < rotary_dim / 2; i++) {
        permutation[rotary_offset + i] = rotary_offset + 2 * i;
        permutation[rotary_offset + i + rotary_dim / 2] = rotary_offset + 2 * i + 1;
    }
    return permutation;
}

}  // namespace ropegen::reference
