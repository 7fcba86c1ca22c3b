// SPDX-License-Identifier: Apache-2.0
// rope_dispatch(): validate, pick the first kernel of the generated table that matches the call
// and may run on this CPU, describe the caller's memory as Halide buffers (no copies), and run.
#include <HalideRuntime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "internal/cuda_device.h"
#include "internal/enum_value.h"
#include "internal/inv_freq_cache.h"
#include "internal/kernel_args.h"
#include "internal/kernel_table.h"
#include "internal/runtime_state.h"
#include "internal/tsan_annotations.h"
#include "internal/validate.h"

namespace ropegen {
namespace {

constexpr int64_t kMaxCudaGridY = 65535;  // blocks along a CUDA grid's y dimension

// The element span of `t` over the axes a slice keeps whole (and the lanes of one head).
int64_t sliced_span(const rope_tensor &t, const bool slice_axis[3]) {
    int64_t span = t.sizes[3] - 1;
    for (int axis = 0; axis < 3; axis++) {
        if (!slice_axis[axis] && t.sizes[axis] > 1) {
            span += (t.sizes[axis] - 1) * t.strides[axis];
        }
    }
    return span;
}

// True when a CUDA kernel that assumes whole 16-byte vectors (KernelEntry::vector_elements) may
// serve the call: every tensor and table starts 16-byte aligned, every stride it steps by is a
// whole number of vectors.
bool vectors_aligned(const KernelEntry &kernel, const ValidCall &call) {
    const int64_t vector = kernel.vector_elements;
    if (vector == 0) {
        return true;
    }
    auto aligned = [](const void *data) { return reinterpret_cast<uintptr_t>(data) % 16 == 0; };
    const rope_params &p = call.params;
    for (const rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        if ((call.has_k || t == &p.q || t == &p.q_out) && !tensor_aligned(*t, 16, vector)) {
            return false;
        }
    }
    if (p.angles.source != ROPE_SOURCE_CACHE) {
        return true;
    }
    const int64_t row_stride = p.angles.cache_row_stride != 0 ? p.angles.cache_row_stride : call.rotary_dim / 2;
    return aligned(p.angles.cos_cache) && aligned(p.angles.sin_cache) && (p.angles.cache_len == 1 || row_stride % vector == 0);
}

// Where a call runs: the CPU, or a CUDA device (its context and stream, in the call's context).
struct Target {
    rope_device device = ROPE_DEVICE_CPU;
    rope_isa max_isa = ROPE_ISA_NONE;  // CPU
    int capability = 0;                // CUDA
};

const KernelEntry *select_kernel(const ValidCall &call, const Target &target) {
    const bool cuda = target.device == ROPE_DEVICE_CUDA;
    const KernelIndex &index = cuda ? cuda_kernel_index() : kernel_index();
    const int max_level = cuda ? target.capability : static_cast<int>(target.max_isa);
    const rope_params &p = call.params;
    // Only the call's key at each level it may use, best first: scanning the table up to its
    // key cost a decode call up to 70 ns on a Zen 3, and testing a CUDA entry's alignment before
    // its key 0.5-0.7 us on the host of a lent H100 (bench/README.md).
    for (int level = 0; level < index.levels; level++) {
        if (index.level[level] > max_level) {
            continue;
        }
        const KernelRun &run = index.runs[level][p.style][p.angles.source][p.q.dtype];
        for (const KernelEntry *kernel = run.begin; kernel != run.end; kernel++) {
            if (kernel_matches(*kernel, p) && (cuda ? vectors_aligned(*kernel, call)
                                                    : pair_words_fit(*kernel, p) && call_class_fits(*kernel, p))) {
                return kernel;
            }
        }
    }
    return nullptr;
}

void set_report_kernel(rope_report *report, const char *name) {
    if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
        std::strncpy(report->kernel, name, sizeof(report->kernel) - 1);
        report->kernel[sizeof(report->kernel) - 1] = '\0';
    }
}

rope_status finish(rope_report *report, rope_status status, std::string_view message) {
    if (!message.empty() || status == ROPE_OK) {
        return report_status(report, status, message);
    }
    if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
        report->status = status;
    }
    return status;
}

rope_status begin(const rope_params *params, rope_report *report, ValidCall *call, PositionRule *position_rule = nullptr) {
    ensure_initialized();
    clear_report(report);
    std::string message;
    const rope_status status = validate(params, call, &message, position_rule);
    return finish(report, status, message);
}

// The message a Halide runtime error left in the report (see report_halide_error), or "".
std::string halide_message(const rope_report *report) {
    if (report == nullptr || report->struct_size < sizeof(rope_report) || report->message[0] == '\0') {
        return "";
    }
    return std::string(": ") + report->message;
}

// What went wrong inside a kernel, and what it means for the outputs. Only a failure of a loop
// that had already started (an engine's runner or a task) or a runtime error (a CUDA launch: the
// launches enqueued before it still run) can leave outputs partly written.
std::string failure_message(const CallContext &context, const KernelEntry &kernel, bool earlier_slices_written) {
    const int64_t detail = context.failure_detail();
    const std::string written = earlier_slices_written ? "; the slices of the call before it were written"
                                                       : "; no output was written";
    switch (context.failure()) {
    case CallFailure::OutOfMemory:
        return "out of memory: kernel " + std::string(kernel.name) + " could not allocate " + std::to_string(detail) +
               " bytes of scratch" + written;
    case CallFailure::ThreadStart:
        return "could not start a worker thread of the library's thread pool (pthread_create: " +
               std::error_code(static_cast<int>(detail), std::generic_category()).message() +
               "); the pool goes on with the threads it has" + written;
    case CallFailure::RuntimeError:
        return "kernel " + std::string(kernel.name) + " failed" + halide_message(context.report) +
               "; outputs may be partly written" +
               (earlier_slices_written ? ", and the launches for earlier slices of the call were enqueued" : "");
    default:
        return "a parallel loop of kernel " + std::string(kernel.name) + " failed with " + std::to_string(detail) +
               " (returned by the engine's parallel runner or a task); outputs may be partly written";
    }
}

