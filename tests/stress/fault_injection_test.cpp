// SPDX-License-Identifier: Apache-2.0
// Fault injection: memory that cannot be allocated, worker threads that cannot be started and
// engine pools that fail become ROPE_ERR_INTERNAL with a message, never a crash or a hang, and
// (except after an engine's runner had started running tasks) leave every buffer untouched.
//
// The generated kernels are built without asserts: they check neither halide_malloc's result nor
// a parallel loop's, and run on. ropegen therefore reserves a kernel's scratch before running it
// and skips every parallel loop of a call after its first failure (runtime/src/halide_glue.cpp);
// these tests fail the real allocations and thread starts underneath.
#include <HalideRuntime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_pool.h"
#include "internal/runtime_state.h"
#include "schedule_variants.h"
#include "stress_support.h"

// --- thread starts that fail on demand -------------------------------------------------------------
// Replaces pthread_create for the whole executable (Halide's pool included). The sanitizers
// intercept pthread_create themselves; their interceptor is called when present, libc's otherwise.
extern "C" int __interceptor_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
    __attribute__((weak));

namespace {
std::atomic<bool> g_fail_thread_starts{false};
std::atomic<int> g_failed_thread_starts{0};
}  // namespace

extern "C" int pthread_create(pthread_t *thread, const pthread_attr_t *attributes, void *(*start)(void *),
                              void *argument) noexcept {
    using Create = int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    static const Create next = __interceptor_pthread_create != nullptr
                                   ? &__interceptor_pthread_create
                                   : reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
    if (g_fail_thread_starts.load()) {
        g_failed_thread_starts++;
        return EAGAIN;
    }
    return next(thread, attributes, start, argument);
}

// --- operator new that fails on demand ---------------------------------------------------------------
// Replaces the global operator new of the whole executable (the library's message building
// included), to exhaust memory for C++ code as malloc's failure does for the Halide runtime. Every
// unaligned form is replaced, delete included, so that no block crosses allocators (ASan checks).
// Not under TSan, whose runtime defines them in the same archive member as symbols it needs.
#if defined(__SANITIZE_THREAD__)
#define ROPEGEN_REPLACES_OPERATOR_NEW 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ROPEGEN_REPLACES_OPERATOR_NEW 0
#endif
#endif
#ifndef ROPEGEN_REPLACES_OPERATOR_NEW
#define ROPEGEN_REPLACES_OPERATOR_NEW 1
#endif

namespace {
std::atomic<bool> g_fail_operator_new{false};
}  // namespace

#if ROPEGEN_REPLACES_OPERATOR_NEW
namespace {
void *allocate_or_null(std::size_t bytes) noexcept {
    return g_fail_operator_new.load(std::memory_order_relaxed) ? nullptr : std::malloc(bytes != 0 ? bytes : 1);
}

void *allocate_or_throw(std::size_t bytes) {
    if (void *block = allocate_or_null(bytes)) {
        return block;
    }
    throw std::bad_alloc();
}
}  // namespace

void *operator new(std::size_t bytes) {
    return allocate_or_throw(bytes);
}
void *operator new[](std::size_t bytes) {
    return allocate_or_throw(bytes);
}
void *operator new(std::size_t bytes, const std::nothrow_t &) noexcept {
    return allocate_or_null(bytes);
}
void *operator new[](std::size_t bytes, const std::nothrow_t &) noexcept {
    return allocate_or_null(bytes);
}
// The blocks come from malloc above: GCC, seeing a replaced delete inlined, would warn of a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void *block) noexcept {
    std::free(block);
}
void operator delete[](void *block) noexcept {
    std::free(block);
}
void operator delete(void *block, std::size_t) noexcept {
    std::free(block);
}
void operator delete[](void *block, std::size_t) noexcept {
    std::free(block);
}
void operator delete(void *block, const std::nothrow_t &) noexcept {
    std::free(block);
}
void operator delete[](void *block, const std::nothrow_t &) noexcept {
    std::free(block);
}
#pragma GCC diagnostic pop
#endif

namespace ropegen::test {
namespace {

// --- allocations that fail on demand -----------------------------------------------------------
// Installed before the library's first call (static initialisation): ropegen keeps the Halide
// allocator it finds when it initialises and takes every kernel's memory from it.
class InjectedAllocator {
public:
    /// Counts allocations from now on; fails the one of index `fail_at` (-1: none).
    static void arm(int fail_at) {
        calls_ = 0;
        fail_at_ = fail_at;
    }
    static void disarm() {
        fail_at_ = -1;
        report_error_ = false;
    }
    /// Makes every allocation from now on report a Halide runtime error first (and then succeed):
    /// what the CUDA runtime does when a launch fails.
    static void arm_runtime_error() {
        report_error_ = true;
    }
    static int calls() {
        return calls_.load();
    }

private:
    static void *allocate(void *user_context, size_t bytes) {
        if (report_error_.load()) {
            halide_error(user_context, "injected runtime error");
        }
        if (calls_.fetch_add(1) == fail_at_.load()) {
            return nullptr;
        }
        return next_(user_context, bytes);
    }

