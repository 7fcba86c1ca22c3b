// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of the fuzzer: one file per named Recipe, covering valid calls of every
// style, source, dtype and memory plan, and calls that break one rule each. The files are
// committed in tests/fuzz/corpus/; regenerate them after a change of the input format with
//     ropegen_fuzz_seeds tests/fuzz/corpus
// (the program is built in every build with tests; see tests/fuzz/README.md).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_recipe.h"

namespace ropegen::fuzz {
namespace {

template <typename T>
struct Identity {
    using type = T;
};

/// The code of the first entry of a field's table that `matches` (a seed naming a value the
/// table lacks is a bug here).
template <typename T, size_t N, typename Match>
Pick first_code(const T (&table)[N], Match &&matches) {
    for (size_t i = 0; i < N; i++) {
        if (matches(table[i])) {
            return Pick::of(i);
        }
    }
    std::fprintf(stderr, "fuzz_seeds: no table entry for a seed's value\n");
    std::abort();
}

/// The code of `value` in a field's table.
template <typename T, size_t N>
Pick value_of(const T (&table)[N], typename Identity<T>::type value) {
    return first_code(table, [&](T entry) { return entry == value; });
}

/// A valid call: half style, cache source, f32, q and k in BSHD, positions 0.. of each sequence.
Recipe valid_call() {
    Recipe r;
    r.batch = value_of(kBatches, int64_t{2});
    r.seq = value_of(kSeqs, int64_t{5});
    r.q_heads = value_of(kHeads, int64_t{3});
    r.has_k = true;
    r.k_heads = value_of(kHeads, int64_t{2});
    r.head_dim = value_of(kHeadDims, int64_t{64});
    r.seed = 1;
    return r;
}

struct Seed {
    std::string name;
    std::function<void(Recipe &)> edit;
};

/// A computed source with a scaling of `type`, over random positions of [0, 64) per sequence, so
/// that sequences of one call differ in length (DYNAMIC, LONGROPE take each one's).
void scaled(Recipe &r, int32_t type, int32_t source) {
    r.source = value_of(kSources, source);
    r.scaling_type = value_of(kScalingTypes, type);
    r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
    r.position_values = Pick::of(PositionValues::RandomSmall);
}

/// Valid calls of every scaling type (spec §6), alternating compat and precise.
std::vector<Seed> scaling_seeds() {
    const struct {
        const char *name;
        int32_t type;
        std::function<void(Recipe &)> edit;
    } scalings[] = {
        {"linear", ROPE_SCALING_LINEAR, [](Recipe &r) { r.scaling_factor = value_of(kScalingFactors, 4.0f); }},
        {"dynamic", ROPE_SCALING_DYNAMIC,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 2.0f);
             r.original_max = Pick::of(OriginalMax::HalfLargest);
         }},
        {"yarn", ROPE_SCALING_YARN,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 8.0f);
             r.original_max = Pick::of(OriginalMax::HalfLargest);
         }},
        // DeepSeek's form: mscale and mscale_all_dim, other betas, no truncation; bf16.
        {"yarn_mscales_no_truncate_bf16", ROPE_SCALING_YARN,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 4.0f);
             r.yarn_params[0] = value_of(kYarnParams, 16.0f);
             r.yarn_params[1] = value_of(kYarnParams, 2.0f);
             r.yarn_params[2] = value_of(kYarnParams, 0.707f);
             r.yarn_params[3] = value_of(kYarnParams, 1.0f);
             r.yarn_no_truncate = true;
             r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
         }},
        // A caller's attn_factor replaces the derived one.
        {"yarn_attn_factor_inverse", ROPE_SCALING_YARN,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 2.0f);
             r.attn_factor = value_of(kAttnFactors, 0.5f);
             r.direction = value_of(kDirections, ROPE_INVERSE);
         }},
        {"longrope", ROPE_SCALING_LONGROPE,
         [](Recipe &r) {
             r.original_max = Pick::of(OriginalMax::LargestPosition);
             r.max_positions = Pick::of(MaxPositions::SixteenOriginal);
         }},
        {"llama3", ROPE_SCALING_LLAMA3,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 8.0f);
             r.original_max = Pick::of(OriginalMax::HalfLargest);
         }},
        {"inv_freq_interleaved", ROPE_SCALING_INV_FREQ,
         [](Recipe &r) { r.style = value_of(kStyles, ROPE_STYLE_INTERLEAVED); }},
        // Angles close to 2^32: one frequency of 2^20 at positions near 1000.
        {"inv_freq_steep", ROPE_SCALING_INV_FREQ,
         [](Recipe &r) {
             r.scaling_tables[kInvFreq] = Pick::of(ScalingTableMode::OneSteep);
             r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
             r.scalar_offset = Pick::of(ScalarOffset::Small);
         }},
        // inv_freq x 2^29: positions 0..4 stay below the angle limit (2^32 / 2^29 = 8).
        {"linear_tiny_factor", ROPE_SCALING_LINEAR,
         [](Recipe &r) {
             r.scaling_factor = value_of(kScalingFactors, 0x1p-29f);
             r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
         }},
    };
    std::vector<Seed> seeds;
    int index = 0;
    for (const auto &scaling : scalings) {
        const int32_t source = index++ % 2 == 0 ? ROPE_SOURCE_COMPAT : ROPE_SOURCE_PRECISE;
        const std::string name = std::string("valid_scaling_") + scaling.name + (source == ROPE_SOURCE_COMPAT ? "_compat" : "_precise");
        seeds.push_back({name, [type = scaling.type, edit = scaling.edit, source](Recipe &r) {
            scaled(r, type, source);
            edit(r);
        }});
    }
    return seeds;
}