// The threads a CPU call may use (CallContext::num_threads; 1 = the calling thread). A small call
// asked to use the library's pool runs on the caller's (kSerialCallBytes). An engine's runner
// gets every call that may use more than one thread, small ones included: how much waking its
// pool costs is the engine's to judge (num_threads = 1 keeps a call on the calling thread).
int call_threads(const ValidCall &call) {
    const rope_params &p = call.params;
    if (p.num_threads != 0 || engine_runner_set()) {
        return p.num_threads;
    }
    return call_bytes(p) < kSerialCallBytes ? 1 : 0;
}

std::string scratch_failure(const KernelEntry &kernel, size_t bytes) {
    return "out of memory: could not reserve " + std::to_string(bytes) + " bytes of cos/sin scratch for kernel " +
           kernel.name + "; no output was written";
}

// True when no axis of the call needs slicing on the CPU (axes_beyond_int32_strides).
bool unsliced(const ValidCall &call) {
    const SlicedAxes sliced = axes_beyond_int32_strides(call);
    return !sliced.axis[0] && !sliced.axis[1] && !sliced.axis[2];
}

// The status of a kernel run that returned `result` (`earlier_slices_written`: slices of the
// call ran before it).
rope_status launch_status(const KernelEntry &kernel, int result, const CallContext &context, rope_report *report,
                          bool earlier_slices_written) {
    const bool on_device = kernel.cuda_capability != 0;
    if (result == 0 && context.failure() != CallFailure::None) {
        const bool device_error = on_device && context.failure() == CallFailure::RuntimeError;
        return finish(report, device_error ? ROPE_ERR_DEVICE : ROPE_ERR_INTERNAL,
                      failure_message(context, kernel, earlier_slices_written));
    }
    if (result != 0) {
        std::string message =
            "kernel " + std::string(kernel.name) + " failed with Halide error " + std::to_string(result) + halide_message(report);
        if (on_device && earlier_slices_written) {
            message += "; the launches for earlier slices of the call were enqueued";
        }
        return finish(report, on_device ? ROPE_ERR_DEVICE : ROPE_ERR_INTERNAL, message);
    }
    return ROPE_OK;
}

// Runs the kernel on arguments built before (a plan's, which its runs share: launch). `context`
// holds the scratch.
rope_status run_args(const KernelEntry &kernel, const ValidCall &call, const KernelArgs &built, rope_report *report,
                     CallContext &context) {
    if (const rope_status status = launch_status(kernel, launch(kernel, call, built, &context), context, report, false);
        status != ROPE_OK) {
        return status;
    }
    return finish(report, ROPE_OK, "");
}

// Runs `kernel` over every slice of the call, on the CPU or, for a CUDA kernel, enqueued on the
// stream of `cuda` (a CUDA call returns once its launches are enqueued). `context` carries the
// threads the call may use and, when lent, its scratch.
rope_status run(const KernelEntry &kernel, const ValidCall &call, const CudaTarget &cuda, rope_report *report,
                CallContext &context) {
    const rope_params &p = call.params;
    const bool on_device = kernel.cuda_capability != 0;
    const rope_tensor *tensors[] = {&p.q, &p.k, &p.q_out, &p.k_out};
    const int64_t batch = p.q.sizes[0], seq = p.q.sizes[1];

    void *placeholder = unused_input();
    if (on_device) {
        placeholder = p.q_out.data;  // a non-empty output: run_call returns early when both are empty
        if (p.q.sizes[2] == 0) {
            placeholder = p.k_out.data;
        }
    }
    SharedArgs shared = shared_args(call, placeholder);

    // Axes to slice: strides beyond Halide's int32 dimensions; for CUDA kernels (32-bit indexing)
    // also spans of 2^31 elements or more, slicing batch, then seq, then heads until each fits.
    SlicedAxes sliced = axes_beyond_int32_strides(call);
    bool(&slice_axis)[3] = sliced.axis;
    // The kernel indexes the positions with one 32-bit offset: the batch and seq spans add up.
    for (int axis = 0; on_device && axis < 3; axis++) {
        const int64_t pos_span = (slice_axis[0] ? 0 : (batch - 1) * shared.pos_batch_stride) +
                                 (slice_axis[1] ? 0 : (seq - 1) * shared.pos_seq_stride);
        bool fits = pos_span <= kMaxStride;
        for (int t = 0; t < 4; t++) {
            fits = fits && ((t % 2 == 1 && !call.has_k) || sliced_span(*tensors[t], slice_axis) <= kMaxStride);
        }
        if (fits) {
            break;
        }
        slice_axis[axis] = true;
    }
    context.cuda_context = cuda.context;
    context.cuda_stream = cuda.stream;
    const size_t scratch = on_device ? 0 : kernel_scratch_bytes(call, slice_axis[0] ? 1 : batch, slice_axis[1] ? 1 : seq);
    if (!context.reserve_scratch(scratch)) {
        return finish(report, ROPE_ERR_INTERNAL, scratch_failure(kernel, scratch));
    }

    // Batch items per slice: one when sliced; otherwise all, except that a CUDA kernel's grid
    // holds at most kMaxCudaGridY of them (its blocks are (seq, batch)). A part of a batch spans
    // less than the whole, which the loop above proved fits.
    const int64_t batch_step = slice_axis[0] ? 1 : (on_device ? std::min(batch, kMaxCudaGridY) : batch);
    const int64_t steps[3] = {batch_step > 0 ? (batch + batch_step - 1) / batch_step : 1, slice_axis[1] ? seq : 1,
                              slice_axis[2] ? std::max(p.q.sizes[2], call.has_k ? p.k.sizes[2] : 0) : 1};
    for (int64_t part = 0; part < steps[0]; part++) {
        const int64_t first_item = part * batch_step;
        for (int64_t s = 0; s < steps[1]; s++) {
            for (int64_t h = 0; h < steps[2]; h++) {
                const Slice slice{{first_item, slice_axis[1] ? s : 0, slice_axis[2] ? h : 0},
                                  {std::min(batch_step, batch - first_item), slice_axis[1] ? 1 : seq, slice_axis[2] ? 1 : -1}};
                const bool q_present = !slice_axis[2] || h < p.q.sizes[2];
                const bool k_present = call.has_k && (!slice_axis[2] || h < p.k.sizes[2]);
                KernelArgs args = slice_args(kernel, call, shared, slice, q_present, k_present);
                int result = 0;
#if ROPEGEN_CUDA
                halide_buffer_t *buffers[] = {
                    &args.q.input.raw,      &args.k.input.raw,         &args.positions.raw,
                    &shared.cos_table.raw,  &shared.sin_table.raw,     &shared.cos_narrow.raw,
                    &shared.sin_narrow.raw, &args.q.rotated.raw,       &args.q.lead.raw,
                    &args.q.tail.raw,       &args.k.rotated.raw,       &args.k.lead.raw,
                    &args.k.tail.raw,       &shared.short_factor.raw,  &shared.long_factor.raw,
                    &shared.given_inv_freq.raw};
                for (halide_buffer_t *buffer : buffers) {
                    result = on_device && result == 0 ? attach_device_memory(&context, buffer) : result;
                }
#endif
                context.reuse_scratch();  // the previous slice's kernel has returned
                if (result == 0) {
                    result = launch(kernel, call, args, &context);
                }
#if ROPEGEN_CUDA
                for (halide_buffer_t *buffer : buffers) {
                    if (on_device) {
                        detach_device_memory(&context, buffer);
                    }
                }
#endif
                if (const rope_status status = launch_status(kernel, result, context, report, part + s + h > 0);
                    status != ROPE_OK) {
                    return status;
                }
            }
        }
    }
    return finish(report, ROPE_OK, "");
}

