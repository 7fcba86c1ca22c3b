// SPDX-License-Identifier: Apache-2.0
// rope_plan_create / rope_plan_run / rope_plan_destroy: a plan runs what rope_dispatch() runs,
// refuses what it refuses, checks positions again at every run, and keeps the kernel it chose.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

// The kernel rope_dispatch would run: what a plan's report must name.
std::string queried_kernel(const CaseSpec &spec) {
    RopeCall call(spec);
    const rope_params params = call.params();
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_query(&params, &report), ROPE_OK) << report.message;
    return report.kernel;
}

CaseSpec decode_step(int64_t batch) {
    CaseSpec c;
    c.batch = batch;
    c.seq = 1;
    c.q_heads = 4;
    c.k_heads = 2;
    c.head_dim = 64;
    c.positions.mode = PositionMode::BatchOffsets;
    for (int64_t b = 0; b < batch; b++) {
        c.positions.values.push_back(3 + 5 * b);
    }
    return c;
}

// Every way a call runs: the decode fold (in parts on several threads, with and without scratch,
// a scalar offset folded into a table), a prefill, in place, packed QKV, the interleaved style,
// computed sources, scaling with and without tables, mrope, position tables, a scalar offset,
// q without k; each correct, untouched outside its outputs, by the kernel rope_query names.
TEST(Plan, RunsWhatDispatchRuns) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_INTERLEAVED, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, 64);
    std::vector<CaseSpec> cases;
    cases.push_back(decode_step(8));
    cases.push_back(decode_step(1));
    for (int32_t threads : {2, 4}) {  // the decode step in parts, one per thread
        CaseSpec parts = decode_step(8);
        parts.num_threads = threads;
        cases.push_back(parts);
    }
    CaseSpec prefill;
    prefill.seq = 7;
    prefill.positions = random_table(prefill, 0, 50, ROPE_INDEX_INT64, 5);
    cases.push_back(prefill);
    CaseSpec in_place = decode_step(6);
    in_place.memory = Memory::InPlace;
    cases.push_back(in_place);
    CaseSpec packed = decode_step(4);
    packed.memory = Memory::PackedQkv;
    cases.push_back(packed);
    CaseSpec interleaved = decode_step(8);
    interleaved.style = ROPE_STYLE_INTERLEAVED;
    interleaved.direction = ROPE_INVERSE;
    cases.push_back(interleaved);
    CaseSpec compat = decode_step(8);
    compat.source = ROPE_SOURCE_COMPAT;
    cases.push_back(compat);
    CaseSpec yarn = compat;
    yarn.scaling.type = ROPE_SCALING_YARN;
    yarn.scaling.factor = 4;
    yarn.scaling.original_max = 64;
    cases.push_back(yarn);
    for (CaseSpec parts : {compat, yarn}) {  // parts whose kernels take scratch
        parts.num_threads = 2;
        cases.push_back(parts);
    }
    CaseSpec folded_offset = decode_step(8);  // one scalar offset, folded into a one-entry table
    folded_offset.positions = PositionsSpec{};
    folded_offset.positions.scalar_offset = 11;
    folded_offset.num_threads = 2;
    cases.push_back(folded_offset);
    CaseSpec inv_freq = compat;  // validated whole at every run: its table is read by validation
    inv_freq.scaling.type = ROPE_SCALING_INV_FREQ;
    for (int i = 0; i < 32; i++) {
        inv_freq.scaling.inv_freq.push_back(std::pow(0.7f, static_cast<float>(i)));
    }
    cases.push_back(inv_freq);
    CaseSpec scalar_offset;
    scalar_offset.positions.scalar_offset = 9;
    scalar_offset.k_heads = 0;
    cases.push_back(scalar_offset);
    CaseSpec mrope = prefill;  // validated whole at every run
    mrope.source = ROPE_SOURCE_COMPAT;
    mrope.mrope_sections = {16, 8, 8};
    mrope.positions = random_table(mrope, 0, 40, ROPE_INDEX_INT32, 6);
    for (int stream = 1; stream < 3; stream++) {
        const std::vector<int64_t> first(mrope.positions.values.begin(), mrope.positions.values.begin() + 14);
        mrope.positions.values.insert(mrope.positions.values.end(), first.begin(), first.end());
    }
    cases.push_back(mrope);
    for (const CaseSpec &c : cases) {
        SCOPED_TRACE(c.describe());
        expect_correct(c, plan_runner(), queried_kernel(c).c_str());
    }
}

