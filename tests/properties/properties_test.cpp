// SPDX-License-Identifier: Apache-2.0
// The properties of spec §8, checked on what rope_dispatch() returns (the best kernel for this
// CPU), plus the oracle's own consistency: the three forms of the rotation agree and the two
// styles are one map up to the lane permutation of §2.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "reference/rope_reference.h"
#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

namespace ref = ropegen::reference;

struct Variant {
    rope_style style;
    rope_source source;
};

std::string variant_name(const ::testing::TestParamInfo<Variant> &info) {
    return std::string(ref::style_name(info.param.style)) + "_" + ref::source_name(info.param.source);
}

class PropertyTest : public ::testing::TestWithParam<Variant> {
protected:
    void SetUp() override {
        ROPEGEN_SKIP_UNLESS_BUILT(GetParam().style, GetParam().source, ROPE_DTYPE_F32, 128);
    }

    /// f32, head_dim 128 (a fixed-head_dim kernel when the build has one), GQA-shaped.
    static CaseSpec base_case() {
        CaseSpec c;
        c.style = GetParam().style;
        c.source = GetParam().source;
        c.head_dim = 128;
        c.batch = 2;
        c.seq = 6;
        c.q_heads = 4;
        c.k_heads = 2;
        c.fill = Fill::Nonzero;
        return c;
    }

    /// Runs the call and checks it against the oracle too: a kernel that copied its input would
    /// keep norms, dot products and round trips, and pass the properties alone.
    static void run_ok(RopeCall &call) {
        ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
        EXPECT_TRUE(call.check_outputs());
    }
};

// Each rotated pair keeps its Euclidean norm.
TEST_P(PropertyTest, PairNormPreserved) {
    CaseSpec c = base_case();
    c.positions = random_table(c, 0, 5000, ROPE_INDEX_INT32, 3);
    RopeCall call(c);
    run_ok(call);
    const int pairs = c.effective_rotary_dim() / 2;
    int failures = 0;
    call.q_in.for_each_head([&](int64_t b, int64_t s, int64_t h) {
        for (int i = 0; i < pairs; i++) {
            const ref::PairLanes lanes = ref::pair_lanes(c.style, i, c.effective_rotary_dim(), c.rotary_offset);
            const double x_a = call.q_in.get(b, s, h, lanes.a), x_b = call.q_in.get(b, s, h, lanes.b);
            const double y_a = call.q_out.get(b, s, h, lanes.a), y_b = call.q_out.get(b, s, h, lanes.b);
            const double tolerance = 0x1p-20 * std::max(std::fabs(x_a), std::fabs(x_b));
            if (std::fabs(std::hypot(y_a, y_b) - std::hypot(x_a, x_b)) > tolerance && failures++ < 5) {
                ADD_FAILURE() << "pair " << i << " of q[" << b << "," << s << "," << h << "]: |x| = "
                              << std::hypot(x_a, x_b) << ", |y| = " << std::hypot(y_a, y_b);
            }
        }
    });
}

// <f(q, m), f(k, n)> depends on m - n only: batch item 1 holds the same q and k as batch item 0
// at every position shifted by t, so every q.k dot product must be the same in both.
TEST_P(PropertyTest, RelativePosition) {
    CaseSpec c = base_case();
    constexpr int64_t kShift = 1000;
    c.positions = random_table(c, 0, 64, ROPE_INDEX_INT32, 5);
    for (int64_t s = 0; s < c.seq; s++) {
        c.positions.values[c.seq + s] = c.positions.values[s] + kShift;
    }
    RopeCall call(c);
    call.modify_inputs([&](Tensor &q, Tensor &k) {
        for (Tensor *t : {&q, &k}) {
            for (int64_t s = 0; s < c.seq; s++) {
                for (int64_t h = 0; h < t->sizes()[2]; h++) {
                    for (int64_t d = 0; d < c.head_dim; d++) {
                        t->set_bits(1, s, h, d, t->bits(0, s, h, d));
                    }
                }
            }
        }
    });
    run_ok(call);
    // The compat source rounds each angle to f32, an error proportional to the angle (spec §8).
    const double max_angle = static_cast<double>(64 + kShift);
    const double relative = 0x1p-19 + (c.source == ROPE_SOURCE_COMPAT ? 0x1p-23 * max_angle : 0.0);
    const auto dot = [&](int64_t b, int64_t sq, int64_t hq, int64_t sk, int64_t hk) {
        double sum = 0, q_norm = 0, k_norm = 0;
        for (int64_t d = 0; d < c.head_dim; d++) {
            sum += call.q_out.get(b, sq, hq, d) * call.k_out.get(b, sk, hk, d);
            q_norm += call.q_out.get(b, sq, hq, d) * call.q_out.get(b, sq, hq, d);
            k_norm += call.k_out.get(b, sk, hk, d) * call.k_out.get(b, sk, hk, d);
        }
        return std::pair<double, double>{sum, std::sqrt(q_norm * k_norm)};
    };
    for (int64_t sq = 0; sq < c.seq; sq++) {
        for (int64_t sk = 0; sk < c.seq; sk++) {
            for (int64_t hq = 0; hq < c.q_heads; hq++) {
                for (int64_t hk = 0; hk < c.k_heads; hk++) {
                    const auto [near, norms] = dot(0, sq, hq, sk, hk);
                    const auto [far, unused] = dot(1, sq, hq, sk, hk);
                    ASSERT_NEAR(near, far, relative * norms)
                        << "q token " << sq << " head " << hq << ", k token " << sk << " head " << hk;
                }
            }
        }
    }
}

