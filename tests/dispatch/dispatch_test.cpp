// SPDX-License-Identifier: Apache-2.0
// The dispatcher's choices (ISA cap, fixed vs any-head_dim kernel) and its threading: every
// thread setting and an engine's own parallel runner give the same bits as the default.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "internal/inv_freq_cache.h"
#include "internal/runtime_state.h"
#include "support/kernels.h"
#include "support/rope_case.h"

// The entry point through which a kernel runs its parallel loops (Halide's runtime, in the library;
// HalideRuntime.h is not on this program's include path).
extern "C" int halide_do_par_for(void *user_context, int (*task)(void *, int, uint8_t *), int min, int extent,
                                 uint8_t *closure);

namespace ropegen::test {
namespace {

CaseSpec f32_case(int64_t head_dim) {
    CaseSpec c;
    c.head_dim = head_dim;
    c.positions.scalar_offset = 5;
    return c;
}

bool ends_with(const std::string &text, const std::string &suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --- CPU detection -------------------------------------------------------------------------------

/// The set of words after the colon of the first /proc/cpuinfo line starting with `key`.
std::set<std::string> cpuinfo_words(const char *key) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind(key, 0) == 0) {
            std::istringstream words(line.substr(line.find(':') + 1));
            return {std::istream_iterator<std::string>(words), {}};
        }
    }
    return {};
}

bool has_all(const std::set<std::string> &flags, std::initializer_list<const char *> names) {
    return std::all_of(names.begin(), names.end(), [&](const char *name) { return flags.count(name) != 0; });
}

/// The level Linux's view of the CPU implies. x86-64: /proc/cpuinfo lists avx and avx512* only
/// when the kernel saves those registers, which is the dispatcher's xgetbv rule. aarch64: the
/// Features line is the kernel's HWCAP list by name.
rope_isa isa_from_cpuinfo(std::string *why) {
#if defined(__x86_64__)
    const std::set<std::string> flags = cpuinfo_words("flags");
    if (flags.empty()) {
        *why = "/proc/cpuinfo has no flags line";
        return ROPE_ISA_NONE;
    }
    if (!has_all(flags, {"pni", "ssse3", "sse4_1"})) {  // pni: SSE3
        return ROPE_ISA_NONE;
    }
    if (!has_all(flags, {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "popcnt", "movbe"})) {  // abm: LZCNT
        return ROPE_ISA_SSE41;
    }
    return has_all(flags, {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}) ? ROPE_ISA_AVX512 : ROPE_ISA_AVX2;
#elif defined(__aarch64__)
    const std::set<std::string> features = cpuinfo_words("Features");
    if (features.empty()) {
        *why = "/proc/cpuinfo has no Features line (under qemu-user it is the host's; set ROPEGEN_EXPECTED_ISA)";
        return ROPE_ISA_NONE;
    }
    if (!has_all(features, {"fp", "asimd"})) {
        return ROPE_ISA_NONE;
    }
    return has_all(features, {"fphp", "asimdhp"}) ? ROPE_ISA_NEON_FP16 : ROPE_ISA_NEON;
#else
#error "ropegen's tests know x86-64 and aarch64"
#endif
}

// Under qemu (-cpu <model>: the foreign-CPU runs and the aarch64 suite of tests/CMakeLists.txt)
// /proc/cpuinfo is still the host's, so those runs name the level the model implies in
// ROPEGEN_EXPECTED_ISA.
TEST(IsaDetection, MatchesTheCpu) {
    std::string why;
    rope_isa expected = ROPE_ISA_NONE;
    if (const char *named = std::getenv("ROPEGEN_EXPECTED_ISA")) {
        ASSERT_TRUE(isa_from_name(named, &expected))
            << "ROPEGEN_EXPECTED_ISA=" << named << " is not a level of this architecture or none";
    } else {
        expected = isa_from_cpuinfo(&why);
        if (!why.empty()) {
            GTEST_SKIP() << "cannot tell the CPU's level independently: " << why;
        }
    }
    EXPECT_EQ(isa_name(detected_isa()), std::string(isa_name(expected)));
    if (const char *cap = std::getenv("ROPE_MAX_ISA")) {
        GTEST_SKIP() << "ROPE_MAX_ISA=" << cap << " caps the active level below the detected one; the detection matched";
    }
    EXPECT_EQ(isa_name(rope_active_isa()), std::string(isa_name(expected)));
    if (expected == ROPE_ISA_NONE) {  // below the baseline: every call is refused, nothing runs
        RopeCall call(f32_case(128));
        EXPECT_EQ(call.run(dispatch_runner()), ROPE_ERR_UNSUPPORTED);
        EXPECT_NE(std::string(call.report().message), "");
        EXPECT_TRUE(call.check_all_unchanged());
    }
}

// --- ISA cap -------------------------------------------------------------------------------------

class IsaCapTest : public ::testing::TestWithParam<rope_isa> {
protected:
    void TearDown() override {
        rope_set_max_isa(ROPE_ISA_NONE);
    }
};

