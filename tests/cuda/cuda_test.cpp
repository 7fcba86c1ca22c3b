// SPDX-License-Identifier: Apache-2.0
// CUDA calls of rope_dispatch. Without a driver: the call fails with ROPE_ERR_DEVICE and a clear
// message, touching nothing. With a GPU: every CUDA kernel against the fp64 oracle (the cases of
// the CPU suite, their buffers mirrored into device memory), the caller's own context and stream
// (enqueued, never synchronized), and the pointer checks. Tests that need what this machine lacks
// skip and say why.
#include <HalideRuntime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "internal/cuda_device.h"
#include "internal/runtime_state.h"
#include "internal/validate.h"
#include "support/kernels.h"
#include "gpu_cases.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

using Result = int;                        // CUresult
using DevicePointer = unsigned long long;  // CUdeviceptr
constexpr Result kSuccess = 0;
constexpr Result kNotReady = 600;          // CUDA_ERROR_NOT_READY
constexpr unsigned kNonBlockingStream = 1;  // CU_STREAM_NON_BLOCKING

/// The driver functions the tests use, from the driver the library loaded.
struct Driver {
    Result (*device_get_count)(int *);
    Result (*device_get)(int *, int);
    Result (*device_get_attribute)(int *, int, int);
    Result (*primary_ctx_retain)(void **, int);
    Result (*ctx_create)(void **, unsigned, int);
    Result (*ctx_destroy)(void *);
    Result (*ctx_set_current)(void *);
    Result (*ctx_get_current)(void **);
    Result (*ctx_synchronize)();
    Result (*mem_alloc)(DevicePointer *, size_t);
    Result (*mem_free)(DevicePointer);
    Result (*memcpy_htod)(DevicePointer, const void *, size_t);
    Result (*memcpy_dtoh)(void *, DevicePointer, size_t);
    Result (*stream_create)(void **, unsigned);
    Result (*stream_destroy)(void *);
    Result (*stream_synchronize)(void *);
    Result (*stream_query)(void *);
    Result (*launch_host_func)(void *, void (*)(void *), void *);
};

template <typename Function>
bool bind(Function *function, const char *name, std::string *error) {
    *function = reinterpret_cast<Function>(cuda::driver_symbol(name, error));
    return *function != nullptr;
}

/// The driver and device 0's primary context (current on the calling thread), or why not.
const Driver *gpu(std::string *why) {
    static Driver d;
    static std::string error;
    static void *primary = nullptr;
    static const bool ready = [] {
        const bool bound =
            bind(&d.device_get_count, "cuDeviceGetCount", &error) && bind(&d.device_get, "cuDeviceGet", &error) &&
            bind(&d.device_get_attribute, "cuDeviceGetAttribute", &error) &&
            bind(&d.primary_ctx_retain, "cuDevicePrimaryCtxRetain", &error) &&
            bind(&d.ctx_create, "cuCtxCreate_v2", &error) && bind(&d.ctx_destroy, "cuCtxDestroy_v2", &error) &&
            bind(&d.ctx_set_current, "cuCtxSetCurrent", &error) && bind(&d.ctx_get_current, "cuCtxGetCurrent", &error) &&
            bind(&d.ctx_synchronize, "cuCtxSynchronize", &error) && bind(&d.mem_alloc, "cuMemAlloc_v2", &error) &&
            bind(&d.mem_free, "cuMemFree_v2", &error) && bind(&d.memcpy_htod, "cuMemcpyHtoD_v2", &error) &&
            bind(&d.memcpy_dtoh, "cuMemcpyDtoH_v2", &error) && bind(&d.stream_create, "cuStreamCreate", &error) &&
            bind(&d.stream_destroy, "cuStreamDestroy_v2", &error) &&
            bind(&d.stream_synchronize, "cuStreamSynchronize", &error) &&
            bind(&d.stream_query, "cuStreamQuery", &error) && bind(&d.launch_host_func, "cuLaunchHostFunc", &error);
        if (!bound) {
            return false;
        }
        int count = 0, device = 0;
        if (d.device_get_count(&count) != kSuccess || count == 0) {
            error = "the CUDA driver sees no device";
            return false;
        }
        if (const Result r = d.device_get(&device, 0); r != kSuccess || d.primary_ctx_retain(&primary, device) != kSuccess) {
            error = "cannot retain device 0's primary context: " + cuda::result_name(r);
            return false;
        }
        return true;
    }();
    if (!ready) {
        *why = error;
        return nullptr;
    }
    d.ctx_set_current(primary);
    return &d;
}

