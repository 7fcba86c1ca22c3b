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

double relative_tolerance(rope_source source, double attn_factor) {
    const double scale = std::max(1.0, std::fabs(attn_factor));
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
    const std::vector<float> inv_freq = compat_inv_freq(base, rotary_dim);
    CosSin cs;
    for (float frequency : inv_freq) {
        const long double angle = compat_angle(position, frequency);
        cs.cos.push_back(static_cast<double>(std::cos(angle)) * attn_factor);
        cs.sin.push_back(static_cast<double>(std::sin(angle)) * attn_factor);
    }
    return cs;
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
