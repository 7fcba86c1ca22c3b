// SPDX-License-Identifier: Apache-2.0
// The one RoPE generator. Its variant parameters (style, head_dim, dtype, source) pick what is
// computed; its schedule parameters (the keys of schedules/*.json) pick how. Every kernel shares
// one signature, so the runtime calls them all through one function-pointer type:
//   inputs  q, k [lane, head, seq, batch]; positions [seq, batch] (int32, any strides: an int64
//           table is read through its low words, an offset table with seq stride 0);
//           positions_given (false: positions is not read, as for one scalar offset);
//           position_base (added to every position); position_step (1 for offsets, else 0):
//           position(s, b) = (positions_given ? positions(s, b, stream) : 0) + position_base + s * position_step;
//           cos_table, sin_table [pair, row] (cache source,
//           f32), cos_table_narrow, sin_table_narrow (the same in the tensor dtype), narrow_tables
//           (which pair to read);
//           base, attn_factor, sin_sign (+1 forward, -1 inverse), rotary_offset, rotary_pairs;
//           the scaling's scalars and per-pair tables; round_cos_sin; mrope_end0, mrope_end1 (the
//           pairs of mrope's first stream, and of its first two: P and P without mrope)
//   outputs per tensor: *_rotated, the rotary lanes as (pair, half) for the half style or
//           (half, pair) for the interleaved style (uint32 words of both lanes, the half axis of
//           extent 1, when it rotates by words), then [head, seq, batch]; *_lead and *_tail,
//           the lanes before and after the rotary slice (empty for full rotary or in place).
#include <cstdlib>
#include <string>

#include "Halide.h"
#include "rope_math.h"
#include "rope_schedule.h"
#include "ropegen/rope.h"

namespace ropegen {
namespace {

using namespace Halide;

enum class Style { Half, Interleaved };
enum class Source { Cache, Compat, Precise };

// Every function of a kernel starts on a 64-byte boundary: LLVM's -align-all-functions, passed
// through HL_LLVM_ARGS, which Halide reads when it first sets LLVM up (after this initializer).
// With LLVM's default of 16 bytes, a kernel's hot loops sat differently across cache lines in
// every link, so its speed moved with the code linked before it (the interleaved compat kernel's
// one-token call took 0.70 or 0.90 us as the dispatcher's code changed size); with 64 it is fixed.
const bool kFunctionsAligned = [] {
    const std::string given = Internal::get_env_variable("HL_LLVM_ARGS");  // split at each space
    const std::string args = (given.empty() ? "" : given + " ") + "-align-all-functions=6";
    return setenv("HL_LLVM_ARGS", args.c_str(), 1) == 0;
}();

const std::map<std::string, HeadLoop> kHeadLoopNames = {{"inside_tokens", HeadLoop::InsideTokens},
                                                        {"outside_tokens", HeadLoop::OutsideTokens}};

// The two schedule knobs of one layout, named "<layout>_tokens_per_task" and "<layout>_head_loop".
struct LayoutParams {
    GeneratorParam<int> tokens_per_task;
    GeneratorParam<HeadLoop> head_loop;
    LayoutParams(const std::string &layout, HeadLoop default_loop)
        : tokens_per_task(layout + "_tokens_per_task", 8, 1, 1 << 16),
          head_loop(layout + "_head_loop", default_loop, kHeadLoopNames) {
    }
    LayoutSchedule value() const {
        return {tokens_per_task, head_loop};
    }
};

class RopeGenerator : public Generator<RopeGenerator> {
public:
    // Variant parameters: each combination is a separate kernel.
    GeneratorParam<Style> style{"style", Style::Half, {{"half", Style::Half}, {"interleaved", Style::Interleaved}}};
    GeneratorParam<int> head_dim{"head_dim", 0, 0, 1 << 16};  // 0: any even head_dim
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<Source> source{"source", Source::Cache, {{"cache", Source::Cache}, {"compat", Source::Compat}, {"precise", Source::Precise}}};

