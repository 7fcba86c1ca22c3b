// SPDX-License-Identifier: Apache-2.0
// Argument validation (see internal/validate.h). Rules are checked in the order of the spec's
// sections; each failure names the argument, the value and the rule.
#include "internal/validate.h"

#include "internal/enum_value.h"
#include "internal/kernel_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace ropegen {
namespace {

constexpr int64_t kMaxPosition = std::numeric_limits<int32_t>::max();  // kernels index with int32
// The computed sources reduce an angle by pi/2 exactly while |angle| < 2^32 x pi/2 (sin_cos in
// generators/rope_math.cpp); beyond, their cos/sin would be wrong without a sign of it. Calls are
// held to 2^32: the margin covers the f32 roundings of positions and frequencies.
constexpr double kMaxAngle = 4294967296.0;

// A bound on |inv_freq| over the pairs of a call, and the field that sets it.
struct FrequencyBound {
    double value = 1.0;
    const char *field = "";
};

// The layouts of rope_params that ABI version 1 has had, oldest first: the bytes its callers
// fill (the fields up to the first one appended after it) and its size (padded to the struct's
// 8-byte alignment). Their callers get the fields appended since as zeros.
constexpr size_t padded_params_size(size_t fields) {
    return (fields + alignof(rope_params) - 1) / alignof(rope_params) * alignof(rope_params);
}
struct ParamsLayout {
    size_t fields;
    uint32_t size;
    const char *note;
};
constexpr ParamsLayout kParamsLayouts[] = {
    {offsetof(rope_params, device), padded_params_size(offsetof(rope_params, device)), "before device and stream"},
    {offsetof(rope_params, scaling), padded_params_size(offsetof(rope_params, scaling)), "before scaling and round_cos_sin"},
    {sizeof(rope_params), sizeof(rope_params), "this header's"},
};

// The layout of a rope_params of `struct_size` bytes, or null for a size no layout has.
const ParamsLayout *find_layout(uint32_t struct_size) {
    const ParamsLayout *layout = std::find_if(std::begin(kParamsLayouts), std::end(kParamsLayouts),
                                              [&](const ParamsLayout &l) { return l.size == struct_size; });
    return layout == std::end(kParamsLayouts) ? nullptr : layout;
}

// Accumulates a message; `fail(status) << ...` reads like the rule it reports. The stream is
// built only on failure: a valid call (the hot path) pays nothing for it.
class Failure {
public:
    explicit Failure(std::string *message) : message_(message) {
    }
    std::ostringstream &fail(rope_status status) {
        status_ = status;
        stream_.emplace();
        return *stream_;
    }
    rope_status finish() {
        if (status_ != ROPE_OK) {
            *message_ = stream_->str();
        }
        return status_;
    }
    bool failed() const {
        return status_ != ROPE_OK;
    }

private:
    std::string *message_;
    std::optional<std::ostringstream> stream_;
    rope_status status_ = ROPE_OK;
};

bool multiply_overflows(int64_t a, int64_t b, int64_t *product) {
    return __builtin_mul_overflow(a, b, product);
}

// Whether views of equal sizes step `axis` alike: a stride along an axis of one item is never
// stepped, so it may differ (a decode step's q described as BSHD, its output as BHSD).
bool same_steps(const rope_tensor &a, const rope_tensor &b, int axis) {
    return a.sizes[axis] <= 1 || a.strides[axis] == b.strides[axis];
}

// The same elements at the same addresses.
bool same_view(const rope_tensor &a, const rope_tensor &b) {
    return a.data == b.data && std::memcmp(a.sizes, b.sizes, sizeof(a.sizes)) == 0 && same_steps(a, b, 0) &&
           same_steps(a, b, 1) && same_steps(a, b, 2) && same_steps(a, b, 3);
}

using Wide = __int128;  // products of two 64-bit values, and sums of such products, fit

// sum over i in [0, n) of floor((a*i + b) / m), for n >= 0, m > 0, a >= 0, b >= 0, in O(log m)
// steps: the Euclid-like reduction that swaps the roles of a and m. Every term is nonnegative, so
// no partial sum exceeds the whole.
Wide floor_sum(Wide n, Wide m, Wide a, Wide b) {
    Wide sum = 0;
    while (true) {
        if (a >= m) {
            sum += n * (n - 1) / 2 * (a / m);
            a %= m;
        }
        if (b >= m) {
            sum += n * (b / m);
            b %= m;
        }
        const Wide top = a * n + b;
        if (top < m) {
            return sum;
        }
        n = top / m;
        b = top % m;
        std::swap(m, a);
    }
}

// The number of (x, y) with 0 <= x < nx, 0 <= y < ny and sx*x + sy*y <= t (sx, sy >= 0).
Wide lattice_points_up_to(Wide sx, Wide nx, Wide sy, Wide ny, Wide t) {
    if (t < 0) {
        return 0;
    }
    if (sx == 0 || sy == 0) {
        const auto up_to = [t](Wide stride, Wide n) { return stride == 0 ? n : std::min(n, t / stride + 1); };
        return up_to(sx, nx) * up_to(sy, ny);
    }
    // Columns x below x_full hold all ny points; those from x_full up to x_some hold
    // floor((t - sx*x) / sy) + 1 of them, a floor sum once x runs downwards from x_some - 1.
    const Wide rest = t - (ny - 1) * sy;
    const Wide x_full = rest < 0 ? 0 : std::min(nx, rest / sx + 1);
    const Wide x_some = std::min(nx, t / sx + 1);
    const Wide columns = x_some - x_full;
    return x_full * ny + columns + floor_sum(columns, sy, sx, t - sx * (x_some - 1));
}

}  // namespace

bool token_lattice_meets(int64_t sb, int64_t nb, int64_t ss, int64_t ns, int64_t lo, int64_t hi) {
    // Shifted to x = db + nb - 1 in [0, 2nb - 1) and y = ds + ns - 1 in [0, 2ns - 1), the value
    // grows by shift; the points strictly between lo and hi are those up to hi - 1 less those up
    // to lo. Counting, not walking an axis: sizes of 2^30 each cost as little as sizes of 2.
    const Wide shift = Wide{sb} * (nb - 1) + Wide{ss} * (ns - 1);
    const Wide nx = 2 * Wide{nb} - 1, ny = 2 * Wide{ns} - 1;
    return lattice_points_up_to(sb, nx, ss, ny, Wide{hi} - 1 + shift) > lattice_points_up_to(sb, nx, ss, ny, Wide{lo} + shift);
}