#define ROPEGEN_SKIP_WITHOUT_GPU(driver)                                                     \
    std::string ropegen_why_;                                                                \
    const Driver *driver = gpu(&ropegen_why_);                                               \
    if (driver == nullptr)                                                                   \
    GTEST_SKIP() << "needs a CUDA GPU (" << ropegen_why_ << "); run the cuda label on a machine with one"

#define ASSERT_CUDA(call) ASSERT_EQ((call), kSuccess) << #call

/// Device 0's compute capability, major * 10 + minor (0 when the driver cannot say).
int device_capability(const Driver &d) {
    constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
    int device = 0, major = 0, minor = 0;
    if (d.device_get(&device, 0) != kSuccess || d.device_get_attribute(&major, kMajor, device) != kSuccess ||
        d.device_get_attribute(&minor, kMinor, device) != kSuccess) {
        return 0;
    }
    return major * 10 + minor;
}

/// Device memory the test owns.
class DeviceBuffer {
public:
    DeviceBuffer(const Driver &d, size_t bytes) : d_(d) {
        if (d_.mem_alloc(&address_, bytes) != kSuccess) {
            address_ = 0;
        }
    }
    ~DeviceBuffer() {
        if (address_ != 0) {
            d_.mem_free(address_);
        }
    }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    DevicePointer address() const {
        return address_;
    }

private:
    const Driver &d_;
    DevicePointer address_ = 0;
};

/// Runs a call's host buffers on the GPU: every byte range the call touches (merged where views
/// share memory: in place, packed QKV) is copied into a device allocation of its own, the call
/// runs with the device addresses on `stream` (NULL: the current context's default stream), and
/// every range is copied back, so that the CPU suite's checks judge the result.
Runner device_runner(const Driver &d, const KernelEntry *kernel, void *stream = nullptr) {
    return [&d, kernel, stream](const rope_params *host_params, rope_report *report) -> rope_status {
        ValidCall call;
        std::string message;
        if (const rope_status status = validate(host_params, &call, &message); status != ROPE_OK) {
            return kernel != nullptr ? run_kernel(*kernel, host_params, report) : rope_dispatch(host_params, report);
        }
        std::vector<MemoryRange> ranges = memory_ranges(call);
        std::sort(ranges.begin(), ranges.end(), [](const MemoryRange &a, const MemoryRange &b) { return a.first < b.first; });
        std::vector<MemoryRange> merged;
        for (const MemoryRange &range : ranges) {
            if (!merged.empty() && range.first <= merged.back().last) {
                merged.back().last = std::max(merged.back().last, range.last);
            } else {
                merged.push_back(range);
            }
        }
        std::vector<std::unique_ptr<DeviceBuffer>> buffers;
        for (const MemoryRange &range : merged) {
            const size_t bytes = range.last - range.first + 1;
            buffers.push_back(std::make_unique<DeviceBuffer>(d, bytes));
            if (buffers.back()->address() == 0 ||
                d.memcpy_htod(buffers.back()->address(), reinterpret_cast<const void *>(range.first), bytes) != kSuccess) {
                ADD_FAILURE() << "could not mirror " << bytes << " bytes into device memory";
                return ROPE_ERR_INTERNAL;
            }
        }
        auto to_device = [&](const void *host) -> void * {
            const auto address = reinterpret_cast<uintptr_t>(host);
            for (size_t i = 0; i < merged.size(); i++) {
                if (host != nullptr && merged[i].first <= address && address <= merged[i].last) {
                    return reinterpret_cast<void *>(buffers[i]->address() + (address - merged[i].first));
                }
            }
            return const_cast<void *>(host);  // not read by the call (an empty view, no table)
        };
        rope_params p = *host_params;
        for (rope_tensor *t : {&p.q, &p.k, &p.q_out, &p.k_out}) {
            t->data = to_device(t->data);
        }
        p.positions.data = to_device(p.positions.data);
        p.angles.cos_cache = to_device(p.angles.cos_cache);
        p.angles.sin_cache = to_device(p.angles.sin_cache);
        p.device = ROPE_DEVICE_CUDA;
        p.stream = stream;
        const rope_status status = kernel != nullptr ? run_kernel(*kernel, &p, report) : rope_dispatch(&p, report);
        EXPECT_EQ(stream != nullptr ? d.stream_synchronize(stream) : d.ctx_synchronize(), kSuccess);
        for (size_t i = 0; i < merged.size(); i++) {
            EXPECT_EQ(d.memcpy_dtoh(reinterpret_cast<void *>(merged[i].first), buffers[i]->address(),
                                    merged[i].last - merged[i].first + 1),
                      kSuccess);
        }
        return status;
    };
}

