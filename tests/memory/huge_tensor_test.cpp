// SPDX-License-Identifier: Apache-2.0
// Tensors past 32-bit offsets through rope_dispatch, at every ISA level this CPU has
// (rope_set_max_isa) and with a fixed head_dim kernel and the any-head_dim kernel:
//  - a dense tensor of more than 2^31 elements (about 4 GiB, committed), rotated in place, its
//    heads sampled on both sides of element 2^31 against the fp64 oracle;
//  - views whose byte offsets pass 4 GiB (q, k, k_out, the positions table and the cos/sin
//    tables, each in address space reserved but not committed), bit for bit against the same
//    call on compact copies.
// ctest runs these tests one at a time (RUN_SERIAL), so that two of them never hold their memory
// at once. A test that cannot reserve or commit what it needs skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/kernels.h"
#include "support/rope_case.h"
#include "support/sparse_buffer.h"

namespace ropegen::test {
namespace {

namespace ref = ropegen::reference;

constexpr int64_t kGiB = int64_t{1} << 30;
/// Element counts: 2^28 f32 elements are 1 GiB.
constexpr int64_t k2Pow28 = int64_t{1} << 28, k2Pow29 = int64_t{1} << 29, k2Pow30 = int64_t{1} << 30;

/// MemAvailable of /proc/meminfo in bytes, if the kernel reports it.
std::optional<int64_t> available_memory() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
        if (key == "MemAvailable:") {
            return kib * 1024;
        }
    }
    return std::nullopt;
}

/// The ISA levels with kernels of their own that this CPU runs, best first.
std::vector<rope_isa> cpu_isas() {
    std::vector<rope_isa> isas;
    for (rope_isa isa : levels_with_kernels()) {
        if (isa <= detected_isa()) {
            isas.push_back(isa);
        }
    }
    return isas;
}

/// Caps the dispatcher at `isa` for its lifetime, then restores the level it found.
class IsaCap {
public:
    explicit IsaCap(rope_isa isa) : previous_(rope_active_isa()) {
        EXPECT_EQ(rope_set_max_isa(isa), ROPE_OK);
    }
    ~IsaCap() {
        rope_set_max_isa(previous_ == detected_isa() ? ROPE_ISA_NONE : previous_);
    }
    IsaCap(const IsaCap &) = delete;
    IsaCap &operator=(const IsaCap &) = delete;

private:
    rope_isa previous_;
};

/// Which kernel of the table a call is shaped for.
enum class KernelKind { FixedHeadDim, AnyHeadDim };

const char *kind_name(KernelKind kind) {
    return kind == KernelKind::FixedHeadDim ? "fixed_head_dim" : "any_head_dim";
}

/// A cache-source call of `kind` at the active ISA level, or a reason why the build has no
/// kernel for it: whole heads with a fixed head_dim kernel, or a partial slice (which only the
/// any-head_dim kernel serves) with lanes copied on both sides. The dtype and head_dim are the
/// first of `dtypes` and `head_dims` the build has a kernel for.
struct KernelChoice {
    CaseSpec spec;
    const KernelEntry *kernel = nullptr;
    std::string missing;  ///< why there is no kernel, when kernel is nullptr
};

KernelChoice choose_kernel(KernelKind kind, const std::vector<rope_dtype> &dtypes,
                           const std::vector<int64_t> &head_dims = {128, 64, 256}) {
    KernelChoice choice;
    CaseSpec &c = choice.spec;
    c.source = ROPE_SOURCE_CACHE;
    c.style = kind == KernelKind::FixedHeadDim ? ROPE_STYLE_HALF : ROPE_STYLE_INTERLEAVED;
    for (rope_dtype dtype : dtypes) {
        for (int64_t head_dim : head_dims) {
            c.dtype = dtype;
            c.head_dim = head_dim;
            c.rotary_dim = kind == KernelKind::FixedHeadDim ? 0 : static_cast<int>(head_dim / 2);
            c.rotary_offset = kind == KernelKind::FixedHeadDim ? 0 : static_cast<int>(head_dim / 8);
            rope_params params = rope_params_init();
            params.style = c.style;
            params.angles.source = c.source;
            params.q.dtype = c.dtype;
            params.q.sizes[3] = c.head_dim;
            params.rotary_dim = c.rotary_dim;
            const KernelEntry *kernel = first_matching_kernel(params, rope_active_isa());
            if (kernel != nullptr && kernel->isa == rope_active_isa() &&
                (kernel->head_dim == 0) == (kind == KernelKind::AnyHeadDim)) {
                choice.kernel = kernel;
                return choice;
            }
        }
    }
    choice.missing = std::string("this build has no ") + kind_name(kind) + " " + ref::style_name(c.style) +
                     " cache kernel at ISA level " + isa_name(rope_active_isa()) +
                     " (see ROPEGEN_ISAS, ROPEGEN_DTYPES, ROPEGEN_HEAD_DIMS)";
    return choice;
}

