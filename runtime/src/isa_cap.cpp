// SPDX-License-Identifier: Apache-2.0
// The ISA cap (ROPE_MAX_ISA / rope_set_max_isa) over the levels of the architecture the library
// is built for (isa_<arch>.cpp). Detection runs once; the cap is an atomic.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "internal/enum_value.h"
#include "internal/kernel_table.h"
#include "internal/runtime_state.h"

namespace ropegen {
namespace {

std::atomic<int> g_isa_cap{ROPE_ISA_NONE};

const IsaLevel *find_level(int32_t value) {
    size_t count = 0;
    const IsaLevel *levels = isa_levels(&count);
    for (size_t i = 0; i < count; i++) {
        if (levels[i].isa == value) {
            return &levels[i];
        }
    }
    return nullptr;
}

bool is_rope_isa(int32_t value) {
    switch (value) {
    case ROPE_ISA_SSE41:
    case ROPE_ISA_AVX2:
    case ROPE_ISA_AVX512:
    case ROPE_ISA_NEON:
    case ROPE_ISA_NEON_FP16:
        return true;
    default:
        return false;
    }
}

rope_isa parse_isa(const char *text) {
    size_t count = 0;
    const IsaLevel *levels = isa_levels(&count);
    for (size_t i = 0; text != nullptr && i < count; i++) {
        if (std::strcmp(text, levels[i].name) == 0) {
            return levels[i].isa;
        }
    }
    return ROPE_ISA_NONE;  // unset, unknown or another architecture's: the cap stays off
}

}  // namespace

const char *isa_name(rope_isa isa) {
    const IsaLevel *level = find_level(isa);
    return level != nullptr ? level->name : "none";
}

rope_isa detected_isa() {
    static const rope_isa isa = detect_isa();
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
    const int32_t value = ropegen::enum_value(isa);  // a C caller may pass any int
    if (value != ROPE_ISA_NONE && ropegen::find_level(value) == nullptr) {
        return ropegen::is_rope_isa(value) ? ROPE_ERR_UNSUPPORTED : ROPE_ERR_BAD_ENUM;
    }
    ropegen::g_isa_cap.store(value);
    ropegen::settings_changed();
    return ROPE_OK;
}

extern "C" rope_isa rope_active_isa(void) {
    return ropegen::usable_isa();
}
