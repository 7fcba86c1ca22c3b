// SPDX-License-Identifier: Apache-2.0
// The CUDA side of rope_dispatch (see internal/cuda_device.h). The driver is opened at run time,
// so the library links and runs on machines without one; the few driver types and functions
// used here are declared locally (the driver's C ABI is stable), so building needs no toolkit.
#include "internal/cuda_device.h"

#include <HalideRuntime.h>
#include <HalideRuntimeCuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {
namespace cuda {
namespace {

using Result = int;  // CUresult
using Device = int;  // CUdevice
using DevicePointer = unsigned long long;  // CUdeviceptr
constexpr Result kSuccess = 0;
constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeCapabilityMinor = 76;
constexpr int kPointerContext = 1;        // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kPointerDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr const char *kDriverLibrary = "libcuda.so.1";

struct Driver {
    void *library = nullptr;
    std::string error;  // why the driver cannot be used
    Result (*get_error_name)(Result, const char **) = nullptr;
    Result (*ctx_get_current)(void **) = nullptr;
    Result (*stream_get_ctx)(void *, void **) = nullptr;
    Result (*ctx_push_current)(void *) = nullptr;
    Result (*ctx_pop_current)(void **) = nullptr;
    Result (*ctx_get_device)(Device *) = nullptr;
    Result (*device_get_attribute)(int *, int, Device) = nullptr;
    Result (*mem_get_address_range)(DevicePointer *, size_t *, DevicePointer) = nullptr;
    Result (*pointer_get_attribute)(void *, int, DevicePointer) = nullptr;
    Result (*mem_retain_allocation_handle)(unsigned long long *, void *) = nullptr;
    Result (*mem_release)(unsigned long long) = nullptr;
};

// CUDA's name of `result`, from a driver whose functions are bound.
std::string name_of(const Driver &d, Result result) {
    const char *name = nullptr;
    if (d.get_error_name != nullptr && d.get_error_name(result, &name) == kSuccess && name != nullptr) {
        return name;
    }
    return "CUDA error " + std::to_string(result);
}

template <typename Function>
bool bind(Driver &driver, Function *function, const char *name) {
    *function = reinterpret_cast<Function>(dlsym(driver.library, name));
    if (*function == nullptr && driver.error.empty()) {
        driver.error = std::string("the CUDA driver ") + kDriverLibrary + " lacks " + name;
    }
    return *function != nullptr;
}

const Driver &driver() {
    static Driver loaded;
    static std::once_flag once;
    std::call_once(once, [] {
        Driver &d = loaded;
        d.library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
        if (d.library == nullptr) {
            const char *why = dlerror();
            d.error = std::string("no CUDA driver: dlopen(") + kDriverLibrary + ") failed: " + (why ? why : "unknown error") +
                      "; device=ROPE_DEVICE_CUDA needs the NVIDIA driver";
            return;
        }
        Result (*init)(unsigned) = nullptr;
        const bool complete = bind(d, &init, "cuInit") && bind(d, &d.get_error_name, "cuGetErrorName") &&
                              bind(d, &d.ctx_get_current, "cuCtxGetCurrent") && bind(d, &d.stream_get_ctx, "cuStreamGetCtx") &&
                              bind(d, &d.ctx_push_current, "cuCtxPushCurrent_v2") &&
                              bind(d, &d.ctx_pop_current, "cuCtxPopCurrent_v2") && bind(d, &d.ctx_get_device, "cuCtxGetDevice") &&
                              bind(d, &d.device_get_attribute, "cuDeviceGetAttribute") &&
                              bind(d, &d.mem_get_address_range, "cuMemGetAddressRange_v2") &&
                              bind(d, &d.pointer_get_attribute, "cuPointerGetAttribute") &&
                              bind(d, &d.mem_retain_allocation_handle, "cuMemRetainAllocationHandle") &&
                              bind(d, &d.mem_release, "cuMemRelease");
        if (!complete) {
            return;
        }
        // name_of, not result_name: that calls driver(), which would wait on this call_once.
        if (const Result result = init(0); result != kSuccess) {
            d.error = "the CUDA driver could not initialise: cuInit failed with " + name_of(d, result);
        }
    });
    return loaded;
}

}  // namespace

void *driver_symbol(const char *name, std::string *error) {
    const Driver &d = driver();
    void *symbol = d.error.empty() ? dlsym(d.library, name) : nullptr;
    if (symbol == nullptr && error != nullptr) {
        *error = d.error.empty() ? std::string("the CUDA driver lacks ") + name : d.error;
    }
    return symbol;
}

std::string result_name(int result) {
    return name_of(driver(), result);
}

}  // namespace cuda

