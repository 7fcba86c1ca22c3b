// SPDX-License-Identifier: Apache-2.0
// CUDA calls against a stand-in driver (stub_cuda.c, loaded as libcuda.so.1 through the
// LD_LIBRARY_PATH ctest sets), so that what only a GPU's driver does runs on every machine: cuInit
// failing (no device visible), a module that cannot load, a pointer of another context, a view
// across allocations, and the launches a call makes. The stub's "device memory" is host memory, so a test reads what a call
// left there. A failure chosen with ROPEGEN_STUB_CUDA_FAIL holds for the process, and the library
// loads the driver once: such a test runs in a process of its own (ctest runs each test alone).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "internal/cuda_device.h"
#include "internal/validate.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

using DevicePointer = unsigned long long;

/// A function of the libcuda.so.1 this process loads (loading it when the library has not yet),
/// which must be the stub.
template <typename Function>
Function stub(const char *name) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr || dlsym(driver, "ropegen_stub_launches") == nullptr) {
        ADD_FAILURE() << "libcuda.so.1 here is not the stub driver: run through ctest (LD_LIBRARY_PATH)";
        return nullptr;
    }
    return reinterpret_cast<Function>(dlsym(driver, name));
}

/// Launches so far in this process (every test but the first shares it when run without ctest).
int launches() {
    const auto count = stub<int (*)()>("ropegen_stub_launches");
    return count != nullptr ? count() : -1;
}

/// Chooses the stub's failure; false (and a skip) when the driver is loaded already.
bool fresh_process_failing(const char *entry) {
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr) {
        return false;
    }
    setenv("ROPEGEN_STUB_CUDA_FAIL", entry, 1);
    return true;
}

#define ROPEGEN_STUB_FAILING(entry)         \
    if (!fresh_process_failing(entry))      \
    GTEST_SKIP() << "needs a process of its own, whose driver is not loaded yet (ctest runs each test alone)"

/// The pointer of `p` that a MemoryRange's name names.
const void *&pointer(rope_params &p, const std::string &name) {
    static const void *none = nullptr;
    const void **fields[] = {const_cast<const void **>(&p.q.data), const_cast<const void **>(&p.k.data),
                             const_cast<const void **>(&p.q_out.data), const_cast<const void **>(&p.k_out.data),
                             &p.positions.data, &p.angles.cos_cache, &p.angles.sin_cache};
    const char *names[] = {"q", "k", "q_out", "k_out", "positions.data", "angles.cos_cache", "angles.sin_cache"};
    for (size_t i = 0; i < 7; i++) {
        if (name == names[i]) {
            return *fields[i];
        }
    }
    ADD_FAILURE() << "no argument " << name;
    return none;
}

/// How DeviceCall places a call's ranges in stub device memory.
enum class Placement {
    Apart,        ///< an allocation each
    AsAnEngine,   ///< ranges that overlap in host memory (the views of one packed QKV buffer, in
                  ///< place) in one allocation at their offsets there; the cos and sin tables side
                  ///< by side in another (vLLM's cos_sin_cache); the positions in a third
};

/// `call`'s arguments with every range it touches copied into stub device memory of the current
/// context.
struct DeviceCall {
    rope_params params;
    std::vector<std::pair<std::string, size_t>> ranges;  // by name, their sizes
    int allocations = 0;

