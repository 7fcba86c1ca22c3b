// SPDX-License-Identifier: Apache-2.0
// Concurrency: many threads call rope_dispatch at once with every kind of call while others
// change the process-wide settings under them (ISA cap, pool size, engine runner). Every result
// must be bit-identical to the serial result of the kernel the call's report names (the cap may
// change while a call is in flight, so which kernel runs is the call's own business). Run under
// ThreadSanitizer by the tsan preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_pool.h"
#include "internal/inv_freq_cache.h"
#include "stress_support.h"

namespace ropegen::test {
namespace {

constexpr int kCallerThreads = 12;

// One call of the mix and the serial result of every kernel the dispatcher may pick for it under
// some ISA cap.
struct Job {
    CaseSpec spec;
    std::map<std::string, Outputs> serial;  // by kernel name
};

// The caps a thread may set, each of them at most what the CPU has.
std::vector<rope_isa> caps() {
    std::vector<rope_isa> caps{ROPE_ISA_NONE};
    for (rope_isa isa : isa_levels()) {
        if (isa <= detected_isa()) {
            caps.push_back(isa);
        }
    }
    return caps;
}

// Calls of every key of the build (a varied spread for each, so all layouts and memory kinds
// meet), with their serial results.
std::vector<Job> make_jobs() {
    std::vector<Job> jobs;
    uint64_t seed = 100;
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        const std::vector<CaseSpec> cases = varied_cases(*kernel, seed);
        // Two of the spread per key keep the run short; which two rotates over the keys.
        for (size_t i = 0; i < 2; i++) {
            Job job{cases[(seed + 3 * i) % cases.size()], {}};
            job.spec.num_threads = 1;
            const RopeCall probe(job.spec);
            for (rope_isa cap : caps()) {
                const rope_isa level = cap == ROPE_ISA_NONE ? detected_isa() : cap;
                const KernelEntry *candidate = first_matching_kernel(probe.params(), level);
                if (candidate == nullptr || job.serial.count(candidate->name) != 0) {
                    continue;
                }
                RopeCall call(job.spec);
                EXPECT_EQ(call.run(kernel_runner(*candidate)), ROPE_OK) << call.report().message;
                job.serial.emplace(candidate->name, Outputs::of(call));
            }
            jobs.push_back(std::move(job));
        }
        seed += 10;
    }
    return jobs;
}

// What went wrong on the caller threads, reported on the test's thread.
class Failures {
public:
    void add(const std::string &what) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (list_.size() < 20) {
            list_.push_back(what);
        }
        count_++;
    }
    ::testing::AssertionResult none() const {
        if (count_ == 0) {
            return ::testing::AssertionSuccess();
        }
        ::testing::AssertionResult result = ::testing::AssertionFailure() << count_ << " failure(s):";
        for (const std::string &what : list_) {
            result << "\n  " << what;
        }
        return result;
    }

private:
    std::mutex mutex_;
    std::vector<std::string> list_;
    int count_ = 0;
};

// Runs `call` through rope_dispatch and checks it against the serial result of the kernel that ran.
void check_call(RopeCall &call, const Job &job, Failures &failures) {
    const rope_status status = call.run(dispatch_runner());
    const std::string what = std::string(call.report().kernel) + " " + call.spec().describe() +
                             " num_threads=" + std::to_string(call.spec().num_threads);
    if (status != ROPE_OK) {
        failures.add(what + ": " + rope_status_string(status) + " " + call.report().message);
        return;
    }
    const auto serial = job.serial.find(call.report().kernel);
    if (serial == job.serial.end()) {
        failures.add(what + ": a kernel no ISA cap selects");
        return;
    }
    if (::testing::AssertionResult same = agree(call, serial->second); !same) {
        failures.add(what + ": " + same.message());
    }
}

class ConcurrencyTest : public ::testing::Test {
protected:
    void TearDown() override {
        rope_set_max_isa(ROPE_ISA_NONE);
        rope_set_parallel_runner(nullptr, nullptr);
        rope_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }
};

