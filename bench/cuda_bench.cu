// SPDX-License-Identifier: Apache-2.0
// rope_cuda_bench: ropegen's CUDA kernels through rope_dispatch(), on device memory and a stream
// of the benchmark's, against a device-to-device cudaMemcpyAsync of the same bytes and a plain
// hand-written CUDA kernel of the same operation (half style, f32 cos/sin cache, one thread per
// pair, q and k in one launch), on the same buffers in the same process. Timed with CUDA events
// around a batch of calls; bytes moved = q + k read once and written once. Two rows time the host
// instead: rope_query per shape (a call less its launch) and the launch of an empty kernel.
// Exits with 77 (a skip) where there is no CUDA device.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ropegen/rope.h"

namespace {

constexpr int kCallsPerTiming = 20;  // calls between two events: decode calls last microseconds
// Iterations of each repetition, a fixed count: an iteration reports the time of one call but
// lasts kCallsPerTiming, so --benchmark_min_time would run each benchmark 20 times too long.
constexpr int kIterations = 50;
constexpr int kQHeads = 32, kKHeads = 8, kHeadDim = 128, kPairs = kHeadDim / 2;

struct Shape {
    const char *name;
    int batch, seq;
};
const Shape kShapes[] = {{"prefill_4096", 1, 4096}, {"decode_b1", 1, 1}, {"decode_b8", 8, 1}, {"decode_b64", 64, 1}};

void check(cudaError_t error, const char *what) {
    if (error != cudaSuccess) {
        std::fprintf(stderr, "rope_cuda_bench: %s: %s\n", what, cudaGetErrorString(error));
        std::exit(1);
    }
}

// --- the hand-written baseline ---------------------------------------------------------------------
__device__ float to_float(float x) { return x; }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ T from_float(float x);
template <> __device__ float from_float<float>(float x) { return x; }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// One thread per (token, head, pair); heads [0, q_heads) of q, then those of k.
template <typename T>
__global__ void handwritten_rope(const T *q, const T *k, T *q_out, T *k_out, const int *offsets, int seq, int tokens,
                                 const float *cos_cache, const float *sin_cache) {
    const long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    const int heads = kQHeads + kKHeads;
    if (index >= static_cast<long long>(tokens) * heads * kPairs) {
        return;
    }
    const int pair = index % kPairs;
    const int head = (index / kPairs) % heads;
    const int token = index / (kPairs * heads);
    const int position = offsets[token / seq] + token % seq;
    const bool is_q = head < kQHeads;
    const T *in = is_q ? q + (static_cast<long long>(token) * kQHeads + head) * kHeadDim
                       : k + (static_cast<long long>(token) * kKHeads + head - kQHeads) * kHeadDim;
    T *out = is_q ? q_out + (static_cast<long long>(token) * kQHeads + head) * kHeadDim
                  : k_out + (static_cast<long long>(token) * kKHeads + head - kQHeads) * kHeadDim;
    const float c = cos_cache[position * kPairs + pair], s = sin_cache[position * kPairs + pair];
    const float a = to_float(in[pair]), b = to_float(in[pair + kPairs]);
    out[pair] = from_float<T>(a * c - b * s);
    out[pair + kPairs] = from_float<T>(b * c + a * s);
}

// --- one shape's device buffers --------------------------------------------------------------------
struct Buffers {
    int batch, seq, tokens;
    rope_dtype dtype;
    size_t element, q_bytes, k_bytes;
    void *q, *k, *q_out, *k_out;
    int *offsets;
    float *cos_cache, *sin_cache;
    int cache_len;
    cudaStream_t stream;
};

Buffers make_buffers(const Shape &shape, rope_dtype dtype) {
    Buffers b{};
    b.batch = shape.batch;
    b.seq = shape.seq;
    b.tokens = shape.batch * shape.seq;
    b.dtype = dtype;
    b.element = dtype == ROPE_DTYPE_F32 ? 4 : 2;
    b.q_bytes = static_cast<size_t>(b.tokens) * kQHeads * kHeadDim * b.element;
    b.k_bytes = static_cast<size_t>(b.tokens) * kKHeads * kHeadDim * b.element;
    std::vector<int> offsets(b.batch);
    for (int i = 0; i < b.batch; i++) {
        offsets[i] = shape.seq > 1 ? 0 : 1000 + 61 * i;  // decode sequences at scattered positions
    }
    b.cache_len = offsets.back() + shape.seq + 1;
    std::vector<float> cos(static_cast<size_t>(b.cache_len) * kPairs), sin(cos.size());
    for (int p = 0; p < b.cache_len; p++) {
        for (int i = 0; i < kPairs; i++) {
            const double angle = p * std::pow(10000.0, -2.0 * i / kHeadDim);
            cos[p * kPairs + i] = static_cast<float>(std::cos(angle));
            sin[p * kPairs + i] = static_cast<float>(std::sin(angle));
        }
    }
    std::vector<uint8_t> input(b.q_bytes);
    for (size_t i = 0; i < input.size(); i++) {
        input[i] = static_cast<uint8_t>((i * 2654435761u) >> 24 & 0x3f);  // finite values in every dtype
    }
    check(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (void **p : {&b.q, &b.q_out}) check(cudaMalloc(p, b.q_bytes), "cudaMalloc q");
    for (void **p : {&b.k, &b.k_out}) check(cudaMalloc(p, b.k_bytes), "cudaMalloc k");
    check(cudaMalloc(&b.offsets, offsets.size() * sizeof(int)), "cudaMalloc offsets");
    check(cudaMalloc(&b.cos_cache, cos.size() * sizeof(float)), "cudaMalloc cos");
    check(cudaMalloc(&b.sin_cache, sin.size() * sizeof(float)), "cudaMalloc sin");
    check(cudaMemcpy(b.q, input.data(), b.q_bytes, cudaMemcpyHostToDevice), "copy q");
    check(cudaMemcpy(b.k, input.data(), b.k_bytes, cudaMemcpyHostToDevice), "copy k");
    check(cudaMemcpy(b.offsets, offsets.data(), offsets.size() * sizeof(int), cudaMemcpyHostToDevice), "copy offsets");
    check(cudaMemcpy(b.cos_cache, cos.data(), cos.size() * sizeof(float), cudaMemcpyHostToDevice), "copy cos");
    check(cudaMemcpy(b.sin_cache, sin.data(), sin.size() * sizeof(float), cudaMemcpyHostToDevice), "copy sin");
    return b;
}

// Buffers live for the whole run: one set per (shape, dtype).
Buffers &buffers(const Shape &shape, rope_dtype dtype) {
    static std::map<std::pair<std::string, int>, Buffers> all;
    auto key = std::make_pair(std::string(shape.name), static_cast<int>(dtype));
    auto it = all.find(key);
    if (it == all.end()) {
        it = all.emplace(key, make_buffers(shape, dtype)).first;
    }
    return it->second;
}

rope_tensor view(void *data, rope_dtype dtype, const Buffers &b, int heads) {
    rope_tensor t{};
    t.data = data;
    t.dtype = dtype;
    const int64_t sizes[4] = {b.batch, b.seq, heads, kHeadDim};
    const int64_t strides[4] = {static_cast<int64_t>(b.seq) * heads * kHeadDim, heads * kHeadDim, kHeadDim, 1};
    for (int i = 0; i < 4; i++) {
        t.sizes[i] = sizes[i];
        t.strides[i] = strides[i];
    }
    return t;
}

rope_params params_of(const Buffers &b) {
    rope_params p = rope_params_init();
    p.q = view(b.q, b.dtype, b, kQHeads);
    p.k = view(b.k, b.dtype, b, kKHeads);
    p.q_out = view(b.q_out, b.dtype, b, kQHeads);
    p.k_out = view(b.k_out, b.dtype, b, kKHeads);
    p.positions.kind = ROPE_POSITIONS_OFFSET;
    p.positions.data = b.offsets;
    p.positions.strides[0] = 1;
    p.angles.source = ROPE_SOURCE_CACHE;
    p.angles.cos_cache = b.cos_cache;
    p.angles.sin_cache = b.sin_cache;
    p.angles.cache_len = b.cache_len;
    p.device = ROPE_DEVICE_CUDA;
    p.stream = b.stream;
    return p;
}

// Times `calls` (kCallsPerTiming of them per iteration) on the buffers' stream; returns the mean
// seconds per call.
template <typename Calls>
double time_calls(benchmark::State &state, const Buffers &b, Calls calls) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    calls();  // warm-up: module load, first touch
    check(cudaStreamSynchronize(b.stream), "warm-up");
    double total = 0;
    for (auto _ : state) {
        check(cudaEventRecord(start, b.stream), "cudaEventRecord");
        for (int i = 0; i < kCallsPerTiming; i++) {
            calls();
        }
        check(cudaEventRecord(stop, b.stream), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float milliseconds = 0;
        check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
        state.SetIterationTime(milliseconds / 1e3 / kCallsPerTiming);
        total += milliseconds / 1e3 / kCallsPerTiming;
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(b.q_bytes + b.k_bytes));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return state.iterations() > 0 ? total / static_cast<double>(state.iterations()) : 0;
}

void copy_calls(const Buffers &b) {
    check(cudaMemcpyAsync(b.q_out, b.q, b.q_bytes, cudaMemcpyDeviceToDevice, b.stream), "cudaMemcpyAsync");
    check(cudaMemcpyAsync(b.k_out, b.k, b.k_bytes, cudaMemcpyDeviceToDevice, b.stream), "cudaMemcpyAsync");
}

template <typename T>
void launch_handwritten(const Buffers &b) {
    const long long threads = static_cast<long long>(b.tokens) * (kQHeads + kKHeads) * kPairs;
    const int block = 256;
    const auto grid = static_cast<unsigned>((threads + block - 1) / block);
    handwritten_rope<T><<<grid, block, 0, b.stream>>>(static_cast<const T *>(b.q), static_cast<const T *>(b.k),
                                                      static_cast<T *>(b.q_out), static_cast<T *>(b.k_out), b.offsets,
                                                      b.seq, b.tokens, b.cos_cache, b.sin_cache);
}

void handwritten_call(const Buffers &b) {
    switch (b.dtype) {
    case ROPE_DTYPE_F32: launch_handwritten<float>(b); break;
    case ROPE_DTYPE_BF16: launch_handwritten<__nv_bfloat16>(b); break;
    default: launch_handwritten<__half>(b); break;
    }
}

// memcpy bandwidth of a shape and dtype, measured once per run, for the vs_memcpy counters.
double memcpy_seconds(const Buffers &b) {
    static std::map<const Buffers *, double> measured;
    if (auto it = measured.find(&b); it != measured.end()) {
        return it->second;
    }
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    copy_calls(b);
    check(cudaEventRecord(start, b.stream), "cudaEventRecord");
    constexpr int kRepeats = 200;
    for (int i = 0; i < kRepeats; i++) {
        copy_calls(b);
    }
    check(cudaEventRecord(stop, b.stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float milliseconds = 0;
    check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
    return measured[&b] = milliseconds / 1e3 / kRepeats;
}

enum class Kind { Rope, Memcpy, Handwritten, Query };

// Host seconds per call of `calls`, kCallsPerTiming calls per iteration; `settle` runs between
// iterations, untimed.
template <typename Call, typename Settle>
void time_host(benchmark::State &state, Call call, Settle settle) {
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kCallsPerTiming; i++) {
            call();
        }
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        settle();
        state.SetIterationTime(elapsed.count() / kCallsPerTiming);
    }
}

// The launch of an empty kernel: what any call that launches a kernel costs the host here.
__global__ void empty_kernel() {}

void time_empty_launch(benchmark::State &state) {
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    empty_kernel<<<1, 32, 0, stream>>>();
    check(cudaStreamSynchronize(stream), "warm-up");
    time_host(state, [&] { empty_kernel<<<1, 32, 0, stream>>>(); },
              [&] { check(cudaStreamSynchronize(stream), "empty launches"); });
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

void run(benchmark::State &state, const Shape &shape, rope_dtype dtype, Kind kind) {
    Buffers &b = buffers(shape, dtype);
    const rope_params p = params_of(b);
    rope_report report = rope_report_init();
    double seconds = 0;
    if (kind == Kind::Rope || kind == Kind::Query) {
        if (rope_query(&p, &report) != ROPE_OK) {
            state.SkipWithError(report.message);
            return;
        }
        state.SetLabel(report.kernel);
    }
    if (kind == Kind::Query) {
        // The validation, the driver checks and the kernel choice: everything of a call but its
        // launch. Issued back to back, decode calls cost their host time.
        time_host(state, [&] { benchmark::DoNotOptimize(rope_query(&p, nullptr)); }, [] {});
        return;
    }
    if (kind == Kind::Rope) {
        seconds = time_calls(state, b, [&] {
            if (rope_dispatch(&p, nullptr) != ROPE_OK) {
                std::fprintf(stderr, "rope_cuda_bench: rope_dispatch failed\n");
                std::exit(1);
            }
        });
    } else if (kind == Kind::Memcpy) {
        seconds = time_calls(state, b, [&] { copy_calls(b); });
    } else {
        seconds = time_calls(state, b, [&] {
            handwritten_call(b);
            check(cudaGetLastError(), "hand-written kernel launch");
        });
    }
    // GB/s of this run and its ratio to the device-to-device copy of the same bytes.
    const double bytes = 2.0 * static_cast<double>(b.q_bytes + b.k_bytes);
    state.counters["GBps"] = seconds > 0 ? bytes / seconds / 1e9 : 0;
    state.counters["memcpy_GBps"] = bytes / memcpy_seconds(b) / 1e9;
    state.counters["vs_memcpy"] = seconds > 0 ? memcpy_seconds(b) / seconds : 0;
}

const char *dtype_name(rope_dtype dtype) {
    return dtype == ROPE_DTYPE_F32 ? "f32" : dtype == ROPE_DTYPE_BF16 ? "bf16" : "f16";
}

// One element of a host copy of a tensor, as a float.
float element_value(const uint8_t *bytes, rope_dtype dtype) {
    float value;
    if (dtype == ROPE_DTYPE_F32) {
        std::memcpy(&value, bytes, 4);
        return value;
    }
    const uint16_t bits = static_cast<uint16_t>(bytes[0] | bytes[1] << 8);
    if (dtype == ROPE_DTYPE_BF16) {
        const uint32_t widened = static_cast<uint32_t>(bits) << 16;
        std::memcpy(&value, &widened, 4);
        return value;
    }
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
}

// ropegen's output against the hand-written kernel's (same buffers, f32 math both): a sanity
// check printed once per shape and dtype, not a test (the cuda label tests against the oracle).
void compare_with_handwritten(const Shape &shape, rope_dtype dtype) {
    Buffers &b = buffers(shape, dtype);
    const rope_params p = params_of(b);
    std::vector<uint8_t> ours(b.q_bytes), theirs(b.q_bytes);
    if (rope_dispatch(&p, nullptr) != ROPE_OK) {
        return;
    }
    check(cudaMemcpyAsync(ours.data(), b.q_out, b.q_bytes, cudaMemcpyDeviceToHost, b.stream), "copy back");
    handwritten_call(b);
    check(cudaMemcpyAsync(theirs.data(), b.q_out, b.q_bytes, cudaMemcpyDeviceToHost, b.stream), "copy back");
    check(cudaStreamSynchronize(b.stream), "sync");
    double worst = 0;
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < b.q_bytes / b.element; i++) {
        const float x = element_value(&ours[i * b.element], dtype), y = element_value(&theirs[i * b.element], dtype);
        const double difference = std::fabs(static_cast<double>(x) - y);
        worst = std::fmax(worst, difference);
        // More than a few units in the last place of bf16 (or a NaN): a wrong or missing element.
        if (!(difference <= 0x1p-6 * (1 + std::fabs(y)))) {
            first = differ++ == 0 ? i : first;
        }
    }
    std::printf("# %s %s: max |ropegen - hand-written| over q = %.3g", shape.name, dtype_name(dtype), worst);
    if (differ > 0) {
        std::printf("; %zu of %zu elements differ, the first at token %zu head %zu lane %zu", differ, b.q_bytes / b.element,
                    first / (kQHeads * kHeadDim), first / kHeadDim % kQHeads, first % kHeadDim);
    }
    std::printf("\n");
}

}  // namespace

int main(int argc, char **argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "SKIPPED: rope_cuda_bench needs a CUDA device (%s)\n",
                     cudaGetErrorString(cudaGetDeviceCount(&devices)));
        return 77;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaFree(nullptr), "context");  // the primary context, current on this thread
    std::printf("# GPU: %s (sm_%d%d), ropegen %s\n", prop.name, prop.major, prop.minor, rope_version_string());
    for (const Shape &shape : kShapes) {
        for (const rope_dtype dtype : {ROPE_DTYPE_BF16, ROPE_DTYPE_F16, ROPE_DTYPE_F32}) {
            const std::string suffix = std::string("/shape:") + shape.name + "/dtype:" + dtype_name(dtype);
            compare_with_handwritten(shape, dtype);
            for (const auto &[kind, name] : {std::pair{Kind::Rope, "cuda_rope"}, std::pair{Kind::Memcpy, "cuda_memcpy"},
                                             std::pair{Kind::Handwritten, "cuda_handwritten"},
                                             std::pair{Kind::Query, "cuda_rope_query_host"}}) {
                benchmark::RegisterBenchmark((name + suffix).c_str(),
                                             [shape, dtype, kind = kind](benchmark::State &state) { run(state, shape, dtype, kind); })
                    ->UseManualTime()
                    ->Iterations(kIterations)
                    ->Unit(benchmark::kMicrosecond);
            }
        }
    }
    benchmark::RegisterBenchmark("cuda_empty_launch_host", time_empty_launch)
        ->UseManualTime()
        ->Iterations(kIterations)
        ->Unit(benchmark::kMicrosecond);
    benchmark::Initialize(&argc, argv);
    // A filter that matches no row is an error: a renamed row must not leave bench.CudaSmoke empty.
    const size_t rows = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return rows > 0 ? 0 : 1;
}
