// SPDX-License-Identifier: Apache-2.0
#include "kernels.h"

#include <algorithm>
#include <memory>

namespace ropegen::test {

namespace {
std::vector<const KernelEntry *> entries_of(const KernelEntry *(*table_of)(size_t *)) {
    size_t count = 0;
    const KernelEntry *table = table_of(&count);
    std::vector<const KernelEntry *> entries;
    for (size_t i = 0; i < count; i++) {
        entries.push_back(&table[i]);
    }
    return entries;
}
}  // namespace

std::vector<const KernelEntry *> all_kernels() {
    return entries_of(kernel_table);
}

std::vector<const KernelEntry *> all_cuda_kernels() {
    return entries_of(cuda_kernel_table);
}

std::vector<rope_isa> isa_levels() {
    size_t count = 0;
    const IsaLevel *levels = ropegen::isa_levels(&count);
    std::vector<rope_isa> result;
    for (size_t i = 0; i < count; i++) {
        result.push_back(levels[i].isa);
    }
    return result;
}

std::vector<rope_isa> levels_with_kernels() {
    const std::vector<const KernelEntry *> kernels = all_kernels();
    std::vector<rope_isa> result;
    for (rope_isa isa : isa_levels()) {
        if (std::any_of(kernels.begin(), kernels.end(), [&](const KernelEntry *k) { return k->isa == isa; })) {
            result.push_back(isa);
        }
    }
    return result;
}

bool isa_from_name(const std::string &name, rope_isa *isa) {
    std::vector<rope_isa> candidates = isa_levels();
    candidates.push_back(ROPE_ISA_NONE);
    for (rope_isa candidate : candidates) {
        if (name == isa_name(candidate)) {
            *isa = candidate;
            return true;
        }
    }
    return false;
}

Runner dispatch_runner() {
    return [](const rope_params *params, rope_report *report) { return rope_dispatch(params, report); };
}

Runner plan_runner() {
    return [](const rope_params *params, rope_report *report) {
        rope_plan *made = nullptr;
        const rope_status status = rope_plan_create(params, &made, report);
        const std::unique_ptr<rope_plan, void (*)(rope_plan *)> plan(made, rope_plan_destroy);
        return status != ROPE_OK ? status : rope_plan_run(plan.get(), report);
    };
}

Runner kernel_runner(const KernelEntry &kernel) {
    return [&kernel](const rope_params *params, rope_report *report) { return run_kernel(kernel, params, report); };
}

const KernelEntry *first_matching_kernel(const rope_params &params, rope_isa max_isa) {
    for (const KernelEntry *k : all_kernels()) {
        if (k->isa <= max_isa && kernel_matches(*k, params) && pair_words_fit(*k, params) &&
            call_class_fits(*k, params)) {
            return k;
        }
    }
    return nullptr;
}

std::string missing_kernel_reason(const rope_params &params) {
    if (first_matching_kernel(params, rope_active_isa()) != nullptr) {
        return "";
    }
    return std::string("this build has no ") + reference::style_name(params.style) + " " +
           reference::source_name(params.angles.source) + " " + reference::dtype_name(params.q.dtype) +
           " kernel for head_dim " + std::to_string(params.q.sizes[3]) + " at ISA level " +
           isa_name(rope_active_isa()) + " (see ROPEGEN_DTYPES, ROPEGEN_HEAD_DIMS, ROPEGEN_ISAS)";
}

std::string missing_kernel_reason(rope_style style, rope_source source, rope_dtype dtype, int64_t head_dim) {
    rope_params params = rope_params_init();
    params.style = style;
    params.angles.source = source;
    params.q.dtype = dtype;
    params.q.sizes[3] = head_dim;
    return missing_kernel_reason(params);
}

std::string unsupported_reason(const KernelEntry &kernel) {
    if (kernel.isa <= detected_isa()) {
        return "";
    }
    return std::string(kernel.name) + " needs " + isa_name(kernel.isa) + " but this CPU supports only " +
           isa_name(detected_isa());
}

const char *call_class_suffix(const KernelEntry &kernel) {
    return kernel.min_call_bytes != 0 ? "_large" : kernel.in_place_calls ? "_inplace" : "";
}

std::string kernel_key(const KernelEntry &kernel) {
    const std::string name = kernel.name;
    const std::string suffix = call_class_suffix(kernel);
    return name.substr(0, name.rfind("__") - suffix.size());
}

CaseSpec kernel_case(const KernelEntry &kernel, int64_t any_head_dim) {
    CaseSpec c;
    c.style = kernel.style;
    c.dtype = kernel.dtype;
    c.source = kernel.source;
    c.head_dim = kernel.head_dim != 0 ? kernel.head_dim : any_head_dim;
    return c;
}

void PerKernelTest::SetUp() {
    const std::string reason = unsupported_reason(kernel());
    if (!reason.empty()) {
        GTEST_SKIP() << reason;
    }
}

}  // namespace ropegen::test