// inverse(forward(x)) = x up to rounding.
TEST_P(PropertyTest, InverseUndoesForward) {
    CaseSpec c = base_case();
    // Long positions for the computed sources; the cache source keeps its table small.
    const int64_t end = c.source == ROPE_SOURCE_CACHE ? 5000 : 100000;
    c.positions = random_table(c, 0, end, ROPE_INDEX_INT64, 9);
    RopeCall forward(c);
    run_ok(forward);
    rope_params back = forward.params();
    back.direction = ROPE_INVERSE;
    back.q = forward.q_out.rope();
    back.k = forward.k_out.rope();
    back.q_out = back.q;  // in place
    back.k_out = back.k;
    rope_report report = rope_report_init();
    ASSERT_EQ(rope_dispatch(&back, &report), ROPE_OK) << report.message;
    for (const bool is_k : {false, true}) {
        const Tensor &x = is_k ? forward.k_in : forward.q_in;
        const Tensor &y = is_k ? forward.k_out : forward.q_out;
        x.for_each_head([&](int64_t b, int64_t s, int64_t h) {
            const std::vector<double> original = x.head(b, s, h), restored = y.head(b, s, h);
            for (int64_t d = 0; d < c.head_dim; d++) {
                const int partner = ref::partner_lane(c.style, static_cast<int>(d), c.effective_rotary_dim(), 0);
                const double max_pair = std::max(std::fabs(original[d]), std::fabs(original[partner]));
                ASSERT_NEAR(restored[d], original[d], 0x1p-20 * max_pair)
                    << (is_k ? "k" : "q") << "[" << b << "," << s << "," << h << "," << d << "]";
            }
        });
    }
}

// Position 0 is the identity, bit for bit in f32 (cos 0 = 1 and sin 0 = 0 exactly), both ways.
TEST_P(PropertyTest, PositionZeroIsIdentity) {
    for (rope_direction direction : {ROPE_FORWARD, ROPE_INVERSE}) {
        CaseSpec c = base_case();
        c.direction = direction;
        c.positions.mode = PositionMode::Table;
        c.positions.values.assign(static_cast<size_t>(c.batch * c.seq), 0);
        RopeCall call(c);
        run_ok(call);
        EXPECT_TRUE(same_bits(call.q_out, call.q_in));
        EXPECT_TRUE(same_bits(call.k_out, call.k_in));
    }
}