// Narrows the call to items [start, start + length) of `axis` (0: batch, 1: seq) of its tensors
// and of a positions table.
void narrow_axis(ValidCall *call, int axis, int64_t start, int64_t length) {
    rope_params &p = call->params;
    const int64_t element = static_cast<int64_t>(dtype_bytes(p.q.dtype));
    for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
        if (call->has_k || (t != &p.k && t != &p.k_out)) {
            t->data = static_cast<uint8_t *>(t->data) + start * t->strides[axis] * element;
            t->sizes[axis] = length;
        }
    }
    if (p.positions.kind == ROPE_POSITIONS_TABLE) {
        const int64_t index_bytes = p.positions.index_type == ROPE_INDEX_INT64 ? 8 : 4;
        p.positions.data = static_cast<const uint8_t *>(p.positions.data) + start * p.positions.strides[axis] * index_bytes;
    }
}

// A varlen (THD) call: one kernel call over every packed token when no value depends on the
// sequence (a position per token, no per-sequence scaling), else one per non-empty sequence, as a
// [1, length] call with its own positions: no work for the padding a dense batch would need.
// `threads`: what call_threads gave the whole call (a plan's, when it was made); 1 keeps every
// sequence on the calling thread, else each takes what call_threads gives it.
rope_status run_varlen(const KernelEntry &kernel, const ValidCall &call, int threads, const CudaTarget &cuda,
                       rope_report *report) {
    const rope_params &p = call.params;
    const auto sequence_threads = [threads](const ValidCall &sequence) { return threads == 1 ? 1 : call_threads(sequence); };
    if (p.positions.kind == ROPE_POSITIONS_TABLE && !per_sequence_scaling(p)) {
        CallContext context(report, threads);
        return run(kernel, call, cuda, report, context);
    }
    // One reservation, the longest sequence's, before any sequence runs: an allocation that
    // fails then leaves every output as it was.
    int64_t longest = 0;
    for (int64_t b = 0; b < p.varlen.num_seqs; b++) {
        longest = std::max(longest, sequence_start(p.varlen, b + 1) - sequence_start(p.varlen, b));
    }
    // And the library's pool, if the longest sequence may use it: a small first sequence runs
    // on the calling thread, so a worker that cannot start for a later one fails the call here.
    ValidCall longest_sequence = call;
    narrow_axis(&longest_sequence, 1, 0, longest);
    CallContext context(report, sequence_threads(longest_sequence));
    if (const size_t scratch = kernel_scratch_bytes(call, 1, longest); !context.reserve_scratch(scratch)) {
        return finish(report, ROPE_ERR_INTERNAL, scratch_failure(kernel, scratch));
    }
    if (kernel.cuda_capability == 0 && !check_pool(&context)) {
        return finish(report, ROPE_ERR_INTERNAL, failure_message(context, kernel, false));
    }
    const bool int64_offsets = p.positions.index_type == ROPE_INDEX_INT64;
    bool written = false;
    for (int64_t b = 0; b < p.varlen.num_seqs; b++) {
        const int64_t start = sequence_start(p.varlen, b), length = sequence_start(p.varlen, b + 1) - start;
        if (length == 0) {
            continue;
        }
        ValidCall part = call;
        narrow_axis(&part, 1, start, length);
        rope_positions &pos = part.params.positions;
        if (pos.kind == ROPE_POSITIONS_OFFSET && pos.data != nullptr) {  // this sequence's offset, as the scalar one
            pos.offset = int64_offsets ? static_cast<const int64_t *>(pos.data)[b * pos.strides[0]]
                                       : static_cast<const int32_t *>(pos.data)[b * pos.strides[0]];
            pos.data = nullptr;
        }
        context.num_threads = sequence_threads(part);
        if (const rope_status status = run(kernel, part, cuda, report, context); status != ROPE_OK) {
            const std::string message = report != nullptr && report->struct_size >= sizeof(rope_report) ? report->message : "";
            return finish(report, status,
                          "sequence " + std::to_string(b) + " of the varlen call: " + message +
                              (written ? "; the sequences before it were written" : ""));
        }
        written = true;
    }
    return finish(report, ROPE_OK, "");
}

