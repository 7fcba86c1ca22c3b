// SPDX-License-Identifier: Apache-2.0
// Test buffers fenced by inaccessible pages: a kernel or dispatcher that reads or writes one byte
// past either end of a buffer faults at once instead of passing silently.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ropegen::test {

class GuardedBytes {
public:
    /// Which end of the buffer touches its guard page exactly (the other end is fenced at page
    /// granularity): End catches over-reads and over-writes, Start catches under-runs.
    enum class Flush { End, Start };

    GuardedBytes() = default;
    GuardedBytes(size_t size, uint8_t fill, Flush flush = Flush::End);
    GuardedBytes(const uint8_t *bytes, size_t size, Flush flush = Flush::End);
    GuardedBytes(const GuardedBytes &other);
    GuardedBytes &operator=(const GuardedBytes &other);
    GuardedBytes(GuardedBytes &&other) noexcept;
    GuardedBytes &operator=(GuardedBytes &&other) noexcept;
    ~GuardedBytes();

    uint8_t *data() {
        return data_;
    }
    const uint8_t *data() const {
        return data_;
    }
    size_t size() const {
        return size_;
    }
    const uint8_t *begin() const {
        return data_;
    }
    const uint8_t *end() const {
        return data_ + size_;
    }
    Flush flush() const {
        return flush_;
    }

private:
    void release();

    uint8_t *mapping_ = nullptr;  // guard page, data pages, guard page
    size_t mapping_size_ = 0;
    uint8_t *data_ = nullptr;
    size_t size_ = 0;
    Flush flush_ = Flush::End;
};

}  // namespace ropegen::test
