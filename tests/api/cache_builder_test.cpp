// SPDX-License-Identifier: Apache-2.0
// rope_build_cos_sin_cache(): its tables against the oracle (spec §5, §6, §7), and the cache source
// fed with them against the computed source it was built from: the same bits (f32 tables; 16-bit
// tables against the computed source in the parity mode, which rounds cos/sin the same way).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/rope_reference.h"
#include "ropegen/rope.h"
#include "support/sparse_buffer.h"

namespace ropegen::test {
namespace {

namespace ref = reference;

constexpr int64_t kLen = 300, kHeads = 2, kRotary = 96, kPairs = kRotary / 2, kPad = 5;

struct BuilderCase {
    rope_source source;
    rope_dtype dtype;
    rope_scaling_type scaling;
};

std::string case_name(const ::testing::TestParamInfo<BuilderCase> &info) {
    static const char *const scalings[] = {"none", "linear", "dynamic", "yarn", "longrope", "llama3", "inv_freq"};
    return std::string(ref::source_name(info.param.source)) + "_" + ref::dtype_name(info.param.dtype) + "_" +
           scalings[info.param.scaling];
}

class CacheBuilderTest : public ::testing::TestWithParam<BuilderCase> {
protected:
    // orig below kLen, so that DYNAMIC and LONGROPE take their long-sequence branch.
    void SetUp() override {
        ref_scaling_.type = GetParam().scaling;
        ref_scaling_.factor = 4;
        ref_scaling_.original_max = 128;
        ref_scaling_.max_positions = 1024;
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> factor(1, 8), frequency(0, 1);
        for (int i = 0; i < kPairs; i++) {
            ref_scaling_.short_factor.push_back(factor(rng));
            ref_scaling_.long_factor.push_back(factor(rng));
            ref_scaling_.inv_freq.push_back(frequency(rng));
        }
        scaling_ = rope_scaling{};
        scaling_.type = ref_scaling_.type;
        scaling_.factor = static_cast<float>(ref_scaling_.factor);
        scaling_.original_max_positions = ref_scaling_.original_max;
        scaling_.max_positions = ref_scaling_.max_positions;
        scaling_.low_freq_factor = 1;
        scaling_.high_freq_factor = 4;
        scaling_.short_factor = ref_scaling_.short_factor.data();
        scaling_.long_factor = ref_scaling_.long_factor.data();
        scaling_.inv_freq = ref_scaling_.inv_freq.data();
    }

    /// Builds the tables of this case into cos and sin (0xAB everywhere else).
    void build(std::vector<uint8_t> &cos, std::vector<uint8_t> &sin) const {
        const rope_cache_spec s = spec(cos, sin);
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_build_cos_sin_cache(&s, &report), ROPE_OK) << report.message;
    }

    rope_cache_spec spec(std::vector<uint8_t> &cos, std::vector<uint8_t> &sin) const {
        const size_t bytes = ref::dtype_size(GetParam().dtype) * ((kLen - 1) * (kPairs + kPad) + kPairs);
        cos.assign(bytes, 0xAB);
        sin.assign(bytes, 0xAB);
        rope_cache_spec s = rope_cache_spec_init();
        s.source = GetParam().source;
        s.rotary_dim = kRotary;
        s.scaling = scaling_;
        s.cos_cache = cos.data();
        s.sin_cache = sin.data();
        s.cache_len = kLen;
        s.cache_row_stride = kPairs + kPad;
        s.cache_dtype = GetParam().dtype;
        return s;
    }

