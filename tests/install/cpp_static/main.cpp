// SPDX-License-Identifier: Apache-2.0
// A C++ engine's use of the installed static library: GPT-J (interleaved) rotation of q and k
// (GQA) with the compat source, checked against the rotation computed in double; then a call
// with a bad rotary_dim, which must fail with a message and leave the outputs untouched.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <ropegen/rope.h>

namespace {

constexpr int kSeq = 7, kQHeads = 4, kKvHeads = 2, kHeadDim = 64;

rope_tensor view(std::vector<float> &data, int heads) {
    rope_tensor t{};
    t.data = data.data();
    t.dtype = ROPE_DTYPE_F32;
    const int64_t sizes[4] = {1, kSeq, heads, kHeadDim};
    const int64_t strides[4] = {int64_t{kSeq} * heads * kHeadDim, int64_t{heads} * kHeadDim, kHeadDim, 1};
    std::memcpy(t.sizes, sizes, sizeof(sizes));
    std::memcpy(t.strides, strides, sizeof(strides));
    return t;
}

// Largest |error| of y against x rotated by position m = token index: pairs (2i, 2i+1), angle m * base^(-2i/D);
// NaN if an output is NaN.
double max_error(const std::vector<float> &x, const std::vector<float> &y, int heads) {
    double worst = 0;
    for (int m = 0; m < kSeq; m++) {
        for (int h = 0; h < heads; h++) {
            for (int i = 0; i < kHeadDim / 2; i++) {
                const size_t at = (size_t(m) * heads + h) * kHeadDim + 2 * i;
                const double angle = m * std::pow(10000.0, -2.0 * i / kHeadDim);
                const double a = x[at], b = x[at + 1];
                for (const double error : {std::fabs(y[at] - (a * std::cos(angle) - b * std::sin(angle))),
                                           std::fabs(y[at + 1] - (b * std::cos(angle) + a * std::sin(angle)))}) {
                    if (!(error <= worst)) {  // a NaN ends the search: fmax would pass over it
                        if (std::isnan(error)) {
                            return error;
                        }
                        worst = error;
                    }
                }
            }
        }
    }
    return worst;
}

}  // namespace

int main() {
    std::mt19937 random(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> q(size_t{kSeq} * kQHeads * kHeadDim), k(size_t{kSeq} * kKvHeads * kHeadDim);
    for (float &v : q) v = uniform(random);
    for (float &v : k) v = uniform(random);
    std::vector<float> q_out(q.size()), k_out(k.size());

    rope_params params = rope_params_init();
    params.style = ROPE_STYLE_INTERLEAVED;
    params.angles.source = ROPE_SOURCE_COMPAT;
    params.q = view(q, kQHeads), params.q_out = view(q_out, kQHeads);
    params.k = view(k, kKvHeads), params.k_out = view(k_out, kKvHeads);
    rope_report report = rope_report_init();
    if (rope_dispatch(&params, &report) != ROPE_OK) {
        std::fprintf(stderr, "rope_dispatch failed: %s\n", report.message);
        return 1;
    }
    const double q_error = max_error(q, q_out, kQHeads), k_error = max_error(k, k_out, kKvHeads);
    const double error = std::isnan(q_error) || q_error > k_error ? q_error : k_error;
    std::printf("ropegen %s, kernel %s, max |error| %.3g\n", rope_version_string(), report.kernel, error);
    if (!(error < 1e-5)) {
        std::fprintf(stderr, "error %.3g above 1e-5\n", error);
        return 1;
    }

    const std::vector<float> before = q_out;
    params.rotary_dim = 3;
    const rope_status status = rope_dispatch(&params, &report);
    std::printf("rotary_dim 3: %s: %s\n", rope_status_string(status), report.message);
    if (status != ROPE_ERR_BAD_ROTARY || std::strstr(report.message, "rotary_dim") == nullptr || q_out != before) {
        std::fprintf(stderr, "a bad rotary_dim was not refused cleanly\n");
        return 1;
    }
    return 0;
}