// Every thread runs its share of the mix with changing num_threads; one in three also changes
// one process-wide setting before each of its calls, so settings change under calls in flight.
TEST_F(ConcurrencyTest, CallsRacingSettingChangesMatchSerialResults) {
    const std::vector<Job> jobs = make_jobs();
    ASSERT_FALSE(jobs.empty());
    const std::vector<rope_isa> isa_caps = caps();
    ReverseOrderPool engine(2);
    Failures failures;
    std::atomic<int> calls{0};
    auto caller = [&](int thread) {
        for (int round = 0; round < 24; round++) {
            const int step = thread + round * kCallerThreads;
            switch (thread % 3) {
            case 0: rope_set_max_isa(isa_caps[step % isa_caps.size()]); break;
            case 1: rope_set_num_threads(1 + step % 4); break;
            default:
                rope_set_parallel_runner(step % 2 == 0 ? &ReverseOrderPool::run : nullptr, &engine);
                break;
            }
            const Job &job = jobs[step % jobs.size()];
            CaseSpec c = job.spec;
            c.num_threads = varied_num_threads()[(step / 3) % varied_num_threads().size()];
            RopeCall call(c);
            check_call(call, job, failures);
            calls++;
        }
    };
    std::vector<std::thread> threads;
    for (int thread = 0; thread < kCallerThreads; thread++) {
        threads.emplace_back(caller, thread);
    }
    for (std::thread &thread : threads) {
        thread.join();
    }
    EXPECT_EQ(calls.load(), kCallerThreads * 24);
    EXPECT_TRUE(failures.none());
}

// A caller thread's call on `shared`'s inputs and tables: outputs of its own, shaped as `want`,
// and one of the varied thread counts.
struct ThreadCall {
    Outputs out;
    rope_params params;

    ThreadCall(const RopeCall &shared, const Outputs &want, int thread)
        : out{Tensor::make(shared.spec().dtype, want.q.sizes(), shared.spec().layout),
              Tensor::make(shared.spec().dtype, want.k.sizes(), shared.spec().layout)},
          params(shared.params()) {
        params.q_out = out.q.rope();
        params.k_out = out.k.rope();
        params.num_threads = varied_num_threads()[thread % varied_num_threads().size()];
    }
    bool gives(const Outputs &want) const {
        return agree(out.q, want.q, Agreement::Bits) && agree(out.k, want.k, Agreement::Bits);
    }
    // Records what the call of `kernel` got wrong, if anything: its status, or other bits than `want`.
    void check(rope_status status, const rope_report &report, const KernelEntry &kernel, const Outputs &want,
               Failures &failures) const {
        if (status != ROPE_OK) {
            failures.add(std::string(kernel.name) + ": " + report.message);
        } else if (!gives(want)) {
            failures.add(std::string(report.kernel) + " num_threads=" + std::to_string(params.num_threads) +
                         ": outputs differ from the serial call");
        }
    }
};

// Runs fn(thread) on kCallerThreads threads at once.
template <typename Fn>
void on_caller_threads(Fn fn) {
    std::vector<std::thread> threads;
    for (int thread = 0; thread < kCallerThreads; thread++) {
        threads.emplace_back(fn, thread);
    }
    for (std::thread &thread : threads) {
        thread.join();
    }
}

// For every cache-source key, a call of its varied cases (`seed`) whose inputs and tables the
// caller threads share (`shared`, never run itself), and the serial outputs of the key's kernel.
template <typename Body>
void for_each_shared_call(uint64_t seed, Body body) {
    for (const KernelEntry *kernel : one_kernel_per_key()) {
        if (kernel->source != ROPE_SOURCE_CACHE) {
            continue;
        }
        const CaseSpec spec = varied_cases(*kernel, seed).front();
        const RopeCall shared(spec);
        RopeCall serial(spec);
        ASSERT_EQ(serial.run(kernel_runner(*kernel)), ROPE_OK) << serial.report().message;
        body(*kernel, shared, Outputs::of(serial));
    }
}