/// A packed batch (THD): [1, 8] tensors split into `sequences` by cu_seqlens.
void packed(Recipe &r, int64_t sequences) {
    r.batch = value_of(kBatches, int64_t{1});
    r.seq = value_of(kSeqs, int64_t{8});
    r.varlen = Pick::of(Varlen::Split);
    r.num_seqs = value_of(kNumSeqs, sequences);
}

/// mrope of `sections` over three streams of random positions of [0, 64), compat source.
void multimodal(Recipe &r, MropeSections sections) {
    r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
    r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
    r.position_values = Pick::of(PositionValues::RandomSmall);
    r.mrope_sections = Pick::of(sections);
}

/// Valid calls of varlen (every way of giving positions, per-sequence scalings), mrope (every
/// stream layout) and the parity mode.
std::vector<Seed> packed_mrope_parity_seeds() {
    std::vector<Seed> seeds;
    const auto add = [&](const char *name, std::function<void(Recipe &)> edit) {
        seeds.push_back({std::string("valid_") + name, std::move(edit)});
    };
    add("varlen_offsets_compat", [](Recipe &r) {
        packed(r, 3);
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.positions_data = true;
        r.position_values = Pick::of(PositionValues::RandomSmall);
    });
    add("varlen_table_int64_cache", [](Recipe &r) {
        packed(r, 5);
        r.varlen_index_type = value_of(kIndexTypes, ROPE_INDEX_INT64);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.index_type = value_of(kIndexTypes, ROPE_INDEX_INT64);
        r.position_values = Pick::of(PositionValues::RandomSmall);
    });
    add("varlen_scalar_offset_bf16_inplace", [](Recipe &r) {
        packed(r, 2);
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.memory = Pick::of(Memory::InPlace);
        r.scalar_offset = Pick::of(ScalarOffset::Small);
    });
    add("varlen_no_tokens", [](Recipe &r) {
        packed(r, 0);
        r.seq = value_of(kSeqs, int64_t{0});
    });
    add("varlen_dynamic_offsets_compat", [](Recipe &r) {
        scaled(r, ROPE_SCALING_DYNAMIC, ROPE_SOURCE_COMPAT);
        packed(r, 3);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
        r.positions_data = true;
        r.scaling_factor = value_of(kScalingFactors, 2.0f);
        r.original_max = Pick::of(OriginalMax::HalfLargest);
    });
    add("varlen_longrope_table_precise", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LONGROPE, ROPE_SOURCE_PRECISE);
        packed(r, 3);
        r.original_max = Pick::of(OriginalMax::HalfLargest);
    });
    add("mrope_qwen_compat_d128", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.head_dim = value_of(kHeadDims, int64_t{128});
    });
    add("mrope_random_split_shared_streams_precise_bf16", [](Recipe &r) {
        multimodal(r, MropeSections::RandomSplit);
        r.source = value_of(kSources, ROPE_SOURCE_PRECISE);
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.stream_stride = Pick::of(StreamStride::Shared);
    });
    add("mrope_all_width_adjacent_streams_varlen", [](Recipe &r) {
        multimodal(r, MropeSections::AllWidth);
        packed(r, 3);
        r.stream_stride = Pick::of(StreamStride::Adjacent);
    });
    add("mrope_overlapping_streams_linear_partial_rotary", [](Recipe &r) {
        multimodal(r, MropeSections::AllTemporal);
        r.scaling_type = value_of(kScalingTypes, ROPE_SCALING_LINEAR);
        r.scaling_factor = value_of(kScalingFactors, 4.0f);
        r.rotary_dim = Pick::of(RotaryDim::Half);
        r.rotary_offset = Pick::of(RotaryOffset::Middle);
        r.stream_stride = Pick::of(StreamStride::Overlapping);
    });
    add("round_cos_sin_bf16_compat", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.round_cos_sin = value_of(kRoundCosSin, 1);
    });
    add("round_cos_sin_bf16_cache_in_dtype", [](Recipe &r) {
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.cache_dtype = Pick::of(CacheDtype::TensorDtype);
        r.round_cos_sin = value_of(kRoundCosSin, -1);
    });
    add("round_cos_sin_f32_precise_yarn", [](Recipe &r) {
        scaled(r, ROPE_SCALING_YARN, ROPE_SOURCE_PRECISE);
        r.scaling_factor = value_of(kScalingFactors, 4.0f);
        r.original_max = Pick::of(OriginalMax::HalfLargest);
        r.round_cos_sin = value_of(kRoundCosSin, 2);
    });
    add("round_cos_sin_bf16_mrope_varlen_inverse", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        packed(r, 2);
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.direction = value_of(kDirections, ROPE_INVERSE);
        r.round_cos_sin = value_of(kRoundCosSin, 1);
    });
    return seeds;
}

