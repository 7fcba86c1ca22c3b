// SPDX-License-Identifier: Apache-2.0
// Process-wide state of the runtime (CPU level, cap, thread settings) and the per-call context
// that travels through Halide as user_context.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include "ropegen/rope.h"

namespace ropegen {

/// Why a kernel could not finish. The kernels are built without asserts, so they run on after a
/// failed allocation or parallel loop; the runtime hooks record the first failure of a call and
/// then skip every later parallel loop of it (every output is written inside one).
enum class CallFailure : int {
    None = 0,
    ParallelLoop,  ///< an engine's runner or a task returned non-zero (detail: that value)
    OutOfMemory,   ///< halide_malloc could not allocate (detail: the bytes asked for)
    ThreadStart,   ///< a worker of the library's pool could not be started (detail: the errno)
    RuntimeError,  ///< the Halide runtime reported an error (a CUDA launch, ...); its message is in the report
};

/// Everything one call carries into the Halide runtime hooks (passed as user_context). Fields
/// that hooks on other threads may touch are atomics.
struct CallContext {
    CallContext(rope_report *report, int num_threads) : report(report), num_threads(num_threads) {
    }
    ~CallContext();
    CallContext(const CallContext &) = delete;
    CallContext &operator=(const CallContext &) = delete;

    rope_report *report;  ///< may be null
    int num_threads;      ///< 0: the library's pool as configured; 1: the calling thread
    void *cuda_context = nullptr;  ///< CUDA calls: the CUcontext the kernels run on
    void *cuda_stream = nullptr;   ///< CUDA calls: the CUstream they are enqueued on
    bool cuda_launch_reached = false;  ///< CUDA calls: a launch asked for its stream, after finding its module (cuda_device.cpp)
    std::atomic<bool> pool_checked{false};  ///< the library's pool was found started before the call's first loop on it

    /// A reservation up to this size lives in the context itself, on the caller's stack: a
    /// one-token call of a computed source with rotary_dim 128 (1472 bytes) then costs no malloc
    /// and free, about 80 ns of its 1 us on a Zen 4. Every larger one is allocated.
    static constexpr size_t kInlineScratchBytes = 1536;

    /// Reserves `bytes` of scratch (in the context up to kInlineScratchBytes, else through the
    /// allocator halide_malloc would use) that halide_malloc then hands out to this call's
    /// kernel, unless the reservation held (own or lent) covers them already; false if it cannot
    /// be allocated.
    bool reserve_scratch(size_t bytes);
    /// Lends `bytes` of the reservation, from `offset`, to `part`, the context of one part of
    /// this call run on its own: its kernel takes its scratch there, and `part` does not free it.
    void lend_scratch(CallContext *part, size_t offset, size_t bytes) const;
    /// Makes the whole reservation available again (between two kernel runs of one call).
    void reuse_scratch() {
        scratch_used_.store(0, std::memory_order_relaxed);
    }
    /// `bytes` of the reservation in halide_malloc's layout, or null when they do not fit.
    void *take_scratch(size_t bytes);
    bool owns_scratch(const void *pointer) const {
        return scratch_ != nullptr && pointer >= scratch_ && pointer < scratch_ + scratch_size_;
    }

    /// Records a failure unless one is recorded already; true if this one was recorded.
    bool fail(CallFailure kind, int64_t detail);
    CallFailure failure() const {
        return static_cast<CallFailure>(failure_.load(std::memory_order_acquire));
    }
    int64_t failure_detail() const {
        return failure_detail_.load(std::memory_order_acquire);
    }

private:
    static constexpr int kFailureClaimed = -1;  // a failure is being recorded

    bool scratch_allocated() const {
        return scratch_ != nullptr && !scratch_lent_ && scratch_ != inline_scratch_;
    }