// --- a dense tensor of more than 2^31 elements --------------------------------------------------

/// Tokens of the dense tensor, one head of 128 lanes each: 2^31 + 2^17 elements in all, so that
/// the last 1024 tokens lie past element 2^31 (and, in 16 bits, past byte 2^32).
constexpr int64_t kDenseTokens = (int64_t{1} << 24) + 1024;
constexpr int64_t kDenseHeadDim = 128;
static_assert(kDenseTokens * kDenseHeadDim > (int64_t{1} << 31));
/// Inputs repeat every kPatternTokens heads and positions every kCacheRows tokens: both primes, so
/// that a head read from 2^31 or 2^32 bytes away from where it should be holds other values.
constexpr int64_t kPatternTokens = 4099;
constexpr int64_t kCacheRows = 4093;

/// Tokens whose heads are checked: both ends, both sides of elements 2^30 and 2^31 (bytes 2^31
/// and 2^32 of a 16-bit tensor), and some in between.
std::vector<int64_t> sampled_tokens() {
    const int64_t e30 = int64_t{1} << 23, e31 = int64_t{1} << 24;  // first tokens past elements 2^30, 2^31
    std::vector<int64_t> tokens = {
        0, 1, e30 - 1, e30, e31 - 1, e31, e31 + 1, e31 + 511, e31 + 1000, kDenseTokens - 2, kDenseTokens - 1};
    std::mt19937_64 rng(17);
    std::uniform_int_distribution<int64_t> pick(0, kDenseTokens - 1);
    for (int i = 0; i < 16; i++) {
        tokens.push_back(pick(rng));
    }
    return tokens;
}

/// Fills `bytes` bytes at `data` with one block of kPatternTokens random heads, repeated.
void fill_repeating(uint8_t *data, int64_t bytes, rope_dtype dtype) {
    Tensor block = Tensor::make(dtype, {1, kPatternTokens, 1, kDenseHeadDim});
    std::mt19937_64 rng(5);
    fill_uniform(block, rng);
    const auto block_bytes = static_cast<int64_t>(block.storage()->bytes.size());
    for (int64_t offset = 0; offset < bytes; offset += block_bytes) {
        std::memcpy(data + offset, block.rope().data, static_cast<size_t>(std::min(block_bytes, bytes - offset)));
    }
}

/// The call `spec` describes on the dense tensor at `data`, in place, with a positions table and
/// a cos/sin cache.
rope_params dense_call(const CaseSpec &spec, uint8_t *data, const std::vector<int32_t> &positions,
                       const ref::CosSinCache &cache) {
    rope_params p = rope_params_init();
    p.style = spec.style;
    p.rotary_dim = spec.rotary_dim;
    p.rotary_offset = spec.rotary_offset;
    p.q = {data,
           spec.dtype,
           {1, kDenseTokens, 1, kDenseHeadDim},
           {kDenseTokens * kDenseHeadDim, kDenseHeadDim, kDenseHeadDim, 1}};
    p.q_out = p.q;
    p.positions.kind = ROPE_POSITIONS_TABLE;
    p.positions.data = positions.data();
    p.positions.strides[0] = kDenseTokens;
    p.positions.strides[1] = 1;
    p.angles.source = spec.source;
    p.angles.cos_cache = cache.cos.data();
    p.angles.sin_cache = cache.sin.data();
    p.angles.cache_len = cache.len;
    return p;
}

