// SPDX-License-Identifier: Apache-2.0
// Every generated kernel, run directly through ropegen::run_kernel (not only the one the
// dispatcher would pick; one test on buffer descriptions of its own, read-only), against the fp64
// oracle with the tolerances of spec §7. One parameterized instance per kernel:
// Kernels/KernelTest.<Test>/<kernel name>.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "internal/inv_freq_cache.h"
#include "internal/kernel_args.h"
#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

namespace ref = reference;

/// Runs exactly `kernel` on buffer descriptions built once, as a plan's runs take them
/// (internal/kernel_args.h), here copied into pages then made read-only: a kernel that wrote any
/// of them would fault. Not through ropegen::run_kernel, which describes the call itself.
Runner read_only_descriptions_runner(const KernelEntry &kernel) {
    return [&kernel](const rope_params *params, rope_report *report) {
        ensure_initialized();  // the Halide runtime's hooks, as every entry point of the library does
        ValidCall call;
        std::string message;
        if (const rope_status status = validate(params, &call, &message); status != ROPE_OK) {
            ADD_FAILURE() << message;
            return status;
        }
        const SharedArgs shared = shared_args(call, unused_input());
        const KernelArgs args = items_args(kernel, call, shared, 0, call.params.q.sizes[0]);
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        const size_t bytes = (sizeof(SharedArgs) + sizeof(KernelArgs) + page - 1) / page * page;
        void *pages = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pages == MAP_FAILED) {
            ADD_FAILURE() << "mmap of " << bytes << " bytes failed";
            return ROPE_ERR_INTERNAL;
        }
        const SharedArgs *sealed_shared = new (pages) SharedArgs(shared);
        KernelArgs *sealed = new (static_cast<char *>(pages) + sizeof(SharedArgs)) KernelArgs(args);
        sealed->shared = sealed_shared;
        EXPECT_EQ(mprotect(pages, bytes, PROT_READ), 0);
        rope_status status = ROPE_ERR_INTERNAL;
        CallContext context(report, 1);
        if (context.reserve_scratch(kernel_scratch_bytes(call, call.params.q.sizes[0], call.params.q.sizes[1]))) {
            const int result = launch(kernel, call, *sealed, &context);
            status = result == 0 && context.failure() == CallFailure::None ? ROPE_OK : ROPE_ERR_INTERNAL;
        }
        munmap(pages, bytes);
        return status;
    };
}

class KernelTest : public PerKernelTest {
protected:
    /// A small call of this kernel's key: fixed kernels get their head_dim, the any-head_dim
    /// kernel 80 (40 pairs: not a multiple of any vector width).
    CaseSpec base_case() const {
        CaseSpec c = kernel_case(kernel(), 80);
        c.positions.scalar_offset = 3;
        return c;
    }

    /// A kernel that stores its lanes as 32-bit words refuses outputs at odd strides or 2-byte
    /// alignment: there the call must be refused untouched, and the dispatcher's choice (another
    /// kernel) must serve it.
    void expect_ok(const CaseSpec &spec) const {
        if (!pair_words_fit(kernel(), RopeCall(spec).params())) {
            expect_refused(spec);
            expect_correct(spec, dispatch_runner());
            return;
        }
        expect_correct(spec, kernel_runner(kernel()), kernel().name);
    }

    /// The kernel must refuse `spec` (another key, or a layout it cannot store) without writing anything.
    void expect_refused(const CaseSpec &spec) const {
        SCOPED_TRACE(spec.describe());
        RopeCall call(spec);
        EXPECT_EQ(call.run(kernel_runner(kernel())), ROPE_ERR_UNSUPPORTED);
        EXPECT_NE(std::string(call.report().message).find(kernel().name), std::string::npos)
            << "message: " << call.report().message;
        EXPECT_TRUE(call.check_all_unchanged());
    }
};

TEST_P(KernelTest, Random) {
    expect_ok(base_case());
}

