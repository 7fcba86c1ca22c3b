// SPDX-License-Identifier: Apache-2.0
// A stand-in for the CUDA driver (built as libcuda.so.1, found through LD_LIBRARY_PATH), so that
// the driver's failures reach the library on machines without a GPU (cuda_stub_test.cpp). It
// stands for one device (compute capability 8.6) with one context per cuCtxCreate_v2; "device
// memory" is host memory (so a test can read what a call left there) that cuMemAlloc_v2 records
// with the context current at the time, and that cuMemGetAddressRange_v2 and cuPointerGetAttribute
// answer for, as for the chunks cuMemMap maps into a range cuMemAddressReserve reserved (memory
// of no context, as VMM memory is). Modules load without compiling anything and launches run nothing: they are counted
// (ropegen_stub_launches), as are module unloads (ropegen_stub_unloads), address lookups
// (ropegen_stub_address_lookups) and device attribute queries (ropegen_stub_device_queries). ROPEGEN_STUB_CUDA_FAIL
// picks a failure: "cuInit" (no device: as with CUDA_VISIBLE_DEVICES=""), "cuModuleLoadDataEx"
// (out of device memory, as when the module does not fit), "cuLaunchKernel" (out of resources, as
// for a block asking too much shared memory) or "cuPointerGetAttribute" (a driver shutting down).
// Pushing a context it never created fails, as for a destroyed one. Entry points the tests never
// reach return CUDA_ERROR_NOT_SUPPORTED.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    kSuccess = 0,
    kInvalidValue = 1,
    kOutOfMemory = 2,
    kDeinitialized = 4,
    kNoDevice = 100,
    kInvalidContext = 201,
    kLaunchOutOfResources = 701,
    kNotSupported = 801,
};

struct Context {
    int id;
};
enum { kMaxContexts = 8, kMaxAllocations = 128 };
static struct Context g_contexts[kMaxContexts] = {{0}};  // [0]: the primary context, current at start
static int g_context_count = 1;
static struct Context *g_current = &g_contexts[0];

struct Allocation {
    CUdeviceptr start;
    size_t size;
    struct Context *owner;       // NULL for a mapped chunk
    unsigned long long handle;   // cuMemCreate's, for a mapped chunk; 0 otherwise
};
static struct Allocation g_allocations[kMaxAllocations];
static int g_allocation_count = 0;
static int g_launches = 0;
static int g_unloads = 0;
static int g_address_lookups = 0;
static int g_device_queries = 0;
static int g_module;  // the one module's handle
static unsigned long long g_handles = 0;  // cuMemCreate's handles so far

static int failing(const char *entry) {
    const char *chosen = getenv("ROPEGEN_STUB_CUDA_FAIL");
    return chosen != NULL && strcmp(chosen, entry) == 0;
}

static const struct Allocation *find(CUdeviceptr p) {
    for (int i = 0; i < g_allocation_count; i++) {
        if (g_allocations[i].start <= p && p - g_allocations[i].start < g_allocations[i].size) {
            return &g_allocations[i];
        }
    }
    return NULL;
}

// --- what only the tests call ----------------------------------------------------------------
int ropegen_stub_launches(void) {
    return g_launches;
}

int ropegen_stub_unloads(void) {
    return g_unloads;
}

int ropegen_stub_address_lookups(void) {
    return g_address_lookups;
}

int ropegen_stub_device_queries(void) {
    return g_device_queries;
}

// An ordinary allocation of the current context at `address` (in a range cuMemAddressReserve
// gave): what cuMemAlloc_v2 returns when the driver places it right after another allocation.
CUresult ropegen_stub_alloc_at(CUdeviceptr address, size_t bytes) {
    if (g_current == NULL || g_allocation_count == kMaxAllocations) {
        return kInvalidValue;
    }
    g_allocations[g_allocation_count++] = (struct Allocation){address, bytes, g_current, 0};
    return kSuccess;
}