// A call with nothing to rotate makes a plan that runs and writes nothing; a run reports to a
// NULL report or to an older, smaller one without writing it.
TEST(Plan, EmptyCallsAndReports) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    RopeCall call(decode_step(4));
    const Runner empty = [](const rope_params *params, rope_report *report) {
        rope_params p = *params;
        p.q.sizes[0] = p.q_out.sizes[0] = p.k.sizes[0] = p.k_out.sizes[0] = 0;
        return plan_runner()(&p, report);
    };
    EXPECT_EQ(call.run(empty), ROPE_OK) << call.report().message;
    EXPECT_TRUE(call.check_all_unchanged());
    RopeCall quiet(decode_step(4));
    const Runner without_report = [](const rope_params *params, rope_report *) { return plan_runner()(params, nullptr); };
    EXPECT_EQ(quiet.run(without_report), ROPE_OK);
    EXPECT_TRUE(quiet.check_outputs());
    RopeCall older(decode_step(4));
    const Runner small_report = [](const rope_params *params, rope_report *) {
        rope_report report = rope_report_init();
        report.struct_size = 8;  // a caller's report from before the fields the library writes
        report.status = ROPE_ERR_BAD_POINTER;  // a status no step of this call gives: must stay
        report.message[0] = '#';
        const rope_status status = plan_runner()(params, &report);
        return report.status == ROPE_ERR_BAD_POINTER && report.message[0] == '#' ? status : ROPE_ERR_INTERNAL;
    };
    EXPECT_EQ(older.run(small_report), ROPE_OK);
    EXPECT_TRUE(older.check_outputs());
}

// Buffers of a decode step the test owns, to change what the plan's memory holds between runs.
struct DecodeBuffers {
    static constexpr int64_t kBatch = 8, kHeads = 4, kHeadDim = 64, kPairs = kHeadDim / 2, kCacheLen = 100;
    std::vector<float> q = std::vector<float>(kBatch * kHeads * kHeadDim), q_out = std::vector<float>(q.size(), -7.0f);
    std::vector<float> cos = std::vector<float>(kCacheLen * kPairs), sin = std::vector<float>(cos.size());
    std::vector<int32_t> positions = std::vector<int32_t>(kBatch);

    DecodeBuffers() {
        for (size_t i = 0; i < q.size(); i++) {
            q[i] = static_cast<float>(i % 97) / 50.0f - 0.9f;
        }
        for (int64_t m = 0; m < kCacheLen; m++) {
            for (int64_t i = 0; i < kPairs; i++) {
                const double angle = static_cast<double>(m) * std::pow(10000.0, -2.0 * static_cast<double>(i) / kHeadDim);
                cos[m * kPairs + i] = static_cast<float>(std::cos(angle));
                sin[m * kPairs + i] = static_cast<float>(std::sin(angle));
            }
        }
        for (int64_t b = 0; b < kBatch; b++) {
            positions[b] = static_cast<int32_t>(10 + 7 * b);
        }
    }
    rope_params params() {
        rope_params p = rope_params_init();
        for (auto [tensor, data] : {std::pair{&p.q, q.data()}, std::pair{&p.q_out, q_out.data()}}) {
            tensor->data = data;
            const int64_t sizes[4] = {kBatch, 1, kHeads, kHeadDim}, strides[4] = {kHeads * kHeadDim, kHeads * kHeadDim, kHeadDim, 1};
            std::copy(sizes, sizes + 4, tensor->sizes);
            std::copy(strides, strides + 4, tensor->strides);
        }
        p.positions.kind = ROPE_POSITIONS_TABLE;
        p.positions.data = positions.data();
        p.positions.strides[0] = 1;
        p.positions.strides[1] = 1;
        p.angles.cos_cache = cos.data();
        p.angles.sin_cache = sin.data();
        p.angles.cache_len = kCacheLen;
        return p;
    }
};