namespace {

using cuda::result_name;

// --- Halide CUDA runtime hooks ---------------------------------------------------------------------
// Every kernel runs on the context and stream of its call. Outside a call (Halide releasing its
// state at exit) there is no context, and none is ever created.
//
// Once a call has failed, it gets no context until its kernel has found its module: the kernels
// are built without asserts, so they ignore a failed halide_cuda_initialize_kernels
// (cuModuleLoadDataEx: out of memory, a JIT failure, no binary for the GPU) and go on to
// halide_cuda_run, which aborts on the missing module unless acquiring the context fails first.
// Refused here, halide_cuda_run returns before that check, and the dispatcher reports the
// recorded error. Once a launch has asked for its stream (get_stream, which halide_cuda_run calls
// after finding the module; the kernels make no other call that asks), the context is given:
// halide_cuda_finalize_kernels needs it to drop the kernel's hold on the module, without which
// rope_cuda_release_context could never unload it; get_stream then skips the later launches. A
// launch failing in between (cuModuleGetFunction) still leaves the hold behind.
int acquire_context(void *user_context, void **context, bool create) {
    const auto *call = static_cast<const CallContext *>(user_context);
    if (call != nullptr && call->failure() != CallFailure::None && !call->cuda_launch_reached) {
        *context = nullptr;
        return halide_error_code_device_interface_no_device;
    }
    *context = call != nullptr ? call->cuda_context : nullptr;
    if (*context == nullptr && create) {
        return halide_error_code_device_interface_no_device;  // unreachable from rope_dispatch
    }
    return halide_error_code_success;
}

int release_context(void *) {
    return halide_error_code_success;
}

// halide_cuda_run asks for the stream after it found the kernel's module, just before the launch.
int get_stream(void *user_context, void *, void **stream) {
    auto *call = static_cast<CallContext *>(user_context);
    *stream = call != nullptr ? call->cuda_stream : nullptr;
    if (call == nullptr) {
        return halide_error_code_success;
    }
    call->cuda_launch_reached = true;
    return call->failure() == CallFailure::None ? halide_error_code_success : halide_error_code_device_run_failed;
}

}  // namespace

std::vector<MemoryRange> memory_ranges(const ValidCall &call) {
    const rope_params &p = call.params;
    std::vector<MemoryRange> ranges;
    ranges.reserve(kMaxMemoryRanges);
    const struct {
        const char *name;
        const rope_tensor *tensor;
        bool used;
    } tensors[] = {{"q", &p.q, true}, {"k", &p.k, call.has_k}, {"q_out", &p.q_out, true}, {"k_out", &p.k_out, call.has_k}};
    for (const auto &t : tensors) {
        const ByteRange range = byte_range(*t.tensor);
        if (t.used && !range.empty) {
            ranges.push_back({t.name, range.first, range.last});
        }
    }
    const int64_t batch = p.q.sizes[0], seq = p.q.sizes[1];
    const rope_positions &pos = p.positions;
    if (pos.data != nullptr && batch > 0 && seq > 0) {
        const int64_t entry = pos.index_type == ROPE_INDEX_INT64 ? 8 : 4;
        int64_t span = (batch - 1) * pos.strides[0];
        if (pos.kind == ROPE_POSITIONS_TABLE) {
            span += (seq - 1) * pos.strides[1];
        }
        const auto first = reinterpret_cast<uintptr_t>(pos.data);
        ranges.push_back({"positions.data", first, first + static_cast<uintptr_t>((span + 1) * entry) - 1});
    }
    if (p.angles.source == ROPE_SOURCE_CACHE) {
        const int64_t pairs = call.rotary_dim / 2;
        const int64_t row_stride = p.angles.cache_row_stride != 0 ? p.angles.cache_row_stride : pairs;
        const auto element = static_cast<int64_t>(dtype_bytes(p.angles.cache_dtype));
        const int64_t bytes = ((p.angles.cache_len - 1) * row_stride + pairs) * element;
        for (const auto &[name, table] : {std::pair{"angles.cos_cache", p.angles.cos_cache}, std::pair{"angles.sin_cache", p.angles.sin_cache}}) {
            const auto first = reinterpret_cast<uintptr_t>(table);
            ranges.push_back({name, first, first + static_cast<uintptr_t>(bytes) - 1});
        }
    }
    return ranges;
}