    explicit DeviceCall(const RopeCall &call, Placement placement = Placement::Apart) : params(call.params()) {
        ValidCall valid;
        std::string message;
        EXPECT_EQ(validate(&params, &valid, &message), ROPE_OK) << message;
        // Groups of ranges that share an allocation, each range with its offset there.
        std::vector<std::vector<std::pair<MemoryRange, size_t>>> groups;
        std::vector<size_t> group_bytes;
        auto table = [](const MemoryRange &r) { return std::string(r.name).rfind("angles.", 0) == 0; };
        auto overlap = [](const MemoryRange &a, const MemoryRange &b) { return a.first <= b.last && b.first <= a.last; };
        for (const MemoryRange &range : memory_ranges(valid)) {
            ranges.push_back({range.name, range.last - range.first + 1});
            size_t g = 0;
            for (; placement == Placement::AsAnEngine && g < groups.size(); g++) {
                if (std::any_of(groups[g].begin(), groups[g].end(), [&](const auto &member) {
                        return overlap(range, member.first) || (table(range) && table(member.first));
                    })) {
                    break;
                }
            }
            if (g == groups.size()) {
                groups.emplace_back();
                group_bytes.push_back(0);
            }
            // At the same distance from a member it overlaps as in host memory (the group's first
            // range starts lowest in the layouts used); else after the group's last byte.
            size_t offset = group_bytes[g];
            for (const auto &[member, at] : groups[g]) {
                if (overlap(range, member)) {
                    EXPECT_GE(range.first, member.first) << range.name << " starts before " << member.name;
                    offset = at + (range.first - member.first);
                    break;
                }
            }
            groups[g].push_back({range, offset});
            group_bytes[g] = std::max(group_bytes[g], offset + ranges.back().second);
        }
        const auto alloc = stub<int (*)(DevicePointer *, size_t)>("cuMemAlloc_v2");
        for (size_t g = 0; g < groups.size(); g++) {
            DevicePointer address = 0;
            EXPECT_EQ(alloc != nullptr ? alloc(&address, group_bytes[g]) : -1, 0) << groups[g].front().first.name;
            for (const auto &[range, offset] : groups[g]) {
                std::memcpy(reinterpret_cast<void *>(address + offset), reinterpret_cast<const void *>(range.first),
                            range.last - range.first + 1);
                pointer(params, range.name) = reinterpret_cast<void *>(address + offset);
            }
        }
        allocations = static_cast<int>(groups.size());
        params.device = ROPE_DEVICE_CUDA;
    }

    /// True when every copy still holds what the host buffer it came from holds.
    bool unchanged(const RopeCall &call) {
        rope_params host = call.params();
        for (const auto &[name, bytes] : ranges) {
            if (std::memcmp(pointer(params, name), pointer(host, name), bytes) != 0) {
                return false;
            }
        }
        return true;
    }
};

CaseSpec q_only_cache_case() {
    CaseSpec spec;
    spec.head_dim = 128;
    spec.k_heads = 0;
    return spec;
}

// The stub itself: a valid call runs (so the failures below are the driver's, not the stub's).
TEST(CudaStubDriver, AValidCallLaunchesKernels) {
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);
    rope_report report = rope_report_init();
    const int before = launches();
    EXPECT_EQ(rope_dispatch(&device.params, &report), ROPE_OK) << report.message;
    EXPECT_GT(launches(), before);
}

// cuInit failing (CUDA_VISIBLE_DEVICES="", a container without GPUs) once deadlocked: the error's
// name was looked up through the driver still being loaded, on the same std::call_once.
TEST(CudaStubDriver, ACuInitFailureIsADeviceErrorNotAHang) {
    ROPEGEN_STUB_FAILING("cuInit");
    RopeCall call(q_only_cache_case());  // host pointers: the call fails before they are looked at
    rope_params p = call.params();
    p.device = ROPE_DEVICE_CUDA;
    rope_report report = rope_report_init();
    auto status = std::async(std::launch::async, [&] { return rope_dispatch(&p, &report); });
    if (status.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
        std::fprintf(stderr, "rope_dispatch has not returned after 20 s: deadlocked loading the driver\n");
        std::_Exit(1);  // the call's thread cannot be joined
    }
    EXPECT_EQ(status.get(), ROPE_ERR_DEVICE);
    EXPECT_NE(std::string(report.message).find("cuInit failed with CUDA_ERROR_NO_DEVICE"), std::string::npos)
        << report.message;
    rope_report query = rope_report_init();
    EXPECT_EQ(rope_query(&p, &query), ROPE_ERR_DEVICE);
    EXPECT_STREQ(query.message, report.message);
    EXPECT_TRUE(call.check_all_unchanged());
    EXPECT_EQ(launches(), 0);
}

// A module that cannot load (out of device memory, a JIT failure, no binary for the GPU) once
// aborted the process inside Halide's halide_cuda_run.
TEST(CudaStubDriver, AModuleThatCannotLoadIsADeviceErrorAndLaunchesNothing) {
    ROPEGEN_STUB_FAILING("cuModuleLoadDataEx");
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);
    for (int attempt = 0; attempt < 2; attempt++) {  // a failed load is not cached
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_dispatch(&device.params, &report), ROPE_ERR_DEVICE) << "attempt " << attempt;
        EXPECT_NE(std::string(report.message).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << report.message;
        EXPECT_NE(std::string(report.kernel).find("__cuda_sm86"), std::string::npos) << report.kernel;
    }
    EXPECT_EQ(launches(), 0);
    EXPECT_TRUE(device.unchanged(call));
}

