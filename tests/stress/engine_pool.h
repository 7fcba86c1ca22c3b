// SPDX-License-Identifier: Apache-2.0
// An engine's own thread pool for rope_set_parallel_runner, as the stress tests use it.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace ropegen::test {

/// Runs each loop on `workers` threads of its own, every thread taking its indices from the last
/// down (the contract allows any thread and any order), and counts the loops it was given.
struct ReverseOrderPool {
    explicit ReverseOrderPool(int workers) : workers(workers) {
    }

    static int run(void *pool, int (*task)(void *, int), void *task_context, int count) {
        auto *self = static_cast<ReverseOrderPool *>(pool);
        self->loops.fetch_add(1, std::memory_order_relaxed);
        std::atomic<int> first_error{0};
        auto work = [&](int worker) {
            for (int i = count - 1 - worker; i >= 0; i -= self->workers) {
                if (const int result = task(task_context, i); result != 0) {
                    int none = 0;
                    first_error.compare_exchange_strong(none, result);
                }
            }
        };
        std::vector<std::thread> threads;
        for (int worker = 1; worker < self->workers; worker++) {
            threads.emplace_back(work, worker);
        }
        work(0);
        for (std::thread &thread : threads) {
            thread.join();
        }
        return first_error.load();
    }

    const int workers;
    std::atomic<int> loops{0};
};

}  // namespace ropegen::test