// --- without a driver ------------------------------------------------------------------------------

TEST(CudaWithoutDriver, CallReturnsDeviceErrorAndTouchesNothing) {
    std::string why;
    if (cuda::driver_symbol("cuInit", &why) != nullptr) {
        GTEST_SKIP() << "a CUDA driver is installed here; the no-driver path is checked on machines without one";
    }
    CaseSpec spec;
    spec.head_dim = 128;
    RopeCall call(spec);
    for (const bool query : {false, true}) {
        rope_params p = call.params();
        p.device = ROPE_DEVICE_CUDA;
        rope_report report = rope_report_init();
        EXPECT_EQ(query ? rope_query(&p, &report) : rope_dispatch(&p, &report), ROPE_ERR_DEVICE);
        EXPECT_EQ(report.status, ROPE_ERR_DEVICE);
        EXPECT_NE(std::string(report.message).find("libcuda.so.1"), std::string::npos) << report.message;
        EXPECT_STREQ(report.kernel, "") << "no kernel is named when there is no device";
    }
    EXPECT_TRUE(call.check_all_unchanged());
    EXPECT_EQ(rope_cuda_release_context(nullptr), ROPE_OK);
}

// A call run in slices (a batch beyond one grid) attaches the same cos/sin tables for every slice,
// so detaching must leave a buffer as attach found it. Wrapping is bookkeeping: no driver needed.
TEST(CudaBuffers, DetachLeavesTheBufferAsAttachFoundIt) {
    CallContext context(nullptr, 1);
    float element = 0;  // stands for device memory: never dereferenced
    halide_dimension_t dim(0, 1, 1);
    halide_buffer_t buffer{};
    buffer.host = reinterpret_cast<uint8_t *>(&element);
    buffer.type = halide_type_t(halide_type_float, 32);
    buffer.dimensions = 1;
    buffer.dim = &dim;
    const auto address = reinterpret_cast<uint64_t>(&element);
    for (int slice = 0; slice < 2; slice++) {
        ASSERT_EQ(attach_device_memory(&context, &buffer), 0) << "slice " << slice;
        EXPECT_EQ(buffer.device, address) << "slice " << slice;
        EXPECT_EQ(buffer.host, nullptr) << "slice " << slice;
        detach_device_memory(&context, &buffer);
        EXPECT_EQ(buffer.device, 0u) << "slice " << slice;
        EXPECT_EQ(reinterpret_cast<uint64_t>(buffer.host), address) << "slice " << slice;
    }
}

// --- every CUDA kernel against the oracle ----------------------------------------------------------

class CudaKernelTest : public ::testing::TestWithParam<const KernelEntry *> {
protected:
    const KernelEntry &kernel() const {
        return *GetParam();
    }
    /// This kernel's key at its head_dim (the any-head_dim kernel: 80, and a partial slice).
    CaseSpec base_case() const {
        CaseSpec c = kernel_case(kernel(), 80);
        c.positions.scalar_offset = 5;
        return c;
    }
};

TEST_P(CudaKernelTest, MatchesOracle) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    if (const int capability = device_capability(*d); capability < kernel().cuda_capability) {
        GTEST_SKIP() << kernel().name << " needs compute capability " << kernel().cuda_capability / 10 << "."
                     << kernel().cuda_capability % 10 << "; this GPU has " << capability / 10 << "." << capability % 10;
    }
    const Runner runner = device_runner(*d, &kernel());
    for (const CaseSpec &c : gpu_kernel_cases(base_case(), kernel().head_dim == 0)) {
        expect_correct(c, runner, kernel().name);
    }
}

