// SPDX-License-Identifier: Apache-2.0
// Google Benchmark suite of ropegen through its public entry point, rope_dispatch(), against
// baselines on the same buffers: memcpy of the same bytes (the bandwidth ceiling), a plain copy
// loop of them (copy_loop.cpp: stores through the cache, as a kernel does), for the decode shapes
// the same loop rewriting q and k in place (the floor of the in-place rows) and the scalar loop an
// engine writes by hand (scalar_rope.cpp). Every benchmark is registered from the tables
// below; names are "kind/key:value/..." so bench_table.py can parse them back.
//
// Counters: bytes_per_second (q, k read + q_out, k_out written, which in place are q and k
// again; the small cos/sin tables are not counted), items_per_second (tokens), pool_threads, and
// the paired ratios (set_paired_ratios): memcpy_ratio = memcpy time of the same bytes at the same
// thread count / this benchmark's time (1.0 = memcpy speed), and for the kernels of the cache
// source scalar_ratio = the scalar loop's time / the kernel's (> 1: the kernel is faster); out of
// place, half_ratio (interleaved rows), cache_ratio (computed sources) and f32_ratio (bf16 rows)
// = the time of the same call in the half style, with the cache source, or in f32 / this row's;
// in place, rewrite_ratio = the in-place rewrite's time / this row's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "copy_loop.h"
#include "internal/kernel_table.h"
#include "ropegen/rope.h"
#include "scalar_rope.h"
#include "worker_pool.h"

namespace ropebench {
namespace {

// ---- What is measured ------------------------------------------------------------------------

struct Shape {
    const char *name;
    int64_t batch, seq, q_heads, k_heads, head_dim;
};

// Llama-3-8B-like attention: 32 q heads, 8 kv heads (GQA), BSHD. The prefill variants keep
// tokens * head_dim constant, so all of them move the same bytes and their GB/s compare; decode
// is one new token per sequence.
constexpr Shape kShapes[] = {
    {"prefill_d128", 1, 4096, 32, 8, 128},
    {"prefill_d64", 1, 8192, 32, 8, 64},
    {"prefill_d256", 1, 2048, 32, 8, 256},
    {"decode_b1", 1, 1, 32, 8, 128},
    {"decode_b8", 8, 1, 32, 8, 128},
    {"decode_b64", 64, 1, 32, 8, 128},
};

// The precise source computes its angles in f64: measured on one shape only, to show its price.
constexpr const char *kPreciseShape = "prefill_d128";

// Sequence b of a decode batch sits at position kDecodeStart + b * kDecodeStride, so a batch
// reads scattered cache rows as a real one does; prefill starts at position 0.
constexpr int32_t kDecodeStart = 1000, kDecodeStride = 61;

struct DtypeInfo {
    rope_dtype dtype;
    const char *name;
    size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {{ROPE_DTYPE_F32, "f32", 4}, {ROPE_DTYPE_BF16, "bf16", 2}};

struct StyleInfo {
    rope_style style;
    const char *name;
};
constexpr StyleInfo kStyles[] = {{ROPE_STYLE_HALF, "half"}, {ROPE_STYLE_INTERLEAVED, "interleaved"}};

struct SourceInfo {
    rope_source source;
    const char *name;
};
constexpr SourceInfo kSources[] = {
    {ROPE_SOURCE_CACHE, "cache"}, {ROPE_SOURCE_COMPAT, "compat"}, {ROPE_SOURCE_PRECISE, "precise"}};

// "All threads": the library's pool size, which main() sets to this same count so that the
// baselines at "all threads" use exactly as many threads as the kernels.
int g_all_threads = 1;

// One benchmark: a shape and dtype, plus a style and source where the kind has them.
struct Case {
    const Shape *shape;
    const DtypeInfo *dtype;
    const StyleInfo *style;    // null for memcpy
    const SourceInfo *source;  // null for the baselines
    int threads;               // 1, or g_all_threads
};

// ---- Buffers ---------------------------------------------------------------------------------

struct FreeDeleter {
    void operator()(std::byte *p) const {
        std::free(p);
    }
};
using Bytes = std::unique_ptr<std::byte[], FreeDeleter>;

// Page-aligned and already touched, so no page fault lands in a timed loop.
Bytes allocate(size_t bytes) {
    constexpr size_t kAlign = 4096;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    Bytes buffer(static_cast<std::byte *>(std::aligned_alloc(kAlign, rounded)));
    if (buffer) {
        std::memset(buffer.get(), 0, rounded);
    }
    return buffer;
}

uint16_t to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

// Values in [-1, 1) from a fixed xorshift stream: the data is irrelevant to the speed, but
// it must be finite and not denormal.
void fill_random(std::byte *data, size_t count, const DtypeInfo &dtype, uint64_t seed) {
    uint64_t state = seed;
    for (size_t i = 0; i < count; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        const float value = static_cast<float>(state >> 40) * 0x1p-23f - 1.0f;
        if (dtype.dtype == ROPE_DTYPE_F32) {
            std::memcpy(data + i * sizeof(float), &value, sizeof value);
        } else {
            const uint16_t half = to_bf16(value);
            std::memcpy(data + i * sizeof half, &half, sizeof half);
        }
    }
}

// The buffers of one (shape, dtype): q, k, separate outputs (out of place, like the memcpy they
// are compared with; the in-place rows write q and k instead), the cos/sin cache and the
// positions.
struct Workspace {
    const Shape *shape;
    const DtypeInfo *dtype;
    size_t q_bytes, k_bytes;
    Bytes q, k, q_out, k_out;
    int64_t cache_len;
    // [cache_len][head_dim / 2] f32, page-aligned like the tensors: an engine's tables are
    // allocated aligned (PyTorch: 64 bytes). A row that straddles cache lines costs every load.
    Bytes cos, sin;
    std::vector<int32_t> batch_offsets;    // position of each sequence's first token
    std::vector<int32_t> token_positions;  // every token's position, for the scalar loop
    std::map<std::pair<rope_style, bool>, std::string> scalar_check;  // (style, in place) -> "" or why the scalar loop is wrong

