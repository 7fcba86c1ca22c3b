// SPDX-License-Identifier: Apache-2.0
// Guard pages around every buffer a kernel sees: q, k, q_out, k_out, the positions table and the
// cos/sin tables each end (GuardedBytes::Flush::End) or start (Flush::Start) exactly at a
// PROT_NONE page, so one element read or written past either end kills the process with SIGSEGV,
// which ctest reports as a failure. Every kernel of the table runs directly through run_kernel,
// over shapes that end in every tail its schedule can leave and over strided views:
//  - GuardPages/GuardPageTest.ShapesAndViews/<kernel>: token counts past twice a task, head counts
//    with and without k, every memory order, padding, packed QKV, in place, position tables;
//  - GuardPages/AnyHeadDimGuardPageTest.PairAndLaneTails/<kernel>: pair counts past twice the
//    widest pair block of the build, copied lanes before and after partial rotary slices.
// Every result is checked against the fp64 oracle too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

using Flush = GuardedBytes::Flush;

/// A kernel's schedule knobs as the build resolved them from schedules/*.json.
struct KernelSchedule {
    const char *name;
    int vector_pairs, unroll_pairs;
    int bshd_tokens_per_task, bhsd_tokens_per_task, sbhd_tokens_per_task, strided_tokens_per_task;

    /// Pairs rotated per block: the pair loop's split.
    int block_pairs() const {
        return vector_pairs * unroll_pairs;
    }
    /// Tokens per task of `layout`'s loop nest, or of the strided one, which a view with a single
    /// batch item or token can take (a stride of an axis of size 1 is passed as 0).
    int longest_token_task(Layout layout) const {
        const int own = layout == Layout::BSHD   ? bshd_tokens_per_task
                        : layout == Layout::BHSD ? bhsd_tokens_per_task
                                                 : sbhd_tokens_per_task;
        return std::max(own, strided_tokens_per_task);
    }
};

constexpr KernelSchedule kSchedules[] = {
#include "kernel_schedules.inc"
};

/// The widest pair block and vector of the build: every any-head_dim kernel is swept past twice
/// these, whatever its own (a narrower kernel meets the tails of the wider ones too).
int widest(int (*knob)(const KernelSchedule &)) {
    int most = 1;
    for (const KernelSchedule &schedule : kSchedules) {
        most = std::max(most, knob(schedule));
    }
    return most;
}

const KernelSchedule *find_schedule(const KernelEntry &kernel) {
    for (const KernelSchedule &schedule : kSchedules) {
        if (std::string(schedule.name) == kernel.name) {
            return &schedule;
        }
    }
    return nullptr;
}

/// The largest position of `spec`'s tokens.
int64_t largest_position(const CaseSpec &spec) {
    const PositionsSpec &p = spec.positions;
    switch (p.mode) {
        case PositionMode::ScalarOffset: return p.scalar_offset + spec.seq - 1;
        case PositionMode::BatchOffsets: return *std::max_element(p.values.begin(), p.values.end()) + spec.seq - 1;
        case PositionMode::Table: return *std::max_element(p.values.begin(), p.values.end());
    }
    return 0;
}

/// Positions for the n-th shape of a sweep: in turn a scalar offset, an int32 table and an int64
/// table. Every set holds position 0, so that the cos/sin tables' first row is read.
PositionsSpec varied_positions(const CaseSpec &spec, int64_t n) {
    if (n % 3 == 0) {
        return PositionsSpec{};  // offset 0
    }
    PositionsSpec p = random_table(spec, 0, spec.batch * spec.seq + 5, n % 3 == 1 ? ROPE_INDEX_INT32 : ROPE_INDEX_INT64,
                                   static_cast<uint64_t>(n));
    p.values.back() = 0;
    return p;
}

/// Counts of tokens that leave every tail of a task of `per_task` tokens, after no, one and two
/// full tasks.
std::vector<int64_t> token_counts(int per_task) {
    std::vector<int64_t> counts;
    for (int64_t n = 1; n <= per_task + 1; n++) {
        counts.push_back(n);
    }
    counts.push_back(2 * per_task);
    counts.push_back(2 * per_task + 1);
    return counts;
}

struct HeadCounts {
    int64_t q, k;
};
/// GQA, q alone, more k heads than q heads, one of each.
constexpr HeadCounts kHeadCounts[] = {{2, 1}, {2, 0}, {1, 2}, {1, 1}};

class GuardPageTest : public PerKernelTest {
protected:
    void SetUp() override {
        PerKernelTest::SetUp();
        if (IsSkipped()) {
            return;
        }
        schedule_ = find_schedule(kernel());
        ASSERT_NE(schedule_, nullptr) << "the build recorded no schedule for " << kernel().name;
    }

    const KernelSchedule &schedule() const {
        return *schedule_;
    }

    /// A call of this kernel's key: fixed kernels get their head_dim, the any-head_dim kernel one
    /// whose pairs end in a partial vector after a full block.
    CaseSpec base_case() const {
        return kernel_case(kernel(), 2 * (schedule().block_pairs() + schedule().vector_pairs / 2 + 1));
    }

