// SPDX-License-Identifier: Apache-2.0
// One RoPE call described as data (CaseSpec), materialised with real buffers (RopeCall), and
// judged against the fp64 oracle with the tolerances of spec §7. Shared by the kernel, property
// and dispatch tests so that each of them states only what it varies.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/rope_reference.h"
#include "ropegen/rope.h"
#include "support/tensor.h"

namespace ropegen::test {

/// How a case passes positions (spec §5).
enum class PositionMode {
    ScalarOffset,  ///< OFFSET kind, data NULL: offset + s
    BatchOffsets,  ///< OFFSET kind, one offset per batch item: values[b] + s
    Table,         ///< TABLE kind: values[b * seq + s]
};

struct PositionsSpec {
    PositionMode mode = PositionMode::ScalarOffset;
    rope_index_type index_type = ROPE_INDEX_INT32;
    int64_t scalar_offset = 0;
    std::vector<int64_t> values;  ///< BatchOffsets: [batch]; Table: [batch * seq] ([seq] if shared_rows)
    bool transposed = false;      ///< Table stored [seq][batch] (strides {1, batch + pad})
    bool shared_rows = false;     ///< Table: one row [seq] for every batch item (batch stride 0)
    int64_t pad = 0;              ///< unused elements (holding -1) between rows or offsets
};

/// Where the tensors live.
enum class Memory {
    Separate,          ///< four buffers
    InPlace,           ///< q_out == q, k_out == k
    PackedQkv,         ///< q, k are views into one [B, S, Hq + 2 Hk, D] buffer; outputs separate
    PackedQkvInPlace,  ///< as PackedQkv, rotated in place
    PerHeadQkvInPlace,  ///< q, k are lane slices of each head's slot in one [B, S, H, 3D] buffer
                        ///< (GPT-NeoX's fused QKV), rotated in place
};

enum class Fill { Uniform, Nonzero, Adversarial, RandomBits };

struct CaseSpec {
    rope_style style = ROPE_STYLE_HALF;
    rope_dtype dtype = ROPE_DTYPE_F32;
    rope_source source = ROPE_SOURCE_CACHE;
    rope_direction direction = ROPE_FORWARD;
    int64_t batch = 2, seq = 5, q_heads = 3;
    int64_t k_heads = 2;  ///< 0: q only (k.data NULL)
    int64_t head_dim = 64;
    int rotary_dim = 0;   ///< 0: head_dim (passed as 0, the default)
    int rotary_offset = 0;
    Layout layout = Layout::BSHD;
    std::optional<Layout> out_layout;  ///< Separate memory: the outputs' layout (default: layout)
    int64_t row_pad = 0;               ///< Separate memory: unused elements after every head
    Memory memory = Memory::Separate;
    PositionsSpec positions;
    double base = 0;          ///< passed as is; 0 means 10000
    float attn_factor = 0;    ///< passed as is; 0 means 1
    int64_t cache_len = 0;    ///< cache source: 0 means max position + 3
    int64_t cache_row_pad = 0;  ///< cache source: row stride = R/2 + pad (0: stride passed as 0)
    bool cache_in_dtype = false;  ///< cache source: tables stored in the tensor dtype, not f32
    bool nan_in_cache = false;    ///< cache source: NaNs of every kind among the entries the call reads
    reference::Scaling scaling;   ///< computed sources: frequency scaling (spec §6)
    bool round_cos_sin = false;   ///< the parity mode (spec §4)
    /// mrope (spec §6): pairs per stream; positions (Table mode) then hold three [batch][seq]
    /// streams in `values`, stored one after the other with a gap.
    std::array<int, 3> mrope_sections{0, 0, 0};
    bool mrope() const {
        return mrope_sections[0] != 0 || mrope_sections[1] != 0 || mrope_sections[2] != 0;
    }
    Fill fill = Fill::Uniform;
    uint64_t seed = 1;
    int32_t num_threads = 0;
    /// Which end of every buffer the call sees (tensors, positions, cos/sin tables) touches its
    /// guard page: End catches reads and writes past the end, Start before the beginning.
    GuardedBytes::Flush flush = GuardedBytes::Flush::End;