// A CPU decode step that fold_decode_batch may fold: a batch of one-token sequences, unless the
// frequencies depend on the batch item (per-sequence scaling) or positions come in mrope streams.
bool foldable_decode_step(const rope_params &p) {
    return p.device == ROPE_DEVICE_CPU && p.varlen.cu_seqlens == nullptr && p.q.sizes[1] == 1 && p.q.sizes[0] >= 2 &&
           !per_sequence_scaling(p) && !uses_mrope(p);
}

// A foldable decode step, a batch of B one-token sequences ([B, 1]), as `parts` sequences of B/parts
// tokens ([parts, B/parts]) over the same memory, with each token's position: a part per thread
// (run_decode_parts), and in each the kernels' loops run over B/parts tokens of one sequence, where
// B/parts one-token sequences would each make a loop tail (about 1.5x slower at B >= 64). `parts`
// is the largest divisor of B not above the threads the call may use (`threads`, as call_threads
// gives it: 0 is the library's count). Only for a call foldable_decode_step accepts (it relies on
// batch >= 2). `scalar_position` holds a scalar offset for the folded call's position table and
// must outlive it. The call is folded in place, or left as it was when a folded stride would not
// fit (a view without elements may have any strides): false.
bool fold_decode_batch(ValidCall *call, int threads, int64_t *scalar_position) {
    rope_params &p = call->params;
    const int64_t batch = p.q.sizes[0];
    int64_t parts = std::clamp<int64_t>(threads == 0 ? library_threads() : threads, 1, batch);
    while (batch % parts != 0) {
        parts--;
    }
    const int64_t tokens = batch / parts;
    // The call's tensors: without k, q and q_out (k and k_out are not part of the call).
    rope_tensor *tensors[] = {&p.q, call->has_k ? &p.k : &p.q_out, &p.q_out, &p.k_out};
    const int tensor_count = call->has_k ? 4 : 2;
    rope_positions &pos = p.positions;
    const bool scalar_offset = pos.kind == ROPE_POSITIONS_OFFSET && pos.data == nullptr;  // every token at one position
    // A table's [b][0], or OFFSET's offset[b] (+ s = 0): both become [b / tokens][b % tokens].
    const int64_t item_stride = scalar_offset ? 0 : pos.strides[0];
    int64_t batch_strides[4], position_batch_stride = 0;
    for (int t = 0; t < tensor_count; t++) {
        if (__builtin_mul_overflow(tensors[t]->strides[0], tokens, &batch_strides[t])) {
            return false;
        }
    }
    if (__builtin_mul_overflow(item_stride, tokens, &position_batch_stride)) {
        return false;
    }
    for (int t = 0; t < tensor_count; t++) {
        tensors[t]->sizes[0] = parts, tensors[t]->sizes[1] = tokens;
        tensors[t]->strides[1] = tensors[t]->strides[0];
        tensors[t]->strides[0] = batch_strides[t];
    }
    if (scalar_offset) {
        *scalar_position = pos.offset;
        pos.data = scalar_position, pos.index_type = ROPE_INDEX_INT64;
    }
    pos.kind = ROPE_POSITIONS_TABLE;
    pos.strides[1] = item_stride;
    pos.strides[0] = position_batch_stride;
    return true;
}

// A folded decode step of several parts, run as one parallel loop of a task per part, each the
// kernel on its part alone on the thread that runs the task: one hand-off to the pool per step,
// where the kernel's own loops would make one per output (q, then k) and split a part's few
// tokens finer than pays (f32 decode on the bench's pool at 2 threads on a 2-vCPU Zen 4 VM:
// batch 8, 3.8-4.2 us -> 3.4 us; batch 64, 18 us -> 12-14 us).
struct DecodeParts {
    const KernelEntry *kernel;
    const ValidCall *folded;     // a part per batch item
    const CallContext *whole;    // holds the scratch of every part
    size_t part_scratch;
    const KernelArgs *built;     // a plan's arguments of each part, or null
    std::atomic<int> failed_part{-1};  // the first part to fail, with its status and report
    rope_status status = ROPE_OK;
    rope_report report = rope_report_init();
};

int run_decode_part(void *, int part, uint8_t *closure) {
    const tsan::CallbackScope checked;
    tsan::handoff_acquire(closure);
    auto *parts = reinterpret_cast<DecodeParts *>(closure);
    rope_report report = rope_report_init();
    CallContext context(&report, 1);
    parts->whole->lend_scratch(&context, part * parts->part_scratch, parts->part_scratch);
    // On a worker of the pool: an exception would end inside Halide's runtime.
    const rope_status status = without_exceptions(&report, [&] {
        if (parts->built != nullptr) {
            return run_args(*parts->kernel, *parts->folded, parts->built[part], &report, context);
        }
        ValidCall one = *parts->folded;
        narrow_axis(&one, 0, part, 1);
        return run(*parts->kernel, one, CudaTarget{}, &report, context);
    });
    int none = -1;
    if (status != ROPE_OK && parts->failed_part.compare_exchange_strong(none, part)) {
        parts->status = status;
        parts->report = report;
    }
    tsan::handoff_release(closure);
    return 0;
}

