// SPDX-License-Identifier: Apache-2.0
// A Recipe made real: the tensors as views into guard-page buffers sized exactly to what the views
// cover, the positions array, the cos/sin tables, the rope_params struct (itself in a guarded
// buffer of its struct_size) and the report. Also a copy of every byte before the call, so that
// the harness can tell what the call wrote.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_recipe.h"
#include "internal/enum_value.h"
#include "ropegen/rope.h"
#include "support/guarded_bytes.h"

namespace ropegen::fuzz {

// Enum fields that may hold any int are read and written as ints.
using ropegen::enum_value;
using ropegen::store_raw;

extern const char *const kTensorNames[kTensorCount];
extern const char *const kScalingTableNames[kScalingTableCount];  ///< "scaling.short_factor", ...

/// Larger views, tables and position arrays are not allocated: the call is only validated.
inline constexpr int64_t kMaxViewElements = 16384;
inline constexpr int64_t kMaxSpanElements = int64_t{1} << 17;
inline constexpr int64_t kMaxTableElements = 16384;
/// Fills the bytes of a report past the rope_report the library knows.
inline constexpr uint8_t kReportTailByte = 0xa5;

/// Element size of a dtype value as the call stores it (an invalid dtype counts as 4 bytes).
int64_t element_size(int32_t dtype);

/// One tensor of the call and where it lives.
struct View {
    int32_t dtype = ROPE_DTYPE_F32;  ///< as stored in the struct: may be out of range
    int64_t sizes[4] = {0, 0, 0, 0};
    int64_t strides[4] = {0, 0, 0, 0};
    bool null = false;               ///< data is NULL
    int arena = -1;                  ///< the buffer holding it; -1 when unplaced (NULL or not backed)
    int64_t byte_offset = 0;         ///< of element (0,0,0,0) from the arena's first byte

    // What the view covers (set by measure()).
    bool negative_size = false;  ///< a size < 0: no element
    bool empty = false;          ///< a size == 0 (and none negative)
    bool overflows = false;      ///< non-empty, and its element count or byte span exceeds int64
    bool may_overflow = false;   ///< some size/stride product is near 2^63 (a library may say so)
    bool backed = true;          ///< small enough to allocate (or covering nothing)
    int64_t min_index = 0, max_index = 0;  ///< element offsets of its first and last element

    int64_t element_bytes() const {
        return element_size(dtype);
    }
    /// Element offset of (b, s, h, d) from element (0,0,0,0).
    int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
        return b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3];
    }
    bool has_elements() const {
        return !negative_size && !empty;
    }
    void measure();
};

/// One buffer between guard pages, holding one or more views.
struct Arena {
    test::GuardedBytes bytes;
    std::vector<uint8_t> before;  ///< its bytes before the call
    bool holds_input = false;     ///< else output-only: filled with NaN canaries
    int64_t extent_hint = 0;      ///< bytes the buffer has beyond its views (the v of packed QKV)
};

/// The call as the library sees it, with everything the judge needs.
class FuzzCall {
public:
    explicit FuzzCall(const Recipe &recipe);
    FuzzCall(const FuzzCall &) = delete;
    FuzzCall &operator=(const FuzzCall &) = delete;

    /// The resolved struct (what the guarded copy holds, up to struct_size).
    const rope_params &params() const {
        return params_;
    }
    /// The pointer the call gets: NULL or the guarded copy.
    const rope_params *params_pointer() const;
    /// The report the call gets: NULL or a guarded buffer of report_size bytes.
    rope_report *report_pointer();
    uint32_t report_size() const {
        return report_size_;
    }
    /// A fresh report (rope_report_init with the recipe's struct_size) before each call.
    void reset_report();

    /// The ISA cap to set before the call (raw rope_isa value).
    int32_t isa_cap() const {
        return isa_cap_;
    }
    bool has_k() const {
        return params_.k.data != nullptr;
    }
    const View &view(int tensor) const {
        return views_[tensor];
    }
    const Arena &arena(int index) const {
        return arenas_[index];
    }
    int arena_count() const {
        return static_cast<int>(arenas_.size());
    }
    /// Why the call cannot be made at all (an array too large to allocate), or empty.
    const std::string &skip_reason() const {
        return skip_reason_;
    }
    /// Every tensor and table the call uses is allocated (a call too big to allocate is only
    /// validated, with rope_query).
    bool fully_backed() const;