// A launch that fails (a block asking too much shared memory, say) once left Halide's hold on the
// kernel's module behind: once the call had failed, the library's hook refused the context to
// halide_cuda_finalize_kernels too, so rope_cuda_release_context could not unload the module, and
// a new context given the old one's handle ran on the dead module.
TEST(CudaStubDriver, AFailedLaunchStillLetsTheContextsKernelsBeReleased) {
    ROPEGEN_STUB_FAILING("cuLaunchKernel");
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);
    void *context = nullptr;
    ASSERT_EQ(stub<int (*)(void **)>("cuCtxGetCurrent")(&context), 0);
    const auto unloads = stub<int (*)()>("ropegen_stub_unloads");
    for (int attempt = 0; attempt < 2; attempt++) {  // a second call on the released context loads it again
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_dispatch(&device.params, &report), ROPE_ERR_DEVICE) << "attempt " << attempt;
        EXPECT_NE(std::string(report.message).find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos)
            << report.message;
        EXPECT_EQ(rope_cuda_release_context(context), ROPE_OK);
        EXPECT_EQ(unloads(), attempt + 1) << "the module is unloaded on release";
    }
    EXPECT_EQ(launches(), 0);
    EXPECT_TRUE(device.unchanged(call));
}

// A context destroyed already cannot be made current: Halide's release would then go on with the
// caller's context (and pop it). Refused, with the caller's context left current.
TEST(CudaStubDriver, ReleasingAContextThatCannotBeMadeCurrentIsADeviceError) {
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_dispatch(&device.params, &report), ROPE_OK) << report.message;  // the driver is loaded
    void *before = nullptr, *after = nullptr;
    ASSERT_EQ(stub<int (*)(void **)>("cuCtxGetCurrent")(&before), 0);
    int not_a_context = 0;
    EXPECT_EQ(rope_cuda_release_context(&not_a_context), ROPE_ERR_DEVICE);
    ASSERT_EQ(stub<int (*)(void **)>("cuCtxGetCurrent")(&after), 0);
    EXPECT_EQ(after, before);
}

// A pointer query that fails for the driver's own reasons (shutting down, a sticky error) is a
// device error naming CUDA's error, not a bad pointer of the caller's.
TEST(CudaStubDriver, APointerQueryTheDriverFailsIsADeviceError) {
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);  // before the failure is chosen: the stub is loaded by then
    setenv("ROPEGEN_STUB_CUDA_FAIL", "cuPointerGetAttribute", 1);
    rope_report report = rope_report_init();
    const int before = launches();
    const rope_status status = rope_dispatch(&device.params, &report);
    unsetenv("ROPEGEN_STUB_CUDA_FAIL");
    EXPECT_EQ(status, ROPE_ERR_DEVICE) << report.message;
    EXPECT_NE(std::string(report.message).find("CUDA_ERROR_DEINITIALIZED"), std::string::npos) << report.message;
    EXPECT_NE(std::string(report.message).find("q="), std::string::npos) << report.message;
    EXPECT_EQ(launches(), before);
    EXPECT_TRUE(device.unchanged(call));
}

// Every context shares one address space, so a pointer of another context resolves, but the
// call's context cannot reach that memory.
TEST(CudaStubDriver, APointerOfAnotherContextIsRefused) {
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);  // the primary context's memory
    const int before = launches();
    const auto create = stub<int (*)(void **, unsigned, int)>("cuCtxCreate_v2");
    void *primary = nullptr, *engine = nullptr;
    ASSERT_EQ(stub<int (*)(void **)>("cuCtxGetCurrent")(&primary), 0);
    ASSERT_EQ(create(&engine, 0, 0), 0);  // current now: the call runs on it
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&device.params, &report), ROPE_ERR_BAD_POINTER);
    EXPECT_NE(std::string(report.message).find("q="), std::string::npos) << report.message;
    EXPECT_NE(std::string(report.message).find("another CUDA context"), std::string::npos) << report.message;
    EXPECT_EQ(launches(), before);
    EXPECT_TRUE(device.unchanged(call));
    stub<int (*)(void *)>("cuCtxSetCurrent")(primary);
}