TEST_P(IsaCapTest, KernelComesFromTheCappedLevel) {
    const rope_isa cap = GetParam();
    if (cap > detected_isa()) {
        GTEST_SKIP() << "cap " << isa_name(cap) << " is above what this CPU supports (" << isa_name(detected_isa())
                     << "), so it cannot select " << isa_name(cap) << " kernels";
    }
    ASSERT_EQ(rope_set_max_isa(cap), ROPE_OK);
    EXPECT_EQ(rope_active_isa(), cap);
    for (int64_t head_dim : {128, 80}) {
        RopeCall call(f32_case(head_dim));
        const KernelEntry *expected = first_matching_kernel(call.params(), cap);
        if (expected == nullptr) {
            EXPECT_EQ(call.run(dispatch_runner()), ROPE_ERR_UNSUPPORTED);
            continue;
        }
        // When the build has kernels of the cap's level (ROPEGEN_ISAS), they are the ones used.
        ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
        EXPECT_TRUE(ends_with(call.report().kernel, std::string("__") + isa_name(expected->isa)))
            << call.report().kernel;
        EXPECT_STREQ(call.report().kernel, expected->name);
        EXPECT_LE(expected->isa, cap);
        EXPECT_TRUE(call.check_outputs());
    }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, IsaCapTest, ::testing::ValuesIn(isa_levels()),
                         [](const ::testing::TestParamInfo<rope_isa> &info) { return isa_name(info.param); });

TEST(IsaCap, NoneRestoresTheBestLevel) {
    const rope_isa baseline = isa_levels().back();
    ASSERT_EQ(rope_set_max_isa(baseline), ROPE_OK);
    EXPECT_EQ(rope_active_isa(), std::min(baseline, detected_isa()));
    ASSERT_EQ(rope_set_max_isa(ROPE_ISA_NONE), ROPE_OK);
    EXPECT_EQ(rope_active_isa(), detected_isa());
}

TEST(IsaCap, LevelsOfAnotherArchitectureAreRefused) {
    const std::vector<rope_isa> own = isa_levels();
    for (rope_isa isa : {ROPE_ISA_SSE41, ROPE_ISA_AVX2, ROPE_ISA_AVX512, ROPE_ISA_NEON, ROPE_ISA_NEON_FP16}) {
        if (std::find(own.begin(), own.end(), isa) == own.end()) {
            EXPECT_EQ(rope_set_max_isa(isa), ROPE_ERR_UNSUPPORTED) << isa;
            EXPECT_EQ(rope_active_isa(), detected_isa()) << "a refused cap must leave the level alone";
        }
    }
    // Values C++ can hold in a rope_isa without undefined behaviour (0..31); negative and larger
    // ones come through the C shim of the fuzz harness (tests/fuzz/raw_isa.c).
    for (int bogus : {4, 15, 18, 31}) {
        EXPECT_EQ(rope_set_max_isa(static_cast<rope_isa>(bogus)), ROPE_ERR_BAD_ENUM) << bogus;
    }
}

// --- kernel choice -------------------------------------------------------------------------------

TEST(KernelChoice, AnyHeadDimKernelServesHeadDim80) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 80);
    RopeCall call(f32_case(80));
    ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
    EXPECT_NE(std::string(call.report().kernel).find("_dany_"), std::string::npos) << call.report().kernel;
    EXPECT_TRUE(call.check_outputs());
}

TEST(KernelChoice, FixedKernelServesHeadDim128) {
    RopeCall call(f32_case(128));
    const KernelEntry *expected = first_matching_kernel(call.params(), detected_isa());
    if (expected == nullptr || expected->head_dim != 128) {
        GTEST_SKIP() << "this build has no head_dim 128 kernel (ROPEGEN_HEAD_DIMS)";
    }
    ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
    EXPECT_NE(std::string(call.report().kernel).find("_d128_"), std::string::npos) << call.report().kernel;
    EXPECT_TRUE(call.check_outputs());
}

// A 16-bit kernel that stores its lanes as 32-bit words (KernelEntry::pair_words: interleaved or
// half style) serves outputs at even strides; at an odd one the next kernel of the table serves
// the call.
TEST(KernelChoice, PairWordsKernelGivesWayAtOddStrides) {
    int checked = 0;
    for (rope_style style : {ROPE_STYLE_INTERLEAVED, ROPE_STYLE_HALF}) {
        for (rope_dtype dtype : {ROPE_DTYPE_BF16, ROPE_DTYPE_F16}) {
            CaseSpec c = f32_case(128);
            c.style = style;
            c.dtype = dtype;
            SCOPED_TRACE(c.describe());
            const KernelEntry *words = first_matching_kernel(RopeCall(c).params(), rope_active_isa());
            if (words == nullptr || !words->pair_words) {
                continue;
            }
            checked++;
            c.row_pad = 1;  // every head of q_out and k_out at an odd element stride
            RopeCall call(c);
            EXPECT_FALSE(pair_words_fit(*words, call.params()));
            const KernelEntry *expected = first_matching_kernel(call.params(), rope_active_isa());
            ASSERT_NE(expected, nullptr);
            EXPECT_FALSE(expected->pair_words);
            ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
            EXPECT_STREQ(call.report().kernel, expected->name);
            EXPECT_TRUE(call.check_outputs());
            EXPECT_TRUE(call.check_untouched_outside_outputs());
        }
    }
    if (checked == 0) {
        GTEST_SKIP() << "no kernel of pair words serves a 16-bit head_dim 128 call at ISA level "
                     << isa_name(rope_active_isa()) << " (schedules: interleaved_rotation or half_rotation words)";
    }
}