    uint8_t *scratch_ = nullptr;
    size_t scratch_size_ = 0;
    bool scratch_lent_ = false;  // by the context of the whole call, which frees it
    std::atomic<size_t> scratch_used_{0};
    std::atomic<int> failure_{0};
    std::atomic<int64_t> failure_detail_{0};
    // Last: the 8 bytes halide_malloc's contract keeps readable before the first block are the
    // context's own (the padding that aligns this array), and those after the last block its
    // slot's gap (scratch_slot_bytes).
    alignas(64) uint8_t inline_scratch_[kInlineScratchBytes];
};

/// The room one kernel allocation of `bytes` takes in a scratch reservation (alignment and the
/// bytes halide_malloc must keep readable around a block included).
size_t scratch_slot_bytes(size_t bytes);

/// Initialises the runtime once (thread-safe): CPU detection, ROPE_MAX_ISA, ROPE_NUM_THREADS,
/// and the Halide hooks (error handler, allocator, parallel loop). Every public entry point calls it.
void ensure_initialized();

/// A task of run_parallel_loop: the loop's user context, the task's index and its closure.
using ParallelTask = int (*)(void *user_context, int index, uint8_t *closure);

/// Runs task(call, i, closure) for every i in [0, count) as one parallel loop of `call`, on the
/// threads its num_threads allows (the calling thread, the library's pool or an engine's runner),
/// as the kernels' own loops run. A failure of the loop (a pool that cannot start, the engine's
/// runner, a task's non-zero result) is recorded in `call` and returned.
int run_parallel_loop(CallContext *call, ParallelTask task, int count, uint8_t *closure);

/// What a call's first parallel loop does before it runs (see run_parallel_loop), without a loop:
/// for a call that may use the library's pool (num_threads other than 1, no engine runner), the
/// pool's workers are started at its current size; false, with the failure recorded in `call`,
/// when one cannot start.
bool check_pool(CallContext *call);

/// Whether an engine's parallel runner is installed (rope_set_parallel_runner).
bool engine_runner_set();

/// The library's thread count: what a call with num_threads = 0 may use (rope_set_num_threads,
/// ROPE_NUM_THREADS, else Halide's default, the CPU count).
int library_threads();

/// Counts the changes of the settings a call resolves with (rope_set_max_isa,
/// rope_set_num_threads, rope_set_parallel_runner): rope_dispatch repeats a thread's last call
/// from a plan of it (dispatch.cpp, LastCall) only while the count has not changed.
unsigned settings_generation();
void settings_changed();

/// The best level of this architecture the CPU supports, or ROPE_ISA_NONE below the baseline
/// (isa_<arch>.cpp; uncached: detected_isa() caches it).
rope_isa detect_isa();

/// The level the dispatcher may use now: detected_isa() lowered by the cap.
rope_isa usable_isa();

/// Writes `message`, then `more`, into `report` (when given), truncated to fit; allocates nothing.
void set_report_message(rope_report *report, std::string_view message, std::string_view more = {}) noexcept;

/// Resets `report` (when given and large enough) to ROPE_OK with an empty message and kernel,
/// keeping its struct_size (a newer caller's may be larger). Inline: every call starts with it.
inline void clear_report(rope_report *report) noexcept {
    if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
        report->status = ROPE_OK;
        report->message[0] = '\0';
        report->kernel[0] = '\0';
    }
}

/// Sets `report`'s status and message (when given) and returns the status; allocates nothing.
rope_status report_status(rope_report *report, rope_status status, std::string_view message) noexcept;

/// Runs `body`, a call's work returning its status, so that no exception crosses the C ABI. Its
/// paths throw only std::bad_alloc, from building a message when memory is exhausted: reported
/// as ROPE_ERR_INTERNAL without allocating. Every entry point that can allocate runs through it.
template <typename Body>
rope_status without_exceptions(rope_report *report, Body &&body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return report_status(report, ROPE_ERR_INTERNAL,
                             "out of memory inside ropegen (std::bad_alloc while building the call or its message); "
                             "outputs may be partly written");
    } catch (...) {
        return report_status(report, ROPE_ERR_INTERNAL, "an exception inside ropegen; outputs may be partly written");
    }
}

}  // namespace ropegen