namespace {

// Runs `body` with `context` current on this thread, then restores the caller's.
template <typename Body>
cuda::Result with_context(const cuda::Driver &d, void *context, Body body) {
    if (const cuda::Result pushed = d.ctx_push_current(context); pushed != cuda::kSuccess) {
        return pushed;
    }
    const cuda::Result result = body();
    void *popped = nullptr;
    d.ctx_pop_current(&popped);
    return result;
}

// Allocations a view may span when they are mapped back to back: PyTorch's expandable segments map
// a tensor as chunks (cuMemCreate, 2 or 20 MiB) of one reservation, and cuMemGetAddressRange
// returns a single chunk. The bound keeps a call's checks short (views up to 8 GiB of 2 MiB chunks).
constexpr int kMaxMappings = 4096;

enum class RangeProblem { None, NotDevice, OtherContext, OtherDevice, PastEnd, TooManyMappings, DriverFailed };

struct RangeCheck {
    RangeProblem problem = RangeProblem::None;
    cuda::Result result = cuda::kSuccess;  // the failed query, for NotDevice and DriverFailed
    cuda::DevicePointer start = 0;         // the allocations found from range.first on
    size_t size = 0;
    int owner = 0;  // the context's device ordinal, or the owner's, for OtherDevice
};

// True when `at` lies in memory mapped with cuMemMap (a VMM chunk). Only such chunks are followed
// into the next allocation: past the end of an ordinary one (cuMemAlloc) that the driver happened
// to place back to back with another lies some other buffer.
bool is_mapped_chunk(const cuda::Driver &d, cuda::DevicePointer at) {
    unsigned long long handle = 0;
    if (d.mem_retain_allocation_handle(&handle, reinterpret_cast<void *>(at)) != cuda::kSuccess) {
        return false;
    }
    d.mem_release(handle);  // the retain counted a reference
    return true;
}

// True when a pointer query failed for the driver's state, not the pointer's: out of memory (2),
// not initialised (3), shutting down (4), an invalid context (201), a sticky error of an earlier
// kernel (700-720), unknown (999). Any other failure means the pointer is not device memory.
bool driver_failed(cuda::Result result) {
    return result == 2 || result == 3 || result == 4 || result == 201 || (result >= 700 && result <= 720) || result == 999;
}

// Checks that the bytes of `range` lie in memory the kernels may use on `context` (current): one
// allocation, or VMM chunks mapped back to back, each of that context or, for memory of no context
// (VMM chunks, pool memory), of its device. A pointer of another context resolves too, since all
// share one address space, but unless peer access was enabled that context's memory is not mapped
// in this one, and the kernel would fault: refused whatever the peer access.
RangeCheck check_range(const cuda::Driver &d, const MemoryRange &range, void *context, cuda::Device device) {
    RangeCheck c;
    cuda::DevicePointer at = range.first;
    for (int mapping = 0; mapping < kMaxMappings; mapping++) {
        cuda::DevicePointer start = 0;
        size_t size = 0;
        c.result = d.mem_get_address_range(&start, &size, at);
        if (driver_failed(c.result)) {
            c.problem = RangeProblem::DriverFailed;
            return c;
        }
        if (mapping > 0 && (c.result != cuda::kSuccess || start != at || !is_mapped_chunk(d, at))) {
            c.problem = RangeProblem::PastEnd;  // no VMM chunk mapped right after the last one
            return c;
        }
        void *owner = nullptr;
        if (c.result == cuda::kSuccess) {
            c.result = d.pointer_get_attribute(&owner, cuda::kPointerContext, at);
        }
        if (c.result == cuda::kSuccess && owner == nullptr) {
            // cuCtxGetDevice's CUdevice is the device's ordinal.
            c.result = d.pointer_get_attribute(&c.owner, cuda::kPointerDeviceOrdinal, at);
            if (c.result == cuda::kSuccess && c.owner != device) {
                c.problem = RangeProblem::OtherDevice;
                return c;
            }
        }
        if (c.result != cuda::kSuccess) {
            c.problem = driver_failed(c.result) ? RangeProblem::DriverFailed : RangeProblem::NotDevice;
            return c;
        }
        if (owner != nullptr && owner != context) {
            c.problem = RangeProblem::OtherContext;
            return c;
        }
        c.start = mapping == 0 ? start : c.start;
        c.size = start + size - c.start;
        if (range.last < start + size) {
            return c;
        }
        if (mapping == 0 && !is_mapped_chunk(d, at)) {
            c.problem = RangeProblem::PastEnd;
            return c;
        }
        at = start + size;
    }
    c.problem = RangeProblem::TooManyMappings;
    return c;
}

// The compute capability (major * 10 + minor) of each device ordinal asked for so far, 0 before:
// a device's never changes, and asking the driver costs a call two queries.
constexpr int kCapabilitiesKept = 64;
std::atomic<int> g_capabilities[kCapabilitiesKept];

cuda::Result compute_capability(const cuda::Driver &d, cuda::Device device, int *capability) {
    const bool kept = device >= 0 && device < kCapabilitiesKept;
    if (kept && (*capability = g_capabilities[device].load(std::memory_order_relaxed)) != 0) {
        return cuda::kSuccess;
    }
    int major = 0, minor = 0;
    cuda::Result result = d.device_get_attribute(&major, cuda::kComputeCapabilityMajor, device);
    if (result == cuda::kSuccess) {
        result = d.device_get_attribute(&minor, cuda::kComputeCapabilityMinor, device);
    }
    if (result == cuda::kSuccess) {
        *capability = major * 10 + minor;
        if (kept) {
            g_capabilities[device].store(*capability, std::memory_order_relaxed);
        }
    }
    return result;
}

}  // namespace

