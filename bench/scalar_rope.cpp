// SPDX-License-Identifier: Apache-2.0
// The scalar baseline (see scalar_rope.h). Built -O3 -march=native (bench/CMakeLists.txt); the
// templates stay in this file so no -march=native code is shared with other translation units.
#include "scalar_rope.h"

#include <cstring>

namespace ropebench {
namespace {

inline float load(float x) {
    return x;
}

// bf16 -> f32 is exact: the bf16 bits are the top half of the f32.
inline float load(uint16_t x) {
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

inline void store(float *dst, float value) {
    *dst = value;
}

// f32 -> bf16, round to nearest even (what engines write; NaN payloads are not special-cased).
inline void store(uint16_t *dst, float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    *dst = static_cast<uint16_t>(bits >> 16);
}

// spec §2: half pairs lanes (i, i+P), interleaved pairs lanes (2i, 2i+1). In place (src unused),
// the lanes are read through dst: a pair's two lanes are read before either is written.
template <rope_style Style, bool InPlace, typename T>
void rotate_heads(const T *__restrict src, T *__restrict dst, int64_t heads, int64_t head_dim,
                  const float *__restrict cos, const float *__restrict sin) {
    const int64_t pairs = head_dim / 2;
    for (int64_t head = 0; head < heads; head++) {
        const T *x = (InPlace ? dst : src) + head * head_dim;
        T *y = dst + head * head_dim;
        for (int64_t i = 0; i < pairs; i++) {
            const int64_t lane_a = Style == ROPE_STYLE_HALF ? i : 2 * i;
            const int64_t lane_b = Style == ROPE_STYLE_HALF ? i + pairs : 2 * i + 1;
            const float a = load(x[lane_a]), b = load(x[lane_b]);
            store(&y[lane_a], a * cos[i] - b * sin[i]);
            store(&y[lane_b], b * cos[i] + a * sin[i]);
        }
    }
}

template <rope_style Style, bool InPlace, typename T>
void rotate_tokens(const ScalarRopeArgs &args, int64_t token_begin, int64_t token_end) {
    const int64_t pairs = args.head_dim / 2;
    const int64_t q_row = args.q_heads * args.head_dim, k_row = args.k_heads * args.head_dim;
    for (int64_t token = token_begin; token < token_end; token++) {
        const float *cos = args.cos + args.positions[token] * pairs;
        const float *sin = args.sin + args.positions[token] * pairs;
        rotate_heads<Style, InPlace>(static_cast<const T *>(args.q) + token * q_row, static_cast<T *>(args.q_out) + token * q_row,
                                     args.q_heads, args.head_dim, cos, sin);
        rotate_heads<Style, InPlace>(static_cast<const T *>(args.k) + token * k_row, static_cast<T *>(args.k_out) + token * k_row,
                                     args.k_heads, args.head_dim, cos, sin);
    }
}

template <rope_style Style, typename T>
void rotate_tokens_of(const ScalarRopeArgs &args, int64_t token_begin, int64_t token_end) {
    if (args.q_out == args.q) {
        rotate_tokens<Style, true, T>(args, token_begin, token_end);
    } else {
        rotate_tokens<Style, false, T>(args, token_begin, token_end);
    }
}

template <rope_style Style>
bool rotate_style(const ScalarRopeArgs &args, int64_t token_begin, int64_t token_end) {
    switch (args.dtype) {
    case ROPE_DTYPE_F32:
        rotate_tokens_of<Style, float>(args, token_begin, token_end);
        return true;
    case ROPE_DTYPE_BF16:
        rotate_tokens_of<Style, uint16_t>(args, token_begin, token_end);
        return true;
    default:
        return false;
    }
}

}  // namespace

bool scalar_rope(const ScalarRopeArgs &args, int64_t token_begin, int64_t token_end) {
    if ((args.q_out == args.q) != (args.k_out == args.k)) {
        return false;  // one in place, the other not: the loop rotates both one way
    }
    return args.style == ROPE_STYLE_HALF ? rotate_style<ROPE_STYLE_HALF>(args, token_begin, token_end)
                                         : rotate_style<ROPE_STYLE_INTERLEAVED>(args, token_begin, token_end);
}

}  // namespace ropebench
