// SPDX-License-Identifier: Apache-2.0
// The plain copy loops (see copy_loop.h), in their own translation unit for its compile options.
#include "copy_loop.h"

namespace ropebench {

void copy_loop(void *dst, const void *src, size_t bytes) {
    auto *__restrict out = static_cast<unsigned char *>(dst);
    const auto *__restrict in = static_cast<const unsigned char *>(src);
    for (size_t i = 0; i < bytes; i++) {
        out[i] = in[i];
    }
}

namespace {
// Zero, as a value the compiler cannot know: XOR with it makes rewrite_loop's stores real.
volatile unsigned char g_rewrite_key = 0;
}  // namespace

void rewrite_loop(void *dst, const void *, size_t bytes) {
    auto *data = static_cast<unsigned char *>(dst);
    const unsigned char key = g_rewrite_key;
    for (size_t i = 0; i < bytes; i++) {
        data[i] ^= key;
    }
}

}  // namespace ropebench