// A plan's runs, and the parts of one run on several threads, share the buffer descriptions the
// plan built (launch): a CPU kernel must only read them, whatever its loop nest and inputs.
TEST_P(KernelTest, ReadsOnlyItsBufferDescriptions) {
    std::vector<CaseSpec> cases(6, base_case());
    cases[1].memory = Memory::InPlace;
    cases[2].layout = Layout::BHSD;
    cases[2].direction = ROPE_INVERSE;
    cases[3].layout = Layout::SBHD;
    cases[3].positions = random_table(cases[3], 0, 500, ROPE_INDEX_INT64, 5);
    cases[4].batch = 4;  // a decode step, one offset per sequence
    cases[4].seq = 1;
    cases[4].positions.mode = PositionMode::BatchOffsets;
    cases[4].positions.values = {9, 2, 30, 4};
    cases[5].k_heads = 0;  // q alone
    if (kernel().head_dim == 0) {
        CaseSpec partial = base_case();  // pass-through lanes on both sides
        partial.rotary_dim = 40;
        partial.rotary_offset = 8;
        cases.push_back(partial);
    }
    if (kernel().source == ROPE_SOURCE_CACHE && kernel().dtype != ROPE_DTYPE_F32) {
        cases.push_back(base_case());
        cases.back().cache_in_dtype = true;
    }
    if (kernel().source != ROPE_SOURCE_CACHE) {
        // A table of frequencies (what a plan of an unscaled compat call reads: the cached
        // ones), and a scaling the kernel computes.
        CaseSpec given = base_case();
        given.scaling.type = ROPE_SCALING_INV_FREQ;
        for (int i = 0; i < given.effective_rotary_dim() / 2; i++) {
            given.scaling.inv_freq.push_back(std::pow(0.7f, static_cast<float>(i)));
        }
        CaseSpec linear = base_case();
        linear.scaling.type = ROPE_SCALING_LINEAR;
        linear.scaling.factor = 2;
        cases.insert(cases.end(), {given, linear});
    }
    for (const CaseSpec &c : cases) {
        // Dense outputs at even strides: every kernel serves them, none is passed over.
        ASSERT_TRUE(pair_words_fit(kernel(), RopeCall(c).params())) << c.describe();
        expect_correct(c, read_only_descriptions_runner(kernel()));
    }
}

TEST_P(KernelTest, Inverse) {
    CaseSpec c = base_case();
    c.direction = ROPE_INVERSE;
    c.positions = random_table(c, 0, 500, ROPE_INDEX_INT32, 7);
    expect_ok(c);
}

// Huge, subnormal, signed-zero, NaN and Inf inputs: finite results within tolerance, NaN and Inf
// wherever the oracle's arithmetic produces them (position 0 included, where sin is 0 and
// Inf * 0 is NaN), and no flush of subnormals to zero.
TEST_P(KernelTest, Adversarial) {
    for (uint64_t seed : {11u, 12u, 13u}) {
        CaseSpec c = base_case();
        c.fill = Fill::Adversarial;
        c.seed = seed;
        c.seq = 6;
        c.positions.scalar_offset = 0;
        expect_ok(c);
    }
}

// Token and head counts that fill no vector or task evenly.
TEST_P(KernelTest, OddShapes) {
    struct Shape {
        int64_t batch, seq, q_heads, k_heads;
    };
    for (const Shape &shape : {Shape{1, 1, 1, 1}, Shape{1, 19, 2, 1}, Shape{3, 7, 1, 3}, Shape{2, 17, 5, 0}}) {
        CaseSpec c = base_case();
        c.batch = shape.batch;
        c.seq = shape.seq;
        c.q_heads = shape.q_heads;
        c.k_heads = shape.k_heads;
        expect_ok(c);
    }
}

// The any-head_dim kernel serves every even head_dim; a fixed one only its own.
TEST_P(KernelTest, HeadDims) {
    if (kernel().head_dim == 0) {
        for (int64_t head_dim : {2, 64, 80, 96, 130}) {
            CaseSpec c = base_case();
            c.head_dim = head_dim;
            expect_ok(c);
        }
        return;
    }
    for (int64_t head_dim : {int64_t{80}, int64_t{kernel().head_dim} + 2, int64_t{kernel().head_dim} * 2}) {
        CaseSpec c = base_case();
        c.head_dim = head_dim;
        expect_refused(c);
    }
}

// Keys other than the kernel's (style, source, dtype) are refused, not computed wrongly.
TEST_P(KernelTest, RejectsOtherKeys) {
    CaseSpec c = base_case();
    c.style = kernel().style == ROPE_STYLE_HALF ? ROPE_STYLE_INTERLEAVED : ROPE_STYLE_HALF;
    expect_refused(c);
    c = base_case();
    c.source = static_cast<rope_source>((kernel().source + 1) % 3);
    expect_refused(c);
    c = base_case();
    c.dtype = static_cast<rope_dtype>((kernel().dtype + 1) % 3);
    expect_refused(c);
}