    // Schedule parameters (schedules/*.json).
    GeneratorParam<int> vector_pairs{"vector_pairs", 8, 1, 64};
    GeneratorParam<int> unroll_pairs{"unroll_pairs", 1, 1, 16};
    GeneratorParam<CosSinAt> cos_sin_at{"cos_sin_at", CosSinAt::Task, {{"task", CosSinAt::Task}, {"inline", CosSinAt::Inline}, {"root", CosSinAt::Root}}};
    GeneratorParam<int> cos_sin_vectors{"cos_sin_vectors", 1, 1, 8};
    GeneratorParam<StoreOrder> store_order{"store_order", StoreOrder::PairVectors, {{"pair_vectors", StoreOrder::PairVectors}, {"halves", StoreOrder::Halves}}};
    GeneratorParam<InterleavedRotation> interleaved_rotation{"interleaved_rotation", InterleavedRotation::Deinterleave, {{"deinterleave", InterleavedRotation::Deinterleave}, {"swap", InterleavedRotation::Swap}, {"words", InterleavedRotation::Words}}};
    GeneratorParam<HalfRotation> half_rotation{"half_rotation", HalfRotation::Lanes, {{"lanes", HalfRotation::Lanes}, {"words", HalfRotation::Words}}};
    LayoutParams bshd{"bshd", HeadLoop::InsideTokens};
    LayoutParams bhsd{"bhsd", HeadLoop::OutsideTokens};
    LayoutParams sbhd{"sbhd", HeadLoop::InsideTokens};
    LayoutParams strided{"strided", HeadLoop::InsideTokens};
    GeneratorParam<int> gpu_threads_per_block{"gpu_threads_per_block", 256, 32, 1024};
    GeneratorParam<int> gpu_pair_threads{"gpu_pair_threads", 32, 1, 1024};
    GeneratorParam<int> gpu_tokens_per_block{"gpu_tokens_per_block", 1, 1, 1024};

    void configure() {
        const Type element = dtype;
        _halide_user_assert(!pair_words() || (element.bits() == 16 && head_dim > 0 && !get_target().has_gpu_feature()))
            << "interleaved_rotation=words and half_rotation=words are for CPU kernels of a 16-bit dtype and a "
               "fixed head_dim (cmake/ropegen_kernels.py passes deinterleave and lanes for the others)";
        _halide_user_assert(!pair_words() || style == Style::Interleaved || head_dim % 4 == 0)
            << "half_rotation=words pairs neighbouring pairs: head_dim " << int(head_dim) << " has an odd pair count";
        q_ = add_input<Buffer<>>("q", dtype, 4);
        k_ = add_input<Buffer<>>("k", dtype, 4);
        positions_ = add_input<Buffer<int32_t, 3>>("positions");
        positions_given_ = add_input<bool>("positions_given");
        position_base_ = add_input<int32_t>("position_base");
        position_step_ = add_input<int32_t>("position_step");
        cos_table_ = add_input<Buffer<float, 2>>("cos_table");
        sin_table_ = add_input<Buffer<float, 2>>("sin_table");
        cos_table_narrow_ = add_input<Buffer<>>("cos_table_narrow", dtype, 2);
        sin_table_narrow_ = add_input<Buffer<>>("sin_table_narrow", dtype, 2);
        narrow_tables_ = add_input<bool>("narrow_tables");
        base_ = add_input<double>("base");
        attn_factor_ = add_input<float>("attn_factor");
        sin_sign_ = add_input<float>("sin_sign");
        rotary_offset_ = add_input<int32_t>("rotary_offset");
        rotary_pairs_ = add_input<int32_t>("rotary_pairs");
        scaling_type_ = add_input<int32_t>("scaling_type");
        scaling_factor_ = add_input<float>("scaling_factor");
        original_max_positions_ = add_input<int32_t>("original_max_positions");
        low_freq_factor_ = add_input<float>("low_freq_factor");
        high_freq_factor_ = add_input<float>("high_freq_factor");
        beta_fast_ = add_input<float>("beta_fast");
        beta_slow_ = add_input<float>("beta_slow");
        yarn_truncate_ = add_input<bool>("yarn_truncate");
        short_factor_ = add_input<Buffer<float, 1>>("short_factor");
        long_factor_ = add_input<Buffer<float, 1>>("long_factor");
        given_inv_freq_ = add_input<Buffer<float, 1>>("given_inv_freq");
        round_cos_sin_ = add_input<bool>("round_cos_sin");
        mrope_end0_ = add_input<int32_t>("mrope_end0");
        mrope_end1_ = add_input<int32_t>("mrope_end1");
        for (const char *tensor : {"q", "k"}) {
            outputs_.push_back({add_output<Buffer<>>(std::string(tensor) + "_rotated", pair_words() ? UInt(32) : element, 5),
                                add_output<Buffer<>>(std::string(tensor) + "_lead", dtype, 4),
                                add_output<Buffer<>>(std::string(tensor) + "_tail", dtype, 4)});
        }
    }

