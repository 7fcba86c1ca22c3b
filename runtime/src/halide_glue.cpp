// SPDX-License-Identifier: Apache-2.0
// The Halide runtime hooks: errors become the caller's report (Halide's default handler prints
// and aborts), kernel scratch comes from a reservation the dispatcher made before the kernel ran,
// the pool's worker threads are started with their failures seen, and parallel loops run on the
// library's pool, on the calling thread only, or on an engine's own pool, as the call asks.
//
// The kernels are built without asserts: they neither check halide_malloc's result nor the
// result of a parallel loop, and run on. So every failure is recorded in the call's CallContext
// and every later parallel loop of that call is skipped; since every output of a CPU kernel is
// written inside a parallel loop, a failure seen before the first output loop starts leaves the
// outputs untouched. A CUDA kernel's launches are no parallel loops: after a runtime error (a
// failed launch) the call gets no context (cuda_device.cpp's acquire_context), so its later
// launches are skipped; those enqueued before it still run, and the call says outputs may be
// partly written.
#include <HalideRuntime.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "internal/cuda_device.h"
#include "internal/kernel_table.h"
#include "internal/runtime_state.h"
#include "internal/tsan_annotations.h"

namespace ropegen {

void init_isa_cap_from_environment();

namespace {

// Kernels are built without asserts, so a runtime error (a CUDA launch that fails, say) does not
// stop the kernel's code: the call records it, and the dispatcher turns it into a status.
void report_halide_error(void *user_context, const char *message) {
    const tsan::CallbackScope checked;
    if (user_context != nullptr) {
        auto *call = static_cast<CallContext *>(user_context);
        if (call->fail(CallFailure::RuntimeError, 0)) {
            set_report_message(call->report, "Halide: ", message);  // no allocation inside the Halide runtime
        }
    }
}

// The runtime prints only for debugging features the kernels are not built with; drop anything
// it would print all the same, since the library never writes to the caller's stdout/stderr.
void ignore_halide_print(void *, const char *) {
}

// --- kernel scratch ------------------------------------------------------------------------------
// halide_malloc's contract (HalideRuntime.h): blocks aligned to 64 bytes on x86 (32 on arm), sizes
// a multiple of that, and 8 bytes before and after a block readable. Blocks are carved from a
// reservation halide_malloc made, at multiples of 64 bytes, so they keep its alignment on both.
constexpr size_t kScratchAlignment = 64;

// The allocator Halide had before ropegen's hooks (its default, or whatever the application
// installed first): reservations and the allocations they do not cover go there.
halide_malloc_t g_next_malloc = nullptr;
halide_free_t g_next_free = nullptr;

// What halide_malloc returns when allocation fails: a kernel must not get null, since it does not
// check. Kernels touch heap scratch only inside parallel loops (inv_freq, written at the top of a
// kernel, is always within the reservation), and after a failure every later parallel loop of the
// call is skipped, so nothing touches this block. An inaccessible page: a kernel breaking that
// rule (a schedule allocating inside its tasks) faults at once instead of writing elsewhere.
void *g_unusable_block = nullptr;

void *allocate_for_kernel(void *user_context, size_t bytes) {
    const tsan::CallbackScope checked;  // a schedule may allocate inside tasks
    auto *call = static_cast<CallContext *>(user_context);
    if (call == nullptr) {
        return g_next_malloc(user_context, bytes);  // not a kernel of a call
    }
    if (void *block = call->take_scratch(bytes)) {
        return block;
    }
    if (void *block = g_next_malloc(user_context, bytes)) {
        return block;
    }
    call->fail(CallFailure::OutOfMemory, static_cast<int64_t>(bytes));
    return g_unusable_block;
}

void free_for_kernel(void *user_context, void *block) {
    const tsan::CallbackScope checked;
    const auto *call = static_cast<const CallContext *>(user_context);
    if (block == g_unusable_block || (call != nullptr && call->owns_scratch(block))) {
        return;  // released with the reservation, or never allocated
    }
    g_next_free(user_context, block);
}

void install_allocator() {
    g_next_malloc = halide_set_custom_malloc(allocate_for_kernel);
    g_next_free = halide_set_custom_free(free_for_kernel);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void *unusable = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    // Without a mapping, a static block serves (a broken kernel would then write there).
    alignas(kScratchAlignment) static uint8_t fallback[kScratchAlignment];
    g_unusable_block = unusable != MAP_FAILED ? unusable : fallback;
}

// --- the library's pool ------------------------------------------------------------------------
// Halide's pool starts its workers inside the first parallel loop that needs them (with
// halide_spawn_thread) and, when one cannot be started, counts it anyway and runs that loop on the
// threads it has; it never retries. Before a call's first parallel loop (run_par_for), when the
// pool has not been started at its current size, an empty loop lets it start its workers, so that
// a failure is seen, and reported, before the kernel writes anything. A worker that fails to
// start later, in a loop of a call under way when rope_set_num_threads grew the pool, leaves
// that call to finish on the threads there are; the next call to check reports it.
std::atomic<unsigned> g_pool_size_generation{0};     // bumped by rope_set_num_threads
std::atomic<unsigned> g_pool_started_generation{~0u};  // the size the empty loop last ran at
std::atomic<int> g_thread_start_error{0};            // errno of a worker that could not start, unreported
std::atomic<unsigned> g_settings_generation{0};      // see settings_generation()

int empty_task(void *, int, uint8_t *) {
    return 0;
}

#ifdef ROPEGEN_TSAN
// Halide's runtime stops its pool at exit, from a destructor of its own, waking the workers parked
// in its synchronisation. Under TSan, stop it a moment earlier (C++ static destructors run before
// those of .fini_array) inside a PoolScope; Halide's own call then finds nothing to do.
struct StopPoolAtExit {
    ~StopPoolAtExit() {
        const tsan::PoolScope in_pool;
        halide_shutdown_thread_pool();
    }
} g_stop_pool_at_exit;
#endif

int run_on_pool(void *user_context, halide_task_t task, int min, int extent, uint8_t *closure);

bool start_pool(CallContext *call, void *user_context) {
    if (call != nullptr && call->pool_checked.load(std::memory_order_relaxed)) {
        return true;
    }
    // A size changed while the empty loop runs leaves the generation read before it: the next
    // call runs the loop again.
    const unsigned generation = g_pool_size_generation.load(std::memory_order_acquire);
    if (g_pool_started_generation.load(std::memory_order_acquire) != generation) {
        run_on_pool(user_context, empty_task, 0, 1, nullptr);
        g_pool_started_generation.store(generation, std::memory_order_release);
    }
    if (g_thread_start_error.load(std::memory_order_relaxed) != 0) {
        if (const int error = g_thread_start_error.exchange(0, std::memory_order_relaxed); error != 0) {
            if (call != nullptr) {
                call->fail(CallFailure::ThreadStart, error);
            }
            return false;
        }
    }
    if (call != nullptr) {
        call->pool_checked.store(true, std::memory_order_relaxed);
    }
    return true;
}

// --- parallel loops ------------------------------------------------------------------------------
struct ParallelRunner {
    rope_parallel_for_fn run;
    void *pool;
};

// The engine's runner, read whole by every parallel loop and replaced at any time: a sequence
// lock (odd while a writer is between its stores) around two atomics, so a reader never sees the
// function of one runner with the pool of another, and nothing is allocated or freed.
class RunnerSlot {
public:
    void set(ParallelRunner runner) {
        std::lock_guard<std::mutex> lock(writers_);
        const unsigned sequence = sequence_.load(std::memory_order_relaxed);
        sequence_.store(sequence + 1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
        run_.store(runner.run, std::memory_order_relaxed);
        pool_.store(runner.pool, std::memory_order_relaxed);
        sequence_.store(sequence + 2, std::memory_order_release);
    }
    ParallelRunner get() const {
        for (;;) {
            const unsigned before = sequence_.load(std::memory_order_acquire);
            const ParallelRunner runner{run_.load(std::memory_order_relaxed), pool_.load(std::memory_order_relaxed)};
            std::atomic_thread_fence(std::memory_order_acquire);
            if (before % 2 == 0 && sequence_.load(std::memory_order_relaxed) == before) {
                return runner;
            }
            std::this_thread::yield();  // a writer is between its stores
        }
    }

private:
    std::mutex writers_;
    std::atomic<unsigned> sequence_{0};
    std::atomic<rope_parallel_for_fn> run_{nullptr};
    std::atomic<void *> pool_{nullptr};
};
RunnerSlot g_runner;

// A parallel loop spread over exactly `workers` tasks (of the library's pool or an engine's):
// task w runs the iterations w, w + workers, ...
struct StridedLoop {
    halide_task_t task;
    int min, extent, workers;
    uint8_t *closure;
};

int run_strided(void *user_context, int worker, uint8_t *closure) {
    const tsan::CallbackScope checked;
    tsan::handoff_acquire(closure);
    const auto *loop = reinterpret_cast<const StridedLoop *>(closure);
    int result = 0;
    // 64-bit: after a task's last iteration, i + workers may pass INT_MAX.
    for (int64_t i = worker; i < loop->extent && result == 0; i += loop->workers) {
        result = loop->task(user_context, loop->min + static_cast<int>(i), loop->closure);
    }
    tsan::handoff_release(closure);
    return result;
}

// Runs a loop on the library's pool.
int run_on_pool(void *user_context, halide_task_t task, int min, int extent, uint8_t *closure) {
    if (closure != nullptr) {
        tsan::handoff_release(closure);
    }
    int result = 0;
    {
        const tsan::PoolScope in_pool;
        result = halide_default_do_par_for(user_context, task, min, extent, closure);
    }
    if (closure != nullptr) {
        tsan::handoff_acquire(closure);
    }
    return result;
}

// An engine's pool sees tasks as (task_context, index).
struct EngineLoop {
    halide_task_t task;
    void *user_context;
    int min;
    uint8_t *closure;
};

int run_engine_task(void *task_context, int index) {
    const auto *loop = static_cast<const EngineLoop *>(task_context);
    return loop->task(loop->user_context, loop->min + index, loop->closure);
}

constexpr int kSkippedLoop = halide_error_code_generic_error;

// Runs the tasks of a loop one after another on the calling thread.
int run_inline(void *user_context, halide_task_t task, int min, int extent, uint8_t *closure) {
    for (int i = 0; i < extent; i++) {
        if (int result = task(user_context, min + i, closure)) {
            return result;
        }
    }
    return 0;
}

int run_par_for(CallContext *call, void *user_context, halide_task_t task, int min, int extent, uint8_t *closure) {
    const int threads = call != nullptr ? call->num_threads : 0;
    if (threads == 1) {
        return run_inline(user_context, task, min, extent, closure);
    }
    const ParallelRunner runner = g_runner.get();
    // The pool is checked at a call's first loop even when that loop runs inline (a single
    // task): a later loop of the call may need the pool, and a worker that cannot start must be
    // reported before the kernel writes anything.
    if (runner.run == nullptr && !start_pool(call, user_context)) {
        return kSkippedLoop;
    }
    if (extent <= 1) {
        return run_inline(user_context, task, min, extent, closure);
    }
    if (runner.run != nullptr) {
        // A call capped at `threads` hands over that many tasks, so it runs on at most as many
        // of the engine's threads.
        if (threads > 1 && threads < extent) {
            StridedLoop strided{task, min, extent, threads, closure};
            EngineLoop loop{run_strided, user_context, 0, reinterpret_cast<uint8_t *>(&strided)};
            return runner.run(runner.pool, run_engine_task, &loop, threads);
        }
        EngineLoop loop{task, user_context, min, closure};
        return runner.run(runner.pool, run_engine_task, &loop, extent);
    }
    if (threads == 0 || threads >= extent) {
        return run_on_pool(user_context, task, min, extent, closure);
    }
    StridedLoop loop{task, min, extent, threads, closure};
    return run_on_pool(user_context, run_strided, 0, threads, reinterpret_cast<uint8_t *>(&loop));
}

// Parallel loops start on the calling thread; the first failure is recorded in the call's
// context (the dispatcher reports it after the kernel returns) and every later loop is skipped.
int do_par_for(void *user_context, halide_task_t task, int min, int extent, uint8_t *closure) {
    auto *call = static_cast<CallContext *>(user_context);
    if (call != nullptr && call->failure() != CallFailure::None) {
        return kSkippedLoop;
    }
    const int result = run_par_for(call, user_context, task, min, extent, closure);
    if (result != 0 && call != nullptr) {
        call->fail(CallFailure::ParallelLoop, result);
    }
    return result;
}

}  // namespace

int run_parallel_loop(CallContext *call, ParallelTask task, int count, uint8_t *closure) {
    return do_par_for(call, task, 0, count, closure);
}

bool check_pool(CallContext *call) {
    return call->num_threads == 1 || g_runner.get().run != nullptr || start_pool(call, call);
}

bool engine_runner_set() {
    return g_runner.get().run != nullptr;
}

unsigned settings_generation() {
    return g_settings_generation.load(std::memory_order_acquire);
}

void settings_changed() {
    g_settings_generation.fetch_add(1, std::memory_order_acq_rel);
}

int library_threads() {
    const tsan::PoolScope in_pool;  // takes the pool's lock
    return halide_get_num_threads();
}

CallContext::~CallContext() {
    if (scratch_allocated()) {
        g_next_free(this, scratch_);
    }
}

bool CallContext::reserve_scratch(size_t bytes) {
    if (bytes <= scratch_size_) {
        return true;
    }
    // No allocator serves more than half the address space; Halide's default one adds its
    // alignment to the size first, which wraps near SIZE_MAX (the dispatcher's "too large").
    if (bytes > static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max())) {
        return false;
    }
    if (scratch_allocated()) {
        g_next_free(this, scratch_);
    }
    scratch_lent_ = false;
    reuse_scratch();  // a new block: nothing of it is taken
    if (bytes <= kInlineScratchBytes) {
        scratch_ = inline_scratch_;
        scratch_size_ = bytes;
        return true;
    }
    scratch_ = static_cast<uint8_t *>(g_next_malloc(this, bytes));
    scratch_size_ = scratch_ != nullptr ? bytes : 0;
    return scratch_ != nullptr;
}

void CallContext::lend_scratch(CallContext *part, size_t offset, size_t bytes) const {
    part->scratch_ = bytes != 0 ? scratch_ + offset : nullptr;
    part->scratch_size_ = bytes;
    part->scratch_lent_ = true;
}

void *CallContext::take_scratch(size_t bytes) {
    if (bytes > scratch_size_) {
        return nullptr;  // also keeps the slot's rounding below from wrapping near SIZE_MAX
    }
    const size_t slot = scratch_slot_bytes(bytes);
    size_t used = scratch_used_.load(std::memory_order_relaxed);
    do {
        if (slot > scratch_size_ - used) {
            return nullptr;
        }
    } while (!scratch_used_.compare_exchange_weak(used, used + slot, std::memory_order_relaxed));
    return scratch_ + used;
}

bool CallContext::fail(CallFailure kind, int64_t detail) {
    // Claim first, so that of two failures at once one kind goes with its own detail; a claim
    // already counts as a failure for the loops that check.
    int expected = static_cast<int>(CallFailure::None);
    if (!failure_.compare_exchange_strong(expected, kFailureClaimed, std::memory_order_acq_rel)) {
        return false;
    }
    failure_detail_.store(detail, std::memory_order_relaxed);
    failure_.store(static_cast<int>(kind), std::memory_order_release);
    return true;
}

size_t scratch_slot_bytes(size_t bytes) {
    // A multiple of the alignment, then one more alignment unit as the readable gap after it.
    return (bytes + 2 * kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

void set_report_message(rope_report *report, std::string_view message, std::string_view more) noexcept {
    if (report == nullptr || report->struct_size < sizeof(rope_report)) {
        return;
    }
    // copy_n, not memcpy: an empty view's data() may be null.
    const size_t length = std::min(message.size(), sizeof(report->message) - 1);
    std::copy_n(message.data(), length, report->message);
    const size_t added = std::min(more.size(), sizeof(report->message) - 1 - length);
    std::copy_n(more.data(), added, report->message + length);
    report->message[length + added] = '\0';
}

rope_status report_status(rope_report *report, rope_status status, std::string_view message) noexcept {
    if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
        report->status = status;
        set_report_message(report, message);
    }
    return status;
}

void ensure_initialized() {
    // A function-local static, not std::call_once: every call passes here, and the static's
    // guard is one inline load where call_once calls pthread_once in libc.
    static const bool initialized = [] {
        halide_set_error_handler(report_halide_error);
        halide_set_custom_print(ignore_halide_print);
        install_allocator();
        halide_set_custom_do_par_for(do_par_for);
#if ROPEGEN_CUDA
        install_cuda_hooks();
#endif
        init_isa_cap_from_environment();
        // ROPE_NUM_THREADS, else Halide's default (0: HL_NUM_THREADS, else the CPU count), set
        // now: until its pool starts, Halide reports 0 threads to library_threads(). Only a
        // whole value that is an int n > 0 counts: atoi would read "3abc" as 3 and "1e2" as 1.
        const char *threads = std::getenv("ROPE_NUM_THREADS");
        int n = 0;
        if (threads != nullptr) {
            const char *end = threads + std::strlen(threads);
            if (const auto [last, error] = std::from_chars(threads, end, n); error != std::errc() || last != end) {
                n = 0;
            }
        }
        const tsan::PoolScope in_pool;  // takes the pool's lock
        halide_set_num_threads(n > 0 ? n : 0);
        return true;
    }();
    (void)initialized;
}

}  // namespace ropegen

// Halide's pool starts its workers with these (weak in its runtime). Its own version ignores
// pthread_create's result: the handle of a thread that never started is joined at exit. These
// tell the next call to check the pool (ropegen::start_pool) and never join a thread that did not
// start.
namespace {
struct SpawnedThread {
    void (*body)(void *);
    void *closure;
    pthread_t handle;
    bool started;
};
SpawnedThread g_thread_not_allocated{nullptr, nullptr, {}, false};

void *run_spawned_thread(void *arg) {
    const auto *thread = static_cast<const SpawnedThread *>(arg);
    const ropegen::tsan::PoolScope in_pool;  // the pool's worker loop
    thread->body(thread->closure);
    return nullptr;
}
}  // namespace

extern "C" struct halide_thread *halide_spawn_thread(void (*body)(void *), void *closure) {
    const ropegen::tsan::CallbackScope checked;
    auto *thread = new (std::nothrow) SpawnedThread{body, closure, {}, false};
    const int error = thread != nullptr ? pthread_create(&thread->handle, nullptr, run_spawned_thread, thread) : ENOMEM;
    if (thread != nullptr) {
        thread->started = error == 0;
    }
    if (error != 0) {
        ropegen::g_thread_start_error.store(error, std::memory_order_relaxed);
    }
    return reinterpret_cast<halide_thread *>(thread != nullptr ? thread : &g_thread_not_allocated);
}

extern "C" void halide_join_thread(struct halide_thread *handle) {
    auto *thread = reinterpret_cast<SpawnedThread *>(handle);
    if (thread == &g_thread_not_allocated) {
        return;
    }
    if (thread->started) {
        pthread_join(thread->handle, nullptr);
    }
    delete thread;
}

extern "C" rope_status rope_set_num_threads(int n) {
    ropegen::ensure_initialized();
    if (n < 1) {
        return ROPE_ERR_BAD_VALUE;
    }
    {
        const ropegen::tsan::PoolScope in_pool;  // takes the pool's lock
        halide_set_num_threads(n);
    }
    ropegen::g_pool_size_generation.fetch_add(1, std::memory_order_acq_rel);  // it may have to grow
    ropegen::settings_changed();
    return ROPE_OK;
}

extern "C" void rope_set_parallel_runner(rope_parallel_for_fn run, void *pool) {
    ropegen::ensure_initialized();
    ropegen::g_runner.set({run, run != nullptr ? pool : nullptr});
    ropegen::settings_changed();
}