    static inline std::atomic<int> calls_{0};
    static inline std::atomic<int> fail_at_{-1};
    static inline std::atomic<bool> report_error_{false};
    static inline const halide_malloc_t next_ = halide_set_custom_malloc(&InjectedAllocator::allocate);
};

bool is_computed(const KernelEntry &kernel) {
    return kernel.source != ROPE_SOURCE_CACHE;
}

bool contains(const char *text, const std::string &part) {
    return std::string(text).find(part) != std::string::npos;
}

// Every built kernel this CPU runs, and calls of every kind for it.
std::vector<const KernelEntry *> runnable_kernels() {
    std::vector<const KernelEntry *> kernels;
    for (const KernelEntry *kernel : all_kernels()) {
        if (unsupported_reason(*kernel).empty()) {
            kernels.push_back(kernel);
        }
    }
    return kernels;
}

// Restores the process-wide settings and the allocator after every test.
class FaultTest : public ::testing::Test {
protected:
    void TearDown() override {
        InjectedAllocator::disarm();
        g_fail_thread_starts = false;
        rope_set_parallel_runner(nullptr, nullptr);
    }
};

// --- allocation ------------------------------------------------------------------------------------

// Whether the dispatcher splits the call into decode parts, one kernel each: a decode step with a
// divisor of the batch in [2, num_threads].
bool runs_as_decode_parts(const CaseSpec &c) {
    bool parts_found = false;
    for (int32_t parts = 2; c.seq == 1 && parts <= c.num_threads; parts++) {
        parts_found = parts_found || c.batch % parts == 0;
    }
    return parts_found;
}

// Less than what a computed-source call of `c` reserves: its two cos/sin tables, an f32 a pair
// and token each (one slot per table; split into parts, the parts' slots take more). Not for
// varlen calls, which reserve for their longest sequence only.
size_t reserved_at_least(const CaseSpec &c) {
    const size_t table = static_cast<size_t>(c.batch * c.seq * (c.effective_rotary_dim() / 2)) * sizeof(float);
    return 2 * scratch_slot_bytes(table + sizeof(float));
}

// A test that counts or fails the scratch allocation needs a call whose reservation is one: a
// smaller one is on the call's stack (CallContext::kInlineScratchBytes).
void assert_reserves_beyond_the_stack(const KernelEntry &kernel, const CaseSpec &c) {
    if (is_computed(kernel)) {
        ASSERT_GT(reserved_at_least(c), CallContext::kInlineScratchBytes)
            << "a reservation this small would be on the call's stack, with no allocation to count or fail";
    }
}

// What makes an allocation failure safe: whatever a kernel allocates is reserved, in one block,
// before it runs. A kernel that allocated beyond the reservation (a schedule placing cos/sin
// tables that the dispatcher does not foresee) would show up here as more than one allocation.
void expect_only_reserved_allocations(const KernelEntry &kernel) {
    for (const CaseSpec &spec : varied_cases(kernel, 5)) {
        for (int32_t num_threads : {1, 3}) {
            CaseSpec c = spec;
            c.num_threads = num_threads;
            SCOPED_TRACE(std::string(kernel.name) + ": " + c.describe());
            assert_reserves_beyond_the_stack(kernel, c);
            RopeCall call(c);
            InjectedAllocator::arm(-1);
            ASSERT_EQ(call.run(kernel_runner(kernel)), ROPE_OK) << call.report().message;
            EXPECT_EQ(InjectedAllocator::calls(), is_computed(kernel) ? 1 : 0)
                << "computed sources reserve inv_freq and the cos/sin tables; the cache source allocates nothing";
        }
    }
}

TEST_F(FaultTest, KernelScratchIsReservedBeforeTheKernelRuns) {
    for (const KernelEntry *kernel : runnable_kernels()) {
        expect_only_reserved_allocations(*kernel);
    }
}

// A one-token call of a computed source up to head_dim 128 (a decode step at batch 1) reserves its
// scratch in its own context, on the caller's stack: no allocation at all, so none can fail. So
// does a small decode step split into parts, which borrow their slices of it.
TEST_F(FaultTest, ASmallCallReservesItsScratchOnTheStack) {
    int checked = 0, split = 0;
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        if (!is_computed(*kernel) || kernel->head_dim > 128 || !unsupported_reason(*kernel).empty()) {
            continue;
        }
        CaseSpec one_token = kernel_case(*kernel, 128);
        one_token.batch = 1;
        one_token.seq = 1;
        one_token.q_heads = 4;
        one_token.positions.scalar_offset = 70000;
        std::vector<CaseSpec> cases;
        for (int32_t num_threads : {1, 3}) {
            cases.push_back(one_token);
            cases.back().num_threads = num_threads;
        }
        if (kernel->head_dim == 0) {  // two one-token parts of 16 pairs: 2 x 576 bytes
            CaseSpec parts = kernel_case(*kernel, 32);
            parts.batch = 2;
            parts.seq = 1;
            parts.positions.mode = PositionMode::BatchOffsets;
            parts.positions.values = {5, 90000};
            parts.num_threads = 2;
            cases.push_back(parts);
        }
        for (const CaseSpec &c : cases) {
            SCOPED_TRACE(std::string(kernel->name) + ": " + c.describe());
            split += runs_as_decode_parts(c) ? 1 : 0;
            RopeCall call(c);
            InjectedAllocator::arm(0);
            ASSERT_EQ(call.run(kernel_runner(*kernel)), ROPE_OK) << call.report().message;
            EXPECT_EQ(InjectedAllocator::calls(), 0);
            EXPECT_TRUE(call.check_outputs());
            checked++;
        }
    }
    if (checked == 0) {
        GTEST_SKIP() << "this build has no computed-source kernel up to head_dim 128 that runs here";
    }
    EXPECT_GT(split, 0) << "every computed source has an any-head_dim kernel, whose small decode step runs in parts";
}

// A per-sequence scaling (the frequencies of each batch item follow its own length) makes the
// kernels compute a row of inv_freq and a largest position per batch item: the reservation holds
// them all, so the kernel still allocates nothing of its own.
TEST_F(FaultTest, PerSequenceScalingReservesARowPerBatchItem) {
    int checked = 0;
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        if (!is_computed(*kernel) || !unsupported_reason(*kernel).empty()) {
            continue;
        }
        CaseSpec c = varied_cases(*kernel, 5).front();
        c.batch = 6;
        c.seq = 3;
        c.positions = random_table(c, 0, 4000, ROPE_INDEX_INT32, 9);
        c.scaling.type = ROPE_SCALING_DYNAMIC;
        c.scaling.original_max = 256;
        c.scaling.factor = 4;
        for (int32_t num_threads : {1, 3}) {
            c.num_threads = num_threads;
            SCOPED_TRACE(std::string(kernel->name) + ": " + c.describe());
            RopeCall call(c);
            InjectedAllocator::arm(-1);
            ASSERT_EQ(call.run(kernel_runner(*kernel)), ROPE_OK) << call.report().message;
            EXPECT_EQ(InjectedAllocator::calls(), 1) << "one reservation, made before the kernel runs";
            EXPECT_TRUE(call.check_outputs());
            checked++;
        }
    }
    if (checked == 0) {
        GTEST_SKIP() << "this build has no computed-source kernel that runs here";
    }
}