// Without k, k_out is not part of the call: whatever it holds, the kernel chosen is the one
// chosen with k_out empty (here a pair-words kernel, which a misaligned k_out of a call with k
// would turn away).
TEST(KernelChoice, AnAbsentKOutPlaysNoPart) {
    int checked = 0;
    for (rope_style style : {ROPE_STYLE_INTERLEAVED, ROPE_STYLE_HALF}) {
        CaseSpec c = f32_case(128);
        c.style = style;
        c.dtype = ROPE_DTYPE_BF16;
        c.k_heads = 0;
        SCOPED_TRACE(c.describe());
        RopeCall call(c);
        rope_params p = call.params();
        const KernelEntry *expected = first_matching_kernel(p, rope_active_isa());
        ASSERT_NE(expected, nullptr);
        checked += expected->pair_words ? 1 : 0;
        p.k_out = p.q_out;
        p.k_out.data = static_cast<uint8_t *>(p.q_out.data) + 1;  // never written: rope_query runs nothing
        p.k_out.strides[2] += 1;
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
        EXPECT_STREQ(report.kernel, expected->name);
    }
    if (checked == 0) {
        GTEST_SKIP() << "no kernel of pair words serves a bf16 head_dim 128 call at ISA level " << isa_name(rope_active_isa())
                     << ": the choice was checked, but not against a kernel a misaligned k_out would turn away";
    }
}

// A decode batch ([B, 1]) runs as one sequence of B tokens per thread the call may use
// (dispatch.cpp, fold_decode_batch): for every way of giving positions, layout, with and without
// k, batch sizes with and without a divisor per thread count, the results are the oracle's and
// the bits of calling the batch items one by one.
TEST(DecodeBatch, FoldedCallGivesTheBitsOfOneCallPerItem) {
    const std::pair<PositionMode, const char *> modes[] = {{PositionMode::ScalarOffset, "scalar offset"},
                                                           {PositionMode::BatchOffsets, "batch offsets"},
                                                           {PositionMode::Table, "table"}};
    // Parts: 1 (7 at 3 threads; 0 threads: a call this small runs on the calling thread), 3 and 4
    // (12 at 3 and 4 threads).
    struct Split {
        rope_source source;
        int64_t batch;
        int32_t threads;
    };
    const Split splits[] = {{ROPE_SOURCE_CACHE, 7, 3},
                            {ROPE_SOURCE_CACHE, 12, 0},
                            {ROPE_SOURCE_CACHE, 12, 4},
                            {ROPE_SOURCE_COMPAT, 12, 3},
                            {ROPE_SOURCE_COMPAT, 7, 1}};
    for (const auto &[mode, mode_name] : modes) {
        for (const Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD}) {
            for (const int64_t k_heads : {int64_t{0}, int64_t{2}}) {
                for (const Split &split : splits) {
                    CaseSpec c;
                    c.batch = split.batch, c.seq = 1, c.q_heads = 4, c.k_heads = k_heads, c.head_dim = 128;
                    c.layout = layout, c.source = split.source, c.dtype = ROPE_DTYPE_BF16;
                    c.num_threads = split.threads;
                    c.positions = random_table(c, 0, 5000, ROPE_INDEX_INT64, 11);
                    c.positions.mode = mode;
                    c.positions.scalar_offset = 4093;
                    SCOPED_TRACE(std::string(mode_name) + ", num_threads " + std::to_string(c.num_threads) + ", " +
                                 c.describe());
                    ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, c.head_dim);
                    RopeCall whole(c), items(c);
                    ASSERT_EQ(whole.run(dispatch_runner()), ROPE_OK) << whole.report().message;
                    EXPECT_TRUE(whole.check_outputs());
                    const rope_params batch = items.params();
                    for (int64_t b = 0; b < c.batch; b++) {
                        rope_params item = batch;
                        for (rope_tensor *t : {&item.q, &item.k, &item.q_out, &item.k_out}) {
                            if (t->data != nullptr) {
                                t->data = static_cast<uint8_t *>(t->data) + b * t->strides[0] * 2;  // bf16
                                t->sizes[0] = 1;
                            }
                        }
                        if (item.positions.data != nullptr) {
                            item.positions.data =
                                static_cast<const int64_t *>(item.positions.data) + b * item.positions.strides[0];
                        }
                        rope_report report = rope_report_init();
                        ASSERT_EQ(rope_dispatch(&item, &report), ROPE_OK) << "item " << b << ": " << report.message;
                    }
                    EXPECT_TRUE(same_bits(whole.q_out, items.q_out));
                    if (k_heads != 0) {
                        EXPECT_TRUE(same_bits(whole.k_out, items.k_out));
                    }
                }
            }
        }
    }
}

// A decode step whose frequencies depend on each item's own length (a per-sequence scaling: the
// item's position + 1) is not folded into parts of several tokens (dispatch.cpp,
// foldable_decode_step): each item keeps its own length, though both parts here pair a short
// item with one beyond original_max_positions.
TEST(DecodeBatch, PerSequenceScalingKeepsEachItemsLength) {
    for (const rope_scaling_type type : {ROPE_SCALING_DYNAMIC, ROPE_SCALING_LONGROPE}) {
        CaseSpec c;
        c.batch = 4, c.seq = 1, c.q_heads = 2, c.k_heads = 1, c.head_dim = 64;
        c.source = ROPE_SOURCE_COMPAT;
        c.num_threads = 2;  // folded, 2 parts of 2 tokens
        c.positions = random_table(c, 0, 1, ROPE_INDEX_INT32, 7);
        c.positions.values = {10, 3000, 40, 2500};
        c.scaling.type = type;
        c.scaling.original_max = 256;
        c.scaling.factor = 8;
        for (int i = 0; type == ROPE_SCALING_LONGROPE && i < c.head_dim / 2; i++) {
            c.scaling.short_factor.push_back(1.0f + 0.03f * static_cast<float>(i));
            c.scaling.long_factor.push_back(2.0f + 0.4f * static_cast<float>(i));
        }
        SCOPED_TRACE(c.describe());
        ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, c.head_dim);
        RopeCall call(c);
        ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
        EXPECT_TRUE(call.check_outputs());
    }
}