std::vector<uint32_t> dense_head_bits(const uint8_t *data, rope_dtype dtype, int64_t token) {
    const size_t element = ref::dtype_size(dtype);
    std::vector<uint32_t> bits(kDenseHeadDim, 0);
    for (int64_t d = 0; d < kDenseHeadDim; d++) {
        std::memcpy(&bits[d], data + (token * kDenseHeadDim + d) * static_cast<int64_t>(element), element);
    }
    return bits;
}

TEST(HugeTensor, DenseBeyond2Pow31Elements) {
    // 16 bits per element if the build has such kernels (at any ISA level): 4 GiB instead of 8.
    std::optional<rope_dtype> built;
    for (rope_dtype dtype : {ROPE_DTYPE_BF16, ROPE_DTYPE_F16, ROPE_DTYPE_F32}) {
        if (!built && missing_kernel_reason(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, dtype, kDenseHeadDim).empty()) {
            built = dtype;
        }
    }
    if (!built) {
        GTEST_SKIP() << missing_kernel_reason(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, kDenseHeadDim);
    }
    const rope_dtype dtype = *built;
    const auto element = static_cast<int64_t>(ref::dtype_size(dtype));
    const int64_t bytes = kDenseTokens * kDenseHeadDim * element;
    const std::optional<int64_t> available = available_memory();
    if (!available || *available < bytes + kGiB) {
        GTEST_SKIP() << "the dense tensor needs " << bytes << " bytes of memory plus 1 GiB to spare; /proc/meminfo "
                     << (available ? "MemAvailable is " + std::to_string(*available)
                                   : std::string("has no MemAvailable"));
    }
    SparseBuffer tensor(static_cast<size_t>(bytes));
    if (tensor.data() == nullptr) {
        GTEST_SKIP() << "cannot map " << bytes << " bytes for the dense tensor";
    }
    fill_repeating(tensor.data(), bytes, dtype);
    std::vector<int32_t> positions(static_cast<size_t>(kDenseTokens));
    for (int64_t t = 0; t < kDenseTokens; t++) {
        positions[t] = static_cast<int32_t>(t % kCacheRows);
    }
    const std::vector<int64_t> samples = sampled_tokens();

    std::vector<std::string> skipped;
    int runs = 0;
    for (rope_isa isa : cpu_isas()) {
        IsaCap cap(isa);
        for (KernelKind kind : {KernelKind::FixedHeadDim, KernelKind::AnyHeadDim}) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + kind_name(kind));
            const KernelChoice choice = choose_kernel(kind, {dtype}, {kDenseHeadDim});
            if (choice.kernel == nullptr) {
                skipped.push_back(choice.missing);
                continue;
            }
            const CaseSpec &c = choice.spec;
            const ref::CosSinCache cache = ref::build_cache(kCacheRows, c.effective_rotary_dim(),
                                                            c.effective_rotary_dim() / 2, c.effective_base(), 1.0);
            const rope_params p = dense_call(c, tensor.data(), positions, cache);
            std::vector<std::vector<uint32_t>> before;
            for (int64_t t : samples) {
                before.push_back(dense_head_bits(tensor.data(), dtype, t));
            }
            rope_report report = rope_report_init();
            ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
            // choice.kernel's key, or a kernel of a call class of that key (the call moves gigabytes).
            const KernelEntry *expected = first_matching_kernel(p, rope_active_isa());
            ASSERT_NE(expected, nullptr);
            EXPECT_STREQ(report.kernel, expected->name);
            EXPECT_TRUE(expected->isa == choice.kernel->isa && kernel_key(*expected) == kernel_key(*choice.kernel))
                << expected->name << " is not of " << choice.kernel->name << "'s key";
            runs++;
            for (size_t i = 0; i < samples.size(); i++) {
                const int64_t t = samples[i];
                const ref::RotationMatrix rotation =
                    ref::rotation_matrix(kDenseHeadDim, c.effective_rotary_dim(), c.rotary_offset, c.style,
                                         ref::cache_cos_sin(cache, positions[t], c.effective_rotary_dim()));
                EXPECT_TRUE(check_head(c, rotation, before[i], dense_head_bits(tensor.data(), dtype, t)))
                    << "token " << t << " (elements from " << t * kDenseHeadDim << ")";
            }
        }
    }
    std::ostringstream reasons;
    for (const std::string &reason : skipped) {
        reasons << reason << "; ";
    }
    if (runs == 0) {
        GTEST_SKIP() << "no kernel ran: " << reasons.str();
    }
    if (!skipped.empty()) {
        std::cout << "not covered: " << reasons.str() << "\n";
    }
}

