// SPDX-License-Identifier: Apache-2.0
// The hand-written baseline: the plain C++ RoPE loop an inference engine writes itself (tokens,
// heads, pairs; cos/sin read from a cache; f32 math; bf16 through bit conversions). It lives in
// its own translation unit, compiled -O3 -march=native, so the comparison is against the best
// the compiler does with the obvious code on this machine.
#pragma once

#include <cstdint>

#include "ropegen/rope.h"

namespace ropebench {

/// Packed BSHD tensors, full rotary (R = head_dim), forward direction.
struct ScalarRopeArgs {
    rope_dtype dtype;  ///< ROPE_DTYPE_F32 or ROPE_DTYPE_BF16
    rope_style style;
    int64_t q_heads, k_heads, head_dim;
    const void *q, *k;  ///< [token][heads][head_dim]
    void *q_out, *k_out;  ///< q and k again (both) for a call in place
    const int32_t *positions;       ///< one per token
    const float *cos, *sin;         ///< [position][head_dim / 2]
};

/// Rotates tokens [token_begin, token_end) of q and k. False for a dtype the loop does not handle,
/// or for q in place and k not (or the reverse).
bool scalar_rope(const ScalarRopeArgs &args, int64_t token_begin, int64_t token_end);

}  // namespace ropebench