// Every key reaches the kernel of that key: style, source and dtype are never mixed up.
TEST(KernelChoice, EveryKeyPicksItsKernel) {
    for (rope_style style : {ROPE_STYLE_HALF, ROPE_STYLE_INTERLEAVED}) {
        for (rope_source source : {ROPE_SOURCE_CACHE, ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE}) {
            for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
                for (int64_t head_dim : {64, 128, 256, 96}) {
                    CaseSpec c = f32_case(head_dim);
                    c.style = style;
                    c.source = source;
                    c.dtype = dtype;
                    c.batch = c.seq = 1;
                    SCOPED_TRACE(c.describe());
                    RopeCall call(c);
                    const rope_params p = call.params();
                    rope_report report = rope_report_init();
                    const KernelEntry *expected = first_matching_kernel(p, rope_active_isa());
                    if (expected == nullptr) {
                        EXPECT_EQ(rope_query(&p, &report), ROPE_ERR_UNSUPPORTED);
                        continue;
                    }
                    ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
                    EXPECT_STREQ(report.kernel, expected->name);
                    // first_matching_kernel shares kernel_matches with the library: the key is
                    // checked here on its own.
                    EXPECT_EQ(expected->style, style);
                    EXPECT_EQ(expected->source, source);
                    EXPECT_EQ(expected->dtype, dtype);
                    EXPECT_TRUE(expected->head_dim == 0 || expected->head_dim == head_dim) << expected->name;
                }
            }
        }
    }
}

// A large-call kernel (schedules' large_calls) serves the calls of its key that move at least its
// min_call_bytes, and a kernel of the same key after it the others (the in-place one, where the key
// has one, for these calls in place): a call a token short of that size, and one at it.
TEST(KernelChoice, LargeCallKernelServesCallsFromItsSize) {
    int checked = 0;
    for (const KernelEntry *large : all_kernels()) {
        if (large->min_call_bytes == 0 || large->isa != rope_active_isa()) {
            continue;
        }
        checked++;
        CaseSpec c = kernel_case(*large, 96);  // an any-head_dim kernel at a head_dim only it serves
        c.batch = 1;
        c.q_heads = 32;
        c.k_heads = 8;
        c.memory = Memory::InPlace;  // the same bytes moved, half the memory
        const uint64_t token_bytes = 2 * dtype_bytes(c.dtype) * static_cast<uint64_t>(c.head_dim * (c.q_heads + c.k_heads));
        const uint64_t tokens = (large->min_call_bytes + token_bytes - 1) / token_bytes;
        for (const int64_t seq : {static_cast<int64_t>(tokens) - 1, static_cast<int64_t>(tokens)}) {
            c.seq = seq;
            SCOPED_TRACE(std::string(large->name) + ": " + c.describe());
            RopeCall call(c);
            const rope_params p = call.params();
            ASSERT_EQ(call_bytes(p), static_cast<uint64_t>(seq) * token_bytes);
            rope_report report = rope_report_init();
            ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
            if (call_bytes(p) >= large->min_call_bytes) {
                EXPECT_STREQ(report.kernel, large->name);
                ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
                EXPECT_STREQ(call.report().kernel, large->name);
                EXPECT_TRUE(call.check_outputs());
            } else {
                const KernelEntry *below = first_matching_kernel(p, rope_active_isa());
                ASSERT_NE(below, nullptr);
                EXPECT_TRUE(below > large && below->isa == large->isa && kernel_key(*below) == kernel_key(*large))
                    << below->name;
                EXPECT_STREQ(report.kernel, below->name);
            }
        }
    }
    if (checked == 0) {
        GTEST_SKIP() << "no kernel at ISA level " << isa_name(rope_active_isa())
                     << " has a large-call size class: no schedule this build used sets large_calls "
                        "(schedules/README.md; the autotuner writes it where it measures one)";
    }
}