    ref::Scaling ref_scaling_;
    rope_scaling scaling_{};
};

// Every value within spec §7's bound of the oracle's cos/sin (16-bit: one ulp of the rounded
// oracle), the row padding untouched.
TEST_P(CacheBuilderTest, MatchesTheOracle) {
    const BuilderCase c = GetParam();
    std::vector<uint8_t> cos, sin;
    ASSERT_NO_FATAL_FAILURE(build(cos, sin));
    ref::Scaling sc = ref_scaling_;
    sc.low_freq_factor = 1;
    sc.high_freq_factor = 4;
    const double attn = ref::scaling_attn_factor(sc);
    const size_t element = ref::dtype_size(c.dtype);
    const double tolerance = ref::relative_tolerance(c.source, attn);
    for (int64_t m = 0; m < kLen; m++) {
        const ref::CosSin want = c.source == ROPE_SOURCE_COMPAT
                                     ? ref::compat_cos_sin(m, ref::compat_scaled_inv_freq(10000, kRotary, sc, kLen), attn)
                                     : ref::exact_cos_sin(m, ref::exact_scaled_inv_freq(10000, kRotary, sc, kLen), attn);
        for (int64_t i = 0; i < kPairs + (m + 1 < kLen ? kPad : 0); i++) {
            for (const auto &[table, values] : {std::pair{&cos, &want.cos}, std::pair{&sin, &want.sin}}) {
                uint32_t bits = 0;
                std::memcpy(&bits, &(*table)[(m * (kPairs + kPad) + i) * element], element);
                if (i >= kPairs) {
                    ASSERT_EQ(bits, element == 4 ? 0xABABABABu : 0xABABu) << "row " << m << " padding written";
                    continue;
                }
                const double got = ref::decode(bits, c.dtype), expected = (*values)[i];
                const bool ok = c.dtype == ROPE_DTYPE_F32
                                    ? std::fabs(got - expected) <= tolerance
                                    : ref::ulp_distance(bits, ref::encode(expected, c.dtype), c.dtype) <= ref::kSixteenBitUlps;
                ASSERT_TRUE(ok) << (table == &cos ? "cos" : "sin") << "[" << m << "][" << i << "] = " << got << ", oracle "
                                << expected;
            }
        }
    }
}

// The cache source on the built tables gives the bits of the computed source (in the parity mode
// for 16-bit tables): the builder and the computed source share their numerics.
TEST_P(CacheBuilderTest, CacheSourceEqualsTheComputedSource) {
    const BuilderCase c = GetParam();
    std::vector<uint8_t> cos, sin;
    ASSERT_NO_FATAL_FAILURE(build(cos, sin));

    const size_t element = ref::dtype_size(c.dtype);
    std::vector<uint8_t> x(static_cast<size_t>(kLen * kHeads * kRotary) * element);
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> value(-4, 4);
    for (size_t i = 0; i < x.size() / element; i++) {
        const uint32_t bits = ref::encode(value(rng), c.dtype);
        std::memcpy(&x[i * element], &bits, element);
    }
    auto run = [&](bool from_cache) {
        std::vector<uint8_t> y(x.size(), 0);
        rope_params p = rope_params_init();
        p.q = rope_tensor{x.data(), c.dtype, {1, kLen, kHeads, kRotary}, {kLen * kHeads * kRotary, kHeads * kRotary, kRotary, 1}};
        p.q_out = p.q;
        p.q_out.data = y.data();
        if (from_cache) {
            p.angles.source = ROPE_SOURCE_CACHE;
            p.angles.cos_cache = cos.data();
            p.angles.sin_cache = sin.data();
            p.angles.cache_len = kLen;
            p.angles.cache_row_stride = kPairs + kPad;
            p.angles.cache_dtype = c.dtype;
        } else {
            p.angles.source = c.source;
            p.scaling = scaling_;
            p.round_cos_sin = 1;
        }
        rope_report r = rope_report_init();
        EXPECT_EQ(rope_dispatch(&p, &r), ROPE_OK) << r.message;
        return y;
    };
    const std::vector<uint8_t> computed = run(false), cached = run(true);
    for (size_t i = 0; i < computed.size(); i += element) {
        ASSERT_EQ(std::memcmp(&computed[i], &cached[i], element), 0) << "element " << i / element << " differs";
    }
}

std::vector<BuilderCase> builder_cases() {
    std::vector<BuilderCase> cases;
    for (rope_source source : {ROPE_SOURCE_COMPAT, ROPE_SOURCE_PRECISE}) {
        for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
            for (int type = ROPE_SCALING_NONE; type <= ROPE_SCALING_INV_FREQ; type++) {
                cases.push_back({source, dtype, static_cast<rope_scaling_type>(type)});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(CacheBuilder, CacheBuilderTest, ::testing::ValuesIn(builder_cases()), case_name);

// spec §5: compat's cos/sin of an f32 angle are accurate to about one ulp, at long contexts too,
// for negative angles as well (a caller's inv_freq may be negative). Tighter than §7's bound on
// the rotation, which allows several ulps of a small value. The builder shares the computed
// source's numerics; a caller's inv_freq fixes the f32 angles exactly, so the check sees the
// sin/cos alone.
TEST(CacheBuilderAccuracy, CompatCosSinAreWithinOneUlpUpTo128kPositions) {
    constexpr int kRotaryDim = 128, kPairCount = kRotaryDim / 2;
    constexpr int64_t kLongLen = int64_t{1} << 17;
    for (const float sign : {1.0f, -1.0f}) {
        std::vector<float> inv_freq = ref::compat_inv_freq(500000, kRotaryDim);  // Llama 3's base
        for (float &frequency : inv_freq) {
            frequency *= sign;
        }
        std::vector<float> cos(static_cast<size_t>(kLongLen * kPairCount)), sin(cos.size());
        rope_cache_spec s = rope_cache_spec_init();
        s.source = ROPE_SOURCE_COMPAT;
        s.rotary_dim = kRotaryDim;
        s.scaling.type = ROPE_SCALING_INV_FREQ;
        s.scaling.inv_freq = inv_freq.data();
        s.cos_cache = cos.data();
        s.sin_cache = sin.data();
        s.cache_len = kLongLen;
        rope_report report = rope_report_init();
        ASSERT_EQ(rope_build_cos_sin_cache(&s, &report), ROPE_OK) << report.message;

        // Every position of the first 4096, then every 61st. The oracle is libm's f64 sin/cos,
        // far below an f32 ulp (and not emulated under qemu, as long double is on aarch64).
        for (int64_t m = 0; m < kLongLen; m += m < 4096 ? 1 : 61) {
            for (int i = 0; i < kPairCount; i++) {
                const double angle = ref::compat_angle(m, inv_freq[i]);
                for (const auto &[table, exact] : {std::pair{&cos, std::cos(angle)}, std::pair{&sin, std::sin(angle)}}) {
                    const float got = (*table)[static_cast<size_t>(m * kPairCount + i)];
                    uint32_t bits = 0;
                    std::memcpy(&bits, &got, sizeof bits);
                    ASSERT_LE(ref::ulp_distance(bits, ref::encode(exact, ROPE_DTYPE_F32), ROPE_DTYPE_F32), 1)
                        << (table == &cos ? "cos" : "sin") << "[" << m << "][" << i << "] = " << got << ", exact " << exact
                        << " (angle " << angle << ")";
                }
            }
        }
    }
}

TEST(CacheBuilderValidation, BadSpecsWriteNothing) {
    std::vector<float> cos(64, 7.0f), sin(64, 7.0f);
    auto base = [&] {
        rope_cache_spec s = rope_cache_spec_init();
        s.source = ROPE_SOURCE_COMPAT;
        s.rotary_dim = 8;
        s.cos_cache = cos.data();
        s.sin_cache = sin.data();
        s.cache_len = 16;
        return s;
    };
    struct Bad {
        rope_status status;
        const char *words;
        void (*edit)(rope_cache_spec &);
    };
    const Bad bads[] = {
        {ROPE_ERR_ABI_MISMATCH, "spec.struct_size", [](rope_cache_spec &s) { s.struct_size = 8; }},
        {ROPE_ERR_BAD_ENUM, "spec.source=0", [](rope_cache_spec &s) { s.source = ROPE_SOURCE_CACHE; }},
        {ROPE_ERR_BAD_ENUM, "spec.cache_dtype=3", [](rope_cache_spec &s) { s.cache_dtype = static_cast<rope_dtype>(3); }},
        {ROPE_ERR_BAD_ROTARY, "spec.rotary_dim=7", [](rope_cache_spec &s) { s.rotary_dim = 7; }},
        {ROPE_ERR_NULL_POINTER, "spec.sin_cache is NULL; the builder writes both tables",
         [](rope_cache_spec &s) { s.sin_cache = nullptr; }},
        {ROPE_ERR_BAD_VALUE, "spec.cache_len=0", [](rope_cache_spec &s) { s.cache_len = 0; }},
        {ROPE_ERR_BAD_VALUE, "spec.cache_len=1073741825", [](rope_cache_spec &s) { s.cache_len = (int64_t{1} << 30) + 1; }},
        {ROPE_ERR_BAD_STRIDE, "spec.cache_row_stride=3", [](rope_cache_spec &s) { s.cache_row_stride = 3; }},
        {ROPE_ERR_OVERLAP, "overlap", [](rope_cache_spec &s) { s.sin_cache = static_cast<float *>(s.cos_cache) + 4; }},
        // The rules rope_dispatch checks, named by the spec's fields.
        {ROPE_ERR_BAD_VALUE, "spec.scaling.factor=0", [](rope_cache_spec &s) { s.scaling.type = ROPE_SCALING_LINEAR; }},
        {ROPE_ERR_BAD_VALUE, "spec.base=0.5", [](rope_cache_spec &s) { s.base = 0.5; }},
        {ROPE_ERR_BAD_VALUE, "spec.attn_factor=nan", [](rope_cache_spec &s) { s.attn_factor = NAN; }},
        {ROPE_ERR_BAD_ROTARY, "spec.rotary_dim=2", [](rope_cache_spec &s) {
             s.rotary_dim = 2;
             s.scaling.type = ROPE_SCALING_DYNAMIC;
             s.scaling.factor = 2;
             s.scaling.original_max_positions = 4;
         }},
        // inv_freq up to 2^29: angles stay below 2^32 only for rows below 8.
        {ROPE_ERR_POSITION_OUT_OF_RANGE, "spec.cache_len=16", [](rope_cache_spec &s) {
             s.scaling.type = ROPE_SCALING_LINEAR;
             s.scaling.factor = 0x1p-29f;
         }},
    };
    for (const Bad &bad : bads) {
        rope_cache_spec s = base();
        bad.edit(s);
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_build_cos_sin_cache(&s, &report), bad.status) << bad.words;
        EXPECT_NE(std::string(report.message).find(bad.words), std::string::npos) << report.message;
        EXPECT_EQ(cos, std::vector<float>(64, 7.0f));
        EXPECT_EQ(sin, std::vector<float>(64, 7.0f));
    }
}

TEST(CacheBuilderValidation, NullSpecIsRefusedWithItsMessage) {
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_build_cos_sin_cache(nullptr, &report), ROPE_ERR_NULL_POINTER);
    EXPECT_EQ(report.status, ROPE_ERR_NULL_POINTER);
    EXPECT_STREQ(report.message, "spec is NULL; rope_build_cos_sin_cache needs a rope_cache_spec");
}

// A report of a caller built against a newer header (a larger struct_size, fields this library
// does not know): the builder writes its status and message and keeps the size and what follows,
// as rope_dispatch does.
TEST(CacheBuilderValidation, ANewerCallersReportKeepsItsSize) {
    struct NewerReport {
        rope_report known;
        uint64_t later_field;
    } newer{rope_report_init(), 0x5eed};
    newer.known.struct_size = sizeof(NewerReport);
    EXPECT_EQ(rope_build_cos_sin_cache(nullptr, &newer.known), ROPE_ERR_NULL_POINTER);
    EXPECT_EQ(newer.known.struct_size, sizeof(NewerReport));
    EXPECT_EQ(newer.known.status, ROPE_ERR_NULL_POINTER);
    EXPECT_EQ(newer.later_field, 0x5eedu);
}

// Both tables in one buffer, rows of R/2 values every 8 elements, sin_cache `distance` elements
// after cos_cache (before it when negative).
struct SharedBuffer {
    static constexpr int kRotary = 8, kStride = 8, kLen = 4;
    std::vector<float> values = std::vector<float>(64, 7.0f);

    rope_cache_spec spec(int distance) {
        rope_cache_spec s = rope_cache_spec_init();
        s.source = ROPE_SOURCE_COMPAT;
        s.rotary_dim = kRotary;
        s.cache_len = kLen;
        s.cache_row_stride = kStride;
        s.cos_cache = values.data() + (distance < 0 ? -distance : 0);
        s.sin_cache = values.data() + (distance < 0 ? 0 : distance);
        return s;
    }
};

// Interleaved rows are disjoint tables (vLLM's cos_sin_cache: [cos | sin] per row, distance R/2),
// and so is a sin table that starts past cos's last row: each gets the values of separate tables.
TEST(CacheBuilderLayout, TablesInterleavedInOneBufferGetTheirValues) {
    constexpr int kPairs = SharedBuffer::kRotary / 2;
    std::vector<float> cos(SharedBuffer::kLen * kPairs), sin(cos.size());
    rope_cache_spec separate = SharedBuffer().spec(0);
    separate.cos_cache = cos.data();
    separate.sin_cache = sin.data();
    separate.cache_row_stride = 0;
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_build_cos_sin_cache(&separate, &report), ROPE_OK) << report.message;
    for (int distance : {4, -4, 12, -12, 28, -28, 29, -29}) {
        SCOPED_TRACE(distance);
        SharedBuffer buffer;
        const rope_cache_spec s = buffer.spec(distance);
        ASSERT_EQ(rope_build_cos_sin_cache(&s, &report), ROPE_OK) << report.message;
        for (int m = 0; m < SharedBuffer::kLen; m++) {
            for (int i = 0; i < kPairs; i++) {
                EXPECT_EQ(static_cast<const float *>(s.cos_cache)[m * SharedBuffer::kStride + i], cos[m * kPairs + i]);
                EXPECT_EQ(static_cast<const float *>(s.sin_cache)[m * SharedBuffer::kStride + i], sin[m * kPairs + i]);
            }
        }
    }
}

// One shared element is an overlap, found at each end of the tables: cos row 0's last value is
// sin row 0's first (distance 3), cos row 1's first is sin row 0's last (5), cos row 1's last is
// sin row 0's first (11), cos row 3's first is sin row 0's last (21), and cos row 3's last is sin
// row 0's first (27); and the same with the tables swapped.
TEST(CacheBuilderValidation, TablesSharingOneElementAreRefused) {
    for (int distance : {3, -3, 5, -5, 11, -11, 21, -21, 27, -27}) {
        SCOPED_TRACE(distance);
        SharedBuffer buffer;
        const rope_cache_spec s = buffer.spec(distance);
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_build_cos_sin_cache(&s, &report), ROPE_ERR_OVERLAP);
        EXPECT_NE(std::string(report.message).find("spec.cos_cache and spec.sin_cache overlap"), std::string::npos)
            << report.message;
        EXPECT_EQ(buffer.values, std::vector<float>(64, 7.0f));
    }
}