// --- views past 4 GiB in reserved address space ----------------------------------------------

/// A view in address space of its own, reserved for its whole span and committed only where its
/// elements lie.
class SparseTensor {
public:
    /// `compact`'s sizes, dtype and element values at `strides`.
    SparseTensor(const Tensor &compact, const Sizes &strides)
        : sizes_(compact.sizes()),
          strides_(strides),
          dtype_(compact.dtype()),
          memory_(static_cast<size_t>(span(sizes_, strides_)) * ref::dtype_size(dtype_)) {
        if (memory_.data() == nullptr) {
            return;
        }
        compact.for_each_head([&](int64_t b, int64_t s, int64_t h) {
            for (int64_t d = 0; d < sizes_[3]; d++) {
                const uint32_t bits = compact.bits(b, s, h, d);  // little-endian: low bytes first
                std::memcpy(address(b, s, h, d), &bits, ref::dtype_size(dtype_));
            }
        });
    }
    bool reserved() const {
        return memory_.data() != nullptr;
    }
    size_t reserved_bytes() const {
        return memory_.size();
    }
    rope_tensor rope() const {
        rope_tensor t{memory_.data(), dtype_, {}, {}};
        std::copy(sizes_.begin(), sizes_.end(), t.sizes);
        std::copy(strides_.begin(), strides_.end(), t.strides);
        return t;
    }
    /// Every element equals `compact`'s bit for bit.
    ::testing::AssertionResult same_bits_as(const Tensor &compact) const {
        int64_t differences = 0;
        std::ostringstream first;
        compact.for_each_head([&](int64_t b, int64_t s, int64_t h) {
            for (int64_t d = 0; d < sizes_[3]; d++) {
                uint32_t bits = 0;
                std::memcpy(&bits, address(b, s, h, d), ref::dtype_size(dtype_));
                if (bits != compact.bits(b, s, h, d) && differences++ == 0) {
                    first << "first at [" << b << "," << s << "," << h << "," << d << "], byte offset "
                          << (address(b, s, h, d) - memory_.data());
                }
            }
        });
        if (differences == 0) {
            return ::testing::AssertionSuccess();
        }
        return ::testing::AssertionFailure()
               << differences << " elements differ from the compact call's; " << first.str();
    }

    /// Elements from the first to the last of a view, both included.
    static int64_t span(const Sizes &sizes, const Sizes &strides) {
        int64_t last = 0;
        for (int axis = 0; axis < 4; axis++) {
            last += (sizes[axis] - 1) * strides[axis];
        }
        return last + 1;
    }

private:
    uint8_t *address(int64_t b, int64_t s, int64_t h, int64_t d) const {
        const int64_t index = b * strides_[0] + s * strides_[1] + h * strides_[2] + d * strides_[3];
        return memory_.data() + index * static_cast<int64_t>(ref::dtype_size(dtype_));
    }

    Sizes sizes_, strides_;
    rope_dtype dtype_;
    SparseBuffer memory_;
};

/// Values at element offsets in address space of their own (a positions table, a cos/sin table).
class SparseArray {
public:
    SparseArray(size_t element, int64_t elements)
        : element_(element), memory_(static_cast<size_t>(elements) * element) {
    }
    bool reserved() const {
        return memory_.data() != nullptr;
    }
    void set(int64_t index, const void *value) {
        std::memcpy(memory_.data() + index * static_cast<int64_t>(element_), value, element_);
    }
    const void *data() const {
        return memory_.data();
    }

private:
    size_t element_;
    SparseBuffer memory_;
};

struct IsaAndKind {
    rope_isa isa;
    KernelKind kind;
};

class BeyondFourGiBTest : public ::testing::TestWithParam<IsaAndKind> {
protected:
    void SetUp() override {
        if (GetParam().isa > detected_isa()) {
            GTEST_SKIP() << "this CPU supports only " << isa_name(detected_isa()) << ", not "
                         << isa_name(GetParam().isa);
        }
        cap_.emplace(GetParam().isa);
        choice_ = choose_kernel(GetParam().kind, {ROPE_DTYPE_F32, ROPE_DTYPE_BF16, ROPE_DTYPE_F16});
        if (choice_.kernel == nullptr) {
            GTEST_SKIP() << choice_.missing;
        }
    }
    void TearDown() override {
        cap_.reset();
    }