namespace {

// True when the elements of views a and b (b starting `delta` elements after a) keep to separate
// lanes of slots of one heads stride: every step of a token or head is a multiple of that
// stride, so a's elements lie at [0, Da) of a slot and b's at [r, r + Db), r = delta mod stride.
// Heads interleaved within tokens, as q and k of GPT-NeoX's fused [B][S][H][3D] QKV buffer.
bool in_separate_lanes(const rope_tensor &a, const rope_tensor &b, int64_t delta) {
    const int64_t slot = a.sizes[2] > 1 ? a.strides[2] : b.strides[2];
    if (slot <= 0) {
        return false;
    }
    for (const rope_tensor *t : {&a, &b}) {
        for (int axis = 0; axis < 3; axis++) {
            if (t->sizes[axis] > 1 && t->strides[axis] % slot != 0) {
                return false;
            }
        }
    }
    const int64_t r = delta % slot < 0 ? delta % slot + slot : delta % slot;
    return a.sizes[3] <= r && b.sizes[3] <= slot - r;
}

// True when two views share no element: views in separate lanes of every head slot
// (in_separate_lanes), or views with the same batch and seq strides (views into one buffer:
// packed QKV, a KV cache) compared exactly on their token lattice, each token's heads taken as
// one contiguous span; any other pair is judged by its byte range (ra, rb).
bool disjoint(const rope_tensor &a, const ByteRange &ra, const rope_tensor &b, const ByteRange &rb) {
    if (ra.empty || rb.empty || ra.last < rb.first || rb.last < ra.first) {
        return true;
    }
    const int64_t element = static_cast<int64_t>(dtype_bytes(a.dtype));
    const intptr_t byte_delta = reinterpret_cast<intptr_t>(b.data) - reinterpret_cast<intptr_t>(a.data);
    if (a.dtype != b.dtype || byte_delta % element != 0) {
        return false;
    }
    const int64_t delta = byte_delta / element;
    if (in_separate_lanes(a, b, delta)) {
        return true;
    }
    const bool same_tokens = a.sizes[0] == b.sizes[0] && a.sizes[1] == b.sizes[1] && same_steps(a, b, 0) && same_steps(a, b, 1);
    const bool repeated_tokens = (a.sizes[0] > 1 && a.strides[0] == 0) || (a.sizes[1] > 1 && a.strides[1] == 0);
    if (!same_tokens || repeated_tokens) {
        return false;
    }
    auto token_span = [](const rope_tensor &t) { return (t.sizes[2] - 1) * t.strides[2] + t.sizes[3]; };
    // Overlap needs tokens ta, tb and offsets x in [0, span_a), y in [0, span_b) with
    // ta + x = tb + delta + y, i.e. ta - tb in (delta - span_a, delta + span_b).
    return !token_lattice_meets(a.strides[0], a.sizes[0], a.strides[1], a.sizes[1], delta - token_span(a),
                                delta + token_span(b));
}

// The bytes of a view with elements whose farthest element lies `span` elements past its first
// (byte_range() and check_tensor() share it).
ByteRange bytes_spanned(const rope_tensor &t, int64_t span) {
    const auto first = reinterpret_cast<uintptr_t>(t.data);
    return {first, first + static_cast<uintptr_t>((span + 1) * static_cast<int64_t>(dtype_bytes(t.dtype))) - 1, false};
}

// True when no two elements of `t` share an address (an output must not, or it would be written
// twice): with the axes ordered by stride (ties by index), each stride clears the span of every
// axis before it. Axes of one element span nothing. The order is an insertion sort that starts
// from lane, heads, seq, batch: a view whose strides fall from batch to lane (BSHD, a decode
// step) is in order after three to five comparisons, where taking the order pairwise cost 16
// (per batch-8 decode call, 450 -> 250 instructions for the two outputs).
bool self_disjoint(const rope_tensor &t) {
    if (t.sizes[0] == 0 || t.sizes[1] == 0 || t.sizes[2] == 0 || t.sizes[3] == 0) {
        return true;  // a view without elements writes nothing
    }
    auto before = [&t](int a, int b) { return t.strides[a] < t.strides[b] || (t.strides[a] == t.strides[b] && a < b); };
    int order[4] = {3, 2, 1, 0};
    for (int i = 1; i < 4; i++) {
        const int axis = order[i];
        int slot = i;
        for (; slot > 0 && before(axis, order[slot - 1]); slot--) {
            order[slot] = order[slot - 1];
        }
        order[slot] = axis;
    }
    int64_t inner_span = 0;  // within the view's span, which validation proved fits
    for (const int axis : order) {
        if (t.sizes[axis] > 1 && t.strides[axis] <= inner_span) {
            return false;
        }
        inner_span += (t.sizes[axis] - 1) * t.strides[axis];
    }
    return true;
}

const char *const kTensorNames[] = {"q", "k", "q_out", "k_out"};
const char *const kAxisNames[] = {"batch", "seq", "heads", "head_dim"};

// A view as a message gives it: "q (sizes [..], strides [..])".
std::string view_text(const char *name, const rope_tensor &t) {
    std::ostringstream text;
    text << name << " (sizes [" << t.sizes[0] << ", " << t.sizes[1] << ", " << t.sizes[2] << ", " << t.sizes[3]
         << "], strides [" << t.strides[0] << ", " << t.strides[1] << ", " << t.strides[2] << ", " << t.strides[3] << "])";
    return text.str();
}

// A byte range as a message gives it: "bytes [0x.., 0x..]".
std::string bytes_text(uintptr_t first, uintptr_t last) {
    std::ostringstream text;
    text << "bytes [0x" << std::hex << first << ", 0x" << last << "]";
    return text.str();
}

// Checks one tensor's dtype, sizes and strides; a valid tensor's byte range goes to *range (the
// span computed here, where byte_range() would walk the axes again on every call).
void check_tensor(Failure &f, const char *name, const rope_tensor &t, ByteRange *range) {
    if (enum_value(t.dtype) < ROPE_DTYPE_F32 || enum_value(t.dtype) > ROPE_DTYPE_BF16) {
        f.fail(ROPE_ERR_BAD_ENUM) << name << ".dtype=" << enum_value(t.dtype) << " is not a rope_dtype (0 f32, 1 f16, 2 bf16)";
        return;
    }
    int64_t elements = 1, span = 0;
    for (int axis = 0; axis < 4; axis++) {
        if (t.sizes[axis] < 0) {
            f.fail(ROPE_ERR_BAD_SHAPE) << name << ".sizes[" << axis << "] (" << kAxisNames[axis] << ")=" << t.sizes[axis]
                                       << " must be >= 0";
            return;
        }
        // Halide's extents are int32 (head_dim has a rule of its own, BAD_HEAD_DIM).
        if (axis < 3 && t.sizes[axis] > std::numeric_limits<int32_t>::max()) {
            f.fail(ROPE_ERR_BAD_SHAPE) << name << ".sizes[" << axis << "] (" << kAxisNames[axis] << ")=" << t.sizes[axis]
                                       << " must be below 2^31: the kernels take each axis's size as a 32-bit integer"
                                          " (a tensor may hold more than 2^31 elements)";
            return;
        }
        if (t.strides[axis] < 0) {
            f.fail(ROPE_ERR_BAD_STRIDE) << name << ".strides[" << axis << "] (" << kAxisNames[axis]
                                        << ")=" << t.strides[axis] << " must be >= 0";
            return;
        }
        if (multiply_overflows(elements, t.sizes[axis], &elements)) {
            f.fail(ROPE_ERR_SIZE_OVERFLOW) << view_text(name, t) << ": the element count up to " << kAxisNames[axis]
                                           << " overflows 64 bits";
            return;
        }
        int64_t extent_span = 0;
        if (multiply_overflows(t.sizes[axis] > 0 ? t.sizes[axis] - 1 : 0, t.strides[axis], &extent_span) ||
            __builtin_add_overflow(span, extent_span, &span)) {
            f.fail(ROPE_ERR_SIZE_OVERFLOW) << view_text(name, t) << ": the element span up to " << kAxisNames[axis]
                                           << " overflows 64 bits";
            return;
        }
    }
    int64_t bytes = 0;
    if (span == std::numeric_limits<int64_t>::max() ||
        multiply_overflows(span + 1, static_cast<int64_t>(dtype_bytes(t.dtype)), &bytes)) {
        f.fail(ROPE_ERR_SIZE_OVERFLOW) << view_text(name, t) << ": the byte span of the view overflows 64 bits";
        return;
    }
    if (t.strides[3] != 1 && t.sizes[3] > 1) {
        f.fail(ROPE_ERR_BAD_STRIDE) << name << ".strides[3] (head_dim)=" << t.strides[3]
                                    << " must be 1: the lane axis is contiguous (spec §4)";
        return;
    }
    *range = elements == 0 ? ByteRange{0, 0, true} : bytes_spanned(t, span);
}

// transformers' YaRN attention scale g(f, m) (spec §6).
double yarn_mscale(double factor, double mscale) {
    return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// mrope (spec §6): three position streams, sections of the pairs.
void check_mrope(Failure &f, const rope_params &p, const ValidCall &call, bool on_device) {
    const rope_mrope &m = p.mrope;
    if (!uses_mrope(p)) {
        return;
    }
    const int64_t pairs = call.rotary_dim / 2;
    if (m.sections[0] < 0 || m.sections[1] < 0 || m.sections[2] < 0 ||
        int64_t{m.sections[0]} + m.sections[1] + m.sections[2] != pairs) {
        f.fail(ROPE_ERR_BAD_VALUE) << "mrope.sections=[" << m.sections[0] << ", " << m.sections[1] << ", " << m.sections[2]
                                   << "] must be >= 0 and sum to rotary_dim/2=" << pairs << " (spec §6)";
    } else if (on_device) {
        f.fail(ROPE_ERR_UNSUPPORTED) << "mrope: CUDA calls take no mrope";
    } else if (p.style != ROPE_STYLE_HALF) {
        f.fail(ROPE_ERR_BAD_VALUE) << "mrope with style=" << enum_value(p.style) << ": mrope is defined for the half style (spec §6)";
    } else if (p.angles.source == ROPE_SOURCE_CACHE) {
        f.fail(ROPE_ERR_BAD_VALUE) << "mrope with angles.source=" << enum_value(p.angles.source)
                                   << " (cache): mrope needs a computed source (compat or precise)";
    } else if (p.positions.kind != ROPE_POSITIONS_TABLE) {  // a known kind: validate() checked the enum
        f.fail(ROPE_ERR_BAD_VALUE) << "mrope with positions.kind=" << enum_value(p.positions.kind)
                                   << ": mrope reads three position tables (ROPE_POSITIONS_TABLE)";
    } else if (per_sequence_scaling(p)) {
        f.fail(ROPE_ERR_BAD_VALUE) << "mrope with scaling.type=" << p.scaling.type
                                   << ": a sequence's length is not defined over three position streams";
    } else if (m.stream_stride < 0 || m.stream_stride > kMaxPosition / 2) {
        f.fail(ROPE_ERR_BAD_STRIDE) << "mrope.stream_stride=" << m.stream_stride << " must be in [0, 2^30)";
    }
}

// Frequency scaling (spec §6): the fields each type reads, and the attention factor YaRN and
// LongRoPE derive when the caller gives none (a scalar, so derived here, once per call).
// Returns a bound on |inv_freq| over the pairs: 1 for the unscaled frequencies (base > 1), whose
// pair 0 is 1 and the others smaller (DYNAMIC only raises base); 1 / factor where a scaling
// divides by a factor below 1; the largest |inv_freq| a caller gives.
FrequencyBound check_scaling(Failure &f, const rope_params &p, ValidCall *call, bool on_device) {
    const rope_scaling &sc = p.scaling;
    const int32_t type = enum_value(sc.type);
    if (type < ROPE_SCALING_NONE || type > ROPE_SCALING_INV_FREQ) {
        f.fail(ROPE_ERR_BAD_ENUM) << "scaling.type=" << type
                                  << " is not a rope_scaling_type (0 none, 1 linear, 2 dynamic, 3 yarn, 4 longrope, 5 llama3, 6 inv_freq)";
        return {};
    }
    if (type == ROPE_SCALING_NONE) {
        return {};
    }
    if (p.angles.source == ROPE_SOURCE_CACHE) {
        f.fail(ROPE_ERR_BAD_VALUE) << "scaling.type=" << type
                                   << " needs a computed source (angles.source compat or precise): a cos/sin cache already "
                                      "holds scaled values (build it with rope_build_cos_sin_cache)";
        return {};
    }
    if (on_device) {
        f.fail(ROPE_ERR_UNSUPPORTED) << "scaling.type=" << type << ": CUDA calls support ROPE_SCALING_NONE only; "
                                     << "use the cache source with a table built by rope_build_cos_sin_cache";
        return {};
    }
    auto positive = [&](const char *name, double value) {
        if (!f.failed() && !(value > 0 && std::isfinite(value))) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling." << name << "=" << value << " must be finite and > 0 (spec §6)";
        }
    };
    auto positions = [&](const char *name, int64_t value) {
        if (!f.failed() && (value <= 0 || value > kMaxPosition)) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling." << name << "=" << value << " must be in [1, 2^31) (spec §6)";
        }
    };
    const int64_t pairs = call->rotary_dim / 2;
    // Checks a table of rotary_dim/2 values and returns the least and the greatest magnitude.
    auto table = [&](const char *name, const float *values, bool any_finite) {
        std::pair<double, double> magnitudes{std::numeric_limits<double>::infinity(), 0.0};
        if (f.failed()) {
            return magnitudes;
        }
        if (values == nullptr) {
            f.fail(ROPE_ERR_NULL_POINTER) << "scaling." << name << " is NULL; scaling.type=" << type << " reads rotary_dim/2="
                                          << pairs << " values from it";
            return magnitudes;
        }
        for (int64_t i = 0; i < pairs; i++) {
            if (!std::isfinite(values[i]) || (!any_finite && !(values[i] > 0))) {
                f.fail(ROPE_ERR_BAD_VALUE) << "scaling." << name << "[" << i << "]=" << values[i] << " must be finite"
                                           << (any_finite ? "" : " and > 0") << " (spec §6)";
                return magnitudes;
            }
            const double magnitude = std::fabs(values[i]);
            magnitudes = {std::min(magnitudes.first, magnitude), std::max(magnitudes.second, magnitude)};
        }
        return magnitudes;
    };
    // LINEAR, YARN and LLAMA3 divide inv_freq by the factor, for some pairs or all.
    const FrequencyBound divided{std::max(1.0, 1.0 / static_cast<double>(sc.factor)), "scaling.factor"};
    double attn_factor = 1.0;
    FrequencyBound bound;
    switch (type) {
    case ROPE_SCALING_LINEAR:
        positive("factor", sc.factor);
        bound = divided;
        break;
    case ROPE_SCALING_DYNAMIC:
        positive("factor", sc.factor);
        positions("original_max_positions", sc.original_max_positions);
        if (!f.failed() && call->rotary_dim < 4) {
            f.fail(ROPE_ERR_BAD_ROTARY) << "rotary_dim=" << call->rotary_dim
                                        << ": dynamic scaling raises base to R/(R-2), so rotary_dim must be >= 4 (spec §6)";
        }
        break;
    case ROPE_SCALING_YARN: {
        positive("factor", sc.factor);
        positions("original_max_positions", sc.original_max_positions);
        call->beta_fast = sc.beta_fast != 0 ? sc.beta_fast : 32.0f;
        call->beta_slow = sc.beta_slow != 0 ? sc.beta_slow : 1.0f;
        positive("beta_fast", call->beta_fast);
        positive("beta_slow", call->beta_slow);
        for (const auto &[name, value] : {std::pair{"mscale", sc.mscale}, std::pair{"mscale_all_dim", sc.mscale_all_dim}}) {
            if (!f.failed() && !(value >= 0 && std::isfinite(value))) {
                f.fail(ROPE_ERR_BAD_VALUE) << "scaling." << name << "=" << value << " must be finite and >= 0 (0: not given)";
            }
        }
        attn_factor = sc.mscale != 0 && sc.mscale_all_dim != 0
                          ? yarn_mscale(sc.factor, sc.mscale) / yarn_mscale(sc.factor, sc.mscale_all_dim)
                          : yarn_mscale(sc.factor, 1.0);
        if (!f.failed() && p.angles.attn_factor == 0 && !(attn_factor <= std::numeric_limits<float>::max())) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling.mscale=" << sc.mscale << " and mscale_all_dim=" << sc.mscale_all_dim
                                       << " with factor=" << sc.factor << " derive an attention factor of " << attn_factor
                                       << ", beyond f32's range (spec §6)";
        }
        bound = divided;
        break;
    }
    case ROPE_SCALING_LONGROPE: {
        positions("original_max_positions", sc.original_max_positions);
        if (!f.failed() && sc.max_positions < 0) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling.max_positions=" << sc.max_positions << " must be >= 0 (0: original_max_positions)";
        }
        // inv_freq / factor[i] of whichever table the sequence's length picks.
        const double least_short = table("short_factor", sc.short_factor, false).first;
        const double least_long = table("long_factor", sc.long_factor, false).first;
        bound = {std::max(1.0, 1.0 / std::min(least_short, least_long)), "scaling.short/long_factor"};
        const double ratio = sc.max_positions != 0 ? static_cast<double>(sc.max_positions) / sc.original_max_positions : 1.0;
        // The derived factor divides by ln(orig), which is 0 for orig = 1 (transformers raises).
        if (!f.failed() && ratio > 1 && sc.original_max_positions == 1 && p.angles.attn_factor == 0) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling.original_max_positions=1 with max_positions=" << sc.max_positions
                                       << ": LongRoPE's derived attention factor sqrt(1 + ln(max/orig) / ln(orig)) "
                                          "divides by ln(1) = 0; give angles.attn_factor (spec §6)";
        }
        if (!f.failed() && ratio > 1) {
            attn_factor = std::sqrt(1 + std::log(ratio) / std::log(static_cast<double>(sc.original_max_positions)));
        }
        break;
    }
    case ROPE_SCALING_LLAMA3:
        positive("factor", sc.factor);
        positions("original_max_positions", sc.original_max_positions);
        positive("low_freq_factor", sc.low_freq_factor);
        positive("high_freq_factor", sc.high_freq_factor);
        if (!f.failed() && !(sc.high_freq_factor > sc.low_freq_factor)) {
            f.fail(ROPE_ERR_BAD_VALUE) << "scaling.high_freq_factor=" << sc.high_freq_factor << " must be > low_freq_factor="
                                       << sc.low_freq_factor << " (spec §6)";
        }
        // smooth = (orig / wavelen - low) / (high - low) is in [0, 1] only up to the f32 roundings
        // of orig / wavelen and of the band's edges (a few ulps of high, relative to high - low):
        // mixing inv_freq / factor and inv_freq by a smooth outside [0, 1] goes beyond both.
        bound = {divided.value * (1 + 2 * 0x1p-20 * sc.high_freq_factor / (static_cast<double>(sc.high_freq_factor) - sc.low_freq_factor)),
                 "scaling.factor, low/high_freq_factor"};
        break;
    case ROPE_SCALING_INV_FREQ:
        bound = {table("inv_freq", sc.inv_freq, true).second, "scaling.inv_freq"};
        break;
    }
    // compat computes the frequencies in f32 (spec §5): a factor so small that 1 / factor
    // overflows f32 makes them infinite, and position 0's angle NaN (LLAMA3: its factor alone).
    const FrequencyBound &largest = type == ROPE_SCALING_LLAMA3 ? divided : bound;
    if (!f.failed() && p.angles.source == ROPE_SOURCE_COMPAT && largest.value > std::numeric_limits<float>::max()) {
        f.fail(ROPE_ERR_BAD_VALUE) << largest.field << ": inv_freq reaches " << largest.value
                                   << ", beyond f32's range, in which the compat source computes it (spec §5)";
    }
    // A caller's attn_factor is transformers' attention_factor: it replaces the derived one.
    if (p.angles.attn_factor == 0) {
        call->attn_factor = static_cast<float>(attn_factor);
    }
    return bound;
}

