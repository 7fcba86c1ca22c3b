// SPDX-License-Identifier: Apache-2.0
#include "tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "reference/rope_reference.h"

namespace ropegen::test {

namespace ref = ropegen::reference;

const char *layout_name(Layout layout) {
    switch (layout) {
        case Layout::BSHD: return "BSHD";
        case Layout::BHSD: return "BHSD";
        case Layout::SBHD: return "SBHD";
    }
    return "unknown-layout";
}

int64_t Storage::elements() const {
    return static_cast<int64_t>(bytes.size() / ref::dtype_size(dtype));
}

uint32_t Storage::bits(int64_t index) const {
    if (dtype == ROPE_DTYPE_F32) {
        uint32_t value;
        std::memcpy(&value, bytes.data() + index * 4, 4);
        return value;
    }
    uint16_t value;
    std::memcpy(&value, bytes.data() + index * 2, 2);
    return value;
}

void Storage::set_bits(int64_t index, uint32_t value) {
    if (dtype == ROPE_DTYPE_F32) {
        std::memcpy(bytes.data() + index * 4, &value, 4);
    } else {
        const auto half = static_cast<uint16_t>(value);
        std::memcpy(bytes.data() + index * 2, &half, 2);
    }
}

Tensor Tensor::make(rope_dtype dtype, Sizes sizes, Layout layout, int64_t row_pad, GuardedBytes::Flush flush) {
    const auto [batch, seq, heads, dim] = sizes;
    const int64_t row = dim + row_pad;  // elements from one head to the next in memory
    Tensor t;
    t.sizes_ = sizes;
    switch (layout) {
        case Layout::BSHD: t.strides_ = {seq * heads * row, heads * row, row, 1}; break;
        case Layout::BHSD: t.strides_ = {heads * seq * row, row, seq * row, 1}; break;
        case Layout::SBHD: t.strides_ = {heads * row, batch * heads * row, row, 1}; break;
    }
    const size_t bytes = static_cast<size_t>(batch * seq * heads * row) * ref::dtype_size(dtype);
    t.storage_ = std::make_shared<Storage>(Storage{dtype, GuardedBytes(bytes, kCanaryByte, flush)});
    return t;
}

Tensor Tensor::view(Sizes sizes, int64_t element_offset, Sizes strides) const {
    Tensor t = *this;
    t.offset_ = offset_ + element_offset;
    t.sizes_ = sizes;
    t.strides_ = strides;
    return t;
}

Tensor Tensor::clone() const {
    Tensor t = *this;
    t.storage_ = std::make_shared<Storage>(*storage_);
    return t;
}

int64_t Tensor::index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    const int64_t i = offset_ + b * strides_[0] + s * strides_[1] + h * strides_[2] + d * strides_[3];
    if (i < 0 || i >= storage_->elements()) {
        throw std::out_of_range("Tensor::index outside the buffer");
    }
    return i;
}

uint32_t Tensor::bits(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return storage_->bits(index(b, s, h, d));
}

void Tensor::set_bits(int64_t b, int64_t s, int64_t h, int64_t d, uint32_t value) {
    storage_->set_bits(index(b, s, h, d), value);
}

double Tensor::get(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return ref::decode(bits(b, s, h, d), dtype());
}

void Tensor::set(int64_t b, int64_t s, int64_t h, int64_t d, double value) {
    set_bits(b, s, h, d, ref::encode(value, dtype()));
}

std::vector<double> Tensor::head(int64_t b, int64_t s, int64_t h) const {
    std::vector<double> values(static_cast<size_t>(sizes_[3]));
    for (int64_t d = 0; d < sizes_[3]; d++) {
        values[d] = get(b, s, h, d);
    }
    return values;
}

rope_tensor Tensor::rope() const {
    rope_tensor t{};
    t.data = storage_->bytes.data() + offset_ * static_cast<int64_t>(ref::dtype_size(dtype()));
    t.dtype = dtype();
    for (int i = 0; i < 4; i++) {
        t.sizes[i] = sizes_[i];
        t.strides[i] = strides_[i];
    }
    return t;
}

PackedQkv make_packed_qkv(rope_dtype dtype, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                          int64_t head_dim, GuardedBytes::Flush flush) {
    const Tensor all = Tensor::make(dtype, {batch, seq, q_heads + 2 * k_heads, head_dim}, Layout::BSHD, 0, flush);
    const Sizes strides = all.strides();
    return {all.view({batch, seq, q_heads, head_dim}, 0, strides),
            all.view({batch, seq, k_heads, head_dim}, q_heads * head_dim, strides),
            all.view({batch, seq, k_heads, head_dim}, (q_heads + k_heads) * head_dim, strides)};
}

PackedQkv make_per_head_qkv(rope_dtype dtype, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                            int64_t head_dim, GuardedBytes::Flush flush) {
    const int64_t heads = std::max(q_heads, k_heads);
    const Tensor all = Tensor::make(dtype, {batch, seq, heads, 3 * head_dim}, Layout::BSHD, 0, flush);
    const Sizes strides = all.strides();
    return {all.view({batch, seq, q_heads, head_dim}, 0, strides), all.view({batch, seq, k_heads, head_dim}, head_dim, strides),
            all.view({batch, seq, k_heads, head_dim}, 2 * head_dim, strides)};
}

