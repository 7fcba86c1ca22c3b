// SPDX-License-Identifier: Apache-2.0
#include "guarded_bytes.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <utility>

namespace ropegen::test {
namespace {

size_t page_size() {
    static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return size;
}

}  // namespace

GuardedBytes::GuardedBytes(size_t size, uint8_t fill, Flush flush) : size_(size), flush_(flush) {
    const size_t page = page_size();
    const size_t data_pages = (size + page - 1) / page;
    mapping_size_ = (data_pages + 2) * page;
    void *mapping = mmap(nullptr, mapping_size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) {
        throw std::bad_alloc();
    }
    mapping_ = static_cast<uint8_t *>(mapping);
    if (data_pages > 0 && mprotect(mapping_ + page, data_pages * page, PROT_READ | PROT_WRITE) != 0) {
        munmap(mapping_, mapping_size_);
        throw std::bad_alloc();
    }
    data_ = flush == Flush::End ? mapping_ + (data_pages + 1) * page - size : mapping_ + page;
    std::memset(data_, fill, size);
}

GuardedBytes::GuardedBytes(const uint8_t *bytes, size_t size, Flush flush) : GuardedBytes(size, 0, flush) {
    if (size > 0) {
        std::memcpy(data_, bytes, size);
    }
}

GuardedBytes::GuardedBytes(const GuardedBytes &other) : GuardedBytes(other.data_, other.size_, other.flush_) {
}

GuardedBytes &GuardedBytes::operator=(const GuardedBytes &other) {
    if (this != &other) {
        *this = GuardedBytes(other);
    }
    return *this;
}

GuardedBytes::GuardedBytes(GuardedBytes &&other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      flush_(other.flush_) {
}

GuardedBytes &GuardedBytes::operator=(GuardedBytes &&other) noexcept {
    if (this != &other) {
        release();
        mapping_ = std::exchange(other.mapping_, nullptr);
        mapping_size_ = std::exchange(other.mapping_size_, 0);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        flush_ = other.flush_;
    }
    return *this;
}

GuardedBytes::~GuardedBytes() {
    release();
}

void GuardedBytes::release() {
    if (mapping_ != nullptr) {
        munmap(mapping_, mapping_size_);
        mapping_ = nullptr;
    }
}

}  // namespace ropegen::test