    void generate() {
        const RopeVars v;
        // Token positions: an explicit table, or offset[batch] + seq (spec §5).
        position_(v.seq, v.batch, v.stream) = select(*positions_given_, (*positions_)(v.seq, v.batch, v.stream), 0) +
                                              *position_base_ + v.seq * (*position_step_);
        if (source != Source::Cache) {
            define_inv_freq();
        }
        define_cos_sin();
        tensors_.push_back(rotate_tensor("q", *q_, outputs_[0]));
        tensors_.push_back(rotate_tensor("k", *k_, outputs_[1]));
    }

    void schedule() {
        if (get_target().has_gpu_feature()) {
            const GpuSchedule gpu{vector_pairs, gpu_threads_per_block, gpu_pair_threads, gpu_tokens_per_block};
            apply_gpu_schedule(tensors_, cos_sin_, gpu, head_dim / 2, Expr(*positions_given_),
                               has_narrow_tables() ? Expr(*narrow_tables_) : Expr());
            if (head_dim > 0) {
                promise_vector_alignment();
            }
        } else {
            schedule_cpu();
        }
        positions_->dim(0).set_stride(Expr());  // int64 tables (stride 2) and offsets (stride 0)
        // The pair axis spans exactly rotary_pairs: a constant in fixed head_dim kernels, so their
        // pair loops have constant trip counts.
        // Pair words: an interleaved word holds one pair (no half axis), a half-style word one lane
        // of two neighbouring pairs (P / 2 words a half).
        const int pair_dim = style == Style::Half ? 0 : 1, half_dim = 1 - pair_dim;
        const Expr words_a_half = style == Style::Half && pair_words() ? rotary_pairs() / 2 : rotary_pairs();
        for (const TensorOutputs &out : outputs_) {
            out.rotated->dim(pair_dim).set_bounds(0, words_a_half);
            out.rotated->dim(half_dim).set_bounds(0, style == Style::Interleaved && pair_words() ? 1 : 2);
            if (head_dim > 0) {
                // Whole heads: nothing passes through, and no loop is emitted for it.
                out.lead->dim(0).set_bounds(0, 0);
                out.tail->dim(0).set_bounds(head_dim, 0);
            }
            // Pairs are two lanes apart (interleaved); a pair's lanes are P apart (half: P / 2 words).
            out.rotated->dim(1).set_stride(style == Style::Interleaved ? Expr(pair_words() ? 1 : 2) : words_a_half);
        }
    }

private:
    // Fixed head_dim CUDA kernels load and store whole 16-byte vectors (the any-head_dim kernel
    // makes no such assumption and serves every other call): they assume every tensor and table
    // starts 16-byte aligned at element 0 with strides in whole vectors, which the dispatcher
    // checks before it picks one (KernelEntry::vector_elements).
    void promise_vector_alignment() {
        const int lanes = vector_pairs;
        auto align = [&](auto &buffer, int first_strided_dim) {
            buffer.set_host_alignment(16);
            buffer.dim(0).set_min(0);
            for (int d = first_strided_dim; d < buffer.dimensions(); d++) {
                buffer.dim(d).set_stride(buffer.dim(d).stride() / lanes * lanes);
            }
        };
        for (auto *input : {q_, k_, cos_table_narrow_, sin_table_narrow_}) {
            align(*input, 1);
        }
        for (auto *table : {cos_table_, sin_table_}) {
            align(*table, 1);
        }
        for (const TensorOutputs &out : outputs_) {
            align(*out.rotated, 2);
        }
    }