// A plan of DecodeBuffers' call (`params`, which a test may change before make_plan).
class DecodePlan : public ::testing::Test {
protected:
    void SetUp() override {
        ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 64);
    }
    void make_plan() {
        rope_plan *made = nullptr;
        ASSERT_EQ(rope_plan_create(&params, &made, &report), ROPE_OK) << report.message;
        plan.reset(made);
    }
    // Makes the call a compat one with the caller's inv_freq (INV_FREQ scaling): a table
    // validation reads besides positions.
    void use_inv_freq_table() {
        params.angles.source = ROPE_SOURCE_COMPAT;
        params.scaling.type = ROPE_SCALING_INV_FREQ;
        params.scaling.inv_freq = inv_freq.data();
    }

    DecodeBuffers buffers;
    std::vector<float> inv_freq = std::vector<float>(DecodeBuffers::kPairs, 0.5f);
    rope_params params = buffers.params();
    rope_report report = rope_report_init();
    PlanPtr plan{nullptr, rope_plan_destroy};
};

// The plan holds pointers, not contents: runs after q and the positions changed give what
// rope_dispatch gives for the call then, bit for bit.
TEST_F(DecodePlan, ReadsTheContentsAtEveryRun) {
    ASSERT_NO_FATAL_FAILURE(make_plan());
    for (int step = 0; step < 3; step++) {
        SCOPED_TRACE(step);
        for (size_t b = 0; b < buffers.positions.size(); b++) {
            buffers.positions[b] = static_cast<int32_t>((buffers.positions[b] + 13 * step + 1) % DecodeBuffers::kCacheLen);
        }
        buffers.q[static_cast<size_t>(step)] += 0.25f;
        ASSERT_EQ(rope_plan_run(plan.get(), &report), ROPE_OK) << report.message;
        const std::vector<float> planned = buffers.q_out;
        std::fill(buffers.q_out.begin(), buffers.q_out.end(), -7.0f);
        ASSERT_EQ(rope_dispatch(&params, nullptr), ROPE_OK);
        EXPECT_EQ(std::memcmp(planned.data(), buffers.q_out.data(), planned.size() * sizeof(float)), 0);
        EXPECT_NE(planned[0], -7.0f);
    }
}

// A position that left the cache since the plan was made is refused at the run, as rope_dispatch
// refuses it (same status and message), with the outputs untouched.
TEST_F(DecodePlan, ChecksPositionsAtEveryRun) {
    ASSERT_NO_FATAL_FAILURE(make_plan());
    rope_report expected = rope_report_init();
    for (int32_t bad : {static_cast<int32_t>(DecodeBuffers::kCacheLen), -1}) {
        SCOPED_TRACE(bad);
        buffers.positions[5] = bad;
        const std::vector<float> before = buffers.q_out;
        EXPECT_EQ(rope_plan_run(plan.get(), &report), ROPE_ERR_POSITION_OUT_OF_RANGE);
        EXPECT_EQ(report.status, ROPE_ERR_POSITION_OUT_OF_RANGE);
        EXPECT_EQ(buffers.q_out, before);
        ASSERT_EQ(rope_dispatch(&params, &expected), ROPE_ERR_POSITION_OUT_OF_RANGE);
        EXPECT_STREQ(report.message, expected.message);
        EXPECT_NE(std::strstr(report.message, "positions.data[5]"), nullptr) << report.message;
    }
}

