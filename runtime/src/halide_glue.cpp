// SPDX-License-Identifier: Apache-2.0
// The Halide runtime hooks: errors become the caller's report (Halide's default handler prints
// and aborts), and parallel loops run on the library's pool, on the calling thread only, or on an
// engine's own pool, as the call asks.
#include <HalideRuntime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {

void init_isa_cap_from_environment();

namespace {

struct ParallelRunner {
    rope_parallel_for_fn run;
    void *pool;
};
std::atomic<const ParallelRunner *> g_runner{nullptr};

void report_halide_error(void *user_context, const char *message) {
    if (user_context != nullptr) {
        const auto *call = static_cast<const CallContext *>(user_context);
        set_report_message(call->report, std::string("Halide: ") + message);
    }
}

// The runtime prints only for debugging features the kernels are not built with; drop anything
// it would print all the same, since the library never writes to the caller's stdout/stderr.
void ignore_halide_print(void *, const char *) {
}

// A parallel loop spread over exactly `workers` tasks of the library's pool: task w runs the
// iterations w, w + workers, ...
struct StridedLoop {
    halide_task_t task;
    int min, extent, workers;
    uint8_t *closure;
};

int run_strided(void *user_context, int worker, uint8_t *closure) {
    const auto *loop = reinterpret_cast<const StridedLoop *>(closure);
    for (int i = worker; i < loop->extent; i += loop->workers) {
        if (int result = loop->task(user_context, loop->min + i, loop->closure)) {
            return result;
        }
    }
    return 0;
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

int run_par_for(const CallContext *call, void *user_context, halide_task_t task, int min, int extent,
                uint8_t *closure) {
    const int threads = call != nullptr ? call->num_threads : 0;
    if (threads == 1 || extent <= 1) {
        for (int i = 0; i < extent; i++) {
            if (int result = task(user_context, min + i, closure)) {
                return result;
            }
        }
        return 0;
    }
    if (const ParallelRunner *runner = g_runner.load(std::memory_order_acquire)) {
        EngineLoop loop{task, user_context, min, closure};
        return runner->run(runner->pool, run_engine_task, &loop, extent);
    }
    if (threads == 0 || threads >= extent) {
        return halide_default_do_par_for(user_context, task, min, extent, closure);
    }
    StridedLoop loop{task, min, extent, threads, closure};
    return halide_default_do_par_for(user_context, run_strided, 0, threads, reinterpret_cast<uint8_t *>(&loop));
}

// Parallel loops start on the calling thread, so recording the first failure in the call's
// context needs no synchronisation; the dispatcher reports it after the kernel returns.
int do_par_for(void *user_context, halide_task_t task, int min, int extent, uint8_t *closure) {
    auto *call = static_cast<CallContext *>(user_context);
    const int result = run_par_for(call, user_context, task, min, extent, closure);
    if (result != 0 && call != nullptr && call->parallel_error == 0) {
        call->parallel_error = result;
    }
    return result;
}

}  // namespace

void set_report_message(rope_report *report, const std::string &message) {
    if (report == nullptr || report->struct_size < sizeof(rope_report)) {
        return;
    }
    const size_t length = std::min(message.size(), sizeof(report->message) - 1);
    std::memcpy(report->message, message.data(), length);
    report->message[length] = '\0';
}

void ensure_initialized() {
    static std::once_flag once;
    std::call_once(once, [] {
        halide_set_error_handler(report_halide_error);
        halide_set_custom_print(ignore_halide_print);
        halide_set_custom_do_par_for(do_par_for);
        init_isa_cap_from_environment();
        if (const char *threads = std::getenv("ROPE_NUM_THREADS")) {
            const int n = std::atoi(threads);
            if (n > 0) {
                halide_set_num_threads(n);
            }
        }
    });
}

}  // namespace ropegen

extern "C" rope_status rope_set_num_threads(int n) {
    ropegen::ensure_initialized();
    if (n < 1) {
        return ROPE_ERR_BAD_VALUE;
    }
    halide_set_num_threads(n);
    return ROPE_OK;
}

extern "C" void rope_set_parallel_runner(rope_parallel_for_fn run, void *pool) {
    ropegen::ensure_initialized();
    // Runners are few and set rarely; each lives for the process so a racing call never sees a
    // freed one.
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    ropegen::g_runner.store(run != nullptr ? new ropegen::ParallelRunner{run, pool} : nullptr,
                            std::memory_order_release);
}
