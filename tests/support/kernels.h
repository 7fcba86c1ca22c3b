// SPDX-License-Identifier: Apache-2.0
// Access to the generated kernel table for tests: entries, ISA names, runners.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "internal/kernel_table.h"
#include "support/rope_case.h"

namespace ropegen::test {

/// Every CPU kernel the build emitted, in table order.
std::vector<const KernelEntry *> all_kernels();
/// Every CUDA kernel the build emitted (none without CUDA), in table order.
std::vector<const KernelEntry *> all_cuda_kernels();
/// This architecture's ISA levels, best first (ropegen::isa_levels).
std::vector<rope_isa> isa_levels();
/// The levels of isa_levels() that have kernels of their own in this build (aarch64's neon_fp16
/// runs neon's).
std::vector<rope_isa> levels_with_kernels();
/// The level a name (ROPE_MAX_ISA's spelling, "none" included) means; false when unknown.
bool isa_from_name(const std::string &name, rope_isa *isa);
/// A runner that runs exactly `kernel` through ropegen::run_kernel.
Runner kernel_runner(const KernelEntry &kernel);
/// The kernel the documented rule picks: the first table entry (best ISA first, fixed head_dim
/// before the any-head_dim kernel) that serves `params`, as its outputs lie in memory
/// (pair_words_fit), as large and as placed as it is (call_class_fits), at or below `max_isa`;
/// nullptr if none.
const KernelEntry *first_matching_kernel(const rope_params &params, rope_isa max_isa);
/// Why no built kernel can serve `params` at the active ISA level (a build may leave dtypes,
/// head_dims or ISAs out: ROPEGEN_DTYPES...), or empty when one can.
std::string missing_kernel_reason(const rope_params &params);
std::string missing_kernel_reason(rope_style style, rope_source source, rope_dtype dtype, int64_t head_dim);
/// Skips the current test, with the reason, when the build has no kernel for the key given as
/// missing_kernel_reason()'s arguments.
#define ROPEGEN_SKIP_UNLESS_BUILT(...)                                                             \
    if (const std::string ropegen_reason_ = ::ropegen::test::missing_kernel_reason(__VA_ARGS__);   \
        !ropegen_reason_.empty())                                                                  \
    GTEST_SKIP() << ropegen_reason_

/// The name suffix of `kernel`'s call class ("_large", "_inplace"), or "" for a kernel of every call.
const char *call_class_suffix(const KernelEntry &kernel);
/// The kernel name without its ISA suffix and call class: what kernels of one key share.
std::string kernel_key(const KernelEntry &kernel);

/// Why `kernel` cannot run here, or empty when it can.
std::string unsupported_reason(const KernelEntry &kernel);

/// A call of `kernel`'s key (style, dtype, source) at its head_dim, or at `any_head_dim` for the
/// any-head_dim kernel; everything else is CaseSpec's default.
CaseSpec kernel_case(const KernelEntry &kernel, int64_t any_head_dim);

/// A test run once per kernel of the table, skipped with the reason where the CPU lacks its ISA.
class PerKernelTest : public ::testing::TestWithParam<const KernelEntry *> {
protected:
    void SetUp() override;
    const KernelEntry &kernel() const {
        return *GetParam();
    }
};

}  // namespace ropegen::test