rope_status prepare_cuda_call(const ValidCall &call, CudaTarget *target, std::string *message) {
    const cuda::Driver &d = cuda::driver();
    if (!d.error.empty()) {
        *message = d.error;
        return ROPE_ERR_DEVICE;
    }
    std::ostringstream why;
    target->stream = call.params.stream;
    if (target->stream != nullptr) {
        if (const cuda::Result r = d.stream_get_ctx(target->stream, &target->context); r != cuda::kSuccess) {
            why << "params.stream=" << target->stream << " is not a CUDA stream the driver knows: cuStreamGetCtx failed with "
                << result_name(r);
            *message = why.str();
            return ROPE_ERR_DEVICE;
        }
    } else if (const cuda::Result r = d.ctx_get_current(&target->context); r != cuda::kSuccess || target->context == nullptr) {
        *message = "params.stream is NULL and no CUDA context is current on the calling thread (cuCtxGetCurrent: " +
                   (r != cuda::kSuccess ? result_name(r) : std::string("none")) +
                   "); make one current (cudaSetDevice, cuCtxSetCurrent) or pass a stream: the library never creates a context";
        return ROPE_ERR_DEVICE;
    }

    cuda::Device device = 0;
    const std::vector<MemoryRange> ranges = memory_ranges(call);
    const MemoryRange *bad_range = nullptr;
    RangeCheck check;
    const cuda::Result r = with_context(d, target->context, [&] {
        cuda::Result result = d.ctx_get_device(&device);
        if (result == cuda::kSuccess) {
            result = compute_capability(d, device, &target->capability);
        }
        // The bytes checked so far, [first, end): a view inside them is not looked up again (q and
        // k of one packed QKV buffer, in place q_out = q and k_out = k, cos and sin of one table),
        // which halves the driver's pointer queries of an engine's decode step.
        std::array<std::pair<cuda::DevicePointer, cuda::DevicePointer>, kMaxMemoryRanges> checked;
        size_t checked_count = 0;
        for (const MemoryRange &range : ranges) {
            if (result != cuda::kSuccess) {
                break;
            }
            if (std::any_of(checked.begin(), checked.begin() + checked_count,
                            [&](const auto &span) { return span.first <= range.first && range.last < span.second; })) {
                continue;
            }
            check = check_range(d, range, target->context, device);
            if (check.problem != RangeProblem::None) {
                bad_range = &range;
                break;
            }
            if (checked_count < checked.size()) {  // a range beyond the count is only looked up again
                checked[checked_count++] = {check.start, check.start + check.size};
            }
        }
        return result;
    });
    if (r != cuda::kSuccess) {
        why << "the device of the call's CUDA context (" << target->context << ") could not be queried: " << result_name(r);
        *message = why.str();
        return ROPE_ERR_DEVICE;
    }
    if (bad_range != nullptr && check.problem == RangeProblem::DriverFailed) {
        why << "the driver could not look up " << bad_range->name << "=" << reinterpret_cast<void *>(bad_range->first)
            << " (cuMemGetAddressRange/cuPointerGetAttribute: " << result_name(check.result) << ")";
        *message = why.str();
        return ROPE_ERR_DEVICE;
    }
    if (bad_range != nullptr) {
        why << bad_range->name << "=" << reinterpret_cast<void *>(bad_range->first);
        const auto view = [&] {
            why << ": the view's bytes [" << reinterpret_cast<void *>(bad_range->first) << ", "
                << reinterpret_cast<void *>(bad_range->last) << "]";
        };
        switch (check.problem) {
        case RangeProblem::NotDevice:
            why << " is not device memory of the call's CUDA context (cuMemGetAddressRange/cuPointerGetAttribute: "
                << result_name(check.result) << "); with device=ROPE_DEVICE_CUDA every pointer is a device pointer";
            break;
        case RangeProblem::OtherContext:
            why << " is device memory of another CUDA context than the call's (" << target->context
                << "): the call's kernels cannot reach it";
            break;
        case RangeProblem::OtherDevice:
            why << " is device memory of device " << check.owner << ", and the call's CUDA context is on device " << device;
            break;
        case RangeProblem::TooManyMappings:
            view();
            why << " span more than " << kMaxMappings << " VMM chunks mapped back to back (the most a view may span)";
            break;
        default:  // PastEnd
            view();
            why << " run past the end of its allocation (" << reinterpret_cast<void *>(check.start) << " + " << check.size
                << " bytes, with any VMM chunks mapped back to back after it)";
        }
        *message = why.str();
        return ROPE_ERR_BAD_POINTER;
    }
    return ROPE_OK;
}