// Varlen (THD, spec §4): cu_seqlens against the packed token axis.
void check_varlen(Failure &f, const rope_params &p, bool on_device) {
    const rope_varlen &v = p.varlen;
    if (v.cu_seqlens == nullptr) {
        return;
    }
    const int32_t index_type = enum_value(v.index_type);
    if (index_type != ROPE_INDEX_INT32 && index_type != ROPE_INDEX_INT64) {
        f.fail(ROPE_ERR_BAD_ENUM) << "varlen.index_type=" << index_type << " is not a rope_index_type (0 int32, 1 int64)";
        return;
    }
    if (on_device) {
        f.fail(ROPE_ERR_UNSUPPORTED) << "varlen: CUDA calls take no cu_seqlens";
        return;
    }
    if (p.q.sizes[0] != 1) {
        f.fail(ROPE_ERR_BAD_SHAPE) << "q.sizes[0] (batch)=" << p.q.sizes[0]
                                   << " with varlen.cu_seqlens: packed tensors are [1, total_tokens, heads, head_dim]";
        return;
    }
    if (v.num_seqs < 0 || v.num_seqs > kMaxPosition) {
        f.fail(ROPE_ERR_BAD_SHAPE) << "varlen.num_seqs=" << v.num_seqs << " must be in [0, 2^31)";
        return;
    }
    int64_t previous = 0;
    for (int64_t b = 0; b <= v.num_seqs; b++) {
        const int64_t start = sequence_start(v, b);
        if ((b == 0 && start != 0) || start < previous || (b == v.num_seqs && start != p.q.sizes[1])) {
            f.fail(ROPE_ERR_BAD_SHAPE) << "varlen.cu_seqlens[" << b << "]=" << start << " breaks cu_seqlens[0] = 0, non-decreasing, "
                                       << "cu_seqlens[num_seqs=" << v.num_seqs << "] = total tokens (q.sizes[1]=" << p.q.sizes[1] << ")";
            return;
        }
        previous = start;
    }
}

