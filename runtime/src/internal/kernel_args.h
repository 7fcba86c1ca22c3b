// SPDX-License-Identifier: Apache-2.0
// A validated call as a kernel takes it: the caller's memory described as Halide buffers (no
// copies), the arguments every slice of the call shares, the scratch the kernel needs, the launch.
#pragma once

#include <HalideRuntime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"
#include "internal/validate.h"

namespace ropegen {

/// The largest stride a Halide dimension holds (its fields are int32).
constexpr int64_t kMaxStride = std::numeric_limits<int32_t>::max();

/// A halide_buffer_t with its own dimension storage.
struct Buffer {
    halide_buffer_t raw{};
    halide_dimension_t dims[5]{};

    Buffer(void *host, halide_type_t type, int dimensions) {
        raw.host = static_cast<uint8_t *>(host);
        raw.type = type;
        raw.dimensions = dimensions;
        raw.dim = dims;
    }
    // A copy points at its own dimensions, never at the original's.
    Buffer(const Buffer &other) : raw(other.raw) {
        std::copy(std::begin(other.dims), std::end(other.dims), std::begin(dims));
        raw.dim = dims;
    }
    Buffer &operator=(const Buffer &) = delete;
    void set(int d, int64_t min, int64_t extent, int64_t stride) {
        dims[d] = halide_dimension_t(static_cast<int32_t>(min), static_cast<int32_t>(extent), static_cast<int32_t>(stride));
    }
};

/// One slice of the call along the token and head axes: all of them, or a single index on the
/// axes whose strides do not fit Halide's int32 dimensions (tensors beyond 2^31 elements) or, for
/// CUDA kernels (32-bit indexing), whose views would span 2^31 elements; for CUDA kernels also a
/// part of the batch that one grid holds. Coordinates are local to the slice (every min is 0);
/// positions are shifted to match (position_base).
struct Slice {
    int64_t begin[3];  // batch, seq, heads (heads only for q/k tensors)
    int64_t extent[3];
};

/// One tensor's views: its input, its rotated lanes, and its pass-through lanes before and after
/// them (partial rotary).
struct TensorViews {
    Buffer input, rotated, lead, tail;
};

/// The kernel arguments that every slice of a call shares: the cos/sin and scaling tables as
/// Halide buffers, and how positions are read.
struct SharedArgs {
    Buffer cos_table, sin_table, cos_narrow, sin_narrow;  // the f32 pair or the narrow pair
    Buffer short_factor, long_factor, given_inv_freq;     // the scaling's per-pair tables
    void *placeholder;                                    // what the unused ones point at
    bool narrow, positions_given;
    int64_t pos_seq_stride, pos_batch_stride, scalar_offset;
    int32_t position_step, mrope_end0, mrope_end1;
    float sin_sign;
};

/// What one kernel run takes: the buffers over one slice of the call and the shared arguments.
struct KernelArgs {
    TensorViews q, k;
    Buffer positions;
    const SharedArgs *shared;
    int32_t position_base;
};

/// The scratch the generated kernels allocate (generators/rope_generator.cpp): with a computed
/// source, the largest position of each sequence and inv_freq (P floats or doubles a row: one row, or one
/// per batch item for a per-sequence scaling) and, as the schedules place it (cos_sin_at=root),
/// one f32 cos and one f32 sin table of every token of a run (and one float more, for every
/// kernel: a half-style kernel of pair words reads the table two pairs at a time, and Halide's
/// strided vector loads read, so allocate, one element past its end). Reserved before the kernel runs, an
/// allocation failure is an error before any output is written; fault_injection_test checks that
/// no built kernel allocates beyond it. A kernel that does is still safe where it allocates outside
/// its parallel loops (see halide_glue.cpp).
size_t kernel_scratch_bytes(const ValidCall &call, int64_t batch, int64_t seq);

/// Where a CPU kernel is pointed for the inputs a call does not use (the other pair of cos/sin
/// tables, a scalar offset's positions, the scaling tables of other types): never read.
void *unused_input();

/// The shared arguments of `call`, with unused inputs at `placeholder` (on a device: device
/// memory of the call, never dereferenced).
SharedArgs shared_args(const ValidCall &call, void *placeholder);

/// The arguments of the kernel run over `slice` (`q_present`/`k_present`: whether the slice holds
/// heads of q and of k).
KernelArgs slice_args(const KernelEntry &kernel, const ValidCall &call, const SharedArgs &shared, const Slice &slice,
                      bool q_present, bool k_present);

/// The arguments of the kernel run over batch items [first, first + count) of an unsliced CPU call.
KernelArgs items_args(const KernelEntry &kernel, const ValidCall &call, const SharedArgs &shared, int64_t first, int64_t count);

/// Runs the kernel on `args`; Halide's status (a failure inside the kernel is in `context`). A
/// CPU kernel of Halide 21 reads its buffer descriptions and never writes them (no device, no
/// bounds query; later Halide versions may mark a CPU pipeline's outputs host-dirty), so the runs
/// of one plan share theirs: KernelTest.ReadsOnlyItsBufferDescriptions runs every CPU kernel on
/// descriptions in read-only memory, and fails on a Halide that writes them. A CUDA call's
/// descriptions are run()'s own: it attaches device memory to them, and Halide marks the outputs
/// dirty.
int launch(const KernelEntry &kernel, const ValidCall &call, const KernelArgs &args, CallContext *context);

}  // namespace ropegen