// The same for the any-head_dim kernel rotating blocks of several pair vectors: its last block of a
// head may be partial (the pair count comes at run time), yet the block's storage has a constant
// size; sized at run time, it was a heap allocation in every task.
TEST_F(FaultTest, WideBlocksOfTheAnyHeadDimKernelAllocateNothing) {
    const std::vector<ScheduleVariant> variants = schedule_variants();
    const auto variant = std::find_if(variants.begin(), variants.end(), [](const ScheduleVariant &v) {
        return std::string(v.kernel.name) == "ropegen_variant_cache_wide_blocks";
    });
    ASSERT_NE(variant, variants.end()) << "tests/stress/CMakeLists.txt builds ropegen_variant_cache_wide_blocks";
    if (const std::string reason = unsupported_reason(variant->kernel); !reason.empty()) {
        GTEST_SKIP() << reason;
    }
    expect_only_reserved_allocations(variant->kernel);
}

TEST_F(FaultTest, FailedScratchReservationIsReportedAndWritesNothing) {
    int failed = 0;
    for (const KernelEntry *kernel : runnable_kernels()) {
        if (!is_computed(*kernel)) {
            continue;
        }
        for (const CaseSpec &spec : varied_cases(*kernel, 7)) {
            SCOPED_TRACE(std::string(kernel->name) + ": " + spec.describe());
            assert_reserves_beyond_the_stack(*kernel, spec);
            RopeCall call(spec);
            InjectedAllocator::arm(0);
            EXPECT_EQ(call.run(kernel_runner(*kernel)), ROPE_ERR_INTERNAL);
            EXPECT_EQ(call.report().status, ROPE_ERR_INTERNAL);
            EXPECT_TRUE(contains(call.report().message, "out of memory")) << call.report().message;
            EXPECT_TRUE(contains(call.report().message, "no output was written")) << call.report().message;
            EXPECT_TRUE(call.check_all_unchanged());
            // Nothing is left behind: the same call succeeds once memory is there.
            InjectedAllocator::disarm();
            ASSERT_EQ(call.run(kernel_runner(*kernel)), ROPE_OK) << call.report().message;
            EXPECT_TRUE(call.check_outputs());
            failed++;
        }
    }
    if (failed == 0) {
        GTEST_SKIP() << "this build has no computed-source kernel that runs here";
    }
}

// Memory exhausted for everything: the scratch reservation fails, and so does building the message
// that reports it. The std::bad_alloc must not cross the C ABI (a C caller would get
// std::terminate): a status, a message that allocates nothing, and untouched outputs.
TEST_F(FaultTest, ExhaustedMemoryIsAStatusNotAnException) {
    if (!ROPEGEN_REPLACES_OPERATOR_NEW) {
        GTEST_SKIP() << "this build (TSan) cannot replace operator new, which the test fails on demand";
    }
    int failed = 0;
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        if (!is_computed(*kernel) || !unsupported_reason(*kernel).empty()) {
            continue;
        }
        const CaseSpec spec = varied_cases(*kernel, 7).front();
        SCOPED_TRACE(std::string(kernel->name) + ": " + spec.describe());
        assert_reserves_beyond_the_stack(*kernel, spec);
        RopeCall call(spec);
        rope_params params = call.params();
        rope_report report = rope_report_init();
        rope_status status = ROPE_OK;
        bool escaped = false;
        InjectedAllocator::arm(0);
        g_fail_operator_new = true;
        try {
            status = rope_dispatch(&params, &report);
        } catch (...) {
            escaped = true;
        }
        g_fail_operator_new = false;
        InjectedAllocator::disarm();
        EXPECT_FALSE(escaped) << "an exception left rope_dispatch";
        EXPECT_EQ(status, ROPE_ERR_INTERNAL);
        EXPECT_EQ(report.status, ROPE_ERR_INTERNAL);
        EXPECT_TRUE(contains(report.message, "out of memory")) << report.message;
        EXPECT_TRUE(call.check_all_unchanged());
        failed++;
    }
    if (failed == 0) {
        GTEST_SKIP() << "this build has no computed-source kernel that runs here";
    }
}