rope_status run_decode_parts(const KernelEntry &kernel, const ValidCall &folded, int threads, rope_report *report,
                             const KernelArgs *built) {
    const int64_t parts = folded.params.q.sizes[0];
    CallContext whole(report, threads);
    const size_t part_scratch = kernel_scratch_bytes(folded, 1, folded.params.q.sizes[1]);
    size_t scratch = 0;
    if (__builtin_mul_overflow(part_scratch, static_cast<size_t>(parts), &scratch)) {
        scratch = std::numeric_limits<size_t>::max();  // no allocator can serve it: out of memory
    }
    if (!whole.reserve_scratch(scratch)) {
        return finish(report, ROPE_ERR_INTERNAL, scratch_failure(kernel, scratch));
    }
    DecodeParts loop{&kernel, &folded, &whole, part_scratch, built};
    if (run_parallel_loop(&whole, run_decode_part, static_cast<int>(parts), reinterpret_cast<uint8_t *>(&loop)) != 0) {
        return finish(report, ROPE_ERR_INTERNAL, failure_message(whole, kernel, false));
    }
    if (const int part = loop.failed_part.load(); part >= 0) {
        return finish(report, loop.status,
                      "part " + std::to_string(part) + " of " + std::to_string(parts) + " of the decode step: " +
                          loop.report.message + "; the other parts may have been written");
    }
    return finish(report, ROPE_OK, "");
}

// A CPU compat call without scaling takes its frequencies from the cache (inv_freq_cache.h) as
// a table of frequencies, which its kernel reads instead of computing them: the same bits.
void use_cached_inv_freq(const KernelEntry &kernel, ValidCall &call) {
    rope_scaling &scaling = call.params.scaling;
    if (kernel.cuda_capability != 0 || call.params.angles.source != ROPE_SOURCE_COMPAT || scaling.type != ROPE_SCALING_NONE) {
        return;
    }
    if (const float *inv_freq = cached_compat_inv_freq(call.base, call.rotary_dim)) {
        scaling.type = ROPE_SCALING_INV_FREQ;
        scaling.inv_freq = inv_freq;
    }
}

// A validated call made ready for its kernel (prepare_call), in place: its frequencies taken
// from the cache and, for a decode step, its batch folded. Not copyable: a folded scalar offset
// points at scalar_position.
struct ReadyCall {
    explicit ReadyCall(ValidCall *call) : call(call) {
    }
    ReadyCall(const ReadyCall &) = delete;
    ReadyCall &operator=(const ReadyCall &) = delete;

    ValidCall *call;
    bool nothing_to_rotate = false;
    bool decode_parts = false;  // run as run_decode_parts' parts
    int threads = 1;            // call_threads
    int64_t scalar_position = 0;
};

// `threads`: what call_threads gives the call (a plan's, as it was when the plan was made);
// `fold_threads`: the threads a decode step is split for, as `threads` (0: the library's count
// now) or, for a plan, that count as it was when the plan was made.
void prepare_call(const KernelEntry &kernel, int threads, int fold_threads, ReadyCall *ready) {
    ValidCall &call = *ready->call;
    const rope_params &p = call.params;
    if (p.q.sizes[0] == 0 || p.q.sizes[1] == 0 || (p.q.sizes[2] == 0 && (!call.has_k || p.k.sizes[2] == 0))) {
        ready->nothing_to_rotate = true;  // no scratch, no kernel, whatever the sizes
        return;
    }
    use_cached_inv_freq(kernel, call);
    ready->threads = threads;
    ready->decode_parts = foldable_decode_step(p) && fold_decode_batch(&call, fold_threads, &ready->scalar_position) &&
                          p.q.sizes[0] > 1;
}

// Runs `kernel` on a call prepare_call made ready: dense, varlen, or a decode step in parts;
// from a plan's arguments (`built`: one per part, else one) where it has them.
rope_status run_ready(const KernelEntry &kernel, const ReadyCall &ready, const CudaTarget &cuda, rope_report *report,
                      const KernelArgs *built = nullptr) {
    const ValidCall &call = *ready.call;
    if (ready.nothing_to_rotate) {
        return finish(report, ROPE_OK, "");
    }
    if (call.params.varlen.cu_seqlens != nullptr) {
        return run_varlen(kernel, call, ready.threads, cuda, report);
    }
    if (ready.decode_parts) {
        return run_decode_parts(kernel, call, ready.threads, report, built);
    }
    CallContext context(report, ready.threads);
    if (built == nullptr) {
        return run(kernel, call, cuda, report, context);
    }
    const size_t scratch = kernel_scratch_bytes(call, call.params.q.sizes[0], call.params.q.sizes[1]);
    if (!context.reserve_scratch(scratch)) {
        return finish(report, ROPE_ERR_INTERNAL, scratch_failure(kernel, scratch));
    }
    return run_args(kernel, call, *built, report, context);
}

// Runs `kernel` on a validated call, made ready in place (`call` is the caller's copy, which it
// does not read again), not in a copy of the whole call.
rope_status run_call(const KernelEntry &kernel, ValidCall &call, const CudaTarget &cuda, rope_report *report) {
    ReadyCall ready(&call);
    const int threads = call_threads(call);
    prepare_call(kernel, threads, threads, &ready);
    return run_ready(kernel, ready, cuda, report);
}