    int effective_rotary_dim() const {
        return rotary_dim != 0 ? rotary_dim : static_cast<int>(head_dim);
    }
    double effective_base() const {
        return base != 0 ? base : 10000.0;
    }
    double effective_attn_factor() const {
        return attn_factor != 0 ? attn_factor : reference::scaling_attn_factor(scaling);
    }
    /// A one-line summary for failure messages.
    std::string describe() const;
};

/// Runs one call: rope_dispatch, or a specific kernel through ropegen::run_kernel.
using Runner = std::function<rope_status(const rope_params *, rope_report *)>;

/// Copies of buffers taken at one moment, to prove later that a call wrote nothing (or nothing
/// outside its outputs).
class Snapshot {
public:
    /// Records `tensor`'s buffer (once per buffer; empty tensors are ignored).
    void add(const Tensor &tensor);
    /// No byte of any recorded buffer changed.
    ::testing::AssertionResult unchanged() const;
    /// No element outside `outputs` changed.
    ::testing::AssertionResult unchanged_outside(const std::vector<const Tensor *> &outputs) const;

private:
    std::vector<std::pair<std::shared_ptr<Storage>, std::vector<uint8_t>>> before_;
};

/// The buffers of one case, filled deterministically from its seed, with copies of everything
/// taken before the call so that the results can be judged afterwards.
class RopeCall {
public:
    explicit RopeCall(CaseSpec spec);
    RopeCall(const RopeCall &) = delete;
    RopeCall &operator=(const RopeCall &) = delete;

    const CaseSpec &spec() const {
        return spec_;
    }
    /// The arguments of the call (fresh each time; tests may change fields before running).
    rope_params params() const;
    /// Changes the inputs after construction (and re-takes the copies the checks compare with).
    void modify_inputs(const std::function<void(Tensor &q, Tensor &k)> &edit);
    /// Runs the call; returns its status, keeps the report.
    rope_status run(const Runner &runner);
    const rope_report &report() const {
        return report_;
    }

    int64_t position(int64_t b, int64_t s) const {
        return positions_[b * spec_.seq + s];
    }
    /// cos/sin of spec §5 for a position of batch item b, direction applied: what the oracle rotates by.
    reference::CosSin angles(int64_t b, int64_t position) const;
    /// The length of batch item b's sequence (spec §6): its largest position + 1.
    int64_t sequence_length(int64_t b) const;
    /// The oracle's result for one head of q (is_k false) or k, from the inputs before the call.
    std::vector<double> reference_head(bool is_k, int64_t b, int64_t s, int64_t h) const;

    /// Every output element against the oracle (spec §7); lanes outside the rotary slice bit-exact.
    ::testing::AssertionResult check_outputs() const;
    /// No byte outside q_out/k_out changed (inputs, padding, v of a packed buffer, the tables).
    ::testing::AssertionResult check_untouched_outside_outputs() const;
    /// No byte of any buffer or table changed (after a failed call).
    ::testing::AssertionResult check_all_unchanged() const;

    Tensor q, k, q_out, k_out;  ///< what the call sees (k empty when k_heads == 0)
    Tensor q_in, k_in;          ///< deep copies of q and k before the call
    Tensor v;                   ///< packed memory only: the v heads, which must stay untouched

private:
    void build_positions();
    void snapshot();
    /// The oracle's rotation of every head of token (b, s).
    reference::RotationMatrix token_rotation(int64_t b, int64_t s) const;

