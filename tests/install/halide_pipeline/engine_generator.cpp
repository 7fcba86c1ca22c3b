// SPDX-License-Identifier: Apache-2.0
// The engine's own Halide pipeline: y = x * gain + bias over a vector.
#include <Halide.h>

namespace {

class EngineScale : public Halide::Generator<EngineScale> {
public:
    Input<Buffer<float, 1>> input{"input"};
    Input<float> gain{"gain"};
    Input<float> bias{"bias"};
    Output<Buffer<float, 1>> output{"output"};

    void generate() {
        Halide::Var x("x");
        output(x) = input(x) * gain + bias;
        output.vectorize(x, natural_vector_size<float>());
    }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(EngineScale, engine_scale)
