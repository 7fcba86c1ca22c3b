// SPDX-License-Identifier: Apache-2.0
#include "fuzz_call.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <sstream>

#include "reference/rope_reference.h"

namespace ropegen::fuzz {

namespace ref = ropegen::reference;
using test::GuardedBytes;

const char *const kTensorNames[kTensorCount] = {"q", "k", "q_out", "k_out"};
const char *const kScalingTableNames[kScalingTableCount] = {"scaling.short_factor", "scaling.long_factor",
                                                            "scaling.inv_freq"};

int64_t element_size(int32_t dtype) {
    return dtype == ROPE_DTYPE_F16 || dtype == ROPE_DTYPE_BF16 ? 2 : 4;
}

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kTwo31 = int64_t{1} << 31;
/// Position entries beyond this are not allocated: the call is skipped (raw sizes only).
constexpr int64_t kMaxPositionEntries = 65536;
/// Views further than this from their buffer's start are not allocated.
constexpr int64_t kMaxBufferOffset = int64_t{1} << 22;

int64_t saturate(__int128 value) {
    return value > kInt64Max ? kInt64Max : value < kInt64Min ? kInt64Min : static_cast<int64_t>(value);
}
int64_t add_saturated(int64_t a, int64_t b) {
    return saturate(static_cast<__int128>(a) + b);
}
int64_t mul_saturated(int64_t a, int64_t b) {
    return saturate(static_cast<__int128>(a) * b);
}
/// Stores `value` as an int32 (wrapping) or int64 entry; loads one back sign-extended.
void store_index(uint8_t *at, int64_t entry_bytes, int64_t value) {
    if (entry_bytes == 8) {
        std::memcpy(at, &value, 8);
    } else {
        const auto narrow = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(value)));
        std::memcpy(at, &narrow, 4);
    }
}
int64_t load_index(const uint8_t *at, int64_t entry_bytes) {
    if (entry_bytes == 8) {
        int64_t value;
        std::memcpy(&value, at, 8);
        return value;
    }
    int32_t value;
    std::memcpy(&value, at, 4);
    return value;
}
int32_t to_int32_saturated(int64_t value) {
    return static_cast<int32_t>(std::clamp<int64_t>(value, std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max()));
}
int64_t floor_to_multiple(int64_t value, int64_t unit) {
    const int64_t remainder = value % unit;
    return saturate(static_cast<__int128>(value) - remainder - (remainder < 0 ? unit : 0));
}
int64_t ceil_to_multiple(int64_t value, int64_t unit) {
    const int64_t remainder = value % unit;
    return saturate(static_cast<__int128>(value) - remainder + (remainder > 0 ? unit : 0));
}

template <typename Code>
Code code_of(const Pick &pick) {
    return static_cast<Code>(pick.code % code_count<Code>());
}
template <typename T, size_t N>
T table_value(const Pick &pick, const T (&table)[N]) {
    return pick.is_raw ? static_cast<T>(pick.raw) : table[pick.code % N];
}
double double_value(const Pick &pick) {
    if (!pick.is_raw) {
        return kBases[pick.code % code_count(kBases)];
    }
    double value;
    std::memcpy(&value, &pick.raw, sizeof(value));
    return value;
}
template <size_t N>
float float_value(const Pick &pick, const float (&table)[N]) {
    if (!pick.is_raw) {
        return table[pick.code % N];
    }
    const auto bits = static_cast<uint32_t>(pick.raw);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

uint32_t load_bits(const uint8_t *bytes, int64_t size) {
    if (size == 2) {
        uint16_t value;
        std::memcpy(&value, bytes, 2);
        return value;
    }
    uint32_t value;
    std::memcpy(&value, bytes, 4);
    return value;
}
void store_bits(uint8_t *bytes, int64_t size, uint32_t bits) {
    if (size == 2) {
        const auto value = static_cast<uint16_t>(bits);
        std::memcpy(bytes, &value, 2);
    } else {
        std::memcpy(bytes, &bits, 4);
    }
}
rope_dtype valid_dtype_or_f32(int32_t dtype) {
    return dtype == ROPE_DTYPE_F16 ? ROPE_DTYPE_F16 : dtype == ROPE_DTYPE_BF16 ? ROPE_DTYPE_BF16 : ROPE_DTYPE_F32;
}

/// Dense strides of `sizes` in a memory order, `pad` unused elements after every head.
void layout_strides(Layout layout, const int64_t sizes[4], int64_t pad, int64_t strides[4]) {
    const int64_t b = std::max<int64_t>(sizes[0], 0), s = std::max<int64_t>(sizes[1], 0);
    const int64_t h = std::max<int64_t>(sizes[2], 0), row = add_saturated(std::max<int64_t>(sizes[3], 0), pad);
    strides[3] = 1;
    switch (layout) {
        case Layout::BHSD:
            strides[1] = row;
            strides[2] = mul_saturated(s, row);
            strides[0] = mul_saturated(h, strides[2]);
            break;
        case Layout::SBHD:
            strides[2] = row;
            strides[0] = mul_saturated(h, row);
            strides[1] = mul_saturated(b, strides[0]);
            break;
        case Layout::Default:
        case Layout::BSHD:
        case Layout::Count:
            strides[2] = row;
            strides[1] = mul_saturated(h, row);
            strides[0] = mul_saturated(s, strides[1]);
            break;
    }
}

void apply_shape_edit(ShapeEdit edit, int64_t sizes[4]) {
    switch (edit) {
        case ShapeEdit::BatchPlusOne: sizes[0] = add_saturated(sizes[0], 1); break;
        case ShapeEdit::SeqPlusOne: sizes[1] = add_saturated(sizes[1], 1); break;
        case ShapeEdit::HeadsPlusOne: sizes[2] = add_saturated(sizes[2], 1); break;
        case ShapeEdit::HeadDimPlusTwo: sizes[3] = add_saturated(sizes[3], 2); break;
        case ShapeEdit::HeadDimMinusTwo: sizes[3] = add_saturated(sizes[3], -2); break;
        case ShapeEdit::Same:
        case ShapeEdit::Count: break;
    }
}

/// A value of `dtype` (bits) drawn for `fill`.
template <typename Random, typename Uniform>
uint32_t fill_value(Fill fill, rope_dtype dtype, Random &&random, Uniform &&uniform) {
    switch (fill) {
        case Fill::Uniform: return ref::encode(2 * uniform() - 1, dtype);
        case Fill::Nonzero: {
            const double magnitude = std::ldexp(1 + uniform(), static_cast<int>(random() % 10) - 8);
            return ref::encode(random() % 2 ? magnitude : -magnitude, dtype);
        }
        case Fill::Adversarial: {
            const double huge = dtype == ROPE_DTYPE_F16 ? 3e4 : 1e30;
            const double tiny = dtype == ROPE_DTYPE_F16 ? 1e-7 : 1e-40;  // subnormal in the dtype
            constexpr double kInf = std::numeric_limits<double>::infinity();
            const double specials[] = {huge, -huge, tiny, -tiny, 0.0, -0.0, std::nan(""), kInf, -kInf};
            const uint64_t choice = random() % 18;
            return choice < std::size(specials) ? ref::encode(specials[choice], dtype)
                                                : ref::encode(2 * uniform() - 1, dtype);
        }
        case Fill::RandomBits:
        case Fill::Count: break;
    }
    return static_cast<uint32_t>(random());
}

uint32_t struct_size_of(const Pick &pick) {
    if (pick.is_raw) {
        return static_cast<uint32_t>(pick.raw);
    }
    switch (code_of<StructSize>(pick)) {
        case StructSize::Zero: return 0;
        case StructSize::Eight: return 8;  // the header only
        case StructSize::Shorter: return sizeof(rope_params) - 4;  // no layout's size
        case StructSize::Longer: return sizeof(rope_params) + 8;
        case StructSize::Exact:
        case StructSize::Count: break;
    }
    return sizeof(rope_params);
}

uint32_t report_size_of(const Pick &pick) {
    if (pick.is_raw) {
        return static_cast<uint32_t>(pick.raw);
    }
    switch (code_of<ReportSize>(pick)) {
        case ReportSize::Zero: return 0;
        case ReportSize::Four: return 4;  // struct_size only
        case ReportSize::Shorter: return sizeof(rope_report) - 1;
        case ReportSize::Longer: return sizeof(rope_report) + 32;  // a later, larger rope_report
        case ReportSize::Exact:
        case ReportSize::Count: break;
    }
    return sizeof(rope_report);
}

}  // namespace