// Lanes outside [o, o + R) are copied bit for bit, NaN payloads (signalling too) included.
TEST_P(PropertyTest, LanesOutsideTheSliceAreCopied) {
    int ran = 0;
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
        CaseSpec c = base_case();
        c.dtype = dtype;
        c.rotary_dim = 64;
        c.rotary_offset = 24;
        c.fill = Fill::RandomBits;
        c.positions = random_table(c, 0, 1000, ROPE_INDEX_INT32, 13);
        RopeCall call(c);
        const rope_status status = call.run(dispatch_runner());
        if (status == ROPE_ERR_UNSUPPORTED && !missing_kernel_reason(call.params()).empty()) {
            continue;  // this build has no kernel of that dtype (ROPEGEN_DTYPES)
        }
        ASSERT_EQ(status, ROPE_OK) << call.report().message;
        ran++;
        for (const bool is_k : {false, true}) {
            const Tensor &in = is_k ? call.k_in : call.q_in;
            const Tensor &out = is_k ? call.k_out : call.q_out;
            in.for_each_head([&](int64_t b, int64_t s, int64_t h) {
                for (int64_t d = 0; d < c.head_dim; d++) {
                    if (d < c.rotary_offset || d >= c.rotary_offset + c.rotary_dim) {
                        ASSERT_EQ(out.bits(b, s, h, d), in.bits(b, s, h, d))
                            << ref::dtype_name(dtype) << " " << (is_k ? "k" : "q") << "[" << b << "," << s << ","
                            << h << "," << d << "]";
                    }
                }
            });
        }
        EXPECT_TRUE(call.check_untouched_outside_outputs());
    }
    EXPECT_GT(ran, 0) << "no kernel of any dtype ran";
}

// half(x) = Pm^-1 interleaved(Pm x) (spec §2), on a partial slice so that Pm is not trivial.
TEST_P(PropertyTest, HalfAndInterleavedAgreeThroughThePermutation) {
    CaseSpec half = base_case();
    half.style = ROPE_STYLE_HALF;
    half.rotary_dim = 96;
    half.rotary_offset = 16;
    half.positions = random_table(half, 0, 3000, ROPE_INDEX_INT32, 17);
    CaseSpec interleaved = half;
    interleaved.style = ROPE_STYLE_INTERLEAVED;
    RopeCall half_call(half), interleaved_call(interleaved);
    const std::vector<int> permutation = ref::half_to_interleaved_permutation(128, 96, 16);
    interleaved_call.modify_inputs([&](Tensor &q, Tensor &k) {
        for (const bool is_k : {false, true}) {
            Tensor &target = is_k ? k : q;
            const Tensor &source = is_k ? half_call.k_in : half_call.q_in;
            source.for_each_head([&](int64_t b, int64_t s, int64_t h) {
                for (int64_t d = 0; d < 128; d++) {
                    target.set_bits(b, s, h, permutation[d], source.bits(b, s, h, d));
                }
            });
        }
    });
    run_ok(half_call);
    run_ok(interleaved_call);
    const double tolerance = 2 * ref::relative_tolerance(half.source);  // both within tolerance of one map
    for (const bool is_k : {false, true}) {
        const Tensor &h_out = is_k ? half_call.k_out : half_call.q_out;
        const Tensor &i_out = is_k ? interleaved_call.k_out : interleaved_call.q_out;
        const Tensor &x = is_k ? half_call.k_in : half_call.q_in;
        h_out.for_each_head([&](int64_t b, int64_t s, int64_t h) {
            const std::vector<double> input = x.head(b, s, h);
            for (int64_t d = 0; d < 128; d++) {
                const int partner = ref::partner_lane(ROPE_STYLE_HALF, static_cast<int>(d), half.rotary_dim,
                                                      half.rotary_offset);  // -1: not rotated
                const double max_pair = std::max(std::fabs(input[d]), partner < 0 ? 0.0 : std::fabs(input[partner]));
                ASSERT_NEAR(h_out.get(b, s, h, d), i_out.get(b, s, h, permutation[d]), tolerance * max_pair)
                    << (is_k ? "k" : "q") << "[" << b << "," << s << "," << h << "," << d << "]";
            }
        });
    }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, PropertyTest,
                         ::testing::Values(Variant{ROPE_STYLE_HALF, ROPE_SOURCE_CACHE},
                                           Variant{ROPE_STYLE_HALF, ROPE_SOURCE_COMPAT},
                                           Variant{ROPE_STYLE_HALF, ROPE_SOURCE_PRECISE},
                                           Variant{ROPE_STYLE_INTERLEAVED, ROPE_SOURCE_CACHE},
                                           Variant{ROPE_STYLE_INTERLEAVED, ROPE_SOURCE_COMPAT},
                                           Variant{ROPE_STYLE_INTERLEAVED, ROPE_SOURCE_PRECISE}),
                         variant_name);

// --- the oracle itself ----------------------------------------------------------------------------

std::vector<double> random_vector(int n, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> uniform(-2.0, 2.0);
    std::vector<double> x(n);
    for (double &v : x) {
        v = uniform(rng);
    }
    return x;
}

