// SPDX-License-Identifier: Apache-2.0
// aarch64 levels and their detection from the kernel's hardware capabilities (getauxval), which
// Linux fills from the ID registers for every core and which qemu-user fills for its CPU model.
#include <sys/auxv.h>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {
namespace {

constexpr IsaLevel kLevels[] = {{ROPE_ISA_NEON_FP16, "neon_fp16"}, {ROPE_ISA_NEON, "neon"}};

// Bits of AT_HWCAP (arch/arm64/include/uapi/asm/hwcap.h), spelled out so that older libc
// headers build too.
constexpr unsigned long kHwcapFp = 1ul << 0;
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapFphp = 1ul << 9;     // scalar half-precision arithmetic
constexpr unsigned long kHwcapAsimdhp = 1ul << 10;  // vector half-precision arithmetic

bool has_all(unsigned long hwcap, unsigned long bits) {
    return (hwcap & bits) == bits;
}

}  // namespace

const IsaLevel *isa_levels(size_t *count) {
    *count = sizeof(kLevels) / sizeof(kLevels[0]);
    return kLevels;
}

std::vector<CpuFeature> cpu_features() {
    const unsigned long hwcap = getauxval(AT_HWCAP);
    return {{"fp", has_all(hwcap, kHwcapFp)},
            {"asimd", has_all(hwcap, kHwcapAsimd)},
            {"fphp", has_all(hwcap, kHwcapFphp)},
            {"asimdhp", has_all(hwcap, kHwcapAsimdhp)}};
}

rope_isa detect_isa() {
    const unsigned long hwcap = getauxval(AT_HWCAP);
    if (!has_all(hwcap, kHwcapFp | kHwcapAsimd)) {
        return ROPE_ISA_NONE;
    }
    // The build's aarch64 kernels are all neon's (compiled with Halide's arm_fp16 for its f16
    // conversions, ARMv8.0 instructions, and audited to need no more): neon_fp16 runs them too.
    // The level stays, as part of the ABI (rope_isa, ROPE_MAX_ISA, rope_active_isa).
    return has_all(hwcap, kHwcapFphp | kHwcapAsimdhp) ? ROPE_ISA_NEON_FP16 : ROPE_ISA_NEON;
}

}  // namespace ropegen