struct PositionBounds {
    int64_t least, greatest;
};

// The least and greatest entry of table[b][s] for b < batch, s < seq (both >= 1).
template <typename Index>
PositionBounds position_bounds(const Index *table, const rope_positions &pos, int64_t batch, int64_t seq) {
    Index least = table[0], greatest = table[0];
    for (int64_t b = 0; b < batch; b++) {
        const Index *row = table + b * pos.strides[0];
        for (int64_t s = 0; s < seq; s++) {
            least = std::min(least, row[s * pos.strides[1]]);
            greatest = std::max(greatest, row[s * pos.strides[1]]);
        }
    }
    return {least, greatest};
}

// Positions must lie in [0, limit) (spec §5); reads each table entry once. Positions in device
// memory (`readable` false) are not read: the kernels clamp them (see rope_params.device).
void check_positions(Failure &f, const rope_positions &pos, int64_t batch, int64_t seq, int64_t limit,
                     const char *limit_rule, bool readable, const char *table_name = "positions.data",
                     const rope_varlen *varlen = nullptr) {
    if (enum_value(pos.index_type) != ROPE_INDEX_INT32 && enum_value(pos.index_type) != ROPE_INDEX_INT64) {
        f.fail(ROPE_ERR_BAD_ENUM) << "positions.index_type=" << enum_value(pos.index_type)
                                  << " is not a rope_index_type (0 int32, 1 int64)";
        return;
    }
    if (pos.strides[0] < 0 || pos.strides[1] < 0) {
        f.fail(ROPE_ERR_BAD_STRIDE) << "positions.strides=[" << pos.strides[0] << ", " << pos.strides[1]
                                    << "] must be >= 0";
        return;
    }
    if (batch == 0 || seq == 0) {
        return;
    }
    // As for a tensor, the last entry's byte offset must fit 64 bits: beyond, the entries read
    // (here, and by the kernels) would wrap around the address space.
    const bool table = pos.kind == ROPE_POSITIONS_TABLE;
    const int64_t items = varlen != nullptr && !table ? varlen->num_seqs : batch;  // table rows, or offsets
    if (pos.data != nullptr && items > 0) {
        const int64_t element = pos.index_type == ROPE_INDEX_INT64 ? 8 : 4;
        int64_t item_span = 0, token_span = 0, span = 0, bytes = 0;
        if (multiply_overflows(items - 1, pos.strides[0], &item_span) ||
            multiply_overflows(table ? seq - 1 : 0, pos.strides[1], &token_span) ||
            __builtin_add_overflow(item_span, token_span, &span) || span == std::numeric_limits<int64_t>::max() ||
            multiply_overflows(span + 1, element, &bytes)) {
            f.fail(ROPE_ERR_SIZE_OVERFLOW) << "positions.strides=[" << pos.strides[0] << ", " << pos.strides[1] << "] over "
                                           << items << (table ? " x " + std::to_string(seq) : std::string())
                                           << " entries: the last entry's byte offset overflows 64 bits";
            return;
        }
    }
    auto read = [&](int64_t index) {
        return pos.index_type == ROPE_INDEX_INT32 ? static_cast<const int32_t *>(pos.data)[index]
                                                  : static_cast<const int64_t *>(pos.data)[index];
    };
    // The common case, every entry in range, is proven by the table's bounds alone, in a tight
    // loop; the loops below then only run to find and name the first entry out of range.
    if (pos.data != nullptr && readable && varlen == nullptr) {
        const PositionBounds bounds = pos.index_type == ROPE_INDEX_INT32
                                          ? position_bounds(static_cast<const int32_t *>(pos.data), pos, batch, table ? seq : 1)
                                          : position_bounds(static_cast<const int64_t *>(pos.data), pos, batch, table ? seq : 1);
        const int64_t tokens_after_first = table ? 0 : seq - 1;  // an offset's sequence ends seq - 1 further on
        if (bounds.least >= 0 && bounds.greatest < limit && tokens_after_first < limit - bounds.greatest) {
            return;
        }
    }
    // An entry's name: what[b][s], without the indices that are negative (a scalar offset's), and
    // the varlen sequence a scalar offset starts (`sequence`, when not negative).
    auto name = [](const char *what, int64_t b, int64_t s, int64_t sequence) {
        return what + (b >= 0 ? "[" + std::to_string(b) + "]" : "") + (s >= 0 ? "[" + std::to_string(s) + "]" : "") +
               (sequence >= 0 ? " (varlen sequence " + std::to_string(sequence) + ")" : "");
    };
    auto check = [&](int64_t first, int64_t last, const char *what, int64_t b, int64_t s, int64_t sequence = -1) {
        if (first < 0) {
            f.fail(ROPE_ERR_POSITION_OUT_OF_RANGE) << name(what, b, s, sequence) << "=" << first
                                                   << " is negative; positions must be >= 0 (spec §5)";
            return false;
        }
        if (last >= limit || last < first) {
            f.fail(ROPE_ERR_POSITION_OUT_OF_RANGE) << name(what, b, s, sequence) << " gives position " << last
                                                   << "; positions must be < " << limit << " (" << limit_rule << ")";
            return false;
        }
        return true;
    };
    if (table) {
        if (pos.data == nullptr) {
            f.fail(ROPE_ERR_NULL_POINTER) << "positions.data is NULL; a position table needs [batch][seq] entries";
            return;
        }
        if (!readable) {
            return;
        }
        for (int64_t b = 0; b < batch; b++) {
            for (int64_t s = 0; s < seq; s++) {
                const int64_t value = read(b * pos.strides[0] + s * pos.strides[1]);
                if (!check(value, value, table_name, b, s)) {
                    return;
                }
            }
        }
        return;
    }
    // Offsets: the last position of a sequence is offset + seq - 1 (an offset beyond the limit is
    // reported as is, before the sum could overflow). One scalar offset speaks for every item.
    if (pos.data != nullptr && !readable) {
        return;
    }
    // Varlen: an offset per sequence (or one for all), over that sequence's tokens.
    const char *what = pos.data != nullptr ? "positions.data (offsets)" : "positions.offset";
    const int64_t sequences = varlen != nullptr ? varlen->num_seqs : pos.data != nullptr ? batch : 1;
    for (int64_t b = 0; b < sequences; b++) {
        const int64_t offset = pos.data != nullptr ? read(b * pos.strides[0]) : pos.offset;
        const int64_t length = varlen != nullptr ? sequence_start(*varlen, b + 1) - sequence_start(*varlen, b) : seq;
        const int64_t last = offset > limit ? offset : offset + std::max<int64_t>(length, 1) - 1;
        const bool per_sequence = pos.data != nullptr;
        if (!check(offset, last, what, per_sequence ? b : -1, -1, !per_sequence && varlen != nullptr ? b : -1)) {
            return;
        }
    }
}