std::vector<Seed> valid_seeds() {
    std::vector<Seed> seeds;
    const struct {
        const char *name;
        int32_t value;
    } styles[] = {{"half", ROPE_STYLE_HALF}, {"interleaved", ROPE_STYLE_INTERLEAVED}},
      sources[] = {{"cache", ROPE_SOURCE_CACHE}, {"compat", ROPE_SOURCE_COMPAT}, {"precise", ROPE_SOURCE_PRECISE}},
      dtypes[] = {{"f32", ROPE_DTYPE_F32}, {"f16", ROPE_DTYPE_F16}, {"bf16", ROPE_DTYPE_BF16}};
    const struct {
        const char *name;
        Memory memory;
        Layout layout;
        int64_t head_dim;
    } plans[] = {{"separate_bshd_d64", Memory::Separate, Layout::BSHD, 64},
                 {"inplace_bhsd_d128", Memory::InPlace, Layout::BHSD, 128},
                 {"packedqkv_d256", Memory::PackedQkv, Layout::Default, 256},
                 {"packedqkv_inplace_d128", Memory::PackedQkvInPlace, Layout::Default, 128},
                 {"packedoutputs_sbhd_d66", Memory::PackedOutputs, Layout::SBHD, 66},
                 {"separate_sbhd_d8", Memory::Separate, Layout::SBHD, 8}};
    // Every style x source x dtype, each in one of the memory plans.
    int index = 0;
    for (const auto &style : styles) {
        for (const auto &source : sources) {
            for (const auto &dtype : dtypes) {
                const auto &plan = plans[index % std::size(plans)];
                const uint32_t seed = static_cast<uint32_t>(++index);
                const std::string name =
                    std::string("valid_") + style.name + "_" + source.name + "_" + dtype.name + "_" + plan.name;
                // Alternate positions between offsets and tables, and the direction every third.
                const bool table = index % 2 != 0, inverse = index % 3 == 0;
                seeds.push_back({name, [=](Recipe &r) {
                    r.style = value_of(kStyles, style.value);
                    r.source = value_of(kSources, source.value);
                    r.dtype = value_of(kDtypes, dtype.value);
                    r.memory = Pick::of(plan.memory);
                    r.layout[0] = r.layout[1] = Pick::of(plan.layout);
                    r.head_dim = value_of(kHeadDims, plan.head_dim);
                    r.position_values = Pick::of(table ? PositionValues::RandomSmall : PositionValues::Ascending);
                    r.positions_kind = value_of(kPositionKinds, table ? ROPE_POSITIONS_TABLE : ROPE_POSITIONS_OFFSET);
                    r.direction = value_of(kDirections, inverse ? ROPE_INVERSE : ROPE_FORWARD);
                    r.seed = seed;
                }});
            }
        }
    }
    const auto add = [&](const char *name, std::function<void(Recipe &)> edit) {
        seeds.push_back({name, std::move(edit)});
    };
    add("valid_partial_rotary_offset", [](Recipe &r) {
        r.head_dim = value_of(kHeadDims, int64_t{128});
        r.rotary_dim = Pick::of(RotaryDim::Half);
        r.rotary_offset = Pick::of(RotaryOffset::Max);
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
    });
    add("valid_partial_rotary_odd_offset_interleaved", [](Recipe &r) {
        r.style = value_of(kStyles, ROPE_STYLE_INTERLEAVED);
        r.head_dim = value_of(kHeadDims, int64_t{30});
        r.rotary_dim = Pick::of(RotaryDim::Two);
        r.rotary_offset = Pick::of(RotaryOffset::One);
        r.fill = Pick::of(Fill::RandomBits);
    });
    // GPT-NeoX's fused QKV rotated in place: q and k lanes of each head's 3 D slot, v between them
    // and the next slot untouched; fewer k heads than q heads, then more.
    add("valid_per_head_qkv_inplace_gqa", [](Recipe &r) {
        r.memory = Pick::of(Memory::PackedQkvInPlace);
        r.per_head_qkv = true;
    });
    add("valid_per_head_qkv_inplace_more_k_heads_bf16_partial", [](Recipe &r) {
        r.memory = Pick::of(Memory::PackedQkvInPlace);
        r.per_head_qkv = true;
        r.q_heads = value_of(kHeads, int64_t{2});
        r.k_heads = value_of(kHeads, int64_t{4});
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.style = value_of(kStyles, ROPE_STYLE_INTERLEAVED);
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.head_dim = value_of(kHeadDims, int64_t{30});
        r.rotary_dim = Pick::of(RotaryDim::Half);
        r.rotary_offset = Pick::of(RotaryOffset::One);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.position_values = Pick::of(PositionValues::RandomSmall);
    });
    add("valid_q_only", [](Recipe &r) { r.has_k = false; });
    add("valid_gqa_heads_4_1", [](Recipe &r) {
        r.q_heads = value_of(kHeads, int64_t{4});
        r.k_heads = value_of(kHeads, int64_t{1});
    });
    add("valid_empty_batch", [](Recipe &r) { r.batch = value_of(kBatches, int64_t{0}); });
    add("valid_two_threads_flush_start", [](Recipe &r) {
        r.num_threads = value_of(kNumThreads, 2);
        r.flush_start = true;
        r.seq = value_of(kSeqs, int64_t{8});
    });
    add("valid_table_int64_transposed", [](Recipe &r) {
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.index_type = value_of(kIndexTypes, ROPE_INDEX_INT64);
        r.positions_layout = Pick::of(PositionsLayout::Transposed);
        r.position_values = Pick::of(PositionValues::RandomSmall);
    });
    add("valid_batch_offsets_padded", [](Recipe &r) {
        r.positions_data = true;
        r.positions_layout = Pick::of(PositionsLayout::Padded);
        r.position_values = Pick::of(PositionValues::RandomSmall);
    });
    add("valid_decode_step_large_offset_compat", [](Recipe &r) {
        r.seq = value_of(kSeqs, int64_t{1});
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.scalar_offset = Pick::of(ScalarOffset::Int32Limit);
    });
    add("valid_precise_limit", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_PRECISE);
        r.scalar_offset = Pick::of(ScalarOffset::PreciseLimit);
        r.base = value_of(kBases, 500000.0);
        r.attn_factor = value_of(kAttnFactors, 0.5f);
    });
    add("valid_cache_padded_rows_bf16_table", [](Recipe &r) {
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.cache_dtype = Pick::of(CacheDtype::TensorDtype);
        r.cache_row_stride = Pick::of(RowStride::PairsPlusSeven);
        r.cache_len = Pick::of(CacheLen::MaxPlusThree);
    });
    add("valid_adversarial_values", [](Recipe &r) { r.fill = Pick::of(Fill::Adversarial); });
    add("valid_adversarial_values_bf16_f32_table", [](Recipe &r) {  // NaN of an f32 table into bf16 kernels
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.cache_dtype = Pick::of(CacheDtype::F32);
        r.fill = Pick::of(Fill::Adversarial);
    });
    add("valid_head_padding_separate_outputs_bhsd", [](Recipe &r) {
        r.head_pad = Pick::of(3);
        r.layout[2] = r.layout[3] = Pick::of(Layout::BHSD);
    });
    add("valid_isa_cap_sse41", [](Recipe &r) { r.isa_cap = value_of(kIsaCaps, int32_t{ROPE_ISA_SSE41}); });
    add("valid_isa_cap_avx2_head_dim_256", [](Recipe &r) {
        r.isa_cap = value_of(kIsaCaps, int32_t{ROPE_ISA_AVX2});
        r.head_dim = value_of(kHeadDims, int64_t{256});
    });
    // A level of aarch64: a cap there, ROPE_ERR_UNSUPPORTED on x86-64 (and the other way round).
    add("isa_cap_neon", [](Recipe &r) { r.isa_cap = value_of(kIsaCaps, int32_t{ROPE_ISA_NEON}); });
    add("isa_cap_neon_fp16_head_dim_64", [](Recipe &r) {
        r.isa_cap = value_of(kIsaCaps, int32_t{ROPE_ISA_NEON_FP16});
        r.head_dim = value_of(kHeadDims, int64_t{64});
    });
    add("valid_null_report", [](Recipe &r) { r.null_target = Pick::of(NullTarget::Report); });
    add("valid_short_report", [](Recipe &r) { r.report_size = Pick::of(ReportSize::Shorter); });
    add("valid_long_report", [](Recipe &r) { r.report_size = Pick::of(ReportSize::Longer); });
    add("valid_k_absent_garbage_k_out", [](Recipe &r) {
        r.has_k = false;
        r.other_dtype[2] = Pick::of(OtherDtype::Invalid);
        r.placements[2].target = Pick::of(PlacementTarget::IntoQOut);
    });
    add("valid_output_after_input_in_one_buffer", [](Recipe &r) {
        r.placements[1].target = Pick::of(PlacementTarget::IntoQ);
        r.placements[1].offset = Pick::of(PlacementOffset::AfterEnd);
    });
    add("valid_compat_ignores_cache_fields", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.cache_len = Pick::of(CacheLen::Negative);
        r.null_target = Pick::of(NullTarget::CosCache);
    });
    for (Seed &seed : scaling_seeds()) {
        seeds.push_back(std::move(seed));
    }
    for (Seed &seed : packed_mrope_parity_seeds()) {
        seeds.push_back(std::move(seed));
    }
    return seeds;
}