    /// q in place, k into a separate k_out, GQA, a table of positions and a cache of a few rows.
    CaseSpec compact_case() const {
        CaseSpec c = choice_.spec;
        c.batch = 2;
        c.seq = 3;
        c.q_heads = 2;
        c.k_heads = 3;
        c.memory = Memory::Separate;
        c.positions = random_table(c, 0, 4, ROPE_INDEX_INT32, 9);
        c.positions.values.front() = 0;  // the first and the last cache row are read
        c.positions.values.back() = 3;
        c.cache_len = 4;
        return c;
    }

    /// Runs `compact`'s call again with q (in place), k, k_out, the positions table and the
    /// cos/sin tables moved to sparse memory at the given strides (in elements), and compares the
    /// outputs with the compact call's bit for bit.
    void expect_same_as_compact(const CaseSpec &spec, const Sizes &q_strides, const Sizes &k_strides,
                                const Sizes &k_out_strides, const std::array<int64_t, 2> &position_strides,
                                int64_t cache_row_stride) {
        SCOPED_TRACE(spec.describe());
        RopeCall compact(spec);
        ASSERT_EQ(compact.run(dispatch_runner()), ROPE_OK) << compact.report().message;
        ASSERT_STREQ(compact.report().kernel, choice_.kernel->name);
        ASSERT_TRUE(compact.check_outputs());

        const SparseTensor q(compact.q_in, q_strides), k(compact.k_in, k_strides), k_out(compact.k_out, k_out_strides);
        const rope_params compact_params = compact.params();
        const rope_index_type index_type = spec.positions.index_type;
        const size_t index_size = index_type == ROPE_INDEX_INT64 ? 8 : 4;
        SparseArray positions(index_size,
                              (spec.batch - 1) * position_strides[0] + (spec.seq - 1) * position_strides[1] + 1);
        const int pairs = spec.effective_rotary_dim() / 2;
        const size_t cache_element = ref::dtype_size(compact_params.angles.cache_dtype);
        const int64_t cache_elements = (compact_params.angles.cache_len - 1) * cache_row_stride + pairs;
        SparseArray cos(cache_element, cache_elements), sin(cache_element, cache_elements);
        for (bool reserved :
             {q.reserved(), k.reserved(), k_out.reserved(), positions.reserved(), cos.reserved(), sin.reserved()}) {
            if (!reserved) {
                GTEST_SKIP() << "cannot reserve the address space of the sparse views (q alone spans "
                             << q.reserved_bytes() << " bytes)";
            }
        }
        for (int64_t b = 0; b < spec.batch; b++) {
            for (int64_t s = 0; s < spec.seq; s++) {
                const int64_t value = compact.position(b, s);
                const auto narrow = static_cast<int32_t>(value);
                positions.set(b * position_strides[0] + s * position_strides[1],
                              index_type == ROPE_INDEX_INT64 ? static_cast<const void *>(&value) : &narrow);
            }
        }
        const int64_t compact_row_stride =
            compact_params.angles.cache_row_stride != 0 ? compact_params.angles.cache_row_stride : pairs;
        for (int64_t row = 0; row < compact_params.angles.cache_len; row++) {
            for (int64_t i = 0; i < pairs; i++) {
                const int64_t from = (row * compact_row_stride + i) * static_cast<int64_t>(cache_element);
                cos.set(row * cache_row_stride + i,
                        static_cast<const uint8_t *>(compact_params.angles.cos_cache) + from);
                sin.set(row * cache_row_stride + i,
                        static_cast<const uint8_t *>(compact_params.angles.sin_cache) + from);
            }
        }

        rope_params p = compact_params;
        p.q = q.rope();
        p.q_out = p.q;
        p.k = k.rope();
        p.k_out = k_out.rope();
        p.positions.data = positions.data();
        p.positions.strides[0] = position_strides[0];
        p.positions.strides[1] = position_strides[1];
        p.angles.cos_cache = cos.data();
        p.angles.sin_cache = sin.data();
        p.angles.cache_row_stride = cache_row_stride;
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_dispatch(&p, &report), ROPE_OK) << report.message;
        EXPECT_STREQ(report.kernel, choice_.kernel->name);
        EXPECT_TRUE(q.same_bits_as(compact.q_out)) << "q, rotated in place";
        EXPECT_TRUE(k_out.same_bits_as(compact.k_out)) << "k_out";
    }

    /// The call of compact_case() with small tensor strides and the positions table's batch step
    /// `batch_step` entries.
    void expect_position_step(rope_index_type index_type, int64_t batch_step) {
        CaseSpec spec = compact_case();
        spec.positions.index_type = index_type;
        const int64_t d = spec.head_dim;
        const Sizes q_strides = {3 * 2 * (d + 4), 2 * (d + 4), d + 4, 1};
        const Sizes k_strides = {3 * 3 * d, 3 * d, d, 1};
        expect_same_as_compact(spec, q_strides, k_strides, k_strides, {batch_step, 1}, spec.effective_rotary_dim() / 2);
    }