INSTANTIATE_TEST_SUITE_P(CudaKernels, CudaKernelTest, ::testing::ValuesIn(all_cuda_kernels()),
                         [](const ::testing::TestParamInfo<const KernelEntry *> &info) { return std::string(info.param->name); });

// --- the dispatcher on a GPU -------------------------------------------------------------------------

TEST(CudaDispatch, PicksAVectorKernelForAlignedViewsAndTheAnyHeadDimKernelOtherwise) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    CaseSpec aligned;
    aligned.head_dim = 128;
    aligned.dtype = ROPE_DTYPE_BF16;
    RopeCall call(aligned);
    ASSERT_EQ(call.run(device_runner(*d, nullptr)), ROPE_OK) << call.report().message;
    EXPECT_NE(std::string(call.report().kernel).find("_d128_bf16__cuda_sm"), std::string::npos) << call.report().kernel;
    EXPECT_TRUE(call.check_outputs());

    CaseSpec padded = aligned;
    padded.row_pad = 1;  // a head stride of 129 elements: no whole vectors
    RopeCall unaligned(padded);
    ASSERT_EQ(unaligned.run(device_runner(*d, nullptr)), ROPE_OK) << unaligned.report().message;
    EXPECT_NE(std::string(unaligned.report().kernel).find("_dany_bf16__cuda_sm"), std::string::npos)
        << unaligned.report().kernel;
    EXPECT_TRUE(unaligned.check_outputs());
}

TEST(CudaDispatch, ABatchBeyondOneGridRunsInParts) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    CaseSpec spec;
    spec.batch = 70000;  // more sequences than a grid's 65535 blocks along y: two launches
    spec.seq = 1;
    spec.q_heads = 2;
    spec.k_heads = 1;
    // A position of its own per sequence, so the second launch must read its own part of the
    // offsets and the cache rows they name.
    spec.positions.mode = PositionMode::BatchOffsets;
    for (int64_t b = 0; b < spec.batch; b++) {
        spec.positions.values.push_back(1 + b * 37 % 4096);
    }
    RopeCall call(spec);
    ASSERT_EQ(call.run(device_runner(*d, nullptr)), ROPE_OK) << call.report().message;
    EXPECT_TRUE(call.check_outputs());
}

TEST(CudaDispatch, HostPointersAreRejected) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    RopeCall call(CaseSpec{});
    rope_params p = call.params();
    p.device = ROPE_DEVICE_CUDA;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_BAD_POINTER);
    EXPECT_NE(std::string(report.message).find("q="), std::string::npos) << report.message;
    EXPECT_TRUE(call.check_all_unchanged());
}

/// The call of the view checks: f32, q only, CaseSpec's sizes, precise source.
CaseSpec q_only_precise_case() {
    CaseSpec spec;
    spec.k_heads = 0;
    spec.source = ROPE_SOURCE_PRECISE;
    return spec;
}

size_t f32_q_bytes(const CaseSpec &spec) {
    return static_cast<size_t>(spec.batch * spec.seq * spec.q_heads * spec.head_dim) * 4;
}

/// Expects q_only_precise_case() from device address `q` into `q_out` to be refused because q
/// runs past the end of its allocation.
void expect_q_past_its_allocation(DevicePointer q, DevicePointer q_out) {
    const RopeCall call(q_only_precise_case());
    rope_params p = call.params();
    p.q.data = reinterpret_cast<void *>(q);
    p.q_out.data = reinterpret_cast<void *>(q_out);
    p.positions = rope_positions{};  // offsets from 0: no host table
    p.device = ROPE_DEVICE_CUDA;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_BAD_POINTER);
    EXPECT_NE(std::string(report.message).find("q="), std::string::npos) << report.message;
    EXPECT_NE(std::string(report.message).find("run past the end of its allocation"), std::string::npos) << report.message;
}

TEST(CudaDispatch, ViewsPastTheirAllocationAreRejected) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    const size_t bytes = f32_q_bytes(q_only_precise_case());
    DeviceBuffer q(*d, bytes - 4), q_out(*d, bytes);  // q is one element short
    expect_q_past_its_allocation(q.address(), q_out.address());
}

