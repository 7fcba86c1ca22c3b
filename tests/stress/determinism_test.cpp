// SPDX-License-Identifier: Apache-2.0
// Determinism: a call gives the same bits every time it runs, whatever runs its parallel loops
// (the calling thread, 2, 3 or 8 threads of the library's pool, an engine's pool), whatever the
// schedule its kernel was generated with, and whatever the ISA level of the kernel, except for
// the payload of NaN results across ISA levels (see IsaLevels below).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine_pool.h"
#include "schedule_variants.h"
#include "stress_support.h"

namespace ropegen::test {
namespace {

// Leaves the process-wide settings as the next test expects them.
class DeterminismTest : public ::testing::Test {
protected:
    void TearDown() override {
        rope_set_parallel_runner(nullptr, nullptr);
        rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }
};

TEST_F(DeterminismTest, RepeatedCallsGiveIdenticalBits) {
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        for (const CaseSpec &spec : varied_cases(*kernel, 11)) {
            SCOPED_TRACE(std::string(kernel->name) + ": " + spec.describe());
            std::unique_ptr<Outputs> first;
            for (int run = 0; run < 3; run++) {
                RopeCall call(spec);  // fresh buffers: in-place calls rotate their own copy
                ASSERT_EQ(call.run(kernel_runner(*kernel)), ROPE_OK) << call.report().message;
                if (first == nullptr) {
                    first = std::make_unique<Outputs>(Outputs::of(call));
                } else {
                    EXPECT_TRUE(agree(call, *first)) << "run " << run;
                }
            }
        }
    }
}

// A call of every key moving 4.5 MiB, above the size below which the library runs a call on the
// calling thread, so that every thread setting really spreads it.
CaseSpec parallel_case(const KernelEntry &kernel) {
    CaseSpec c = kernel_case(kernel, 80);
    c.batch = 3;
    c.q_heads = 8;
    c.k_heads = 4;
    const int64_t element_bytes = kernel.dtype == ROPE_DTYPE_F32 ? 4 : 2;
    c.seq = ((int64_t{9} << 19) / (2 * c.batch * (c.q_heads + c.k_heads) * c.head_dim * element_bytes)) + 1;
    c.positions = random_table(c, 0, kernel.source == ROPE_SOURCE_CACHE ? 200 : 1 << 20, ROPE_INDEX_INT32, 3);
    return c;
}

TEST_F(DeterminismTest, EveryThreadSettingGivesTheSerialBits) {
    ReverseOrderPool engine(3);
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        RopeCall call(parallel_case(*kernel));
        SCOPED_TRACE(std::string(kernel->name) + ": " + call.spec().describe());
        auto run_with = [&](int32_t num_threads) {
            reset_outputs(call);
            rope_params params = call.params();
            params.num_threads = num_threads;
            rope_report report = rope_report_init();
            EXPECT_EQ(run_kernel(*kernel, &params, &report), ROPE_OK) << report.message;
        };
        run_with(1);
        const Outputs serial = Outputs::of(call);
        ASSERT_TRUE(call.check_outputs());
        for (int32_t num_threads : varied_num_threads()) {
            run_with(num_threads);
            EXPECT_TRUE(agree(call, serial)) << "params.num_threads " << num_threads;
        }
        for (int pool_threads : {1, 2, 3}) {
            ASSERT_EQ(rope_set_num_threads(pool_threads), ROPE_OK);
            run_with(0);
            EXPECT_TRUE(agree(call, serial)) << "rope_set_num_threads " << pool_threads;
        }
        const int engine_loops = engine.loops.load();
        rope_set_parallel_runner(&ReverseOrderPool::run, &engine);
        for (int32_t num_threads : {0, 3}) {
            run_with(num_threads);
            EXPECT_TRUE(agree(call, serial)) << "engine runner, params.num_threads " << num_threads;
        }
        rope_set_parallel_runner(nullptr, nullptr);
        EXPECT_GT(engine.loops.load(), engine_loops) << "the engine's pool should have run the loops";
    }
}