    /// Runs `spec` with every buffer flush against a guard page at its end, then at its start:
    /// the first results against the fp64 oracle, the second bit for bit against the first (where
    /// a buffer lies changes no result). The cache holds no row past the largest position, so the
    /// last row a call reads touches the guard page.
    void expect_guarded(CaseSpec spec) const {
        spec.cache_len = largest_position(spec) + 1;
        spec.flush = Flush::End;
        SCOPED_TRACE(spec.describe());
        RopeCall at_end(spec);
        expect_ran(at_end);
        if (HasFatalFailure()) {
            return;
        }
        EXPECT_TRUE(at_end.check_outputs());
        EXPECT_TRUE(at_end.check_untouched_outside_outputs());

        SCOPED_TRACE("the same call with every buffer starting at a guard page");
        spec.flush = Flush::Start;
        RopeCall at_start(spec);
        expect_ran(at_start);
        if (HasFatalFailure()) {
            return;
        }
        EXPECT_TRUE(same_bits(at_start.q_out, at_end.q_out));
        if (spec.k_heads > 0) {
            EXPECT_TRUE(same_bits(at_start.k_out, at_end.k_out));
        }
        EXPECT_TRUE(at_start.check_untouched_outside_outputs());
    }

    /// expect_guarded() for each case of each group, up to the first that fails.
    void expect_all_guarded(std::initializer_list<std::vector<CaseSpec>> groups) const {
        for (const std::vector<CaseSpec> &cases : groups) {
            ASSERT_FALSE(cases.empty());
            for (const CaseSpec &spec : cases) {
                expect_guarded(spec);
                if (HasFailure()) {
                    return;
                }
            }
        }
    }

    // --- the shapes and views -----------------------------------------------------------------

    /// Token counts with every tail of a task, after no, one and two full tasks, along the axis
    /// the tasks split (seq; batch for SBHD, whose tasks hold batch items), the other token axis
    /// 1 or 2 (a size-1 axis can send a view to the strided loop nest), and head counts with and
    /// without k.
    std::vector<CaseSpec> token_and_head_tails() const {
        std::vector<CaseSpec> cases;
        for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD}) {
            for (int64_t n : token_counts(schedule().longest_token_task(layout))) {
                CaseSpec c = base_case();
                c.layout = layout;
                (layout == Layout::SBHD ? c.batch : c.seq) = n;
                (layout == Layout::SBHD ? c.seq : c.batch) = 1 + n % 2;
                set_heads(c, n);
                c.positions = varied_positions(c, n);
                c.seed = static_cast<uint64_t>(n);
                cases.push_back(c);
            }
        }
        return cases;
    }

    /// Views other than a dense BSHD tensor: other memory orders, outputs in another order than
    /// the inputs, padded heads, fused QKV buffers, in place, position tables stored transposed,
    /// padded or shared, offsets per batch item, wider cache rows, 16-bit cache tables, the
    /// inverse.
    std::vector<CaseSpec> strided_views() const {
        CaseSpec shape = base_case();
        shape.batch = 2;
        shape.seq = schedule().longest_token_task(Layout::BSHD) + 1;  // one full task and a tail
        shape.q_heads = 2;
        shape.k_heads = 1;
        shape.positions = varied_positions(shape, 1);

        std::vector<CaseSpec> cases;
        const auto add = [&](auto &&edit) {
            CaseSpec c = shape;
            edit(c);
            c.seed = cases.size() + 1;
            cases.push_back(c);
        };
        struct Orders {
            Layout in, out;
        };
        for (const Orders &o : {Orders{Layout::BHSD, Layout::BHSD}, Orders{Layout::SBHD, Layout::SBHD},
                                Orders{Layout::BHSD, Layout::BSHD}, Orders{Layout::SBHD, Layout::BHSD}}) {
            add([&](CaseSpec &c) {
                c.layout = o.in;
                c.out_layout = o.out;
            });
        }
        for (Layout layout : {Layout::BSHD, Layout::BHSD}) {
            add([&](CaseSpec &c) {
                c.layout = layout;
                c.row_pad = kernel().pair_words ? 2 : 3;  // a kernel of pair words needs even strides
            });
        }
        for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD}) {
            add([&](CaseSpec &c) {
                c.layout = layout;
                c.memory = Memory::InPlace;
            });
        }
        for (Memory memory : {Memory::PackedQkv, Memory::PackedQkvInPlace}) {
            add([&](CaseSpec &c) { c.memory = memory; });
        }
        add([&](CaseSpec &c) {
            c.positions = random_table(c, 0, 40, ROPE_INDEX_INT64, 3);
            c.positions.values.front() = 0;
            c.positions.transposed = true;  // stored [seq][batch]
            c.positions.pad = 1;
        });
        add([&](CaseSpec &c) {
            c.positions.mode = PositionMode::Table;
            c.positions.index_type = ROPE_INDEX_INT32;
            c.positions.shared_rows = true;  // one row for every batch item: batch stride 0
            c.positions.pad = 2;
            c.positions.values.assign(static_cast<size_t>(c.seq), 0);
            for (int64_t s = 0; s + 1 < c.seq; s++) {
                c.positions.values[s] = (s * 7 + 5) % 30;
            }
        });
        for (rope_index_type index_type : {ROPE_INDEX_INT32, ROPE_INDEX_INT64}) {
            add([&](CaseSpec &c) {
                c.positions.mode = PositionMode::BatchOffsets;
                c.positions.index_type = index_type;
                c.positions.values = {7, 0};
                c.positions.pad = 2;
            });
        }
        add([&](CaseSpec &c) { c.cache_row_pad = 5; });
        if (kernel().dtype != ROPE_DTYPE_F32) {
            add([&](CaseSpec &c) { c.cache_in_dtype = true; });
        }
        add([&](CaseSpec &c) {
            c.direction = ROPE_INVERSE;
            c.memory = Memory::InPlace;
        });
        return cases;
    }

    /// Whole heads of every pair count from 1 to twice the widest pair block and one more: every
    /// tail of the vectors and of the block, out of place and in place.
    std::vector<CaseSpec> pair_tails() const {
        std::vector<CaseSpec> cases;
        const int most = 2 * widest([](const KernelSchedule &k) { return k.block_pairs(); }) + 1;
        for (int pairs = 1; pairs <= most; pairs++) {
            CaseSpec c = base_case();
            c.head_dim = 2 * pairs;
            c.seq = 3;
            set_heads(c, pairs);
            c.memory = pairs % 3 == 0 ? Memory::InPlace : Memory::Separate;
            c.positions = varied_positions(c, pairs);
            c.seed = static_cast<uint64_t>(pairs);
            cases.push_back(c);
        }
        return cases;
    }

    /// Partial rotary: lanes copied before the slice (rotary_offset) and after it, each of every
    /// count from 0 to twice the widest vector and one more (the copies are vectorized like the
    /// pairs), around slices of varied pair counts. Out of place the kernel copies those lanes;
    /// in place it must leave them alone.
    std::vector<CaseSpec> pass_through_tails() const {
        std::vector<CaseSpec> cases;
        const int counts = 2 * widest([](const KernelSchedule &k) { return k.vector_pairs; }) + 2;
        const int most_pairs = 2 * schedule().block_pairs() + 1;
        for (int lead = 0; lead < counts; lead++) {
            const int trail = (counts - lead) % counts;  // a permutation of the counts; even head_dim
            const int pairs = 1 + (5 * lead) % most_pairs;
            CaseSpec c = base_case();
            c.rotary_offset = lead;
            c.rotary_dim = 2 * pairs;
            c.head_dim = lead + 2 * pairs + trail;
            c.seq = 2;
            set_heads(c, lead);
            c.memory = lead % 3 == 2 ? Memory::InPlace : Memory::Separate;
            c.fill = Fill::Adversarial;  // NaN payloads in copied lanes must survive bit for bit
            c.positions = varied_positions(c, lead);
            c.seed = static_cast<uint64_t>(lead);
            cases.push_back(c);
        }
        return cases;
    }