// Two ordinary allocations that the driver placed back to back are two buffers: a view running
// from one into the other is past the end of its allocation (only VMM chunks are followed).
TEST(CudaDispatch, AViewRunningIntoTheNextOrdinaryAllocationIsRejected) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    const size_t bytes = f32_q_bytes(q_only_precise_case());
    constexpr size_t kBlock = size_t{2} << 20;
    std::vector<std::unique_ptr<DeviceBuffer>> blocks;
    DevicePointer boundary = 0;  // where one block ends and another begins
    for (int i = 0; i < 16 && boundary == 0; i++) {
        blocks.push_back(std::make_unique<DeviceBuffer>(*d, kBlock));
        const DevicePointer latest = blocks.back()->address();
        ASSERT_NE(latest, 0u);
        for (const auto &block : blocks) {
            if (block->address() + kBlock == latest) {
                boundary = latest;
            } else if (latest + kBlock == block->address()) {
                boundary = block->address();
            }
        }
    }
    if (boundary == 0) {
        GTEST_SKIP() << "the driver placed none of 16 allocations of 2 MiB right after another";
    }
    DeviceBuffer q_out(*d, bytes);
    expect_q_past_its_allocation(boundary - bytes / 2, q_out.address());  // half in each block
}

TEST(CudaDispatch, NoCurrentContextAndNoStreamIsAnError) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    RopeCall call(CaseSpec{});
    void *current = nullptr;
    ASSERT_CUDA(d->ctx_get_current(&current));
    ASSERT_CUDA(d->ctx_set_current(nullptr));
    rope_params p = call.params();
    p.device = ROPE_DEVICE_CUDA;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_DEVICE);
    EXPECT_NE(std::string(report.message).find("no CUDA context is current"), std::string::npos) << report.message;
    void *after = nullptr;
    ASSERT_CUDA(d->ctx_get_current(&after));
    EXPECT_EQ(after, nullptr) << "the library must not create or make current a context of its own";
    ASSERT_CUDA(d->ctx_set_current(current));
}