std::vector<Seed> invalid_seeds() {
    std::vector<Seed> seeds;
    const auto add = [&](const char *name, std::function<void(Recipe &)> edit) {
        seeds.push_back({std::string("invalid_") + name, std::move(edit)});
    };
    add("params_null", [](Recipe &r) { r.null_target = Pick::of(NullTarget::Params); });
    add("abi_version", [](Recipe &r) { r.abi_version = value_of(kAbiVersions, ROPE_ABI_VERSION + 1); });
    add("struct_size_short", [](Recipe &r) { r.struct_size = Pick::of(StructSize::Shorter); });
    add("struct_size_long", [](Recipe &r) { r.struct_size = Pick::of(StructSize::Longer); });
    add("style_enum", [](Recipe &r) { r.style = value_of(kStyles, 2); });
    add("direction_enum", [](Recipe &r) { r.direction = value_of(kDirections, 2); });
    add("source_enum", [](Recipe &r) { r.source = value_of(kSources, 3); });
    add("dtype_enum", [](Recipe &r) { r.dtype = value_of(kDtypes, -1); });
    add("dtype_mismatch_q_out", [](Recipe &r) { r.other_dtype[1] = Pick::of(OtherDtype::F16); });
    add("q_data_null", [](Recipe &r) { r.null_target = Pick::of(NullTarget::Q); });
    add("k_out_data_null", [](Recipe &r) { r.null_target = Pick::of(NullTarget::KOut); });
    add("head_dim_odd", [](Recipe &r) { r.head_dim = value_of(kHeadDims, int64_t{3}); });
    add("head_dim_zero", [](Recipe &r) { r.head_dim = value_of(kHeadDims, int64_t{0}); });
    add("k_head_dim_differs", [](Recipe &r) { r.other_shape[0] = Pick::of(ShapeEdit::HeadDimPlusTwo); });
    add("q_out_batch_differs", [](Recipe &r) { r.other_shape[1] = Pick::of(ShapeEdit::BatchPlusOne); });
    add("k_out_heads_differ", [](Recipe &r) { r.other_shape[2] = Pick::of(ShapeEdit::HeadsPlusOne); });
    add("seq_negative", [](Recipe &r) { r.seq = value_of(kSeqs, int64_t{-1}); });
    add("rotary_odd", [](Recipe &r) { r.rotary_dim = Pick::of(RotaryDim::Odd); });
    add("rotary_too_big", [](Recipe &r) { r.rotary_dim = Pick::of(RotaryDim::PlusTwo); });
    add("rotary_offset_past_end", [](Recipe &r) {
        r.rotary_dim = Pick::of(RotaryDim::Half);
        r.rotary_offset = Pick::of(RotaryOffset::PastMax);
    });
    const auto edit_stride = [](TensorIndex tensor, int axis, Pick op) {
        return [=](Recipe &r) { r.stride_edits[0] = {StrideEdit::target_of(tensor, axis), op}; };
    };
    add("stride_negative", edit_stride(kK, 1, Pick::of(StrideOp::Negate)));
    add("head_dim_stride_not_one", edit_stride(kQ, 3, Pick::of(StrideOp::PlusOne)));
    add("output_overlaps_itself", edit_stride(kQOut, 2, Pick::of(StrideOp::Zero)));
    add("output_partially_overlaps_input", [](Recipe &r) {
        r.placements[1].target = Pick::of(PlacementTarget::IntoQ);
        r.placements[1].offset = Pick::of(PlacementOffset::One);
    });
    add("per_head_qkv_k_one_lane_into_q", [](Recipe &r) {  // k and k_out start at lane D - 1
        r.memory = Pick::of(Memory::PackedQkvInPlace);
        r.per_head_qkv = true;
        r.placements[0].target = Pick::of(PlacementTarget::IntoQ);
        r.placements[0].offset = Pick::raw_value(63);
        r.placements[2].target = Pick::of(PlacementTarget::IntoK);
    });
    add("q_out_is_k", [](Recipe &r) {
        r.q_heads = r.k_heads;
        r.placements[1].target = Pick::of(PlacementTarget::IntoK);
    });
    add("size_overflow", edit_stride(kQ, 0, Pick::raw_value(int64_t{1} << 62)));
    add("position_negative", [](Recipe &r) {
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.position_values = Pick::of(PositionValues::OneNegative);
    });
    add("position_huge_int64", [](Recipe &r) {
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.index_type = value_of(kIndexTypes, ROPE_INDEX_INT64);
        r.position_values = Pick::of(PositionValues::OneHuge);
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
    });
    add("offset_past_int32_compat", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.scalar_offset = Pick::of(ScalarOffset::Int64Max);
    });
    add("position_table_null", [](Recipe &r) {
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.null_target = Pick::of(NullTarget::PositionsData);
    });
    add("positions_kind_enum", [](Recipe &r) { r.positions_kind = value_of(kPositionKinds, 2); });
    add("positions_stride_negative", [](Recipe &r) {
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_TABLE);
        r.positions_layout = Pick::of(PositionsLayout::NegativeStride);
    });
    add("cache_len_equals_max_position", [](Recipe &r) { r.cache_len = Pick::of(CacheLen::EqualMax); });
    add("cache_len_zero", [](Recipe &r) { r.cache_len = Pick::of(CacheLen::Zero); });
    add("cache_len_overflow", [](Recipe &r) { r.cache_len = Pick::of(CacheLen::Overflow); });
    add("cos_cache_null", [](Recipe &r) { r.null_target = Pick::of(NullTarget::CosCache); });
    add("cache_row_stride_short", [](Recipe &r) { r.cache_row_stride = Pick::of(RowStride::PairsMinusOne); });
    add("cache_dtype_mismatch", [](Recipe &r) { r.cache_dtype = Pick::of(CacheDtype::F16); });
    add("base_nan", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_PRECISE);
        r.base = first_code(kBases, [](double base) { return std::isnan(base); });
    });
    add("base_negative", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.base = value_of(kBases, -10000.0);
    });
    add("attn_factor_inf", [](Recipe &r) {
        r.source = value_of(kSources, ROPE_SOURCE_COMPAT);
        r.attn_factor = value_of(kAttnFactors, std::numeric_limits<float>::infinity());
    });
    add("num_threads_negative", [](Recipe &r) { r.num_threads = value_of(kNumThreads, -1); });
    add("isa_cap_enum", [](Recipe &r) { r.isa_cap = value_of(kIsaCaps, 4); });
    add("scaling_type_enum", [](Recipe &r) { scaled(r, 7, ROPE_SOURCE_COMPAT); });
    add("scaling_with_cache_source", [](Recipe &r) { scaled(r, ROPE_SCALING_LINEAR, ROPE_SOURCE_CACHE); });
    add("scaling_factor_nan", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LINEAR, ROPE_SOURCE_PRECISE);
        r.scaling_factor = first_code(kScalingFactors, [](float factor) { return std::isnan(factor); });
    });
    add("scaling_original_max_zero", [](Recipe &r) {
        scaled(r, ROPE_SCALING_YARN, ROPE_SOURCE_COMPAT);
        r.original_max = Pick::of(OriginalMax::Zero);
    });
    add("scaling_dynamic_rotary_two", [](Recipe &r) {
        scaled(r, ROPE_SCALING_DYNAMIC, ROPE_SOURCE_COMPAT);
        r.rotary_dim = Pick::of(RotaryDim::Two);
    });
    add("scaling_yarn_beta_fast_negative", [](Recipe &r) {
        scaled(r, ROPE_SCALING_YARN, ROPE_SOURCE_PRECISE);
        r.yarn_params[0] = value_of(kYarnParams, -1.0f);
    });
    add("scaling_longrope_short_factor_null", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LONGROPE, ROPE_SOURCE_COMPAT);
        r.scaling_tables[kShortFactor] = Pick::of(ScalingTableMode::Null);
    });
    add("scaling_longrope_long_factor_zero", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LONGROPE, ROPE_SOURCE_PRECISE);
        r.scaling_tables[kLongFactor] = Pick::of(ScalingTableMode::OneZero);
    });
    add("scaling_llama3_freq_factors_equal", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LLAMA3, ROPE_SOURCE_COMPAT);
        r.freq_factors = first_code(kFreqFactors, [](FreqFactors pair) { return pair.low == pair.high; });
    });
    add("scaling_inv_freq_inf", [](Recipe &r) {
        scaled(r, ROPE_SCALING_INV_FREQ, ROPE_SOURCE_PRECISE);
        r.scaling_tables[kInvFreq] = Pick::of(ScalingTableMode::OneInf);
    });
    // Angles that reach 2^32: position 8 x 2^29, and positions near 2^24 x 2^20.
    add("scaling_linear_tiny_factor_angle_past_limit", [](Recipe &r) {
        scaled(r, ROPE_SCALING_LINEAR, ROPE_SOURCE_COMPAT);
        r.scaling_factor = value_of(kScalingFactors, 0x1p-29f);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
        r.scalar_offset = Pick::of(ScalarOffset::Small);
    });
    add("scaling_inv_freq_steep_angle_past_limit", [](Recipe &r) {
        scaled(r, ROPE_SCALING_INV_FREQ, ROPE_SOURCE_PRECISE);
        r.scaling_tables[kInvFreq] = Pick::of(ScalingTableMode::OneSteep);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
        r.scalar_offset = Pick::of(ScalarOffset::PreciseLimit);
    });
    add("varlen_batch_two", [](Recipe &r) {
        packed(r, 2);
        r.batch = value_of(kBatches, int64_t{2});
    });
    add("varlen_index_type_enum", [](Recipe &r) {
        packed(r, 2);
        r.varlen_index_type = value_of(kIndexTypes, 2);
    });
    add("varlen_num_seqs_negative", [](Recipe &r) { packed(r, -1); });
    add("varlen_num_seqs_past_int32", [](Recipe &r) { packed(r, int64_t{1} << 31); });
    add("varlen_no_sequences_for_tokens", [](Recipe &r) { packed(r, 0); });
    for (const auto &[name, mode] : {std::pair{"varlen_cu_seqlens_first_nonzero", Varlen::FirstNonZero},
                                     std::pair{"varlen_cu_seqlens_decreasing", Varlen::Decreasing},
                                     std::pair{"varlen_cu_seqlens_last_short", Varlen::LastShort},
                                     std::pair{"varlen_cu_seqlens_last_long", Varlen::LastLong}}) {
        add(name, [mode = mode](Recipe &r) {
            packed(r, 3);
            r.varlen = Pick::of(mode);
        });
    }
    add("varlen_offset_of_a_sequence_negative", [](Recipe &r) {
        packed(r, 3);
        r.positions_data = true;
        r.position_values = Pick::of(PositionValues::OneNegative);
    });
    add("varlen_offsets_past_cache", [](Recipe &r) {
        packed(r, 5);
        r.positions_data = true;
        r.position_values = Pick::of(PositionValues::RandomSmall);
        r.cache_len = Pick::of(CacheLen::EqualMax);
    });
    add("mrope_sections_sum_short", [](Recipe &r) { multimodal(r, MropeSections::SumShort); });
    add("mrope_sections_sum_long", [](Recipe &r) { multimodal(r, MropeSections::SumLong); });
    add("mrope_section_negative", [](Recipe &r) { multimodal(r, MropeSections::Negative); });
    add("mrope_interleaved", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.style = value_of(kStyles, ROPE_STYLE_INTERLEAVED);
    });
    add("mrope_cache_source", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.source = value_of(kSources, ROPE_SOURCE_CACHE);
    });
    add("mrope_offsets", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.positions_kind = value_of(kPositionKinds, ROPE_POSITIONS_OFFSET);
    });
    add("mrope_dynamic", [](Recipe &r) {
        scaled(r, ROPE_SCALING_DYNAMIC, ROPE_SOURCE_COMPAT);
        multimodal(r, MropeSections::Qwen);
    });
    add("mrope_stream_stride_negative", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.stream_stride = Pick::of(StreamStride::Negative);
    });
    add("mrope_stream_stride_limit", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.stream_stride = Pick::of(StreamStride::Limit);
    });
    add("mrope_stream_position_huge", [](Recipe &r) {
        multimodal(r, MropeSections::Qwen);
        r.position_values = Pick::of(PositionValues::OneHuge);
    });
    add("round_cos_sin_bf16_with_f32_cache", [](Recipe &r) {
        r.dtype = value_of(kDtypes, ROPE_DTYPE_BF16);
        r.round_cos_sin = value_of(kRoundCosSin, 1);
    });
    return seeds;
}

}  // namespace
}  // namespace ropegen::fuzz

int main(int argc, char **argv) {
    using namespace ropegen::fuzz;
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <corpus directory>\n", argv[0]);
        return 2;
    }
    std::vector<Seed> seeds = valid_seeds();
    for (Seed &seed : invalid_seeds()) {
        seeds.push_back(std::move(seed));
    }
    for (const Seed &seed : seeds) {
        Recipe recipe = valid_call();
        seed.edit(recipe);
        const std::vector<uint8_t> bytes = encode_recipe(recipe);
        const std::string path = std::string(argv[1]) + "/" + seed.name;
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        if (!out) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
    }
    std::printf("wrote %zu seeds to %s\n", seeds.size(), argv[1]);
    return 0;
}
