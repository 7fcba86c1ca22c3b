// SPDX-License-Identifier: Apache-2.0
// compat's frequencies of calls without scaling, kept across calls. A compat kernel computes
// inv_freq from base every call (a series for 2^x and a division per pair: about 60 ns of a
// one-token call's 1 us on a Zen 4); an engine calls with one base or two all its life. The
// generated ropegen_compat_inv_freq pipeline computes a table once with the kernels' own
// expression, and the dispatcher passes it to the kernels as a table of frequencies, which
// they read instead.
#include <HalideRuntime.h>

#include <atomic>
#include <cstring>

#include "internal/inv_freq_cache.h"
#include "internal/runtime_state.h"
#include "ropegen_compat_inv_freq.h"

namespace ropegen {
namespace {

constexpr int32_t kMaxPairs = kCompatInvFreqMaxRotaryDim / 2;

// A slot is filled once by the thread that claims it and never changes after: readers need no
// lock, and a table handed out stays valid for the calls that use it.
struct Slot {
    enum State : int { kEmpty, kFilling, kReady };
    std::atomic<int> state{kEmpty};
    double base = 0;
    int32_t rotary_dim = 0;
    float inv_freq[kMaxPairs] = {};

    bool holds(double key_base, int32_t key_rotary_dim) const {
        return rotary_dim == key_rotary_dim && std::memcmp(&base, &key_base, sizeof(base)) == 0;
    }
};

Slot g_slots[kCompatInvFreqSlots];  // engines use a key or two

// Runs the pipeline into `slot`'s table; false if Halide reported an error.
bool fill(Slot &slot) {
    halide_buffer_t table{};
    halide_dimension_t pairs{0, slot.rotary_dim / 2, 1, 0};
    table.host = reinterpret_cast<uint8_t *>(slot.inv_freq);
    table.type = halide_type_t(halide_type_float, 32);
    table.dimensions = 1;
    table.dim = &pairs;
    CallContext context(nullptr, 1);  // catches an error report; the pipeline allocates nothing
    return ropegen_compat_inv_freq(&context, slot.base, slot.rotary_dim / 2, &table) == 0 &&
           context.failure() == CallFailure::None;
}

}  // namespace

const float *cached_compat_inv_freq(double base, int32_t rotary_dim) {
    if (rotary_dim > kCompatInvFreqMaxRotaryDim) {
        return nullptr;
    }
    if (const float *table = find_cached_compat_inv_freq(base, rotary_dim)) {
        return table;
    }
    // Slots fill in order, so a key's first calls meet the same empty slot: one claims it. While
    // a slot fills (about a microsecond), the others compute their own rather than claim the next
    // slot for what may be the same key.
    for (Slot &slot : g_slots) {
        int state = slot.state.load(std::memory_order_acquire);
        if (state == Slot::kEmpty && slot.state.compare_exchange_strong(state, Slot::kFilling, std::memory_order_acquire)) {
            slot.base = base;
            slot.rotary_dim = rotary_dim;
            const bool filled = fill(slot);
            slot.state.store(filled ? Slot::kReady : Slot::kEmpty, std::memory_order_release);
            return filled ? slot.inv_freq : nullptr;
        }
        if (state == Slot::kFilling) {
            return nullptr;
        }
        if (slot.holds(base, rotary_dim)) {  // ready: filled since the search above
            return slot.inv_freq;
        }
    }
    return nullptr;
}

const float *find_cached_compat_inv_freq(double base, int32_t rotary_dim) {
    for (const Slot &slot : g_slots) {
        if (slot.state.load(std::memory_order_acquire) == Slot::kReady && slot.holds(base, rotary_dim)) {
            return slot.inv_freq;
        }
    }
    return nullptr;
}

int compat_inv_freq_keys_held() {
    int held = 0;
    for (const Slot &slot : g_slots) {
        held += slot.state.load(std::memory_order_acquire) == Slot::kReady ? 1 : 0;
    }
    return held;
}

}  // namespace ropegen