// A host function that holds its stream until the test opens the gate.
struct Gate {
    std::atomic<bool> open{false};
    static void wait(void *gate) {
        while (!static_cast<Gate *>(gate)->open.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
};

void expect_runs_on_stream(const Driver &driver, void *engine_context, void *stream);

// An engine's own context (not the primary one) and its own non-blocking stream, held closed by a
// host function: rope_dispatch must return at once (it never synchronizes), must not have run on
// any other stream (the output is still untouched, read on the legacy stream, which does not wait
// for a non-blocking one), and once the stream runs, the result is right.
TEST(CudaDispatch, RunsOnTheCallersContextAndStreamWithoutSynchronizing) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    void *primary = nullptr, *engine_context = nullptr, *stream = nullptr;
    int device = 0;
    ASSERT_CUDA(d->ctx_get_current(&primary));
    ASSERT_CUDA(d->device_get(&device, 0));
    ASSERT_CUDA(d->ctx_create(&engine_context, 0, device));  // also makes it current
    ASSERT_CUDA(d->stream_create(&stream, kNonBlockingStream));

    expect_runs_on_stream(*d, engine_context, stream);
    EXPECT_EQ(rope_cuda_release_context(engine_context), ROPE_OK);
    ASSERT_CUDA(d->stream_destroy(stream));
    ASSERT_CUDA(d->ctx_destroy(engine_context));
    ASSERT_CUDA(d->ctx_set_current(primary));
}

void expect_runs_on_stream(const Driver &driver, void *engine_context, void *stream) {
    const Driver *d = &driver;
    CaseSpec spec;
    spec.head_dim = 128;
    spec.batch = 4;
    spec.seq = 64;
    RopeCall call(spec);
    const rope_params host = call.params();
    const size_t q_bytes = static_cast<size_t>(spec.batch * spec.seq * spec.q_heads * 128) * 4;
    const size_t k_bytes = static_cast<size_t>(spec.batch * spec.seq * spec.k_heads * 128) * 4;
    DeviceBuffer q(*d, q_bytes), k(*d, k_bytes), q_out(*d, q_bytes), k_out(*d, k_bytes);
    const size_t table_bytes = static_cast<size_t>(host.angles.cache_len * 64) * 4;
    DeviceBuffer cos(*d, table_bytes), sin(*d, table_bytes);
    ASSERT_EQ(host.positions.data, nullptr) << "one scalar offset: nothing to copy";
    ASSERT_CUDA(d->memcpy_htod(q.address(), host.q.data, q_bytes));
    ASSERT_CUDA(d->memcpy_htod(k.address(), host.k.data, k_bytes));
    ASSERT_CUDA(d->memcpy_htod(q_out.address(), host.q_out.data, q_bytes));
    ASSERT_CUDA(d->memcpy_htod(k_out.address(), host.k_out.data, k_bytes));
    ASSERT_CUDA(d->memcpy_htod(cos.address(), host.angles.cos_cache, table_bytes));
    ASSERT_CUDA(d->memcpy_htod(sin.address(), host.angles.sin_cache, table_bytes));

    rope_params p = host;
    p.q.data = reinterpret_cast<void *>(q.address());
    p.k.data = reinterpret_cast<void *>(k.address());
    p.q_out.data = reinterpret_cast<void *>(q_out.address());
    p.k_out.data = reinterpret_cast<void *>(k_out.address());
    p.angles.cos_cache = reinterpret_cast<void *>(cos.address());
    p.angles.sin_cache = reinterpret_cast<void *>(sin.address());
    p.device = ROPE_DEVICE_CUDA;
    p.stream = stream;

    // The first call on a context loads the kernel's module, and the driver may wait for the
    // context's work while it does (lazy loading, rope.h): warm up, then restore the outputs.
    rope_report warm_up = rope_report_init();
    ASSERT_EQ(rope_dispatch(&p, &warm_up), ROPE_OK) << warm_up.message;
    ASSERT_CUDA(d->stream_synchronize(stream));
    ASSERT_CUDA(d->memcpy_htod(q_out.address(), host.q_out.data, q_bytes));
    ASSERT_CUDA(d->memcpy_htod(k_out.address(), host.k_out.data, k_bytes));

    Gate gate;
    ASSERT_CUDA(d->launch_host_func(stream, Gate::wait, &gate));
    // The gate opens only after rope_dispatch returns: a call that synchronized would never
    // return (ctest's timeout then fails the test).
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
    EXPECT_EQ(d->stream_query(stream), kNotReady) << "the stream is still held by the gate";
    std::vector<uint8_t> untouched(q_bytes);
    ASSERT_CUDA(d->memcpy_dtoh(untouched.data(), q_out.address(), q_bytes));
    EXPECT_EQ(std::memcmp(untouched.data(), host.q_out.data, q_bytes), 0)
        << "q_out changed before the caller's stream ran: the kernel ran on another stream";
    void *current = nullptr;
    ASSERT_CUDA(d->ctx_get_current(&current));
    EXPECT_EQ(current, engine_context) << "the caller's current context must be left as it was";

    gate.open.store(true);
    ASSERT_CUDA(d->stream_synchronize(stream));
    ASSERT_CUDA(d->memcpy_dtoh(host.q_out.data, q_out.address(), q_bytes));
    ASSERT_CUDA(d->memcpy_dtoh(host.k_out.data, k_out.address(), k_bytes));
    EXPECT_TRUE(call.check_outputs());
}


// --- failures the driver reports -------------------------------------------------------------------

/// The driver functions of the VMM test, beyond Driver.
struct ExtraDriver {
    Result (*mem_get_granularity)(size_t *, const void *, int);
    Result (*mem_create)(unsigned long long *, size_t, const void *, unsigned long long);
    Result (*mem_address_reserve)(DevicePointer *, size_t, size_t, DevicePointer, unsigned long long);
    Result (*mem_map)(DevicePointer, size_t, size_t, unsigned long long, unsigned long long);
    Result (*mem_set_access)(DevicePointer, size_t, const void *, size_t);
    Result (*mem_unmap)(DevicePointer, size_t);
    Result (*mem_release)(unsigned long long);
    Result (*mem_address_free)(DevicePointer, size_t);
};

const ExtraDriver *extra_driver(std::string *why) {
    static ExtraDriver e;
    static std::string error;
    static const bool ready = bind(&e.mem_get_granularity, "cuMemGetAllocationGranularity", &error) &&
                              bind(&e.mem_create, "cuMemCreate", &error) &&
                              bind(&e.mem_address_reserve, "cuMemAddressReserve", &error) &&
                              bind(&e.mem_map, "cuMemMap", &error) && bind(&e.mem_set_access, "cuMemSetAccess", &error) &&
                              bind(&e.mem_unmap, "cuMemUnmap", &error) && bind(&e.mem_release, "cuMemRelease", &error) &&
                              bind(&e.mem_address_free, "cuMemAddressFree", &error);
    if (!ready) {
        *why = error;
        return nullptr;
    }
    return &e;
}

// cuda.h layouts (CUDA 11.2+), for the VMM test.
struct MemLocation {
    int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
    int id;
};
struct MemAllocationProp {
    int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED = 1
    int requested_handle_types;  // 0: none
    MemLocation location;
    void *win32_handle_meta_data;
    unsigned char compression_type, gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
};
struct MemAccessDesc {
    MemLocation location;
    int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
};

void use_threadsafe_death_tests() {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
}

// A module that cannot load (here: no device memory left for it, on a fresh context, loaded
// eagerly) is a status, not an abort inside Halide's halide_cuda_run (cuda_stub_test.cpp checks
// the same with a stand-in driver). The module may still fit: then the failure path did not run,
// and the test skips, saying so. In a child process, which may be left without memory.
constexpr int kModuleFit = 8;  // the child's exit code when the call succeeded

TEST(CudaDispatch, AModuleThatCannotLoadIsAStatusNotAnAbort) {
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // seen by the child's cuInit
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    use_threadsafe_death_tests();
    const auto child = [&]() {
            void *context = nullptr;
            int device = 0;
            if (d->device_get(&device, 0) != kSuccess || d->ctx_create(&context, 0, device) != kSuccess) {
                std::_Exit(5);
            }
            CaseSpec spec;  // f32 cache, head_dim 64: no module loaded on this new context yet
            spec.k_heads = 0;
            RopeCall call(spec);
            const rope_params host = call.params();
            ValidCall valid;
            std::string message;
            if (validate(&host, &valid, &message) != ROPE_OK) {
                std::_Exit(6);
            }
            std::vector<std::unique_ptr<DeviceBuffer>> keep;
            rope_params p = host;
            for (const MemoryRange &r : memory_ranges(valid)) {
                keep.push_back(std::make_unique<DeviceBuffer>(*d, r.last - r.first + 1));
                const auto device_address = reinterpret_cast<void *>(keep.back()->address());
                if (std::string(r.name) == "q") p.q.data = device_address;
                if (std::string(r.name) == "q_out") p.q_out.data = device_address;
                if (std::string(r.name) == "angles.cos_cache") p.angles.cos_cache = device_address;
                if (std::string(r.name) == "angles.sin_cache") p.angles.sin_cache = device_address;
                if (std::string(r.name) == "positions.data") p.positions.data = device_address;
            }
            // Take every byte of device memory the driver will give, down to 4 KiB pieces.
            std::vector<DevicePointer> hoard;
            for (size_t piece = size_t{1} << 30; piece >= 4096; piece /= 2) {
                DevicePointer a = 0;
                while (d->mem_alloc(&a, piece) == kSuccess) {
                    hoard.push_back(a);
                }
            }
            p.device = ROPE_DEVICE_CUDA;
            rope_report report = rope_report_init();
            const rope_status status = rope_dispatch(&p, &report);
            const bool named = std::string(report.message).find("CUDA_ERROR_") != std::string::npos;
            std::_Exit(status == ROPE_OK ? kModuleFit : status == ROPE_ERR_DEVICE && named ? 0 : 7);
    };
    int exit_code = -1;
    const auto exited = [&exit_code](int status) {
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_code == 0 || exit_code == kModuleFit;
    };
    EXPECT_EXIT(child(), exited, "");
    if (exit_code == kModuleFit) {
        GTEST_SKIP() << "the module still fit in the device memory left: the call succeeded, the failure path did not run";
    }
}

// A tensor of PyTorch's expandable segments (VMM: cuMemCreate chunks mapped back to back in one
// reservation) is one valid view, though cuMemGetAddressRange returns only the chunk holding a
// pointer.
TEST(CudaDispatch, AViewAcrossTwoMappedChunksOfOneReservationIsAccepted) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    std::string why;
    const ExtraDriver *e = extra_driver(&why);
    ASSERT_NE(e, nullptr) << why;
    int device = 0;
    ASSERT_CUDA(d->device_get(&device, 0));
    MemAllocationProp prop{};
    prop.type = 1;
    prop.location = {1, device};
    size_t granularity = 0;
    ASSERT_CUDA(e->mem_get_granularity(&granularity, &prop, 0));
    // q of [1, S, 4, 128] f32 spanning 2 granules (2 MiB each on current GPUs), q_out likewise.
    const size_t reserved = 4 * granularity;
    DevicePointer base = 0;
    ASSERT_CUDA(e->mem_address_reserve(&base, reserved, 0, 0, 0));
    unsigned long long chunks[4] = {};
    for (int i = 0; i < 4; i++) {
        ASSERT_CUDA(e->mem_create(&chunks[i], granularity, &prop, 0));
        ASSERT_CUDA(e->mem_map(base + i * granularity, granularity, 0, chunks[i], 0));
    }
    const MemAccessDesc access{{1, device}, 3};
    ASSERT_CUDA(e->mem_set_access(base, reserved, &access, 1));

