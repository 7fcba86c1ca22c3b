// SPDX-License-Identifier: Apache-2.0
// Address space reserved without being committed, for views that span more than 2^31 elements or
// 4 GiB: only the pages a test touches are backed.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace ropegen::test {

/// Anonymous read-write memory mapped with MAP_NORESERVE; data() is nullptr when the address
/// space could not be reserved (a test then skips, saying so).
class SparseBuffer {
public:
    explicit SparseBuffer(size_t bytes) : bytes_(bytes) {
        void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
    }
    ~SparseBuffer() {
        if (data_ != nullptr) {
            munmap(data_, bytes_);
        }
    }
    SparseBuffer(const SparseBuffer &) = delete;
    SparseBuffer &operator=(const SparseBuffer &) = delete;
    uint8_t *data() const {
        return data_;
    }
    size_t size() const {
        return bytes_;
    }

private:
    size_t bytes_;
    uint8_t *data_;
};

}  // namespace ropegen::test