    CaseSpec spec_;
    std::vector<int64_t> positions_;  ///< resolved, [b * seq + s] (mrope: [stream][b * seq + s])
    GuardedBytes positions_table_;    ///< what positions.data points at: the entries the call may read, no more
    int64_t position_strides_[2] = {0, 0};
    int64_t stream_stride_ = 0;  ///< mrope: elements between the stored streams
    reference::CosSinCache cache_;         ///< the oracle's tables (values narrowed when cache_in_dtype)
    GuardedBytes cos_table_, sin_table_;  ///< what the call reads: cache_ up to the last row's R/2 values
    GuardedBytes short_factor_, long_factor_, inv_freq_;  ///< the scaling's tables: R/2 values each
    Snapshot before_;
    /// The tables the call only reads (positions, cos/sin, the scaling's), as they were.
    std::vector<std::pair<const GuardedBytes *, std::vector<uint8_t>>> tables_before_;
    ::testing::AssertionResult tables_unchanged() const;
    rope_report report_ = rope_report_init();
};

/// The D lanes of one head after a call (`out_bits`) against the oracle's `rotation` of its lanes
/// before it (`in_bits`), as check_outputs() judges them, for a call `spec` describes (dtype,
/// style, source, rotary slice): for buffers that no RopeCall owns.
::testing::AssertionResult check_head(const CaseSpec &spec, const reference::RotationMatrix &rotation,
                                      const std::vector<uint32_t> &in_bits, const std::vector<uint32_t> &out_bits);

/// Runs `spec` with `runner`, asserting success, correct outputs and untouched memory (and,
/// when given, that report.kernel names `kernel`).
void expect_correct(const CaseSpec &spec, const Runner &runner, const char *kernel = nullptr);

/// The runner of the public entry point (support/kernels.cpp: the oracle and the calls it judges
/// are built without the library, so that tests of other kernel builds can use them).
Runner dispatch_runner();

/// A plan of the call (rope_plan_create), run once.
Runner plan_runner();

/// A plan that rope_plan_destroy frees.
using PlanPtr = std::unique_ptr<rope_plan, void (*)(rope_plan *)>;

/// A packed (THD) f32 call of the compat source, q only: q = 0.5 and q_out = -7 everywhere, an
/// offset per sequence, which makes the dispatcher run a kernel per sequence.
struct VarlenCompatCall {
    static constexpr float kUnwritten = -7.0f;

    VarlenCompatCall(std::vector<int32_t> cu_seqlens_, std::vector<int32_t> offsets_, int64_t heads, int64_t head_dim,
                     int32_t num_threads)
        : cu_seqlens(std::move(cu_seqlens_)), offsets(std::move(offsets_)) {
        const int64_t tokens = cu_seqlens.back();
        q.assign(static_cast<size_t>(tokens * heads * head_dim), 0.5f);
        out.assign(q.size(), kUnwritten);
        params.q = rope_tensor{q.data(), ROPE_DTYPE_F32, {1, tokens, heads, head_dim}, {tokens * heads * head_dim, heads * head_dim, head_dim, 1}};
        params.q_out = params.q;
        params.q_out.data = out.data();
        params.angles.source = ROPE_SOURCE_COMPAT;
        params.positions.kind = ROPE_POSITIONS_OFFSET;
        params.positions.data = offsets.data();
        params.positions.strides[0] = 1;
        params.varlen.cu_seqlens = cu_seqlens.data();
        params.varlen.num_seqs = static_cast<int64_t>(offsets.size());
        params.num_threads = num_threads;
    }
    void clear_output() {
        std::fill(out.begin(), out.end(), kUnwritten);
    }

    std::vector<int32_t> cu_seqlens, offsets;
    std::vector<float> q, out;
    rope_params params = rope_params_init();
};

/// A CaseSpec of random positions in [low, high) for every token.
PositionsSpec random_table(const CaseSpec &spec, int64_t low, int64_t high, rope_index_type index_type, uint64_t seed);

/// Bit-exact equality of two views' elements, with the first difference in the message.
::testing::AssertionResult same_bits(const Tensor &a, const Tensor &b);

}  // namespace ropegen::test