// An in-place kernel (schedules' in_place_calls) serves the calls of its key that rotate q and k
// where they lie, and its sibling the others: the same call out of place, and with only q in place.
TEST(KernelChoice, InPlaceKernelServesCallsInPlace) {
    int checked = 0;
    for (const KernelEntry *in_place : all_kernels()) {
        if (!in_place->in_place_calls || in_place->isa != rope_active_isa()) {
            continue;
        }
        checked++;
        const KernelEntry *sibling = in_place + 1;  // CallClassKernelsPrecedeTheirSibling
        for (const Memory memory : {Memory::InPlace, Memory::PackedQkvInPlace, Memory::Separate, Memory::PackedQkv}) {
            CaseSpec c = kernel_case(*in_place, 96);
            c.memory = memory;
            const bool in_place_call = memory == Memory::InPlace || memory == Memory::PackedQkvInPlace;
            SCOPED_TRACE(std::string(in_place->name) + ": " + c.describe());
            RopeCall call(c);
            ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
            EXPECT_STREQ(call.report().kernel, in_place_call ? in_place->name : sibling->name);
            EXPECT_TRUE(call.check_outputs());
        }
        // A call without k: in place when q is.
        for (const Memory memory : {Memory::InPlace, Memory::Separate}) {
            CaseSpec c = kernel_case(*in_place, 96);
            c.k_heads = 0;
            c.memory = memory;
            SCOPED_TRACE(std::string(in_place->name) + ": " + c.describe());
            RopeCall call(c);
            ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
            EXPECT_STREQ(call.report().kernel, memory == Memory::InPlace ? in_place->name : sibling->name);
            EXPECT_TRUE(call.check_outputs());
        }
        // Only one of q and k in place: not a call in place.
        CaseSpec c = kernel_case(*in_place, 96);
        RopeCall call(c);
        const rope_params separate = call.params();
        for (const bool q_in_place : {true, false}) {
            rope_params p = separate;
            (q_in_place ? p.q_out : p.k_out) = q_in_place ? p.q : p.k;
            rope_report report = rope_report_init();
            ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
            EXPECT_STREQ(report.kernel, sibling->name) << (q_in_place ? "q" : "k") << " in place";
        }
        rope_params p = separate;
        p.q_out = p.q;
        p.k_out = p.k;
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_query(&p, &report), ROPE_OK) << report.message;
        EXPECT_STREQ(report.kernel, in_place->name);
    }
    if (checked == 0) {
        GTEST_SKIP() << "no kernel at ISA level " << isa_name(rope_active_isa())
                     << " has an in-place call class: no schedule this build used sets in_place_calls "
                        "(schedules/README.md)";
    }
}

// call_bytes, the size that picks a size class: q and k read and written, every lane of a head out
// of place (the lanes outside the rotary slice are copied) and only the rotary slice in place.
TEST(KernelChoice, CallBytesCountWhatACallMoves) {
    CaseSpec c;  // f32, [2, 5] tokens, 3 q and 2 k heads of 64 lanes
    const uint64_t heads = 2 * 5 * (3 + 2), bytes_per_lane = 2 * 4;
    EXPECT_EQ(call_bytes(RopeCall(c).params()), heads * 64 * bytes_per_lane);
    c.rotary_dim = 32;
    c.rotary_offset = 16;
    EXPECT_EQ(call_bytes(RopeCall(c).params()), heads * 64 * bytes_per_lane);
    rope_params q_in_place = RopeCall(c).params();  // k out of place: all its lanes move
    q_in_place.q_out = q_in_place.q;
    EXPECT_EQ(call_bytes(q_in_place), (2 * 5 * 3 * 32 + 2 * 5 * 2 * 64) * bytes_per_lane);
    c.memory = Memory::InPlace;
    EXPECT_EQ(call_bytes(RopeCall(c).params()), heads * 32 * bytes_per_lane);
    c.rotary_dim = 64;  // the whole head, given explicitly
    c.rotary_offset = 0;
    EXPECT_EQ(call_bytes(RopeCall(c).params()), heads * 64 * bytes_per_lane);
    c.rotary_dim = 32;
    c.k_heads = 0;
    EXPECT_EQ(call_bytes(RopeCall(c).params()), 2 * 5 * 3 * 32 * bytes_per_lane);
    c.dtype = ROPE_DTYPE_BF16;
    const RopeCall call(c);
    rope_params huge = call.params();
    EXPECT_EQ(call_bytes(huge), 2 * 5 * 3 * 32 * 2 * 2u);
    huge.q.sizes[1] = int64_t{1} << 62;
    EXPECT_EQ(call_bytes(huge), UINT64_MAX);  // saturates
    huge.q.sizes[2] = 0;
    EXPECT_EQ(call_bytes(huge), 0u);  // no elements, whatever the other sizes multiply to
}

// --- threads -------------------------------------------------------------------------------------

/// A call with enough tokens for many parallel tasks (8.6 MiB moved: above the 4 MiB below which
/// the library runs a call on the calling thread), and its default-settings result.
class ThreadingTest : public ::testing::Test {
protected:
    static CaseSpec big_case() {
        CaseSpec c;
        c.source = ROPE_SOURCE_COMPAT;
        c.head_dim = 128;
        c.batch = 3;
        c.seq = 467;
        c.q_heads = 4;
        c.k_heads = 2;
        c.positions = random_table(c, 0, 100000, ROPE_INDEX_INT32, 3);
        return c;
    }

    void SetUp() override {
        ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, 128);
        reference_ = std::make_unique<RopeCall>(big_case());
        ASSERT_EQ(reference_->run(dispatch_runner()), ROPE_OK) << reference_->report().message;
        ASSERT_TRUE(reference_->check_outputs());
    }

    void TearDown() override {
        rope_set_parallel_runner(nullptr, nullptr);
        rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }

    /// Runs the case again (with `num_threads` in the params) and compares bits with the default run.
    void expect_same_result(int32_t num_threads) const {
        CaseSpec c = big_case();
        c.num_threads = num_threads;
        RopeCall call(c);
        ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
        EXPECT_TRUE(same_bits(call.q_out, reference_->q_out));
        EXPECT_TRUE(same_bits(call.k_out, reference_->k_out));
    }

    std::unique_ptr<RopeCall> reference_;
};

TEST_F(ThreadingTest, ParamsNumThreadsGiveIdenticalResults) {
    for (int32_t threads : {1, 2, 3, 64}) {
        SCOPED_TRACE(threads);
        expect_same_result(threads);
    }
}

TEST_F(ThreadingTest, SetNumThreadsGivesIdenticalResults) {
    for (int threads : {1, 3}) {
        SCOPED_TRACE(threads);
        ASSERT_EQ(rope_set_num_threads(threads), ROPE_OK);
        expect_same_result(0);
    }
}