// Where the call runs: the capped CPU level, or the CUDA device of the call's context and stream.
rope_status resolve_target(const ValidCall &call, Target *target, CudaTarget *cuda, rope_report *report) {
    target->device = call.params.device;
    if (target->device == ROPE_DEVICE_CPU) {
        target->max_isa = usable_isa();
        return ROPE_OK;
    }
#if ROPEGEN_CUDA
    std::string message;
    if (const rope_status status = prepare_cuda_call(call, cuda, &message); status != ROPE_OK) {
        return finish(report, status, message);
    }
    target->capability = cuda->capability;
    return ROPE_OK;
#else
    (void)cuda;
    return finish(report, ROPE_ERR_UNSUPPORTED,
                  "device=ROPE_DEVICE_CUDA: this library was built without CUDA kernels (ROPEGEN_CUDA_LEVELS=none)");
#endif
}

// Validates the call (begin) and resolves where it runs.
rope_status begin_on_target(const rope_params *params, rope_report *report, ValidCall *call, Target *target,
                            CudaTarget *cuda, PositionRule *position_rule = nullptr) {
    if (const rope_status status = begin(params, report, call, position_rule); status != ROPE_OK) {
        return status;
    }
    return resolve_target(*call, target, cuda, report);
}

// A compute capability as NVIDIA writes it: 86 -> "8.6".
std::string capability_name(int capability) {
    return std::to_string(capability / 10) + "." + std::to_string(capability % 10);
}

std::string no_kernel_message(const Target &target) {
    if (target.device == ROPE_DEVICE_CUDA) {
        return "no CUDA kernel built for this call runs on compute capability " + capability_name(target.capability) +
               "; check ROPEGEN_CUDA_LEVELS/ROPEGEN_DTYPES of the build";
    }
    size_t level_count = 0;
    const IsaLevel *levels = isa_levels(&level_count);
    const std::string below_baseline =
        std::string(" (the CPU lacks ") + levels[level_count - 1].name + ", this architecture's baseline)";
    return std::string("no kernel built for this call runs at ISA level ") + isa_name(target.max_isa) +
           (target.max_isa == ROPE_ISA_NONE ? below_baseline : "") +
           "; check ROPEGEN_ISAS/ROPEGEN_DTYPES of the build and ROPE_MAX_ISA";
}

rope_status dispatch_call(const rope_params *params, rope_report *report, bool execute) {
    ValidCall call;
    Target target;
    CudaTarget cuda;
    if (const rope_status status = begin_on_target(params, report, &call, &target, &cuda); status != ROPE_OK) {
        return status;
    }
    const KernelEntry *kernel = select_kernel(call, target);
    if (kernel == nullptr) {
        return finish(report, ROPE_ERR_UNSUPPORTED, no_kernel_message(target));
    }
    set_report_kernel(report, kernel->name);
    return execute ? run_call(*kernel, call, cuda, report) : finish(report, ROPE_OK, "");
}

// Why a CUDA kernel cannot run on `device` (the target's), older than its compute capability
// ("" where it can, and for CPU kernels).
std::string capability_shortfall(const KernelEntry &kernel, const Target &target, const char *device) {
    if (kernel.cuda_capability <= target.capability) {
        return "";
    }
    return std::string("kernel ") + kernel.name + " needs compute capability " + capability_name(kernel.cuda_capability) +
           "; " + device + " has " + capability_name(target.capability);
}

rope_status run_one_kernel(const KernelEntry &kernel, const rope_params *params, rope_report *report) {
    ValidCall call;
    rope_status status = begin(params, report, &call);
    if (status != ROPE_OK) {
        return status;
    }
    const bool cuda_kernel = kernel.cuda_capability != 0;
    if (!kernel_matches(kernel, call.params) || cuda_kernel != (call.params.device == ROPE_DEVICE_CUDA)) {
        return finish(report, ROPE_ERR_UNSUPPORTED, std::string("kernel ") + kernel.name + " does not serve this call");
    }
    Target target;
    CudaTarget cuda;
    if (status = resolve_target(call, &target, &cuda, report); status != ROPE_OK) {
        return status;
    }
    if (const std::string shortfall = capability_shortfall(kernel, target, "the device"); !shortfall.empty()) {
        return finish(report, ROPE_ERR_UNSUPPORTED, shortfall);
    }
    if (cuda_kernel && !vectors_aligned(kernel, call)) {
        return finish(report, ROPE_ERR_UNSUPPORTED,
                      std::string("kernel ") + kernel.name + " needs 16-byte aligned data with strides in whole vectors");
    }
    if (!cuda_kernel && !pair_words_fit(kernel, call.params)) {
        return finish(report, ROPE_ERR_UNSUPPORTED, std::string("kernel ") + kernel.name +
                                                        " stores its 16-bit lanes as 32-bit words: it needs q_out and k_out "
                                                        "4-byte aligned with even strides");
    }
    if (!cuda_kernel && kernel.isa > detected_isa()) {
        return finish(report, ROPE_ERR_UNSUPPORTED, std::string("kernel ") + kernel.name + " needs " + isa_name(kernel.isa) +
                                                        "; this CPU supports " + isa_name(detected_isa()));
    }
    set_report_kernel(report, kernel.name);
    return run_call(kernel, call, cuda, report);
}

}  // namespace
}  // namespace ropegen

// A call validated and resolved once (rope_plan_create), to run many times (rope_plan_run). A
// run writes nothing here.
struct rope_plan {
    ropegen::ValidCall validated;  // as validated: its positions are checked against `position_rule` at every run
    ropegen::PositionRule position_rule;
    bool validate_every_run = false;  // validation reads more than positions (validation_reads_positions_only)
    const ropegen::KernelEntry *kernel = nullptr;
    int threads = 1;       // call_threads when the plan was made
    int fold_threads = 1;  // the threads a decode step is split for, resolved then (prepare_call)
    ropegen::ValidCall ready_call;  // `validated` made ready for `kernel`, unless validate_every_run
    ropegen::ReadyCall ready{&ready_call};
    // The kernel's arguments (one per part of a decode step, else one, all sharing `shared`),
    // unless the call is run in slices (run), has nothing to rotate or validate_every_run. Runs
    // share them (launch).
    std::optional<ropegen::SharedArgs> shared;
    std::vector<ropegen::KernelArgs> args;
};

