// SPDX-License-Identifier: Apache-2.0
// rope_tune_harness: checks and times the candidate kernels of one kernel key for the autotuner
// (rope_tune.py). Each candidate is a shared object the tuner made from the generator with one
// set of schedule knobs; it is loaded here and run through ropegen::run_kernel, the dispatcher's
// own path (validation, buffer set-up, threads), so it is timed exactly as the library would run it.
//
//   rope_tune_harness --style half --source cache --dtype f32 --head-dim 128 --isa avx512
//                     --candidates list.txt [--reps 7] [--min-rep-ms 2] [--min-bytes 0]
//                     [--below-bytes N] [--in-place 0|1]
//
// list.txt has one candidate per line: "<id> <shared object> <function name> <pair words: 0|1>"
// (1: it stores its 16-bit lanes as 32-bit words, KernelEntry::pair_words). Output, one JSON
// object per line: {"candidate": id, "verified": true|false, "failure": "..."} for every
// candidate, then {"candidate": id, "shape": ..., "layout": ..., "in_place": true|false, "bytes": ...,
// "ns": [...]} per
// candidate and timed shape, with "memcpy" as the id of a copy of the same bytes.
//
// Timing: every candidate is first checked against the fp64 oracle (a failing one is never timed),
// then repetitions are interleaved: each repetition runs every candidate and the memcpy once, in
// a shuffled order, so drift of a shared, noisy machine spreads over all of them alike. A
// repetition runs enough calls to last --min-rep-ms; the tuner takes medians of the repetitions.
// --min-bytes times only the shapes that move at least that many bytes (the tuner's large-call
// stage judges those alone), --below-bytes only those that move fewer. --in-place 1 times the
// calls in place alone (the tuner's in-place stage, whose kernel serves them), --in-place 0 the
// calls out of place alone (the key's own kernel serves them): never the two together.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "internal/json_string.h"
#include "internal/kernel_table.h"
#include "support/guarded_bytes.h"
#include "support/kernels.h"
#include "support/rope_case.h"
#include "worker_pool.h"