// Engines share one cos/sin cache and read the same activations from many threads: calls that
// read the same inputs at once, each writing outputs of its own, all give the serial bits.
TEST_F(ConcurrencyTest, CallsSharingTheirInputsMatchSerialResults) {
    for_each_shared_call(41, [](const KernelEntry &kernel, const RopeCall &shared, const Outputs &want) {
        Failures failures;
        on_caller_threads([&](int thread) {
            ThreadCall mine(shared, want, thread);
            rope_report report = rope_report_init();
            mine.check(run_kernel(kernel, &mine.params, &report), report, kernel, want, failures);
        });
        EXPECT_TRUE(failures.none()) << kernel.name;
    });
}

// Plans made and run on many threads at once, over one call's inputs and tables, each thread's
// plan with its own outputs and thread count, run three times, then one plan run by every thread
// at once: every run gives the serial bits, and a run writes nothing of the plan (ThreadSanitizer
// sees the library's side; the generated kernels' stores of the same bits are not instrumented).
TEST_F(ConcurrencyTest, PlansRunOnManyThreadsMatchSerialResults) {
    for_each_shared_call(43, [](const KernelEntry &kernel, const RopeCall &shared, const Outputs &want) {
        Failures failures;
        on_caller_threads([&](int thread) {
            ThreadCall mine(shared, want, thread);
            rope_report report = rope_report_init();
            rope_plan *plan = nullptr;
            rope_status status = rope_plan_create(&mine.params, &plan, &report);
            for (int run = 0; run < 3 && status == ROPE_OK; run++) {
                status = rope_plan_run(plan, &report);
            }
            rope_plan_destroy(plan);
            mine.check(status, report, kernel, want, failures);
        });
        const ThreadCall one(shared, want, 0);  // one plan, run by every thread
        rope_report report = rope_report_init();
        rope_plan *plan = nullptr;
        ASSERT_EQ(rope_plan_create(&one.params, &plan, &report), ROPE_OK) << report.message;
        on_caller_threads([&](int) {
            rope_report mine = rope_report_init();
            if (rope_plan_run(plan, &mine) != ROPE_OK) {
                failures.add(std::string(kernel.name) + " (one plan, many threads): " + mine.message);
            }
        });
        rope_plan_destroy(plan);
        EXPECT_TRUE(one.gives(want)) << kernel.name;
        EXPECT_TRUE(failures.none()) << kernel.name;
    });
}

// Two engines' runners swapped under running calls: a loop is always handed to the pool of the
// runner it was set with, never to the other engine's pool.
TEST_F(ConcurrencyTest, RunnerSwapsNeverMixOneEnginesFunctionWithAnothersPool) {
    struct TaggedPool {
        ReverseOrderPool pool{2};
        std::atomic<int> foreign{0};
    };
    static TaggedPool first, second;
    struct Runners {
        static int first_run(void *pool, int (*task)(void *, int), void *context, int count) {
            if (pool != &first) {
                first.foreign++;
            }
            return ReverseOrderPool::run(&static_cast<TaggedPool *>(pool)->pool, task, context, count);
        }
        static int second_run(void *pool, int (*task)(void *, int), void *context, int count) {
            if (pool != &second) {
                second.foreign++;
            }
            return ReverseOrderPool::run(&static_cast<TaggedPool *>(pool)->pool, task, context, count);
        }
    };
    const std::vector<Job> jobs = make_jobs();
    Failures failures;
    std::vector<std::thread> threads;
    for (int thread = 0; thread < kCallerThreads; thread++) {
        threads.emplace_back([&, thread] {
            for (int round = 0; round < 8; round++) {
                if (thread % 2 == 0) {
                    const bool use_first = (thread / 2 + round) % 2 == 0;
                    rope_set_parallel_runner(use_first ? &Runners::first_run : &Runners::second_run,
                                             use_first ? &first : &second);
                }
                const Job &job = jobs[(thread + round * kCallerThreads) % jobs.size()];
                CaseSpec c = job.spec;
                c.num_threads = 2;  // loops go to the engine's pool, whatever the call's size
                RopeCall call(c);
                check_call(call, job, failures);
            }
        });
    }
    for (std::thread &thread : threads) {
        thread.join();
    }
    EXPECT_TRUE(failures.none());
    EXPECT_EQ(first.foreign.load() + second.foreign.load(), 0);
    EXPECT_GT(first.pool.loops.load() + second.pool.loops.load(), 0);
}