TEST(Threads, SetNumThreadsRejectsBelowOne) {
    EXPECT_EQ(rope_set_num_threads(0), ROPE_ERR_BAD_VALUE);
    EXPECT_EQ(rope_set_num_threads(-4), ROPE_ERR_BAD_VALUE);
}

// Halide's pool runs at most 256 threads (its runtime's MAX_THREADS): more is that many, as
// rope.h says.
TEST(Threads, SetNumThreadsAboveTheCapGivesTheCap) {
    for (const auto &[asked, got] : {std::pair{3, 3}, std::pair{256, 256}, std::pair{1000, 256}}) {
        ASSERT_EQ(rope_set_num_threads(asked), ROPE_OK);
        EXPECT_EQ(library_threads(), got) << "rope_set_num_threads(" << asked << ")";
    }
    rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

/// An engine pool that runs a loop's tasks on two threads of its own, in reverse order (the
/// contract allows any thread and any order), counting what it was given.
struct CountingPool {
    std::atomic<int> loops{0};
    std::atomic<int> tasks{0};

    static int run(void *pool, int (*task)(void *, int), void *task_context, int count) {
        auto *self = static_cast<CountingPool *>(pool);
        self->loops++;
        std::atomic<int> first_error{0};
        auto worker = [&](int parity) {
            for (int i = count - 1; i >= 0; i--) {
                if (i % 2 == parity) {
                    self->tasks++;
                    const int result = task(task_context, i);
                    int expected = 0;
                    if (result != 0) {
                        first_error.compare_exchange_strong(expected, result);
                    }
                }
            }
        };
        std::thread odd(worker, 1);
        worker(0);
        odd.join();
        return first_error.load();
    }
};

TEST_F(ThreadingTest, EngineParallelRunnerIsUsed) {
    CountingPool pool;
    rope_set_parallel_runner(&CountingPool::run, &pool);
    expect_same_result(0);
    EXPECT_GT(pool.loops.load(), 0) << "the kernels' parallel loops should run on the engine's pool";
    EXPECT_GE(pool.tasks.load(), 2 * pool.loops.load()) << "each loop handed over should have several tasks";

    // num_threads = 3 caps a loop at 3 tasks, so at most 3 of the engine's threads.
    pool.loops = 0, pool.tasks = 0;
    expect_same_result(3);
    EXPECT_GT(pool.loops.load(), 0);
    EXPECT_LE(pool.tasks.load(), 3 * pool.loops.load()) << "num_threads = 3 should hand over at most 3 tasks per loop";

    // num_threads = 1 means the calling thread only: the engine's pool is not asked.
    const int loops = pool.loops.load();
    expect_same_result(1);
    EXPECT_EQ(pool.loops.load(), loops);

    // Removing the runner returns the loops to the library's pool.
    rope_set_parallel_runner(nullptr, nullptr);
    expect_same_result(0);
    EXPECT_EQ(pool.loops.load(), loops);
}

// With an engine's runner a decode step goes to the engine's pool however small, as one loop of
// a part per thread of the library's count (dispatch.cpp: call_threads, fold_decode_batch,
// run_decode_parts), and gives the bits of a call on the calling thread. The count is the default one (the CPU count; ctest runs
// this test in a process of its own, where nothing set it), which the library knows before its
// own pool ever starts.
TEST(DecodeBatch, SmallCallRunsOnTheEnginesPoolInParts) {
    if (std::getenv("ROPE_NUM_THREADS") != nullptr || std::getenv("HL_NUM_THREADS") != nullptr) {
        GTEST_SKIP() << "ROPE_NUM_THREADS or HL_NUM_THREADS is set: the library's thread count is not the default";
    }
    if (std::thread::hardware_concurrency() < 2) {
        GTEST_SKIP() << "one CPU: the library's default thread count is 1, so a call is not split";
    }
    CaseSpec c;
    c.batch = 8, c.seq = 1, c.q_heads = 4, c.k_heads = 2, c.head_dim = 128;
    c.positions = random_table(c, 0, 5000, ROPE_INDEX_INT32, 5);
    c.positions.mode = PositionMode::BatchOffsets;
    ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, c.head_dim);
    c.num_threads = 1;
    RopeCall serial(c);
    ASSERT_EQ(serial.run(dispatch_runner()), ROPE_OK) << serial.report().message;
    c.num_threads = 0;
    RopeCall engine(c);
    CountingPool pool;
    rope_set_parallel_runner(&CountingPool::run, &pool);
    const rope_status status = engine.run(dispatch_runner());
    rope_set_parallel_runner(nullptr, nullptr);
    ASSERT_EQ(status, ROPE_OK) << engine.report().message;
    EXPECT_EQ(pool.loops.load(), 1) << "a decode step should reach the engine's pool as one loop";
    EXPECT_GE(pool.tasks.load(), 2) << "a batch of 8 at 2 or more threads should make 2 or more parts";
    EXPECT_TRUE(same_bits(engine.q_out, serial.q_out));
    EXPECT_TRUE(same_bits(engine.k_out, serial.k_out));
    EXPECT_TRUE(engine.check_outputs());
}

