// SPDX-License-Identifier: Apache-2.0
// compat's frequencies of calls without scaling, kept across calls (inv_freq_cache.cpp).
#pragma once

#include <cstdint>

namespace ropegen {

/// Keys (base, rotary_dim) the cache holds at most, and the largest rotary_dim it holds.
constexpr int kCompatInvFreqSlots = 16;
constexpr int32_t kCompatInvFreqMaxRotaryDim = 512;

/// The rotary_dim / 2 frequencies a compat kernel computes for `base` without scaling (spec §5),
/// bit for bit, from a process-wide cache that fills on first use; null when the cache cannot
/// give them (rotary_dim beyond its tables, its slots all taken by other keys, or a slot being
/// filled by another thread just then). A table never changes once returned and lives until the
/// process ends. Thread-safe, allocates nothing.
const float *cached_compat_inv_freq(double base, int32_t rotary_dim);

/// The cache's table of (base, rotary_dim) if it holds one already, else null; never fills.
const float *find_cached_compat_inv_freq(double base, int32_t rotary_dim);

/// How many keys the cache holds (for tests, which need a free slot to see one filled).
int compat_inv_freq_keys_held();

}  // namespace ropegen
