// SPDX-License-Identifier: Apache-2.0
// The CUDA side of rope_dispatch (cuda_device.cpp, built when the library has CUDA kernels): the
// driver, loaded at run time, the caller's context and stream, and the caller's device pointers
// as Halide buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "internal/validate.h"
#include "ropegen/rope.h"

struct halide_buffer_t;

namespace ropegen {

struct CallContext;

/// What a CUDA call runs on: the caller's context and stream, and its device's compute
/// capability (major * 10 + minor).
struct CudaTarget {
    void *context = nullptr;
    void *stream = nullptr;
    int capability = 0;
};

/// A byte range [first, last] a call reads or writes, and the argument that names it.
struct MemoryRange {
    const char *name;  ///< "q", "k", "q_out", "k_out", "positions.data", "angles.cos_cache", "angles.sin_cache"
    uintptr_t first, last;
};
/// The most ranges a call has: one per name above.
constexpr size_t kMaxMemoryRanges = 7;

/// Every range `call` touches (views without elements touch nothing).
std::vector<MemoryRange> memory_ranges(const ValidCall &call);

/// Loads the driver (once), finds the call's context (the stream's, else the calling thread's
/// current one; never a new one) and its device, and checks that every pointer of `call` is
/// device memory the context can reach (its own, or memory of no context on its device) with its
/// whole view inside one allocation or VMM chunks (cuMemMap) mapped back to back. On failure:
/// ROPE_ERR_DEVICE or ROPE_ERR_BAD_POINTER and a message.
rope_status prepare_cuda_call(const ValidCall &call, CudaTarget *target, std::string *message);

/// Points `buffer` at the device address its host field holds (the caller's pointer) instead;
/// returns Halide's result.
int attach_device_memory(CallContext *context, halide_buffer_t *buffer);

/// Undoes a successful attach_device_memory: the buffer is as attach found it, and may be
/// attached again (after a failed attach the call ends: the buffer is not used again).
void detach_device_memory(CallContext *context, halide_buffer_t *buffer);

/// Makes the Halide CUDA runtime use each call's context and stream (from its CallContext).
void install_cuda_hooks();

namespace cuda {

/// A function of the CUDA driver (libcuda.so.1, the library the kernels run on), or null when
/// the driver or the function is missing; `error` (when given) then says why.
void *driver_symbol(const char *name, std::string *error = nullptr);

/// CUDA's name of a driver result, e.g. "CUDA_ERROR_INVALID_VALUE".
std::string result_name(int result);

}  // namespace cuda
}  // namespace ropegen