    void schedule_cpu() {
        if (inv_freq_.defined()) {
            // As wide as the cos/sin table: 2^x's series is a chain of dependent steps, and one
            // wide vector interleaves the chains of its native parts.
            inv_freq_.compute_root().vectorize(RopeVars().pair, vector_pairs.value() * cos_sin_vectors.value(), TailStrategy::GuardWithIf);
            // The selects of scaled_inv_freq evaluate every scaling's branch; a call without
            // scaling (the common case) gets a loop nest with the plain frequencies only, and a
            // call with a table of frequencies (the caller's, or compat's cached by the
            // dispatcher for a call without scaling) one that only reads it.
            inv_freq_.specialize(*scaling_type_ == ROPE_SCALING_NONE);
            inv_freq_.specialize(*scaling_type_ == ROPE_SCALING_INV_FREQ);
        }
        if (last_position_.defined()) {
            last_position_.compute_root();
        }
        // Computed angles are never inlined: that would evaluate sin/cos once per head.
        const CosSinAt angles_at = source != Source::Cache && cos_sin_at == CosSinAt::Inline ? CosSinAt::Task : cos_sin_at;
        const RopeSchedule knobs{vector_pairs, unroll_pairs, angles_at, cos_sin_vectors, store_order, bshd.value(), bhsd.value(),
                                 sbhd.value(), strided.value()};
        schedule_shared_cos_sin(cos_sin_, knobs);
        for (RotatedTensorFuncs &funcs : tensors_) {
            apply_schedule(funcs, knobs, has_narrow_tables() ? Expr(*narrow_tables_) : Expr());
        }
    }

    // A fixed head_dim kernel rotates whole heads (the dispatcher sends partial rotary to the
    // any-head_dim kernel), so its rotary slice is a compile-time constant.
    Expr rotary_pairs() const {
        return head_dim > 0 ? Expr(head_dim / 2) : Expr(*rotary_pairs_);
    }
    Expr rotary_offset() const {
        return head_dim > 0 ? Expr(0) : Expr(*rotary_offset_);
    }

    // A kernel that stores 16-bit lanes in 32-bit words (the runtime describes its rotated outputs
    // so, kernels.inc's pair_words): the interleaved style a pair a word, its first lane low; the
    // half style a lane of pairs 2i (low) and 2i + 1 a word. Narrowing then ends in one
    // two-source permute of 16-bit lanes, not in shuffles that interleave two vectors (interleaved)
    // or in one truncating store per 16 lanes (half).
    bool pair_words() const {
        return style == Style::Interleaved ? interleaved_rotation == InterleavedRotation::Words
                                           : half_rotation == HalfRotation::Words;
    }

    // Two f32 results narrowed to the 16-bit dtype (spec §4: rounded once) and packed as one
    // 32-bit word, `low` in its low half (pair_words).
    Expr word_of(const Expr &low, const Expr &high) const {
        auto bits = [&](const Expr &value) { return cast<uint32_t>(reinterpret<uint16_t>(narrow(value))); };
        return bits(low) | (bits(high) << 16);
    }