void View::measure() {
    negative_size = std::any_of(sizes, sizes + 4, [](int64_t n) { return n < 0; });
    empty = !negative_size && std::any_of(sizes, sizes + 4, [](int64_t n) { return n == 0; });
    overflows = false;
    backed = !negative_size;
    min_index = max_index = 0;
    // Near 2^63 in some order of evaluation (an empty view's partial products included): a
    // library may report SIZE_OVERFLOW for it.
    __int128 product = 1, reach = 0;
    for (int axis = 0; axis < 4; axis++) {
        const __int128 size = sizes[axis] < 0 ? -static_cast<__int128>(sizes[axis]) : sizes[axis];
        const __int128 stride = strides[axis] < 0 ? -static_cast<__int128>(strides[axis]) : strides[axis];
        // Capped at 2^62, where the verdict is taken: the next product then stays below 2^125.
        product = std::min<__int128>(product * std::max<__int128>(size, 1), static_cast<__int128>(1) << 62);
        reach = std::min<__int128>(reach + size * stride, static_cast<__int128>(1) << 64);
    }
    may_overflow = product >= (static_cast<__int128>(1) << 62) || reach >= (static_cast<__int128>(1) << 61);
    if (!has_elements()) {
        return;
    }
    int64_t elements = 1;
    for (int axis = 0; axis < 4; axis++) {
        int64_t step = 0;
        overflows = overflows || __builtin_mul_overflow(elements, sizes[axis], &elements) ||
                    __builtin_mul_overflow(sizes[axis] - 1, strides[axis], &step) ||
                    __builtin_add_overflow(step < 0 ? min_index : max_index, step, step < 0 ? &min_index : &max_index);
    }
    int64_t span_bytes = 0;
    overflows = overflows || __builtin_sub_overflow(max_index, min_index, &span_bytes) ||
                __builtin_add_overflow(span_bytes, 1, &span_bytes) ||
                __builtin_mul_overflow(span_bytes, element_bytes(), &span_bytes);
    backed = !overflows && elements <= kMaxViewElements && max_index - min_index < kMaxSpanElements;
}

FuzzCall::FuzzCall(const Recipe &recipe) {
    rng_state_ = 0x9e3779b97f4a7c15ull ^ recipe.seed;
    flush_ = recipe.flush_start ? GuardedBytes::Flush::Start : GuardedBytes::Flush::End;
    params_ = rope_params_init();
    resolve_scalars(recipe);
    plan_views(recipe);
    apply_stride_edits(recipe);
    for (View &v : views_) {
        v.measure();
    }
    apply_placements(recipe);
    allocate_arenas(recipe);
    resolve_rotary(recipe);
    build_varlen(recipe);
    build_positions(recipe);
    build_cache(recipe);
    build_scaling(recipe);
    build_structs(recipe);
}

