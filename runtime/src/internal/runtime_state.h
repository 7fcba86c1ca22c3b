// SPDX-License-Identifier: Apache-2.0
// Process-wide state of the runtime (CPU level, cap, thread settings) and the per-call context
// that travels through Halide as user_context.
#pragma once

#include <string>

#include "ropegen/rope.h"

namespace ropegen {

/// Everything one call carries into the Halide runtime hooks (passed as user_context).
struct CallContext {
    rope_report *report;     ///< may be null
    int num_threads;         ///< 0: the library's pool as configured; 1: the calling thread
    int parallel_error = 0;  ///< first non-zero result of a parallel loop (kernels built without
                             ///< asserts do not check it themselves)
};

/// Initialises the runtime once (thread-safe): CPU detection, ROPE_MAX_ISA, ROPE_NUM_THREADS,
/// and the Halide hooks (error handler, parallel loop). Every public entry point calls it.
void ensure_initialized();

/// The level the dispatcher may use now: detected_isa() lowered by the cap.
rope_isa usable_isa();

/// Writes a message into `report` (when given), truncated to fit.
void set_report_message(rope_report *report, const std::string &message);

}  // namespace ropegen