    /// Positions as stored, in 128 bits so that offset + s cannot overflow: unknown when the
    /// call has no tokens, the kind or index type is invalid, or a needed array is NULL.
    /// The range covers every position validation checks: mrope's three streams, and the offset
    /// of an empty varlen sequence (checked as one token's).
    struct TokenPositions {
        bool known = false;
        __int128 min = 0, max = 0;
        std::vector<__int128> values;  ///< [b * seq + s]; empty for calls too large to allocate
        std::vector<__int128> mrope_values[2];  ///< mrope's streams 1 and 2, likewise; empty without mrope
    };
    const TokenPositions &positions() const {
        return positions_;
    }
    /// One sequence of the call: tokens first .. first + length - 1 of a batch item.
    struct Sequence {
        int64_t batch_item, first, length;
    };
    /// The sequences a call that runs rotates: its batch items, or varlen's packed sequences
    /// (empty ones included); empty when the positions are not listed.
    const std::vector<Sequence> &sequences() const {
        return sequences_;
    }
    /// cu_seqlens as stored (num_seqs + 1 entries, sign-extended); empty when the library reads
    /// none (no varlen, or num_seqs out of range).
    const std::vector<int64_t> &cu_seqlens() const {
        return cu_seqlens_;
    }
    /// cos/sin table entry (row, pair) as the kernel must read it; cache source only.
    double cache_value(bool sine, int64_t row, int64_t pair) const;
    /// Rows of the cache tables that are allocated (0 when the tables are not).
    int64_t cache_rows_backed() const {
        return cache_rows_backed_;
    }
    bool cache_backed() const {
        return cache_backed_;
    }
    /// The values of a scaling table as the call holds them: rotary_dim/2 floats, or none when
    /// the pointer is NULL.
    std::vector<float> scaling_table(ScalingTable table) const;
    /// The table's pointer in the struct (NULL by the recipe, or for a struct_size without scaling).
    const float *scaling_table_pointer(ScalingTable table) const;

    /// Bits of element (b, s, h, d) of `tensor` before the call / now.
    uint32_t bits_before(int tensor, int64_t b, int64_t s, int64_t h, int64_t d) const;
    uint32_t bits_now(int tensor, int64_t b, int64_t s, int64_t h, int64_t d) const;

    /// The first byte that differs from before the call in anything the call must not write
    /// (positions, tables, the params struct, and every arena byte not covered by `writable`
    /// tensors), described; nullopt when nothing did.
    std::optional<std::string> changed_outside(const std::vector<int> &writable) const;
    /// Bytes of a long report past sizeof(rope_report) changed, or a short report changed.
    std::optional<std::string> report_tail_changed() const;

    /// A multi-line description of the call for failure messages.
    std::string describe() const;

private:
    void resolve_scalars(const Recipe &r);
    void plan_views(const Recipe &r);
    void apply_stride_edits(const Recipe &r);
    void apply_placements(const Recipe &r);
    void allocate_arenas(const Recipe &r);
    void resolve_rotary(const Recipe &r);
    void build_varlen(const Recipe &r);
    void build_positions(const Recipe &r);
    void resolve_mrope(const Recipe &r, int64_t stream_span);
    void build_cache(const Recipe &r);
    void build_scaling(const Recipe &r);
    /// The largest position clamped to [0, 2^62], 0 when unknown: what codes relative to it use.
    int64_t largest_position() const;
    void build_structs(const Recipe &r);

    int32_t isa_cap_ = 0;
    uint32_t struct_size_ = 0, report_size_ = 0;
    NullTarget null_target_ = NullTarget::None;
    int64_t head_pad_ = 0;
    std::string skip_reason_;
    View views_[kTensorCount];
    std::vector<Arena> arenas_;
    std::vector<test::GuardedBytes> placeholders_;  ///< empty buffers for NULL-free but unallocated views

    test::GuardedBytes positions_buffer_;
    std::vector<uint8_t> positions_before_;
    TokenPositions positions_;
    std::vector<Sequence> sequences_;

    test::GuardedBytes cu_seqlens_buffer_;  ///< exactly the num_seqs + 1 entries the library reads
    std::vector<uint8_t> cu_seqlens_before_;
    std::vector<int64_t> cu_seqlens_;
    bool packed_ = false;  ///< varlen's cu_seqlens are valid: positions follow its sequences

    test::GuardedBytes cos_buffer_, sin_buffer_;
    std::vector<uint8_t> cos_before_, sin_before_;
    int64_t cache_rows_backed_ = 0;
    bool cache_backed_ = true;

    test::GuardedBytes scaling_tables_[kScalingTableCount];  ///< exactly rotary_dim/2 floats each
    std::vector<uint8_t> scaling_tables_before_[kScalingTableCount];

    rope_params params_{};
    test::GuardedBytes params_buffer_;
    std::vector<uint8_t> params_before_;
    test::GuardedBytes report_buffer_;

    uint64_t rng_state_ = 0;
    uint64_t next_random();
    double next_uniform();  ///< [0, 1)
    test::GuardedBytes::Flush flush_ = test::GuardedBytes::Flush::End;
};

}  // namespace ropegen::fuzz