// A plan fixes whether its call may leave the calling thread (rope.h): a varlen plan of a small
// call, made with no runner, keeps its sequences on the calling thread once a runner is set, as a
// dense plan does. rope_dispatch of the call, deciding anew, hands them to the runner.
TEST(PlanThreads, AVarlenPlanKeepsItsSequencesWhereItWasMade) {
    // 1000 tokens of 3 heads (768 KB, a call the library's pool would not take): sequences long
    // enough for loops of several tasks.
    VarlenCompatCall call({0, 100, 100, 400, 1000}, {7, 900, 0, 250}, 3, 64, 0);
    rope_report report = rope_report_init();
    if (rope_query(&call.params, &report) != ROPE_OK) {
        GTEST_SKIP() << report.message;
    }
    rope_plan *made = nullptr;
    ASSERT_EQ(rope_plan_create(&call.params, &made, &report), ROPE_OK) << report.message;
    const PlanPtr plan(made, rope_plan_destroy);
    CountingPool pool;
    rope_set_parallel_runner(&CountingPool::run, &pool);
    const rope_status planned = rope_plan_run(plan.get(), &report);
    const int plan_loops = pool.loops.load();
    const rope_status dispatched = rope_dispatch(&call.params, nullptr);
    rope_set_parallel_runner(nullptr, nullptr);
    ASSERT_EQ(planned, ROPE_OK) << report.message;
    ASSERT_EQ(dispatched, ROPE_OK);
    EXPECT_EQ(plan_loops, 0) << "the plan was made to run on the calling thread";
    EXPECT_GT(pool.loops.load(), 0) << "rope_dispatch, with the runner set, hands the sequences' loops to it";
}

// A plan fixes how a decode step is split (rope.h), also when it is validated whole at every run
// (INV_FREQ scaling reads a table): parts for the thread count when it was made, whatever
// rope_set_num_threads says at the run.
TEST(PlanThreads, APlanValidatedAtEveryRunKeepsItsDecodeParts) {
    CaseSpec c;
    c.batch = 8, c.seq = 1, c.q_heads = 4, c.k_heads = 2, c.head_dim = 64;
    c.source = ROPE_SOURCE_COMPAT;
    c.positions = random_table(c, 0, 5000, ROPE_INDEX_INT32, 5);
    c.positions.mode = PositionMode::BatchOffsets;
    ROPEGEN_SKIP_UNLESS_BUILT(c.style, c.source, c.dtype, c.head_dim);
    RopeCall call(c);
    std::vector<float> inv_freq(static_cast<size_t>(c.head_dim / 2), 0.01f);
    rope_params params = call.params();
    params.num_threads = 0;
    params.scaling.type = ROPE_SCALING_INV_FREQ;
    params.scaling.inv_freq = inv_freq.data();
    CountingPool pool;
    rope_set_parallel_runner(&CountingPool::run, &pool);
    ASSERT_EQ(rope_set_num_threads(2), ROPE_OK);
    rope_plan *made = nullptr;
    rope_report report = rope_report_init();
    const rope_status created = rope_plan_create(&params, &made, &report);
    const PlanPtr plan(made, rope_plan_destroy);
    rope_set_num_threads(4);
    const rope_status ran = created == ROPE_OK ? rope_plan_run(plan.get(), &report) : created;
    rope_set_parallel_runner(nullptr, nullptr);
    rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    ASSERT_EQ(ran, ROPE_OK) << report.message;
    EXPECT_EQ(pool.loops.load(), 1) << "a decode step reaches the runner as one loop";
    EXPECT_EQ(pool.tasks.load(), 2) << "a part per thread of the count when the plan was made";
}

// A parallel loop of a kernel may start at any index: every way of running it (the calling
// thread, the library's pool, a loop spread over fewer tasks than iterations, an engine's runner)
// runs each of the iterations [min, min + extent) once, and no other.
TEST(Threads, ParallelLoopsRunTheirIterationsFromMin) {
    constexpr int kMin = 5, kExtent = 7;
    struct Seen {
        std::atomic<int> count[kMin + kExtent + 1];
    };
    const ParallelTask record = [](void *, int index, uint8_t *closure) {
        reinterpret_cast<Seen *>(closure)->count[std::min(index, kMin + kExtent)]++;
        return 0;
    };
    CountingPool pool;
    for (const bool engine : {false, true}) {
        for (const int threads : {1, 0, 2, 3}) {
            SCOPED_TRACE(std::string(engine ? "engine's runner" : "library's pool") + ", num_threads " +
                         std::to_string(threads));
            rope_set_parallel_runner(engine ? &CountingPool::run : nullptr, &pool);
            Seen seen{};
            CallContext context(nullptr, threads);
            const int result = halide_do_par_for(&context, record, kMin, kExtent, reinterpret_cast<uint8_t *>(&seen));
            rope_set_parallel_runner(nullptr, nullptr);
            ASSERT_EQ(result, 0);
            for (int i = 0; i <= kMin + kExtent; i++) {
                EXPECT_EQ(seen.count[i].load(), i >= kMin && i < kMin + kExtent ? 1 : 0) << "iteration " << i;
            }
        }
    }
}

// A task failure reported by the engine's runner becomes the call's status, not a crash.
TEST_F(ThreadingTest, EngineRunnerErrorIsReported) {
    struct Failing {
        static int run(void *, int (*)(void *, int), void *, int) {
            return -1;
        }
    };
    rope_set_parallel_runner(&Failing::run, nullptr);
    RopeCall call(big_case());
    EXPECT_EQ(call.run(dispatch_runner()), ROPE_ERR_INTERNAL);
    EXPECT_NE(std::string(call.report().message), "");
}