    // Storage dtype <-> f32 (spec §4). Halide's CUDA code generator cannot convert bf16 (LLVM
    // rejects the cast), so CUDA kernels convert it through its bits.
    bool bf16_through_bits() const {
        return dtype == BFloat(16) && get_target().has_feature(Target::CUDA);
    }
    Expr widen(const Expr &x) const {
        return x.type() == BFloat(16) && bf16_through_bits() ? bf16_to_f32_bits(x) : cast<float>(x);
    }
    // Whether f16 converts in hardware, which keeps NaN a NaN: F16C's vcvtps2ph (Halide's AVX-512
    // targets do not name F16C but imply it, and the dispatcher runs them only where the avx2
    // level's F16C is present, isa_x86_64.cpp), AdvSIMD's fcvtn (which Halide emits only for its
    // arm_fp16 targets: every neon kernel is built with it), PTX's cvt.rn.f16.f32. Halide
    // emulates the conversion elsewhere. With hardware the NaN select of narrow() is only cost,
    // and on CUDA it also kept LLVM from pairing the conversions into cvt.rn.f16x2.f32.
    bool native_f16_conversion() const {
        return get_target().features_any_of({Target::F16C, Target::AVX512, Target::AVX512_KNL, Target::AVX512_Skylake,
                                             Target::AVX512_Cannonlake, Target::AVX512_SapphireRapids, Target::AVX512_Zen4,
                                             Target::AVX512_Zen5, Target::ARMFp16, Target::CUDA});
    }
    // On the CPU, Halide's own bf16 rounding adds up to 0x8000 to the f32 bits, which carries a
    // NaN whose payload's high bits are all ones past the exponent, into +-0. No such NaN reaches
    // it: inputs and 16-bit tables widen from bf16 (low half zero), f32 tables' NaNs are made
    // canonical (nan_safe_cos_sin), computed cos/sin are finite or the default NaN (validation
    // keeps the frequencies finite), and arithmetic keeps an operand's payload or makes the
    // default NaN. f32_to_bf16_bits handles any NaN, at a compare and a select per vector: bf16
    // decode took 20% longer with it on a Zen 5.
    Expr narrow(const Expr &value) const {
        if (bf16_through_bits()) {
            return f32_to_bf16_bits(value);
        }
        if (dtype == Float(16) && !native_f16_conversion()) {
            // Halide's software f32 -> f16 conversion turns NaN into Inf.
            return select(is_nan(value), reinterpret(dtype, cast<uint16_t>(0x7e00)), cast(dtype, value));
        }
        return cast(dtype, value);
    }

    // 16-bit kernels of the cache source also read tables stored in their own dtype.
    bool has_narrow_tables() const {
        return source == Source::Cache && dtype != Float(32);
    }

    struct TensorOutputs {
        GeneratorOutput<Buffer<>> *rotated, *lead, *tail;
    };

    // inv_freq(pair, row) of a computed source (spec §1, §5, §6). Scalings that depend on the
    // length of a sequence (its largest position + 1) get a row per batch item; the others one
    // row: the row of batch item b is b * length_rows, which bounds inference evaluates at run
    // time, so a call without such a scaling computes a single row.
    void define_inv_freq() {
        const RopeVars v;
        // CUDA calls take no scaling (runtime/src/validate.cpp): their kernels compute the plain
        // frequencies, inline, with no per-sequence reduction.
        const bool scaled = !get_target().has_gpu_feature();
        // A table the call's scaling does not read is a one-element placeholder (the selects of
        // scaled_inv_freq evaluate every branch): reads are clamped into it, once per pair.
        // A table the call's scaling reads has a value per pair, so its clamp is to the pair
        // loop's own bounds: where a specialization fixes the scaling (a table of frequencies,
        // see schedule_cpu) that folds away, and the table is read as vectors, not gathered.
        auto at_pair = [&](const auto &table, rope_scaling_type reader) {
            const Expr last = select(*scaling_type_ == reader, rotary_pairs(), table->dim(0).extent()) - 1;
            return (*table)(clamp(v.pair, 0, last));
        };
        const Scaling scaling{scaled ? Expr(*scaling_type_) : Expr(ROPE_SCALING_NONE),
                              *scaling_factor_, *original_max_positions_, *low_freq_factor_, *high_freq_factor_,
                              *beta_fast_, *beta_slow_, *yarn_truncate_, at_pair(short_factor_, ROPE_SCALING_LONGROPE),
                              at_pair(long_factor_, ROPE_SCALING_LONGROPE), at_pair(given_inv_freq_, ROPE_SCALING_INV_FREQ)};
        Expr length = 0;
        if (scaled) {
            // The largest position, then the length in 64 bits: a position may be 2^31 - 1.
            const RDom token(0, positions_->dim(0).extent());
            last_position_(v.batch) = maximum(position_(token, v.batch, 0));
            length = cast<int64_t>(last_position_(v.row)) + 1;
            length_rows_ = select(depends_on_length(scaling), 1, 0);
        }
        inv_freq_(v.pair, v.row) = scaled_inv_freq(source == Source::Compat, v.pair, *base_, 2 * rotary_pairs(), scaling, length);
    }

    // The inv_freq row of batch item `batch`.
    Expr inv_freq_row(const Expr &batch) const {
        return length_rows_.defined() ? batch * length_rows_ : Expr(0);
    }