// --- schedules -----------------------------------------------------------------------------------

class ScheduleVariantTest : public ::testing::TestWithParam<ScheduleVariant> {};

// How results of two instruction sequences of one arithmetic must agree: bit for bit, except where
// the result is NaN when the inputs hold NaN. When both operands of a multiply or add are NaN, the
// CPU returns one operand's payload and sign, which one depending on the instruction form and the
// operand order LLVM picks for a commutative op (x86: SSE's two-operand addps keeps its
// destination's NaN, AVX's vaddps may take the other; aarch64: the first operand's, and a schedule
// may swap them), so only NaN-ness is compared there.
Agreement agreement_for(const CaseSpec &spec) {
    const bool nan_inputs = spec.fill == Fill::Adversarial || spec.fill == Fill::RandomBits;
    return nan_inputs ? Agreement::BitsOrBothNan : Agreement::Bits;
}

// The same key generated with other vector widths, unrolling, cos/sin placement, tasks and loop
// orders gives the shipped kernel's bits (NaN payloads aside, see agreement_for): schedules move
// arithmetic, never change it (strict_float).
TEST_P(ScheduleVariantTest, GivesTheShippedKernelsBits) {
    const ScheduleVariant &variant = GetParam();
    if (const std::string reason = unsupported_reason(*variant.base); !reason.empty()) {
        GTEST_SKIP() << reason;
    }
    SCOPED_TRACE(std::string(variant.kernel.name) + " (" + variant.knobs + ") vs " + variant.base->name);
    for (const CaseSpec &spec : varied_cases(*variant.base, 23)) {
        for (int32_t num_threads : {1, 3}) {
            CaseSpec c = spec;
            c.num_threads = num_threads;
            SCOPED_TRACE(c.describe());
            RopeCall shipped(c), other(c);
            ASSERT_EQ(shipped.run(kernel_runner(*variant.base)), ROPE_OK) << shipped.report().message;
            ASSERT_EQ(other.run(kernel_runner(variant.kernel)), ROPE_OK) << other.report().message;
            EXPECT_TRUE(agree(other, Outputs::of(shipped), agreement_for(c)));
            EXPECT_TRUE(other.check_untouched_outside_outputs());
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Determinism, ScheduleVariantTest, ::testing::ValuesIn(schedule_variants()),
                         [](const ::testing::TestParamInfo<ScheduleVariant> &info) {
                             return std::string(info.param.kernel.name);
                         });

// --- ISA levels ----------------------------------------------------------------------------------

// Kernels of one key at different ISA levels give identical bits (NaN payloads aside, see
// agreement_for). Inputs without NaN give identical bits everywhere.
TEST(IsaLevels, KernelsOfOneKeyAgree) {
    int compared = 0;
    for (const KernelEntry *best : one_kernel_per_key()) {
        for (const KernelEntry *other : all_kernels()) {
            if (other == best || kernel_key(*other) != kernel_key(*best) || !unsupported_reason(*other).empty()) {
                continue;
            }
            for (const CaseSpec &spec : varied_cases(*best, 37)) {
                SCOPED_TRACE(std::string(other->name) + " vs " + best->name + ": " + spec.describe());
                RopeCall at_best(spec), at_other(spec);
                ASSERT_EQ(at_best.run(kernel_runner(*best)), ROPE_OK) << at_best.report().message;
                ASSERT_EQ(at_other.run(kernel_runner(*other)), ROPE_OK) << at_other.report().message;
                EXPECT_TRUE(agree(at_other, Outputs::of(at_best), agreement_for(spec)));
                compared++;
            }
        }
    }
    if (compared == 0) {
        GTEST_SKIP() << "this build or CPU has one ISA level only (ROPEGEN_ISAS) and no large-call kernel";
    }
}

}  // namespace
}  // namespace ropegen::test