enum class Piece { Ordinary, MappedChunk };

/// `pieces`, `bytes` each, back to back in one reservation of stub device memory: ordinary
/// allocations of the current context (as cuMemAlloc_v2 may place them) or VMM chunks; the first's
/// address.
DevicePointer back_to_back(const std::vector<Piece> &pieces, size_t bytes) {
    const auto reserve = stub<int (*)(DevicePointer *, size_t, size_t, DevicePointer, unsigned long long)>("cuMemAddressReserve");
    const auto create = stub<int (*)(unsigned long long *, size_t, const void *, unsigned long long)>("cuMemCreate");
    const auto map = stub<int (*)(DevicePointer, size_t, size_t, unsigned long long, unsigned long long)>("cuMemMap");
    const auto alloc_at = stub<int (*)(DevicePointer, size_t)>("ropegen_stub_alloc_at");
    DevicePointer base = 0;
    EXPECT_EQ(reserve(&base, pieces.size() * bytes, 0, 0, 0), 0);
    for (size_t i = 0; i < pieces.size(); i++) {
        const DevicePointer at = base + i * bytes;
        if (pieces[i] == Piece::MappedChunk) {
            unsigned long long handle = 0;
            EXPECT_EQ(create(&handle, bytes, nullptr, 0), 0);
            EXPECT_EQ(map(at, bytes, 0, handle, 0), 0);
        } else {
            EXPECT_EQ(alloc_at(at, bytes), 0);
        }
    }
    return base;
}

// A view may run from one allocation into the next only where both are VMM chunks (PyTorch's
// expandable segments): past the end of an ordinary allocation lies whatever buffer the driver
// placed there.
TEST(CudaStubDriver, AViewCrossesFromOneAllocationIntoTheNextOnlyBetweenVmmChunks) {
    RopeCall call(q_only_cache_case());
    DeviceCall device(call);
    ASSERT_EQ(device.ranges.front().first, "q");
    const size_t q_bytes = device.ranges.front().second;
    const struct {
        const char *name;
        Piece first, second;
        rope_status expected;
    } layouts[] = {{"two VMM chunks", Piece::MappedChunk, Piece::MappedChunk, ROPE_OK},
                   {"two ordinary allocations", Piece::Ordinary, Piece::Ordinary, ROPE_ERR_BAD_POINTER},
                   {"a VMM chunk, then an ordinary allocation", Piece::MappedChunk, Piece::Ordinary, ROPE_ERR_BAD_POINTER},
                   {"an ordinary allocation, then a VMM chunk", Piece::Ordinary, Piece::MappedChunk, ROPE_ERR_BAD_POINTER}};
    for (const auto &layout : layouts) {
        SCOPED_TRACE(layout.name);
        const DevicePointer q = back_to_back({layout.first, layout.second}, (q_bytes + 1) / 2);  // q ends in the second
        std::memcpy(reinterpret_cast<void *>(q), device.params.q.data, q_bytes);
        rope_params p = device.params;
        p.q.data = reinterpret_cast<void *>(q);
        const int before = launches();
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_dispatch(&p, &report), layout.expected) << report.message;
        if (layout.expected == ROPE_OK) {
            EXPECT_GT(launches(), before);
        } else {
            EXPECT_NE(std::string(report.message).find("q="), std::string::npos) << report.message;
            EXPECT_NE(std::string(report.message).find("run past the end of its allocation"), std::string::npos) << report.message;
            EXPECT_EQ(launches(), before);
            EXPECT_TRUE(device.unchanged(call));
        }
    }
}

/// Address lookups and device attribute queries so far in this process.
int address_lookups() {
    return stub<int (*)()>("ropegen_stub_address_lookups")();
}

int device_queries() {
    return stub<int (*)()>("ropegen_stub_device_queries")();
}

