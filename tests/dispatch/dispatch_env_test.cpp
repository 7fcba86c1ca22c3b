// SPDX-License-Identifier: Apache-2.0
// ROPE_MAX_ISA, read once at the first call of the library. ctest runs this program with the
// variable set to several values (see tests/CMakeLists.txt); each run checks the cap it implies.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace ropegen::test