// rotary_dim < head_dim and rotary_offset > 0: the other lanes are bit-exact copies. A fixed
// head_dim kernel rotates whole heads only: it refuses a partial slice, which the dispatcher
// sends to the any-head_dim kernel.
TEST_P(KernelTest, PartialRotary) {
    const int d = static_cast<int>(base_case().head_dim);
    struct Slice {
        int rotary_dim, rotary_offset;
    };
    const int quarter = d / 4 - (d / 4) % 2;
    for (const Slice &slice : {Slice{d / 2, 0}, Slice{quarter, quarter}, Slice{2, d - 2}, Slice{d - 2, 1},
                               Slice{d - 2, 2}}) {
        for (Memory memory : {Memory::Separate, Memory::InPlace}) {
            CaseSpec c = base_case();
            c.rotary_dim = slice.rotary_dim;
            c.rotary_offset = slice.rotary_offset;
            c.memory = memory;
            c.fill = Fill::Adversarial;  // NaN payloads in pass-through lanes must survive the copy
            if (kernel().head_dim == 0) {
                expect_ok(c);
            } else {
                expect_refused(c);
            }
        }
    }
}

// Every memory order through strides, padded heads, and outputs in another order than inputs.
TEST_P(KernelTest, Layouts) {
    struct Variant {
        Layout in;
        Layout out;
        int64_t row_pad;
    };
    for (const Variant &v : {Variant{Layout::BHSD, Layout::BHSD, 0}, Variant{Layout::SBHD, Layout::SBHD, 0},
                             Variant{Layout::BSHD, Layout::BSHD, 3}, Variant{Layout::BHSD, Layout::BSHD, 0},
                             Variant{Layout::SBHD, Layout::BHSD, 2}}) {
        CaseSpec c = base_case();
        c.layout = v.in;
        c.out_layout = v.out;
        c.row_pad = v.row_pad;
        c.seq = 9;
        expect_ok(c);
    }
}

// Cache rows wider than R/2 (one table for several rotary_dims), and for 16-bit kernels tables
// stored in the tensor dtype (spec §5).
TEST_P(KernelTest, CacheTables) {
    CaseSpec c = base_case();
    c.cache_row_pad = 5;
    if (kernel().head_dim == 0) {
        c.rotary_dim = static_cast<int>(c.head_dim) / 2;
    }
    expect_ok(c);
    if (kernel().source != ROPE_SOURCE_CACHE && pair_words_fit(kernel(), RopeCall(c).params())) {
        // A computed source ignores the cache fields: tables of NaN, another dtype and a short
        // length change nothing.
        static const float nan_table[4] = {NAN, NAN, NAN, NAN};
        const Runner run = kernel_runner(kernel());
        expect_correct(c, [run](const rope_params *params, rope_report *report) {
            rope_params p = *params;
            p.angles.cos_cache = p.angles.sin_cache = nan_table;
            p.angles.cache_dtype = ROPE_DTYPE_BF16;
            p.angles.cache_len = 1;
            p.angles.cache_row_stride = 2;
            return run(&p, report);
        }, kernel().name);
    }
    if (kernel().dtype != ROPE_DTYPE_F32) {
        c.cache_in_dtype = true;
        for (rope_direction direction : {ROPE_FORWARD, ROPE_INVERSE}) {
            c.direction = direction;
            expect_ok(c);
        }
    }
}

// q and k as views into one fused QKV buffer, out of place and in place, and as lane slices of
// each head's slot (GPT-NeoX) in place; v stays untouched.
TEST_P(KernelTest, PackedQkv) {
    for (Memory memory : {Memory::PackedQkv, Memory::PackedQkvInPlace, Memory::PerHeadQkvInPlace}) {
        CaseSpec c = base_case();
        c.memory = memory;
        c.q_heads = 4;
        c.k_heads = 2;
        expect_ok(c);
    }
}

TEST_P(KernelTest, InPlace) {
    for (Layout layout : {Layout::BSHD, Layout::BHSD}) {
        CaseSpec c = base_case();
        c.memory = Memory::InPlace;
        c.layout = layout;
        expect_ok(c);
    }
}

// Different head counts for q and k (GQA, MQA) and q alone.
TEST_P(KernelTest, GroupedQueryAttention) {
    for (int64_t k_heads : {4, 1, 0}) {
        CaseSpec c = base_case();
        c.q_heads = 8;
        c.k_heads = k_heads;
        c.batch = 1;
        expect_ok(c);
    }
}

TEST_P(KernelTest, Positions) {
    CaseSpec c = base_case();
    c.batch = 3;
    c.seq = 4;

    CaseSpec table32 = c;
    table32.positions = random_table(c, 0, 2000, ROPE_INDEX_INT32, 21);
    table32.positions.pad = 2;
    expect_ok(table32);

    CaseSpec table64 = c;
    table64.positions = random_table(c, 0, 2000, ROPE_INDEX_INT64, 22);
    table64.positions.transposed = true;  // stored [seq][batch]
    table64.positions.pad = 1;
    expect_ok(table64);

    CaseSpec shared = c;  // one row of positions for every batch item: batch stride 0
    shared.positions.mode = PositionMode::Table;
    shared.positions.index_type = ROPE_INDEX_INT64;
    shared.positions.shared_rows = true;
    shared.positions.values = {9, 3, 200, 0};
    expect_ok(shared);

    CaseSpec scalar = c;
    scalar.positions.scalar_offset = 11;
    expect_ok(scalar);

    for (rope_index_type index_type : {ROPE_INDEX_INT32, ROPE_INDEX_INT64}) {
        CaseSpec offsets = c;
        offsets.positions.mode = PositionMode::BatchOffsets;
        offsets.positions.index_type = index_type;
        offsets.positions.values = {0, 7, 1000};
        offsets.positions.pad = index_type == ROPE_INDEX_INT64 ? 1 : 0;
        expect_ok(offsets);
    }
}

