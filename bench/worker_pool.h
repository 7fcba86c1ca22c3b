// SPDX-License-Identifier: Apache-2.0
// A tiny persistent thread pool for the benchmark's baselines (memcpy and the scalar loop) at
// more than one thread. Persistent, so a multi-threaded baseline pays a wake-up per call, not a
// thread creation, as the kernels do on Halide's pool; and parts are claimed dynamically, so
// when a worker is descheduled (a small shared machine) the caller runs its part instead of
// waiting for it, again as Halide's pool does. Otherwise the baselines would look slow for
// reasons that have nothing to do with the work.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ropebench {

class WorkerPool {
public:
    /// A pool of `threads` participants: the calling thread and `threads - 1` workers.
    explicit WorkerPool(int threads);
    ~WorkerPool();
    WorkerPool(const WorkerPool &) = delete;
    WorkerPool &operator=(const WorkerPool &) = delete;

    /// Calls task(part) once for every part in [0, parts), on the calling thread and the
    /// workers, and returns when all have finished.
    template <typename Task>
    void run(int parts, Task &task) {
        run_erased(parts, [](void *context, int part) { (*static_cast<Task *>(context))(part); }, &task);
    }

private:
    using TaskFn = void (*)(void *context, int part);
    void run_erased(int parts, TaskFn fn, void *context);
    void claim_and_run(uint32_t generation, TaskFn fn, void *context, int parts);
    void worker_loop();

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<uint32_t> generation_{0};  // one per run(); workers wait for it to change
    // (generation << 32) | next unclaimed part: a worker that wakes late, after its run has
    // finished, fails to claim anything instead of running a stale task.
    std::atomic<uint64_t> claim_{0};
    std::atomic<int> finished_{0};  // parts of the current run that have completed
    TaskFn fn_ = nullptr;           // the current run, written under mutex_
    void *context_ = nullptr;
    int parts_ = 0;
    bool stop_ = false;
};

using CopyFunction = void (*)(void *dst, const void *src, size_t bytes);

inline void memcpy_bytes(void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
}

/// Part `part` of a copy of `bytes` split into `parts` cache-line-aligned slices, made by `copy`:
/// the copy baselines at more than one thread (rope_bench's memcpy, copy loop and in-place
/// rewrite, the tuner's harness's memcpy).
inline void copy_part(const void *src, void *dst, size_t bytes, int part, int parts, CopyFunction copy = memcpy_bytes) {
    const size_t lines = (bytes + 63) / 64;
    const size_t begin = std::min(bytes, lines * static_cast<size_t>(part) / static_cast<size_t>(parts) * 64);
    const size_t end = std::min(bytes, lines * static_cast<size_t>(part + 1) / static_cast<size_t>(parts) * 64);
    copy(static_cast<std::byte *>(dst) + begin, static_cast<const std::byte *>(src) + begin, end - begin);
}

}  // namespace ropebench
