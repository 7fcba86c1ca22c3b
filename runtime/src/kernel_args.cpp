// SPDX-License-Identifier: Apache-2.0
// The kernel arguments of a validated call (internal/kernel_args.h).
#include "internal/kernel_args.h"

#include <algorithm>
#include <limits>

namespace ropegen {
namespace {

halide_type_t halide_type(rope_dtype dtype) {
    switch (dtype) {
    case ROPE_DTYPE_F16:
        return halide_type_t(halide_type_float, 16);
    case ROPE_DTYPE_BF16:
        return halide_type_t(halide_type_bfloat, 16);
    default:
        return halide_type_t(halide_type_float, 32);
    }
}

// Describes tensor `in`/`out` for one slice: [lane, head, seq, batch] with the slice's axes;
// the rotated lanes as 32-bit words for a kernel that stores them so (`pair_words`: a pair a word
// for the interleaved style, a lane of two neighbouring pairs a word for the half style).
TensorViews make_views(const ValidCall &call, const rope_tensor &in, const rope_tensor &out, const Slice &slice,
                       bool present, bool pair_words) {
    const halide_type_t type = halide_type(in.dtype);
    const size_t element = type.bytes();
    const int64_t pairs = call.rotary_dim / 2;
    auto base_of = [&](const rope_tensor &t) {
        int64_t offset = 0;
        for (int axis = 0; axis < 3; axis++) {
            offset += slice.begin[axis] * t.strides[axis];
        }
        return static_cast<uint8_t *>(t.data) + offset * static_cast<int64_t>(element);
    };
    uint8_t *in_base = base_of(in), *out_base = base_of(out);
    const int64_t heads = present ? (slice.extent[2] >= 0 ? slice.extent[2] : in.sizes[2]) : 0;
    // An axis of one index is never stepped along, so its stride is free: it continues the axes
    // inside it as if they were dense. The kernels recognise the layout from the strides, and a
    // one-token call then takes the token-outer (BSHD) loop nest, which reads cos/sin once per
    // token, instead of the head-outer one, which reads them again for every head.
    // `lanes`: the tensor's elements in one of the view's (2 for pair words; strides are even).
    auto outer_dims = [&](Buffer &b, const rope_tensor &t, int first, int64_t lanes = 1) {
        const int64_t extents[3] = {heads, slice.extent[1], slice.extent[0]};
        int64_t dense = call.head_dim;  // the stride that continues the axes inside densely
        for (int axis = 0; axis < 3; axis++) {
            const int64_t stride = extents[axis] > 1 ? t.strides[2 - axis] : (dense <= kMaxStride ? dense : 0);
            b.set(first + axis, 0, extents[axis], stride / lanes);
            dense = stride * std::max<int64_t>(extents[axis], 1);
        }
    };
    const bool in_place = in.data == out.data;
    const int64_t offset = call.rotary_offset, tail_min = offset + call.rotary_dim;
    const halide_type_t rotated_type = pair_words ? halide_type_t(halide_type_uint, 32) : type;
    TensorViews v{Buffer(in_base, type, 4), Buffer(out_base + offset * element, rotated_type, 5),
                  Buffer(out_base, type, 4), Buffer(out_base + tail_min * element, type, 4)};
    v.input.set(0, 0, call.head_dim, 1);
    outer_dims(v.input, in, 1);
    if (call.params.style == ROPE_STYLE_HALF && pair_words) {
        v.rotated.set(0, 0, pairs / 2, 1);  // (word, half): lanes 2i (the low half) and 2i + 1, then P on
        v.rotated.set(1, 0, 2, pairs / 2);
    } else if (call.params.style == ROPE_STYLE_HALF) {
        v.rotated.set(0, 0, pairs, 1);  // (pair, half): lanes i and i + P
        v.rotated.set(1, 0, 2, pairs);
    } else if (pair_words) {
        v.rotated.set(0, 0, 1, 1);  // (word, pair): lanes 2i (the low half) and 2i + 1 in one word
        v.rotated.set(1, 0, pairs, 1);
    } else {
        v.rotated.set(0, 0, 2, 1);  // (half, pair): lanes 2i and 2i + 1
        v.rotated.set(1, 0, pairs, 2);
    }
    outer_dims(v.rotated, out, 2, pair_words ? 2 : 1);
    // Lanes outside the rotary slice are copied, unless in place where they already hold the value.
    v.lead.set(0, 0, in_place ? 0 : offset, 1);
    outer_dims(v.lead, out, 1);
    v.tail.set(0, tail_min, in_place ? 0 : call.head_dim - tail_min, 1);
    outer_dims(v.tail, out, 1);
    return v;
}

}  // namespace

size_t kernel_scratch_bytes(const ValidCall &call, int64_t batch, int64_t seq) {
    if (call.params.angles.source == ROPE_SOURCE_CACHE) {
        return 0;
    }
    const size_t pairs = static_cast<size_t>(call.rotary_dim / 2);
    const size_t rows = per_sequence_scaling(call.params) ? static_cast<size_t>(batch) : 1;
    size_t table = 0;
    if (__builtin_mul_overflow(pairs * sizeof(float), static_cast<size_t>(batch * seq), &table) ||
        table > std::numeric_limits<size_t>::max() / 4 - sizeof(float)) {
        return std::numeric_limits<size_t>::max();  // no allocator can serve it: reported as out of memory
    }
    return scratch_slot_bytes(rows * sizeof(int32_t)) + scratch_slot_bytes(rows * pairs * sizeof(double)) +
           2 * scratch_slot_bytes(table + sizeof(float));
}

void *unused_input() {
    static uint32_t placeholder = 0;
    return &placeholder;
}

SharedArgs shared_args(const ValidCall &call, void *placeholder) {
    const rope_params &p = call.params;
    // Positions as an int32 [seq, batch] view: int64 tables are read through their low words
    // (validation proved every position < 2^31, so the high words are zero). One scalar offset
    // is no view at all: the kernel adds it (position_base) and reads no table.
    const rope_positions &pos = p.positions;
    const int64_t scale = pos.index_type == ROPE_INDEX_INT64 ? 2 : 1;
    const bool table = pos.kind == ROPE_POSITIONS_TABLE;
    const bool positions_given = table || pos.data != nullptr;
    // mrope (spec §6): pairs [0, end0) read the first position stream, [end0, end1) the second.
    const bool mrope = uses_mrope(p);
    const int64_t pairs = call.rotary_dim / 2;
    // cos/sin tables (cache source): the kernel reads the f32 pair or, for tables in the tensor
    // dtype, the narrow pair.
    const bool cache = p.angles.source == ROPE_SOURCE_CACHE;
    const bool narrow = cache && p.angles.cache_dtype != ROPE_DTYPE_F32;
    const int64_t row_stride = p.angles.cache_row_stride != 0 ? p.angles.cache_row_stride : pairs;
    const int64_t rows = std::min<int64_t>(p.angles.cache_len, kMaxStride);
    const halide_type_t f32 = halide_type_t(halide_type_float, 32), narrow_type = halide_type(p.q.dtype);
    // Per-pair tables of the scaling (spec §6): the one its type reads; the others, placeholders.
    const rope_scaling &sc = p.scaling;
    auto scaling_table = [&](const float *values, rope_scaling_type type) {
        const bool used = sc.type == type && values != nullptr;
        Buffer buffer(used ? const_cast<float *>(values) : placeholder, f32, 1);
        buffer.set(0, 0, used ? pairs : 1, 1);
        return buffer;
    };
    SharedArgs shared{Buffer(cache && !narrow ? const_cast<void *>(p.angles.cos_cache) : placeholder, f32, 2),
                      Buffer(cache && !narrow ? const_cast<void *>(p.angles.sin_cache) : placeholder, f32, 2),
                      Buffer(narrow ? const_cast<void *>(p.angles.cos_cache) : placeholder, narrow_type, 2),
                      Buffer(narrow ? const_cast<void *>(p.angles.sin_cache) : placeholder, narrow_type, 2),
                      scaling_table(sc.short_factor, ROPE_SCALING_LONGROPE),
                      scaling_table(sc.long_factor, ROPE_SCALING_LONGROPE),
                      scaling_table(sc.inv_freq, ROPE_SCALING_INV_FREQ),
                      placeholder,
                      narrow,
                      positions_given,
                      // A stride along an axis of one item is never stepped, and validation leaves it unbounded.
                      table && p.q.sizes[1] > 1 ? pos.strides[1] * scale : 0,
                      positions_given && p.q.sizes[0] > 1 ? pos.strides[0] * scale : 0,
                      positions_given ? 0 : pos.offset,
                      table ? 0 : 1,
                      mrope ? p.mrope.sections[0] : static_cast<int32_t>(pairs),
                      mrope ? p.mrope.sections[0] + p.mrope.sections[1] : static_cast<int32_t>(pairs),
                      p.direction == ROPE_INVERSE ? -1.0f : 1.0f};
    for (Buffer *t : {&shared.cos_table, &shared.sin_table, &shared.cos_narrow, &shared.sin_narrow}) {
        const bool used = t->raw.host != placeholder;
        t->set(0, 0, used ? pairs : 1, 1);
        t->set(1, 0, used ? rows : 1, used ? row_stride : 0);
    }
    return shared;
}

KernelArgs slice_args(const KernelEntry &kernel, const ValidCall &call, const SharedArgs &shared, const Slice &slice,
                      bool q_present, bool k_present) {
    const rope_params &p = call.params;
    const int64_t pos_offset = slice.begin[0] * shared.pos_batch_stride + slice.begin[1] * shared.pos_seq_stride;
    const bool mrope = uses_mrope(p);
    const int64_t stream_stride = p.mrope.stream_stride * (p.positions.index_type == ROPE_INDEX_INT64 ? 2 : 1);
    KernelArgs args{
        make_views(call, p.q, p.q_out, slice, q_present, kernel.pair_words),
        call.has_k ? make_views(call, p.k, p.k_out, slice, k_present, kernel.pair_words)
                   : make_views(call, p.q, p.q_out, slice, false, kernel.pair_words),
        Buffer(shared.positions_given ? const_cast<int32_t *>(static_cast<const int32_t *>(p.positions.data)) + pos_offset
                                      : shared.placeholder,
               halide_type_t(halide_type_int, 32), 3),
        &shared,
        static_cast<int32_t>(shared.scalar_offset + slice.begin[1] * shared.position_step)};
    args.positions.set(0, 0, slice.extent[1], slice.extent[1] > 1 ? shared.pos_seq_stride : 0);
    args.positions.set(1, 0, slice.extent[0], slice.extent[0] > 1 ? shared.pos_batch_stride : 0);
    args.positions.set(2, 0, mrope ? 3 : 1, mrope ? stream_stride : 0);
    return args;
}

KernelArgs items_args(const KernelEntry &kernel, const ValidCall &call, const SharedArgs &shared, int64_t first, int64_t count) {
    const Slice items{{first, 0, 0}, {count, call.params.q.sizes[1], -1}};
    return slice_args(kernel, call, shared, items, true, call.has_k);
}

int launch(const KernelEntry &kernel, const ValidCall &call, const KernelArgs &args, CallContext *context) {
    auto raw = [](const Buffer &buffer) { return const_cast<halide_buffer_t *>(&buffer.raw); };
    const rope_scaling &sc = call.params.scaling;
    const SharedArgs &s = *args.shared;
    return kernel.function(context, raw(args.q.input), raw(args.k.input), raw(args.positions), s.positions_given,
                           args.position_base, s.position_step, raw(s.cos_table), raw(s.sin_table), raw(s.cos_narrow),
                           raw(s.sin_narrow), s.narrow, call.base, call.attn_factor, s.sin_sign, call.rotary_offset,
                           call.rotary_dim / 2, sc.type, sc.factor, static_cast<int32_t>(sc.original_max_positions),
                           sc.low_freq_factor, sc.high_freq_factor, call.beta_fast, call.beta_slow, sc.yarn_no_truncate == 0,
                           raw(s.short_factor), raw(s.long_factor), raw(s.given_inv_freq), call.params.round_cos_sin != 0,
                           s.mrope_end0, s.mrope_end1, raw(args.q.rotated), raw(args.q.lead), raw(args.q.tail),
                           raw(args.k.rotated), raw(args.k.lead), raw(args.k.tail));
}

}  // namespace ropegen