// R_m x with the full matrix, the pair formulas and the complex product agree.
TEST(Oracle, MatrixPairAndComplexFormsAgree) {
    std::mt19937_64 rng(1);
    for (rope_style style : {ROPE_STYLE_HALF, ROPE_STYLE_INTERLEAVED}) {
        for (int64_t position : {0, 1, 77, 5000, 16777215}) {
            const ref::CosSin cs = ref::exact_cos_sin(position, 48, 10000.0, 1.0);
            const std::vector<double> x = random_vector(64, rng);
            const std::vector<double> by_matrix = ref::rotation_matrix(64, 48, 8, style, cs).apply(x);
            const std::vector<double> by_pairs = ref::rotate_pairs(x, 48, 8, style, cs);
            const std::vector<double> by_complex = ref::rotate_complex(x, 48, 8, style, cs);
            for (int d = 0; d < 64; d++) {
                EXPECT_NEAR(by_matrix[d], by_pairs[d], 1e-14) << ref::style_name(style) << " lane " << d;
                EXPECT_NEAR(by_matrix[d], by_complex[d], 1e-14) << ref::style_name(style) << " lane " << d;
            }
        }
    }
}

// The matrix is orthogonal and the inverse direction is its transpose (spec §3).
TEST(Oracle, InverseIsTheTranspose) {
    const ref::CosSin cs = ref::exact_cos_sin(1234, 32, 10000.0, 1.0);
    for (rope_style style : {ROPE_STYLE_HALF, ROPE_STYLE_INTERLEAVED}) {
        const ref::RotationMatrix forward = ref::rotation_matrix(40, 32, 4, style, cs);
        const ref::RotationMatrix inverse =
            ref::rotation_matrix(40, 32, 4, style, ref::for_direction(cs, ROPE_INVERSE));
        for (int i = 0; i < 40; i++) {
            for (int j = 0; j < 40; j++) {
                EXPECT_EQ(inverse.m[i * 40 + j], forward.m[j * 40 + i]);
                double product = 0;
                for (int l = 0; l < 40; l++) {
                    product += forward.m[l * 40 + i] * forward.m[l * 40 + j];
                }
                EXPECT_NEAR(product, i == j ? 1.0 : 0.0, 1e-15);
            }
        }
    }
}

// The spec's worked form: half style, P = 2, angle theta on pair 0, lanes (0, 2) and (1, 3).
TEST(Oracle, HalfStyleRotatesLaneIWithLaneIPlusP) {
    ref::CosSin cs{{0.6, 1.0}, {0.8, 0.0}};
    const std::vector<double> y = ref::rotate_pairs({1.0, 2.0, 3.0, 4.0}, 4, 0, ROPE_STYLE_HALF, cs);
    EXPECT_DOUBLE_EQ(y[0], 1.0 * 0.6 - 3.0 * 0.8);  // x[0] c - x[2] s
    EXPECT_DOUBLE_EQ(y[2], 3.0 * 0.6 + 1.0 * 0.8);  // x[2] c + x[0] s
    EXPECT_DOUBLE_EQ(y[1], 2.0);
    EXPECT_DOUBLE_EQ(y[3], 4.0);
    const std::vector<double> z = ref::rotate_pairs({1.0, 2.0, 3.0, 4.0}, 4, 0, ROPE_STYLE_INTERLEAVED, cs);
    EXPECT_DOUBLE_EQ(z[0], 1.0 * 0.6 - 2.0 * 0.8);  // x[0] c - x[1] s
    EXPECT_DOUBLE_EQ(z[1], 2.0 * 0.6 + 1.0 * 0.8);  // x[1] c + x[0] s
}

TEST(Oracle, StylesAgreeThroughThePermutation) {
    std::mt19937_64 rng(2);
    const ref::CosSin cs = ref::exact_cos_sin(999, 24, 10000.0, 1.0);
    const std::vector<int> permutation = ref::half_to_interleaved_permutation(30, 24, 3);
    const std::vector<double> x = random_vector(30, rng);
    std::vector<double> permuted(30);
    for (int d = 0; d < 30; d++) {
        permuted[permutation[d]] = x[d];
    }
    const std::vector<double> half = ref::rotate_pairs(x, 24, 3, ROPE_STYLE_HALF, cs);
    const std::vector<double> interleaved = ref::rotate_pairs(permuted, 24, 3, ROPE_STYLE_INTERLEAVED, cs);
    for (int d = 0; d < 30; d++) {
        EXPECT_EQ(half[d], interleaved[permutation[d]]) << "lane " << d;
    }
}