    // cos and sin of every (pair, token), with the inverse direction's sign folded into sin.
    void define_cos_sin() {
        const RopeVars v;
        Func &cs = cos_sin_;
        if (source == Source::Cache) {
            const Expr position = position_(v.seq, v.batch, 0);
            // Rows are validated against cache_len before any kernel runs (spec §5), except in device
            // memory, which the dispatcher cannot read without synchronizing: there the row is
            // clamped, so that no position reads outside the cache.
            auto read = [&](const auto &table) {
                const Expr last_row = table.dim(1).extent() - 1;
                const Expr row = get_target().has_gpu_feature() ? clamp(position, 0, last_row)
                                                                : unsafe_promise_clamped(position, 0, last_row);
                return widen(table(v.pair, row));
            };
            // The parity mode needs no rounding here: it takes tables in the tensor dtype (spec §5),
            // rounded already (runtime/src/validate.cpp).
            Expr c = nan_safe_cos_sin(read(*cos_table_)), s = nan_safe_cos_sin(read(*sin_table_));
            if (has_narrow_tables()) {
                // Tables in the tensor dtype (spec §5); the schedule specializes on the choice.
                c = select(*narrow_tables_, read(*cos_table_narrow_), c);
                s = select(*narrow_tables_, read(*sin_table_narrow_), s);
            }
            cs(v.pair, v.seq, v.batch) = {c, s * (*sin_sign_)};
            return;
        }
        // mrope (spec §6): pair i takes its position from the stream whose section holds it;
        // [0, mrope_end0) temporal, [mrope_end0, mrope_end1) height, the rest width. Each stream
        // is read once per token and the pair selects among the three values: selecting the
        // stream instead would read the table once per pair (a gather). A call without mrope has
        // one stream, which the clamp reads three times. CUDA calls take no mrope
        // (runtime/src/validate.cpp).
        const Expr last_stream = positions_->dim(2).extent() - 1;
        auto stream_position = [&](int stream) { return position_(v.seq, v.batch, min(stream, last_stream)); };
        const Expr position = get_target().has_gpu_feature()
                                  ? stream_position(0)
                                  : select(v.pair < *mrope_end0_, stream_position(0), v.pair < *mrope_end1_,
                                           stream_position(1), stream_position(2));
        // compat: the f32 angle transformers computes; precise: the angle in f64.
        const Expr inv_freq = inv_freq_(v.pair, inv_freq_row(v.batch));
        const Expr angle = source == Source::Compat ? cast<double>(cast<float>(position) * inv_freq)
                                                    : cast<double>(position) * inv_freq;
        const auto [sin_value, cos_value] = sin_cos(angle);
        cs(v.pair, v.seq, v.batch) = {rounded_to_dtype(cast<float>(cos_value) * (*attn_factor_)),
                                      rounded_to_dtype(cast<float>(sin_value) * (*attn_factor_)) * (*sin_sign_)};
    }

    // A NaN of a caller's f32 cos/sin table as the one quiet NaN, in the kernels that narrow with
    // Halide's bf16 rounding (see narrow).
    Expr nan_safe_cos_sin(const Expr &value) const {
        if (dtype != BFloat(16) || bf16_through_bits()) {
            return value;
        }
        return select(is_nan(value), reinterpret<float>(Halide::Internal::UIntImm::make(UInt(32), 0x7fc00000)), value);
    }

    // The parity mode (spec §4): c and s rounded to the tensors' dtype, as transformers does.
    Expr rounded_to_dtype(const Expr &value) const {
        return dtype == Float(32) ? value : select(*round_cos_sin_, widen(narrow(value)), value);
    }

