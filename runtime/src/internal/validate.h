// SPDX-License-Identifier: Apache-2.0
// Argument validation of rope_dispatch(): every rule of the ABI, checked before any kernel runs.
#pragma once

#include <cstdint>
#include <string>

#include "ropegen/rope.h"

namespace ropegen {

/// The most tokens (batch x seq) one call takes: the kernels' loops count them, and round them up
/// to whole tiles, with 32-bit integers.
constexpr int64_t kMaxCallTokens = int64_t{1} << 30;

/// A call that passed validation, with defaults applied.
struct ValidCall {
    rope_params params;  ///< the caller's struct: the fields of its layout, zero beyond
    int64_t head_dim = 0;
    int32_t rotary_dim = 0, rotary_offset = 0;
    bool has_k = false;
    double base = 0;
    float attn_factor = 0;               ///< with a scaling's derived attention factor (spec §6)
    float beta_fast = 0, beta_slow = 0;  ///< YaRN, defaults applied (0 for other scalings; kernels read them always)
};

/// True for the scalings whose frequencies follow each sequence's length (spec §6).
inline bool per_sequence_scaling(const rope_params &p) {
    return p.scaling.type == ROPE_SCALING_DYNAMIC || p.scaling.type == ROPE_SCALING_LONGROPE;
}

/// True when the call gives mrope sections (spec §6).
inline bool uses_mrope(const rope_params &p) {
    return p.mrope.sections[0] != 0 || p.mrope.sections[1] != 0 || p.mrope.sections[2] != 0;
}

/// cu_seqlens[b] of a varlen call that passed validation.
int64_t sequence_start(const rope_varlen &varlen, int64_t b);

/// [first, last] byte addresses a view can touch (`empty`: it has no element and touches nothing).
/// Only for views that passed validation (their spans do not overflow).
struct ByteRange {
    uintptr_t first, last;
    bool empty;
};
ByteRange byte_range(const rope_tensor &t);

/// True when some db*sb + ds*ss with |db| < nb and |ds| < ns lies strictly between lo and hi
/// (strides >= 0, sizes >= 1): whether two views with the same token lattice (batch and seq
/// sizes and strides) share an element. Exact, in O(log) steps whatever the sizes.
bool token_lattice_meets(int64_t sb, int64_t nb, int64_t ss, int64_t ns, int64_t lo, int64_t hi);

/// The axes (batch, seq, heads) along which the dispatcher runs a call slice by slice (a CUDA
/// call may need more, for its 32-bit spans): a stride on them, a tensor's, the position table's
/// or that of the cos/sin table a CPU kernel builds, exceeds Halide's int32 strides.
struct SlicedAxes {
    bool axis[3];
};
SlicedAxes axes_beyond_int32_strides(const ValidCall &call);

/// The bound a call's positions are held to (the cache's length, 2^31, or a computed source's
/// angle limit) and the rule's text for a message.
struct PositionRule {
    int64_t limit = 0;
    std::string text;
};

/// Checks `params` against every rule; on failure returns the status and fills `message` with
/// the argument, its value and the rule. A valid call's position bound goes to `position_rule`
/// when given.
rope_status validate(const rope_params *params, ValidCall *call, std::string *message,
                     PositionRule *position_rule = nullptr);

/// The bytes of `params` validation reads (the fields of its struct_size's layout), or 0 when
/// it refuses the header (NULL, an unknown abi_version or struct_size) before reading more.
size_t params_fields(const rope_params *params);

/// True when validation reads no memory of the call but its positions, mrope's streams included
/// (a CPU call without varlen cu_seqlens or a scaling's per-pair tables): a valid call stays
/// valid, whatever its memory holds, while its positions keep to the bound validation gave.
/// `params` need not be valid (any int in its enum fields).
bool validation_reads_positions_only(const rope_params &params);

/// Checks the positions of a call that passed validation (and gave `rule`) again: their values
/// may have changed since.
rope_status validate_positions(const ValidCall &call, const PositionRule &rule, std::string *message);

}  // namespace ropegen