// --- the entry points the library and Halide's CUDA runtime use -------------------------------
CUresult cuInit(unsigned flags) {
    (void)flags;
    return failing("cuInit") ? kNoDevice : kSuccess;
}

CUresult cuGetErrorName(CUresult result, const char **name) {
    switch (result) {
    case kOutOfMemory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return kSuccess;
    case kDeinitialized: *name = "CUDA_ERROR_DEINITIALIZED"; return kSuccess;
    case kLaunchOutOfResources: *name = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return kSuccess;
    case kNoDevice: *name = "CUDA_ERROR_NO_DEVICE"; return kSuccess;
    case kInvalidValue: *name = "CUDA_ERROR_INVALID_VALUE"; return kSuccess;
    case kInvalidContext: *name = "CUDA_ERROR_INVALID_CONTEXT"; return kSuccess;
    case kNotSupported: *name = "CUDA_ERROR_NOT_SUPPORTED"; return kSuccess;
    default: return kInvalidValue;
    }
}

CUresult cuCtxGetCurrent(void **context) {
    *context = g_current;
    return kSuccess;
}

CUresult cuCtxSetCurrent(void *context) {
    g_current = context;
    return kSuccess;
}

CUresult cuCtxCreate_v2(void **context, unsigned flags, int device) {
    (void)flags;
    if (device != 0 || g_context_count == kMaxContexts) {
        return kInvalidValue;
    }
    g_contexts[g_context_count].id = g_context_count;
    g_current = &g_contexts[g_context_count++];
    *context = g_current;
    return kSuccess;
}

CUresult cuStreamGetCtx(void *stream, void **context) {
    (void)stream;  // every stream is the current context's
    *context = g_current;
    return kSuccess;
}

static int created(const void *context) {
    for (int i = 0; i < g_context_count; i++) {
        if (context == &g_contexts[i]) {
            return 1;
        }
    }
    return 0;
}

// The contexts pushed over (the library pushes the call's context around its queries, Halide
// around loading a module and each launch).
enum { kMaxPushed = 8 };
static struct Context *g_pushed_over[kMaxPushed];
static int g_pushed = 0;
CUresult cuCtxPushCurrent_v2(void *context) {
    if (g_pushed == kMaxPushed) {
        return kInvalidValue;
    }
    if (!created(context)) {
        return kInvalidContext;
    }
    g_pushed_over[g_pushed++] = g_current;
    g_current = context;
    return kSuccess;
}

CUresult cuCtxPopCurrent_v2(void **context) {
    if (g_pushed == 0) {
        return kInvalidContext;
    }
    if (context != NULL) {
        *context = g_current;
    }
    g_current = g_pushed_over[--g_pushed];
    return kSuccess;
}

CUresult cuCtxGetDevice(int *device) {
    if (g_current == NULL) {
        return kInvalidContext;
    }
    *device = 0;
    return kSuccess;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    g_device_queries++;
    *value = attribute == 75 ? 8 : attribute == 76 ? 6 : 0;  // compute capability 8.6
    return kSuccess;
}

CUresult cuMemAlloc_v2(CUdeviceptr *address, size_t bytes) {
    if (g_current == NULL || g_allocation_count == kMaxAllocations) {
        return kInvalidValue;
    }
    // Reserved, not committed: a test may ask for a large positions table and write a few entries.
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) {
        return kOutOfMemory;
    }
    *address = (CUdeviceptr)memory;
    g_allocations[g_allocation_count++] = (struct Allocation){*address, bytes, g_current, 0};
    return kSuccess;
}

// --- virtual memory management: a reservation is host memory, a chunk only a handle ------------
CUresult cuMemAddressReserve(CUdeviceptr *address, size_t bytes, size_t alignment, CUdeviceptr at, unsigned long long flags) {
    (void)alignment, (void)at, (void)flags;
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) {
        return kOutOfMemory;
    }
    *address = (CUdeviceptr)memory;
    return kSuccess;
}