uint64_t FuzzCall::next_random() {  // splitmix64
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double FuzzCall::next_uniform() {
    return static_cast<double>(next_random() >> 11) * 0x1p-53;
}

void FuzzCall::resolve_scalars(const Recipe &r) {
    isa_cap_ = table_value(r.isa_cap, kIsaCaps);
    struct_size_ = struct_size_of(r.struct_size);
    report_size_ = report_size_of(r.report_size);
    null_target_ = code_of<NullTarget>(r.null_target);
    params_.abi_version = static_cast<uint32_t>(table_value(r.abi_version, kAbiVersions));
    store_raw(params_.style, table_value(r.style, kStyles));
    store_raw(params_.direction, table_value(r.direction, kDirections));
    store_raw(params_.angles.source, table_value(r.source, kSources));
    params_.num_threads = table_value(r.num_threads, kNumThreads);
    params_.angles.base = double_value(r.base);
    params_.angles.attn_factor = float_value(r.attn_factor, kAttnFactors);
    params_.round_cos_sin = table_value(r.round_cos_sin, kRoundCosSin);
    head_pad_ = r.head_pad.code % 4;
}

void FuzzCall::plan_views(const Recipe &r) {
    const int64_t batch = table_value(r.batch, kBatches), seq = table_value(r.seq, kSeqs);
    const int64_t head_dim = table_value(r.head_dim, kHeadDims);
    View &q = views_[kQ], &k = views_[kK], &q_out = views_[kQOut], &k_out = views_[kKOut];
    q.dtype = table_value(r.dtype, kDtypes);
    const int64_t q_sizes[4] = {batch, seq, table_value(r.q_heads, kHeads), head_dim};
    const int64_t k_sizes[4] = {batch, seq, table_value(r.k_heads, kHeads), head_dim};
    std::copy(q_sizes, q_sizes + 4, q.sizes);
    std::copy(k_sizes, k_sizes + 4, k.sizes);
    apply_shape_edit(code_of<ShapeEdit>(r.other_shape[0]), k.sizes);
    std::copy(q.sizes, q.sizes + 4, q_out.sizes);
    apply_shape_edit(code_of<ShapeEdit>(r.other_shape[1]), q_out.sizes);
    std::copy(k.sizes, k.sizes + 4, k_out.sizes);
    apply_shape_edit(code_of<ShapeEdit>(r.other_shape[2]), k_out.sizes);
    for (int t = kK; t < kTensorCount; t++) {
        const Pick &pick = r.other_dtype[t - 1];
        if (pick.is_raw) {
            views_[t].dtype = static_cast<int32_t>(pick.raw);
            continue;
        }
        switch (code_of<OtherDtype>(pick)) {
            case OtherDtype::F32: views_[t].dtype = ROPE_DTYPE_F32; break;
            case OtherDtype::F16: views_[t].dtype = ROPE_DTYPE_F16; break;
            case OtherDtype::BF16: views_[t].dtype = ROPE_DTYPE_BF16; break;
            case OtherDtype::Invalid: views_[t].dtype = 3; break;
            case OtherDtype::AsQ:
            case OtherDtype::Count: views_[t].dtype = q.dtype; break;
        }
    }

    // Every tensor in a buffer of its own, in its layout; outputs default to their input's.
    Layout layouts[kTensorCount];
    for (int t = 0; t < kTensorCount; t++) {
        layouts[t] = code_of<Layout>(r.layout[t]);
    }
    for (int t : {kQOut, kKOut}) {
        if (layouts[t] == Layout::Default) {
            layouts[t] = layouts[t - 2];
        }
    }
    for (int t = 0; t < kTensorCount; t++) {
        View &v = views_[t];
        layout_strides(layouts[t], v.sizes, head_pad_, v.strides);
        v.arena = t;
        v.byte_offset = 0;
    }
    arenas_.resize(kTensorCount);

    // Views with the strides of one [batch, seq, heads, slot] buffer (BSHD), each from `first`
    // elements past its start; the buffer's extent covers the elements no view holds (v of packed
    // QKV), which must stay untouched.
    const auto pack = [&](int arena, int64_t heads, int64_t slot, std::initializer_list<std::pair<int, int64_t>> members) {
        const int64_t dense[4] = {std::max<int64_t>(batch, 0), std::max<int64_t>(seq, 0), heads, slot};
        int64_t strides[4];
        layout_strides(Layout::BSHD, dense, 0, strides);
        for (const auto &[tensor, first] : members) {
            View &v = views_[tensor];
            std::copy(strides, strides + 4, v.strides);
            v.arena = arena;
            v.byte_offset = mul_saturated(first, v.element_bytes());
        }
        arenas_[arena].extent_hint =
            mul_saturated(mul_saturated(dense[0], strides[0]), views_[members.begin()->first].element_bytes());
    };
    const int64_t q_heads = std::max<int64_t>(q.sizes[2], 0), k_heads = r.has_k ? std::max<int64_t>(k.sizes[2], 0) : 1;
    const int64_t lanes = std::max<int64_t>(head_dim, 0);
    const Memory memory = code_of<Memory>(r.memory);
    switch (memory) {
        case Memory::PackedQkv:
        case Memory::PackedQkvInPlace:
            if (r.per_head_qkv) {  // GPT-NeoX: q, k, v side by side in each head's slot of 3 D
                pack(kQ, std::max(q_heads, k_heads), mul_saturated(3, head_dim), {{kQ, 0}, {kK, lanes}});
            } else {  // q's heads, then k's, then v's
                pack(kQ, add_saturated(q_heads, mul_saturated(2, k_heads)), head_dim,
                     {{kQ, 0}, {kK, mul_saturated(q_heads, lanes)}});
            }
            break;
        case Memory::PackedOutputs:
            pack(kQOut, add_saturated(q_heads, k_heads), head_dim, {{kQOut, 0}, {kKOut, mul_saturated(q_heads, lanes)}});
            break;
        case Memory::Separate:
        case Memory::InPlace:
        case Memory::Count: break;
    }
    if (memory == Memory::InPlace || memory == Memory::PackedQkvInPlace) {
        for (int t : {kQOut, kKOut}) {
            const View &input = views_[t - 2];
            std::copy(input.strides, input.strides + 4, views_[t].strides);
            views_[t].arena = input.arena;
            views_[t].byte_offset = input.byte_offset;
        }
    }
    if (!r.has_k) {
        k.null = true;
    }
    q.null = null_target_ == NullTarget::Q;
    q_out.null = null_target_ == NullTarget::QOut;
    k_out.null = null_target_ == NullTarget::KOut;
}

void FuzzCall::apply_stride_edits(const Recipe &r) {
    for (const StrideEdit &edit : r.stride_edits) {
        int64_t &stride = views_[edit.target % 4].strides[edit.target / 4 % 4];
        if (edit.op.is_raw) {
            stride = edit.op.raw;
            continue;
        }
        switch (code_of<StrideOp>(edit.op)) {
            case StrideOp::Zero: stride = 0; break;
            case StrideOp::Negate: stride = mul_saturated(stride, -1); break;
            case StrideOp::PlusOne: stride = add_saturated(stride, 1); break;
            case StrideOp::MinusOne: stride = add_saturated(stride, -1); break;
            case StrideOp::Double: stride = mul_saturated(stride, 2); break;
            case StrideOp::FromQ: stride = views_[kQ].strides[edit.target / 4 % 4]; break;
            case StrideOp::Huge: stride = int64_t{1} << 40; break;
            case StrideOp::None:
            case StrideOp::Count: break;
        }
    }
}

void FuzzCall::apply_placements(const Recipe &r) {
    for (int i = 0; i < kPlacements; i++) {
        const int mover = kK + i;
        const PlacementTarget target = code_of<PlacementTarget>(r.placements[i].target);
        if (target == PlacementTarget::AsPlanned) {
            continue;
        }
        const int host = static_cast<int>(target) - static_cast<int>(PlacementTarget::IntoQ);
        if (host == mover) {
            continue;
        }
        View &v = views_[mover];
        const View &h = views_[host];
        const bool host_measured = h.backed && h.has_elements();
        const Pick &offset = r.placements[i].offset;
        int64_t delta = 0;
        if (offset.is_raw) {
            delta = (offset.raw % 4096) * v.element_bytes();
        } else {
            switch (code_of<PlacementOffset>(offset)) {
                case PlacementOffset::One: delta = v.element_bytes(); break;
                case PlacementOffset::HalfSpan: delta = host_measured ? h.max_index / 2 * h.element_bytes() : 0; break;
                case PlacementOffset::AfterEnd:
                    delta = host_measured ? (h.max_index + 1) * h.element_bytes() : 0;
                    break;
                case PlacementOffset::HeadDim:
                    delta = mul_saturated(std::clamp<int64_t>(h.sizes[3], 0, 4096), h.element_bytes());
                    break;
                case PlacementOffset::SameStart:
                case PlacementOffset::Count: break;
            }
        }
        v.arena = h.arena;
        v.byte_offset = floor_to_multiple(add_saturated(h.byte_offset, delta), v.element_bytes());
    }
}

void FuzzCall::allocate_arenas(const Recipe &r) {
    const Fill fill = code_of<Fill>(r.fill);
    for (View &v : views_) {
        // Far from its buffer's start (a packed buffer of a huge head count): not allocated.
        v.backed = v.backed && v.byte_offset >= -kMaxBufferOffset && v.byte_offset <= kMaxBufferOffset;
    }
    for (Arena &arena : arenas_) {
        arena.extent_hint = arena.extent_hint <= kMaxBufferOffset ? arena.extent_hint : 0;
    }
    for (int a = 0; a < arena_count(); a++) {
        Arena &arena = arenas_[a];
        int64_t low = 0, high = arena.extent_hint, align = 2;
        bool any = arena.extent_hint > 0;
        int fill_dtype = -1;
        for (int t = 0; t < kTensorCount; t++) {
            const View &v = views_[t];
            if (v.arena != a || v.null || !v.backed || !v.has_elements()) {
                continue;
            }
            const int64_t first = v.byte_offset + v.min_index * v.element_bytes();
            const int64_t end = v.byte_offset + (v.max_index + 1) * v.element_bytes();
            low = any ? std::min(low, first) : first;
            high = any ? std::max(high, end) : end;
            any = true;
            align = std::max(align, v.element_bytes());
            const bool input = t == kQ || (t == kK && !views_[kK].null);
            arena.holds_input = arena.holds_input || input;
            if (input && fill_dtype < 0) {
                fill_dtype = v.dtype;
            }
        }
        arena.holds_input = arena.holds_input || arena.extent_hint > 0;
        if (fill_dtype < 0) {
            fill_dtype = views_[a].dtype;
        }
        low = any ? floor_to_multiple(low, align) : 0;
        high = any ? ceil_to_multiple(high, align) : 0;
        // Output-only buffers hold NaN (all-ones) canaries: an element a kernel forgets to write fails.
        arena.bytes = GuardedBytes(static_cast<size_t>(high - low), arena.holds_input ? 0 : 0xff, flush_);
        if (arena.holds_input) {
            const int64_t size = element_size(fill_dtype);
            const rope_dtype dtype = valid_dtype_or_f32(fill_dtype);
            const auto random = [this] { return next_random(); };
            const auto uniform = [this] { return next_uniform(); };
            for (int64_t at = 0; at + size <= high - low; at += size) {
                store_bits(arena.bytes.data() + at, size, fill_value(fill, dtype, random, uniform));
            }
        }
        for (View &v : views_) {
            if (v.arena == a && v.backed) {  // (unallocated views leave their buffer below)
                v.byte_offset -= low;
            }
        }
        arena.before.assign(arena.bytes.begin(), arena.bytes.end());
    }
    // Views that are NULL, not allocated or of a negative size lie in no buffer.
    for (View &v : views_) {
        if (v.null || !v.backed || v.negative_size) {
            v.arena = -1;
        }
    }
}

void FuzzCall::build_varlen(const Recipe &r) {
    const Varlen mode = code_of<Varlen>(r.varlen);
    // A caller of an earlier layout (struct_size) has no varlen: its positions stay dense.
    if (mode == Varlen::None || struct_size_ < sizeof(rope_params)) {
        return;
    }
    rope_varlen &v = params_.varlen;
    store_raw(v.index_type, table_value(r.varlen_index_type, kIndexTypes));
    v.num_seqs = table_value(r.num_seqs, kNumSeqs);
    // The library reads num_seqs + 1 entries of a count in [0, 2^31) only.
    const bool read = v.num_seqs >= 0 && v.num_seqs < kTwo31;
    if (read && v.num_seqs >= kMaxPositionEntries) {
        skip_reason_ = "cu_seqlens is too large to allocate";
    }
    const int64_t entries = read && v.num_seqs < kMaxPositionEntries ? v.num_seqs + 1 : 0;
    const int64_t total = views_[kQ].sizes[1];
    std::vector<int64_t> starts(static_cast<size_t>(entries), 0);
    if (entries > 0) {
        // A split of the tokens at sorted random cuts: sequences of any length, empty ones too.
        for (int64_t b = 1; b + 1 < entries; b++) {
            starts[b] = total > 0 ? static_cast<int64_t>(next_random() % (static_cast<uint64_t>(total) + 1)) : 0;
        }
        std::sort(starts.begin(), starts.end() - 1);
        starts.back() = total;
        switch (mode) {
            case Varlen::FirstNonZero: starts.front() = 1; break;
            case Varlen::Decreasing:
                if (entries >= 3) {  // an inner entry above the next
                    const auto inner = static_cast<size_t>(1 + next_random() % static_cast<uint64_t>(entries - 2));
                    starts[inner] = add_saturated(starts[inner + 1], 1);
                }
                break;
            case Varlen::LastShort: starts.back() = add_saturated(total, -1); break;
            case Varlen::LastLong: starts.back() = add_saturated(total, 1); break;
            case Varlen::None:
            case Varlen::Split:
            case Varlen::Count: break;
        }
    }
    const int64_t entry_bytes = enum_value(v.index_type) == ROPE_INDEX_INT64 ? 8 : 4;
    cu_seqlens_buffer_ = GuardedBytes(static_cast<size_t>(entries * entry_bytes), 0, flush_);
    for (int64_t b = 0; b < entries; b++) {
        store_index(cu_seqlens_buffer_.data() + b * entry_bytes, entry_bytes, starts[b]);
        cu_seqlens_.push_back(load_index(cu_seqlens_buffer_.data() + b * entry_bytes, entry_bytes));
    }
    cu_seqlens_before_.assign(cu_seqlens_buffer_.begin(), cu_seqlens_buffer_.end());
    v.cu_seqlens = cu_seqlens_buffer_.data();

    // Positions follow the packed sequences only where validation accepts them (rope.h).
    const int32_t index_type = enum_value(v.index_type);
    packed_ = (index_type == ROPE_INDEX_INT32 || index_type == ROPE_INDEX_INT64) && views_[kQ].sizes[0] == 1 &&
              !cu_seqlens_.empty() && cu_seqlens_.front() == 0 && cu_seqlens_.back() == total &&
              std::is_sorted(cu_seqlens_.begin(), cu_seqlens_.end());
    for (int64_t b = 0; packed_ && b < v.num_seqs; b++) {
        sequences_.push_back({0, cu_seqlens_[b], cu_seqlens_[b + 1] - cu_seqlens_[b]});
    }
}

void FuzzCall::resolve_mrope(const Recipe &r, int64_t stream_span) {
    const MropeSections mode = code_of<MropeSections>(r.mrope_sections);
    // A caller of an earlier layout (struct_size) has no mrope.
    if (mode == MropeSections::None || struct_size_ < sizeof(rope_params)) {
        return;
    }
    rope_mrope &m = params_.mrope;
    const int64_t pairs = (params_.rotary_dim != 0 ? params_.rotary_dim : views_[kQ].sizes[3]) / 2;
    const int64_t temporal = pairs / 4, height = (pairs - temporal) / 2;
    int64_t sections[3] = {temporal, height, pairs - temporal - height};
    switch (mode) {
        case MropeSections::RandomSplit:
            sections[0] = pairs > 0 ? static_cast<int64_t>(next_random() % (static_cast<uint64_t>(pairs) + 1)) : 0;
            sections[1] = pairs > sections[0]
                              ? static_cast<int64_t>(next_random() % (static_cast<uint64_t>(pairs - sections[0]) + 1))
                              : 0;
            sections[2] = pairs - sections[0] - sections[1];
            break;
        case MropeSections::AllTemporal:
            sections[0] = pairs;
            sections[1] = sections[2] = 0;
            break;
        case MropeSections::AllWidth:
            sections[0] = sections[1] = 0;
            sections[2] = pairs;
            break;
        case MropeSections::SumShort: sections[2] -= 1; break;
        case MropeSections::SumLong: sections[2] += 1; break;
        case MropeSections::Negative:
            sections[2] += temporal + 1;
            sections[0] = -1;
            break;
        case MropeSections::None:
        case MropeSections::Qwen:
        case MropeSections::Count: break;
    }
    for (int stream = 0; stream < 3; stream++) {
        m.sections[stream] = to_int32_saturated(sections[stream]);
    }
    if (r.stream_stride.is_raw) {
        m.stream_stride = r.stream_stride.raw;
        return;
    }
    switch (code_of<StreamStride>(r.stream_stride)) {
        case StreamStride::Adjacent: m.stream_stride = stream_span; break;
        case StreamStride::Shared: m.stream_stride = 0; break;
        case StreamStride::Overlapping: m.stream_stride = add_saturated(stream_span, 1) / 2; break;
        case StreamStride::Negative: m.stream_stride = -1; break;
        case StreamStride::Limit: m.stream_stride = int64_t{1} << 30; break;
        case StreamStride::Gapped:
        case StreamStride::Count: m.stream_stride = add_saturated(stream_span, 3); break;
    }
}

void FuzzCall::build_positions(const Recipe &r) {
    rope_positions &pos = params_.positions;
    store_raw(pos.kind, table_value(r.positions_kind, kPositionKinds));
    store_raw(pos.index_type, table_value(r.index_type, kIndexTypes));
    const int32_t kind = enum_value(pos.kind), index_type = enum_value(pos.index_type);
    const int64_t batch = views_[kQ].sizes[0], seq = views_[kQ].sizes[1];
    const bool offsets = kind == ROPE_POSITIONS_OFFSET;
    const bool has_data = !offsets || r.positions_data;
    const int64_t clamped_seq = std::clamp<int64_t>(seq, 0, int64_t{1} << 40);

    // The scalar offset (always set: only OFFSET without data uses it).
    if (r.scalar_offset.is_raw) {
        pos.offset = r.scalar_offset.raw;
    } else {
        switch (code_of<ScalarOffset>(r.scalar_offset)) {
            case ScalarOffset::One: pos.offset = 1; break;
            case ScalarOffset::Small: pos.offset = 7; break;
            case ScalarOffset::Thousand: pos.offset = 1000; break;
            case ScalarOffset::PreciseLimit: pos.offset = (int64_t{1} << 24) - clamped_seq; break;
            case ScalarOffset::Int32Limit: pos.offset = kTwo31 - clamped_seq; break;
            case ScalarOffset::PastInt32: pos.offset = kTwo31 - clamped_seq + 1; break;
            case ScalarOffset::Negative: pos.offset = -1; break;
            case ScalarOffset::Int64Max: pos.offset = kInt64Max; break;
            case ScalarOffset::Zero:
            case ScalarOffset::Count: pos.offset = 0; break;
        }
    }

    int64_t strides[2] = {0, 0};
    if (has_data) {
        const int64_t b = std::clamp<int64_t>(batch, 0, 4096), s = std::clamp<int64_t>(seq, 0, 4096);
        switch (code_of<PositionsLayout>(r.positions_layout)) {
            case PositionsLayout::Packed: strides[0] = offsets ? 1 : s; strides[1] = offsets ? 0 : 1; break;
            case PositionsLayout::Transposed: strides[0] = 1; strides[1] = offsets ? 0 : b; break;
            case PositionsLayout::SharedRows: strides[0] = 0; strides[1] = offsets ? 0 : 1; break;
            case PositionsLayout::Padded: strides[0] = offsets ? 2 : s + 2; strides[1] = offsets ? 0 : 1; break;
            case PositionsLayout::ZeroStrides: break;
            case PositionsLayout::NegativeStride: strides[0] = offsets ? -1 : -s; strides[1] = offsets ? 0 : 1; break;
            case PositionsLayout::Count: break;
        }
    }
    pos.strides[0] = strides[0];
    pos.strides[1] = strides[1];

    // The entries the call reads: every token for a table, one per batch item (varlen: per
    // sequence) for offsets; mrope reads three streams of a table, stream_stride apart.
    const bool tokens = batch > 0 && seq > 0;
    const int64_t items = packed_ && offsets ? params_.varlen.num_seqs : batch;
    const int64_t rows = tokens && has_data ? items : 0, columns = tokens && has_data ? (offsets ? 1 : seq) : 0;
    const int64_t entry_bytes = index_type == ROPE_INDEX_INT64 ? 8 : 4;
    int64_t low = 0, high = -1;
    if (has_data && rows > 0) {
        const auto extreme = [&](int64_t stride, int64_t count, bool upper) {
            return (stride > 0) == upper ? mul_saturated(stride, count - 1) : 0;
        };
        low = add_saturated(extreme(strides[0], rows, false), extreme(strides[1], columns, false));
        high = add_saturated(extreme(strides[0], rows, true), extreme(strides[1], columns, true));
    }
    resolve_mrope(r, saturate(static_cast<__int128>(high) - low + 1));
    const int64_t stream_stride = params_.mrope.stream_stride;
    const int streams = params_.mrope.sections[0] != 0 || params_.mrope.sections[1] != 0 ||
                                params_.mrope.sections[2] != 0
                            ? 3
                            : 1;
    const bool streamed = streams == 3 && !offsets && stream_stride >= 0 && stream_stride < (int64_t{1} << 30);
    if (streamed && rows > 0) {
        high = add_saturated(high, mul_saturated(2, stream_stride));
    }
    const __int128 token_count = tokens ? static_cast<__int128>(batch) * seq : 0;
    if (static_cast<__int128>(high) - low + 1 > kMaxPositionEntries ||
        (has_data && token_count > kMaxPositionEntries)) {
        skip_reason_ = "the positions array is too large to allocate";
        return;
    }
    const int64_t entries = high - low + 1;
    positions_buffer_ = GuardedBytes(static_cast<size_t>(entries * entry_bytes), 0, flush_);
    uint8_t *origin = positions_buffer_.data() - low * entry_bytes;
    const auto store = [&](int64_t index, int64_t value) { store_index(origin + index * entry_bytes, entry_bytes, value); };
    const auto load = [&](int64_t index) { return load_index(origin + index * entry_bytes, entry_bytes); };
    for (int64_t i = 0; i < entries; i++) {
        store(low + i, -1);  // unused slots: a read of the wrong slot fails
    }
    const PositionValues mode = code_of<PositionValues>(r.position_values);
    std::vector<bool> assigned(static_cast<size_t>(entries), false);
    std::vector<int64_t> used;  // slots, in token order
    for (int stream = 0; stream < (streamed ? streams : 1); stream++) {
        for (int64_t b = 0; b < rows; b++) {
            for (int64_t s = 0; s < columns; s++) {
                const int64_t slot = stream * stream_stride + b * strides[0] + s * strides[1];
                if (assigned[slot - low]) {
                    continue;
                }
                assigned[slot - low] = true;
                used.push_back(slot);
                int64_t value = 0;
                switch (mode) {
                    case PositionValues::Ascending: value = offsets ? 3 * b : b * seq + s; break;
                    case PositionValues::RandomWide: value = static_cast<int64_t>(next_random() % kTwo31); break;
                    case PositionValues::NearInt32Max:
                        value = offsets ? kTwo31 - clamped_seq - static_cast<int64_t>(next_random() % 2)
                                        : kTwo31 - 1 - static_cast<int64_t>(next_random() % 4);
                        break;
                    case PositionValues::AllZero: break;
                    case PositionValues::RandomBits: value = static_cast<int64_t>(next_random()); break;
                    case PositionValues::RandomSmall:
                    case PositionValues::OneNegative:
                    case PositionValues::OneHuge:
                    case PositionValues::Count: value = static_cast<int64_t>(next_random() % 64); break;
                }
                store(slot, value);
            }
        }
    }
    if (!used.empty() && (mode == PositionValues::OneNegative || mode == PositionValues::OneHuge)) {
        const int64_t slot = used[next_random() % used.size()];
        store(slot, mode == PositionValues::OneNegative ? -1 : entry_bytes == 8 ? kInt64Max : kTwo31);
    }
    positions_before_.assign(positions_buffer_.begin(), positions_buffer_.end());
    pos.data = has_data && null_target_ != NullTarget::PositionsData ? origin : nullptr;

    // What the call must read, as the oracle and the validity model see it.
    const bool readable_kind = kind == ROPE_POSITIONS_OFFSET || kind == ROPE_POSITIONS_TABLE;
    const bool readable_type = pos.data == nullptr || index_type == ROPE_INDEX_INT32 || index_type == ROPE_INDEX_INT64;
    positions_.known =
        tokens && readable_kind && readable_type && !(kind == ROPE_POSITIONS_TABLE && pos.data == nullptr);
    if (!positions_.known) {
        return;
    }
    bool first_position = true;
    const auto include = [&](__int128 position) {
        positions_.min = first_position ? position : std::min(positions_.min, position);
        positions_.max = first_position ? position : std::max(positions_.max, position);
        first_position = false;
    };
    const bool listed = token_count <= kMaxPositionEntries;
    if (!packed_) {
        if (!listed) {
            if (pos.data == nullptr) {  // offset + s: the range is known without listing every token
                include(pos.offset);
                include(static_cast<__int128>(pos.offset) + seq - 1);
            }
            return;
        }
        for (int64_t b = 0; b < batch; b++) {
            sequences_.push_back({b, 0, seq});
        }
    }
    // Offsets count one per sequence, from its first token; an empty sequence's offset is
    // checked as one token's.
    for (size_t i = 0; i < sequences_.size(); i++) {
        const Sequence &sequence = sequences_[i];
        const __int128 offset = kind == ROPE_POSITIONS_TABLE ? 0
                                : pos.data != nullptr      ? load(static_cast<int64_t>(i) * strides[0])
                                                           : pos.offset;
        if (kind == ROPE_POSITIONS_OFFSET) {
            include(offset);
            include(offset + std::max<int64_t>(sequence.length, 1) - 1);
        }
        for (int64_t s = sequence.first; listed && s < sequence.first + sequence.length; s++) {
            const int64_t slot = sequence.batch_item * strides[0] + s * strides[1];
            const __int128 position = kind == ROPE_POSITIONS_TABLE ? load(slot) : offset + (s - sequence.first);
            positions_.values.push_back(position);
            include(position);
            for (int stream = 1; streamed && stream < streams; stream++) {
                positions_.mrope_values[stream - 1].push_back(load(stream * stream_stride + slot));
                include(positions_.mrope_values[stream - 1].back());
            }
        }
    }
}

void FuzzCall::resolve_rotary(const Recipe &r) {
    const int64_t head_dim = views_[kQ].sizes[3];
    int64_t rotary = 0;
    if (r.rotary_dim.is_raw) {
        rotary = r.rotary_dim.raw;
    } else {
        switch (code_of<RotaryDim>(r.rotary_dim)) {
            case RotaryDim::Full: rotary = head_dim; break;
            case RotaryDim::Half: rotary = floor_to_multiple(head_dim / 2, 2); break;
            case RotaryDim::Two: rotary = 2; break;
            case RotaryDim::AllButTwo: rotary = add_saturated(head_dim, -2); break;
            case RotaryDim::PlusTwo: rotary = add_saturated(head_dim, 2); break;
            case RotaryDim::Odd: rotary = add_saturated(head_dim, -1); break;
            case RotaryDim::Negative: rotary = -2; break;
            case RotaryDim::Default:
            case RotaryDim::Count: break;
        }
    }
    params_.rotary_dim = to_int32_saturated(rotary);
    const int64_t effective = params_.rotary_dim != 0 ? params_.rotary_dim : head_dim;
    const int64_t room = saturate(static_cast<__int128>(head_dim) - effective);  // lanes outside the rotary slice
    int64_t offset = 0;
    if (r.rotary_offset.is_raw) {
        offset = r.rotary_offset.raw;
    } else {
        switch (code_of<RotaryOffset>(r.rotary_offset)) {
            case RotaryOffset::Max: offset = room; break;
            case RotaryOffset::Middle: offset = room / 2; break;
            case RotaryOffset::One: offset = 1; break;
            case RotaryOffset::PastMax: offset = add_saturated(room, 1); break;
            case RotaryOffset::Negative: offset = -1; break;
            case RotaryOffset::Zero:
            case RotaryOffset::Count: break;
        }
    }
    params_.rotary_offset = to_int32_saturated(offset);
}

void FuzzCall::build_cache(const Recipe &r) {
    rope_angles &a = params_.angles;
    const int64_t rotary = params_.rotary_dim != 0 ? params_.rotary_dim : views_[kQ].sizes[3];
    const int64_t pairs = std::clamp<int64_t>(rotary / 2, 1, 4096);  // what a valid call's rows hold
    const int64_t max_position = largest_position();
    if (r.cache_len.is_raw) {
        a.cache_len = r.cache_len.raw;
    } else {
        switch (code_of<CacheLen>(r.cache_len)) {
            case CacheLen::MaxPlusThree: a.cache_len = max_position + 3; break;
            case CacheLen::EqualMax: a.cache_len = max_position; break;
            case CacheLen::Zero: a.cache_len = 0; break;
            case CacheLen::Negative: a.cache_len = -1; break;
            case CacheLen::One: a.cache_len = 1; break;
            case CacheLen::Huge: a.cache_len = int64_t{1} << 40; break;
            case CacheLen::Overflow: a.cache_len = int64_t{1} << 62; break;
            case CacheLen::MaxPlusOne:
            case CacheLen::Count: a.cache_len = max_position + 1; break;
        }
    }
    if (r.cache_row_stride.is_raw) {
        a.cache_row_stride = r.cache_row_stride.raw;
    } else {
        switch (code_of<RowStride>(r.cache_row_stride)) {
            case RowStride::Pairs: a.cache_row_stride = pairs; break;
            case RowStride::PairsPlusOne: a.cache_row_stride = pairs + 1; break;
            case RowStride::PairsPlusSeven: a.cache_row_stride = pairs + 7; break;
            case RowStride::PairsMinusOne: a.cache_row_stride = pairs - 1; break;
            case RowStride::Int32Limit: a.cache_row_stride = kTwo31; break;
            case RowStride::Default:
            case RowStride::Count: a.cache_row_stride = 0; break;
        }
    }
    int32_t cache_dtype = ROPE_DTYPE_F32;
    if (r.cache_dtype.is_raw) {
        cache_dtype = static_cast<int32_t>(r.cache_dtype.raw);
    } else {
        switch (code_of<CacheDtype>(r.cache_dtype)) {
            case CacheDtype::TensorDtype: cache_dtype = views_[kQ].dtype; break;
            case CacheDtype::F16: cache_dtype = ROPE_DTYPE_F16; break;
            case CacheDtype::BF16: cache_dtype = ROPE_DTYPE_BF16; break;
            case CacheDtype::F32:
            case CacheDtype::Count: break;
        }
    }
    store_raw(a.cache_dtype, cache_dtype);

    // Tables for every source (the computed ones must ignore them). All rows when they are small,
    // else only the rows positions can select; exactly up to the last used entry of the last row.
    const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
    int64_t rows = 0;
    if (a.cache_len > 0 && row_stride > 0) {
        const bool whole = static_cast<__int128>(a.cache_len) * row_stride <= kMaxTableElements;
        rows = whole ? a.cache_len : std::min<int64_t>(a.cache_len, max_position + 1);
    }
    const __int128 elements = rows > 0 ? static_cast<__int128>(rows - 1) * row_stride + pairs : 0;
    cache_backed_ = elements <= kMaxTableElements && rotary / 2 == pairs;
    cache_rows_backed_ = cache_backed_ ? rows : 0;
    const int64_t entries = cache_backed_ ? static_cast<int64_t>(elements) : 0;
    const int64_t entry_bytes = element_size(cache_dtype);
    const rope_dtype dtype = valid_dtype_or_f32(cache_dtype);
    cos_buffer_ = GuardedBytes(static_cast<size_t>(entries * entry_bytes), 0, flush_);
    sin_buffer_ = GuardedBytes(static_cast<size_t>(entries * entry_bytes), 0, flush_);
    const uint32_t nan = ref::encode(std::numeric_limits<double>::quiet_NaN(), dtype);
    for (int64_t i = 0; i < entries; i++) {  // padding holds NaN, so that reading it shows
        store_bits(cos_buffer_.data() + i * entry_bytes, entry_bytes, nan);
        store_bits(sin_buffer_.data() + i * entry_bytes, entry_bytes, nan);
    }
    // Adversarial and random-bits fills put their values into a quarter of the entries too (NaN,
    // Inf, huge, subnormal, -0 or any bits: a caller's table is data like any other).
    const Fill fill = code_of<Fill>(r.fill);
    const bool odd_entries = fill == Fill::Adversarial || fill == Fill::RandomBits;
    const auto random = [this] { return next_random(); };
    const auto uniform = [this] { return next_uniform(); };
    for (int64_t row = 0; row < cache_rows_backed_; row++) {
        for (int64_t pair = 0; pair < pairs; pair++) {
            // A point of the unit circle, as cos/sin of some angle.
            const double c = 2 * next_uniform() - 1, s = std::sqrt(1 - c * c) * (next_random() % 2 ? 1 : -1);
            const int64_t at = (row * row_stride + pair) * entry_bytes;
            for (auto [table, value] : {std::pair{cos_buffer_.data(), c}, std::pair{sin_buffer_.data(), s}}) {
                const bool odd = odd_entries && next_random() % 4 == 0;
                store_bits(table + at, entry_bytes, odd ? fill_value(fill, dtype, random, uniform) : ref::encode(value, dtype));
            }
        }
    }
    cos_before_.assign(cos_buffer_.begin(), cos_buffer_.end());
    sin_before_.assign(sin_buffer_.begin(), sin_buffer_.end());
    a.cos_cache = null_target_ == NullTarget::CosCache ? nullptr : cos_buffer_.data();
    a.sin_cache = null_target_ == NullTarget::SinCache ? nullptr : sin_buffer_.data();
}

int64_t FuzzCall::largest_position() const {
    return positions_.known ? saturate(std::clamp<__int128>(positions_.max, 0, int64_t{1} << 62)) : 0;
}

void FuzzCall::build_scaling(const Recipe &r) {
    rope_scaling &sc = params_.scaling;
    store_raw(sc.type, table_value(r.scaling_type, kScalingTypes));
    sc.factor = float_value(r.scaling_factor, kScalingFactors);
    const int64_t largest = largest_position();
    if (r.original_max.is_raw) {
        sc.original_max_positions = r.original_max.raw;
    } else {
        switch (code_of<OriginalMax>(r.original_max)) {
            case OriginalMax::LargestPosition: sc.original_max_positions = std::max<int64_t>(largest, 1); break;
            case OriginalMax::HalfLargest: sc.original_max_positions = std::max<int64_t>(largest / 2, 1); break;
            case OriginalMax::Zero: sc.original_max_positions = 0; break;
            case OriginalMax::Negative: sc.original_max_positions = -1; break;
            case OriginalMax::Int32Limit: sc.original_max_positions = kTwo31; break;
            case OriginalMax::LongestLength:
            case OriginalMax::Count: sc.original_max_positions = largest + 1; break;
        }
    }
    if (r.max_positions.is_raw) {
        sc.max_positions = r.max_positions.raw;
    } else {
        switch (code_of<MaxPositions>(r.max_positions)) {
            case MaxPositions::SixteenOriginal: sc.max_positions = mul_saturated(sc.original_max_positions, 16); break;
            case MaxPositions::Original: sc.max_positions = sc.original_max_positions; break;
            case MaxPositions::Negative: sc.max_positions = -1; break;
            case MaxPositions::Default:
            case MaxPositions::Count: sc.max_positions = 0; break;
        }
    }
    const FreqFactors &freq_factors = kFreqFactors[r.freq_factors.code % code_count(kFreqFactors)];
    sc.low_freq_factor = freq_factors.low;
    sc.high_freq_factor = freq_factors.high;
    sc.beta_fast = float_value(r.yarn_params[0], kYarnParams);
    sc.beta_slow = float_value(r.yarn_params[1], kYarnParams);
    sc.mscale = float_value(r.yarn_params[2], kYarnParams);
    sc.mscale_all_dim = float_value(r.yarn_params[3], kYarnParams);
    sc.yarn_no_truncate = r.yarn_no_truncate ? 1 : 0;

    // Each table holds exactly the rotary_dim/2 floats the library may read, so that reading one
    // more faults. A table too large to allocate stops the call only where the type reads it.
    const int64_t rotary = params_.rotary_dim != 0 ? params_.rotary_dim : views_[kQ].sizes[3];
    const int64_t pairs = std::max<int64_t>(rotary / 2, 0);
    const int32_t type = enum_value(sc.type);
    if (pairs > kMaxTableElements && (type == ROPE_SCALING_LONGROPE || type == ROPE_SCALING_INV_FREQ)) {
        skip_reason_ = "the scaling tables are too large to allocate";
    }
    const int64_t entries = pairs <= kMaxTableElements ? pairs : 0;
    const float *tables[kScalingTableCount] = {};
    for (int t = 0; t < kScalingTableCount; t++) {
        // Valid values: factors >= 1 (as the unit tests draw them), frequencies of either sign.
        const float low = t == kInvFreq ? -1.0f : 1.0f;
        const float high = t == kShortFactor ? 2.0f : t == kLongFactor ? 16.0f : 1.0f;
        std::vector<float> values(static_cast<size_t>(entries));
        for (float &value : values) {
            value = low + static_cast<float>(next_uniform()) * (high - low);
        }
        const ScalingTableMode mode = code_of<ScalingTableMode>(r.scaling_tables[t]);
        if (!values.empty()) {
            float &odd = values[next_random() % values.size()];
            switch (mode) {
                case ScalingTableMode::OneZero: odd = 0; break;
                case ScalingTableMode::OneNegative: odd = -odd; break;
                case ScalingTableMode::OneNaN: odd = std::numeric_limits<float>::quiet_NaN(); break;
                case ScalingTableMode::OneInf: odd = std::numeric_limits<float>::infinity(); break;
                case ScalingTableMode::OneSteep: odd = t == kInvFreq ? 0x1p20f : 0x1p-20f; break;
                case ScalingTableMode::Valid:
                case ScalingTableMode::Null:
                case ScalingTableMode::Count: break;
            }
        }
        GuardedBytes &table = scaling_tables_[t];
        table = GuardedBytes(reinterpret_cast<const uint8_t *>(values.data()), values.size() * sizeof(float), flush_);
        scaling_tables_before_[t].assign(table.begin(), table.end());
        tables[t] = mode == ScalingTableMode::Null ? nullptr : reinterpret_cast<const float *>(table.data());
    }
    sc.short_factor = tables[kShortFactor];
    sc.long_factor = tables[kLongFactor];
    sc.inv_freq = tables[kInvFreq];
}

const float *FuzzCall::scaling_table_pointer(ScalingTable table) const {
    const rope_scaling &sc = params_.scaling;
    return table == kShortFactor ? sc.short_factor : table == kLongFactor ? sc.long_factor : sc.inv_freq;
}

std::vector<float> FuzzCall::scaling_table(ScalingTable table) const {
    if (scaling_table_pointer(table) == nullptr) {
        return {};
    }
    const std::vector<uint8_t> &bytes = scaling_tables_before_[table];
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!values.empty()) {  // (an empty vector's data() may be NULL, which memcpy must not get)
        std::memcpy(values.data(), bytes.data(), bytes.size());
    }
    return values;
}

