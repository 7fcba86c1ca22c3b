// SPDX-License-Identifier: Apache-2.0
// Host tensors for the tests: an owned byte buffer of one dtype and strided 4-D views into it in
// the logical order [batch, seq, heads, head_dim] of rope_tensor, whatever the memory order.
// Values are read and written as doubles (rounded to the dtype, nearest even) or as raw bits.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ropegen/rope.h"
#include "support/guarded_bytes.h"

namespace ropegen::test {

/// Memory orders (spec §4), outer to inner.
enum class Layout { BSHD, BHSD, SBHD };
const char *layout_name(Layout layout);

using Sizes = std::array<int64_t, 4>;  ///< [batch, seq, heads, head_dim]

/// Bytes of one dtype between guard pages; several views may share one.
struct Storage {
    rope_dtype dtype;
    GuardedBytes bytes;
    int64_t elements() const;
    uint32_t bits(int64_t index) const;
    void set_bits(int64_t index, uint32_t bits);
};

/// Bytes every new buffer starts with: all-ones is a NaN in f32, f16 and bf16, so an output
/// element a kernel forgot to write fails every value check.
inline constexpr uint8_t kCanaryByte = 0xff;

class Tensor {
public:
    Tensor() = default;
    /// A new buffer of `sizes` in `layout`. `row_pad` extra elements follow every head's D lanes
    /// (a head stride > D) and stay canary; they check that nothing outside the view is written.
    /// The buffer's last byte touches a guard page (or its first, with GuardedBytes::Flush::Start).
    static Tensor make(rope_dtype dtype, Sizes sizes, Layout layout = Layout::BSHD, int64_t row_pad = 0,
                       GuardedBytes::Flush flush = GuardedBytes::Flush::End);
    /// A view of `sizes` into this tensor's buffer, starting `element_offset` elements after this
    /// view's first element, with explicit strides.
    Tensor view(Sizes sizes, int64_t element_offset, Sizes strides) const;
    /// A deep copy: a new buffer with the same bytes, the same view into it.
    Tensor clone() const;

    rope_dtype dtype() const {
        return storage_->dtype;
    }
    const Sizes &sizes() const {
        return sizes_;
    }
    const Sizes &strides() const {
        return strides_;
    }
    int64_t head_dim() const {
        return sizes_[3];
    }
    bool shares_storage(const Tensor &other) const {
        return storage_ == other.storage_;
    }
    const std::shared_ptr<Storage> &storage() const {
        return storage_;
    }

    /// Index into the buffer of element (b, s, h, d).
    int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const;
    uint32_t bits(int64_t b, int64_t s, int64_t h, int64_t d) const;
    void set_bits(int64_t b, int64_t s, int64_t h, int64_t d, uint32_t bits);
    double get(int64_t b, int64_t s, int64_t h, int64_t d) const;
    void set(int64_t b, int64_t s, int64_t h, int64_t d, double value);
    /// The D values of one head as doubles.
    std::vector<double> head(int64_t b, int64_t s, int64_t h) const;

    /// The view as the C ABI sees it.
    rope_tensor rope() const;

    /// Calls f(b, s, h) for every head of the view.
    template <typename F>
    void for_each_head(F &&f) const {
        for (int64_t b = 0; b < sizes_[0]; b++)
            for (int64_t s = 0; s < sizes_[1]; s++)
                for (int64_t h = 0; h < sizes_[2]; h++) f(b, s, h);
    }

private:
    std::shared_ptr<Storage> storage_;
    int64_t offset_ = 0;
    Sizes sizes_{}, strides_{};
};

/// q, k and v as views into one packed [batch, seq, q_heads + 2*k_heads, D] buffer (the fused
/// QKV projection output that engines rotate in place). q's first element or v's last touches the
/// buffer's guard page, as `flush` says.
struct PackedQkv {
    Tensor q, k, v;
};
PackedQkv make_packed_qkv(rope_dtype dtype, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                          int64_t head_dim, GuardedBytes::Flush flush = GuardedBytes::Flush::End);
/// q, k and v as the lanes [0, D), [D, 2D) and [2D, 3D) of each head's slot in one
/// [batch, seq, heads, 3*D] buffer (GPT-NeoX's fused QKV projection): q takes the first q_heads
/// slots, k and v the first k_heads.
PackedQkv make_per_head_qkv(rope_dtype dtype, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                            int64_t head_dim, GuardedBytes::Flush flush = GuardedBytes::Flush::End);

// --- fills -------------------------------------------------------------------------------------
/// Uniform values in [-1, 1) rounded to the dtype (deterministic for a seeded engine).
void fill_uniform(Tensor &tensor, std::mt19937_64 &rng, double magnitude = 1.0);
/// Random finite nonzero values of mixed magnitudes in [2^-8, 2).
void fill_nonzero(Tensor &tensor, std::mt19937_64 &rng);
/// Special values: per element one of ordinary, huge (1e30 for f32/bf16, 3e4 for f16, so that no
/// finite result overflows), subnormal, +-0, NaN, +-Inf.
void fill_adversarial(Tensor &tensor, std::mt19937_64 &rng);
/// Random bit patterns, NaN payloads (signalling ones too) included: for lanes that must be copied.
void fill_random_bits(Tensor &tensor, std::mt19937_64 &rng);

/// Buffer elements of `storage` covered by any of `views` (those a call may write).
std::vector<bool> covered_elements(const Storage &storage, const std::vector<const Tensor *> &views);

}  // namespace ropegen::test
