// SPDX-License-Identifier: Apache-2.0
#include "rope_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <sstream>

namespace ropegen::test {

namespace ref = ropegen::reference;

namespace {

const char *memory_name(Memory memory) {
    switch (memory) {
        case Memory::Separate: return "separate";
        case Memory::InPlace: return "in-place";
        case Memory::PackedQkv: return "packed-qkv";
        case Memory::PackedQkvInPlace: return "packed-qkv-in-place";
        case Memory::PerHeadQkvInPlace: return "per-head-qkv-in-place";
    }
    return "?";
}

const char *position_mode_name(PositionMode mode) {
    switch (mode) {
        case PositionMode::ScalarOffset: return "scalar-offset";
        case PositionMode::BatchOffsets: return "batch-offsets";
        case PositionMode::Table: return "table";
    }
    return "?";
}

// Collects the first few failures of a check and counts the rest.
class Failures {
public:
    template <typename... Parts>
    void add(const Parts &...parts) {
        if (count_++ < kShown) {
            (text_ << ... << parts) << "\n";
        }
    }
    ::testing::AssertionResult result(const char *what) const {
        if (count_ == 0) {
            return ::testing::AssertionSuccess();
        }
        return ::testing::AssertionFailure() << what << ": " << count_ << " failure(s); first ones:\n" << text_.str();
    }

private:
    static constexpr int kShown = 8;
    int count_ = 0;
    std::ostringstream text_;
};

// NaNs among the cos and sin entries of `rows`: quiet and signalling, either sign, payloads of
// only low bits and of all ones (which bf16 rounding can carry past the exponent).
void plant_nans(ref::CosSinCache &cache, const std::vector<int64_t> &rows, int pairs) {
    constexpr uint32_t kNans[] = {0xffffffffu, 0x7fffffffu, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff80ffffu};
    size_t next = 0;
    for (int64_t row : rows) {
        for (int pair = static_cast<int>(row % 3); pair < pairs; pair += 4) {
            std::vector<float> &table = pair % 8 < 4 ? cache.cos : cache.sin;
            std::memcpy(&table[static_cast<size_t>(row * cache.row_stride + pair)], &kNans[next++ % std::size(kNans)],
                        sizeof(float));
        }
    }
}

std::string hex(uint32_t bits) {
    std::ostringstream out;
    out << "0x" << std::hex << bits;
    return out.str();
}

// The first `count` values of `values` between guard pages.
template <typename T>
GuardedBytes guarded_copy(const std::vector<T> &values, size_t count, GuardedBytes::Flush flush) {
    return GuardedBytes(reinterpret_cast<const uint8_t *>(values.data()), count * sizeof(T), flush);
}

// The D lanes of head (b, s, h) as stored.
std::vector<uint32_t> head_bits(const Tensor &tensor, int64_t b, int64_t s, int64_t h) {
    std::vector<uint32_t> bits(static_cast<size_t>(tensor.head_dim()));
    for (int64_t d = 0; d < tensor.head_dim(); d++) {
        bits[d] = tensor.bits(b, s, h, d);
    }
    return bits;
}

// Judges the D lanes of one head after a call (`out_bits`) against the oracle's `rotation` of its
// lanes before (`in_bits`), spec §7: rotated lanes within the tolerance of the dtype and source,
// the others bit-exact copies. `where(d)` names lane d in messages.
template <typename Where>
void judge_head(const CaseSpec &c, const ref::RotationMatrix &rotation, const std::vector<uint32_t> &in_bits,
                const std::vector<uint32_t> &out_bits, const Where &where, Failures &failures) {
    const int rotary_dim = c.effective_rotary_dim();
    const double tolerance = ref::relative_tolerance(c.source, c.effective_attn_factor());
    std::vector<double> x(in_bits.size());
    std::transform(in_bits.begin(), in_bits.end(), x.begin(),
                   [&](uint32_t bits) { return ref::decode(bits, c.dtype); });
    const std::vector<double> y = rotation.apply(x);
    for (int64_t d = 0; d < c.head_dim; d++) {
        const uint32_t got_bits = out_bits[d];
        const double got = ref::decode(got_bits, c.dtype);
        const int partner = ref::partner_lane(c.style, static_cast<int>(d), rotary_dim, c.rotary_offset);
        if (partner < 0) {  // outside the rotary slice: a bit-exact copy
            if (got_bits != in_bits[d]) {
                failures.add(where(d), " pass-through lane: got ", hex(got_bits), " want ", hex(in_bits[d]));
            }
            continue;
        }
        const double want = y[d];
        const double max_pair = std::max(std::fabs(x[d]), std::fabs(x[partner]));
        bool ok;
        if (std::isnan(want)) {
            ok = std::isnan(got);
        } else if (std::isinf(want)) {
            ok = got == want;
        } else if (c.dtype == ROPE_DTYPE_F32) {
            ok = std::isfinite(got) && std::fabs(got - want) <= tolerance * max_pair + ref::kF32SubnormalSlack;
        } else {
            // A finite rotation past the dtype's largest value rounds to Inf (f16's range is small),
            // which the ulp distance to the rounded oracle accepts.
            ok = !std::isnan(got) &&
                 (ref::ulp_distance(got_bits, ref::encode(want, c.dtype), c.dtype) <= ref::kSixteenBitUlps ||
                  (std::isfinite(got) && std::fabs(got - want) <= ref::sixteen_bit_tolerance(c.effective_attn_factor()) * max_pair));
        }
        if (!ok) {
            failures.add(where(d), " x=(", x[d], ", ", x[partner], ") got ", got, " (", hex(got_bits), ") want ",
                         want, " error ", std::fabs(got - want), " = ", std::fabs(got - want) / max_pair,
                         " * max|x_pair|");
        }
    }
}

}  // namespace

std::string CaseSpec::describe() const {
    std::ostringstream out;
    out << ref::style_name(style) << " " << ref::source_name(source) << " " << ref::dtype_name(dtype) << " "
        << (direction == ROPE_FORWARD ? "forward" : "inverse") << " B=" << batch << " S=" << seq << " Hq=" << q_heads
        << " Hk=" << k_heads << " D=" << head_dim << " R=" << effective_rotary_dim() << " o=" << rotary_offset << " "
        << layout_name(layout);
    if (out_layout) {
        out << "->" << layout_name(*out_layout);
    }
    out << " pad=" << row_pad << " " << memory_name(memory) << " positions=" << position_mode_name(positions.mode)
        << (positions.index_type == ROPE_INDEX_INT64 ? "/i64" : "/i32") << " base=" << base << " attn=" << attn_factor
        << " seed=" << seed;
    if (flush == GuardedBytes::Flush::Start) {
        out << " guard=start";
    }
    if (nan_in_cache) {
        out << " nan-in-cache";
    }
    return out.str();
}

RopeCall::RopeCall(CaseSpec spec) : spec_(std::move(spec)) {
    const CaseSpec &c = spec_;
    const Sizes q_sizes{c.batch, c.seq, c.q_heads, c.head_dim};
    const Sizes k_sizes{c.batch, c.seq, c.k_heads, c.head_dim};
    const bool has_k = c.k_heads > 0;
    const Layout out_layout = c.out_layout.value_or(c.layout);
    switch (c.memory) {
        case Memory::Separate:
        case Memory::InPlace:
            q = Tensor::make(c.dtype, q_sizes, c.layout, c.row_pad, c.flush);
            if (has_k) {
                k = Tensor::make(c.dtype, k_sizes, c.layout, c.row_pad, c.flush);
            }
            break;
        case Memory::PackedQkv:
        case Memory::PackedQkvInPlace:
        case Memory::PerHeadQkvInPlace: {
            const auto make = c.memory == Memory::PerHeadQkvInPlace ? make_per_head_qkv : make_packed_qkv;
            PackedQkv packed = make(c.dtype, c.batch, c.seq, c.q_heads, std::max<int64_t>(c.k_heads, 1), c.head_dim, c.flush);
            q = packed.q;
            if (has_k) {
                k = packed.k;
            }
            v = packed.v;
            break;
        }
    }
    if (c.memory == Memory::InPlace || c.memory == Memory::PackedQkvInPlace || c.memory == Memory::PerHeadQkvInPlace) {
        q_out = q;
        k_out = k;
    } else {
        const int64_t out_pad = c.memory == Memory::Separate ? c.row_pad : 0;
        q_out = Tensor::make(c.dtype, q_sizes, out_layout, out_pad, c.flush);
        if (has_k) {
            k_out = Tensor::make(c.dtype, k_sizes, out_layout, out_pad, c.flush);
        }
    }

    std::mt19937_64 rng(c.seed);
    for (Tensor *input : {&q, &k, &v}) {
        if (input->storage() == nullptr) {
            continue;
        }
        switch (c.fill) {
            case Fill::Uniform: fill_uniform(*input, rng); break;
            case Fill::Nonzero: fill_nonzero(*input, rng); break;
            case Fill::Adversarial: fill_adversarial(*input, rng); break;
            case Fill::RandomBits: fill_random_bits(*input, rng); break;
        }
    }
    q_in = q.clone();
    if (has_k) {
        k_in = k.clone();
    }

    build_positions();
    if (c.source == ROPE_SOURCE_CACHE) {
        const int64_t max_position = *std::max_element(positions_.begin(), positions_.end());
        const int64_t len = c.cache_len != 0 ? c.cache_len : max_position + 3;
        const int pairs = c.effective_rotary_dim() / 2;
        cache_ = ref::build_cache(len, c.effective_rotary_dim(), pairs + c.cache_row_pad, c.effective_base(),
                                  c.effective_attn_factor(), positions_);
        if (c.nan_in_cache) {
            plant_nans(cache_, positions_, pairs);
        }
        // The call may read rows 0..len-1, R/2 values each: the last row's padding is left out so
        // that its last value touches the guard page.
        const auto readable = static_cast<size_t>((len - 1) * cache_.row_stride + pairs);
        for (auto [table, guarded] : {std::pair{&cache_.cos, &cos_table_}, std::pair{&cache_.sin, &sin_table_}}) {
            if (!c.cache_in_dtype) {
                *guarded = guarded_copy(*table, readable, c.flush);
                continue;
            }
            // The kernel reads the 16-bit tables; the oracle reads the same values, widened.
            std::vector<uint16_t> narrow;
            for (float &value : *table) {
                narrow.push_back(static_cast<uint16_t>(ref::encode(value, c.dtype)));
                value = static_cast<float>(ref::decode(narrow.back(), c.dtype));
            }
            *guarded = guarded_copy(narrow, readable, c.flush);
        }
    }
    // The scaling's tables, R/2 values each between guard pages (the cases size them).
    for (auto [values, guarded] : {std::pair{&c.scaling.short_factor, &short_factor_},
                                   std::pair{&c.scaling.long_factor, &long_factor_}, std::pair{&c.scaling.inv_freq, &inv_freq_}}) {
        if (!values->empty()) {
            *guarded = guarded_copy(*values, values->size(), c.flush);
        }
    }
    snapshot();
}

void RopeCall::build_positions() {
    const CaseSpec &c = spec_;
    const PositionsSpec &p = c.positions;
    const int64_t streams = c.mrope() ? 3 : 1, tokens = c.batch * c.seq;
    positions_.assign(static_cast<size_t>(tokens), 0);
    if (c.mrope()) {  // streams 1 and 2 straight from the spec (Table mode, not transposed)
        positions_.insert(positions_.end(), p.values.begin() + tokens, p.values.begin() + 3 * tokens);
    }
    for (int64_t b = 0; b < c.batch; b++) {
        for (int64_t s = 0; s < c.seq; s++) {
            switch (p.mode) {
                case PositionMode::ScalarOffset: positions_[b * c.seq + s] = p.scalar_offset + s; break;
                case PositionMode::BatchOffsets: positions_[b * c.seq + s] = p.values.at(b) + s; break;
                case PositionMode::Table:
                    positions_[b * c.seq + s] = p.values.at(p.shared_rows ? s : b * c.seq + s);
                    break;
            }
        }
    }
    if (p.mode == PositionMode::ScalarOffset || c.batch == 0 || c.seq == 0) {
        return;
    }
    if (p.mode == PositionMode::BatchOffsets) {
        position_strides_[0] = 1 + p.pad;
    } else if (p.shared_rows) {
        position_strides_[0] = 0;
        position_strides_[1] = 1 + p.pad;
    } else {
        position_strides_[0] = p.transposed ? 1 : c.seq + p.pad;
        position_strides_[1] = p.transposed ? c.batch + p.pad : 1;
    }
    // The array the call reads: up to its last entry, so that it touches the guard page; -1 in
    // the unused slots.
    const int64_t span = (c.batch - 1) * position_strides_[0] + (c.seq - 1) * position_strides_[1] + 1;
    stream_stride_ = span + 3;  // mrope: a gap of -1s between the streams
    std::vector<int64_t> stored(static_cast<size_t>((streams - 1) * stream_stride_ + span), -1);
    for (int64_t stream = 0; stream < streams; stream++) {
        for (int64_t b = 0; b < c.batch; b++) {
            for (int64_t s = 0; s < c.seq; s++) {
                stored.at(stream * stream_stride_ + b * position_strides_[0] + s * position_strides_[1]) =
                    p.mode == PositionMode::BatchOffsets ? p.values.at(b) : positions_[stream * tokens + b * c.seq + s];
            }
        }
    }
    if (p.index_type == ROPE_INDEX_INT64) {
        positions_table_ = guarded_copy(stored, stored.size(), c.flush);
    } else {
        // Values that do not fit are a test's own mistake; int32 tests keep positions small.
        positions_table_ = guarded_copy(std::vector<int32_t>(stored.begin(), stored.end()), stored.size(), c.flush);
    }
}

void RopeCall::snapshot() {
    before_ = Snapshot();
    for (const Tensor *t : {&q, &k, &q_out, &k_out, &v}) {
        before_.add(*t);
    }
    tables_before_.clear();
    for (const GuardedBytes *table : {&positions_table_, &cos_table_, &sin_table_, &short_factor_, &long_factor_, &inv_freq_}) {
        tables_before_.emplace_back(table, std::vector<uint8_t>(table->begin(), table->end()));
    }
}

::testing::AssertionResult RopeCall::tables_unchanged() const {
    const char *const names[] = {"positions", "cos", "sin", "short_factor", "long_factor", "inv_freq"};
    for (size_t i = 0; i < tables_before_.size(); i++) {
        const auto &[table, bytes] = tables_before_[i];
        if (!std::equal(bytes.begin(), bytes.end(), table->begin(), table->end())) {
            return ::testing::AssertionFailure() << "the call wrote its " << names[i] << " table, which it only reads";
        }
    }
    return ::testing::AssertionSuccess();
}

rope_params RopeCall::params() const {
    const CaseSpec &c = spec_;
    rope_params p = rope_params_init();
    p.style = c.style;
    p.direction = c.direction;
    p.rotary_dim = c.rotary_dim;
    p.rotary_offset = c.rotary_offset;
    p.q = q.rope();
    p.q_out = q_out.rope();
    if (c.k_heads > 0) {
        p.k = k.rope();
        p.k_out = k_out.rope();
    }
    switch (c.positions.mode) {
        case PositionMode::ScalarOffset:
            p.positions.kind = ROPE_POSITIONS_OFFSET;
            p.positions.offset = c.positions.scalar_offset;
            break;
        case PositionMode::BatchOffsets: p.positions.kind = ROPE_POSITIONS_OFFSET; break;
        case PositionMode::Table: p.positions.kind = ROPE_POSITIONS_TABLE; break;
    }
    p.positions.index_type = c.positions.index_type;
    if (c.positions.mode != PositionMode::ScalarOffset) {
        p.positions.data = positions_table_.data();
        p.positions.strides[0] = position_strides_[0];
        p.positions.strides[1] = position_strides_[1];
    }
    p.angles.source = c.source;
    p.angles.base = c.base;
    p.angles.attn_factor = c.attn_factor;
    if (c.source == ROPE_SOURCE_CACHE) {
        p.angles.cos_cache = cos_table_.data();
        p.angles.sin_cache = sin_table_.data();
        p.angles.cache_dtype = c.cache_in_dtype ? c.dtype : ROPE_DTYPE_F32;
        p.angles.cache_len = cache_.len;
        p.angles.cache_row_stride = c.cache_row_pad != 0 ? cache_.row_stride : 0;
    }
    const ref::Scaling &sc = c.scaling;
    p.scaling.type = sc.type;
    p.scaling.factor = static_cast<float>(sc.factor);
    p.scaling.original_max_positions = sc.original_max;
    p.scaling.max_positions = sc.max_positions;
    p.scaling.low_freq_factor = static_cast<float>(sc.low_freq_factor);
    p.scaling.high_freq_factor = static_cast<float>(sc.high_freq_factor);
    p.scaling.beta_fast = static_cast<float>(sc.beta_fast);
    p.scaling.beta_slow = static_cast<float>(sc.beta_slow);
    p.scaling.mscale = static_cast<float>(sc.mscale);
    p.scaling.mscale_all_dim = static_cast<float>(sc.mscale_all_dim);
    p.scaling.yarn_no_truncate = sc.truncate ? 0 : 1;
    auto table = [](const GuardedBytes &bytes) { return bytes.size() > 0 ? reinterpret_cast<const float *>(bytes.data()) : nullptr; };
    p.scaling.short_factor = table(short_factor_);
    p.scaling.long_factor = table(long_factor_);
    p.scaling.inv_freq = table(inv_freq_);
    p.round_cos_sin = c.round_cos_sin ? 1 : 0;
    for (int stream = 0; stream < 3; stream++) {
        p.mrope.sections[stream] = c.mrope_sections[stream];
    }
    p.mrope.stream_stride = c.mrope() ? stream_stride_ : 0;
    p.num_threads = c.num_threads;
    return p;
}

void RopeCall::modify_inputs(const std::function<void(Tensor &q, Tensor &k)> &edit) {
    edit(q, k);
    q_in = q.clone();
    if (spec_.k_heads > 0) {
        k_in = k.clone();
    }
    snapshot();
}

rope_status RopeCall::run(const Runner &runner) {
    const rope_params p = params();
    report_ = rope_report_init();
    return runner(&p, &report_);
}

int64_t RopeCall::sequence_length(int64_t b) const {
    const auto row = positions_.begin() + b * spec_.seq;
    return *std::max_element(row, row + spec_.seq) + 1;
}

ref::CosSin RopeCall::angles(int64_t b, int64_t position) const {
    const CaseSpec &c = spec_;
    const int rotary_dim = c.effective_rotary_dim();
    ref::CosSin cs;
    switch (c.source) {
        case ROPE_SOURCE_CACHE: cs = ref::cache_cos_sin(cache_, position, rotary_dim); break;
        case ROPE_SOURCE_COMPAT:
            cs = ref::compat_cos_sin(
                position, ref::compat_scaled_inv_freq(c.effective_base(), rotary_dim, c.scaling, sequence_length(b)),
                c.effective_attn_factor());
            break;
        case ROPE_SOURCE_PRECISE:
            cs = ref::exact_cos_sin(
                position, ref::exact_scaled_inv_freq(c.effective_base(), rotary_dim, c.scaling, sequence_length(b)),
                c.effective_attn_factor());
            break;
    }
    return ref::for_direction(c.round_cos_sin ? ref::rounded_to_dtype(cs, c.dtype) : cs, c.direction);
}

ref::RotationMatrix RopeCall::token_rotation(int64_t b, int64_t s) const {
    const CaseSpec &c = spec_;
    ref::CosSin cs = angles(b, position(b, s));
    if (c.mrope()) {  // pair i from the stream whose section holds it
        const int64_t tokens = c.batch * c.seq, token = b * c.seq + s;
        cs = ref::mrope_cos_sin(cs, angles(b, positions_[tokens + token]), angles(b, positions_[2 * tokens + token]),
                                c.mrope_sections[0], c.mrope_sections[1]);
    }
    return ref::rotation_matrix(static_cast<int>(c.head_dim), c.effective_rotary_dim(), c.rotary_offset, c.style, cs);
}

std::vector<double> RopeCall::reference_head(bool is_k, int64_t b, int64_t s, int64_t h) const {
    return token_rotation(b, s).apply((is_k ? k_in : q_in).head(b, s, h));
}

::testing::AssertionResult RopeCall::check_outputs() const {
    const CaseSpec &c = spec_;
    Failures failures;
    for (int64_t b = 0; b < c.batch; b++) {
        for (int64_t s = 0; s < c.seq; s++) {
            const ref::RotationMatrix rotation = token_rotation(b, s);  // shared by the token's q and k heads
            for (const bool is_k : {false, true}) {
                const Tensor &in = is_k ? k_in : q_in;
                const Tensor &out = is_k ? k_out : q_out;
                for (int64_t h = 0; h < (is_k ? c.k_heads : c.q_heads); h++) {
                    const auto where = [&](int64_t d) {
                        std::ostringstream w;
                        w << (is_k ? "k" : "q") << "[b=" << b << ",s=" << s << ",h=" << h << ",d=" << d
                          << "] pos=" << position(b, s);
                        return w.str();
                    };
                    judge_head(c, rotation, head_bits(in, b, s, h), head_bits(out, b, s, h), where, failures);
                }
            }
        }
    }
    return failures.result("outputs differ from the fp64 oracle");
}

::testing::AssertionResult RopeCall::check_untouched_outside_outputs() const {
    if (::testing::AssertionResult tables = tables_unchanged(); !tables) {
        return tables;
    }
    return before_.unchanged_outside({&q_out, &k_out});
}

::testing::AssertionResult RopeCall::check_all_unchanged() const {
    if (::testing::AssertionResult tables = tables_unchanged(); !tables) {
        return tables;
    }
    return before_.unchanged();
}

void Snapshot::add(const Tensor &tensor) {
    if (tensor.storage() == nullptr) {
        return;
    }
    const bool seen =
        std::any_of(before_.begin(), before_.end(), [&](const auto &entry) { return entry.first == tensor.storage(); });
    if (!seen) {
        const GuardedBytes &bytes = tensor.storage()->bytes;
        before_.emplace_back(tensor.storage(), std::vector<uint8_t>(bytes.begin(), bytes.end()));
    }
}

::testing::AssertionResult Snapshot::unchanged() const {
    for (const auto &[storage, bytes] : before_) {
        if (!std::equal(bytes.begin(), bytes.end(), storage->bytes.begin(), storage->bytes.end())) {
            const auto mismatch = std::mismatch(bytes.begin(), bytes.end(), storage->bytes.begin());
            return ::testing::AssertionFailure()
                   << "a buffer changed at byte " << (mismatch.first - bytes.begin()) << " of " << bytes.size();
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult Snapshot::unchanged_outside(const std::vector<const Tensor *> &outputs) const {
    Failures failures;
    for (const auto &[storage, bytes] : before_) {
        const std::vector<bool> covered = covered_elements(*storage, outputs);
        const Storage old{storage->dtype, GuardedBytes(bytes.data(), bytes.size())};
        for (int64_t i = 0; i < storage->elements(); i++) {
            if (!covered[i] && storage->bits(i) != old.bits(i)) {
                failures.add("element ", i, " outside the outputs changed from ", hex(old.bits(i)), " to ",
                             hex(storage->bits(i)));
            }
        }
    }
    return failures.result("memory outside the outputs was written");
}

::testing::AssertionResult check_head(const CaseSpec &spec, const reference::RotationMatrix &rotation,
                                      const std::vector<uint32_t> &in_bits, const std::vector<uint32_t> &out_bits) {
    Failures failures;
    judge_head(spec, rotation, in_bits, out_bits, [](int64_t d) { return "lane " + std::to_string(d); }, failures);
    return failures.result("a head differs from the fp64 oracle");
}

void expect_correct(const CaseSpec &spec, const Runner &runner, const char *kernel) {
    SCOPED_TRACE(spec.describe());
    RopeCall call(spec);
    const rope_status status = call.run(runner);
    ASSERT_EQ(status, ROPE_OK) << call.report().message;
    EXPECT_EQ(call.report().status, ROPE_OK);
    EXPECT_STREQ(call.report().message, "") << "a successful call leaves the message empty";
    if (kernel != nullptr) {
        EXPECT_STREQ(call.report().kernel, kernel);
    }
    EXPECT_TRUE(call.check_outputs());
    EXPECT_TRUE(call.check_untouched_outside_outputs());
}

PositionsSpec random_table(const CaseSpec &spec, int64_t low, int64_t high, rope_index_type index_type,
                           uint64_t seed) {
    PositionsSpec p;
    p.mode = PositionMode::Table;
    p.index_type = index_type;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> pick(low, high - 1);
    for (int64_t i = 0; i < spec.batch * spec.seq; i++) {
        p.values.push_back(pick(rng));
    }
    return p;
}

::testing::AssertionResult same_bits(const Tensor &a, const Tensor &b) {
    if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) {
        return ::testing::AssertionFailure() << "views differ in sizes or dtype";
    }
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    int64_t differences = 0;
    a.for_each_head([&](int64_t bi, int64_t s, int64_t h) {
        for (int64_t d = 0; d < a.head_dim(); d++) {
            if (a.bits(bi, s, h, d) != b.bits(bi, s, h, d) && differences++ == 0) {
                result = ::testing::AssertionFailure()
                         << "first difference at [" << bi << "," << s << "," << h << "," << d << "]: "
                         << hex(a.bits(bi, s, h, d)) << " vs " << hex(b.bits(bi, s, h, d));
            }
        }
    });
    if (differences > 0) {
        result << " (" << differences << " elements differ)";
    }
    return result;
}

}  // namespace ropegen::test