// The dispatcher asks for SIZE_MAX bytes when a reservation's size overflows ("no allocator can
// serve it"); Halide's default allocator, adding its alignment, would wrap that to a few bytes.
TEST_F(FaultTest, AReservationBeyondTheAddressSpaceIsRefused) {
    CallContext context(nullptr, 1);
    for (const size_t bytes : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 63,
                               static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) + 1}) {
        EXPECT_FALSE(context.reserve_scratch(bytes)) << bytes;
        EXPECT_EQ(context.take_scratch(1 << 20), nullptr) << bytes;
    }
}

// The alignment halide_malloc promises the kernels (HalideRuntime.h): 64 bytes on x86, 32 on arm.
#if defined(__x86_64__) || defined(__i386__)
constexpr uintptr_t kHalideMallocAlignment = 64;
#else
constexpr uintptr_t kHalideMallocAlignment = 32;
#endif

// A reservation sized for some blocks (scratch_slot_bytes each, as kernel_scratch_bytes adds them)
// serves exactly those blocks, the last one included, and no more: each aligned as halide_malloc's
// are, with 8 bytes after it that are still the reservation's (halide_malloc's contract).
TEST_F(FaultTest, AReservationServesTheBlocksItWasSizedFor) {
    const size_t sizes[] = {64, 4, 200, 128};
    size_t total = 0;
    for (const size_t bytes : sizes) {
        total += scratch_slot_bytes(bytes);
    }
    ensure_initialized();  // the reservation comes from the allocator the library found at its first call
    CallContext context(nullptr, 1);
    ASSERT_TRUE(context.reserve_scratch(total));
    const uint8_t *previous = nullptr;
    size_t previous_bytes = 0;
    for (const size_t bytes : sizes) {
        const auto *block = static_cast<const uint8_t *>(context.take_scratch(bytes));
        ASSERT_NE(block, nullptr) << bytes << " bytes";
        EXPECT_TRUE(context.owns_scratch(block));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % kHalideMallocAlignment, 0u);
        if (previous != nullptr) {
            EXPECT_GE(static_cast<size_t>(block - previous), previous_bytes + 8) << "no readable gap after the previous block";
        }
        previous = block, previous_bytes = bytes;
    }
    EXPECT_EQ(context.take_scratch(1), nullptr) << "the reservation is used up";
    context.reuse_scratch();
    EXPECT_EQ(context.take_scratch(std::numeric_limits<size_t>::max() - 100), nullptr) << "a size whose slot wraps";
    EXPECT_NE(context.take_scratch(64), nullptr) << "a later slice takes the reservation again";

    // A larger reservation is a new block, all of it free, whatever the smaller one had served.
    ASSERT_TRUE(context.reserve_scratch(2 * total));
    const size_t whole = 2 * total - 64;  // its block and gap fill the reservation (total: a multiple of 64)
    ASSERT_EQ(scratch_slot_bytes(whole), 2 * total);
    EXPECT_NE(context.take_scratch(whole), nullptr);
}

// A decode step's parts each borrow their own slice of the step's reservation: a part's blocks
// start at its offset and stay inside its slice, so parts running at once share no scratch.
TEST_F(FaultTest, APartBorrowsItsOwnSliceOfTheReservation) {
    ensure_initialized();
    const size_t part_bytes = scratch_slot_bytes(256);
    CallContext whole(nullptr, 1);
    ASSERT_TRUE(whole.reserve_scratch(2 * part_bytes));
    CallContext first(nullptr, 1), second(nullptr, 1);
    whole.lend_scratch(&first, 0, part_bytes);
    whole.lend_scratch(&second, part_bytes, part_bytes);
    const auto *first_block = static_cast<const uint8_t *>(first.take_scratch(256));
    const auto *second_block = static_cast<const uint8_t *>(second.take_scratch(256));
    ASSERT_NE(first_block, nullptr);
    ASSERT_NE(second_block, nullptr);
    EXPECT_EQ(static_cast<size_t>(second_block - first_block), part_bytes);
    EXPECT_TRUE(whole.owns_scratch(second_block));
    EXPECT_EQ(second.take_scratch(1), nullptr) << "the slice holds its own blocks only";
}