/// cos/sin tables of `rows` x rotary_dim/2 f32 values in address space reserved, not committed,
/// and a spec writing them whose base the builder refuses (0.5).
struct ReservedTables {
    SparseBuffer cos, sin;
    rope_cache_spec spec = rope_cache_spec_init();

    ReservedTables(int64_t rows, int rotary_dim)
        : cos(static_cast<size_t>(rows) * static_cast<size_t>(rotary_dim / 2) * sizeof(float)), sin(cos.size()) {
        spec.source = ROPE_SOURCE_COMPAT;
        spec.rotary_dim = rotary_dim;
        spec.cos_cache = cos.data();
        spec.sin_cache = sin.data();
        spec.cache_len = rows;
        spec.base = 0.5;
    }
    bool reserved() const {
        return cos.data() != nullptr && sin.data() != nullptr;
    }
    void expect_refused_for_its_base() const {
        rope_report report = rope_report_init();
        EXPECT_EQ(rope_build_cos_sin_cache(&spec, &report), ROPE_ERR_BAD_VALUE) << report.message;
        EXPECT_NE(std::string(report.message).find("spec.base=0.5"), std::string::npos) << report.message;
    }
};

#define ROPEGEN_SKIP_UNLESS_RESERVED(tables) \
    if (!(tables).reserved())                \
    GTEST_SKIP() << "could not reserve twice " << (tables).cos.size() << " bytes of address space"