// A call whose validation reads a table besides positions (here the scaling's inv_freq) is
// validated whole at every run: a value made invalid after the plan is refused.
TEST_F(DecodePlan, ValidatesCallsThatReadTablesWhole) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, 64);
    use_inv_freq_table();
    ASSERT_NO_FATAL_FAILURE(make_plan());
    ASSERT_EQ(rope_plan_run(plan.get(), &report), ROPE_OK) << report.message;
    inv_freq[3] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> before = buffers.q_out;
    EXPECT_EQ(rope_plan_run(plan.get(), &report), ROPE_ERR_BAD_VALUE);
    EXPECT_NE(std::strstr(report.message, "scaling.inv_freq[3]"), nullptr) << report.message;
    EXPECT_EQ(buffers.q_out, before);
}

// A varlen call is validated whole at every run: cu_seqlens broken after the plan is refused.
TEST_F(DecodePlan, ValidatesVarlenCallsWhole) {
    const int64_t tokens = DecodeBuffers::kBatch;
    for (rope_tensor *t : {&params.q, &params.q_out}) {  // THD: [1, total tokens, heads, head_dim]
        t->sizes[0] = 1;
        t->sizes[1] = tokens;
        t->strides[0] = tokens * t->strides[1];
    }
    std::vector<int32_t> cu_seqlens{0, 3, static_cast<int32_t>(tokens)};
    params.varlen.cu_seqlens = cu_seqlens.data();
    params.varlen.num_seqs = 2;
    params.positions.kind = ROPE_POSITIONS_OFFSET;  // an offset per sequence
    ASSERT_NO_FATAL_FAILURE(make_plan());
    ASSERT_EQ(rope_plan_run(plan.get(), &report), ROPE_OK) << report.message;
    cu_seqlens[1] = static_cast<int32_t>(tokens) + 1;
    const std::vector<float> before = buffers.q_out;
    EXPECT_EQ(rope_plan_run(plan.get(), &report), ROPE_ERR_BAD_SHAPE);
    EXPECT_NE(std::strstr(report.message, "varlen.cu_seqlens["), nullptr) << report.message;
    EXPECT_EQ(buffers.q_out, before);
}

// mrope's height and width streams are positions: checked at every run like the first stream.
TEST_F(DecodePlan, ChecksMropeStreamsAtEveryRun) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, 64);
    std::vector<int32_t> streams(3 * DecodeBuffers::kBatch, 5);
    params.angles.source = ROPE_SOURCE_COMPAT;
    params.positions.data = streams.data();
    params.mrope.sections[0] = 16;
    params.mrope.sections[1] = 8;
    params.mrope.sections[2] = 8;
    params.mrope.stream_stride = DecodeBuffers::kBatch;
    ASSERT_NO_FATAL_FAILURE(make_plan());
    ASSERT_EQ(rope_plan_run(plan.get(), &report), ROPE_OK) << report.message;
    streams[2 * DecodeBuffers::kBatch + 3] = -1;
    const std::vector<float> before = buffers.q_out;
    EXPECT_EQ(rope_plan_run(plan.get(), &report), ROPE_ERR_POSITION_OUT_OF_RANGE);
    EXPECT_NE(std::strstr(report.message, "mrope stream 2"), nullptr) << report.message;
    EXPECT_EQ(buffers.q_out, before);
}