namespace {

using ropegen::json_string;
using ropegen::KernelEntry;
using ropegen::KernelFunction;
using namespace ropegen::test;

// Llama-3-8B-like attention (32 q heads, 8 kv heads) in the shapes that reach each of the
// generator's layout specializations. One-token views collapse: a decode step in BSHD or SBHD
// takes the BSHD loop nest, and one in BHSD matches none and takes the strided fallback. A BSHD
// decode step is timed out of place and in place (as vLLM rotates): the two favour different
// schedules, and a schedule level with another out of place can take 1.5x its time in place.
// Prefills of 512 tokens fit a 32 MiB L3 (about 20 MiB moved in f32); the 4096-token one (about
// 160 MiB) streams from DRAM, where vector widths rank otherwise than in cache (256-bit beat
// 512-bit by 10-20% on a Zen 4 VM, bench/JOURNAL.md). The calls in place (--in-place 1): the BSHD
// decode step and two 512-token prefills, BSHD and BHSD.
struct TimedShape {
    const char *name;
    const char *layout;  // the schedule's layout group the shape exercises
    Layout tensor_layout;
    int64_t batch, seq;
    Memory memory = Memory::Separate;
};
constexpr TimedShape kShapes[] = {
    {"decode_b8_bshd", "bshd", Layout::BSHD, 8, 1},
    {"decode_b8_bshd_in_place", "bshd", Layout::BSHD, 8, 1, Memory::InPlace},
    {"prefill_512_bshd", "bshd", Layout::BSHD, 1, 512},
    {"prefill_4096_bshd", "bshd", Layout::BSHD, 1, 4096},
    {"prefill_512_bhsd", "bhsd", Layout::BHSD, 1, 512},
    {"prefill_4x128_sbhd", "sbhd", Layout::SBHD, 4, 128},
    {"decode_b8_bhsd", "strided", Layout::BHSD, 8, 1},
    {"prefill_512_bshd_in_place", "bshd", Layout::BSHD, 1, 512, Memory::InPlace},
    {"prefill_512_bhsd_in_place", "bhsd", Layout::BHSD, 1, 512, Memory::InPlace},
};
constexpr int64_t kQHeads = 32, kKHeads = 8;
constexpr int64_t kAnyHeadDim = 128;  // the any-head_dim kernel is timed at the common head_dim
constexpr int64_t kCacheLen = 4096;

struct Options {
    rope_style style = ROPE_STYLE_HALF;
    rope_source source = ROPE_SOURCE_CACHE;
    rope_dtype dtype = ROPE_DTYPE_F32;
    int head_dim = 0;
    rope_isa isa = ROPE_ISA_NONE;
    std::string candidates;
    int reps = 7;
    double min_rep_seconds = 0.002;
    int64_t min_bytes = 0;
    int64_t below_bytes = std::numeric_limits<int64_t>::max();
    bool in_place = false;
};

struct Candidate {
    std::string id;
    std::string function_name;
    KernelEntry entry{};
    std::string failure;  // empty: verified
};

template <typename T, size_t N>
bool parse_choice(const std::string &text, const std::pair<const char *, T> (&choices)[N], T *value) {
    for (const auto &[name, choice] : choices) {
        if (text == name) {
            *value = choice;
            return true;
        }
    }
    return false;
}

bool parse_options(int argc, char **argv, Options *options, std::string *error) {
    static constexpr std::pair<const char *, rope_style> kStyles[] = {{"half", ROPE_STYLE_HALF},
                                                                       {"interleaved", ROPE_STYLE_INTERLEAVED}};
    static constexpr std::pair<const char *, rope_source> kSources[] = {
        {"cache", ROPE_SOURCE_CACHE}, {"compat", ROPE_SOURCE_COMPAT}, {"precise", ROPE_SOURCE_PRECISE}};
    static constexpr std::pair<const char *, rope_dtype> kDtypes[] = {
        {"f32", ROPE_DTYPE_F32}, {"f16", ROPE_DTYPE_F16}, {"bf16", ROPE_DTYPE_BF16}};
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) {
            *error = flag + " needs a value";
            return false;
        }
        const std::string value = argv[i + 1];
        bool ok = true;
        if (flag == "--style") {
            ok = parse_choice(value, kStyles, &options->style);
        } else if (flag == "--source") {
            ok = parse_choice(value, kSources, &options->source);
        } else if (flag == "--dtype") {
            ok = parse_choice(value, kDtypes, &options->dtype);
        } else if (flag == "--head-dim") {
            options->head_dim = std::atoi(value.c_str());
            ok = options->head_dim >= 0 && options->head_dim % 2 == 0;
        } else if (flag == "--isa") {
            ok = isa_from_name(value, &options->isa) && options->isa != ROPE_ISA_NONE;
        } else if (flag == "--candidates") {
            options->candidates = value;
        } else if (flag == "--reps") {
            options->reps = std::atoi(value.c_str());
            ok = options->reps > 0;
        } else if (flag == "--min-bytes") {
            options->min_bytes = std::atoll(value.c_str());
            ok = options->min_bytes >= 0;
        } else if (flag == "--below-bytes") {
            options->below_bytes = std::atoll(value.c_str());
            ok = options->below_bytes > 0;
        } else if (flag == "--in-place") {
            options->in_place = value == "1";
            ok = value == "0" || value == "1";
        } else if (flag == "--min-rep-ms") {
            options->min_rep_seconds = std::atof(value.c_str()) / 1000;
            ok = options->min_rep_seconds > 0;
        } else {
            *error = "unknown flag " + flag;
            return false;
        }
        if (!ok) {
            *error = flag + ": bad value " + value;
            return false;
        }
    }
    if (options->candidates.empty()) {
        *error = "--candidates is required";
        return false;
    }
    return true;
}

// Loads every candidate; a shared object that does not load is a usage error, not a candidate
// failure (the tuner built it).
bool load_candidates(const Options &options, std::vector<Candidate> *candidates, std::string *error) {
    std::ifstream list(options.candidates);
    if (!list) {
        *error = "cannot read " + options.candidates;
        return false;
    }
    std::string line;
    while (std::getline(list, line)) {
        std::istringstream fields(line);
        Candidate candidate;
        std::string path;
        int pair_words = 0;
        if (!(fields >> candidate.id >> path >> candidate.function_name >> pair_words)) {
            continue;
        }
        // RTLD_LOCAL: every candidate defines its own function; the Halide runtime they call
        // is this executable's (the library's), exported to them.
        void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        void *function = handle ? dlsym(handle, candidate.function_name.c_str()) : nullptr;
        if (function == nullptr) {
            *error = "cannot load " + candidate.function_name + " from " + path + ": " + dlerror();
            return false;
        }
        candidate.entry = KernelEntry{nullptr, options.isa, options.style, options.source,
                                      options.dtype, options.head_dim, reinterpret_cast<KernelFunction>(function), 0, 0,
                                      pair_words != 0};
        candidates->push_back(std::move(candidate));
    }
    if (candidates->empty()) {
        *error = "no candidates in " + options.candidates;
        return false;
    }
    for (Candidate &candidate : *candidates) {  // names point into strings that no longer move
        candidate.entry.name = candidate.function_name.c_str();
    }
    return true;
}