CUresult cuMemCreate(unsigned long long *handle, size_t bytes, const void *properties, unsigned long long flags) {
    (void)bytes, (void)properties, (void)flags;
    *handle = ++g_handles;
    return kSuccess;
}

CUresult cuMemMap(CUdeviceptr address, size_t bytes, size_t offset, unsigned long long handle, unsigned long long flags) {
    (void)offset, (void)flags;
    if (handle == 0 || handle > g_handles || g_allocation_count == kMaxAllocations) {
        return kInvalidValue;
    }
    g_allocations[g_allocation_count++] = (struct Allocation){address, bytes, NULL, handle};
    return kSuccess;
}

// As the driver: the handle of the chunk mapped at `address`, with a reference counted; an
// address that cuMemMap did not map (an ordinary allocation among them) is an error.
CUresult cuMemRetainAllocationHandle(unsigned long long *handle, void *address) {
    const struct Allocation *a = find((CUdeviceptr)address);
    if (a == NULL || a->handle == 0) {
        return kInvalidValue;
    }
    *handle = a->handle;
    return kSuccess;
}

CUresult cuMemRelease(unsigned long long handle) {
    return handle == 0 || handle > g_handles ? kInvalidValue : kSuccess;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *start, size_t *size, CUdeviceptr p) {
    g_address_lookups++;
    const struct Allocation *a = find(p);
    if (a == NULL) {
        return kInvalidValue;  // the driver's answer for host memory
    }
    *start = a->start;
    *size = a->size;
    return kSuccess;
}

CUresult cuPointerGetAttribute(void *value, int attribute, CUdeviceptr p) {
    if (failing("cuPointerGetAttribute")) {
        return kDeinitialized;
    }
    const struct Allocation *a = find(p);
    if (a == NULL) {
        return kInvalidValue;
    }
    if (attribute == 1) {  // CU_POINTER_ATTRIBUTE_CONTEXT
        *(void **)value = a->owner;
        return kSuccess;
    }
    if (attribute == 9) {  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        *(int *)value = 0;
        return kSuccess;
    }
    return kNotSupported;
}

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned options, void *names, void **values) {
    (void)image, (void)options, (void)names, (void)values;
    if (failing("cuModuleLoadDataEx")) {
        return kOutOfMemory;
    }
    *module = &g_module;
    return kSuccess;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)name;
    *function = module;
    return kSuccess;
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)function, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream;
    (void)params, (void)extra;
    if (failing("cuLaunchKernel")) {
        return kLaunchOutOfResources;
    }
    g_launches++;
    return kSuccess;
}

CUresult cuModuleUnload(void *module) {
    (void)module;
    g_unloads++;
    return kSuccess;
}

// --- what Halide's CUDA runtime binds when it loads, and the tests never reach --------------------
#define NOT_SUPPORTED(name) \
    CUresult name(void) {   \
        return kNotSupported; \
    }
NOT_SUPPORTED(cuCtxDestroy_v2)
NOT_SUPPORTED(cuCtxGetApiVersion)
NOT_SUPPORTED(cuCtxSynchronize)
NOT_SUPPORTED(cuDeviceGet)
NOT_SUPPORTED(cuDeviceGetCount)
NOT_SUPPORTED(cuDeviceGetName)
NOT_SUPPORTED(cuDeviceTotalMem_v2)
NOT_SUPPORTED(cuMemFree_v2)
NOT_SUPPORTED(cuMemcpy3D_v2)
NOT_SUPPORTED(cuMemcpyDtoD_v2)
NOT_SUPPORTED(cuMemcpyDtoDAsync_v2)
NOT_SUPPORTED(cuMemcpyDtoH_v2)
NOT_SUPPORTED(cuMemcpyDtoHAsync_v2)
NOT_SUPPORTED(cuMemcpyHtoD_v2)
NOT_SUPPORTED(cuMemcpyHtoDAsync_v2)
NOT_SUPPORTED(cuModuleLoadData)
NOT_SUPPORTED(cuProfilerStop)
NOT_SUPPORTED(cuStreamSynchronize)