// The positions of a call (its table or offsets, and mrope's height and width streams, validated
// as sound before: a table of the CPU) against `limit`.
void check_call_positions(Failure &f, const rope_params &p, int64_t limit, const char *limit_rule) {
    check_positions(f, p.positions, p.q.sizes[0], p.q.sizes[1], limit, limit_rule, p.device == ROPE_DEVICE_CPU,
                    "positions.data", p.varlen.cu_seqlens != nullptr ? &p.varlen : nullptr);
    for (int stream = 1; uses_mrope(p) && stream < 3 && !f.failed() && p.positions.data != nullptr; stream++) {
        rope_positions streamed = p.positions;
        const size_t element = p.positions.index_type == ROPE_INDEX_INT64 ? 8 : 4;
        streamed.data = static_cast<const uint8_t *>(p.positions.data) + stream * p.mrope.stream_stride * element;
        check_positions(f, streamed, p.q.sizes[0], p.q.sizes[1], limit, limit_rule, true,
                        stream == 1 ? "positions.data (mrope stream 1)" : "positions.data (mrope stream 2)");
    }
}

// The first table the call reads besides its tensors that an output shares a byte with:
// positions (mrope's three streams), the cos/sin cache, cu_seqlens, the scaling's per-pair tables.
// Only present tables are measured (their sizes were checked not to overflow).
struct TableOverlap {
    const char *table = nullptr;  // none
    int output = 0;               // 2 q_out, 3 k_out
    uintptr_t first = 0, last = 0;  // the table's bytes
};
TableOverlap output_over_a_read_table(const ValidCall &call, const ByteRange (&ranges)[4]) {
    const rope_params &p = call.params;
    TableOverlap overlap;
    auto check = [&](const char *table, const void *data, uint64_t bytes) {
        const auto first = reinterpret_cast<uintptr_t>(data), last = first + bytes - 1;
        for (int i = 2; overlap.table == nullptr && bytes > 0 && i < (call.has_k ? 4 : 3); i++) {
            if (!ranges[i].empty && ranges[i].first <= last && first <= ranges[i].last) {
                overlap = {table, i, first, last};
            }
        }
    };
    const rope_positions &pos = p.positions;
    const bool table = pos.kind == ROPE_POSITIONS_TABLE;
    const int64_t seq = p.q.sizes[1], items = p.varlen.cu_seqlens != nullptr && !table ? p.varlen.num_seqs : p.q.sizes[0];
    if (pos.data != nullptr && items > 0 && seq > 0) {
        // Below 2^60 + 2^31 entries (check_positions, check_mrope): the bytes fit 64 bits.
        const uint64_t entries =
            static_cast<uint64_t>((items - 1) * pos.strides[0] + (table ? (seq - 1) * pos.strides[1] : 0) + 1) +
            static_cast<uint64_t>(uses_mrope(p) ? 2 * p.mrope.stream_stride : 0);
        check("positions.data", pos.data, entries * (pos.index_type == ROPE_INDEX_INT64 ? 8 : 4));
    }
    const rope_angles &a = p.angles;
    const int64_t pairs = call.rotary_dim / 2;
    if (a.source == ROPE_SOURCE_CACHE) {
        const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
        const auto bytes = static_cast<uint64_t>(((a.cache_len - 1) * row_stride + pairs) * dtype_bytes(a.cache_dtype));
        check("angles.cos_cache", a.cos_cache, bytes);
        check("angles.sin_cache", a.sin_cache, bytes);
    }
    if (p.varlen.cu_seqlens != nullptr) {
        check("varlen.cu_seqlens", p.varlen.cu_seqlens,
              (p.varlen.num_seqs + 1) * (p.varlen.index_type == ROPE_INDEX_INT64 ? 8 : 4));
    }
    const rope_scaling &sc = p.scaling;
    if (a.source != ROPE_SOURCE_CACHE && sc.type == ROPE_SCALING_LONGROPE) {
        check("scaling.short_factor", sc.short_factor, pairs * 4);
        check("scaling.long_factor", sc.long_factor, pairs * 4);
    }
    if (a.source != ROPE_SOURCE_CACHE && sc.type == ROPE_SCALING_INV_FREQ) {
        check("scaling.inv_freq", sc.inv_freq, pairs * 4);
    }
    return overlap;
}

}  // namespace