// A varlen call whose values depend on the sequence runs a kernel per sequence; its scratch, the
// longest sequence's, is still reserved once, before the first: a failure writes no sequence.
TEST_F(FaultTest, AVarlenCallReservesItsScratchOnceBeforeAnySequence) {
    VarlenCompatCall call({0, 5, 5, 6, 23, 26}, {7, 900, 0, 250, 40}, 3, 64, 1);  // four non-empty sequences
    const rope_params &p = call.params;
    std::vector<float> &out = call.out;
    rope_report report = rope_report_init();
    if (rope_query(&p, &report) != ROPE_OK) {
        GTEST_SKIP() << report.message;
    }
    InjectedAllocator::arm(-1);
    ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
    EXPECT_EQ(InjectedAllocator::calls(), 1) << "one reservation for the four sequences";

    call.clear_output();
    InjectedAllocator::arm(0);
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_INTERNAL);
    EXPECT_TRUE(contains(report.message, "no output was written")) << report.message;
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == VarlenCompatCall::kUnwritten; }));
}

// The cache-source kernel generated with a root cos/sin table: the one kernel that allocates
// inside itself, beyond what the dispatcher reserves (null if the build has none).
const ScheduleVariant *root_table_cache_variant() {
    static const std::vector<ScheduleVariant> variants = schedule_variants();
    const auto variant = std::find_if(variants.begin(), variants.end(), [](const ScheduleVariant &v) {
        return v.kernel.source == ROPE_SOURCE_CACHE && contains(v.knobs.c_str(), "cos_sin_at=root");
    });
    return variant == variants.end() ? nullptr : &*variant;
}

// A kernel whose own allocation fails (here a cache-source kernel generated with a root cos/sin
// table, which the dispatcher does not reserve) gets an unusable block instead of null, and
// every later parallel loop of the call is skipped, so nothing is written. A decode step split
// into parts runs a kernel per part at once: the part that failed writes nothing, the others may
// have written their outputs (the call's message says which part failed).
TEST_F(FaultTest, FailedAllocationInsideAKernelSkipsEveryLaterLoop) {
    const ScheduleVariant *variant = root_table_cache_variant();
    ASSERT_NE(variant, nullptr) << "tests/stress/CMakeLists.txt builds a cache-source kernel with root tables";
    if (const std::string reason = unsupported_reason(variant->kernel); !reason.empty()) {
        GTEST_SKIP() << reason;
    }
    ReverseOrderPool engine(2);
    for (const CaseSpec &spec : varied_cases(variant->kernel, 13)) {
        for (const bool on_engine : {false, true}) {
            CaseSpec c = spec;
            c.num_threads = on_engine ? 2 : 3;
            SCOPED_TRACE(c.describe() + (on_engine ? " on an engine's pool" : " on the library's pool"));
            rope_set_parallel_runner(on_engine ? &ReverseOrderPool::run : nullptr, &engine);
            RopeCall call(c);
            InjectedAllocator::arm(-1);
            ASSERT_EQ(call.run(kernel_runner(variant->kernel)), ROPE_OK) << call.report().message;
            ASSERT_GE(InjectedAllocator::calls(), 1) << variant->kernel.name << " should allocate its root table";
            const Outputs good = Outputs::of(call);

            RopeCall failing(c);
            InjectedAllocator::arm(0);
            EXPECT_EQ(failing.run(kernel_runner(variant->kernel)), ROPE_ERR_INTERNAL);
            EXPECT_TRUE(contains(failing.report().message, "could not allocate")) << failing.report().message;
            const bool decode_parts = runs_as_decode_parts(c);
            EXPECT_EQ(contains(failing.report().message, "of the decode step"), decode_parts) << failing.report().message;
            EXPECT_TRUE(decode_parts ? failing.check_untouched_outside_outputs() : failing.check_all_unchanged());
            InjectedAllocator::disarm();
            ASSERT_EQ(failing.run(kernel_runner(variant->kernel)), ROPE_OK) << failing.report().message;
            EXPECT_TRUE(agree(failing, good));
        }
    }
}

// The kernels have no asserts, so a Halide runtime error (on a GPU: a launch that fails) does not
// stop one: the error handler records it and the call returns a status naming it.
TEST_F(FaultTest, HalideRuntimeErrorInsideAKernelIsAStatus) {
    const ScheduleVariant *variant = root_table_cache_variant();
    ASSERT_NE(variant, nullptr) << "tests/stress/CMakeLists.txt builds a cache-source kernel with root tables";
    if (const std::string reason = unsupported_reason(variant->kernel); !reason.empty()) {
        GTEST_SKIP() << reason;
    }
    for (const CaseSpec &spec : varied_cases(variant->kernel, 17)) {
        for (const int32_t num_threads : {1, 3}) {
            CaseSpec c = spec;
            c.num_threads = num_threads;
            SCOPED_TRACE(c.describe());
            RopeCall failing(c);
            InjectedAllocator::arm_runtime_error();
            EXPECT_EQ(failing.run(kernel_runner(variant->kernel)), ROPE_ERR_INTERNAL);
            EXPECT_TRUE(contains(failing.report().message, "failed: Halide: injected runtime error"))
                << failing.report().message;
            const bool decode_parts = runs_as_decode_parts(c);
            EXPECT_EQ(contains(failing.report().message, "of the decode step"), decode_parts) << failing.report().message;
            EXPECT_TRUE(failing.check_all_unchanged()) << "every part's loops after its error are skipped";
            InjectedAllocator::disarm();
            ASSERT_EQ(failing.run(kernel_runner(variant->kernel)), ROPE_OK) << failing.report().message;
            EXPECT_TRUE(failing.check_outputs());
        }
    }
}