// Non-finite inputs reach only the lanes their pair feeds (no 0 * Inf from outside the block).
TEST(Oracle, InfinityStaysInItsPair) {
    const ref::CosSin cs = ref::exact_cos_sin(5, 4, 10000.0, 1.0);
    const std::vector<double> y =
        ref::rotation_matrix(6, 4, 0, ROPE_STYLE_INTERLEAVED, cs).apply({INFINITY, 1.0, 2.0, 3.0, 4.0, 5.0});
    EXPECT_TRUE(std::isinf(y[0]));
    EXPECT_TRUE(std::isinf(y[1]));
    EXPECT_TRUE(std::isfinite(y[2]) && std::isfinite(y[3]) && std::isfinite(y[4]) && std::isfinite(y[5]));
}

TEST(Oracle, CompatFrequenciesAndAngles) {
    const std::vector<float> inv_freq = ref::compat_inv_freq(10000.0, 128);
    ASSERT_EQ(inv_freq.size(), 64u);
    EXPECT_EQ(inv_freq[0], 1.0f);
    EXPECT_EQ(inv_freq[32], 0.01f);  // 10000^-0.5: pow exact, then the f32 quotient 1/100
    // f32(1e5 * inv_freq[1]) rounds once: compare with the f32 product computed in f32.
    volatile float position = 100000.0f;
    EXPECT_EQ(ref::compat_angle(100000, inv_freq[1]), position * inv_freq[1]);
    // float(m) rounds positions above 2^24 as transformers does.
    EXPECT_EQ(ref::compat_angle(16777217, 1.0f), 16777216.0f);
    EXPECT_EQ(static_cast<double>(ref::exact_angle(16777215, 0, 128, 10000.0)), 16777215.0);
}

// YaRN's ramp bounds clamped to [0, R-1] on both sides (spec §6), in both precisions: where every
// correction dimension lies below 0 every pair but pair 0 is interpolated (inv_freq / f), where
// every one lies above R-1 every pair is extrapolated (the unscaled inv_freq).
TEST(Oracle, YarnRampBoundsClampedOnBothSides) {
    constexpr int kRotary = 128;
    ref::Scaling yarn;
    yarn.type = ROPE_SCALING_YARN;
    yarn.factor = 8;
    yarn.original_max = 4;  // corr(beta_slow = 1) = 128 ln(4 / 2pi) / (2 ln 10^4) < 0
    const std::vector<float> plain = ref::compat_inv_freq(10000.0, kRotary);
    const std::vector<float> compat = ref::compat_scaled_inv_freq(10000.0, kRotary, yarn, 1);
    const std::vector<long double> exact = ref::exact_scaled_inv_freq(10000.0, kRotary, yarn, 1);
    EXPECT_EQ(compat[0], plain[0]);
    EXPECT_NEAR(static_cast<double>(exact[0]), 1.0, 1e-15);
    for (int i = 1; i < kRotary / 2; i++) {
        EXPECT_NEAR(compat[i], plain[i] / 8, plain[i] * 1e-6) << "pair " << i;
        EXPECT_NEAR(static_cast<double>(exact[i]), std::pow(10000.0, -2.0 * i / kRotary) / 8, 1e-15) << "pair " << i;
    }
    yarn.original_max = int64_t{1} << 21;  // base 100: corr(beta_fast = 32) > R - 1
    const std::vector<float> plain100 = ref::compat_inv_freq(100.0, kRotary);
    const std::vector<float> compat100 = ref::compat_scaled_inv_freq(100.0, kRotary, yarn, 1);
    const std::vector<long double> exact100 = ref::exact_scaled_inv_freq(100.0, kRotary, yarn, 1);
    for (int i = 0; i < kRotary / 2; i++) {
        EXPECT_NEAR(compat100[i], plain100[i], plain100[i] * 1e-6) << "pair " << i;
        EXPECT_NEAR(static_cast<double>(exact100[i]), std::pow(100.0, -2.0 * i / kRotary), 1e-15) << "pair " << i;
    }
}