// Calls that reach every loop nest of a kernel: each layout specialization, the strided fallback
// (a one-head BSHD view), token counts that leave tails for any tokens_per_task, extreme values,
// a packed QKV buffer rotated in place, and for the any-head_dim kernel a partial rotary slice.
std::vector<CaseSpec> verification_cases(const KernelEntry &key) {
    std::vector<CaseSpec> cases;
    const CaseSpec base = [&] {
        CaseSpec spec = kernel_case(key, kAnyHeadDim);
        spec.batch = 2;
        spec.seq = 37;
        spec.q_heads = 4;
        spec.k_heads = 2;
        spec.positions = random_table(spec, 0, kCacheLen, ROPE_INDEX_INT32, 7);
        return spec;
    }();
    for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD}) {
        CaseSpec spec = base;
        spec.layout = layout;
        cases.push_back(spec);
    }
    CaseSpec one_head = base;
    one_head.q_heads = one_head.k_heads = 1;
    cases.push_back(one_head);
    CaseSpec adversarial = base;
    adversarial.fill = Fill::Adversarial;
    cases.push_back(adversarial);
    CaseSpec packed = base;
    packed.memory = Memory::PackedQkvInPlace;
    cases.push_back(packed);
    if (key.head_dim == 0) {
        CaseSpec partial = base;
        partial.head_dim = 96;
        partial.rotary_dim = 64;
        partial.rotary_offset = 16;
        cases.push_back(partial);
    }
    return cases;
}

std::string verify(const Candidate &candidate, const std::vector<CaseSpec> &cases) {
    for (const CaseSpec &spec : cases) {
        RopeCall call(spec);
        const rope_status status = call.run(kernel_runner(candidate.entry));
        if (status != ROPE_OK) {
            return spec.describe() + ": status " + rope_status_string(status) + ": " + call.report().message;
        }
        if (const auto result = call.check_outputs(); !result) {
            return spec.describe() + ": " + result.message();
        }
        if (const auto result = call.check_untouched_outside_outputs(); !result) {
            return spec.describe() + ": " + result.message();
        }
    }
    return "";
}

CaseSpec timed_case(const KernelEntry &key, const TimedShape &shape) {
    CaseSpec spec = kernel_case(key, kAnyHeadDim);
    spec.batch = shape.batch;
    spec.seq = shape.seq;
    spec.q_heads = kQHeads;
    spec.k_heads = kKHeads;
    spec.layout = shape.tensor_layout;
    spec.memory = shape.memory;
    // Decode steps read scattered cache rows, as a real batch does; a prefill starts at 0.
    if (shape.seq == 1) {
        spec.positions = random_table(spec, 0, kCacheLen, ROPE_INDEX_INT32, 11);
    }
    spec.cache_len = kCacheLen;
    return spec;
}

// dst = src on `pool`'s threads.
void parallel_copy(ropebench::WorkerPool &pool, int threads, uint8_t *dst, const uint8_t *src, size_t bytes) {
    auto part = [&](int index) { ropebench::copy_part(src, dst, bytes, index, threads); };
    pool.run(threads, part);
}

using Clock = std::chrono::steady_clock;

// Calls per repetition so that one lasts at least `min_seconds` (measured after a warm-up call).
int64_t calibrate(const std::function<void()> &call, double min_seconds) {
    call();
    for (int64_t calls = 1;; calls *= 2) {
        const auto start = Clock::now();
        for (int64_t i = 0; i < calls; i++) call();
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (seconds >= min_seconds || calls >= (int64_t{1} << 20)) {
            return calls;
        }
    }
}

double time_per_call_ns(const std::function<void()> &call, int64_t calls) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < calls; i++) call();
    return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(calls);
}