    RotatedTensorFuncs rotate_tensor(const std::string &name, const GeneratorInput<Buffer<>> &x, const TensorOutputs &out) {
        const RopeVars v;

        (*out.lead)(v.lane, v.head, v.seq, v.batch) = x(v.lane, v.head, v.seq, v.batch);
        (*out.tail)(v.lane, v.head, v.seq, v.batch) = x(v.lane, v.head, v.seq, v.batch);
        const Expr pairs = rotary_pairs(), offset = rotary_offset();

        if (style == Style::Interleaved && interleaved_rotation == InterleavedRotation::Swap && head_dim > 0 &&
            !get_target().has_gpu_feature()) {
            // Lane 2i + h from lanes 2i + h and 2i + 1 - h, with cos/sin repeated per lane
            // (their table has a fixed size only when head_dim does: see the schedule).
            const Expr x_self = widen(x(offset + 2 * v.pair + v.half, v.head, v.seq, v.batch));
            const Expr x_partner = widen(x(offset + 2 * v.pair + 1 - v.half, v.head, v.seq, v.batch));
            Func lane_cs(name + "_lane_cos_sin");
            lane_cs(v.half, v.pair, v.seq, v.batch) =
                lane_cos_sin(cos_sin_(v.pair, v.seq, v.batch)[0], cos_sin_(v.pair, v.seq, v.batch)[1], v.half == 0);
            const FuncRef lane_cs_at = lane_cs(v.half, v.pair, v.seq, v.batch);
            (*out.rotated)(v.half, v.pair, v.head, v.seq, v.batch) = narrow(rotate_lane(x_self, x_partner, lane_cs_at[0], lane_cs_at[1]));
            return {*out.rotated, Func(), lane_cs, *out.lead, *out.tail, *out.rotated, std::nullopt};
        }

        if (style == Style::Half && pair_words()) {
            return rotate_half_words(name, x, out);
        }
        // spec §2: the pair's two lanes, relative to the rotary offset.
        const Expr lane_a = style == Style::Half ? offset + v.pair : offset + 2 * v.pair;
        const Expr lane_b = style == Style::Half ? offset + v.pair + pairs : offset + 2 * v.pair + 1;
        const Expr x_a = widen(x(lane_a, v.head, v.seq, v.batch));
        const Expr x_b = widen(x(lane_b, v.head, v.seq, v.batch));

        Func rotated_pairs(name + "_rotated_pairs");
        // Each tensor reads cos/sin through its own wrapper, which the schedule may place per task.
        Func cs = cos_sin_.in(rotated_pairs);
        rotated_pairs(v.pair, v.head, v.seq, v.batch) =
            rotate_pair(x_a, x_b, cs(v.pair, v.seq, v.batch)[0], cs(v.pair, v.seq, v.batch)[1]);

        // spec §4: a 16-bit output is the f32 result rounded to nearest even, once.
        if (pair_words()) {
            const FuncRef rotated = rotated_pairs(v.pair, v.head, v.seq, v.batch);
            (*out.rotated)(v.half, v.pair, v.head, v.seq, v.batch) = word_of(rotated[0], rotated[1]);
            return {*out.rotated, rotated_pairs, cs, *out.lead, *out.tail, *out.rotated, std::nullopt};
        }
        const Expr value = select(v.half == 0, rotated_pairs(v.pair, v.head, v.seq, v.batch)[0],
                                  rotated_pairs(v.pair, v.head, v.seq, v.batch)[1]);
        const std::vector<Var> rotated_args = style == Style::Half
                                                  ? std::vector<Var>{v.pair, v.half, v.head, v.seq, v.batch}
                                                  : std::vector<Var>{v.half, v.pair, v.head, v.seq, v.batch};
        (*out.rotated)(rotated_args) = narrow(value);

        return {*out.rotated, rotated_pairs, cs, *out.lead, *out.tail, *out.rotated, std::nullopt};
    }