// --- the library's thread pool ---------------------------------------------------------------------

// A pool size above any this process has run at, so that a loop on it must start new workers
// (a size the pool has run at starts none): each thread-start test takes the next one. 0 when
// they are used up (Halide's pool runs at most 256 threads).
int unstarted_pool_size() {
    static int size = std::max(32, static_cast<int>(std::thread::hardware_concurrency()));
    size += 32;
    return size <= 256 ? size : 0;
}

// The library's thread count as the other tests expect it.
void restore_pool_size() {
    rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// A task of run_parallel_loop that counts its runs in the std::atomic<int> of its closure.
int count_task(void *, int, uint8_t *closure) {
    reinterpret_cast<std::atomic<int> *>(closure)->fetch_add(1);
    return 0;
}

#define ROPEGEN_UNSTARTED_POOL_SIZE(size)                                                          \
    const int size = unstarted_pool_size();                                                        \
    if (size == 0) {                                                                               \
        GTEST_SKIP() << "no pool size above the ones this process ran at is left (256 at most)"; \
    }

// Halide's pool starts its workers inside the first loop that needs them and, when pthread_create
// fails, runs on without them (it would join the thread that never started at exit). The call
// during which a worker cannot be started fails before writing anything; the pool then goes on
// with the threads it has, and the same call succeeds with the serial result.
TEST_F(FaultTest, WorkerThatCannotStartIsReportedAndWritesNothing) {
    ROPEGEN_UNSTARTED_POOL_SIZE(pool_size);
    ASSERT_EQ(rope_set_num_threads(1), ROPE_OK);  // whatever HL_NUM_THREADS says, start no workers yet
    const KernelEntry *kernel = runnable_kernels().front();
    CaseSpec c = varied_cases(*kernel, 17).front();
    c.num_threads = 4;  // the library's pool, whatever the size of the call
    RopeCall serial(c);
    rope_params params = serial.params();
    params.num_threads = 1;
    rope_report report = rope_report_init();
    ASSERT_EQ(run_kernel(*kernel, &params, &report), ROPE_OK) << report.message;

    ASSERT_EQ(rope_set_num_threads(pool_size), ROPE_OK);
    g_failed_thread_starts = 0;
    g_fail_thread_starts = true;
    RopeCall call(c);
    EXPECT_EQ(call.run(kernel_runner(*kernel)), ROPE_ERR_INTERNAL);
    g_fail_thread_starts = false;
    EXPECT_GT(g_failed_thread_starts.load(), 0) << "the pool should have tried to start workers";
    EXPECT_TRUE(contains(call.report().message, "could not start a worker thread")) << call.report().message;
    EXPECT_TRUE(contains(call.report().message, "no output was written")) << call.report().message;
    EXPECT_TRUE(call.check_all_unchanged());

    ASSERT_EQ(call.run(kernel_runner(*kernel)), ROPE_OK) << call.report().message;
    EXPECT_TRUE(agree(call, Outputs::of(serial)));
    restore_pool_size();
}

// Another thread may resize the pool while a call runs. A call past its first loop does not fail
// for a worker that cannot start then: its later loops run on the threads there are (Halide's
// pool counts the worker anyway), and the next call, before its first loop, reports the failure
// and writes nothing. Here the "call" is a context running two loops, resized in between.
TEST_F(FaultTest, APoolResizedBetweenACallsLoopsDoesNotFailThatCall) {
    ROPEGEN_UNSTARTED_POOL_SIZE(pool_size);
    ASSERT_EQ(rope_set_num_threads(1), ROPE_OK);  // whatever HL_NUM_THREADS says, start no workers yet
    rope_report report = rope_report_init();
    CallContext running(&report, 0);  // the library's pool
    std::atomic<int> tasks{0};
    auto *closure = reinterpret_cast<uint8_t *>(&tasks);
    ASSERT_EQ(run_parallel_loop(&running, count_task, 8, closure), 0);

    // The next loop that can use them starts new workers.
    ASSERT_EQ(rope_set_num_threads(pool_size), ROPE_OK);
    g_failed_thread_starts = 0;
    g_fail_thread_starts = true;
    EXPECT_EQ(run_parallel_loop(&running, count_task, pool_size, closure), 0);
    g_fail_thread_starts = false;
    EXPECT_GT(g_failed_thread_starts.load(), 0) << "the pool should have tried to start workers";
    EXPECT_EQ(running.failure(), CallFailure::None) << "detail " << running.failure_detail();
    EXPECT_EQ(tasks.load(), 8 + pool_size) << "every task of both loops runs";

    const KernelEntry *kernel = runnable_kernels().front();
    CaseSpec c = varied_cases(*kernel, 23).front();
    c.num_threads = 4;
    RopeCall next(c);
    EXPECT_EQ(next.run(kernel_runner(*kernel)), ROPE_ERR_INTERNAL);
    EXPECT_TRUE(contains(next.report().message, "could not start a worker thread")) << next.report().message;
    EXPECT_TRUE(next.check_all_unchanged());
    EXPECT_EQ(next.run(kernel_runner(*kernel)), ROPE_OK) << next.report().message;
    restore_pool_size();
}

// A kernel's loops differ in size (q and k may have different layouts, so different task
// counts): a first loop of one task, which runs on the calling thread, may be followed by one on
// the pool. So a call's first loop checks the pool whatever its size, and a worker that cannot
// start fails the call before that task writes anything.
TEST_F(FaultTest, ACallsFirstLoopOfOneTaskChecksThePoolBeforeRunning) {
    ROPEGEN_UNSTARTED_POOL_SIZE(pool_size);
    ASSERT_EQ(rope_set_num_threads(pool_size), ROPE_OK);
    std::atomic<int> tasks{0};
    rope_report report = rope_report_init();
    CallContext call(&report, 0);  // the library's pool
    g_failed_thread_starts = 0;
    g_fail_thread_starts = true;
    EXPECT_NE(run_parallel_loop(&call, count_task, 1, reinterpret_cast<uint8_t *>(&tasks)), 0);
    g_fail_thread_starts = false;
    EXPECT_GT(g_failed_thread_starts.load(), 0) << "the pool should have tried to start workers";
    EXPECT_EQ(call.failure(), CallFailure::ThreadStart) << "detail " << call.failure_detail();
    EXPECT_EQ(tasks.load(), 0) << "the loop's task ran although the call had failed";
    restore_pool_size();
}

// A varlen call checks the library's pool before its first sequence, even one small enough to
// run on the calling thread: a worker that cannot start for a later, larger sequence is reported
// with every output untouched. A call whose sequences are all small never uses the pool, however
// large the whole: it neither starts it nor fails for it.
TEST_F(FaultTest, AVarlenCallChecksThePoolBeforeItsFirstSequence) {
    ROPEGEN_UNSTARTED_POOL_SIZE(pool_size);
    // 5 tokens (20 KiB), then 2048 (8 MiB: above the size a call runs on the calling thread).
    VarlenCompatCall call({0, 5, 5 + 2048}, {7, 900}, 8, 64, 0);
    // 512 sequences of 8 tokens (32 KiB each, 16 MiB in all).
    std::vector<int32_t> small_cu_seqlens(513), small_offsets(512, 3);
    for (size_t b = 0; b < small_cu_seqlens.size(); b++) {
        small_cu_seqlens[b] = static_cast<int32_t>(8 * b);
    }
    VarlenCompatCall small(small_cu_seqlens, small_offsets, 8, 64, 0);
    rope_report report = rope_report_init();
    if (rope_query(&call.params, &report) != ROPE_OK) {
        GTEST_SKIP() << report.message;
    }
    ASSERT_EQ(rope_set_num_threads(pool_size), ROPE_OK);
    g_failed_thread_starts = 0;
    g_fail_thread_starts = true;
    EXPECT_EQ(rope_dispatch(&small.params, &report), ROPE_OK) << report.message;
    EXPECT_EQ(g_failed_thread_starts.load(), 0) << "a call whose sequences are all small started the pool";

    EXPECT_EQ(rope_dispatch(&call.params, &report), ROPE_ERR_INTERNAL);
    g_fail_thread_starts = false;
    EXPECT_GT(g_failed_thread_starts.load(), 0) << "the pool should have tried to start workers";
    EXPECT_TRUE(contains(report.message, "could not start a worker thread")) << report.message;
    EXPECT_TRUE(contains(report.message, "no output was written")) << report.message;
    EXPECT_TRUE(std::all_of(call.out.begin(), call.out.end(),
                            [](float v) { return v == VarlenCompatCall::kUnwritten; }));
    restore_pool_size();
}

// --- an engine's pool ------------------------------------------------------------------------------

struct FailingRunner {
    static constexpr int kError = -7;
    std::atomic<int> loops{0};
    std::atomic<int> tasks_run{0};
    bool run_some_tasks_first = false;

    static int run(void *pool, int (*task)(void *, int), void *task_context, int count) {
        auto *self = static_cast<FailingRunner *>(pool);
        self->loops++;
        for (int i = 0; self->run_some_tasks_first && i < (count + 1) / 2; i++) {
            self->tasks_run++;
            task(task_context, i);
        }
        return kError;
    }
};

// A runner that fails before running any task (its threads cannot start, say): the call fails,
// its later loops are never handed over, and nothing is written.
TEST_F(FaultTest, EngineRunnerFailingBeforeAnyTaskWritesNothing) {
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        CaseSpec c = varied_cases(*kernel, 19).front();
        c.num_threads = 2;
        SCOPED_TRACE(std::string(kernel->name) + ": " + c.describe());
        FailingRunner runner;
        rope_set_parallel_runner(&FailingRunner::run, &runner);
        RopeCall call(c);
        EXPECT_EQ(call.run(kernel_runner(*kernel)), ROPE_ERR_INTERNAL);
        EXPECT_TRUE(contains(call.report().message, std::to_string(FailingRunner::kError))) << call.report().message;
        EXPECT_EQ(runner.loops.load(), 1) << "no loop after the failed one";
        EXPECT_TRUE(call.check_all_unchanged());
    }
}