    CaseSpec spec;
    spec.batch = 1;
    spec.q_heads = 4;
    spec.k_heads = 0;
    spec.head_dim = 128;
    spec.seq = static_cast<int64_t>(2 * granularity / (4 * 128 * 4));  // q fills chunks 0-1
    spec.source = ROPE_SOURCE_PRECISE;
    RopeCall call(spec);
    const size_t bytes = static_cast<size_t>(spec.seq * 4 * 128) * 4;
    ASSERT_EQ(bytes, 2 * granularity);
    const rope_params host = call.params();
    ASSERT_CUDA(d->memcpy_htod(base, host.q.data, bytes));
    rope_params p = host;
    p.q.data = reinterpret_cast<void *>(base);                           // chunks 0-1
    p.q_out.data = reinterpret_cast<void *>(base + 2 * granularity);     // chunks 2-3
    p.device = ROPE_DEVICE_CUDA;
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
    ASSERT_CUDA(d->ctx_synchronize());
    if (report.status == ROPE_OK) {
        ASSERT_CUDA(d->memcpy_dtoh(host.q_out.data, base + 2 * granularity, bytes));
        EXPECT_TRUE(call.check_outputs());
    }
    for (int i = 0; i < 4; i++) {
        e->mem_unmap(base + i * granularity, granularity);
        e->mem_release(chunks[i]);
    }
    e->mem_address_free(base, reserved);
}