TEST(Oracle, CacheRows) {
    const ref::CosSinCache cache = ref::build_cache(10, 8, 6, 10000.0, 0.5);
    EXPECT_EQ(cache.cos[0], 0.5f);
    EXPECT_EQ(cache.sin[0], 0.0f);
    EXPECT_EQ(cache.cos[3 * 6 + 0], static_cast<float>(static_cast<double>(std::cos(3.0L)) * 0.5));
    EXPECT_TRUE(std::isnan(cache.cos[3 * 6 + 4])) << "padding is NaN so that reading it shows";
    const ref::CosSin row = ref::cache_cos_sin(cache, 3, 8);
    EXPECT_EQ(row.cos.size(), 4u);
}

TEST(Oracle, HalfPrecisionRounding) {
    EXPECT_EQ(ref::f16_from_double(1.0), 0x3c00);
    EXPECT_EQ(ref::f16_from_double(-2.0), 0xc000);
    EXPECT_EQ(ref::f16_from_double(65504.0), 0x7bff);
    EXPECT_EQ(ref::f16_from_double(65519.99), 0x7bff);   // below the halfway point to 2^16
    EXPECT_EQ(ref::f16_from_double(65520.0), 0x7c00);    // the tie rounds to even: infinity
    EXPECT_EQ(ref::f16_from_double(0x1p-24), 0x0001);    // smallest subnormal
    EXPECT_EQ(ref::f16_from_double(0x1p-25), 0x0000);    // tie to even: zero
    EXPECT_EQ(ref::f16_from_double(0x1.8p-25), 0x0001);
    EXPECT_EQ(ref::f16_from_double(1.0 + 0x1p-11), 0x3c00);      // tie to even (down)
    EXPECT_EQ(ref::f16_from_double(1.0 + 3 * 0x1p-11), 0x3c02);  // tie to even (up)
    EXPECT_EQ(ref::f16_from_double(-0.0), 0x8000);
    EXPECT_EQ(ref::f16_from_double(-INFINITY), 0xfc00);
    EXPECT_TRUE(std::isnan(ref::f16_to_double(ref::f16_from_double(NAN))));
    for (uint32_t bits = 0; bits < 0x10000; bits++) {  // every finite f16 survives a round trip
        const double value = ref::f16_to_double(static_cast<uint16_t>(bits));
        if (std::isfinite(value)) {
            ASSERT_EQ(ref::f16_from_double(value), bits == 0x8000 ? 0x8000 : bits) << std::hex << bits;
        }
    }
}

TEST(Oracle, BFloat16Rounding) {
    EXPECT_EQ(ref::bf16_from_double(1.0), 0x3f80);
    EXPECT_EQ(ref::bf16_from_double(1.0 + 0x1p-8), 0x3f80);      // tie to even (down)
    EXPECT_EQ(ref::bf16_from_double(1.0 + 3 * 0x1p-8), 0x3f82);  // tie to even (up)
    EXPECT_EQ(ref::bf16_from_double(1.0 + 0x1p-8 + 0x1p-30), 0x3f81);
    EXPECT_EQ(ref::bf16_from_double(0x1p-133), 0x0001);  // smallest subnormal
    EXPECT_EQ(ref::bf16_from_double(0x1.ffp127), 0x7f80);  // halfway above the largest finite: infinity
    EXPECT_EQ(ref::bf16_from_double(0x1.fefp127), 0x7f7f);  // below halfway: the largest finite
    EXPECT_TRUE(std::isnan(ref::bf16_to_double(ref::bf16_from_double(NAN))));
    for (uint32_t bits = 0; bits < 0x10000; bits++) {
        const double value = ref::bf16_to_double(static_cast<uint16_t>(bits));
        if (std::isfinite(value)) {
            ASSERT_EQ(ref::bf16_from_double(value), bits) << std::hex << bits;
        }
    }
}

TEST(Oracle, UlpDistance) {
    EXPECT_EQ(ref::ulp_distance(0x3c00, 0x3c01, ROPE_DTYPE_F16), 1);
    EXPECT_EQ(ref::ulp_distance(0x0001, 0x8001, ROPE_DTYPE_F16), 2);  // across zero
    EXPECT_EQ(ref::ulp_distance(0x0000, 0x8000, ROPE_DTYPE_F16), 0);  // +0 == -0
    EXPECT_EQ(ref::ulp_distance(0x3f800000, 0x3f7fffff, ROPE_DTYPE_F32), 1);
    EXPECT_EQ(ref::ulp_distance(0x7f7f, 0x7f80, ROPE_DTYPE_BF16), 1);  // max finite to infinity
}

}  // namespace
}  // namespace ropegen::test
