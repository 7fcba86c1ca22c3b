// SPDX-License-Identifier: Apache-2.0
// Runs the engine's Halide pipeline (its runtime) and a ropegen call (ropegen's runtime, local to
// libropegen.a) in one process, each checked: linking both is the test that they do not clash.
#include <cmath>
#include <cstdio>
#include <vector>

#include <HalideBuffer.h>
#include <ropegen/rope.h>

#include "engine_scale.h"

int main() {
    Halide::Runtime::Buffer<float, 1> input(1000), output(1000);
    for (int i = 0; i < input.width(); i++) input(i) = float(i);
    if (engine_scale(input, 2.0f, 1.0f, output) != 0) {
        std::fprintf(stderr, "the engine's pipeline failed\n");
        return 1;
    }
    for (int i = 0; i < output.width(); i++) {
        if (output(i) != 2.0f * float(i) + 1.0f) {
            std::fprintf(stderr, "engine pipeline: output(%d) = %g\n", i, output(i));
            return 1;
        }
    }

    // Rotate one token of one head by position 3, half style, precise source (f64 angles).
    constexpr int kHeadDim = 32, kPairs = kHeadDim / 2;
    std::vector<float> q(kHeadDim, 1.0f), q_out(kHeadDim);
    rope_params params = rope_params_init();
    params.angles.source = ROPE_SOURCE_PRECISE;
    params.positions.offset = 3;
    params.q = {q.data(), ROPE_DTYPE_F32, {1, 1, 1, kHeadDim}, {kHeadDim, kHeadDim, kHeadDim, 1}};
    params.q_out = params.q;
    params.q_out.data = q_out.data();
    rope_report report = rope_report_init();
    if (rope_dispatch(&params, &report) != ROPE_OK) {
        std::fprintf(stderr, "rope_dispatch: %s\n", report.message);
        return 1;
    }
    double worst = 0;
    for (int i = 0; i < kPairs; i++) {
        const double angle = 3.0 * std::pow(10000.0, -2.0 * i / kHeadDim);
        worst = std::fmax(worst, std::fabs(q_out[i] - (std::cos(angle) - std::sin(angle))));
        worst = std::fmax(worst, std::fabs(q_out[i + kPairs] - (std::cos(angle) + std::sin(angle))));
    }
    std::printf("engine pipeline ok; ropegen kernel %s, max |error| %.3g\n", report.kernel, worst);
    return worst < 1e-6 ? 0 : 1;
}