size_t params_fields(const rope_params *params) {
    if (params == nullptr || params->abi_version != ROPE_ABI_VERSION) {
        return 0;
    }
    const ParamsLayout *layout = find_layout(params->struct_size);
    return layout == nullptr ? 0 : layout->fields;
}

bool validation_reads_positions_only(const rope_params &p) {
    // Asked of calls not validated yet too (dispatch.cpp, LastCall): enums are read as the ints they may hold.
    const int32_t scaling = enum_value(p.scaling.type);
    return enum_value(p.device) == ROPE_DEVICE_CPU && p.varlen.cu_seqlens == nullptr && scaling != ROPE_SCALING_LONGROPE &&
           scaling != ROPE_SCALING_INV_FREQ;
}

rope_status validate_positions(const ValidCall &call, const PositionRule &rule, std::string *message) {
    Failure f(message);
    check_call_positions(f, call.params, rule.limit, rule.text.c_str());
    return f.finish();
}

int64_t sequence_start(const rope_varlen &varlen, int64_t b) {
    return varlen.index_type == ROPE_INDEX_INT64 ? static_cast<const int64_t *>(varlen.cu_seqlens)[b]
                                                 : static_cast<const int32_t *>(varlen.cu_seqlens)[b];
}

ByteRange byte_range(const rope_tensor &t) {
    int64_t span = 0;
    for (int axis = 0; axis < 4; axis++) {
        if (t.sizes[axis] == 0) {
            return {0, 0, true};
        }
        span += (t.sizes[axis] - 1) * t.strides[axis];  // validated not to overflow
    }
    return bytes_spanned(t, span);
}

SlicedAxes axes_beyond_int32_strides(const ValidCall &call) {
    constexpr int64_t kMaxStride = std::numeric_limits<int32_t>::max();
    const rope_params &p = call.params;
    SlicedAxes sliced{};
    bool *axes = sliced.axis;
    const rope_tensor *tensors[] = {&p.q, &p.k, &p.q_out, &p.k_out};
    for (int axis = 0; axis < 3; axis++) {
        for (int t = 0; t < 4; t++) {
            const bool in_call = t % 2 == 0 || call.has_k;
            axes[axis] = axes[axis] || (in_call && tensors[t]->sizes[axis] > 1 && tensors[t]->strides[axis] > kMaxStride);
        }
    }
    // int64 positions are read as int32 pairs: their strides count double. As a tensor's, a
    // stride along an axis of one item is never stepped.
    const rope_positions &pos = p.positions;
    const int64_t scale = pos.index_type == ROPE_INDEX_INT64 ? 2 : 1;
    const bool table = pos.kind == ROPE_POSITIONS_TABLE;
    axes[0] = axes[0] || (p.q.sizes[0] > 1 && (table || pos.data != nullptr) && pos.strides[0] > kMaxStride / scale);
    axes[1] = axes[1] || (p.q.sizes[1] > 1 && table && pos.strides[1] > kMaxStride / scale);
    // A CPU kernel of a computed source builds one cos/sin table for the call, [batch][seq][pair],
    // and Halide keeps its batch stride, seq x rotary_dim/2 elements, in 32 bits.
    const bool built_table = p.device == ROPE_DEVICE_CPU && p.angles.source != ROPE_SOURCE_CACHE;
    axes[0] = axes[0] || (built_table && p.q.sizes[0] > 1 && p.q.sizes[1] * (call.rotary_dim / 2) > kMaxStride);
    return sliced;
}

