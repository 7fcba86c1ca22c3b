// SPDX-License-Identifier: Apache-2.0
// x86-64 levels and their detection: cpuid for the instructions, xgetbv for the register state
// the OS saves.
#include <cpuid.h>

#include <cstdint>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {
namespace {

constexpr IsaLevel kLevels[] = {{ROPE_ISA_AVX512, "avx512"}, {ROPE_ISA_AVX2, "avx2"}, {ROPE_ISA_SSE41, "sse41"}};

uint64_t read_xcr0() {
    uint32_t eax = 0, edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool bit(uint32_t reg, int index) {
    return (reg >> index) & 1u;
}

}  // namespace

const IsaLevel *isa_levels(size_t *count) {
    *count = sizeof(kLevels) / sizeof(kLevels[0]);
    return kLevels;
}

rope_isa detect_isa() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !bit(ecx, 19)) {  // SSE4.1
        return ROPE_ISA_NONE;
    }
    const bool fma = bit(ecx, 12), osxsave = bit(ecx, 27), avx = bit(ecx, 28), f16c = bit(ecx, 29);
    // The OS must save the registers: XMM|YMM for AVX, plus opmask|ZMM_Hi256|Hi16_ZMM for AVX-512.
    const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const bool os_avx = (xcr0 & 0x6) == 0x6;
    const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    unsigned ebx7 = 0;
    if (max_leaf >= 7) {
        unsigned a = 0, c = 0, d = 0;
        __cpuid_count(7, 0, a, ebx7, c, d);
    }
    const bool avx2 = bit(ebx7, 5);
    const bool avx512 = bit(ebx7, 16) && bit(ebx7, 17) && bit(ebx7, 28) && bit(ebx7, 30) && bit(ebx7, 31);  // F DQ CD BW VL
    if (os_avx512 && avx512 && avx2 && fma && f16c) {
        return ROPE_ISA_AVX512;
    }
    if (os_avx && avx && avx2 && fma && f16c) {
        return ROPE_ISA_AVX2;
    }
    return ROPE_ISA_SSE41;
}

}  // namespace ropegen