// rope_plan_create refuses what rope_dispatch refuses, with its status and message, and leaves
// *plan NULL; NULL arguments are refused by name.
TEST(Plan, RefusesWhatDispatchRefuses) {
    DecodeBuffers buffers;
    rope_params params = buffers.params();
    params.q.sizes[3] = 63;
    params.q_out.sizes[3] = 63;
    rope_report report = rope_report_init(), expected = rope_report_init();
    rope_plan *plan = reinterpret_cast<rope_plan *>(&buffers);  // must be overwritten
    EXPECT_EQ(rope_plan_create(&params, &plan, &report), ROPE_ERR_BAD_HEAD_DIM);
    EXPECT_EQ(plan, nullptr);
    EXPECT_EQ(rope_dispatch(&params, &expected), ROPE_ERR_BAD_HEAD_DIM);
    EXPECT_STREQ(report.message, expected.message);
    EXPECT_EQ(rope_plan_create(nullptr, &plan, &report), ROPE_ERR_NULL_POINTER);
    EXPECT_EQ(plan, nullptr);

    const rope_params valid = buffers.params();
    EXPECT_EQ(rope_plan_create(&valid, nullptr, &report), ROPE_ERR_NULL_POINTER);
    EXPECT_NE(std::strstr(report.message, "plan is NULL"), nullptr) << report.message;
    EXPECT_EQ(rope_plan_run(nullptr, &report), ROPE_ERR_NULL_POINTER);
    EXPECT_NE(std::strstr(report.message, "plan is NULL"), nullptr) << report.message;
    rope_plan_destroy(nullptr);
    EXPECT_TRUE(std::all_of(buffers.q_out.begin(), buffers.q_out.end(), [](float v) { return v == -7.0f; }));
}

// The kernel is chosen when the plan is made: a cap set later changes rope_query's choice, not
// the plan's.
TEST_F(DecodePlan, KeepsItsKernelWhenTheCapChanges) {
    ASSERT_NO_FATAL_FAILURE(make_plan());
    const std::string planned = report.kernel;
    const rope_isa baseline = isa_levels().back();
    if (rope_active_isa() == baseline) {
        GTEST_SKIP() << "the active ISA level is already this architecture's baseline: no lower cap to set";
    }
    if (const KernelEntry *capped = first_matching_kernel(params, baseline); capped != nullptr && planned == capped->name) {
        GTEST_SKIP() << "the baseline level runs the same kernel (" << planned << "): a cap cannot change the choice";
    }
    ASSERT_EQ(rope_set_max_isa(baseline), ROPE_OK);
    rope_report query = rope_report_init();
    const rope_status queried = rope_query(&params, &query);
    const rope_status ran = rope_plan_run(plan.get(), &report);
    ASSERT_EQ(rope_set_max_isa(ROPE_ISA_NONE), ROPE_OK);
    ASSERT_EQ(ran, ROPE_OK) << report.message;
    EXPECT_EQ(report.kernel, planned);
    if (queried == ROPE_OK) {
        EXPECT_NE(std::string(query.kernel), planned);
    }
}

// What a fresh plan of `params` writes: the reference for a repeated rope_dispatch, which this
// thread's last call may serve from a plan of its own.
std::vector<float> fresh_plan_output(const rope_params &params, std::vector<float> &out) {
    rope_plan *made = nullptr;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_plan_create(&params, &made, &report), ROPE_OK) << report.message;
    const PlanPtr plan(made, rope_plan_destroy);
    std::fill(out.begin(), out.end(), -7.0f);
    EXPECT_EQ(rope_plan_run(plan.get(), &report), ROPE_OK) << report.message;
    return out;
}

// rope_dispatch repeats a thread's last call from a plan when the bytes of rope_params repeat:
// each repeat still reads the contents and checks the positions as they are then.
TEST_F(DecodePlan, ARepeatedDispatchReadsTheContentsAndChecksPositions) {
    for (int step = 0; step < 4; step++) {
        SCOPED_TRACE(step);
        buffers.q[static_cast<size_t>(step)] += 0.25f;
        buffers.positions[static_cast<size_t>(step)] += 3;
        const std::vector<float> expected = fresh_plan_output(params, buffers.q_out);
        std::fill(buffers.q_out.begin(), buffers.q_out.end(), -7.0f);
        ASSERT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
        EXPECT_EQ(std::memcmp(expected.data(), buffers.q_out.data(), expected.size() * sizeof(float)), 0);
    }
    buffers.positions[5] = static_cast<int32_t>(DecodeBuffers::kCacheLen);
    const std::vector<float> before = buffers.q_out;
    EXPECT_EQ(rope_dispatch(&params, &report), ROPE_ERR_POSITION_OUT_OF_RANGE);
    EXPECT_NE(std::strstr(report.message, "positions.data[5]"), nullptr) << report.message;
    EXPECT_EQ(buffers.q_out, before);
    buffers.positions[5] = 1;
    EXPECT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
}