// A decode step as an engine lays it out (q and k views of one packed QKV buffer rotated in place,
// one cos/sin table, the positions) costs a driver lookup per allocation, not per view, and the
// device's compute capability is asked for once.
TEST(CudaStubDriver, TheViewsOfOneAllocationAreLookedUpOnce) {
    CaseSpec spec = q_only_cache_case();
    spec.k_heads = 2;
    spec.memory = Memory::PackedQkvInPlace;
    spec.positions.mode = PositionMode::Table;
    spec.positions.values = {4, 9, 1, 7, 3, 8, 2, 6, 5, 0};
    RopeCall call(spec);
    DeviceCall device(call, Placement::AsAnEngine);
    ASSERT_EQ(device.ranges.size(), 7u);  // q, k, q_out, k_out, positions, cos, sin
    ASSERT_EQ(device.allocations, 3);
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_dispatch(&device.params, &report), ROPE_OK) << report.message;
    const int lookups = address_lookups(), queries = device_queries();
    ASSERT_EQ(rope_dispatch(&device.params, &report), ROPE_OK) << report.message;
    EXPECT_EQ(address_lookups() - lookups, device.allocations);
    EXPECT_EQ(device_queries() - queries, 0);
}

// A view that begins inside bytes an earlier view of the call had checked and runs past their
// allocation is looked up on its own, and refused.
TEST(CudaStubDriver, AViewRunningOutOfAnAllocationCheckedForAnotherIsRefused) {
    CaseSpec spec = q_only_cache_case();
    spec.k_heads = 2;
    RopeCall call(spec);
    DeviceCall device(call);
    ASSERT_EQ(device.ranges[0].first, "q");
    ASSERT_EQ(device.ranges[1].first, "k");
    const size_t q_bytes = device.ranges[0].second, k_bytes = device.ranges[1].second;
    DevicePointer qk = 0;  // q, then the first half of k
    ASSERT_EQ(stub<int (*)(DevicePointer *, size_t)>("cuMemAlloc_v2")(&qk, q_bytes + k_bytes / 2), 0);
    std::memcpy(reinterpret_cast<void *>(qk), device.params.q.data, q_bytes);
    rope_params p = device.params;
    p.q.data = reinterpret_cast<void *>(qk);
    p.k.data = reinterpret_cast<void *>(qk + q_bytes);
    const int before = launches();
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_dispatch(&p, &report), ROPE_ERR_BAD_POINTER) << report.message;
    EXPECT_NE(std::string(report.message).find("k="), std::string::npos) << report.message;
    EXPECT_NE(std::string(report.message).find("run past the end of its allocation"), std::string::npos) << report.message;
    EXPECT_EQ(launches(), before);
}

// The kernels index the positions with 32 bits: a table whose batch and seq spans each fit but
// add up to 2^31 or more must be split (here into its two batch items: twice the launches).
TEST(CudaStubDriver, APositionsTableSpanningTwoToThe31IsSplit) {
    CaseSpec spec = q_only_cache_case();
    spec.batch = 2;
    spec.seq = 2;
    spec.positions.mode = PositionMode::Table;
    spec.positions.index_type = ROPE_INDEX_INT32;
    spec.positions.values = {3, 5, 7, 9};
    RopeCall call(spec);
    DeviceCall device(call);
    rope_report report = rope_report_init();
    const int before = launches();
    ASSERT_EQ(rope_dispatch(&device.params, &report), ROPE_OK) << report.message;
    const int one_part = launches() - before;

    const int64_t batch_stride = int64_t{1} << 30, seq_stride = batch_stride + 1;
    const auto alloc = stub<int (*)(DevicePointer *, size_t)>("cuMemAlloc_v2");
    DevicePointer table = 0;  // reserved, not committed: only the four entries are written
    ASSERT_EQ(alloc(&table, static_cast<size_t>(batch_stride + seq_stride + 1) * 4), 0);
    for (int64_t b = 0; b < 2; b++) {
        for (int64_t s = 0; s < 2; s++) {
            reinterpret_cast<int32_t *>(table)[b * batch_stride + s * seq_stride] = static_cast<int32_t>(spec.positions.values[b * 2 + s]);
        }
    }
    rope_params p = device.params;
    p.positions.data = reinterpret_cast<void *>(table);
    p.positions.strides[0] = batch_stride;
    p.positions.strides[1] = seq_stride;
    ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
    EXPECT_EQ(launches() - before - one_part, 2 * one_part) << "one launch per batch item's slice";
}

}  // namespace
}  // namespace ropegen::test
