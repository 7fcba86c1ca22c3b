// SPDX-License-Identifier: Apache-2.0
// CPU and CUDA schedules for the RoPE pipeline, kept apart from the algorithm. The knobs are the
// generator's schedule GeneratorParams, whose values come from schedules/*.json at build time.
#pragma once

#include <optional>

#include "Halide.h"

namespace ropegen {

/// The pure variables of the pipeline, shared by the algorithm and the schedule by name.
struct RopeVars {
    Halide::Var pair{"pair"};    ///< rotation pair within the rotary slice, 0..P-1
    Halide::Var half{"half"};    ///< which lane of the pair: 0 (x_a) or 1 (x_b)
    Halide::Var lane{"lane"};    ///< lane within a head (pass-through outputs)
    Halide::Var head{"head"};
    Halide::Var seq{"seq"};
    Halide::Var batch{"batch"};
    Halide::Var row{"row"};      ///< inv_freq row: a batch item, or 0 for frequencies the call shares
    Halide::Var stream{"stream"};  ///< position stream: mrope's temporal, height, width, or the only one
};

/// Where cos/sin are evaluated: per parallel task (a table of the task's tokens, one per tensor),
/// inline where used, or once per call for q and k together (a table of every token).
enum class CosSinAt { Task, Inline, Root };

/// The order in which the half style stores a pair block's lanes: each pair vector's first and
/// second lanes in turn (two streams P lanes apart, interleaved), or all of the block's first
/// lanes, then all of its second lanes (runs of contiguous stores). The interleaved style stores
/// a pair's lanes together whatever this says.
enum class StoreOrder { PairVectors, Halves };

/// How the interleaved style rotates a vector of neighbouring pairs: split into a vector of first
/// and one of second lanes, rotated as pairs and interleaved again (two shuffles per lane vector
/// each way), or lane by lane with the vector's neighbours swapped in (one in-lane shuffle) and
/// cos/sin repeated per lane (CPU kernels of a fixed head_dim; the others deinterleave), or, for
/// 16-bit dtypes, split as Deinterleave does and stored as one 32-bit word per pair (CPU kernels
/// of a fixed head_dim).
enum class InterleavedRotation { Deinterleave, Swap, Words };

/// How the half style stores its 16-bit lanes: each narrowed on its own (a truncating store per
/// 16 lanes on x86), or, for CPU kernels of a 16-bit dtype and a fixed head_dim, the lanes of two
/// neighbouring pairs as one 32-bit word (one two-source permute per 32 lanes).
enum class HalfRotation { Lanes, Words };

/// Where a tensor layout's loop nest puts the head loop relative to the inner token loop.
enum class HeadLoop { InsideTokens, OutsideTokens };

/// The loop nest of one tensor layout (one Halide specialization).
struct LayoutSchedule {
    int tokens_per_task;  ///< tokens rotated by one parallel task; cos/sin are built per task
    HeadLoop head_loop;   ///< InsideTokens: token-major (all heads of a token, then the next)
};

/// Knobs shared by every layout plus one LayoutSchedule per recognised layout.
struct RopeSchedule {
    int vector_pairs;       ///< rotation pairs per vector (the vector width in f32 lanes)
    int unroll_pairs;       ///< pair vectors unrolled per loop iteration
    CosSinAt cos_sin_at;
    int cos_sin_vectors;    ///< pair vectors of a root cos/sin table evaluated side by side, as one vector
    StoreOrder store_order;
    LayoutSchedule bshd, bhsd, sbhd, strided;
};

/// The Funcs of one rotated tensor that the schedule places.
struct RotatedTensorFuncs {
    Halide::Func rotated;            ///< output: the rotary lanes as (pair, half, h, s, b) or (half, pair, ...);
                                     ///< for pair words, the 32-bit words as (word, half, ...) or (word, pair, ...)
    Halide::Func rotated_pairs;      ///< both rotated lanes of a pair, before they are stored; undefined
                                     ///< when the interleaved style rotates lane by lane (Swap)
    Halide::Func cos_sin;            ///< per (pair, token) cos and sin, as this tensor reads them; per
                                     ///< (half, pair, token) when lane by lane, per (word, parity, token)
                                     ///< for half-style words
    Halide::Func lead, tail;         ///< outputs: lanes before and after the rotary slice, copied
    Halide::OutputImageParam output; ///< the rotated output's buffer, whose strides pick the layout
    std::optional<Halide::Var> word_parity;  ///< half style stored as words: rotated_pairs and cos_sin are
                                             ///< per (word, parity, ...), parity 0 the word's low pair
};

/// Knobs of the CUDA schedule: one thread block per (tile of a sequence's tokens, batch item), a
/// thread per pair vector and head.
struct GpuSchedule {
    int vector_pairs;       ///< pairs per thread (fixed head_dim): one 16-byte load of each lane of a pair
    int threads_per_block;  ///< threads of a block, spread over the pair vectors of a head, then heads
    int pair_threads;       ///< threads along a head's pairs when head_dim is only known at run time
    int tokens_per_block;   ///< tokens of one sequence per block (cos/sin of each computed once, shared by every head)
};

/// Schedules q and k (in that order) as one CUDA kernel launch: blocks over (sequence tile, batch), threads
/// over (pair vector, head), k computed with q. `fixed_pairs` is P of a fixed head_dim kernel (0
/// when head_dim comes at run time). Loop nests are specialized on `positions_given` and, when
/// defined, `narrow_tables` (cache source of a 16-bit kernel), so each reads only what it uses.
void apply_gpu_schedule(std::vector<RotatedTensorFuncs> &tensors, Halide::Func cos_sin, const GpuSchedule &schedule,
                        int fixed_pairs, const Halide::Expr &positions_given, const Halide::Expr &narrow_tables);

/// Schedules the cos/sin Func that q and k share (the Root placement); other placements are
/// scheduled per tensor by apply_schedule.
void schedule_shared_cos_sin(Halide::Func cos_sin, const RopeSchedule &schedule);

/// Applies `schedule` to one tensor's Funcs. A defined `narrow_tables` (cache source of a 16-bit
/// kernel) gets loop nests of its own, so each reads only the cos/sin tables it uses.
void apply_schedule(RotatedTensorFuncs &funcs, const RopeSchedule &schedule, const Halide::Expr &narrow_tables);

}  // namespace ropegen