double FuzzCall::cache_value(bool sine, int64_t row, int64_t pair) const {
    const rope_angles &a = params_.angles;
    const int64_t pairs = (params_.rotary_dim != 0 ? params_.rotary_dim : views_[kQ].sizes[3]) / 2;
    const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
    const int32_t dtype = enum_value(a.cache_dtype);
    const uint8_t *table = (sine ? sin_buffer_ : cos_buffer_).data();
    return ref::decode(load_bits(table + (row * row_stride + pair) * element_size(dtype), element_size(dtype)),
                       valid_dtype_or_f32(dtype));
}

void FuzzCall::build_structs(const Recipe &) {
    rope_tensor *fields[kTensorCount] = {&params_.q, &params_.k, &params_.q_out, &params_.k_out};
    for (int t = 0; t < kTensorCount; t++) {
        const View &v = views_[t];
        rope_tensor &field = *fields[t];
        store_raw(field.dtype, v.dtype);
        std::copy(v.sizes, v.sizes + 4, field.sizes);
        std::copy(v.strides, v.strides + 4, field.strides);
        if (v.null) {
            field.data = nullptr;
        } else if (v.arena >= 0) {
            Arena &arena = arenas_[v.arena];
            // An empty view points into its buffer too (its pointer still decides "in place").
            field.data = arena.bytes.data() + std::clamp<int64_t>(v.byte_offset, 0, arena.bytes.size());
        } else {
            placeholders_.emplace_back(0, 0, flush_);  // any access faults
            field.data = placeholders_.back().data();
        }
    }
    params_.struct_size = struct_size_;

    if (null_target_ != NullTarget::Params) {
        const int64_t size = ceil_to_multiple(std::clamp<int64_t>(struct_size_, 8, sizeof(rope_params) + 64), 8);
        params_buffer_ = GuardedBytes(static_cast<size_t>(size), 0, GuardedBytes::Flush::End);
        std::memcpy(params_buffer_.data(), &params_, std::min<size_t>(size, sizeof(rope_params)));
        params_before_.assign(params_buffer_.begin(), params_buffer_.end());
        // params() is what the guarded copy holds: an earlier layout's caller has no later fields.
        if (static_cast<size_t>(size) < sizeof(rope_params)) {
            std::memset(reinterpret_cast<std::byte *>(&params_) + size, 0, sizeof(rope_params) - size);
        }
    }
    if (null_target_ != NullTarget::Report) {
        const int64_t size = ceil_to_multiple(std::clamp<int64_t>(report_size_, 4, sizeof(rope_report) + 64), 4);
        report_buffer_ = GuardedBytes(static_cast<size_t>(size), 0, GuardedBytes::Flush::End);
        reset_report();
    }
}