private:
    static void set_heads(CaseSpec &c, int64_t n) {
        const HeadCounts heads = kHeadCounts[n % std::size(kHeadCounts)];
        c.q_heads = heads.q;
        c.k_heads = heads.k;
    }

    void expect_ran(RopeCall &call) const {
        ASSERT_EQ(call.run(kernel_runner(kernel())), ROPE_OK) << call.report().message;
        EXPECT_STREQ(call.report().kernel, kernel().name);
    }

    const KernelSchedule *schedule_ = nullptr;
};

/// Test names end in the kernel's name.
std::string kernel_name(const ::testing::TestParamInfo<const KernelEntry *> &info) {
    return info.param->name;
}

TEST_P(GuardPageTest, ShapesAndViews) {
    expect_all_guarded({token_and_head_tails(), strided_views()});
}

INSTANTIATE_TEST_SUITE_P(GuardPages, GuardPageTest, ::testing::ValuesIn(all_kernels()), kernel_name);

/// The any-head_dim kernels: their pair and lane loops end in tails of any length.
class AnyHeadDimGuardPageTest : public GuardPageTest {};

TEST_P(AnyHeadDimGuardPageTest, PairAndLaneTails) {
    expect_all_guarded({pair_tails(), pass_through_tails()});
}

std::vector<const KernelEntry *> any_head_dim_kernels() {
    std::vector<const KernelEntry *> kernels = all_kernels();
    kernels.erase(std::remove_if(kernels.begin(), kernels.end(), [](const KernelEntry *k) { return k->head_dim != 0; }),
                  kernels.end());
    return kernels;
}

INSTANTIATE_TEST_SUITE_P(GuardPages, AnyHeadDimGuardPageTest, ::testing::ValuesIn(any_head_dim_kernels()), kernel_name);

}  // namespace
}  // namespace ropegen::test