// Long contexts: precise up to 2^24 - 1, compat at 100k..131k (large f32 angles need a full range
// reduction), the cache up to its last row.
TEST_P(KernelTest, LargePositions) {
    CaseSpec c = base_case();
    c.batch = 2;
    c.seq = 4;
    switch (kernel().source) {
        case ROPE_SOURCE_PRECISE:
            c.positions.mode = PositionMode::Table;
            c.positions.index_type = ROPE_INDEX_INT64;
            c.positions.values = {16777215, 16777214, 8400000, 12345678, 4194305, 1, 16000000, 9999991};
            break;
        case ROPE_SOURCE_COMPAT:
            c.positions = random_table(c, 100000, 131072, ROPE_INDEX_INT32, 31);
            c.positions.values[0] = 131072;
            c.positions.values[1] = 100000;
            break;
        case ROPE_SOURCE_CACHE:
            c.positions = random_table(c, 3000, 4096, ROPE_INDEX_INT32, 32);
            c.positions.values[0] = 4095;
            c.cache_len = 4096;
            break;
    }
    expect_ok(c);
}

// A non-default base and attn_factor (the cache is built with them).
TEST_P(KernelTest, BaseAndAttnFactor) {
    for (double base : {500000.0, 10.0}) {
        CaseSpec c = base_case();
        c.base = base;
        c.attn_factor = 0.75f;
        c.positions = random_table(c, 0, 3000, ROPE_INDEX_INT32, 41);
        expect_ok(c);
    }
}

// The parity mode (spec §4): cos and sin rounded to the tensors' dtype before the rotation.
TEST_P(KernelTest, CosSinRoundedToDtype) {
    CaseSpec c = base_case();
    c.round_cos_sin = true;
    c.cache_in_dtype = c.source == ROPE_SOURCE_CACHE && c.dtype != ROPE_DTYPE_F32;  // how a cache gives rounded values
    c.positions = random_table(c, 0, 4000, ROPE_INDEX_INT32, 43);
    expect_ok(c);
}

std::string kernel_name(const ::testing::TestParamInfo<const KernelEntry *> &info) {
    return std::string(info.param->name);
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelTest, ::testing::ValuesIn(all_kernels()), kernel_name);

// The built kernels `keep` selects.
std::vector<const KernelEntry *> kernels_where(bool (*keep)(const KernelEntry &)) {
    std::vector<const KernelEntry *> kernels = all_kernels();
    kernels.erase(std::remove_if(kernels.begin(), kernels.end(), [&](const KernelEntry *k) { return !keep(*k); }),
                  kernels.end());
    return kernels;
}

// --- NaN in the caller's cos/sin tables (cache source) ------------------------------------------
std::vector<const KernelEntry *> cache_source_kernels() {
    return kernels_where([](const KernelEntry &k) { return k.source == ROPE_SOURCE_CACHE; });
}

class CacheNanTest : public KernelTest {};