// Arguments are validated before the staging of cache_len rows is allocated: a bad base or a
// scaling's position limit is reported as such, not as out of memory (512 GiB of staging here).
TEST(CacheBuilderValidation, LongCacheIsValidatedBeforeItsStagingIsAllocated) {
    ReservedTables tables(int64_t{1} << 30, 128);  // the most rows a cache holds
    ROPEGEN_SKIP_UNLESS_RESERVED(tables);
    tables.expect_refused_for_its_base();

    rope_cache_spec &s = tables.spec;
    s.base = 0;
    s.scaling.type = ROPE_SCALING_LINEAR;
    s.scaling.factor = 1e-3f;  // inv_freq up to 1000: positions below about 2^22
    rope_report report = rope_report_init();
    EXPECT_EQ(rope_build_cos_sin_cache(&s, &report), ROPE_ERR_POSITION_OUT_OF_RANGE) << report.message;
    EXPECT_NE(std::string(report.message).find("spec.cache_len=1073741824"), std::string::npos) << report.message;
}

/// The peak resident memory of this process so far, in bytes.
int64_t peak_resident_bytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t{usage.ru_maxrss} * 1024;
}

// A row of the widest rotary_dim is 8 GiB of f32: a spec refused for its base must not have
// written, and so committed, that row before it was validated. (ASan commits the row's shadow,
// an eighth of it: 1 GiB.)
TEST(CacheBuilderValidation, WideRowsAreValidatedBeforeAnyRowIsWritten) {
    constexpr int kRotaryDim = std::numeric_limits<int32_t>::max() - 1;
    ReservedTables tables(1, kRotaryDim);
    ROPEGEN_SKIP_UNLESS_RESERVED(tables);
    const int64_t before = peak_resident_bytes();
    if (before > (int64_t{2} << 30)) {
        GTEST_SKIP() << "this process's resident memory already peaked at " << before
                     << " bytes, which would hide the call's (ctest runs each test alone)";
    }
    const size_t row_bytes = static_cast<size_t>(kRotaryDim) * sizeof(float);
    void *volatile probe = std::malloc(row_bytes);  // volatile: kept, though unused
    const bool reservable = probe != nullptr;
    std::free(probe);
    if (!reservable) {
        GTEST_SKIP() << "this host cannot reserve the " << row_bytes
                     << "-byte row the builder allocates first (it returns ROPE_ERR_INTERNAL then, as documented)";
    }
    tables.expect_refused_for_its_base();
    EXPECT_LT(peak_resident_bytes() - before, int64_t{4} << 30) << "the 8 GiB unit row was written before validation";
}

}  // namespace
}  // namespace ropegen::test