const rope_params *FuzzCall::params_pointer() const {
    return null_target_ == NullTarget::Params ? nullptr : reinterpret_cast<const rope_params *>(params_buffer_.data());
}

rope_report *FuzzCall::report_pointer() {
    return null_target_ == NullTarget::Report ? nullptr : reinterpret_cast<rope_report *>(report_buffer_.data());
}

void FuzzCall::reset_report() {
    if (null_target_ == NullTarget::Report) {
        return;
    }
    rope_report init = rope_report_init();
    init.struct_size = report_size_;
    std::memset(report_buffer_.data(), kReportTailByte, report_buffer_.size());
    std::memcpy(report_buffer_.data(), &init, std::min(sizeof(init), report_buffer_.size()));
}

bool FuzzCall::fully_backed() const {
    for (int t = 0; t < kTensorCount; t++) {
        const View &v = views_[t];
        const bool used = t == kQ || t == kQOut || has_k();
        if (used && !v.null && !v.backed) {
            return false;
        }
    }
    return skip_reason_.empty() && (enum_value(params_.angles.source) != ROPE_SOURCE_CACHE || cache_backed_);
}

uint32_t FuzzCall::bits_before(int tensor, int64_t b, int64_t s, int64_t h, int64_t d) const {
    const View &v = views_[tensor];
    return load_bits(arenas_[v.arena].before.data() + v.byte_offset + v.index(b, s, h, d) * v.element_bytes(),
                     v.element_bytes());
}