// A repeated call follows a cap set between the repeats: the kernel is the one rope_query names.
TEST_F(DecodePlan, ARepeatedDispatchFollowsTheCap) {
    ASSERT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
    ASSERT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
    const std::string uncapped = report.kernel;
    const rope_isa baseline = isa_levels().back();
    if (rope_active_isa() == baseline) {
        GTEST_SKIP() << "the active ISA level is already this architecture's baseline: no lower cap to set";
    }
    const KernelEntry *capped = first_matching_kernel(params, baseline);
    if (capped == nullptr || uncapped == capped->name) {
        GTEST_SKIP() << "the baseline level runs no other kernel for this call than " << uncapped;
    }
    ASSERT_EQ(rope_set_max_isa(baseline), ROPE_OK);
    const rope_status ran = rope_dispatch(&params, &report);
    ASSERT_EQ(rope_set_max_isa(ROPE_ISA_NONE), ROPE_OK);
    ASSERT_EQ(ran, ROPE_OK) << report.message;
    EXPECT_STREQ(report.kernel, capped->name);
}

// The library's thread count, as the tests found it (they change it to split decode steps).
void restore_library_threads() {
    rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// An engine's runner that runs every task on the calling thread, counting loops and their tasks.
struct CountingPool {
    int loops = 0, last_tasks = 0;
    static int run(void *pool, int (*task)(void *, int), void *context, int count) {
        auto *self = static_cast<CountingPool *>(pool);
        self->loops++;
        self->last_tasks = count;
        for (int i = 0; i < count; i++) {
            if (const int result = task(context, i); result != 0) {
                return result;
            }
        }
        return 0;
    }
};

// The thread settings changed between repeats reach the next repeat: a small call on the
// library's threads runs on the calling thread, the same call with a runner goes to it, and a
// decode step of 8 splits into as many parts as the library's thread count.
TEST_F(DecodePlan, ARepeatedDispatchFollowsTheThreadSettings) {
    ASSERT_EQ(rope_set_num_threads(2), ROPE_OK);
    CountingPool pool;
    rope_status ran = ROPE_OK;
    for (int call = 0; call < 3 && ran == ROPE_OK; call++) {
        ran = rope_dispatch(&params, &report);
    }
    rope_set_parallel_runner(&CountingPool::run, &pool);
    const int loops_before = pool.loops;
    for (int call = 0; call < 3 && ran == ROPE_OK; call++) {
        ran = rope_dispatch(&params, &report);
    }
    const int tasks_at_two = pool.last_tasks;
    ASSERT_EQ(rope_set_num_threads(4), ROPE_OK);
    if (ran == ROPE_OK) {
        ran = rope_dispatch(&params, &report);
    }
    rope_set_parallel_runner(nullptr, nullptr);
    restore_library_threads();
    ASSERT_EQ(ran, ROPE_OK) << report.message;
    EXPECT_EQ(loops_before, 0);
    EXPECT_EQ(pool.loops, 4);
    EXPECT_EQ(tasks_at_two, 2);
    EXPECT_EQ(pool.last_tasks, 4);
}

// A caller of an older layout (the first: no device, scaling, mrope or varlen) repeats its call
// as well: only the fields of its struct_size are compared, and validation's zeros stand for the rest.
TEST_F(DecodePlan, ARepeatOfAnOlderLayoutRunsAsAFullCall) {
    params.struct_size = static_cast<uint32_t>((offsetof(rope_params, device) + alignof(rope_params) - 1) /
                                               alignof(rope_params) * alignof(rope_params));
    for (int step = 0; step < 3; step++) {
        SCOPED_TRACE(step);
        buffers.positions[static_cast<size_t>(step)] += 5;
        const std::vector<float> expected = fresh_plan_output(params, buffers.q_out);
        std::fill(buffers.q_out.begin(), buffers.q_out.end(), -7.0f);
        ASSERT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
        EXPECT_EQ(buffers.q_out, expected);
    }
}

// A call whose validation reads a table besides positions is validated whole at every repeat
// too: a value made invalid between repeats is refused, outputs untouched.
TEST_F(DecodePlan, ARepeatedDispatchValidatesTablesWhole) {
    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT, ROPE_DTYPE_F32, 64);
    use_inv_freq_table();
    for (int call = 0; call < 3; call++) {
        ASSERT_EQ(rope_dispatch(&params, &report), ROPE_OK) << report.message;
    }
    inv_freq[3] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> before = buffers.q_out;
    EXPECT_EQ(rope_dispatch(&params, &report), ROPE_ERR_BAD_VALUE);
    EXPECT_NE(std::strstr(report.message, "scaling.inv_freq[3]"), nullptr) << report.message;
    EXPECT_EQ(buffers.q_out, before);
}