    // The half style stored as words (half_rotation words): word i of a half holds that half's
    // lanes of pairs 2i (low) and 2i + 1. Pairs are rotated by parity, each from one load of
    // neighbouring 16-bit lanes (x86: a shift or a mask of 32-bit words), with cos/sin read
    // through a table in the same (word, parity) order, which the schedule builds once per token.
    RotatedTensorFuncs rotate_half_words(const std::string &name, const GeneratorInput<Buffer<>> &x, const TensorOutputs &out) {
        const RopeVars v;
        const Var parity("parity");
        const Expr pair = 2 * v.pair + parity, offset = rotary_offset();
        Func cs(name + "_word_cos_sin");
        cs(v.pair, parity, v.seq, v.batch) = cos_sin_(pair, v.seq, v.batch);
        Func rotated_pairs(name + "_rotated_pairs");
        rotated_pairs(v.pair, parity, v.head, v.seq, v.batch) =
            rotate_pair(widen(x(offset + pair, v.head, v.seq, v.batch)), widen(x(offset + pair + rotary_pairs(), v.head, v.seq, v.batch)),
                        cs(v.pair, parity, v.seq, v.batch)[0], cs(v.pair, parity, v.seq, v.batch)[1]);
        auto lane = [&](int of_pair) {
            const FuncRef rotated = rotated_pairs(v.pair, of_pair, v.head, v.seq, v.batch);
            return select(v.half == 0, rotated[0], rotated[1]);
        };
        (*out.rotated)(v.pair, v.half, v.head, v.seq, v.batch) = word_of(lane(0), lane(1));
        return {*out.rotated, rotated_pairs, cs, *out.lead, *out.tail, *out.rotated, parity};
    }

    GeneratorInput<Buffer<>> *q_ = nullptr, *k_ = nullptr;
    GeneratorInput<Buffer<int32_t, 3>> *positions_ = nullptr;
    GeneratorInput<Buffer<float, 2>> *cos_table_ = nullptr, *sin_table_ = nullptr;
    GeneratorInput<Buffer<>> *cos_table_narrow_ = nullptr, *sin_table_narrow_ = nullptr;
    GeneratorInput<bool> *narrow_tables_ = nullptr, *positions_given_ = nullptr, *yarn_truncate_ = nullptr,
                         *round_cos_sin_ = nullptr;
    GeneratorInput<int32_t> *scaling_type_ = nullptr, *original_max_positions_ = nullptr, *mrope_end0_ = nullptr,
                            *mrope_end1_ = nullptr;
    GeneratorInput<float> *scaling_factor_ = nullptr, *low_freq_factor_ = nullptr, *high_freq_factor_ = nullptr,
                          *beta_fast_ = nullptr, *beta_slow_ = nullptr;
    GeneratorInput<Buffer<float, 1>> *short_factor_ = nullptr, *long_factor_ = nullptr, *given_inv_freq_ = nullptr;
    GeneratorInput<int32_t> *position_base_ = nullptr, *position_step_ = nullptr, *rotary_offset_ = nullptr, *rotary_pairs_ = nullptr;
    GeneratorInput<double> *base_ = nullptr;
    GeneratorInput<float> *attn_factor_ = nullptr, *sin_sign_ = nullptr;
    std::vector<TensorOutputs> outputs_;
    Func position_{"position"}, last_position_{"last_position"}, inv_freq_{"inv_freq"}, cos_sin_{"cos_sin"};
    Expr length_rows_;  // 1 when inv_freq has a row per batch item, else 0 (see define_inv_freq)
    std::vector<RotatedTensorFuncs> tensors_;
};

// compat's inv_freq of a call without scaling (spec §5) for rotary_pairs pairs, by the kernels'
// own expression, so bit for bit what a kernel computes: the dispatcher keeps it per base and
// rotary_dim (runtime/src/inv_freq_cache.cpp) and hands it to compat kernels as a table of
// frequencies, which they read instead of computing it again every call.
class CompatInvFreqGenerator : public Generator<CompatInvFreqGenerator> {
public:
    Input<double> base{"base"};
    Input<int32_t> rotary_pairs{"rotary_pairs"};
    Output<Buffer<float, 1>> inv_freq{"inv_freq"};

    void generate() {
        const RopeVars v;
        const Expr unread = 0.0f;  // the other scalings' inputs: their branches fold away
        const Scaling none{Expr(ROPE_SCALING_NONE), unread, 0, unread, unread, unread, unread, false, unread, unread, unread};
        inv_freq(v.pair) = scaled_inv_freq(true, v.pair, base, 2 * rotary_pairs, none, Expr(int64_t{0}));
    }
};

}  // namespace
}  // namespace ropegen

HALIDE_REGISTER_GENERATOR(ropegen::RopeGenerator, ropegen_rope)
HALIDE_REGISTER_GENERATOR(ropegen::CompatInvFreqGenerator, ropegen_compat_inv_freq)
