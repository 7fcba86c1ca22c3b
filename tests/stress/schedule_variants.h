// SPDX-License-Identifier: Apache-2.0
// Kernels of this build generated again with other schedule knobs (tests/stress/CMakeLists.txt),
// as kernel-table entries that ropegen::run_kernel runs like the shipped ones.
#pragma once

#include <string>
#include <vector>

#include "internal/kernel_table.h"
#include "schedule_variant_headers.h"
#include "support/kernels.h"

namespace ropegen::test {

struct ScheduleVariant {
    KernelEntry kernel;          ///< the base kernel's key and ISA, the variant's function
    const KernelEntry *base;     ///< the shipped kernel of the same key and ISA
    std::string knobs;           ///< the schedule knobs that differ from the base's
};

inline std::vector<ScheduleVariant> schedule_variants() {
    std::vector<ScheduleVariant> variants;
    auto add = [&](const char *name, const std::string &base_name, const char *knobs, KernelFunction function) {
        for (const KernelEntry *base : all_kernels()) {
            if (base->name == base_name) {
                KernelEntry kernel = *base;
                kernel.name = name;
                kernel.function = function;
                // Its output layout: a variant that names its style's rotation stores pair words
                // only with words (the generator reads one knob per style).
                const std::string named = knobs;
                const std::string knob = base->style == ROPE_STYLE_INTERLEAVED ? "interleaved_rotation=" : "half_rotation=";
                if (named.find(knob) != std::string::npos) {
                    kernel.pair_words = named.find(knob + "words") != std::string::npos;
                }
                variants.push_back({kernel, base, knobs});
                return;
            }
        }
        ADD_FAILURE() << "schedule variant " << name << ": no built kernel " << base_name;
    };
#define ROPEGEN_SCHEDULE_VARIANT(function, base, knobs) add(#function, base, knobs, &function);
#include "schedule_variants.inc"
#undef ROPEGEN_SCHEDULE_VARIANT
    return variants;
}

}  // namespace ropegen::test