uint32_t FuzzCall::bits_now(int tensor, int64_t b, int64_t s, int64_t h, int64_t d) const {
    const View &v = views_[tensor];
    return load_bits(arenas_[v.arena].bytes.data() + v.byte_offset + v.index(b, s, h, d) * v.element_bytes(),
                     v.element_bytes());
}

namespace {

/// Up to 12 values, then " ..." when there are more.
template <typename T>
std::string first_values(const std::vector<T> &values) {
    std::ostringstream out;
    for (size_t i = 0; i < std::min<size_t>(values.size(), 12); i++) {
        out << " " << saturate(values[i]);
    }
    out << (values.size() > 12 ? " ..." : "");
    return out.str();
}

std::optional<std::string> first_change(const char *what, const GuardedBytes &now, const std::vector<uint8_t> &before,
                                        const std::vector<bool> *writable = nullptr) {
    for (size_t i = 0; i < before.size(); i++) {
        if (now.data()[i] != before[i] && (writable == nullptr || !(*writable)[i])) {
            std::ostringstream out;
            out << what << ": byte " << i << " of " << before.size() << " changed from 0x" << std::hex
                << int{before[i]} << " to 0x" << int{now.data()[i]};
            return out.str();
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> FuzzCall::changed_outside(const std::vector<int> &writable) const {
    for (int a = 0; a < arena_count(); a++) {
        const Arena &arena = arenas_[a];
        std::vector<bool> covered(arena.before.size(), false);
        for (int t : writable) {
            const View &v = views_[t];
            if (v.arena != a || !v.has_elements()) {
                continue;
            }
            for (int64_t b = 0; b < v.sizes[0]; b++)
                for (int64_t s = 0; s < v.sizes[1]; s++)
                    for (int64_t h = 0; h < v.sizes[2]; h++)
                        for (int64_t d = 0; d < v.sizes[3]; d++) {
                            const int64_t at = v.byte_offset + v.index(b, s, h, d) * v.element_bytes();
                            std::fill_n(covered.begin() + at, v.element_bytes(), true);
                        }
        }
        const std::string name = "buffer " + std::to_string(a);
        if (auto change = first_change(name.c_str(), arena.bytes, arena.before, &covered)) {
            return change;
        }
    }
    if (auto change = first_change("the positions array", positions_buffer_, positions_before_)) {
        return change;
    }
    if (auto change = first_change("varlen.cu_seqlens", cu_seqlens_buffer_, cu_seqlens_before_)) {
        return change;
    }
    if (auto change = first_change("the cos table", cos_buffer_, cos_before_)) {
        return change;
    }
    if (auto change = first_change("the sin table", sin_buffer_, sin_before_)) {
        return change;
    }
    for (int t = 0; t < kScalingTableCount; t++) {
        if (auto change = first_change(kScalingTableNames[t], scaling_tables_[t], scaling_tables_before_[t])) {
            return change;
        }
    }
    if (null_target_ != NullTarget::Params) {
        return first_change("the rope_params struct", params_buffer_, params_before_);
    }
    return std::nullopt;
}

std::optional<std::string> FuzzCall::report_tail_changed() const {
    if (null_target_ == NullTarget::Report || report_buffer_.size() <= sizeof(rope_report)) {
        return std::nullopt;
    }
    for (size_t i = sizeof(rope_report); i < report_buffer_.size(); i++) {
        if (report_buffer_.data()[i] != kReportTailByte) {
            return "byte " + std::to_string(i) + " of a rope_report of struct_size " + std::to_string(report_size_) +
                   " changed: it lies past the rope_report this library knows";
        }
    }
    return std::nullopt;
}

std::string FuzzCall::describe() const {
    std::ostringstream out;
    const rope_params &p = params_;
    out << "  params" << (null_target_ == NullTarget::Params ? " = NULL" : "") << ": struct_size=" << p.struct_size
        << " abi_version=" << p.abi_version << " style=" << enum_value(p.style)
        << " direction=" << enum_value(p.direction) << " rotary_dim=" << p.rotary_dim
        << " rotary_offset=" << p.rotary_offset << " num_threads=" << p.num_threads << " isa_cap=" << isa_cap_
        << " report=" << (null_target_ == NullTarget::Report ? "NULL" : std::to_string(report_size_) + " bytes")
        << (flush_ == GuardedBytes::Flush::Start ? " flush=start" : " flush=end") << "\n";
    for (int t = 0; t < kTensorCount; t++) {
        const View &v = views_[t];
        out << "  " << kTensorNames[t] << ": dtype=" << v.dtype << " sizes=[" << v.sizes[0] << ", " << v.sizes[1]
            << ", " << v.sizes[2] << ", " << v.sizes[3] << "] strides=[" << v.strides[0] << ", " << v.strides[1]
            << ", " << v.strides[2] << ", " << v.strides[3] << "] ";
        if (v.null) {
            out << "data=NULL";
        } else if (v.arena < 0) {
            out << "not allocated";
        } else {
            out << "buffer " << v.arena << " (" << arenas_[v.arena].bytes.size() << " bytes) at byte " << v.byte_offset;
        }
        out << "\n";
    }
    const rope_positions &pos = p.positions;
    out << "  positions: kind=" << enum_value(pos.kind) << " index_type=" << enum_value(pos.index_type)
        << " data=" << (pos.data != nullptr ? "given" : "NULL") << " strides=[" << pos.strides[0] << ", "
        << pos.strides[1] << "] offset=" << pos.offset;
    if (positions_.known) {
        out << " range=[" << saturate(positions_.min) << ", " << saturate(positions_.max) << "]";
    }
    out << " values:" << first_values(positions_.values) << "\n";
    for (int stream = 1; !positions_.mrope_values[stream - 1].empty() && stream < 3; stream++) {
        out << "    mrope stream " << stream << ":" << first_values(positions_.mrope_values[stream - 1]) << "\n";
    }
    const rope_angles &a = p.angles;
    out << "  angles: source=" << enum_value(a.source) << " cos_cache=" << (a.cos_cache ? "given" : "NULL")
        << " sin_cache=" << (a.sin_cache ? "given" : "NULL") << " cache_len=" << a.cache_len
        << " cache_row_stride=" << a.cache_row_stride << " cache_dtype=" << enum_value(a.cache_dtype)
        << " (rows allocated: " << cache_rows_backed_ << ") base=" << a.base << " attn_factor=" << a.attn_factor
        << "\n";
    const rope_scaling &sc = p.scaling;
    out << "  scaling: type=" << enum_value(sc.type) << " factor=" << sc.factor
        << " original_max_positions=" << sc.original_max_positions << " max_positions=" << sc.max_positions
        << " low/high_freq_factor=" << sc.low_freq_factor << "/" << sc.high_freq_factor
        << " beta_fast/slow=" << sc.beta_fast << "/" << sc.beta_slow << " mscale/all_dim=" << sc.mscale << "/"
        << sc.mscale_all_dim << " yarn_no_truncate=" << sc.yarn_no_truncate << "\n";
    for (int t = 0; t < kScalingTableCount; t++) {
        const auto table = static_cast<ScalingTable>(t);
        const std::vector<float> values = scaling_table(table);
        out << "    " << kScalingTableNames[t] << (scaling_table_pointer(table) == nullptr ? " = NULL" : ":");
        for (size_t i = 0; i < std::min<size_t>(values.size(), 12); i++) {
            out << " " << values[i];
        }
        out << (values.size() > 12 ? " ...\n" : "\n");
    }
    const rope_varlen &v = p.varlen;
    out << "  varlen: cu_seqlens=" << (v.cu_seqlens != nullptr ? "given" : "NULL") << " index_type=" << enum_value(v.index_type)
        << " num_seqs=" << v.num_seqs << " entries:" << first_values(cu_seqlens_) << "\n";
    out << "  mrope: sections=[" << p.mrope.sections[0] << ", " << p.mrope.sections[1] << ", " << p.mrope.sections[2]
        << "] stream_stride=" << p.mrope.stream_stride << "; round_cos_sin=" << p.round_cos_sin << "\n";
    if (!skip_reason_.empty()) {
        out << "  not run: " << skip_reason_ << "\n";
    }
    return out.str();
}

}  // namespace ropegen::fuzz
