// SPDX-License-Identifier: Apache-2.0
// rope_build_cos_sin_cache(): the cos/sin tables of the cache source, made by the computed-source
// kernels themselves, so that the numerics are theirs by construction. The half style rotates the
// pair (x_i, x_{i+P}) = (1, 0) of every token to (c_i, s_i): one call over a cache_len-token
// sequence whose input is a single unit row (token stride 0), written to a staging tensor whose
// halves are then copied to the caller's tables.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "internal/enum_value.h"
#include "internal/kernel_table.h"
#include "internal/runtime_state.h"
#include "internal/validate.h"
#include "ropegen/rope.h"

namespace ropegen {
namespace {

// 1.0 in `dtype`, as stored.
void store_one(rope_dtype dtype, uint8_t *element) {
    const uint32_t f32_one = 0x3f800000u;
    const uint16_t f16_one = 0x3c00u, bf16_one = 0x3f80u;
    if (dtype == ROPE_DTYPE_F32) {
        std::memcpy(element, &f32_one, sizeof(f32_one));
    } else {
        std::memcpy(element, dtype == ROPE_DTYPE_F16 ? &f16_one : &bf16_one, sizeof(uint16_t));
    }
}

rope_status fail(rope_report *report, rope_status status, const std::string &message) {
    if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
        report->status = status;
        set_report_message(report, message);
    }
    return status;
}

// The rules of the spec's own fields; the scaling and the scalars are checked by rope_dispatch.
rope_status check(const rope_cache_spec *spec, rope_report *report) {
    std::ostringstream m;
    if (spec == nullptr) {
        return fail(report, ROPE_ERR_NULL_POINTER, "spec is NULL; rope_build_cos_sin_cache needs a rope_cache_spec");
    }
    if (spec->struct_size != sizeof(rope_cache_spec)) {
        m << "spec.struct_size=" << spec->struct_size << " is not a rope_cache_spec size this library knows ("
          << sizeof(rope_cache_spec) << ")";
        return fail(report, ROPE_ERR_ABI_MISMATCH, m.str());
    }
    const int32_t source = enum_value(spec->source);
    if (source != ROPE_SOURCE_COMPAT && source != ROPE_SOURCE_PRECISE) {
        m << "spec.source=" << source << " must be a computed source (1 compat, 2 precise)";
        return fail(report, ROPE_ERR_BAD_ENUM, m.str());
    }
    const int32_t dtype = enum_value(spec->cache_dtype);
    if (dtype < ROPE_DTYPE_F32 || dtype > ROPE_DTYPE_BF16) {
        m << "spec.cache_dtype=" << dtype << " is not a rope_dtype (0 f32, 1 f16, 2 bf16)";
        return fail(report, ROPE_ERR_BAD_ENUM, m.str());
    }
    if (spec->rotary_dim < 2 || spec->rotary_dim % 2 != 0) {
        m << "spec.rotary_dim=" << spec->rotary_dim << " must be even and >= 2 (spec §1)";
        return fail(report, ROPE_ERR_BAD_ROTARY, m.str());
    }
    if (spec->cos_cache == nullptr || spec->sin_cache == nullptr) {
        m << (spec->cos_cache == nullptr ? "spec.cos_cache" : "spec.sin_cache")
          << " is NULL; the builder writes both tables, cache_len rows each";
        return fail(report, ROPE_ERR_NULL_POINTER, m.str());
    }
    if (spec->cache_len <= 0 || spec->cache_len > kMaxCallTokens) {
        m << "spec.cache_len=" << spec->cache_len << " must be in [1, 2^30]: the rows are the tokens of one call";
        return fail(report, ROPE_ERR_BAD_VALUE, m.str());
    }
    const int64_t pairs = spec->rotary_dim / 2;
    const int64_t row_stride = spec->cache_row_stride != 0 ? spec->cache_row_stride : pairs;
    if (row_stride < pairs || row_stride > std::numeric_limits<int32_t>::max()) {
        m << "spec.cache_row_stride=" << spec->cache_row_stride << " must be 0 or in [rotary_dim/2=" << pairs << ", 2^31)";
        return fail(report, ROPE_ERR_BAD_STRIDE, m.str());
    }
    // Each table is cache_len rows of `pairs` elements, `row_stride` apart, so the two may
    // interleave (vLLM's cos_sin_cache: sin_cache = cos_cache + R/2, row stride R). They share a
    // byte exactly when their distance lies within a row's bytes of a row strides, 0 <= a < cache_len:
    // the nearest such a are rows_apart and rows_apart + 1.
    const uint64_t element = dtype_bytes(spec->cache_dtype), row_bytes = pairs * element,
                   stride_bytes = row_stride * element, last_row = spec->cache_len - 1;
    const auto cos_first = reinterpret_cast<uintptr_t>(spec->cos_cache), sin_first = reinterpret_cast<uintptr_t>(spec->sin_cache);
    const uint64_t distance = cos_first > sin_first ? cos_first - sin_first : sin_first - cos_first;
    const uint64_t rows_apart = distance / stride_bytes, into_row = distance % stride_bytes;
    if ((rows_apart <= last_row && into_row < row_bytes) || (rows_apart < last_row && stride_bytes - into_row < row_bytes)) {
        m << "spec.cos_cache and spec.sin_cache overlap: " << distance << " bytes apart, with cache_len=" << spec->cache_len
          << " rows of rotary_dim/2=" << pairs << " values, a row every " << row_stride
          << " elements, they share an element; they must be disjoint (their rows may interleave)";
        return fail(report, ROPE_ERR_OVERLAP, m.str());
    }
    return ROPE_OK;
}

// A message of the inner call, which names rope_params fields, in the terms of the spec.
std::string spec_message(const std::string &message, rope_status status, int64_t rows) {
    static const std::pair<std::string_view, std::string_view> kFields[] = {
        {"angles.", "spec."}, {"scaling.", "spec.scaling."}, {"rotary_dim", "spec.rotary_dim"}};
    std::string out;
    for (size_t i = 0; i < message.size();) {
        const auto *field = std::find_if(std::begin(kFields), std::end(kFields),
                                         [&](const auto &f) { return message.compare(i, f.first.size(), f.first) == 0; });
        if (field != std::end(kFields)) {
            out += field->second;
            i += field->first.size();
        } else {
            out += message[i++];
        }
    }
    // The only positions are the rows: a scaling's frequencies above 1 limit them.
    if (status == ROPE_ERR_POSITION_OUT_OF_RANGE) {
        return "spec.cache_len=" + std::to_string(rows) + " (rows are positions 0.." + std::to_string(rows - 1) + "): " + out;
    }
    return out;
}

rope_status build_cos_sin_cache(const rope_cache_spec *spec, rope_report *report) {
    clear_report(report);
    if (const rope_status status = check(spec, report); status != ROPE_OK) {
        return status;
    }
    const rope_dtype dtype = spec->cache_dtype;
    const size_t element = dtype_bytes(dtype);
    const int64_t rotary = spec->rotary_dim, pairs = rotary / 2, rows = spec->cache_len;
    auto out_of_memory = [&](size_t bytes, const std::string &what) {
        return fail(report, ROPE_ERR_INTERNAL, "out of memory: could not allocate " + std::to_string(bytes) +
                                                   " bytes of staging for " + what + "; nothing was written");
    };
    // Blocks left unwritten until the call is validated: until then they are address space, not
    // memory (R is below 2^31, cache_len at most 2^30: the byte counts fit size_t).
    const size_t row_bytes = static_cast<size_t>(rotary) * element, staging_bytes = static_cast<size_t>(rows) * row_bytes;
    const std::unique_ptr<uint8_t[]> unit_row(new (std::nothrow) uint8_t[row_bytes]);
    if (unit_row == nullptr) {
        return out_of_memory(row_bytes, "spec.rotary_dim=" + std::to_string(rotary));
    }

    rope_params p = rope_params_init();
    p.style = ROPE_STYLE_HALF;
    p.angles.source = spec->source;
    p.angles.base = spec->base;
    p.angles.attn_factor = spec->attn_factor;
    p.scaling = spec->scaling;
    // Validated before the staging is allocated or anything written, so that bad arguments get
    // their status, not out of memory: one token at the last row, in place on the unit row (a
    // query reads nothing), meets every rule the rows do (the largest position; DYNAMIC and
    // LONGROPE: the length cache_len).
    rope_params last_row = p;
    last_row.q = rope_tensor{unit_row.get(), dtype, {1, 1, 1, rotary}, {rotary, rotary, rotary, 1}};
    last_row.q_out = last_row.q;
    last_row.positions.offset = rows - 1;
    if (const rope_status status = dispatch(&last_row, report, false); status != ROPE_OK) {
        if (report != nullptr && report->struct_size >= sizeof(rope_report)) {
            set_report_message(report, spec_message(report->message, status, rows));
        }
        return status;
    }
    const std::unique_ptr<uint8_t[]> staging(new (std::nothrow) uint8_t[staging_bytes]);  // the kernel writes it all
    if (staging == nullptr) {
        return out_of_memory(staging_bytes, "spec.cache_len=" + std::to_string(rows));
    }
    for (int64_t i = 0; i < pairs; i++) {
        store_one(dtype, &unit_row[static_cast<size_t>(i) * element]);  // x_i = 1
    }
    std::memset(&unit_row[static_cast<size_t>(pairs) * element], 0, static_cast<size_t>(pairs) * element);  // x_{i+P} = 0
    p.q = rope_tensor{unit_row.get(), dtype, {1, rows, 1, rotary}, {0, 0, 0, 1}};
    p.q_out = rope_tensor{staging.get(), dtype, {1, rows, 1, rotary}, {rows * rotary, rotary, rotary, 1}};
    if (const rope_status status = dispatch(&p, report, true); status != ROPE_OK) {
        return status;
    }

    const int64_t row_stride = spec->cache_row_stride != 0 ? spec->cache_row_stride : pairs;
    auto *cos = static_cast<uint8_t *>(spec->cos_cache), *sin = static_cast<uint8_t *>(spec->sin_cache);
    const size_t half = static_cast<size_t>(pairs) * element;
    for (int64_t m = 0; m < rows; m++) {
        const uint8_t *row = &staging[static_cast<size_t>(m * rotary) * element];
        std::memcpy(cos + static_cast<size_t>(m * row_stride) * element, row, half);
        std::memcpy(sin + static_cast<size_t>(m * row_stride) * element, row + half, half);
    }
    return ROPE_OK;
}

}  // namespace
}  // namespace ropegen

extern "C" rope_status rope_build_cos_sin_cache(const rope_cache_spec *spec, rope_report *report) {
    ropegen::ensure_initialized();  // reads the environment, like every entry point, also for a spec refused
    return ropegen::without_exceptions(report, [&] { return ropegen::build_cos_sin_cache(spec, report); });
}
