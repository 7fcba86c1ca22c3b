// SPDX-License-Identifier: Apache-2.0
#include "call_model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

namespace ropegen::fuzz {
namespace {

constexpr int64_t kTwo31 = int64_t{1} << 31;
constexpr int64_t kMaxTokens = int64_t{1} << 30;  // batch x seq of one call
/// Computed sources reduce angles exactly below 2^32 (spec §5): larger ones are rejected.
constexpr long double kMaxAngle = 0x1p32L;
/// The library computes its position limit from the angle bound in double: a position whose
/// largest angle lies this close to 2^32 (relative) may fall on either side.
constexpr long double kAngleLimitSlack = 0x1p-40L;

class Rules {
public:
    explicit Rules(Verdict *verdict) : verdict_(verdict) {
    }
    /// A rule of the ABI: when `broken`, the call must be rejected (with `status` or another
    /// broken rule's).
    template <typename... Parts>
    void require(bool holds, rope_status status, const Parts &...why) {
        if (!holds) {
            std::ostringstream text;
            (text << ... << why);
            verdict_->broken.emplace_back(status, text.str());
        }
    }
    size_t broken_count() const {
        return verdict_->broken.size();
    }
    /// A documented limit: when `applies`, rejecting with `status` is acceptable.
    void tolerate(bool applies, rope_status status) {
        const auto &known = verdict_->tolerated;
        if (applies && std::find(known.begin(), known.end(), status) == known.end()) {
            verdict_->tolerated.push_back(status);
        }
    }

private:
    Verdict *verdict_;
};

bool is_dtype(int32_t dtype) {
    return dtype >= ROPE_DTYPE_F32 && dtype <= ROPE_DTYPE_BF16;
}

// --- aliasing -----------------------------------------------------------------------------------

/// Byte intervals [start, start + length) of a view, sorted by start.
struct Intervals {
    std::vector<int64_t> starts;
    int64_t length = 0;
};

Intervals element_intervals(const View &v) {
    Intervals out{{}, v.element_bytes()};
    for (int64_t b = 0; b < v.sizes[0]; b++)
        for (int64_t s = 0; s < v.sizes[1]; s++)
            for (int64_t h = 0; h < v.sizes[2]; h++)
                for (int64_t d = 0; d < v.sizes[3]; d++) {
                    out.starts.push_back(v.byte_offset + v.index(b, s, h, d) * v.element_bytes());
                }
    std::sort(out.starts.begin(), out.starts.end());
    return out;
}

/// One interval per token covering all its heads: how a library may compare two views that walk
/// the same token lattice (packed QKV, a KV cache).
Intervals token_intervals(const View &v) {
    Intervals out{{}, ((v.sizes[2] - 1) * v.strides[2] + v.sizes[3]) * v.element_bytes()};
    for (int64_t b = 0; b < v.sizes[0]; b++)
        for (int64_t s = 0; s < v.sizes[1]; s++) {
            out.starts.push_back(v.byte_offset + (b * v.strides[0] + s * v.strides[1]) * v.element_bytes());
        }
    std::sort(out.starts.begin(), out.starts.end());
    return out;
}

bool intervals_meet(const Intervals &a, const Intervals &b) {
    size_t i = 0, j = 0;
    while (i < a.starts.size() && j < b.starts.size()) {
        if (a.starts[i] + a.length <= b.starts[j]) {
            i++;
        } else if (b.starts[j] + b.length <= a.starts[i]) {
            j++;
        } else {
            return true;
        }
    }
    return false;
}

bool has_repeated_address(const Intervals &a) {
    for (size_t i = 1; i < a.starts.size(); i++) {
        if (a.starts[i] - a.starts[i - 1] < a.length) {
            return true;
        }
    }
    return false;
}

bool same_description(const View &a, const View &b) {
    return a.arena == b.arena && a.byte_offset == b.byte_offset && std::equal(a.sizes, a.sizes + 4, b.sizes) &&
           std::equal(a.strides, a.strides + 4, b.strides);
}

/// The same elements at the same addresses, maybe described with other strides on axes of size 1.
bool same_elements(const View &a, const View &b) {
    if (a.arena != b.arena || a.byte_offset != b.byte_offset || a.element_bytes() != b.element_bytes() ||
        !std::equal(a.sizes, a.sizes + 4, b.sizes)) {
        return false;
    }
    for (int axis = 0; axis < 4; axis++) {
        if (a.sizes[axis] > 1 && a.strides[axis] != b.strides[axis]) {
            return false;
        }
    }
    return true;
}

bool byte_ranges_disjoint(const View &a, const View &b) {
    const int64_t a_first = a.byte_offset + a.min_index * a.element_bytes();
    const int64_t a_end = a.byte_offset + (a.max_index + 1) * a.element_bytes();
    const int64_t b_first = b.byte_offset + b.min_index * b.element_bytes();
    const int64_t b_end = b.byte_offset + (b.max_index + 1) * b.element_bytes();
    return a_end <= b_first || b_end <= a_first;
}

/// Both views walk one token lattice (same batch/seq sizes and strides, no repeated token) and
/// no token's span of heads meets the other's.
bool token_spans_disjoint(const View &a, const View &b) {
    const auto repeated = [](const View &v) {
        return (v.sizes[0] > 1 && v.strides[0] == 0) || (v.sizes[1] > 1 && v.strides[1] == 0);
    };
    const bool same_lattice = a.sizes[0] == b.sizes[0] && a.sizes[1] == b.sizes[1] &&
                              (a.sizes[0] == 1 || a.strides[0] == b.strides[0]) &&
                              (a.sizes[1] == 1 || a.strides[1] == b.strides[1]) && !repeated(a) && !repeated(b) &&
                              a.element_bytes() == b.element_bytes() &&
                              (a.byte_offset - b.byte_offset) % a.element_bytes() == 0;
    const auto no_negative = [](const View &v) {
        return std::all_of(v.strides, v.strides + 4, [](int64_t s) { return s >= 0; });
    };
    return same_lattice && no_negative(a) && no_negative(b) && !intervals_meet(token_intervals(a), token_intervals(b));
}

/// Every token and head step of both views is a multiple of their common heads stride (a slot),
/// and each keeps to its own lanes of the slot: q and k of GPT-NeoX's per-head fused QKV buffer
/// ([B][S][H][3D], k D lanes after q), which the library tells apart exactly (README's layouts).
bool in_separate_lanes(const View &a, const View &b) {
    const int64_t slot = a.strides[2], element = a.element_bytes();
    if (slot <= 0 || b.strides[2] != slot || a.dtype != b.dtype || a.strides[3] != 1 || b.strides[3] != 1 ||
        (b.byte_offset - a.byte_offset) % element != 0) {
        return false;
    }
    for (const View *v : {&a, &b}) {
        for (int axis = 0; axis < 2; axis++) {
            if (v->sizes[axis] > 1 && v->strides[axis] % slot != 0) {
                return false;
            }
        }
    }
    const int64_t b_lane = ((b.byte_offset - a.byte_offset) / element % slot + slot) % slot;  // a's is 0
    return a.sizes[3] <= b_lane && b.sizes[3] <= slot - b_lane;
}

/// With the axes sorted by stride, each stride clears the span of those inside it: no two
/// elements share an address (the test an implementation can afford; it may miss a few).
bool provably_self_disjoint(const View &v) {
    int order[4] = {0, 1, 2, 3};
    std::sort(order, order + 4, [&](int x, int y) { return v.strides[x] < v.strides[y]; });
    int64_t span = 0;
    for (int axis : order) {
        if (v.sizes[axis] <= 1) {
            continue;
        }
        if (v.strides[axis] <= span) {
            return false;
        }
        span += (v.sizes[axis] - 1) * v.strides[axis];
    }
    return true;
}

void judge_aliasing(const FuzzCall &call, Rules &rules) {
    const bool has_k = call.has_k();
    const auto used = [&](int t) { return t == kQ || t == kQOut || has_k; };
    const auto in_memory = [&](int t) { return !call.view(t).null && call.view(t).has_elements(); };
    // A view too large for the harness to allocate cannot be compared element by element.
    const auto unknown = [&](int t) { return in_memory(t) && call.view(t).arena < 0; };

    for (int out : {kQOut, kKOut}) {
        if (!used(out) || !in_memory(out)) {
            continue;
        }
        const View &v = call.view(out);
        if (unknown(out)) {
            rules.tolerate(true, ROPE_ERR_OVERLAP);
        } else if (!provably_self_disjoint(v)) {
            const bool repeats = has_repeated_address(element_intervals(v));
            rules.require(!repeats, ROPE_ERR_OVERLAP, kTensorNames[out], " maps two elements to one address");
            rules.tolerate(!repeats, ROPE_ERR_OVERLAP);
        }
    }
    struct Pair {
        int out, other;
    };
    for (const Pair &pair : {Pair{kQOut, kQ}, Pair{kQOut, kK}, Pair{kKOut, kK}, Pair{kKOut, kQ}, Pair{kQOut, kKOut}}) {
        if (!used(pair.out) || !used(pair.other) || !in_memory(pair.out) || !in_memory(pair.other)) {
            continue;
        }
        if (unknown(pair.out) || unknown(pair.other)) {
            rules.tolerate(true, ROPE_ERR_OVERLAP);
            continue;
        }
        const View &out = call.view(pair.out), &other = call.view(pair.other);
        if (out.arena != other.arena) {
            continue;
        }
        const bool own_input = pair.other == pair.out - 2;
        if (own_input && same_description(out, other)) {
            continue;  // in place
        }
        if (own_input && same_elements(out, other)) {
            rules.tolerate(true, ROPE_ERR_OVERLAP);  // in place in effect, though not "same strides"
            continue;
        }
        const bool share = intervals_meet(element_intervals(out), element_intervals(other));
        rules.require(!share, ROPE_ERR_OVERLAP, kTensorNames[pair.out], " shares memory with ",
                      kTensorNames[pair.other], own_input ? " without being exactly it (spec §4)" : " (spec §4)");
        rules.tolerate(!share && !byte_ranges_disjoint(out, other) && !token_spans_disjoint(out, other) &&
                           !in_separate_lanes(out, other),
                       ROPE_ERR_OVERLAP);
    }
}

// An output over a table the call reads (positions, cos/sin, cu_seqlens, the scaling's per-pair
// tables) is refused, by byte ranges. The harness keeps its own tables apart from the views, but
// describes some larger than it backs (a cache of cache_len rows, of which it backs the rows
// read): such a table's described bytes may reach an output. Tolerated, over bounds that contain
// the library's ranges.
void judge_outputs_over_tables(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    using Wide = __int128;
    struct Range {
        Wide first, end;
    };
    const auto at = [](const void *data) { return static_cast<Wide>(reinterpret_cast<uintptr_t>(data)); };
    // Factors capped at 2^62 and counts at 2^100, so that no product overflows 128 bits; a call
    // with larger ones breaks another rule anyway.
    const auto nonnegative = [](int64_t value) { return static_cast<Wide>(std::clamp<int64_t>(value, 0, int64_t{1} << 62)); };
    const auto magnitude = [&](int64_t value) { return value < 0 ? nonnegative(-(value + 1)) : nonnegative(value); };
    const auto capped = [](Wide count) { return std::min(count, Wide{1} << 100); };
    const Wide pairs = nonnegative(std::max<int64_t>(p.q.sizes[3], 0) / 2);
    std::vector<Range> tables;
    const auto add = [&](const void *data, Wide bytes) {
        if (data != nullptr && bytes > 0) {
            tables.push_back({at(data), at(data) + bytes});
        }
    };
    const Wide items = std::max({nonnegative(p.q.sizes[0]), nonnegative(p.varlen.num_seqs), Wide{1}});
    add(p.positions.data, capped((items - 1) * magnitude(p.positions.strides[0]) +
                                 (nonnegative(p.q.sizes[1]) + 1) * magnitude(p.positions.strides[1]) +
                                 2 * nonnegative(p.mrope.stream_stride) + 2) * 8);
    const Wide cache_row = std::max(nonnegative(p.angles.cache_row_stride), pairs);
    add(p.angles.cos_cache, nonnegative(p.angles.cache_len) * cache_row * 4);
    add(p.angles.sin_cache, nonnegative(p.angles.cache_len) * cache_row * 4);
    add(p.varlen.cu_seqlens, (nonnegative(p.varlen.num_seqs) + 1) * 8);
    for (const float *table : {p.scaling.short_factor, p.scaling.long_factor, p.scaling.inv_freq}) {
        add(table, pairs * 4);
    }
    for (const rope_tensor *out : {&p.q_out, &p.k_out}) {
        if (out->data == nullptr || std::any_of(out->sizes, out->sizes + 4, [](int64_t size) { return size <= 0; })) {
            continue;
        }
        Wide span = 1;
        for (int axis = 0; axis < 4; axis++) {
            span += nonnegative(out->sizes[axis] - 1) * magnitude(out->strides[axis]);
        }
        const Range bytes{at(out->data), at(out->data) + capped(span) * 4};
        rules.tolerate(std::any_of(tables.begin(), tables.end(),
                                   [&](const Range &t) { return t.first < bytes.end && bytes.first < t.end; }),
                       ROPE_ERR_OVERLAP);
    }
}

// DYNAMIC and LONGROPE measure a sequence's length on the tokens a kernel is given, and the
// dispatcher splits a call along the sequence axis when a stride there exceeds int32 (int64
// positions are read as int32 pairs) and the axis has more than one token: such a call is
// UNSUPPORTED, the one status a valid call may also get.
void judge_split_sequences(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const int32_t type = enum_value(p.scaling.type);
    if (type != ROPE_SCALING_DYNAMIC && type != ROPE_SCALING_LONGROPE) {
        return;
    }
    constexpr int64_t kMaxStride = std::numeric_limits<int32_t>::max();
    bool split = false;
    for (const rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        split = split || (t->sizes[1] > 1 && t->strides[1] > kMaxStride);
    }
    const int64_t scale = enum_value(p.positions.index_type) == ROPE_INDEX_INT64 ? 2 : 1;
    split = split || (p.q.sizes[1] > 1 && enum_value(p.positions.kind) == ROPE_POSITIONS_TABLE &&
                      p.positions.strides[1] > kMaxStride / scale);
    rules.tolerate(split, ROPE_ERR_UNSUPPORTED);
}

// --- everything else ------------------------------------------------------------------------------

void judge_tensors(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const int32_t q_dtype = enum_value(p.q.dtype);
    const int64_t head_dim = p.q.sizes[3];
    for (int t = 0; t < kTensorCount; t++) {
        if ((t == kK || t == kKOut) && !call.has_k()) {
            continue;
        }
        const View &v = call.view(t);
        const char *name = kTensorNames[t];
        rules.require(!v.null, ROPE_ERR_NULL_POINTER, name, ".data is NULL");
        rules.require(is_dtype(v.dtype), ROPE_ERR_BAD_ENUM, name, ".dtype=", v.dtype);
        rules.require(!is_dtype(v.dtype) || !is_dtype(q_dtype) || v.dtype == q_dtype, ROPE_ERR_DTYPE_MISMATCH, name,
                      ".dtype differs from q's");
        for (int axis = 0; axis < 4; axis++) {
            rules.require(v.sizes[axis] >= 0, ROPE_ERR_BAD_SHAPE, name, ".sizes[", axis, "] < 0");
            rules.require(axis == 3 || v.sizes[axis] < kTwo31, ROPE_ERR_BAD_SHAPE, name, ".sizes[", axis, "] >= 2^31");
            rules.require(v.strides[axis] >= 0, ROPE_ERR_BAD_STRIDE, name, ".strides[", axis, "] < 0");
        }
        rules.require(v.strides[3] == 1 || v.sizes[3] <= 1, ROPE_ERR_BAD_STRIDE, name, ".strides[3] != 1");
        rules.require(!v.overflows, ROPE_ERR_SIZE_OVERFLOW, name, ": element count or byte span beyond int64");
        rules.tolerate(v.may_overflow, ROPE_ERR_SIZE_OVERFLOW);
        if (t != kQ) {
            rules.require(v.sizes[3] == head_dim, ROPE_ERR_BAD_HEAD_DIM, name, ".sizes[3] differs from q's");
            const View &partner = call.view(t == kKOut ? kK : kQ);
            const int shared_axes = t == kK ? 2 : 3;  // k may have its own head count
            for (int axis = 0; axis < shared_axes; axis++) {
                rules.require(v.sizes[axis] == partner.sizes[axis], ROPE_ERR_BAD_SHAPE, name, ".sizes[", axis,
                              "] differs from ", t == kKOut ? "k" : "q");
            }
        }
    }
    const int64_t batch = p.q.sizes[0], seq = p.q.sizes[1];
    const bool sizes_in_range = batch >= 0 && seq >= 0 && batch < kTwo31 && seq < kTwo31;
    rules.require(!sizes_in_range || batch * seq <= kMaxTokens, ROPE_ERR_BAD_SHAPE, "batch x seq=", batch, " x ", seq,
                  " tokens > 2^30");
    rules.require(head_dim > 0 && head_dim % 2 == 0, ROPE_ERR_BAD_HEAD_DIM, "head_dim=", head_dim,
                  " is not even and positive");
    rules.tolerate(head_dim > std::numeric_limits<int32_t>::max(), ROPE_ERR_BAD_HEAD_DIM);

    const int64_t rotary = p.rotary_dim != 0 ? p.rotary_dim : head_dim;
    rules.require(rotary >= 2 && rotary % 2 == 0 && rotary <= head_dim, ROPE_ERR_BAD_ROTARY, "rotary_dim=", rotary,
                  " breaks 2 <= R <= D, R even");
    rules.require(p.rotary_offset >= 0 && static_cast<__int128>(p.rotary_offset) + rotary <= head_dim,
                  ROPE_ERR_BAD_ROTARY, "rotary_offset=", p.rotary_offset, " breaks o >= 0, o + R <= D");
}

void judge_angles(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const rope_angles &a = p.angles;
    const int32_t source = enum_value(a.source);
    rules.require(p.num_threads >= 0, ROPE_ERR_BAD_VALUE, "num_threads=", p.num_threads);
    if (source == ROPE_SOURCE_COMPAT || source == ROPE_SOURCE_PRECISE) {
        const double base = a.base != 0 ? a.base : 10000.0;
        const double attn_factor = a.attn_factor != 0 ? a.attn_factor : 1.0;
        rules.require(std::isfinite(base) && base > 0, ROPE_ERR_BAD_VALUE, "base=", base);
        rules.tolerate(base <= 1, ROPE_ERR_BAD_VALUE);  // the library asks for base > 1
        // compat takes powf of f32(base) (spec §5): a base beyond f32's range may be refused.
        rules.tolerate(source == ROPE_SOURCE_COMPAT && base > std::numeric_limits<float>::max(), ROPE_ERR_BAD_VALUE);
        rules.require(std::isfinite(attn_factor), ROPE_ERR_BAD_VALUE, "attn_factor=", attn_factor);
    }
    if (source != ROPE_SOURCE_CACHE) {
        return;
    }
    rules.require(a.cos_cache != nullptr && a.sin_cache != nullptr, ROPE_ERR_NULL_POINTER, "a cos/sin table is NULL");
    rules.require(a.cache_len > 0, ROPE_ERR_BAD_VALUE, "cache_len=", a.cache_len);
    const int32_t cache_dtype = enum_value(a.cache_dtype);
    rules.require(is_dtype(cache_dtype), ROPE_ERR_BAD_ENUM, "cache_dtype=", cache_dtype);
    rules.require(!is_dtype(cache_dtype) || cache_dtype == ROPE_DTYPE_F32 || cache_dtype == enum_value(p.q.dtype),
                  ROPE_ERR_DTYPE_MISMATCH, "cache_dtype=", cache_dtype, " is neither f32 nor the tensors' dtype");
    const int64_t rotary = p.rotary_dim != 0 ? p.rotary_dim : p.q.sizes[3];
    const int64_t pairs = rotary / 2;
    const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
    if (rotary >= 2 && rotary % 2 == 0) {
        rules.require(row_stride >= pairs, ROPE_ERR_BAD_STRIDE, "cache_row_stride=", a.cache_row_stride, " < R/2");
    }
    rules.tolerate(row_stride >= kTwo31, ROPE_ERR_BAD_STRIDE);  // rows indexed with int32
    // The parity mode rounds cos/sin to the tensors' dtype: a cache holds them so (rope.h).
    const int32_t q_dtype = enum_value(p.q.dtype);
    rules.require(p.round_cos_sin == 0 || q_dtype == ROPE_DTYPE_F32 || cache_dtype == q_dtype, ROPE_ERR_BAD_VALUE,
                  "round_cos_sin=", p.round_cos_sin, " with cache_dtype=", cache_dtype, " for tensors of dtype ",
                  q_dtype);
    int64_t bytes = 0;
    rules.require(a.cache_len <= 0 || row_stride <= 0 ||
                      (!__builtin_mul_overflow(a.cache_len, row_stride, &bytes) &&
                       !__builtin_mul_overflow(bytes, element_size(cache_dtype), &bytes)),
                  ROPE_ERR_SIZE_OVERFLOW, "cache_len x row stride overflows");
}

/// Frequency scaling (spec §6 and rope.h's rope_scaling: the fields each type reads). Returns a
/// bound on |inv_freq| over the pairs, which limits the positions of a computed source: 1 for
/// the unscaled frequencies (base > 1: pair 0's is 1, the others smaller), 1 / factor where a
/// factor below 1 divides them, the largest |inv_freq| of a caller's table. A scaling that breaks
/// a rule is rejected for that: its bound is 1, so that no position rule stands in for it.
/// `conservative`: a larger bound a library may use where f32 rounding can push |inv_freq| past
/// the exact one (LLAMA3's smoothing, up to a few ulps of high_freq_factor over the band's width).
struct FrequencyBounds {
    long double exact = 1, conservative = 1;
};
FrequencyBounds judge_scaling(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const rope_scaling &sc = p.scaling;
    const int32_t type = enum_value(sc.type), source = enum_value(p.angles.source);
    rules.require(type >= ROPE_SCALING_NONE && type <= ROPE_SCALING_INV_FREQ, ROPE_ERR_BAD_ENUM, "scaling.type=", type);
    if (type <= ROPE_SCALING_NONE || type > ROPE_SCALING_INV_FREQ) {
        return {};
    }
    rules.require(source != ROPE_SOURCE_CACHE, ROPE_ERR_BAD_VALUE, "scaling.type=", type,
                  " with the cache source (a cos/sin table holds scaled values already)");
    if (source != ROPE_SOURCE_COMPAT && source != ROPE_SOURCE_PRECISE) {
        return {};
    }
    const size_t broken_before = rules.broken_count();
    const auto finite_positive = [&](const char *name, double value) {
        rules.require(std::isfinite(value) && value > 0, ROPE_ERR_BAD_VALUE, "scaling.", name, "=", value,
                      " must be finite and > 0");
    };
    const auto original_max_in_range = [&] {
        rules.require(sc.original_max_positions >= 1 && sc.original_max_positions < kTwo31, ROPE_ERR_BAD_VALUE,
                      "scaling.original_max_positions=", sc.original_max_positions, " is not in [1, 2^31)");
    };
    // The least and greatest |value| of a table of R/2 entries, each finite (and > 0 for factors).
    const auto table_magnitudes = [&](ScalingTable table, bool factors) {
        const char *name = kScalingTableNames[table];
        rules.require(call.scaling_table_pointer(table) != nullptr, ROPE_ERR_NULL_POINTER, name, " is NULL");
        std::pair<long double, long double> magnitudes{std::numeric_limits<long double>::infinity(), 0};
        const std::vector<float> values = call.scaling_table(table);
        for (size_t i = 0; i < values.size(); i++) {
            rules.require(std::isfinite(values[i]) && (!factors || values[i] > 0), ROPE_ERR_BAD_VALUE, name, "[", i,
                          "]=", values[i], factors ? " must be finite and > 0" : " must be finite");
            magnitudes.first = std::min<long double>(magnitudes.first, std::fabs(values[i]));
            magnitudes.second = std::max<long double>(magnitudes.second, std::fabs(values[i]));
        }
        return magnitudes;
    };
    // LINEAR, YARN and LLAMA3 divide inv_freq by the factor (some pairs or all).
    const long double divided = std::max(1.0L, 1.0L / sc.factor);
    long double bound = 1, conservative = 1;
    switch (type) {
        case ROPE_SCALING_LINEAR:
            finite_positive("factor", sc.factor);
            bound = divided;
            break;
        case ROPE_SCALING_DYNAMIC: {
            finite_positive("factor", sc.factor);
            original_max_in_range();
            const int64_t rotary = p.rotary_dim != 0 ? p.rotary_dim : p.q.sizes[3];
            rules.require(rotary >= 4, ROPE_ERR_BAD_ROTARY, "dynamic scaling raises base to R/(R-2): rotary_dim=",
                          rotary, " must be >= 4");
            break;
        }
        case ROPE_SCALING_YARN:
            finite_positive("factor", sc.factor);
            original_max_in_range();
            finite_positive("beta_fast", sc.beta_fast != 0 ? sc.beta_fast : 32.0f);
            finite_positive("beta_slow", sc.beta_slow != 0 ? sc.beta_slow : 1.0f);
            for (const auto &[name, mscale] : {std::pair{"mscale", sc.mscale}, std::pair{"mscale_all_dim", sc.mscale_all_dim}}) {
                rules.require(std::isfinite(mscale) && mscale >= 0, ROPE_ERR_BAD_VALUE, "scaling.", name, "=", mscale,
                              " must be finite and >= 0");
            }
            bound = divided;
            break;
        case ROPE_SCALING_LONGROPE: {
            original_max_in_range();
            rules.require(sc.max_positions >= 0, ROPE_ERR_BAD_VALUE, "scaling.max_positions=", sc.max_positions,
                          " must be >= 0");
            // The derived attention factor divides by ln(orig).
            rules.require(p.angles.attn_factor != 0 || sc.original_max_positions != 1 || sc.max_positions <= 1,
                          ROPE_ERR_BAD_VALUE, "scaling.original_max_positions=1 with max_positions=", sc.max_positions,
                          " derives an attention factor that divides by ln(1)");
            // inv_freq / factor[i], of whichever table a sequence's length picks.
            const long double least = std::min(table_magnitudes(kShortFactor, true).first,
                                               table_magnitudes(kLongFactor, true).first);
            bound = std::max(1.0L, 1 / least);
            break;
        }
        case ROPE_SCALING_LLAMA3:
            finite_positive("factor", sc.factor);
            original_max_in_range();
            finite_positive("low_freq_factor", sc.low_freq_factor);
            finite_positive("high_freq_factor", sc.high_freq_factor);
            rules.require(sc.high_freq_factor > sc.low_freq_factor, ROPE_ERR_BAD_VALUE, "scaling.high_freq_factor=",
                          sc.high_freq_factor, " must be > low_freq_factor=", sc.low_freq_factor);
            bound = divided;
            conservative = divided * (1 + 0x1p-18L * sc.high_freq_factor / (sc.high_freq_factor - sc.low_freq_factor));
            break;
        default: bound = table_magnitudes(kInvFreq, false).second;  // INV_FREQ
    }
    // compat computes inv_freq in f32: 1 / factor must not overflow it (LLAMA3: its factor alone).
    rules.require(source != ROPE_SOURCE_COMPAT || bound <= std::numeric_limits<float>::max(), ROPE_ERR_BAD_VALUE,
                  "1 / a scaling factor overflows the compat source's f32 inv_freq");
    if (rules.broken_count() != broken_before) {
        return {};
    }
    return {bound, std::max(bound, conservative)};
}

/// mrope (spec §6, rope.h's rope_params.mrope): sections of the pairs over three position
/// streams of a table, for the half style and a computed source without per-sequence lengths.
void judge_mrope(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const rope_mrope &m = p.mrope;
    if (m.sections[0] == 0 && m.sections[1] == 0 && m.sections[2] == 0) {
        return;
    }
    const int64_t pairs = (p.rotary_dim != 0 ? p.rotary_dim : p.q.sizes[3]) / 2;
    rules.require(m.sections[0] >= 0 && m.sections[1] >= 0 && m.sections[2] >= 0 &&
                      int64_t{m.sections[0]} + m.sections[1] + m.sections[2] == pairs,
                  ROPE_ERR_BAD_VALUE, "mrope.sections=[", m.sections[0], ", ", m.sections[1], ", ", m.sections[2],
                  "] must be >= 0 and sum to rotary_dim/2=", pairs);
    rules.require(enum_value(p.style) == ROPE_STYLE_HALF, ROPE_ERR_BAD_VALUE, "mrope with style=", enum_value(p.style),
                  " (half only)");
    rules.require(enum_value(p.angles.source) != ROPE_SOURCE_CACHE, ROPE_ERR_BAD_VALUE,
                  "mrope with the cache source (a computed one only)");
    rules.require(enum_value(p.positions.kind) == ROPE_POSITIONS_TABLE, ROPE_ERR_BAD_VALUE, "mrope with positions.kind=",
                  enum_value(p.positions.kind), " (three position tables only)");
    const int32_t scaling = enum_value(p.scaling.type);
    rules.require(scaling != ROPE_SCALING_DYNAMIC && scaling != ROPE_SCALING_LONGROPE, ROPE_ERR_BAD_VALUE,
                  "mrope with scaling.type=", scaling, " (a sequence's length over three streams is not defined)");
    rules.require(m.stream_stride >= 0 && m.stream_stride < (int64_t{1} << 30), ROPE_ERR_BAD_STRIDE,
                  "mrope.stream_stride=", m.stream_stride, " is not in [0, 2^30)");
}

/// varlen (THD, rope.h's rope_params.varlen): [1, total_tokens] tensors split by cu_seqlens.
void judge_varlen(const FuzzCall &call, Rules &rules) {
    const rope_params &p = call.params();
    const rope_varlen &v = p.varlen;
    if (v.cu_seqlens == nullptr) {
        return;
    }
    const int32_t index_type = enum_value(v.index_type);
    rules.require(index_type == ROPE_INDEX_INT32 || index_type == ROPE_INDEX_INT64, ROPE_ERR_BAD_ENUM,
                  "varlen.index_type=", index_type);
    rules.require(p.q.sizes[0] == 1, ROPE_ERR_BAD_SHAPE, "q.sizes[0]=", p.q.sizes[0], " with varlen (batch 1 only)");
    rules.require(v.num_seqs >= 0 && v.num_seqs < kTwo31, ROPE_ERR_BAD_SHAPE, "varlen.num_seqs=", v.num_seqs,
                  " is not in [0, 2^31)");
    const std::vector<int64_t> &starts = call.cu_seqlens();
    for (size_t b = 0; b < starts.size(); b++) {
        rules.require(b > 0 || starts[b] == 0, ROPE_ERR_BAD_SHAPE, "varlen.cu_seqlens[0]=", starts[b], " is not 0");
        rules.require(b == 0 || starts[b] >= starts[b - 1], ROPE_ERR_BAD_SHAPE, "varlen.cu_seqlens[", b, "]=", starts[b],
                      " is below the entry before it");
    }
    rules.require(starts.empty() || starts.back() == p.q.sizes[1], ROPE_ERR_BAD_SHAPE, "varlen.cu_seqlens[num_seqs]=",
                  starts.empty() ? 0 : starts.back(), " is not the packed token count q.sizes[1]=", p.q.sizes[1]);
}

void judge_positions(const FuzzCall &call, Rules &rules, const FrequencyBounds &inv_freq_bound) {
    const rope_params &p = call.params();
    const rope_positions &pos = p.positions;
    const int32_t kind = enum_value(pos.kind), index_type = enum_value(pos.index_type);
    rules.require(kind == ROPE_POSITIONS_OFFSET || kind == ROPE_POSITIONS_TABLE, ROPE_ERR_BAD_ENUM, "positions.kind=",
                  kind);
    const bool table = kind == ROPE_POSITIONS_TABLE;
    const bool reads_data = table || (kind == ROPE_POSITIONS_OFFSET && pos.data != nullptr);
    const bool index_type_valid = index_type == ROPE_INDEX_INT32 || index_type == ROPE_INDEX_INT64;
    rules.require(index_type_valid || !reads_data, ROPE_ERR_BAD_ENUM, "positions.index_type=", index_type);
    rules.tolerate(!index_type_valid, ROPE_ERR_BAD_ENUM);  // checked even when no array is read
    const bool strides_valid = pos.strides[0] >= 0 && (pos.strides[1] >= 0 || !table);
    rules.require(strides_valid || !reads_data, ROPE_ERR_BAD_STRIDE, "positions.strides < 0");
    rules.tolerate(pos.strides[0] < 0 || pos.strides[1] < 0, ROPE_ERR_BAD_STRIDE);

    const bool tokens = p.q.sizes[0] > 0 && p.q.sizes[1] > 0;
    rules.require(!tokens || !table || pos.data != nullptr, ROPE_ERR_NULL_POINTER, "positions.data is NULL");
    if (!call.positions().known) {
        return;
    }
    const int32_t source = enum_value(p.angles.source);
    const bool cache = source == ROPE_SOURCE_CACHE;
    const __int128 lowest = call.positions().min, highest = call.positions().max;
    rules.require(lowest >= 0, ROPE_ERR_POSITION_OUT_OF_RANGE, "a position is negative");
    rules.require(!cache || highest < p.angles.cache_len, ROPE_ERR_POSITION_OUT_OF_RANGE, "position ",
                  static_cast<int64_t>(std::min<__int128>(highest, std::numeric_limits<int64_t>::max())),
                  " is not below cache_len=", p.angles.cache_len);
    rules.tolerate(highest >= kTwo31, ROPE_ERR_POSITION_OUT_OF_RANGE);  // kernels index with int32
    const bool computed = source == ROPE_SOURCE_COMPAT || source == ROPE_SOURCE_PRECISE;
    if (computed && highest > 0) {
        // The largest angle, position x |inv_freq|, must stay below 2^32 (spec §5).
        const long double largest_angle = static_cast<long double>(highest) * inv_freq_bound.exact;
        rules.require(largest_angle < kMaxAngle * (1 + kAngleLimitSlack), ROPE_ERR_POSITION_OUT_OF_RANGE, "position ",
                      static_cast<int64_t>(std::min<__int128>(highest, std::numeric_limits<int64_t>::max())),
                      " x |inv_freq| <= ", static_cast<double>(inv_freq_bound.exact), " reaches 2^32");
        const long double conservative_angle = static_cast<long double>(highest) * inv_freq_bound.conservative;
        rules.tolerate(conservative_angle >= kMaxAngle * (1 - kAngleLimitSlack), ROPE_ERR_POSITION_OUT_OF_RANGE);
    }
}

}  // namespace

bool Verdict::allows_rejection(int32_t status) const {
    return std::any_of(broken.begin(), broken.end(), [&](const auto &rule) { return rule.first == status; }) ||
           std::find(tolerated.begin(), tolerated.end(), status) != tolerated.end();
}

std::string Verdict::describe() const {
    std::ostringstream out;
    for (const auto &[status, why] : broken) {
        out << "  breaks: " << rope_status_string(status) << " -- " << why << "\n";
    }
    for (rope_status status : tolerated) {
        out << "  may also get: " << rope_status_string(status) << "\n";
    }
    if (broken.empty()) {
        out << "  breaks no rule: a valid call\n";
    }
    return out.str();
}

Verdict judge_validity(const FuzzCall &call) {
    Verdict verdict;
    Rules rules(&verdict);
    if (call.params_pointer() == nullptr) {
        rules.require(false, ROPE_ERR_NULL_POINTER, "params is NULL");
        return verdict;
    }
    const rope_params &p = call.params();
    // A struct of another size or version is not read any further.
    rules.require(p.abi_version == ROPE_ABI_VERSION, ROPE_ERR_ABI_MISMATCH, "abi_version=", p.abi_version);
    // Three layouts: today's, the first (fields up to num_threads) and the second (up to
    // stream), each padded to 8 bytes. The fields an earlier layout lacks read as zero
    // (FuzzCall::params() holds what the caller's struct_size covers).
    auto padded = [](size_t bytes) { return (bytes + 7) / 8 * 8; };
    const bool known_layout = p.struct_size == sizeof(rope_params) ||
                              p.struct_size == padded(offsetof(rope_params, device)) ||
                              p.struct_size == padded(offsetof(rope_params, scaling));
    rules.require(known_layout, ROPE_ERR_ABI_MISMATCH, "struct_size=", p.struct_size);
    if (!verdict.valid()) {
        return verdict;
    }
    const int32_t style = enum_value(p.style), direction = enum_value(p.direction);
    const int32_t source = enum_value(p.angles.source);
    rules.require(style == ROPE_STYLE_HALF || style == ROPE_STYLE_INTERLEAVED, ROPE_ERR_BAD_ENUM, "style=", style);
    rules.require(direction == ROPE_FORWARD || direction == ROPE_INVERSE, ROPE_ERR_BAD_ENUM, "direction=", direction);
    rules.require(source >= ROPE_SOURCE_CACHE && source <= ROPE_SOURCE_PRECISE, ROPE_ERR_BAD_ENUM, "source=", source);
    judge_tensors(call, rules);
    judge_angles(call, rules);
    judge_mrope(call, rules);
    judge_varlen(call, rules);
    judge_positions(call, rules, judge_scaling(call, rules));
    judge_aliasing(call, rules);
    judge_outputs_over_tables(call, rules);
    judge_split_sequences(call, rules);
    return verdict;
}

}  // namespace ropegen::fuzz