namespace ropegen {
namespace {

rope_status create_plan(const rope_params *params, rope_plan **out, rope_report *report) {
    if (out == nullptr) {
        clear_report(report);
        return finish(report, ROPE_ERR_NULL_POINTER, "plan is NULL; rope_plan_create writes the new plan there");
    }
    *out = nullptr;
    std::unique_ptr<rope_plan> plan(new (std::nothrow) rope_plan);
    if (plan == nullptr) {
        clear_report(report);
        return finish(report, ROPE_ERR_INTERNAL, "out of memory: could not allocate a rope_plan");
    }
    Target target;
    CudaTarget cuda;
    if (const rope_status status = begin_on_target(params, report, &plan->validated, &target, &cuda, &plan->position_rule);
        status != ROPE_OK) {
        return status;
    }
    plan->kernel = select_kernel(plan->validated, target);
    if (plan->kernel == nullptr) {
        return finish(report, ROPE_ERR_UNSUPPORTED, no_kernel_message(target));
    }
    plan->threads = call_threads(plan->validated);
    plan->fold_threads = plan->threads == 0 && foldable_decode_step(plan->validated.params) ? library_threads()
                                                                                             : plan->threads;
    plan->validate_every_run = !validation_reads_positions_only(plan->validated.params);
    if (!plan->validate_every_run) {
        plan->ready_call = plan->validated;
        prepare_call(*plan->kernel, plan->threads, plan->fold_threads, &plan->ready);
        if (!plan->ready.nothing_to_rotate && unsliced(plan->ready_call)) {
            plan->shared.emplace(shared_args(plan->ready_call, unused_input()));
            const int64_t batch = plan->ready_call.params.q.sizes[0];
            if (plan->ready.decode_parts) {  // a part per batch item of the folded call
                for (int64_t part = 0; part < batch; part++) {
                    plan->args.push_back(items_args(*plan->kernel, plan->ready_call, *plan->shared, part, 1));
                }
            } else {
                plan->args.push_back(items_args(*plan->kernel, plan->ready_call, *plan->shared, 0, batch));
            }
        }
    }
    set_report_kernel(report, plan->kernel->name);
    *out = plan.release();
    return finish(report, ROPE_OK, "");
}

rope_status run_plan(const rope_plan *plan, rope_report *report) {
    if (plan == nullptr) {
        clear_report(report);
        return finish(report, ROPE_ERR_NULL_POINTER, "plan is NULL");
    }
    if (plan->validate_every_run) {
        ValidCall call;
        Target target;
        CudaTarget cuda;
        if (const rope_status status = begin_on_target(&plan->validated.params, report, &call, &target, &cuda);
            status != ROPE_OK) {
            return status;
        }
        // A CUDA call without a stream runs on the running thread's context, maybe another device.
        if (const std::string shortfall = capability_shortfall(*plan->kernel, target, "the device of this run");
            !shortfall.empty()) {
            return finish(report, ROPE_ERR_UNSUPPORTED, "the plan's " + shortfall);
        }
        set_report_kernel(report, plan->kernel->name);
        ReadyCall ready(&call);
        prepare_call(*plan->kernel, plan->threads, plan->fold_threads, &ready);
        return run_ready(*plan->kernel, ready, cuda, report);
    }
    clear_report(report);
    std::string message;
    if (const rope_status status = validate_positions(plan->validated, plan->position_rule, &message); status != ROPE_OK) {
        return finish(report, status, message);
    }
    set_report_kernel(report, plan->kernel->name);
    return run_ready(*plan->kernel, plan->ready, CudaTarget{}, report, plan->args.empty() ? nullptr : plan->args.data());
}

// The last call rope_dispatch ran on a thread, kept to repeat it from a plan. An engine that
// rotates the same buffers at every step passes byte-identical rope_params each time (only the
// memory behind them changes; the padding between fields counts too); a plan's run checks the positions again but not the rest of the
// struct, and builds no kernel arguments (decode batch 8 f32 at 2 threads: bench/README.md).
// The second call in a row with the same bytes makes the plan; a call a plan would validate
// whole at every run (a CUDA call, one whose validation reads more than positions) gets none.
// The settings a plan fixes (settings_generation) drop it when they change.
class LastCall {
public:
    // The plan of `params` when it repeats the last call and one could be made, else null.
    const rope_plan *repeat(const rope_params *params) {
        const size_t fields = params_fields(params);  // no more bytes than validation reads
        const unsigned generation = settings_generation();
        if (fields == 0) {  // validation refuses the header
            fields_ = 0;
            return nullptr;
        }
        if (fields != fields_ || generation != generation_ || std::memcmp(params, &last_, fields) != 0) {
            std::memcpy(&last_, params, fields);  // then zeros, as validation reads an older layout
            std::memset(reinterpret_cast<uint8_t *>(&last_) + fields, 0, sizeof(last_) - fields);
            fields_ = fields, generation_ = generation;
            plan_.reset();
            planned_ = !validation_reads_positions_only(last_);  // a plan would validate it whole
            return nullptr;
        }
        if (!planned_) {
            rope_plan *plan = nullptr;
            if (rope_plan_create(params, &plan, nullptr) == ROPE_OK) {  // else (positions out of range, ...) next time
                planned_ = true;
                plan_.reset(plan);
            }
        }
        return plan_.get();
    }

