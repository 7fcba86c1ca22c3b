// SPDX-License-Identifier: Apache-2.0
// x86 CPU-feature detection (cpuid, and xgetbv for the register state the OS saves) and the ISA
// cap (ROPE_MAX_ISA / rope_set_max_isa). Detection runs once; the cap is an atomic.
#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {
namespace {

std::atomic<int> g_isa_cap{ROPE_ISA_NONE};

uint64_t read_xcr0() {
    uint32_t eax = 0, edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool bit(uint32_t reg, int index) {
    return (reg >> index) & 1u;
}

rope_isa detect() {
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

rope_isa parse_isa(const char *text) {
    if (text == nullptr) {
        return ROPE_ISA_NONE;
    }
    static const struct {
        const char *name;
        rope_isa isa;
    } kNames[] = {{"avx512", ROPE_ISA_AVX512}, {"avx2", ROPE_ISA_AVX2}, {"sse41", ROPE_ISA_SSE41}};
    for (const auto &entry : kNames) {
        if (std::strcmp(text, entry.name) == 0) {
            return entry.isa;
        }
    }
    return ROPE_ISA_NONE;  // unknown values leave the cap off, as if unset
}

}  // namespace

rope_isa detected_isa() {
    static const rope_isa isa = detect();
    return isa;
}

void init_isa_cap_from_environment() {
    g_isa_cap.store(parse_isa(std::getenv("ROPE_MAX_ISA")));
}

rope_isa usable_isa() {
    ensure_initialized();
    const int cap = g_isa_cap.load(std::memory_order_relaxed);
    const rope_isa best = detected_isa();
    return cap != ROPE_ISA_NONE && cap < best ? static_cast<rope_isa>(cap) : best;
}

}  // namespace ropegen

extern "C" rope_status rope_set_max_isa(rope_isa isa) {
    ropegen::ensure_initialized();
    int32_t value;  // read as an int: a C caller may pass any value
    std::memcpy(&value, &isa, sizeof(value));
    if (value < ROPE_ISA_NONE || value > ROPE_ISA_AVX512) {
        return ROPE_ERR_BAD_ENUM;
    }
    ropegen::g_isa_cap.store(value);
    return ROPE_OK;
}

extern "C" rope_isa rope_active_isa(void) {
    return ropegen::usable_isa();
}