private:
    KernelChoice choice_;
    std::optional<IsaCap> cap_;
};

// Strides that fit Halide's int32 dimensions (so each kernel sees the whole call) but put
// elements of every buffer past byte 2^32: q's batch and seq steps, k's head step, k_out's seq
// step, the positions table's batch step, the cache's rows.
TEST_P(BeyondFourGiBTest, ByteOffsetsPastFourGiB) {
    const CaseSpec c = compact_case();
    const int64_t d = c.head_dim;
    // In f32 q's last head lies 10 GiB in, k's and k_out's 8 GiB, the positions' 5 GiB, the
    // cache's last row 6 GiB (half of that in 16 bits).
    const Sizes q_strides = {3 * k2Pow29 + 5 * d, k2Pow29 + 3 * d, d + 4, 1};  // BSHD order, padded heads
    const Sizes k_strides = {4 * (d + 2), d + 2, k2Pow30 + 7, 1};              // BHSD order
    const Sizes k_out_strides = {3 * d, k2Pow30 - 64 * d, d, 1};               // SBHD order
    for (rope_index_type index_type : {ROPE_INDEX_INT32, ROPE_INDEX_INT64}) {
        CaseSpec spec = c;
        spec.positions.index_type = index_type;
        // 4 GiB from one batch item to the next; an int64 table's step, which the kernels read in
        // int32 units, stays below 2^31 too.
        const int64_t batch_step = (index_type == ROPE_INDEX_INT64 ? k2Pow29 : k2Pow30) + 3;
        expect_same_as_compact(spec, q_strides, k_strides, k_out_strides, {batch_step, k2Pow28 + 1}, k2Pow29 + 11);
        if (HasFailure() || IsSkipped()) {
            return;
        }
    }
}

// A positions table whose batch step does not fit int32 once the kernels read it in int32 units:
// 2^31 entries and more of an int32 table, 2^30 of an int64 one (tensor strides stay small).
// Valid calls (strides are arbitrary, spec §4), which the dispatcher must not pass on truncated.
TEST_P(BeyondFourGiBTest, Int32PositionStepBeyondInt32) {
    expect_position_step(ROPE_INDEX_INT32, 2 * k2Pow30 + 5);
}

TEST_P(BeyondFourGiBTest, Int64PositionStepBeyond2Pow30) {
    expect_position_step(ROPE_INDEX_INT64, k2Pow30 + 5);
}

std::vector<IsaAndKind> isas_and_kinds() {
    std::vector<IsaAndKind> params;
    for (rope_isa isa : levels_with_kernels()) {
        for (KernelKind kind : {KernelKind::FixedHeadDim, KernelKind::AnyHeadDim}) {
            params.push_back({isa, kind});
        }
    }
    return params;
}

INSTANTIATE_TEST_SUITE_P(HugeTensor, BeyondFourGiBTest, ::testing::ValuesIn(isas_and_kinds()),
                         [](const ::testing::TestParamInfo<IsaAndKind> &info) {
                             return std::string(isa_name(info.param.isa)) + "_" + kind_name(info.param.kind);
                         });

}  // namespace
}  // namespace ropegen::test
