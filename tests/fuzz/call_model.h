// SPDX-License-Identifier: Apache-2.0
// What rope.h and ROPE_SPEC.md say about one call, worked out without the library: the rules the
// call breaks (then it must be rejected, with the status of one of them), and the statuses a
// conservative library may return although no rule is broken (limits its messages document:
// overlap judged by byte range, positions and row strides below 2^31, ...).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fuzz_call.h"
#include "ropegen/rope.h"

namespace ropegen::fuzz {

struct Verdict {
    std::vector<std::pair<rope_status, std::string>> broken;  ///< rule broken: status and why
    std::vector<rope_status> tolerated;                       ///< also acceptable rejections

    bool valid() const {
        return broken.empty();
    }
    /// `status` is a rejection this call may get: a broken rule's status or a tolerated one.
    bool allows_rejection(int32_t status) const;
    /// The broken rules and tolerated statuses, one per line.
    std::string describe() const;
};

Verdict judge_validity(const FuzzCall &call);

}  // namespace ropegen::fuzz
