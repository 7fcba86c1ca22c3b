// SPDX-License-Identifier: Apache-2.0
// The plain copy loop (see copy_loop.h), in its own translation unit for its compile options.
#include "copy_loop.h"

namespace ropebench {

void copy_loop(void *dst, const void *src, size_t bytes) {
    auto *__restrict out = static_cast<unsigned char *>(dst);
    const auto *__restrict in = static_cast<const unsigned char *>(src);
    for (size_t i = 0; i < bytes; i++) {
        out[i] = in[i];
    }
}

}  // namespace ropebench
