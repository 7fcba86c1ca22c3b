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

// What the levels need: the instructions (cpuid) and the register state the OS saves (xgetbv).
// Halide compiles each level for a CPU model (LLVM's -mcpu: penryn for sse41, haswell for avx2,
// skylake-avx512 for avx512), so LLVM may use every instruction that model has, not only the
// target's named features: SSE3 and SSSE3 (movddup, pshufb) at sse41; BMI1 and BMI2, LZCNT,
// POPCNT and MOVBE (andn, shlx, ...) at avx2 and above.
struct X86Features {
    bool sse3 = false, ssse3 = false, sse41 = false, avx = false, fma = false, f16c = false, avx2 = false;
    bool bmi1 = false, bmi2 = false, lzcnt = false, popcnt = false, movbe = false;
    bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
    bool os_avx = false, os_avx512 = false;  // XMM|YMM state; plus opmask|ZMM_Hi256|Hi16_ZMM
};

X86Features read_features() {
    X86Features f;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return f;
    }
    f.sse3 = bit(ecx, 0), f.ssse3 = bit(ecx, 9), f.sse41 = bit(ecx, 19), f.fma = bit(ecx, 12), f.avx = bit(ecx, 28);
    f.f16c = bit(ecx, 29), f.popcnt = bit(ecx, 23), f.movbe = bit(ecx, 22);
    const uint64_t xcr0 = bit(ecx, 27) ? read_xcr0() : 0;  // OSXSAVE
    f.os_avx = (xcr0 & 0x6) == 0x6;
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
    if (__get_cpuid_max(0, nullptr) >= 7) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = bit(b, 5), f.avx512f = bit(b, 16), f.avx512dq = bit(b, 17), f.avx512cd = bit(b, 28);
        f.avx512bw = bit(b, 30), f.avx512vl = bit(b, 31), f.bmi1 = bit(b, 3), f.bmi2 = bit(b, 8);
    }
    if (__get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx)) {
        f.lzcnt = bit(ecx, 5);  // ABM
    }
    return f;
}

}  // namespace

const IsaLevel *isa_levels(size_t *count) {
    *count = sizeof(kLevels) / sizeof(kLevels[0]);
    return kLevels;
}

std::vector<CpuFeature> cpu_features() {
    const X86Features f = read_features();
    return {{"sse3", f.sse3},          {"ssse3", f.ssse3},       {"sse4.1", f.sse41},
            {"avx", f.avx},            {"fma", f.fma},           {"f16c", f.f16c},
            {"avx2", f.avx2},          {"bmi1", f.bmi1},         {"bmi2", f.bmi2},
            {"lzcnt", f.lzcnt},        {"popcnt", f.popcnt},     {"movbe", f.movbe},
            {"avx512f", f.avx512f},    {"avx512dq", f.avx512dq}, {"avx512cd", f.avx512cd},
            {"avx512bw", f.avx512bw},  {"avx512vl", f.avx512vl}, {"os_saves_ymm", f.os_avx},
            {"os_saves_zmm", f.os_avx512}};
}

rope_isa detect_isa() {
    const X86Features f = read_features();
    if (!(f.sse3 && f.ssse3 && f.sse41)) {
        return ROPE_ISA_NONE;
    }
    const bool avx2 = f.os_avx && f.avx && f.avx2 && f.fma && f.f16c && f.bmi1 && f.bmi2 && f.lzcnt && f.popcnt && f.movbe;
    if (avx2 && f.os_avx512 && f.avx512f && f.avx512dq && f.avx512cd && f.avx512bw && f.avx512vl) {
        return ROPE_ISA_AVX512;
    }
    return avx2 ? ROPE_ISA_AVX2 : ROPE_ISA_SSE41;
}

}  // namespace ropegen