// A NaN entry of a cos or sin table, of any payload, gives NaN in the pairs that read it (the
// bf16 kernels once turned an all-ones payload into +-0: their rounding carried it past the
// exponent). f32 tables, and for the 16-bit kernels tables in their dtype; in BSHD (the head
// loop inside the token loop) and BHSD (outside it).
TEST_P(CacheNanTest, GivesNanInItsPairs) {
    for (const bool in_dtype : {false, true}) {
        if (in_dtype && kernel().dtype == ROPE_DTYPE_F32) {
            continue;
        }
        for (const Layout layout : {Layout::BSHD, Layout::BHSD}) {
            CaseSpec c = base_case();
            c.nan_in_cache = true;
            c.cache_in_dtype = in_dtype;
            c.layout = layout;
            c.positions = random_table(c, 0, 40, ROPE_INDEX_INT32, 61);
            expect_ok(c);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CacheNanTest, ::testing::ValuesIn(cache_source_kernels()), kernel_name);

// --- frequency scaling (spec §6): the computed-source kernels -----------------------------------
std::vector<const KernelEntry *> computed_source_kernels() {
    return kernels_where([](const KernelEntry &k) { return k.source != ROPE_SOURCE_CACHE; });
}

class ScalingTest : public KernelTest {
protected:
    static constexpr int64_t kOriginalMax = 256;

    /// Two sequences, one within orig (positions below 200) and one beyond it (2000-3000), so
    /// that per-sequence scalings take both branches in one call.
    CaseSpec scaled_case(rope_scaling_type type) const {
        CaseSpec c = base_case();
        c.positions = random_table(c, 0, 200, ROPE_INDEX_INT32, 51);
        for (int64_t s = 0; s < c.seq; s++) {
            c.positions.values[c.seq + s] = 2000 + 211 * s;
        }
        ref::Scaling &sc = c.scaling;
        sc.type = type;
        sc.original_max = kOriginalMax;
        sc.factor = 8;
        const int pairs = c.effective_rotary_dim() / 2;
        std::mt19937 rng(52);
        std::uniform_real_distribution<float> short_factor(1, 2), long_factor(1, 16), frequency(0, 1);
        for (int i = 0; i < pairs; i++) {
            if (type == ROPE_SCALING_LONGROPE) {
                sc.short_factor.push_back(short_factor(rng));
                sc.long_factor.push_back(long_factor(rng));
            } else if (type == ROPE_SCALING_INV_FREQ) {
                sc.inv_freq.push_back(frequency(rng));
            }
        }
        return c;
    }
};

// Both sequences end at 2^31 - 1, with orig at 2^30: both are longer than orig. Beyond 2^24,
// where spec §7 bounds the precise source's error, so for compat kernels only (the length they
// test is computed by the same code in both).
void ends_at_int32_max(CaseSpec &c) {
    c.scaling.original_max = int64_t{1} << 30;
    c.scaling.factor = 2;
    for (int64_t t = 0; t < static_cast<int64_t>(c.positions.values.size()); t++) {
        c.positions.values[t] = (int64_t{1} << 31) - 1 - (t % c.seq);
    }
}

// Every scaling of spec §6 in one test per kernel: one set-up of the kernel for all of them.
TEST_P(ScalingTest, EveryScaling) {
    struct Variant {
        const char *name;
        rope_scaling_type type;
        void (*edit)(CaseSpec &);
        bool compat_only = false;
    };
    const Variant variants[] = {
        {"linear", ROPE_SCALING_LINEAR, [](CaseSpec &) {}},
        {"dynamic, per sequence", ROPE_SCALING_DYNAMIC, [](CaseSpec &c) { c.scaling.factor = 2; }},
        {"yarn", ROPE_SCALING_YARN, [](CaseSpec &) {}},
        // DeepSeek's form: mscale and mscale_all_dim, other betas, no truncation.
        {"yarn, mscales", ROPE_SCALING_YARN,
         [](CaseSpec &c) {
             c.scaling.mscale = 0.707;
             c.scaling.mscale_all_dim = 1.0;
             c.scaling.beta_fast = 16;
             c.scaling.beta_slow = 2;
             c.scaling.truncate = false;
         }},
        // A given attn_factor replaces the derived one; the inverse direction; offsets per batch.
        {"yarn, attn_factor, inverse, offsets", ROPE_SCALING_YARN,
         [](CaseSpec &c) {
             c.attn_factor = 1.25f;
             c.direction = ROPE_INVERSE;
             c.positions = PositionsSpec{};
             c.positions.mode = PositionMode::BatchOffsets;
             c.positions.values = {7, 3000};
         }},
        // The ramp's bounds clamped to [0, R-1] on both sides (spec §6): every pair's correction
        // dimension below 0 (orig 4: every pair interpolated but pair 0) or above R-1 (base 100,
        // orig 2^21: every pair extrapolated). transformers clamps low only below and high only
        // above, which gives the opposite in both.
        {"yarn, ramp bounds below 0", ROPE_SCALING_YARN, [](CaseSpec &c) { c.scaling.original_max = 4; }},
        {"yarn, ramp bounds above R-1", ROPE_SCALING_YARN,
         [](CaseSpec &c) {
             c.base = 100;
             c.scaling.original_max = int64_t{1} << 21;
         }},
        {"longrope, per sequence", ROPE_SCALING_LONGROPE, [](CaseSpec &c) { c.scaling.max_positions = 16 * kOriginalMax; }},
        // A sequence ending at the last int32 position is 2^31 tokens long: longer than orig
        // (a length computed in int32 wraps to -2^31, and the sequence took the short branch).
        {"dynamic, a sequence ending at 2^31 - 1", ROPE_SCALING_DYNAMIC, ends_at_int32_max, true},
        {"longrope, a sequence ending at 2^31 - 1", ROPE_SCALING_LONGROPE, ends_at_int32_max, true},
        {"llama3", ROPE_SCALING_LLAMA3,
         [](CaseSpec &c) {
             c.scaling.low_freq_factor = 1;
             c.scaling.high_freq_factor = 4;
         }},
        {"the caller's inv_freq", ROPE_SCALING_INV_FREQ, [](CaseSpec &) {}},
        // Angles up to 2^32, the range the kernels reduce exactly (validation stops positions
        // beyond it), at positions just below 2^31: frequencies of a few bits, so that the exact
        // angles are f64 products (the precise source's accuracy bound stops at 2^24 otherwise).
        {"the caller's inv_freq, angles up to 2^32", ROPE_SCALING_INV_FREQ,
         [](CaseSpec &c) {
             for (size_t i = 0; i < c.scaling.inv_freq.size(); i++) {
                 c.scaling.inv_freq[i] = 2.0f - 0.25f * static_cast<float>(i % 8);
             }
             for (size_t t = 0; t < c.positions.values.size(); t++) {
                 c.positions.values[t] = (int64_t{1} << 31) - 1 - 104729 * static_cast<int64_t>(t);
             }
         }},
    };
    for (const Variant &variant : variants) {
        if (variant.compat_only && GetParam()->source != ROPE_SOURCE_COMPAT) {
            continue;
        }
        SCOPED_TRACE(variant.name);
        CaseSpec c = scaled_case(variant.type);
        variant.edit(c);
        expect_ok(c);
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ScalingTest, ::testing::ValuesIn(computed_source_kernels()), kernel_name);

// --- mrope (spec §6): the half-style computed-source kernels --------------------------------------
std::vector<const KernelEntry *> mrope_kernels() {
    return kernels_where([](const KernelEntry &k) { return k.source != ROPE_SOURCE_CACHE && k.style == ROPE_STYLE_HALF; });
}

class MropeTest : public KernelTest {};

// Three position streams with unequal sections, as Qwen2-VL's [16, 24, 24] of 64 pairs, each
// stream with its own positions; a scaling and the inverse direction on top.
TEST_P(MropeTest, ThreeStreams) {
    for (const rope_direction direction : {ROPE_FORWARD, ROPE_INVERSE}) {
        CaseSpec c = base_case();
        c.direction = direction;
        const int pairs = c.effective_rotary_dim() / 2;
        c.mrope_sections = {pairs / 4, 3 * pairs / 8, pairs - pairs / 4 - 3 * pairs / 8};
        c.positions = random_table(c, 0, 3000, ROPE_INDEX_INT64, 61);
        for (uint64_t stream : {1u, 2u}) {
            const PositionsSpec more = random_table(c, 0, 300, ROPE_INDEX_INT64, 61 + stream);
            c.positions.values.insert(c.positions.values.end(), more.values.begin(), more.values.end());
        }
        c.scaling.type = ROPE_SCALING_LINEAR;
        c.scaling.factor = 2;
        expect_ok(c);
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MropeTest, ::testing::ValuesIn(mrope_kernels()), kernel_name);

// --- compat's frequencies from the dispatcher's cache (runtime/src/inv_freq_cache.cpp) ----------
std::vector<const KernelEntry *> compat_source_kernels() {
    return kernels_where([](const KernelEntry &k) { return k.source == ROPE_SOURCE_COMPAT; });
}

class CachedFrequencyTest : public KernelTest {
protected:
    /// A call at positions up to 2^20, where a one-ulp change of any pair's frequency moves its angles.
    CaseSpec far_case(double base) const {
        CaseSpec c = base_case();
        c.base = base;
        c.positions = random_table(c, 0, int64_t{1} << 20, ROPE_INDEX_INT32, 71);
        return c;
    }

    /// The call's outputs when the kernel computes the frequencies along its path for scaled calls:
    /// dynamic scaling whose sequences all stay within original_max, which keeps base (spec §6).
    CaseSpec computing_in_the_kernel(CaseSpec c) const {
        c.scaling.type = ROPE_SCALING_DYNAMIC;
        c.scaling.factor = 2;
        c.scaling.original_max = int64_t{1} << 30;
        return c;
    }

    void expect_same_outputs(const CaseSpec &a, const CaseSpec &b) const {
        RopeCall first(a), second(b);
        ASSERT_EQ(first.run(kernel_runner(kernel())), ROPE_OK) << first.report().message;
        ASSERT_EQ(second.run(kernel_runner(kernel())), ROPE_OK) << second.report().message;
        EXPECT_TRUE(same_bits(first.q_out, second.q_out));
        if (a.k_heads > 0) {
            EXPECT_TRUE(same_bits(first.k_out, second.k_out));
        }
    }
};

// A compat call without scaling reads its frequencies from the cache, which fills on a key's
// first call, or, with the cache full, computes them along the kernel's path for unscaled calls.
// Both give the bits of the kernel's path for scaled calls. ctest runs each kernel's tests in a
// process of their own, where the cache has room; in a process that filled it before (the whole
// program at once), the cached path goes unchecked, and the test says so.
TEST_P(CachedFrequencyTest, GiveTheKernelsOwnBits) {
    const int32_t rotary_dim = static_cast<int32_t>(base_case().effective_rotary_dim());
    const bool cache_had_room = compat_inv_freq_keys_held() < kCompatInvFreqSlots;
    for (const double base : {10000.375, 500000.25, 3.125}) {  // keys no other test uses
        SCOPED_TRACE("base " + std::to_string(base));
        expect_same_outputs(far_case(base), computing_in_the_kernel(far_case(base)));
        if (cache_had_room) {
            EXPECT_NE(find_cached_compat_inv_freq(base, rotary_dim), nullptr) << "the call did not fill the cache";
        }
    }
    double unused_base = 2.0;
    for (int slot = 0; slot <= kCompatInvFreqSlots && cached_compat_inv_freq(unused_base, rotary_dim) != nullptr; slot++) {
        unused_base += 0.5;
    }
    ASSERT_EQ(cached_compat_inv_freq(unused_base, rotary_dim), nullptr) << "the cache holds more keys than its slots";
    // Cache full: calls of new keys take the kernel's unscaled path, checked against the oracle
    // too, with the any-head_dim kernel's partial rotary slices and an odd token count.
    SCOPED_TRACE("cache full");
    const double base = 20000.5;
    expect_same_outputs(far_case(base), computing_in_the_kernel(far_case(base)));
    EXPECT_EQ(find_cached_compat_inv_freq(base, rotary_dim), nullptr);
    const int d = static_cast<int>(base_case().head_dim);
    for (const int rotary : {kernel().head_dim == 0 ? 4 : d, d / 2 - (d / 2) % 2, d - 2}) {  // dynamic needs R >= 4
        CaseSpec c = far_case(base + rotary);
        c.seq = 7;
        c.positions = random_table(c, 0, int64_t{1} << 20, ROPE_INDEX_INT32, 72);
        if (kernel().head_dim == 0) {
            c.rotary_dim = rotary;
            c.rotary_offset = d - rotary;
        }
        SCOPED_TRACE(c.describe());
        expect_ok(c);
        expect_same_outputs(c, computing_in_the_kernel(c));
        EXPECT_EQ(find_cached_compat_inv_freq(c.effective_base(), static_cast<int32_t>(c.effective_rotary_dim())), nullptr);
    }
    if (!cache_had_room) {
        GTEST_SKIP() << "the frequency cache was full before this test (earlier tests of this process): only the "
                        "kernel's own path was checked; run this kernel's tests alone (ctest does)";
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CachedFrequencyTest, ::testing::ValuesIn(compat_source_kernels()), kernel_name);

// The table itself: unique names that spell their key, and an any-head_dim kernel for every
// (isa, style, source, dtype) so that every even head_dim has a kernel.
TEST(KernelTable, NamesSpellTheirKeys) {
    const std::vector<const KernelEntry *> kernels = all_kernels();
    ASSERT_FALSE(kernels.empty());
    std::set<std::string> names;
    for (const KernelEntry *k : kernels) {
        const std::string head = k->head_dim == 0 ? "any" : std::to_string(k->head_dim);
        const std::string expected = std::string("ropegen_") + reference::style_name(k->style) + "_" +
                                     reference::source_name(k->source) + "_d" + head + "_" +
                                     reference::dtype_name(k->dtype) + call_class_suffix(*k) + "__" + isa_name(k->isa);
        EXPECT_EQ(k->name, expected);
        EXPECT_FALSE(k->min_call_bytes != 0 && k->in_place_calls) << k->name << " has two call classes";
        EXPECT_TRUE(names.insert(k->name).second) << "duplicate kernel " << k->name;
    }
}

TEST(KernelTable, EveryKeyHasAnAnyHeadDimKernel) {
    std::set<std::string> any_keys;
    for (const KernelEntry *k : all_kernels()) {
        if (k->head_dim == 0) {
            any_keys.insert(std::to_string(k->isa) + "/" + std::to_string(k->style) + "/" + std::to_string(k->source) +
                            "/" + std::to_string(k->dtype));
        }
    }
    for (const KernelEntry *k : all_kernels()) {
        const std::string key = std::to_string(k->isa) + "/" + std::to_string(k->style) + "/" +
                                std::to_string(k->source) + "/" + std::to_string(k->dtype);
        EXPECT_EQ(any_keys.count(key), 1u) << k->name << " has no any-head_dim sibling";
    }
}

// The dispatcher looks, level by level from the best, at the entries of the call's key
// (kernel_index) and takes the first that fits: levels must come best first, a key's fixed
// head_dim kernels before its any-head_dim one, and a key's entries together, or its run would
// span other keys' entries. KernelChoice.EveryKeyPicksItsKernel checks the choices against a scan.
TEST(KernelTable, InTheOrderTheDispatcherSearches) {
    auto level_and_key = [](const KernelEntry &k) { return std::tuple(kernel_level(k), k.style, k.source, k.dtype); };
    for (const std::vector<const KernelEntry *> &kernels : {all_kernels(), all_cuda_kernels()}) {
        std::set<std::tuple<int, rope_style, rope_source, rope_dtype>> passed;
        for (size_t i = 1; i < kernels.size(); i++) {
            const KernelEntry &before = *kernels[i - 1], &kernel = *kernels[i];
            EXPECT_GE(kernel_level(before), kernel_level(kernel)) << before.name << " before " << kernel.name;
            if (level_and_key(before) != level_and_key(kernel)) {
                passed.insert(level_and_key(before));
                EXPECT_EQ(passed.count(level_and_key(kernel)), 0u) << kernel.name << " lies apart from its key";
            } else if (kernel.head_dim != 0) {
                EXPECT_NE(before.head_dim, 0) << "fixed head_dim kernel " << kernel.name
                                              << " after the any-head_dim one of its key";
            }
        }
    }
}

// Every kernel lies in its level's and key's run, and the runs hold nothing else (an entry
// beyond the table, such as the CUDA table's empty end marker, would add to their length).
TEST(KernelTable, TheIndexHoldsEveryKernelUnderItsLevelAndKey) {
    for (const auto &[kernels, index] : {std::pair{all_kernels(), &kernel_index()},
                                         std::pair{all_cuda_kernels(), &cuda_kernel_index()}}) {
        for (const KernelEntry *k : kernels) {
            const int *level = std::find(index->level, index->level + index->levels, kernel_level(*k));
            ASSERT_NE(level, index->level + index->levels) << k->name << ": its level is not indexed";
            const KernelRun &run = index->runs[level - index->level][k->style][k->source][k->dtype];
            EXPECT_TRUE(run.begin <= k && k < run.end) << k->name << " lies outside its key's run";
        }
        size_t indexed = 0;
        for (int level = 0; level < index->levels; level++) {
            for (const auto &by_source : index->runs[level]) {
                for (const auto &by_dtype : by_source) {
                    for (const KernelRun &run : by_dtype) {
                        indexed += static_cast<size_t>(run.end - run.begin);
                    }
                }
            }
        }
        EXPECT_EQ(indexed, kernels.size());
    }
}

// A kernel of a call class comes before its sibling of every call (same key and ISA), which the
// dispatcher takes for the calls the class does not serve: large-call, then in-place, then the
// sibling, with nothing else between.
TEST(KernelTable, CallClassKernelsPrecedeTheirSibling) {
    const std::vector<const KernelEntry *> kernels = all_kernels();
    auto class_rank = [](const KernelEntry &k) { return k.min_call_bytes != 0 ? 0 : k.in_place_calls ? 1 : 2; };
    int checked = 0;
    for (size_t i = 0; i < kernels.size(); i++) {
        if (class_rank(*kernels[i]) == 2) {
            continue;
        }
        checked++;
        ASSERT_LT(i + 1, kernels.size()) << kernels[i]->name << " is last";
        const KernelEntry &kernel = *kernels[i], &next = *kernels[i + 1];
        EXPECT_TRUE(next.isa == kernel.isa && next.style == kernel.style && next.source == kernel.source &&
                    next.dtype == kernel.dtype && next.head_dim == kernel.head_dim)
            << kernel.name << " before " << next.name;
        EXPECT_GT(class_rank(next), class_rank(kernel)) << kernel.name << " before " << next.name;
    }
    // Without such kernels there is nothing to order (the KernelChoice tests of each class say so
    // loudly); a skip here would skip the KernelTable group, which skips whole or not at all.
    RecordProperty("call_class_kernels", checked);
}

// The generator starts every kernel function on a 64-byte boundary (rope_generator.cpp), so a
// kernel's loops sit the same way across cache lines in every link, whatever is linked before.
TEST(KernelTable, EveryKernelStartsOnA64ByteBoundary) {
    std::vector<const KernelEntry *> kernels = all_kernels();
    for (const KernelEntry *k : all_cuda_kernels()) {
        kernels.push_back(k);  // their host side
    }
    ASSERT_FALSE(kernels.empty());
    for (const KernelEntry *k : kernels) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(k->function) % 64, 0u) << k->name;
    }
}

}  // namespace
}  // namespace ropegen::test
