// SPDX-License-Identifier: Apache-2.0
// The baselines' persistent pool (see worker_pool.h).
#include "worker_pool.h"

#include <chrono>

namespace ropebench {

namespace {

// Workers spin this long after a run before they sleep: long enough to catch the next call of a
// timed loop without a futex wake-up, short enough not to steal a shared core between benchmarks.
constexpr std::chrono::microseconds kSpinTime{200};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
    for (int i = 1; i < threads; i++) {
        workers_.emplace_back([this] { worker_loop(); });
    }
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread &worker : workers_) {
        worker.join();
    }
}

void WorkerPool::claim_and_run(uint32_t generation, TaskFn fn, void *context, int parts) {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
        const int part = static_cast<int>(claim & 0xFFFFFFFFu);
        if (static_cast<uint32_t>(claim >> 32) != generation || part >= parts) {
            return;
        }
        if (claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) {
            fn(context, part);
            finished_.fetch_add(1, std::memory_order_release);
            claim = claim_.load(std::memory_order_acquire);
        }
    }
}

void WorkerPool::run_erased(int parts, TaskFn fn, void *context) {
    if (parts <= 1 || workers_.empty()) {
        for (int part = 0; part < parts; part++) {
            fn(context, part);
        }
        return;
    }
    uint32_t generation;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = fn;
        context_ = context;
        parts_ = parts;
        finished_.store(0, std::memory_order_relaxed);
        generation = generation_.load(std::memory_order_relaxed) + 1;
        claim_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
        generation_.store(generation, std::memory_order_release);
    }
    wake_.notify_all();
    claim_and_run(generation, fn, context, parts);
    // Every part is claimed by now; wait for those a worker is still running.
    while (finished_.load(std::memory_order_acquire) != parts) {
        cpu_relax();
    }
}

void WorkerPool::worker_loop() {
    uint32_t seen = 0;
    for (;;) {
        // Spin first (the common case inside a timed loop), then sleep until the next run.
        const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
        for (int i = 0; generation_.load(std::memory_order_acquire) == seen; i++) {
            cpu_relax();
            if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
                break;
            }
        }
        TaskFn fn;
        void *context;
        int parts;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stop_) {
                return;
            }
            seen = generation_.load(std::memory_order_relaxed);
            fn = fn_;
            context = context_;
            parts = parts_;
        }
        claim_and_run(seen, fn, context, parts);
    }
}

}  // namespace ropebench
