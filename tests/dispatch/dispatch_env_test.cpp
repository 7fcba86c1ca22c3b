// SPDX-License-Identifier: Apache-2.0
// ROPE_MAX_ISA and ROPE_NUM_THREADS, read once at the first call of the library. ctest runs this
// program with each variable set to several values (see tests/CMakeLists.txt); each run checks
// what its value implies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "internal/runtime_state.h"
#include "support/kernels.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

/// The cap a value of ROPE_MAX_ISA means (a level of this architecture; anything else: none).
rope_isa cap_from(const char *value) {
    rope_isa isa = ROPE_ISA_NONE;
    return isa_from_name(value, &isa) ? isa : ROPE_ISA_NONE;
}

TEST(MaxIsaEnvironment, CapsTheDispatcher) {
    const char *value = std::getenv("ROPE_MAX_ISA");
    if (value == nullptr) {
        GTEST_SKIP() << "ROPE_MAX_ISA is not set; ctest runs this program with it set";
    }
    const rope_isa cap = cap_from(value);
    const rope_isa active = cap == ROPE_ISA_NONE ? detected_isa() : std::min(cap, detected_isa());
    EXPECT_EQ(rope_active_isa(), active) << "ROPE_MAX_ISA=" << value;

    ROPEGEN_SKIP_UNLESS_BUILT(ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, ROPE_DTYPE_F32, 128);
    CaseSpec c;
    c.head_dim = 128;
    RopeCall call(c);
    ASSERT_EQ(call.run(dispatch_runner()), ROPE_OK) << call.report().message;
    const std::string kernel = call.report().kernel;
    const std::string suffix = kernel.substr(kernel.rfind("__") + 2);
    rope_isa used = ROPE_ISA_NONE;
    EXPECT_TRUE(isa_from_name(suffix, &used) && used != ROPE_ISA_NONE) << kernel;
    EXPECT_LE(used, active) << kernel << " runs above the cap ROPE_MAX_ISA=" << value;
    const KernelEntry *expected = first_matching_kernel(call.params(), active);
    ASSERT_NE(expected, nullptr);
    EXPECT_EQ(kernel, expected->name) << "the best kernel at or below the cap";
    EXPECT_TRUE(call.check_outputs());

    // rope_set_max_isa() overrides the variable.
    ASSERT_EQ(rope_set_max_isa(ROPE_ISA_NONE), ROPE_OK);
    EXPECT_EQ(rope_active_isa(), detected_isa());
}

// ctest gives the pool size the value implies in ROPEGEN_EXPECTED_THREADS: a number, or
// "default" for a value that is ignored (Halide's default: the CPU count, at most 256).
TEST(NumThreadsEnvironment, SizesThePool) {
    const char *value = std::getenv("ROPE_NUM_THREADS"), *expected = std::getenv("ROPEGEN_EXPECTED_THREADS");
    if (value == nullptr || expected == nullptr) {
        GTEST_SKIP() << "ROPE_NUM_THREADS or ROPEGEN_EXPECTED_THREADS is not set; ctest runs this program with both set";
    }
    if (std::string(expected) == "default" && std::getenv("HL_NUM_THREADS") != nullptr) {
        GTEST_SKIP() << "HL_NUM_THREADS is set: Halide's default is not the CPU count";
    }
    const int threads = std::string(expected) == "default"
                            ? std::min(256, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
                            : std::atoi(expected);
    // The first call of the library reads the environment, even one that refuses its arguments.
    EXPECT_EQ(rope_build_cos_sin_cache(nullptr, nullptr), ROPE_ERR_NULL_POINTER);
    EXPECT_EQ(library_threads(), threads) << "ROPE_NUM_THREADS=\"" << value << "\"";
}

}  // namespace
}  // namespace ropegen::test