// A compat call without scaling fills the frequency cache on its key's first call (the kernel
// tests check that the cached and computed frequencies give the same bits); the other sources
// and scaled calls leave it alone. Before the next test, which fills every slot.
TEST(FrequencyCache, CompatCallsWithoutScalingFillIt) {
    CaseSpec c = f32_case(128);
    c.base = 4321.25;  // a key no other test uses
    for (const rope_source source : {ROPE_SOURCE_PRECISE, ROPE_SOURCE_COMPAT}) {
        for (const rope_scaling_type scaling : {ROPE_SCALING_LINEAR, ROPE_SCALING_NONE}) {
            c.source = source;
            c.scaling.type = scaling;
            c.scaling.factor = 2;
            RopeCall call(c);
            ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
            EXPECT_TRUE(call.check_outputs());
            const bool filled = find_cached_compat_inv_freq(c.base, 128) != nullptr;
            const bool fills = source == ROPE_SOURCE_COMPAT && scaling == ROPE_SCALING_NONE;
            if (fills && !filled && compat_inv_freq_keys_held() == kCompatInvFreqSlots) {
                GTEST_SKIP() << "every slot of the frequency cache was taken by earlier tests of this process";
            }
            EXPECT_EQ(filled, fills) << c.describe() << ": " << call.report().kernel;
        }
    }
}

// compat's frequencies kept across calls (runtime/src/inv_freq_cache.cpp): each table holds the
// frequencies of spec §5 (powf correctly rounded) for its key, is handed out again unmoved, and
// once every slot is taken a new key is declined (its calls compute their own), as is a
// rotary_dim beyond the tables. (The kernel tests check the bits of calls on either path.)
TEST(FrequencyCache, HoldsCompatFrequenciesUntilItsSlotsAreTaken) {
    const int free_slots = kCompatInvFreqSlots - compat_inv_freq_keys_held();
    if (free_slots == 0) {
        GTEST_SKIP() << "every slot of the frequency cache was taken by earlier tests of this process";
    }
    int filled = 0;
    for (int32_t i = 0; i < kCompatInvFreqSlots; i++) {
        const double base = 1000.0 + 7919.0 * i;
        const int32_t rotary_dim = 16 + 32 * i;
        const float *table = cached_compat_inv_freq(base, rotary_dim);
        if (table == nullptr) {
            continue;  // slots taken by earlier tests of this process
        }
        filled++;
        const std::vector<float> want = reference::compat_inv_freq(base, rotary_dim);
        for (int32_t pair = 0; pair < rotary_dim / 2; pair++) {
            ASSERT_EQ(std::memcmp(&table[pair], &want[pair], sizeof(float)), 0)
                << "base " << base << ", rotary_dim " << rotary_dim << ", pair " << pair << ": " << table[pair]
                << " against " << want[pair];
        }
        EXPECT_EQ(cached_compat_inv_freq(base, rotary_dim), table);
        EXPECT_EQ(find_cached_compat_inv_freq(base, rotary_dim), table);
    }
    EXPECT_EQ(filled, free_slots);
    EXPECT_EQ(compat_inv_freq_keys_held(), kCompatInvFreqSlots);
    EXPECT_EQ(cached_compat_inv_freq(1.5, 64), nullptr) << "a key beyond the slots";
    EXPECT_EQ(find_cached_compat_inv_freq(1.5, 64), nullptr);
    EXPECT_EQ(cached_compat_inv_freq(1000.0, kCompatInvFreqMaxRotaryDim + 2), nullptr);
}

// rope_dispatch() is thread-safe and re-entrant: calls of different keys from several threads at
// once give the bits the same calls give one at a time.
TEST(Concurrency, CallsFromManyThreadsMatchSerialCalls) {
    std::vector<CaseSpec> cases;
    for (rope_source source : {ROPE_SOURCE_CACHE, ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE}) {
        for (rope_style style : {ROPE_STYLE_HALF, ROPE_STYLE_INTERLEAVED}) {
            CaseSpec c;
            c.source = source;
            c.style = style;
            c.head_dim = style == ROPE_STYLE_HALF ? 128 : 96;
            c.batch = 2;
            c.seq = 33;
            c.positions = random_table(c, 0, 4000, ROPE_INDEX_INT32, cases.size() + 1);
            c.seed = cases.size() + 1;
            if (missing_kernel_reason(style, source, c.dtype, c.head_dim).empty()) {
                cases.push_back(c);
            }
        }
    }
    if (cases.empty()) {
        GTEST_SKIP() << missing_kernel_reason(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 128);
    }
    std::vector<std::unique_ptr<RopeCall>> serial;
    for (const CaseSpec &c : cases) {
        serial.push_back(std::make_unique<RopeCall>(c));
        ASSERT_EQ(serial.back()->run(dispatch_runner()), ROPE_OK) << serial.back()->report().message;
    }
    constexpr int kRepeats = 4;
    std::vector<int> mismatches(cases.size(), 0);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < cases.size(); i++) {
        threads.emplace_back([&, i] {
            for (int r = 0; r < kRepeats; r++) {
                RopeCall call(cases[i]);
                if (call.run(dispatch_runner()) != ROPE_OK || !same_bits(call.q_out, serial[i]->q_out) ||
                    !same_bits(call.k_out, serial[i]->k_out)) {
                    mismatches[i]++;
                }
            }
        });
    }
    for (std::thread &t : threads) {
        t.join();
    }
    for (size_t i = 0; i < cases.size(); i++) {
        EXPECT_EQ(mismatches[i], 0) << cases[i].describe();
    }
}

}  // namespace
}  // namespace ropegen::test
