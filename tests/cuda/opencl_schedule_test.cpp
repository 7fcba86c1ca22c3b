// SPDX-License-Identifier: Apache-2.0
// The GPU schedule where there is no GPU: the CUDA kernels' keys and schedule knobs, generated
// again for Halide's OpenCL target and run on PoCL (OpenCL on the CPU) against the fp64 oracle.
// What it proves is the schedule's logic, common to every GPU target: q and k fused in one launch
// with different head counts, the head and pair tiles and their guards, cos/sin in shared memory
// with its specializations (positions given or not), the pass-through lanes, the clamped cache
// rows. f32 kernels only (PoCL's CPU device has no half type). What it cannot prove is the PTX
// itself, nor the 16-bit paths (ptxas and a GPU do that).
// Buffers live in host memory; Halide copies them to the OpenCL device and back.
#include <HalideRuntime.h>
#include <HalideRuntimeOpenCL.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "internal/kernel_table.h"
#include "opencl_kernel_headers.h"
#include "gpu_cases.h"
#include "support/rope_case.h"

namespace ropegen::test {
namespace {

struct OpenclKernel {
    const char *name;
    rope_style style;
    rope_source source;
    rope_dtype dtype;
    int head_dim;
    KernelFunction function;
};

const OpenclKernel kKernels[] = {
#define ROPEGEN_OPENCL_KERNEL(name, style, source, dtype, head_dim) {#name, style, source, dtype, head_dim, &name},
#include "opencl_kernels.inc"
#undef ROPEGEN_OPENCL_KERNEL
};

std::string g_halide_error;  // the last message of the Halide runtime (tests run one at a time)

void record_error(void *, const char *message) {
    g_halide_error = message;
}

halide_type_t halide_type(rope_dtype dtype) {
    switch (dtype) {
    case ROPE_DTYPE_F16: return halide_type_t(halide_type_float, 16);
    case ROPE_DTYPE_BF16: return halide_type_t(halide_type_bfloat, 16);
    default: return halide_type_t(halide_type_float, 32);
    }
}

/// A halide_buffer_t over host memory, with its own dimensions.
struct HostBuffer {
    halide_buffer_t raw{};
    halide_dimension_t dims[5]{};
    HostBuffer(const void *host, halide_type_t type, std::vector<halide_dimension_t> shape) {
        raw.host = static_cast<uint8_t *>(const_cast<void *>(host));
        raw.type = type;
        raw.dimensions = static_cast<int>(shape.size());
        std::copy(shape.begin(), shape.end(), dims);
        raw.dim = dims;
    }
    HostBuffer(const HostBuffer &) = delete;
    HostBuffer &operator=(const HostBuffer &) = delete;
    bool empty() const {
        for (int d = 0; d < raw.dimensions; d++) {
            if (dims[d].extent == 0) {
                return true;
            }
        }
        return false;
    }
};

halide_dimension_t dim(int64_t min, int64_t extent, int64_t stride) {
    return halide_dimension_t(static_cast<int32_t>(min), static_cast<int32_t>(extent), static_cast<int32_t>(stride));
}

/// Runs one kernel on the call's host buffers through OpenCL, the way the dispatcher lays out a
/// call of a single slice (local coordinates, the same views), then copies the outputs back.
Runner opencl_runner(const OpenclKernel &kernel) {
    return [&kernel](const rope_params *p, rope_report *report) -> rope_status {
        const int64_t head_dim = p->q.sizes[3];
        const int64_t rotary = p->rotary_dim != 0 ? p->rotary_dim : head_dim, offset = p->rotary_offset;
        const int64_t pairs = rotary / 2, element = p->q.dtype == ROPE_DTYPE_F32 ? 4 : 2;
        const halide_type_t type = halide_type(p->q.dtype);
        const bool has_k = p->k.data != nullptr;
        std::vector<std::unique_ptr<HostBuffer>> inputs, outputs;
        auto outer = [](const rope_tensor &t, int64_t heads) {
            return std::vector<halide_dimension_t>{dim(0, heads, t.strides[2]), dim(0, t.sizes[1], t.strides[1]),
                                                   dim(0, t.sizes[0], t.strides[0])};
        };
        auto with = [](std::vector<halide_dimension_t> inner, const std::vector<halide_dimension_t> &rest) {
            inner.insert(inner.end(), rest.begin(), rest.end());
            return inner;
        };
        auto add_tensor = [&](const rope_tensor &in, const rope_tensor &out, bool present) {
            const int64_t heads = present ? in.sizes[2] : 0;
            auto *base = static_cast<uint8_t *>(out.data);
            const bool in_place = in.data == out.data;
            inputs.push_back(std::make_unique<HostBuffer>(in.data, type, with({dim(0, head_dim, 1)}, outer(in, heads))));
            const std::vector<halide_dimension_t> pair_half =
                p->style == ROPE_STYLE_HALF ? std::vector{dim(0, pairs, 1), dim(0, 2, pairs)}
                                            : std::vector{dim(0, 2, 1), dim(0, pairs, 2)};
            outputs.push_back(std::make_unique<HostBuffer>(base + offset * element, type, with(pair_half, outer(out, heads))));
            outputs.push_back(std::make_unique<HostBuffer>(base, type, with({dim(0, in_place ? 0 : offset, 1)}, outer(out, heads))));
            const int64_t tail = offset + rotary;
            outputs.push_back(std::make_unique<HostBuffer>(base + tail * element, type,
                                                           with({dim(tail, in_place ? 0 : head_dim - tail, 1)}, outer(out, heads))));
        };
        add_tensor(p->q, p->q_out, true);
        add_tensor(has_k ? p->k : p->q, has_k ? p->k_out : p->q_out, has_k);

        const rope_positions &pos = p->positions;
        const bool table = pos.kind == ROPE_POSITIONS_TABLE, given = table || pos.data != nullptr;
        const int64_t scale = pos.index_type == ROPE_INDEX_INT64 ? 2 : 1;
        int32_t unused = 0;
        HostBuffer positions(given ? pos.data : &unused, halide_type_t(halide_type_int, 32),
                             {dim(0, p->q.sizes[1], table ? pos.strides[1] * scale : 0),
                              dim(0, p->q.sizes[0], given ? pos.strides[0] * scale : 0), dim(0, 1, 0)});
        const rope_angles &a = p->angles;
        const bool cache = a.source == ROPE_SOURCE_CACHE, narrow = cache && a.cache_dtype != ROPE_DTYPE_F32;
        const int64_t row_stride = a.cache_row_stride != 0 ? a.cache_row_stride : pairs;
        auto table_buffer = [&](const void *data, bool used, halide_type_t table_type) {
            return std::make_unique<HostBuffer>(used ? data : &unused, table_type,
                                                std::vector{dim(0, used ? pairs : 1, 1), dim(0, used ? a.cache_len : 1, used ? row_stride : 0)});
        };
        const halide_type_t f32 = halide_type_t(halide_type_float, 32);
        auto cos = table_buffer(a.cos_cache, cache && !narrow, f32), sin = table_buffer(a.sin_cache, cache && !narrow, f32);
        auto cos_narrow = table_buffer(a.cos_cache, narrow, type), sin_narrow = table_buffer(a.sin_cache, narrow, type);

        // Empty outputs (pass-through lanes of whole heads) get no device memory of their own:
        // they share one small allocation that is never read or written.
        HostBuffer spare(&unused, halide_type_t(halide_type_int, 32), {dim(0, 1, 1)});
        // GPU kernels take no scaling (ROPE_SCALING_NONE): its per-pair tables are placeholders.
        HostBuffer short_factor(&unused, f32, {dim(0, 1, 1)}), long_factor(&unused, f32, {dim(0, 1, 1)}),
            given_inv_freq(&unused, f32, {dim(0, 1, 1)});
        std::vector<halide_buffer_t *> all{&positions.raw,   &cos->raw,          &sin->raw,        &cos_narrow->raw,
                                           &sin_narrow->raw, &short_factor.raw, &long_factor.raw, &given_inv_freq.raw};
        for (auto &b : inputs) {
            all.push_back(&b->raw);
        }
        for (halide_buffer_t *b : all) {
            b->set_host_dirty(true);
        }
        if (halide_device_malloc(nullptr, &spare.raw, halide_opencl_device_interface()) != 0) {
            std::snprintf(report->message, sizeof(report->message), "OpenCL: %s", g_halide_error.c_str());
            return ROPE_ERR_DEVICE;
        }
        for (auto &b : outputs) {
            if (b->empty()) {
                b->raw.device = spare.raw.device;
                b->raw.device_interface = spare.raw.device_interface;
            }
        }
        const float sin_sign = p->direction == ROPE_INVERSE ? -1.0f : 1.0f;
        const int32_t step = table ? 0 : 1, base_position = given ? 0 : static_cast<int32_t>(pos.offset);
        int result = kernel.function(nullptr, &inputs[0]->raw, &inputs[1]->raw, &positions.raw, given, base_position, step,
                                     &cos->raw, &sin->raw, &cos_narrow->raw, &sin_narrow->raw, narrow,
                                     a.base != 0 ? a.base : 10000.0, a.attn_factor != 0 ? a.attn_factor : 1.0f, sin_sign,
                                     static_cast<int32_t>(offset), static_cast<int32_t>(pairs), ROPE_SCALING_NONE, 1.0f,
                                     1, 1.0f, 2.0f, 32.0f, 1.0f, true, &short_factor.raw, &long_factor.raw,
                                     &given_inv_freq.raw, p->round_cos_sin != 0, static_cast<int32_t>(pairs),
                                     static_cast<int32_t>(pairs), &outputs[0]->raw,
                                     &outputs[1]->raw, &outputs[2]->raw, &outputs[3]->raw, &outputs[4]->raw, &outputs[5]->raw);
        for (auto &b : outputs) {
            if (b->empty()) {
                b->raw.device = 0;
                b->raw.device_interface = nullptr;
            } else if (result == 0) {
                result = halide_copy_to_host(nullptr, &b->raw);
            }
            all.push_back(&b->raw);
        }
        all.push_back(&spare.raw);
        for (halide_buffer_t *b : all) {
            halide_device_free(nullptr, b);
        }
        if (result != 0) {
            std::snprintf(report->message, sizeof(report->message), "kernel %s failed (%d): %s", kernel.name, result,
                          g_halide_error.c_str());
            return ROPE_ERR_INTERNAL;
        }
        return ROPE_OK;
    };
}

/// Why this machine cannot run OpenCL kernels, or empty when it can.
std::string opencl_unavailable() {
    static const std::string reason = [] {
        HostBuffer probe(nullptr, halide_type_t(halide_type_int, 32), {dim(0, 1, 1)});
        if (halide_device_malloc(nullptr, &probe.raw, halide_opencl_device_interface()) != 0) {
            return "no OpenCL device (" + g_halide_error + "); cmake/setup.sh installs PoCL";
        }
        halide_device_free(nullptr, &probe.raw);
        return std::string();
    }();
    return reason;
}

class OpenclScheduleTest : public ::testing::TestWithParam<const OpenclKernel *> {
protected:
    void SetUp() override {
        halide_set_error_handler(record_error);
        if (const std::string reason = opencl_unavailable(); !reason.empty()) {
            GTEST_SKIP() << reason;
        }
    }
    const OpenclKernel &kernel() const {
        return *GetParam();
    }
    CaseSpec base_case() const {
        CaseSpec c;
        c.style = kernel().style;
        c.source = kernel().source;
        c.dtype = kernel().dtype;
        c.head_dim = kernel().head_dim != 0 ? kernel().head_dim : 80;
        c.q_heads = 5;  // more heads than one head tile holds at head_dim 64: two tiles
        c.k_heads = 2;
        c.positions.scalar_offset = 9;
        return c;
    }
};

TEST_P(OpenclScheduleTest, MatchesOracle) {
    const Runner runner = opencl_runner(kernel());
    for (const CaseSpec &c : gpu_kernel_cases(base_case(), kernel().head_dim == 0)) {
        expect_correct(c, runner);
    }
}

std::vector<const OpenclKernel *> all_opencl_kernels() {
    std::vector<const OpenclKernel *> kernels;
    for (const OpenclKernel &k : kKernels) {
        kernels.push_back(&k);
    }
    return kernels;
}

INSTANTIATE_TEST_SUITE_P(OpenclSchedule, OpenclScheduleTest, ::testing::ValuesIn(all_opencl_kernels()),
                         [](const ::testing::TestParamInfo<const OpenclKernel *> &info) { return std::string(info.param->name); });

}  // namespace
}  // namespace ropegen::test

// Debian ships the OpenCL loader as libOpenCL.so.1 (the unversioned name only with its -dev
// package), where Halide's runtime looks for libOpenCL.so.
extern "C" void *halide_opencl_get_symbol(void *, const char *name) {
    static void *library = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    return library != nullptr ? dlsym(library, name) : nullptr;
}