namespace {

template <typename F>
void fill_each(Tensor &tensor, F &&value_of) {
    tensor.for_each_head([&](int64_t b, int64_t s, int64_t h) {
        for (int64_t d = 0; d < tensor.head_dim(); d++) {
            value_of(b, s, h, d);
        }
    });
}

}  // namespace

void fill_uniform(Tensor &tensor, std::mt19937_64 &rng, double magnitude) {
    std::uniform_real_distribution<double> uniform(-magnitude, magnitude);
    fill_each(tensor, [&](int64_t b, int64_t s, int64_t h, int64_t d) { tensor.set(b, s, h, d, uniform(rng)); });
}

void fill_nonzero(Tensor &tensor, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> exponent(-8.0, 1.0);
    std::bernoulli_distribution negative(0.5);
    fill_each(tensor, [&](int64_t b, int64_t s, int64_t h, int64_t d) {
        const double value = std::exp2(exponent(rng));
        tensor.set(b, s, h, d, negative(rng) ? -value : value);
    });
}

void fill_adversarial(Tensor &tensor, std::mt19937_64 &rng) {
    const rope_dtype dtype = tensor.dtype();
    // Largest magnitude whose rotation cannot overflow the dtype (|y| <= sqrt(2) max|x|).
    const double huge = dtype == ROPE_DTYPE_F16 ? 3.0e4 : 1.0e30;
    // Subnormals: k * smallest subnormal with k below 2^(mantissa bits).
    const double tiny = dtype == ROPE_DTYPE_F32 ? 0x1p-149 : dtype == ROPE_DTYPE_F16 ? 0x1p-24 : 0x1p-133;
    const int64_t tiny_steps = dtype == ROPE_DTYPE_F32 ? (int64_t{1} << 23) : dtype == ROPE_DTYPE_F16 ? 1024 : 128;
    std::discrete_distribution<int> kind({45, 15, 15, 10, 5, 10});
    std::uniform_real_distribution<double> unit(0.5, 1.0);
    std::uniform_int_distribution<int64_t> step(1, tiny_steps - 1);
    std::bernoulli_distribution negative(0.5);
    const uint32_t exponent_mask = dtype == ROPE_DTYPE_F32 ? 0x7f800000u : dtype == ROPE_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    const uint32_t mantissa_mask = dtype == ROPE_DTYPE_F32 ? 0x7fffffu : dtype == ROPE_DTYPE_F16 ? 0x3ffu : 0x7fu;
    const uint32_t sign_bit = dtype == ROPE_DTYPE_F32 ? 0x80000000u : 0x8000u;
    fill_each(tensor, [&](int64_t b, int64_t s, int64_t h, int64_t d) {
        double value = 0;
        switch (kind(rng)) {
            case 0: value = unit(rng) * 2 - 1.5; break;
            case 1: value = huge * unit(rng); break;
            case 2: value = tiny * static_cast<double>(step(rng)); break;
            case 3: value = 0.0; break;
            case 4: {  // NaN with a random payload, quiet or signalling, either sign
                const uint32_t payload = (static_cast<uint32_t>(rng()) & mantissa_mask) | 1u;
                tensor.set_bits(b, s, h, d, exponent_mask | payload | (negative(rng) ? sign_bit : 0u));
                return;
            }
            default: value = INFINITY; break;
        }
        tensor.set(b, s, h, d, negative(rng) ? -value : value);
    });
}

void fill_random_bits(Tensor &tensor, std::mt19937_64 &rng) {
    const rope_dtype dtype = tensor.dtype();
    const uint32_t exponent_mask = dtype == ROPE_DTYPE_F32 ? 0x7f800000u : dtype == ROPE_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    const uint32_t mantissa_mask = dtype == ROPE_DTYPE_F32 ? 0x7fffffu : dtype == ROPE_DTYPE_F16 ? 0x3ffu : 0x7fu;
    const uint32_t all_mask = dtype == ROPE_DTYPE_F32 ? 0xffffffffu : 0xffffu;
    std::bernoulli_distribution make_nan(0.25);
    fill_each(tensor, [&](int64_t b, int64_t s, int64_t h, int64_t d) {
        uint32_t bits = static_cast<uint32_t>(rng()) & all_mask;
        if (make_nan(rng)) {
            // Any nonzero mantissa under an all-ones exponent: quiet and signalling NaNs alike.
            bits |= exponent_mask;
            if ((bits & mantissa_mask) == 0) {
                bits |= 1;
            }
        }
        tensor.set_bits(b, s, h, d, bits);
    });
}

std::vector<bool> covered_elements(const Storage &storage, const std::vector<const Tensor *> &views) {
    std::vector<bool> covered(static_cast<size_t>(storage.elements()), false);
    for (const Tensor *view : views) {
        if (view == nullptr || view->storage().get() != &storage) {
            continue;
        }
        view->for_each_head([&](int64_t b, int64_t s, int64_t h) {
            for (int64_t d = 0; d < view->head_dim(); d++) {
                covered[view->index(b, s, h, d)] = true;
            }
        });
    }
    return covered;
}

}  // namespace ropegen::test