// A rope_dispatch nested in a repeat's loop (an engine's runner that runs other work while it
// waits) leaves the plan of the repeat alone (a sanitizer build sees a use after free if not),
// and both calls write what fresh plans of them write.
TEST_F(DecodePlan, ADispatchNestedInARepeatLeavesItsPlanAlone) {
    ASSERT_EQ(rope_set_num_threads(2), ROPE_OK);  // the decode step then splits in two parts
    struct NestingPool {
        const rope_params *inner = nullptr;  // dispatched from the next loop, then null
        rope_status inner_status = ROPE_ERR_INTERNAL;
        static int run(void *pool, int (*task)(void *, int), void *context, int count) {
            auto *self = static_cast<NestingPool *>(pool);
            if (const rope_params *inner = std::exchange(self->inner, nullptr)) {
                self->inner_status = rope_dispatch(inner, nullptr);
            }
            for (int i = 0; i < count; i++) {
                if (const int result = task(context, i); result != 0) {
                    return result;
                }
            }
            return 0;
        }
    } pool;
    DecodeBuffers other;
    other.q[0] = 3.0f;
    const rope_params inner = other.params();
    const std::vector<float> expected = fresh_plan_output(params, buffers.q_out);
    const std::vector<float> expected_inner = fresh_plan_output(inner, other.q_out);
    std::fill(other.q_out.begin(), other.q_out.end(), -7.0f);
    rope_set_parallel_runner(&NestingPool::run, &pool);
    rope_status ran = rope_dispatch(&params, &report);
    if (ran == ROPE_OK) {
        ran = rope_dispatch(&params, &report);  // the first repeat: the plan is made
    }
    pool.inner = &inner;
    std::fill(buffers.q_out.begin(), buffers.q_out.end(), -7.0f);
    if (ran == ROPE_OK) {
        ran = rope_dispatch(&params, &report);  // the plan runs, and the inner call in its loop
    }
    rope_set_parallel_runner(nullptr, nullptr);
    restore_library_threads();
    ASSERT_EQ(ran, ROPE_OK) << report.message;
    ASSERT_EQ(pool.inner, nullptr) << "the repeat's loop did not reach the runner";
    EXPECT_EQ(pool.inner_status, ROPE_OK);
    EXPECT_EQ(buffers.q_out, expected);
    EXPECT_EQ(other.q_out, expected_inner);
}

}  // namespace
}  // namespace ropegen::test