// A runner that fails after running some tasks: those tasks may have written their outputs (the
// documented exception), but nothing else, and no later loop runs.
TEST_F(FaultTest, EngineRunnerFailingMidLoopStopsTheCall) {
    const KernelEntry *kernel = one_kernel_per_key().front();
    CaseSpec c = varied_cases(*kernel, 29).front();
    c.num_threads = 2;
    FailingRunner runner;
    runner.run_some_tasks_first = true;
    rope_set_parallel_runner(&FailingRunner::run, &runner);
    RopeCall call(c);
    EXPECT_EQ(call.run(kernel_runner(*kernel)), ROPE_ERR_INTERNAL);
    EXPECT_TRUE(contains(call.report().message, "partly written")) << call.report().message;
    EXPECT_EQ(runner.loops.load(), 1) << "no loop after the failed one";
    EXPECT_GT(runner.tasks_run.load(), 0);
    EXPECT_TRUE(call.check_untouched_outside_outputs());
}

// A loop of more iterations than the call's threads is handed to the engine as one strided task
// per thread: task w runs iterations w, w + threads, ... With threads just below the iterations,
// the index after a task's last passes INT_MAX; it must end the task, not wrap to a negative
// iteration. (The runner runs only the first and the last task: enough to see their indices.)
TEST_F(FaultTest, StridedTasksStayInsideTheirLoop) {
    struct FirstAndLastTask {
        static int run(void *, int (*task)(void *, int), void *task_context, int count) {
            const int result = task(task_context, 0);
            return result != 0 ? result : task(task_context, count - 1);
        }
    };
    struct Seen {
        std::atomic<int64_t> low{std::numeric_limits<int64_t>::max()}, high{std::numeric_limits<int64_t>::min()};
    } seen;
    const ParallelTask record = [](void *, int index, uint8_t *closure) {
        auto *s = reinterpret_cast<Seen *>(closure);
        for (int64_t low = s->low; index < low && !s->low.compare_exchange_weak(low, index);) {
        }
        for (int64_t high = s->high; index > high && !s->high.compare_exchange_weak(high, index);) {
        }
        return 0;
    };
    rope_set_parallel_runner(&FirstAndLastTask::run, nullptr);
    constexpr int kIterations = (1 << 30) + 2;
    rope_report report = rope_report_init();
    CallContext call(&report, kIterations - 1);  // threads: each task runs one or two iterations
    EXPECT_EQ(run_parallel_loop(&call, record, kIterations, reinterpret_cast<uint8_t *>(&seen)), 0);
    EXPECT_EQ(seen.low.load(), 0);
    EXPECT_EQ(seen.high.load(), kIterations - 1) << "iteration 2^30 + 1, task 0's second, is the last";
}