    int64_t tokens() const {
        return shape->batch * shape->seq;
    }
    float *cos_table() const {
        return reinterpret_cast<float *>(cos.get());
    }
    float *sin_table() const {
        return reinterpret_cast<float *>(sin.get());
    }
    // What bytes_per_second counts: every element read once and written once.
    int64_t moved_bytes() const {
        return static_cast<int64_t>(2 * (q_bytes + k_bytes));
    }
};

std::unique_ptr<Workspace> make_workspace(const Shape &shape, const DtypeInfo &dtype) {
    auto ws = std::make_unique<Workspace>();
    ws->shape = &shape;
    ws->dtype = &dtype;
    const int64_t tokens = shape.batch * shape.seq;
    const size_t q_count = static_cast<size_t>(tokens * shape.q_heads * shape.head_dim);
    const size_t k_count = static_cast<size_t>(tokens * shape.k_heads * shape.head_dim);
    ws->q_bytes = q_count * dtype.bytes;
    ws->k_bytes = k_count * dtype.bytes;
    ws->q = allocate(ws->q_bytes);
    ws->k = allocate(ws->k_bytes);
    ws->q_out = allocate(ws->q_bytes);
    ws->k_out = allocate(ws->k_bytes);
    if (!ws->q || !ws->k || !ws->q_out || !ws->k_out) {
        return nullptr;
    }
    fill_random(ws->q.get(), q_count, dtype, 0x9E3779B97F4A7C15ull);
    fill_random(ws->k.get(), k_count, dtype, 0xD1B54A32D192ED03ull);

    const bool decode = shape.seq == 1;
    for (int64_t b = 0; b < shape.batch; b++) {
        ws->batch_offsets.push_back(decode ? kDecodeStart + static_cast<int32_t>(b) * kDecodeStride : 0);
        for (int64_t s = 0; s < shape.seq; s++) {
            ws->token_positions.push_back(ws->batch_offsets.back() + static_cast<int32_t>(s));
        }
    }
    ws->cache_len = *std::max_element(ws->token_positions.begin(), ws->token_positions.end()) + 1;

    // spec §1 with base 10000 and R = head_dim, in f64 (the values do not affect the speed).
    const int64_t pairs = shape.head_dim / 2;
    const size_t table_bytes = static_cast<size_t>(ws->cache_len * pairs) * sizeof(float);
    ws->cos = allocate(table_bytes);
    ws->sin = allocate(table_bytes);
    if (!ws->cos || !ws->sin) {
        return nullptr;
    }
    float *cos = ws->cos_table(), *sin = ws->sin_table();
    for (int64_t position = 0; position < ws->cache_len; position++) {
        for (int64_t i = 0; i < pairs; i++) {
            const double angle = static_cast<double>(position) *
                                 std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(shape.head_dim));
            cos[position * pairs + i] = static_cast<float>(std::cos(angle));
            sin[position * pairs + i] = static_cast<float>(std::sin(angle));
        }
    }
    return ws;
}

// The workspace of `shape` and `dtype` in `slot`, made anew when the slot holds another (freed
// first: a prefill workspace is 160 MiB in f32).
Workspace *workspace_in(std::unique_ptr<Workspace> &slot, const Shape &shape, const DtypeInfo &dtype) {
    if (!slot || slot->shape != &shape || slot->dtype != &dtype) {
        slot.reset();
        slot = make_workspace(shape, dtype);
    }
    return slot.get();
}

// Benchmarks of one (shape, dtype) are registered together, so one cached workspace serves them all.
Workspace *workspace_for(const Case &c) {
    static std::unique_ptr<Workspace> current;
    return workspace_in(current, *c.shape, *c.dtype);
}

// The f32 workspace of a bf16 row's shape, for its f32 partner (f32_ratio), beside the row's own.
Workspace *f32_workspace_for(const Case &c) {
    static std::unique_ptr<Workspace> partner;
    return workspace_in(partner, *c.shape, kDtypes[0]);
}

// ---- Baselines -------------------------------------------------------------------------------

WorkerPool &pool() {
    static WorkerPool instance(g_all_threads);
    return instance;
}

// Runs task(part) for every part in [0, parts) on up to `parts` threads.
template <typename Task>
void run_parts(int parts, Task &&task) {
    if (parts == 1) {
        task(0);
    } else {
        pool().run(parts, task);
    }
}

// ropegen's parallel loops run on the same pool, through the engine runner API
// (rope_set_parallel_runner), as an engine runs them: kernels and baselines pay the same wake-up,
// and a small call (a decode step) may use every thread, which the library's own pool, whose
// workers sleep, does not do below 4 MiB.
std::atomic<int> g_most_parts{0};  // the most tasks one loop handed to the pool since its reset

int run_on_pool(void *, int (*task)(void *task_context, int index), void *task_context, int count) {
    for (int seen = g_most_parts.load(std::memory_order_relaxed);
         count > seen && !g_most_parts.compare_exchange_weak(seen, count, std::memory_order_relaxed);) {
    }
    std::atomic<int> first_error{0};
    auto part = [&](int index) {
        if (const int result = task(task_context, index)) {
            int expected = 0;
            first_error.compare_exchange_strong(expected, result);
        }
    };
    pool().run(count, part);
    return first_error.load();
}

// The threads a call of the library runs on, at most `threads`: the most tasks one of its loops
// hands the pool, or 1 when none does (a one-token call runs on the calling thread). The
// baselines of its row split their work into as many parts, so that both sides of a ratio run
// on the same threads: a decode step runs one part per thread that divides its batch, and a
// memcpy of a one-token call split over two threads would pay the pool's hand-off the call
// never pays.
template <typename Call>
int threads_used(Call &&call, int threads) {
    g_most_parts.store(0, std::memory_order_relaxed);
    call();
    return std::clamp(g_most_parts.load(std::memory_order_relaxed), 1, threads);
}

// A copy baseline: how it moves bytes, and whether it writes them back where they lie.
struct CopyKind {
    CopyFunction copy;
    bool in_place;
};
constexpr CopyKind kMemcpy{memcpy_bytes, false}, kCopyLoop{copy_loop, false};
constexpr CopyKind kRewrite{rewrite_loop, true};  // the in-place floor

// The copy baselines: q -> q_out and k -> k_out (in place: q and k rewritten where they lie),
// each split evenly over the threads.
void copy_qk(const Workspace &ws, int threads, CopyKind kind = kMemcpy) {
    run_parts(threads, [&](int part) {
        copy_part(ws.q.get(), kind.in_place ? ws.q.get() : ws.q_out.get(), ws.q_bytes, part, threads, kind.copy);
        copy_part(ws.k.get(), kind.in_place ? ws.k.get() : ws.k_out.get(), ws.k_bytes, part, threads, kind.copy);
    });
}

// in_place: q and k are rotated where they lie (q_out = q, k_out = k).
ScalarRopeArgs scalar_args(const Workspace &ws, rope_style style, bool in_place) {
    ScalarRopeArgs args{};
    args.dtype = ws.dtype->dtype;
    args.style = style;
    args.q_heads = ws.shape->q_heads;
    args.k_heads = ws.shape->k_heads;
    args.head_dim = ws.shape->head_dim;
    args.q = ws.q.get();
    args.k = ws.k.get();
    args.q_out = in_place ? ws.q.get() : ws.q_out.get();
    args.k_out = in_place ? ws.k.get() : ws.k_out.get();
    args.positions = ws.token_positions.data();
    args.cos = ws.cos_table();
    args.sin = ws.sin_table();
    return args;
}

// The threads the scalar baseline splits `tokens` over: no empty part, so a one-token call stays
// on the calling thread, as the library keeps it.
int scalar_parts(int64_t tokens, int threads) {
    return static_cast<int>(std::clamp<int64_t>(tokens, 1, threads));
}

// The scalar baseline, tokens split evenly over the threads (as an engine would split them).
void scalar_qk(const ScalarRopeArgs &args, int64_t tokens, int threads) {
    const int parts = scalar_parts(tokens, threads);
    run_parts(parts, [&](int part) {
        scalar_rope(args, tokens * part / parts, tokens * (part + 1) / parts);
    });
}

// A baseline timed against a benchmark's own call, and the counter that reports the ratio.
struct Baseline {
    const char *counter;
    std::function<void()> run;
};

// Sets each baseline's counter to the median, over rounds, of its time / the row's own time,
// where a round times a batch of the row's own calls and then a batch of each baseline's: both
// sides of a ratio are timed within a millisecond or so of each other, so a change in the
// machine's speed between rows (a shared VM's second vCPU, its memory bandwidth) moves both
// alike. Rows timed minutes apart turned two-thread verdicts over from one run to the next.
// Each batch starts with an untimed call, which pays for the state the previous batch left (a
// prefill's dirty lines in the caches; memcpy's non-temporal stores leave none), so each side
// is timed from its own state, as in its own row.
void set_paired_ratios(benchmark::State &state, const std::function<void()> &own, const std::vector<Baseline> &baselines) {
    using Clock = std::chrono::steady_clock;
    constexpr double kBatchSeconds = 1e-3;
    constexpr int kRounds = 11;
    auto batch_seconds = [](const std::function<void()> &fn, int reps) {
        fn();
        const auto start = Clock::now();
        for (int r = 0; r < reps; r++) {
            fn();
        }
        return std::chrono::duration<double>(Clock::now() - start).count() / reps;
    };
    // Enough calls for a batch of about kBatchSeconds, from one call after a warming one.
    auto batch_reps = [&](const std::function<void()> &fn) {
        const double once = std::max(1e-9, batch_seconds(fn, 1));
        return static_cast<int>(std::clamp(std::ceil(kBatchSeconds / once), 1.0, 1e6));
    };
    const int own_reps = batch_reps(own);
    std::vector<int> reps;
    for (const Baseline &baseline : baselines) {
        reps.push_back(batch_reps(baseline.run));
    }
    std::vector<std::vector<double>> ratios(baselines.size());
    for (int round = 0; round < kRounds; round++) {
        const double own_seconds = batch_seconds(own, own_reps);
        for (size_t i = 0; i < baselines.size(); i++) {
            ratios[i].push_back(batch_seconds(baselines[i].run, reps[i]) / own_seconds);
        }
    }
    for (size_t i = 0; i < baselines.size(); i++) {
        std::nth_element(ratios[i].begin(), ratios[i].begin() + kRounds / 2, ratios[i].end());
        state.counters[baselines[i].counter] = ratios[i][kRounds / 2];
    }
}

Baseline memcpy_baseline(const Workspace &ws, int threads) {
    return {"memcpy_ratio", [&ws, threads] { copy_qk(ws, threads); }};
}

// ---- The library -----------------------------------------------------------------------------

rope_tensor bshd_view(void *data, const Workspace &ws, int64_t heads) {
    const Shape &s = *ws.shape;
    rope_tensor tensor{};
    tensor.data = data;
    tensor.dtype = ws.dtype->dtype;
    const int64_t sizes[4] = {s.batch, s.seq, heads, s.head_dim};
    const int64_t strides[4] = {s.seq * heads * s.head_dim, heads * s.head_dim, s.head_dim, 1};
    std::copy(sizes, sizes + 4, tensor.sizes);
    std::copy(strides, strides + 4, tensor.strides);
    return tensor;
}

// in_place: q and k are rotated where they lie (q_out = q, k_out = k), as vLLM's decode does.
rope_params params_for(const Workspace &ws, const Case &c, bool in_place = false) {
    rope_params params = rope_params_init();
    params.style = c.style->style;
    params.direction = ROPE_FORWARD;
    params.q = bshd_view(ws.q.get(), ws, ws.shape->q_heads);
    params.k = bshd_view(ws.k.get(), ws, ws.shape->k_heads);
    params.q_out = in_place ? params.q : bshd_view(ws.q_out.get(), ws, ws.shape->q_heads);
    params.k_out = in_place ? params.k : bshd_view(ws.k_out.get(), ws, ws.shape->k_heads);
    // position = offset[b] + s: a decode batch's per-sequence lengths, a prefill's 0.
    params.positions.kind = ROPE_POSITIONS_OFFSET;
    params.positions.index_type = ROPE_INDEX_INT32;
    params.positions.data = ws.batch_offsets.data();
    params.positions.strides[0] = 1;
    params.angles.source = c.source->source;
    params.angles.cos_cache = ws.cos_table();
    params.angles.sin_cache = ws.sin_table();
    params.angles.cache_len = ws.cache_len;
    // 1: the calling thread only; 0: g_all_threads threads, on pool() (run_on_pool).
    params.num_threads = c.threads == 1 ? 1 : 0;
    return params;
}

std::string failure(const char *what, rope_status status, const rope_report &report) {
    return std::string(what) + ": " + rope_status_string(status) + "; " + report.message;
}

void set_counters(benchmark::State &state, const Workspace &ws, int threads) {
    state.SetBytesProcessed(state.iterations() * ws.moved_bytes());
    state.SetItemsProcessed(state.iterations() * ws.tokens());
    state.counters["pool_threads"] = threads;  // not "threads": Google Benchmark's own field
}

// ---- The benchmarks --------------------------------------------------------------------------

// memcpy, or the plain copy loop or the in-place rewrite (with_memcpy_ratio: their ratio to memcpy).
void bm_copy(benchmark::State &state, const Case &c, CopyKind copy, bool with_memcpy_ratio) {
    Workspace *ws = workspace_for(c);
    if (ws == nullptr) {
        state.SkipWithError("cannot allocate the buffers");
        return;
    }
    copy_qk(*ws, c.threads, copy);
    for (auto _ : state) {
        copy_qk(*ws, c.threads, copy);
        benchmark::ClobberMemory();
    }
    set_counters(state, *ws, c.threads);
    if (with_memcpy_ratio) {
        set_paired_ratios(state, [ws, &c, copy] { copy_qk(*ws, c.threads, copy); }, {memcpy_baseline(*ws, c.threads)});
    }
}

float element(const std::byte *data, const DtypeInfo &dtype, size_t index) {
    if (dtype.dtype == ROPE_DTYPE_F32) {
        float value;
        std::memcpy(&value, data + index * sizeof value, sizeof value);
        return value;
    }
    uint16_t half;
    std::memcpy(&half, data + index * sizeof half, sizeof half);
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// The outputs of the first and the last token, as f32.
std::vector<float> output_sample(const Workspace &ws) {
    std::vector<float> sample;
    for (int64_t token : {int64_t{0}, ws.tokens() - 1}) {
        for (auto [data, heads] : {std::pair{ws.q_out.get(), ws.shape->q_heads}, std::pair{ws.k_out.get(), ws.shape->k_heads}}) {
            const size_t row = static_cast<size_t>(heads * ws.shape->head_dim);
            for (size_t i = 0; i < row; i++) {
                sample.push_back(element(data, *ws.dtype, static_cast<size_t>(token) * row + i));
            }
        }
    }
    return sample;
}

// The scalar loop must compute what rope_dispatch computes (cache source, same style), else the
// comparison is meaningless: checked once per workspace, style and placement, on the first and
// last token (in place, on copies of q and k in the output buffers). Inputs lie in [-1, 1): the
// tolerance is a few f32 ulps, or one bf16 ulp.
std::string check_scalar(Workspace &ws, const Case &c, bool in_place) {
    auto [entry, inserted] = ws.scalar_check.try_emplace(std::pair{c.style->style, in_place});
    if (!inserted) {
        return entry->second;
    }
    const Case kernel_case{c.shape, c.dtype, c.style, &kSources[0] /* cache */, 1};
    const rope_params params = params_for(ws, kernel_case);
    if (rope_dispatch(&params, nullptr) != ROPE_OK) {
        return entry->second;  // no kernel to compare with; bm_rope reports why
    }
    const std::vector<float> expected = output_sample(ws);
    ScalarRopeArgs args = scalar_args(ws, c.style->style, false);
    if (in_place) {
        std::memcpy(ws.q_out.get(), ws.q.get(), ws.q_bytes);
        std::memcpy(ws.k_out.get(), ws.k.get(), ws.k_bytes);
        args.q = args.q_out;
        args.k = args.k_out;
    }
    scalar_rope(args, 0, ws.tokens());
    const std::vector<float> actual = output_sample(ws);
    const float tolerance = c.dtype->dtype == ROPE_DTYPE_F32 ? 1e-5f : 1.0f / 128;
    for (size_t i = 0; i < expected.size(); i++) {
        if (!(std::fabs(actual[i] - expected[i]) <= tolerance)) {
            entry->second = "the scalar loop disagrees with rope_dispatch at sample element " + std::to_string(i) + ": " +
                            std::to_string(actual[i]) + " vs " + std::to_string(expected[i]);
            break;
        }
    }
    return entry->second;
}

// Why the scalar loop cannot stand for the case (no code for it, or it disagrees with
// rope_dispatch), or "" when it can.
std::string scalar_unusable(Workspace &ws, const Case &c, bool in_place) {
    if (!scalar_rope(scalar_args(ws, c.style->style, in_place), 0, 0)) {
        return "the scalar loop has no code for this dtype or placement";
    }
    return check_scalar(ws, c, in_place);
}

void bm_scalar(benchmark::State &state, const Case &c, bool in_place) {
    Workspace *ws = workspace_for(c);
    if (ws == nullptr) {
        state.SkipWithError("cannot allocate the buffers");
        return;
    }
    if (const std::string why = scalar_unusable(*ws, c, in_place); !why.empty()) {
        state.SkipWithError(why.c_str());
        return;
    }
    const ScalarRopeArgs args = scalar_args(*ws, c.style->style, in_place);
    const int64_t tokens = ws->tokens();
    const int threads = scalar_parts(tokens, c.threads);
    scalar_qk(args, tokens, threads);
    for (auto _ : state) {
        scalar_qk(args, tokens, threads);
        benchmark::ClobberMemory();
    }
    set_counters(state, *ws, threads);
    set_paired_ratios(state, [&] { scalar_qk(args, tokens, threads); }, {memcpy_baseline(*ws, threads)});
}

// How a row calls the library: rope_dispatch at every call, or a plan (rope_plan_create once,
// rope_plan_run at every call), as an engine that rotates the same buffers at every step may.
enum class Entry { Dispatch, Plan };

// The case's call on its buffers, out of place or in place. In place, every call rotates q
// and k again: rotations keep the values finite, so the speed is unaffected, and the in-place
// rows (with scalar_inplace's) run after the other rope rows of their workspace (register_all);
// the plans' rows after them read the rotated inputs, which moves no time either.
// The cache source's rows are paired with the scalar loop (in place with the in-place loop),
// which reads the same cache; a plan's rows with rope_dispatch of the same call.
void bm_rope(benchmark::State &state, const Case &c, bool in_place, Entry entry = Entry::Dispatch) {
    Workspace *ws = workspace_for(c);
    if (ws == nullptr) {
        state.SkipWithError("cannot allocate the buffers");
        return;
    }
    const rope_params params = params_for(*ws, c, in_place);
    rope_report report = rope_report_init();
    // rope_query names the kernel rope_dispatch will run; an unbuilt variant is a skip.
    if (const rope_status status = rope_query(&params, &report); status != ROPE_OK) {
        state.SkipWithError(failure("rope_query", status, report).c_str());
        return;
    }
    state.SetLabel(report.kernel);
    const int threads = threads_used([&params] { rope_dispatch(&params, nullptr); }, c.threads);
    std::vector<Baseline> baselines{memcpy_baseline(*ws, threads)};
    if (in_place) {  // the floor in place: every byte of q and k read and written back
        baselines.push_back({"rewrite_ratio", [ws, threads] { copy_qk(*ws, threads, kRewrite); }});
    }
    if (c.source->source == ROPE_SOURCE_CACHE && scalar_unusable(*ws, c, in_place).empty()) {
        baselines.push_back({"scalar_ratio", [args = scalar_args(*ws, c.style->style, in_place), tokens = ws->tokens(),
                                              threads] { scalar_qk(args, tokens, threads); }});
    }
    // The targets that compare the library with itself, paired too: the interleaved style with
    // the half style, a computed source with the cache, bf16 with f32 (same case otherwise, out
    // of place). The f32 call runs on buffers of its own, in rounds of their own, so that its
    // prefill (twice the bytes) never stands between the row's batches and the other baselines'
    // (the one full run that timed it among them had bf16 rows at two threads miss three targets
    // that the two runs before had met).
    std::vector<Baseline> f32_partner;
    auto add_partner = [&](std::vector<Baseline> &into, const char *counter, Workspace *partner_ws,
                           const Case &partner_case) {
        if (partner_ws == nullptr) {
            return;
        }
        const rope_params partner = params_for(*partner_ws, partner_case);
        if (rope_query(&partner, nullptr) == ROPE_OK) {
            into.push_back({counter, [partner] { rope_dispatch(&partner, nullptr); }});
        }
    };
    // (A plan's row is paired with rope_dispatch instead.)
    if (entry == Entry::Dispatch && !in_place && c.style->style != ROPE_STYLE_HALF) {
        add_partner(baselines, "half_ratio", ws, {c.shape, c.dtype, &kStyles[0], c.source, c.threads});
    }
    if (entry == Entry::Dispatch && !in_place && c.source->source != ROPE_SOURCE_CACHE) {
        add_partner(baselines, "cache_ratio", ws, {c.shape, c.dtype, c.style, &kSources[0], c.threads});
    }
    if (entry == Entry::Dispatch && !in_place && c.dtype->dtype != ROPE_DTYPE_F32) {
        add_partner(f32_partner, "f32_ratio", f32_workspace_for(c), {c.shape, &kDtypes[0], c.style, c.source, c.threads});
    }
    rope_plan *plan = nullptr;
    if (entry == Entry::Plan) {
        if (const rope_status status = rope_plan_create(&params, &plan, &report); status != ROPE_OK) {
            state.SkipWithError(failure("rope_plan_create", status, report).c_str());
            return;
        }
        baselines.push_back({"dispatch_ratio", [&params] { rope_dispatch(&params, nullptr); }});
    }
    const std::unique_ptr<rope_plan, void (*)(rope_plan *)> plan_owner(plan, rope_plan_destroy);
    auto call = [&params, plan](rope_report *call_report) {
        return plan != nullptr ? rope_plan_run(plan, call_report) : rope_dispatch(&params, call_report);
    };
    if (const rope_status status = call(&report); status != ROPE_OK) {
        state.SkipWithError(failure(plan != nullptr ? "rope_plan_run" : "rope_dispatch", status, report).c_str());
        return;
    }
    for (auto _ : state) {
        if (call(nullptr) != ROPE_OK) {
            state.SkipWithError("the call failed inside the timed loop");
            break;
        }
    }
    if (state.error_occurred()) {
        return;
    }
    set_counters(state, *ws, threads);
    // The same call as the timed loop's, which succeeded on every iteration.
    set_paired_ratios(state, [&call] { call(nullptr); }, baselines);
    if (!f32_partner.empty()) {
        set_paired_ratios(state, [&call] { call(nullptr); }, f32_partner);
    }
}

// The fixed cost of one call: validation and kernel choice (query), plus running a kernel on
// one token of one 64-lane head, on the calling thread. rope_dispatch repeats a call whose
// rope_params repeat the thread's last from a plan (runtime/src/dispatch.cpp, LastCall):
// rope_dispatch_alternating alternates two outputs, so that no call repeats the one before.
enum class CallKind { Query, Dispatch, DispatchWithReport, DispatchAlternating, RunKernel };
struct CallInfo {
    CallKind kind;
    const char *name;
};
constexpr CallInfo kCalls[] = {{CallKind::Query, "rope_query"},
                               {CallKind::Dispatch, "rope_dispatch"},
                               {CallKind::DispatchWithReport, "rope_dispatch_report"},
                               {CallKind::DispatchAlternating, "rope_dispatch_alternating"},
                               {CallKind::RunKernel, "run_kernel"}};

const ropegen::KernelEntry *find_kernel(const char *name) {
    size_t count = 0;
    const ropegen::KernelEntry *table = ropegen::kernel_table(&count);
    for (size_t i = 0; i < count; i++) {
        if (std::strcmp(table[i].name, name) == 0) {
            return &table[i];
        }
    }
    return nullptr;
}

void bm_call(benchmark::State &state, CallKind kind) {
    constexpr int64_t kHeadDim = 64, kPairs = kHeadDim / 2, kRows = 8;
    std::vector<float> q(kHeadDim, 0.5f), q_out(kHeadDim), other_q_out(kHeadDim), table(kRows * kPairs, 0.25f);
    rope_params params = rope_params_init();
    params.style = ROPE_STYLE_HALF;
    for (auto [tensor, data] : {std::pair{&params.q, q.data()}, std::pair{&params.q_out, q_out.data()}}) {
        tensor->data = data;
        tensor->dtype = ROPE_DTYPE_F32;
        const int64_t sizes[4] = {1, 1, 1, kHeadDim}, strides[4] = {kHeadDim, kHeadDim, kHeadDim, 1};
        std::copy(sizes, sizes + 4, tensor->sizes);
        std::copy(strides, strides + 4, tensor->strides);
    }
    params.positions.offset = kRows - 1;  // a decode step: one token at a scalar offset
    params.angles.source = ROPE_SOURCE_CACHE;
    params.angles.cos_cache = table.data();
    params.angles.sin_cache = table.data();
    params.angles.cache_len = kRows;
    params.num_threads = 1;

    rope_report report = rope_report_init();
    if (const rope_status status = rope_query(&params, &report); status != ROPE_OK) {
        state.SkipWithError(failure("rope_query", status, report).c_str());
        return;
    }
    state.SetLabel(report.kernel);
    rope_params other_params = params;
    other_params.q_out.data = other_q_out.data();
    const ropegen::KernelEntry *kernel = find_kernel(report.kernel);
    if (kind == CallKind::RunKernel && kernel == nullptr) {
        state.SkipWithError("the kernel named by rope_query is not in kernel_table()");
        return;
    }
    for (auto _ : state) {
        rope_status status = ROPE_OK;
        switch (kind) {
        case CallKind::Query:
            status = rope_query(&params, &report);
            break;
        case CallKind::Dispatch:
            status = rope_dispatch(&params, nullptr);
            break;
        case CallKind::DispatchWithReport:
            status = rope_dispatch(&params, &report);
            break;
        case CallKind::DispatchAlternating:
            std::swap(params, other_params);
            status = rope_dispatch(&params, nullptr);
            break;
        case CallKind::RunKernel:
            status = ropegen::run_kernel(*kernel, &params, nullptr);
            break;
        }
        if (status != ROPE_OK) {
            state.SkipWithError(failure("call", status, report).c_str());
            break;
        }
    }
}

// ---- Registration ----------------------------------------------------------------------------

std::string case_name(const char *kind, const Case &c) {
    std::string name = std::string(kind) + "/shape:" + c.shape->name + "/dtype:" + c.dtype->name;
    if (c.style != nullptr) {
        name += std::string("/style:") + c.style->name;
    }
    if (c.source != nullptr) {
        name += std::string("/source:") + c.source->name;
    }
    return name + "/threads:" + std::to_string(c.threads);
}

template <typename Fn>
void register_case(const char *kind, const Case &c, Fn fn) {
    const bool decode = c.shape->seq == 1;
    benchmark::RegisterBenchmark(case_name(kind, c).c_str(), [c, fn](benchmark::State &state) { fn(state, c); })
        ->UseRealTime()  // the work runs on several threads: wall time, not the caller's CPU time
        ->Unit(decode ? benchmark::kMicrosecond : benchmark::kMillisecond);
}

void register_all() {
    std::vector<int> thread_counts{1};
    if (g_all_threads > 1) {
        thread_counts.push_back(g_all_threads);
    }
    // Grouped by (shape, dtype) so the cached workspace is reused across a group.
    for (const Shape &shape : kShapes) {
        for (const DtypeInfo &dtype : kDtypes) {
            for (int threads : thread_counts) {
                register_case("memcpy", {&shape, &dtype, nullptr, nullptr, threads},
                              [](benchmark::State &state, const Case &c) { bm_copy(state, c, kMemcpy, false); });
                register_case("copy", {&shape, &dtype, nullptr, nullptr, threads},
                              [](benchmark::State &state, const Case &c) { bm_copy(state, c, kCopyLoop, true); });
                if (shape.seq == 1) {  // the shapes also rotated in place
                    register_case("rewrite", {&shape, &dtype, nullptr, nullptr, threads},
                                  [](benchmark::State &state, const Case &c) { bm_copy(state, c, kRewrite, true); });
                }
            }
            for (const StyleInfo &style : kStyles) {
                for (int threads : thread_counts) {
                    register_case("scalar", {&shape, &dtype, &style, nullptr, threads},
                                  [](benchmark::State &state, const Case &c) { bm_scalar(state, c, false); });
                }
            }
            for (const StyleInfo &style : kStyles) {
                for (const SourceInfo &source : kSources) {
                    if (source.source == ROPE_SOURCE_PRECISE && std::strcmp(shape.name, kPreciseShape) != 0) {
                        continue;
                    }
                    for (int threads : thread_counts) {
                        register_case("rope", {&shape, &dtype, &style, &source, threads},
                                      [](benchmark::State &state, const Case &c) { bm_rope(state, c, false); });
                    }
                }
            }
            // In place, for decode steps (engines such as vLLM rotate q and k in place there),
            // with the cache source, as the decode targets are measured.
            for (const StyleInfo &style : kStyles) {
                for (int threads : thread_counts) {
                    if (shape.seq == 1) {
                        register_case("rope_inplace", {&shape, &dtype, &style, &kSources[0], threads},
                                      [](benchmark::State &state, const Case &c) { bm_rope(state, c, true); });
                        register_case("scalar_inplace", {&shape, &dtype, &style, nullptr, threads},
                                      [](benchmark::State &state, const Case &c) { bm_scalar(state, c, true); });
                        register_case("rope_plan", {&shape, &dtype, &style, &kSources[0], threads}, [](benchmark::State &state, const Case &c) {
                            bm_rope(state, c, false, Entry::Plan);
                        });
                    }
                }
            }
        }
    }
    for (const CallInfo &call : kCalls) {
        benchmark::RegisterBenchmark((std::string("call/call:") + call.name).c_str(), bm_call, call.kind)
            ->Unit(benchmark::kNanosecond);
    }
}

// ---- Context (recorded in the JSON output for bench_table.py) --------------------------------

int bench_threads() {
    if (const char *env = std::getenv("ROPE_NUM_THREADS")) {
        if (const int n = std::atoi(env); n > 0) {
            return n;
        }
    }
    return std::max(1u, std::thread::hardware_concurrency());
}

// The model name with family, model and stepping: VMs name different CPUs alike ("AMD EPYC").
std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string name = "unknown", family, model, stepping;
    for (std::string line; std::getline(cpuinfo, line) && line.find_first_not_of(" \t") != std::string::npos;) {
        const size_t colon = line.find(':');
        if (colon == std::string::npos) {
            continue;
        }
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        const std::string value = start == std::string::npos ? "" : line.substr(start);
        if (line.rfind("model name", 0) == 0) {
            name = value;
        } else if (line.rfind("cpu family", 0) == 0) {
            family = value;
        } else if (line.rfind("model", 0) == 0) {
            model = value;
        } else if (line.rfind("stepping", 0) == 0) {
            stepping = value;
        }
    }
    return family.empty() ? name : name + " (family " + family + " model " + model + " stepping " + stepping + ")";
}

void add_context(int argc, char **argv) {
    std::string command;
    for (int i = 0; i < argc; i++) {
        command += (i ? " " : "") + std::string(argv[i]);
    }
    size_t kernels = 0;
    ropegen::kernel_table(&kernels);
    benchmark::AddCustomContext("command", command);
    benchmark::AddCustomContext("cpu_model", cpu_model());
    benchmark::AddCustomContext("ropegen_version", rope_version_string());
    benchmark::AddCustomContext("ropegen_active_isa", ropegen::isa_name(rope_active_isa()));
    benchmark::AddCustomContext("ropegen_kernels_built", std::to_string(kernels));
    benchmark::AddCustomContext("bench_threads", std::to_string(g_all_threads));
}

}  // namespace
}  // namespace ropebench

int main(int argc, char **argv) {
    using namespace ropebench;
    g_all_threads = bench_threads();
    if (rope_set_num_threads(g_all_threads) != ROPE_OK) {
        return 1;
    }
    rope_set_parallel_runner(run_on_pool, nullptr);
    add_context(argc, argv);  // before Initialize() strips the --benchmark flags from argv
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    // A filter that matches no row is an error: a renamed row must not leave bench.Smoke empty.
    const size_t rows = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return rows > 0 ? 0 : 1;
}