// compat calls without scaling take their frequencies from a process-wide cache, which fills on
// each key's first call: threads whose first calls race, several on each key, on more keys than
// it has slots (those beyond compute their own) give the bits of the kernel computing the frequencies itself (dynamic
// scaling within original_max keeps base), and every slot ends up holding a key of its own (calls
// racing on one key fill one slot).
TEST_F(ConcurrencyTest, CallsFillingTheFrequencyCacheGiveTheKernelsOwnBits) {
    const std::vector<const KernelEntry *> kernels = one_kernel_per_key();
    const auto compat = std::find_if(kernels.begin(), kernels.end(),
                                     [](const KernelEntry *k) { return k->source == ROPE_SOURCE_COMPAT; });
    if (compat == kernels.end()) {
        GTEST_SKIP() << "this build has no compat kernel";
    }
    const int keys = kCompatInvFreqSlots + 4;
    const int free_slots = kCompatInvFreqSlots - compat_inv_freq_keys_held();
    std::vector<CaseSpec> specs;
    std::vector<Outputs> serial;
    for (int key = 0; key < keys; key++) {
        CaseSpec c = varied_cases(**compat, 61).front();
        c.base = 5000.0 + 250.5 * key;
        c.positions = random_table(c, 0, int64_t{1} << 20, ROPE_INDEX_INT32, 62);
        CaseSpec computing = c;
        computing.scaling.type = ROPE_SCALING_DYNAMIC;
        computing.scaling.factor = 2;
        computing.scaling.original_max = int64_t{1} << 30;
        RopeCall call(computing);
        ASSERT_EQ(call.run(kernel_runner(**compat)), ROPE_OK) << call.report().message;
        serial.push_back(Outputs::of(call));
        specs.push_back(c);
    }
    Failures failures;
    std::vector<std::thread> threads;
    for (int thread = 0; thread < kCallerThreads; thread++) {
        threads.emplace_back([&, thread] {
            // Three threads a key at once, a new key each round: 20 keys in 5 rounds.
            for (int round = 0; round < 5; round++) {
                const int key = (thread / 3 + round * (kCallerThreads / 3)) % keys;
                RopeCall call(specs[key]);
                if (call.run(kernel_runner(**compat)) != ROPE_OK) {
                    failures.add(std::string((*compat)->name) + ": " + call.report().message);
                } else if (::testing::AssertionResult same = agree(call, serial[key]); !same) {
                    failures.add(std::string((*compat)->name) + " base " + std::to_string(specs[key].base) + ": " +
                                 same.message());
                }
            }
        });
    }
    for (std::thread &thread : threads) {
        thread.join();
    }
    EXPECT_TRUE(failures.none());
    // Then every key once more, one at a time: the slots a race left empty fill now, so the keys
    // held are as many as the slots found free unless the race filled some slot with a key twice.
    for (int key = 0; key < keys; key++) {
        RopeCall call(specs[key]);
        ASSERT_EQ(call.run(kernel_runner(**compat)), ROPE_OK) << call.report().message;
        EXPECT_TRUE(agree(call, serial[key]));
    }
    int cached_keys = 0;
    for (const CaseSpec &spec : specs) {
        cached_keys += find_cached_compat_inv_freq(spec.base, static_cast<int32_t>(spec.effective_rotary_dim())) ? 1 : 0;
    }
    EXPECT_EQ(cached_keys, free_slots) << "distinct keys in the slots this test found free";
}

}  // namespace
}  // namespace ropegen::test