// Memory of another context resolves (one address space) but is not mapped in the call's context:
// ROPE_ERR_BAD_POINTER, not a fault. In a child process: a fault would leave the context unusable.
TEST(CudaDispatch, APointerOfAnotherContextIsRejected) {
    ROPEGEN_SKIP_WITHOUT_GPU(d);
    use_threadsafe_death_tests();
    const auto child = [&]() {
            CaseSpec spec;
            spec.k_heads = 0;
            spec.source = ROPE_SOURCE_PRECISE;
            RopeCall call(spec);
            const rope_params host = call.params();
            const size_t bytes = static_cast<size_t>(spec.batch * spec.seq * spec.q_heads * spec.head_dim) * 4;
            DeviceBuffer q(*d, bytes), q_out(*d, bytes);  // the primary context's
            void *engine = nullptr;
            int device = 0;
            if (d->device_get(&device, 0) != kSuccess || d->ctx_create(&engine, 0, device) != kSuccess) {
                std::_Exit(5);
            }
            rope_params p = host;  // the call runs on `engine`, current now
            p.q.data = reinterpret_cast<void *>(q.address());
            p.q_out.data = reinterpret_cast<void *>(q_out.address());
            p.device = ROPE_DEVICE_CUDA;
            rope_report report = rope_report_init();
            const rope_status status = rope_dispatch(&p, &report);
            if (status == ROPE_ERR_BAD_POINTER) {
                std::_Exit(0);
            }
            std::_Exit(status == ROPE_OK ? (d->ctx_synchronize() == kSuccess ? 2 : 3) : 4);  // 3: it faulted
    };
    EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ropegen::test