// Times every verified candidate and the memcpy on one shape; prints a line per timed entry.
void time_shape(const Options &options, const TimedShape &shape, const std::vector<Candidate> &candidates) {
    RopeCall call(timed_case(candidates.front().entry, shape));
    const rope_params params = call.params();
    // The bytes the call moves as the dispatcher counts them, so that --min-bytes and
    // --below-bytes select the shapes a large-call kernel of that size would serve, or not.
    const uint64_t moved = ropegen::call_bytes(params);
    if (moved < static_cast<uint64_t>(options.min_bytes) || moved >= static_cast<uint64_t>(options.below_bytes)) {
        return;
    }
    const size_t q_bytes = call.q.storage()->bytes.size();
    const size_t k_bytes = call.k.storage()->bytes.size();
    // The memcpy runs on as many threads as the library gives the call: one below
    // kSerialCallBytes moved, else every core (its pool's default).
    const int threads = moved < ropegen::kSerialCallBytes ? 1 : static_cast<int>(std::thread::hardware_concurrency());
    ropebench::WorkerPool pool(threads);
    // In place the outputs are the inputs: the memcpy copies into buffers of its own, the same
    // bytes an out-of-place call moves (as rope_bench compares its in-place rows).
    const bool in_place = shape.memory == Memory::InPlace;
    GuardedBytes q_copy(in_place ? q_bytes : 0, 0), k_copy(in_place ? k_bytes : 0, 0);
    uint8_t *q_target = in_place ? q_copy.data() : call.q_out.storage()->bytes.data();
    uint8_t *k_target = in_place ? k_copy.data() : call.k_out.storage()->bytes.data();
    struct Timed {
        std::string id;
        std::function<void()> run;
        int64_t calls = 0;
        std::vector<double> ns;
    };
    std::vector<Timed> timed;
    timed.push_back({"memcpy", [&] {
                         parallel_copy(pool, threads, q_target, call.q.storage()->bytes.data(), q_bytes);
                         parallel_copy(pool, threads, k_target, call.k.storage()->bytes.data(), k_bytes);
                     },
                     0, {}});
    for (const Candidate &candidate : candidates) {
        if (candidate.failure.empty()) {
            timed.push_back({candidate.id, [&params, &candidate] {
                                 rope_report report = rope_report_init();
                                 ropegen::run_kernel(candidate.entry, &params, &report);
                             },
                             0, {}});
        }
    }
    for (Timed &t : timed) {
        t.calls = calibrate(t.run, options.min_rep_seconds);
    }
    std::mt19937 rng(1234);
    std::vector<size_t> order(timed.size());
    for (int rep = 0; rep < options.reps; rep++) {
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t i : order) {
            timed[i].ns.push_back(time_per_call_ns(timed[i].run, timed[i].calls));
        }
    }
    for (const Timed &t : timed) {
        std::string ns;
        for (double value : t.ns) ns += (ns.empty() ? "" : ", ") + std::to_string(value);
        std::printf("{\"candidate\": %s, \"shape\": \"%s\", \"layout\": \"%s\", \"in_place\": %s, \"bytes\": %zu, "
                    "\"ns\": [%s]}\n",
                    json_string(t.id).c_str(), shape.name, shape.layout, in_place ? "true" : "false",
                    static_cast<size_t>(moved), ns.c_str());
    }
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
    Options options;
    std::string error;
    std::vector<Candidate> candidates;
    if (!parse_options(argc, argv, &options, &error) || !load_candidates(options, &candidates, &error)) {
        std::fprintf(stderr, "rope_tune_harness: %s\n", error.c_str());
        return 2;
    }
    if (options.isa > ropegen::detected_isa()) {
        std::fprintf(stderr, "rope_tune_harness: this CPU cannot run %s kernels (it supports %s)\n",
                     ropegen::isa_name(options.isa), ropegen::isa_name(ropegen::detected_isa()));
        return 2;
    }
    const std::vector<CaseSpec> cases = verification_cases(candidates.front().entry);  // all share one key
    for (Candidate &candidate : candidates) {
        candidate.failure = verify(candidate, cases);
        std::printf("{\"candidate\": %s, \"verified\": %s, \"failure\": %s}\n", json_string(candidate.id).c_str(),
                    candidate.failure.empty() ? "true" : "false", json_string(candidate.failure).c_str());
    }
    std::fflush(stdout);
    for (const TimedShape &shape : kShapes) {
        if ((shape.memory == Memory::InPlace) == options.in_place) {
            time_shape(options, shape, candidates);
        }
    }
    return 0;
}