    // Runs the plan repeat() returned. A call nested in it (an engine's runner that runs other
    // work while its loop waits) must not replace the plan that is running: it bypasses the
    // thread's last call.
    rope_status run(const rope_plan *plan, rope_report *report) {
        struct Running {
            bool &flag;
            explicit Running(bool &flag) : flag(flag) {
                flag = true;
            }
            ~Running() {
                flag = false;
            }
        } running(running_);
        return run_plan(plan, report);
    }
    bool running() const {
        return running_;
    }

private:
    rope_params last_{};  // the last call's fields (fields_ bytes; 0: none)
    size_t fields_ = 0;
    unsigned generation_ = 0;
    bool planned_ = false;  // a plan of the last call was made, or will not be
    std::unique_ptr<rope_plan> plan_;
    bool running_ = false;  // a repeat of this thread is running its plan
};

}  // namespace

rope_status dispatch(const rope_params *params, rope_report *report, bool execute) {
    return without_exceptions(report, [&] {
        thread_local LastCall last;
        if (execute && !last.running()) {
            if (const rope_plan *plan = last.repeat(params)) {
                return last.run(plan, report);
            }
        }
        return dispatch_call(params, report, execute);
    });
}

rope_status run_kernel(const KernelEntry &kernel, const rope_params *params, rope_report *report) {
    return without_exceptions(report, [&] { return run_one_kernel(kernel, params, report); });
}

}  // namespace ropegen

extern "C" rope_status rope_dispatch(const rope_params *params, rope_report *report) {
    return ropegen::dispatch(params, report, true);
}

extern "C" rope_status rope_query(const rope_params *params, rope_report *report) {
    return ropegen::dispatch(params, report, false);
}

extern "C" rope_status rope_plan_create(const rope_params *params, rope_plan **plan, rope_report *report) {
    return ropegen::without_exceptions(report, [&] { return ropegen::create_plan(params, plan, report); });
}

extern "C" rope_status rope_plan_run(const rope_plan *plan, rope_report *report) {
    return ropegen::without_exceptions(report, [&] { return ropegen::run_plan(plan, report); });
}

extern "C" void rope_plan_destroy(rope_plan *plan) {
    delete plan;
}

extern "C" const char *rope_status_string(rope_status status) {
    switch (ropegen::enum_value(status)) {  // a C caller may pass any int
    case ROPE_OK: return "ROPE_OK: success";
    case ROPE_ERR_NULL_POINTER: return "ROPE_ERR_NULL_POINTER: a required pointer is NULL";
    case ROPE_ERR_BAD_ENUM: return "ROPE_ERR_BAD_ENUM: an enum field holds an unknown value";
    case ROPE_ERR_DTYPE_MISMATCH: return "ROPE_ERR_DTYPE_MISMATCH: q, k and outputs do not share one dtype, or cache_dtype is neither f32 nor theirs";
    case ROPE_ERR_BAD_HEAD_DIM: return "ROPE_ERR_BAD_HEAD_DIM: head_dim is not even, positive and below 2^31, or not shared";
    case ROPE_ERR_BAD_ROTARY: return "ROPE_ERR_BAD_ROTARY: rotary_dim/rotary_offset outside 2 <= R <= D, R even, o + R <= D";
    case ROPE_ERR_BAD_SHAPE: return "ROPE_ERR_BAD_SHAPE: a size is negative or beyond the kernels' 32-bit counts, tensors disagree on their sizes, or varlen's batch, num_seqs or cu_seqlens is invalid";
    case ROPE_ERR_SIZE_OVERFLOW: return "ROPE_ERR_SIZE_OVERFLOW: an element or byte count overflows 64 bits";
    case ROPE_ERR_BAD_STRIDE: return "ROPE_ERR_BAD_STRIDE: the head_dim stride is not 1, a stride is negative, or cache_row_stride or mrope.stream_stride is out of range";
    case ROPE_ERR_POSITION_OUT_OF_RANGE: return "ROPE_ERR_POSITION_OUT_OF_RANGE: a position is negative or out of range";
    case ROPE_ERR_OVERLAP: return "ROPE_ERR_OVERLAP: an output overlaps itself, partially overlaps another tensor, or overlaps a table the call reads";
    case ROPE_ERR_BAD_VALUE: return "ROPE_ERR_BAD_VALUE: a scalar argument is out of range, or fields conflict (mrope, scaling, round_cos_sin)";
    case ROPE_ERR_ABI_MISMATCH: return "ROPE_ERR_ABI_MISMATCH: struct_size or abi_version not understood";
    case ROPE_ERR_UNSUPPORTED: return "ROPE_ERR_UNSUPPORTED: no kernel built for this call runs on this CPU or GPU, the kernels cannot take the combination, or rope_set_max_isa got another architecture's level";
    case ROPE_ERR_INTERNAL: return "ROPE_ERR_INTERNAL: a generated kernel, an allocation, a worker thread or an engine's parallel runner failed, or an exception was caught";
    case ROPE_ERR_DEVICE: return "ROPE_ERR_DEVICE: the CUDA driver, device or context is missing or failed";
    case ROPE_ERR_BAD_POINTER: return "ROPE_ERR_BAD_POINTER: a pointer is not device memory of the call's context or a view runs past its allocation";
    }
    return "unknown rope_status";
}

#if !ROPEGEN_CUDA
extern "C" rope_status rope_cuda_release_context(void *) {
    return ROPE_ERR_UNSUPPORTED;
}
#endif

extern "C" const char *rope_version_string(void) {
    return ROPEGEN_VERSION;
}

extern "C" uint32_t rope_abi_version(void) {
    return ROPE_ABI_VERSION;
}