rope_status validate(const rope_params *user, ValidCall *call, std::string *message, PositionRule *position_rule) {
    Failure f(message);
    if (user == nullptr) {
        f.fail(ROPE_ERR_NULL_POINTER) << "params is NULL";
        return f.finish();
    }
    if (user->abi_version != ROPE_ABI_VERSION) {
        f.fail(ROPE_ERR_ABI_MISMATCH) << "params.abi_version=" << user->abi_version << " is not this library's ABI version "
                                      << ROPE_ABI_VERSION;
        return f.finish();
    }
    const ParamsLayout *layout = find_layout(user->struct_size);
    if (layout == nullptr) {
        auto &out = f.fail(ROPE_ERR_ABI_MISMATCH);
        out << "params.struct_size=" << user->struct_size << " is not a rope_params size this library knows (";
        for (const ParamsLayout &l : kParamsLayouts) {
            out << (&l == kParamsLayouts ? "" : ", ") << l.size << " " << l.note;
        }
        out << ")";
        return f.finish();
    }
    // The caller's bytes, then zeros for the fields appended since its layout (none for this
    // header's): clearing the whole struct first cost a fifth of validation.
    std::memcpy(&call->params, user, layout->fields);
    std::memset(reinterpret_cast<uint8_t *>(&call->params) + layout->fields, 0, sizeof(call->params) - layout->fields);
    const rope_params &p = call->params;

    if (enum_value(p.device) != ROPE_DEVICE_CPU && enum_value(p.device) != ROPE_DEVICE_CUDA) {
        f.fail(ROPE_ERR_BAD_ENUM) << "device=" << enum_value(p.device) << " is not a rope_device (0 cpu, 1 cuda)";
        return f.finish();
    }
    const bool on_device = p.device == ROPE_DEVICE_CUDA;

    if (enum_value(p.style) != ROPE_STYLE_HALF && enum_value(p.style) != ROPE_STYLE_INTERLEAVED) {
        f.fail(ROPE_ERR_BAD_ENUM) << "style=" << enum_value(p.style) << " is not a rope_style (0 half, 1 interleaved)";
        return f.finish();
    }
    if (enum_value(p.direction) != ROPE_FORWARD && enum_value(p.direction) != ROPE_INVERSE) {
        f.fail(ROPE_ERR_BAD_ENUM) << "direction=" << enum_value(p.direction) << " is not a rope_direction (0 forward, 1 inverse)";
        return f.finish();
    }
    if (enum_value(p.angles.source) < ROPE_SOURCE_CACHE || enum_value(p.angles.source) > ROPE_SOURCE_PRECISE) {
        f.fail(ROPE_ERR_BAD_ENUM) << "angles.source=" << enum_value(p.angles.source) << " is not a rope_source (0 cache, 1 compat, 2 precise)";
        return f.finish();
    }
    if (enum_value(p.positions.kind) != ROPE_POSITIONS_OFFSET && enum_value(p.positions.kind) != ROPE_POSITIONS_TABLE) {
        f.fail(ROPE_ERR_BAD_ENUM) << "positions.kind=" << enum_value(p.positions.kind)
                                  << " is not a rope_positions_kind (0 offset, 1 table)";
        return f.finish();
    }

    // Tensors: presence, dtype, shapes, strides (spec §4).
    call->has_k = p.k.data != nullptr;
    const rope_tensor *tensors[] = {&p.q, &p.k, &p.q_out, &p.k_out};
    ByteRange ranges[4] = {{0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}};  // k's stay empty without k
    for (int i = 0; i < 4; i++) {
        const bool is_k = i == 1 || i == 3;
        if (is_k && !call->has_k) {
            continue;
        }
        if (tensors[i]->data == nullptr) {
            f.fail(ROPE_ERR_NULL_POINTER) << kTensorNames[i] << ".data is NULL"
                                          << (i == 3 ? "; k is given, so k_out is required (k_out == k for in place)" : "");
            return f.finish();
        }
        check_tensor(f, kTensorNames[i], *tensors[i], &ranges[i]);
        if (f.failed()) {
            return f.finish();
        }
        if (tensors[i]->dtype != p.q.dtype) {
            f.fail(ROPE_ERR_DTYPE_MISMATCH) << kTensorNames[i] << ".dtype=" << enum_value(tensors[i]->dtype) << " differs from q.dtype="
                                            << enum_value(p.q.dtype) << "; q, k and the outputs share one dtype (spec §4)";
            return f.finish();
        }
    }
    call->head_dim = p.q.sizes[3];
    if (call->head_dim <= 0 || call->head_dim % 2 != 0 || call->head_dim > std::numeric_limits<int32_t>::max()) {
        f.fail(ROPE_ERR_BAD_HEAD_DIM) << "q.sizes[3] (head_dim)=" << call->head_dim << " must be even, positive and below 2^31 (spec §1)";
        return f.finish();
    }
    for (int i = 1; i < 4; i++) {
        const rope_tensor &t = *tensors[i];
        if ((i == 1 || i == 3) && !call->has_k) {
            continue;
        }
        if (t.sizes[3] != call->head_dim) {
            f.fail(ROPE_ERR_BAD_HEAD_DIM) << kTensorNames[i] << ".sizes[3] (head_dim)=" << t.sizes[3] << " differs from q's "
                                          << call->head_dim << "; q and k share head_dim (spec §4)";
            return f.finish();
        }
        const rope_tensor &partner = i == 3 ? p.k : p.q;  // outputs match their inputs, k matches q
        const int last_axis = i == 1 ? 2 : 3;              // k may have its own head count
        for (int axis = 0; axis < last_axis; axis++) {
            if (t.sizes[axis] != partner.sizes[axis]) {
                f.fail(ROPE_ERR_BAD_SHAPE) << kTensorNames[i] << ".sizes[" << axis << "] (" << kAxisNames[axis] << ")="
                                           << t.sizes[axis] << " differs from " << (i == 3 ? "k" : "q") << "'s "
                                           << partner.sizes[axis];
                return f.finish();
            }
        }
    }

    // Each size is below 2^31: the product fits.
    if (p.q.sizes[0] * p.q.sizes[1] > kMaxCallTokens) {
        f.fail(ROPE_ERR_BAD_SHAPE) << "q.sizes[0] x q.sizes[1] (batch x seq)=" << p.q.sizes[0] << " x " << p.q.sizes[1]
                                   << " tokens must be at most 2^30: the kernels count a call's tokens with 32-bit integers";
        return f.finish();
    }

    // Rotary slice (spec §1).
    call->rotary_dim = p.rotary_dim != 0 ? p.rotary_dim : static_cast<int32_t>(call->head_dim);
    call->rotary_offset = p.rotary_offset;
    if (call->rotary_dim < 2 || call->rotary_dim % 2 != 0 || call->rotary_dim > call->head_dim) {
        f.fail(ROPE_ERR_BAD_ROTARY) << "rotary_dim=" << call->rotary_dim << " must be even with 2 <= rotary_dim <= head_dim="
                                    << call->head_dim << " (spec §1)";
        return f.finish();
    }
    if (call->rotary_offset < 0 || call->rotary_offset + static_cast<int64_t>(call->rotary_dim) > call->head_dim) {
        f.fail(ROPE_ERR_BAD_ROTARY) << "rotary_offset=" << call->rotary_offset << " must be >= 0 with rotary_offset + rotary_dim ("
                                    << call->rotary_dim << ") <= head_dim=" << call->head_dim << " (spec §1)";
        return f.finish();
    }

    // Scalars.
    if (p.num_threads < 0) {
        f.fail(ROPE_ERR_BAD_VALUE) << "num_threads=" << p.num_threads << " must be >= 0 (0: the library's thread count)";
        return f.finish();
    }
    const rope_angles &a = p.angles;
    call->base = a.base != 0 ? a.base : 10000.0;
    call->attn_factor = a.attn_factor != 0 ? a.attn_factor : 1.0f;
    if (a.source != ROPE_SOURCE_CACHE) {
        if (!(call->base > 1.0) || !std::isfinite(call->base)) {
            f.fail(ROPE_ERR_BAD_VALUE) << "angles.base=" << call->base << " must be finite and > 1 (spec §1)";
            return f.finish();
        }
        // compat evaluates inv_freq in f32 (spec §5): a base beyond f32's range has no value there.
        if (a.source == ROPE_SOURCE_COMPAT && call->base > std::numeric_limits<float>::max()) {
            f.fail(ROPE_ERR_BAD_VALUE) << "angles.base=" << call->base
                                       << " must fit in f32 (<= 3.4028235e38) for the compat source (spec §5)";
            return f.finish();
        }
        if (!std::isfinite(call->attn_factor)) {
            f.fail(ROPE_ERR_BAD_VALUE) << "angles.attn_factor=" << call->attn_factor << " must be finite";
            return f.finish();
        }
    }

    const FrequencyBound inv_freq_bound = check_scaling(f, p, call, on_device);
    if (!f.failed()) {
        check_mrope(f, p, *call, on_device);
    }
    if (f.failed()) {
        return f.finish();
    }

    // Positions (spec §5), after the cache so the limit is known.
    int64_t limit = kMaxPosition + 1;
    const char *limit_rule = "2^31: the kernels index positions with int32";
    std::string angle_rule;  // a scaled computed source's limit (below)
    if (a.source == ROPE_SOURCE_CACHE) {
        const int64_t pairs = call->rotary_dim / 2;
        if (a.cos_cache == nullptr || a.sin_cache == nullptr) {
            f.fail(ROPE_ERR_NULL_POINTER) << (a.cos_cache == nullptr ? "angles.cos_cache" : "angles.sin_cache")
                                          << " is NULL; the cache source needs both tables (spec §5)";
            return f.finish();
        }
        if (a.cache_len <= 0) {
            f.fail(ROPE_ERR_BAD_VALUE) << "angles.cache_len=" << a.cache_len << " must be > 0 for the cache source";
            return f.finish();
        }
        const int32_t cache_dtype = enum_value(a.cache_dtype);
        if (cache_dtype < ROPE_DTYPE_F32 || cache_dtype > ROPE_DTYPE_BF16) {
            f.fail(ROPE_ERR_BAD_ENUM) << "angles.cache_dtype=" << cache_dtype << " is not a rope_dtype (0 f32, 1 f16, 2 bf16)";
            return f.finish();
        }
        if (a.cache_dtype != ROPE_DTYPE_F32 && a.cache_dtype != p.q.dtype) {
            f.fail(ROPE_ERR_DTYPE_MISMATCH) << "angles.cache_dtype=" << cache_dtype << " must be f32 (0) or the tensors' dtype ("
                                            << enum_value(p.q.dtype) << ") (spec §5)";
            return f.finish();
        }
        const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
        if (row_stride < pairs || row_stride > std::numeric_limits<int32_t>::max()) {
            f.fail(ROPE_ERR_BAD_STRIDE) << "angles.cache_row_stride=" << a.cache_row_stride << " must be 0 or in [rotary_dim/2="
                                        << pairs << ", 2^31)";
            return f.finish();
        }
        int64_t table_elements = 0;
        if (multiply_overflows(a.cache_len, row_stride, &table_elements) ||
            multiply_overflows(table_elements, static_cast<int64_t>(dtype_bytes(a.cache_dtype)), &table_elements)) {
            f.fail(ROPE_ERR_SIZE_OVERFLOW) << "angles.cache_len=" << a.cache_len << " x row stride " << row_stride
                                           << " elements overflows 64 bits";
            return f.finish();
        }
        // CUDA kernels index the tables with 32 bits.
        if (on_device && table_elements / static_cast<int64_t>(dtype_bytes(a.cache_dtype)) > kMaxPosition) {
            f.fail(ROPE_ERR_UNSUPPORTED) << "angles.cache_len=" << a.cache_len << " x row stride " << row_stride
                                         << " elements: with device=ROPE_DEVICE_CUDA a cos/sin table must hold fewer than 2^31 elements";
            return f.finish();
        }
        // The parity mode rounds cos/sin to the dtype: a cache does that by holding them in it.
        if (p.round_cos_sin != 0 && p.q.dtype != ROPE_DTYPE_F32 && a.cache_dtype != p.q.dtype) {
            f.fail(ROPE_ERR_BAD_VALUE) << "round_cos_sin=" << p.round_cos_sin << " with angles.cache_dtype=" << cache_dtype
                                       << ": the parity mode reads cos/sin tables stored in the tensors' dtype ("
                                       << enum_value(p.q.dtype) << "), rounded once (rope_build_cos_sin_cache makes them)";
            return f.finish();
        }
        if (a.cache_len <= kMaxPosition) {
            limit = a.cache_len;
            limit_rule = "angles.cache_len, spec §5";  // the message gives the value: no string built per call
        }
    } else if (const double positions_in_range = kMaxAngle / inv_freq_bound.value;
               positions_in_range < static_cast<double>(limit)) {
        // Positions p with p * |inv_freq| < 2^32; position 0 (angle 0) always. A scaled call
        // only: the rule's text, with the bound and its fields, is built for it alone.
        limit = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(positions_in_range)));
        std::ostringstream rule;
        rule << "position x |inv_freq| < 2^32, where angles reduce exactly; |inv_freq| <= " << inv_freq_bound.value
             << " from " << inv_freq_bound.field;
        angle_rule = rule.str();
        limit_rule = angle_rule.c_str();
    }
    check_varlen(f, p, on_device);
    if (f.failed()) {
        return f.finish();
    }
    check_call_positions(f, p, limit, limit_rule);
    if (f.failed()) {
        return f.finish();
    }
    if (position_rule != nullptr) {
        *position_rule = PositionRule{limit, limit_rule};
    }

    // Aliasing (spec §4): an output writes each element once, is its input exactly (in place)
    // or shares nothing with any tensor, and never shares with the other output.
    for (int i = 2; i < 4; i++) {
        if ((i == 3 && !call->has_k) || self_disjoint(*tensors[i])) {
            continue;
        }
        f.fail(ROPE_ERR_OVERLAP) << kTensorNames[i] << " overlaps itself: its strides [" << tensors[i]->strides[0] << ", "
                                 << tensors[i]->strides[1] << ", " << tensors[i]->strides[2] << ", " << tensors[i]->strides[3]
                                 << "] map two elements to one address; an output must write each element once";
        return f.finish();
    }
    struct Pair {
        int out, other;
    };
    const Pair pairs[] = {{2, 0}, {2, 1}, {3, 1}, {3, 0}, {2, 3}};
    for (const Pair &pair : pairs) {
        const bool uses_k = pair.out == 3 || pair.other == 1 || pair.other == 3;
        if (uses_k && !call->has_k) {
            continue;
        }
        const rope_tensor &out = *tensors[pair.out], &other = *tensors[pair.other];
        const bool own_input = pair.other == pair.out - 2;
        if ((own_input && same_view(out, other)) || disjoint(out, ranges[pair.out], other, ranges[pair.other])) {
            continue;
        }
        f.fail(ROPE_ERR_OVERLAP) << kTensorNames[pair.out] << " ("
                                 << bytes_text(ranges[pair.out].first, ranges[pair.out].last) << ") partially overlaps "
                                 << kTensorNames[pair.other] << " ("
                                 << bytes_text(ranges[pair.other].first, ranges[pair.other].last) << ")"
                                 << (own_input ? "; an output must be exactly its input (same data and sizes, same strides along axes of more than one item) or disjoint from it (spec §4)"
                                               : "; they must not share any element (spec §4)");
        return f.finish();
    }
    // The kernels read some tables after writing outputs (a later tile's positions, a later
    // sequence's offsets): a byte shared with an output would turn a rotated value into an index.
    if (const TableOverlap overlap = output_over_a_read_table(*call, ranges); overlap.table != nullptr) {
        f.fail(ROPE_ERR_OVERLAP) << kTensorNames[overlap.output] << " ("
                                 << bytes_text(ranges[overlap.output].first, ranges[overlap.output].last) << ") overlaps "
                                 << overlap.table << " (" << bytes_text(overlap.first, overlap.last)
                                 << "); an output must share no byte with a table the call reads (spec §4)";
        return f.finish();
    }
    // A kernel measures a sequence's length on the tokens it is given (spec §6), and a call with a
    // sequence stride beyond Halide's 32-bit strides is split along that axis: each part would
    // measure its own. Refused here, so that rope_query agrees and no sequence is written first;
    // last, as UNSUPPORTED is the status of a call that breaks no rule.
    if (per_sequence_scaling(p) && axes_beyond_int32_strides(*call).axis[1]) {
        auto &out = f.fail(ROPE_ERR_UNSUPPORTED);
        // The rule first: a report's message holds 255 characters.
        out << "scaling.type=" << enum_value(p.scaling.type)
            << " (per-sequence lengths) with a sequence stride beyond 2^31 elements: the call would be split along it "
               "and each part measure its own length (strides[1] of q "
            << p.q.strides[1] << ", q_out " << p.q_out.strides[1];
        if (call->has_k) {
            out << ", k " << p.k.strides[1] << ", k_out " << p.k_out.strides[1];
        }
        if (p.positions.kind == ROPE_POSITIONS_TABLE) {
            out << ", positions " << p.positions.strides[1]
                << (p.positions.index_type == ROPE_INDEX_INT64 ? ", int64 entries counting twice" : "");
        }
        out << ")";
        return f.finish();
    }
    return f.finish();
}

}  // namespace ropegen