// A varlen call whose values depend on the sequence runs a kernel per sequence: when one fails,
// the message names that sequence and says whether the ones before it were written (they were,
// unless it is the first). Two sequences of one shape, so each hands the engine as many loops.
TEST_F(FaultTest, AVarlenSequenceThatFailsSaysWhatWasWritten) {
    struct FailingAt {
        int fail_at = -1;
        std::atomic<int> loops{0};
        static int run(void *pool, int (*task)(void *, int), void *task_context, int count) {
            auto *self = static_cast<FailingAt *>(pool);
            if (self->loops++ == self->fail_at) {
                return FailingRunner::kError;
            }
            for (int i = 0; i < count; i++) {
                if (const int result = task(task_context, i)) {
                    return result;
                }
            }
            return 0;
        }
    };
    // 256 tokens a sequence: at least two tasks a loop at every tokens_per_task the tuner tries
    // (up to 64); a loop of one task runs on the calling thread, and the engine would see none.
    constexpr int64_t kHeads = 8, kHeadDim = 64, kLength = 256, per_sequence = kLength * kHeads * kHeadDim;
    VarlenCompatCall call({0, kLength, 2 * kLength}, {7, 900}, kHeads, kHeadDim, 2);
    const rope_params &p = call.params;
    std::vector<float> &out = call.out;
    rope_report report = rope_report_init();
    if (rope_query(&p, &report) != ROPE_OK) {
        GTEST_SKIP() << report.message;
    }
    FailingAt runner;
    rope_set_parallel_runner(&FailingAt::run, &runner);
    ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
    const int loops = runner.loops.load();
    ASSERT_TRUE(loops >= 2 && loops % 2 == 0) << loops << " loops handed over for two sequences of one shape";

    for (const int sequence : {0, 1}) {
        SCOPED_TRACE("failing in sequence " + std::to_string(sequence));
        call.clear_output();
        runner.loops = 0;
        runner.fail_at = sequence * loops / 2;  // the sequence's first loop
        EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_INTERNAL);
        EXPECT_TRUE(contains(report.message, "sequence " + std::to_string(sequence) + " of the varlen call"))
            << report.message;
        EXPECT_EQ(contains(report.message, "the sequences before it were written"), sequence > 0) << report.message;
        const auto written = std::count_if(out.begin(), out.begin() + per_sequence, [](float v) { return v != VarlenCompatCall::kUnwritten; });
        EXPECT_EQ(written, sequence > 0 ? per_sequence : 0) << "sequence 0 is written before sequence 1 runs, and only then";
        EXPECT_TRUE(std::all_of(out.begin() + per_sequence, out.end(), [](float v) { return v == VarlenCompatCall::kUnwritten; }))
            << "the failed sequence's first loop wrote nothing";
    }
}

}  // namespace
}  // namespace ropegen::test