int attach_device_memory(CallContext *context, halide_buffer_t *buffer) {
    const auto address = reinterpret_cast<uint64_t>(buffer->host);
    buffer->host = nullptr;
    return halide_cuda_wrap_device_ptr(context, buffer, address);
}

void detach_device_memory(CallContext *context, halide_buffer_t *buffer) {
    if (buffer->device != 0) {
        // The address goes back where attach found it: the tables of a call are attached again
        // for each of its slices.
        buffer->host = reinterpret_cast<uint8_t *>(halide_cuda_get_device_ptr(context, buffer));
        halide_cuda_detach_device_ptr(context, buffer);
    }
}

void install_cuda_hooks() {
    halide_set_cuda_acquire_context(acquire_context);
    halide_set_cuda_release_context(release_context);
    halide_set_cuda_get_stream(get_stream);
}

}  // namespace ropegen

// Halide's CUDA runtime finds driver functions through this (weak in the runtime): the same
// driver library as the rest of the library, and never a second search of its own.
extern "C" void *halide_cuda_get_symbol(void *, const char *name) {
    return ropegen::cuda::driver_symbol(name);
}

extern "C" rope_status rope_cuda_release_context(void *context) {
    // No exception crosses the ABI: loading the driver builds strings (std::bad_alloc).
    return ropegen::without_exceptions(nullptr, [&] {
        ropegen::ensure_initialized();
        const ropegen::cuda::Driver &d = ropegen::cuda::driver();
        if (context == nullptr || !d.error.empty()) {
            return ROPE_OK;  // nothing was ever loaded on it
        }
        ropegen::CallContext call(nullptr, 1);
        call.cuda_context = context;
        // Made current here first: Halide's release, when it cannot push the context (destroyed
        // already), goes on with the caller's, unloading through dead handles and popping a
        // context it never pushed. Its errors reach the call through the library's handler.
        const ropegen::cuda::Result pushed = ropegen::with_context(d, context, [&] {
            halide_device_release(&call, halide_cuda_device_interface());
            return ropegen::cuda::kSuccess;
        });
        return pushed == ropegen::cuda::kSuccess && call.failure() == ropegen::CallFailure::None ? ROPE_OK : ROPE_ERR_DEVICE;
    });
}
