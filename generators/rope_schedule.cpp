// SPDX-License-Identifier: Apache-2.0
// CPU and CUDA schedules for the RoPE pipeline (see rope_schedule.h).
#include "rope_schedule.h"

#include <algorithm>

namespace ropegen {

using Halide::Expr;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;

namespace {

// Every split guards its tail rather than shifting it inwards: a shifted tail recomputes
// elements, which would rotate twice when the output aliases the input (in place).
constexpr TailStrategy kTail = TailStrategy::GuardWithIf;

// The loop over the tokens of a task (schedule_tokens), where per-token tables are placed.
const char *const kTokenLoop = "token_in_tile";

// Tokens and heads: the loop nest of one layout. `batch_inner` puts the batch loop inside the
// sequence loop (SBHD), so a task holds tokens that lie together in memory.
void schedule_tokens(Stage stage, const LayoutSchedule &layout, bool batch_inner) {
    const RopeVars v;
    const Var task{"task"}, tile{"token_tile"}, token{kTokenLoop};
    const Var &inner_axis = batch_inner ? v.batch : v.seq;
    const Var &outer_axis = batch_inner ? v.seq : v.batch;
    if (batch_inner) {
        stage.reorder(v.batch, v.seq);
    }
    stage.split(inner_axis, tile, token, layout.tokens_per_task, kTail);
    if (layout.head_loop == HeadLoop::OutsideTokens) {
        stage.reorder(token, v.head);
    }
    stage.fuse(tile, outer_axis, task).parallel(task);
}

// The interleaved style's output is (half, pair, ...): a pair's two lanes are neighbours.
bool stores_interleaved(const Halide::Func &rotated) {
    return rotated.args()[0].name() == RopeVars().half.name();
}

}  // namespace

void schedule_shared_cos_sin(Halide::Func cos_sin, const RopeSchedule &schedule) {
    if (schedule.cos_sin_at != CosSinAt::Root) {
        return;
    }
    // The table covers every token of the call whatever the layout, so its parallel tiles take
    // the strided fallback's token count. Computed sin/cos are polynomials bound by their
    // latency: several pair vectors as one wider vector, which the backend splits into native
    // ones with their instructions interleaved, hide it (as many vectors unrolled one after
    // another did not, on Zen 5).
    const RopeVars v;
    const Var tokens{"tokens"}, token_tile{"token_tile"};
    cos_sin.compute_root()
        .vectorize(v.pair, schedule.vector_pairs * schedule.cos_sin_vectors, kTail)
        .fuse(v.seq, v.batch, tokens)
        .split(tokens, token_tile, tokens, schedule.strided.tokens_per_task, kTail)
        .parallel(token_tile);
}

void apply_schedule(RotatedTensorFuncs &funcs, const RopeSchedule &schedule, const Expr &narrow_tables) {
    const RopeVars v;
    const Var pair_block{"pair_block"}, pair_vector{"pair_vector"}, pair_lane{"pair_lane"};
    const Var task{"task"};
    const int lanes = schedule.vector_pairs;
    const int block = lanes * schedule.unroll_pairs;

    // Pairs: a block of `block` pairs (half-style words: `block` words, twice the pairs) is
    // rotated into registers (rotated_pairs) before either of its lanes is stored, which keeps in-place calls correct; half is unrolled so each store is
    // a dense vector (half style) or an interleaving store (interleaved style).
    Halide::Func &out = funcs.rotated;
    out.split(v.pair, pair_block, v.pair, block, kTail)
        .split(v.pair, pair_vector, pair_lane, lanes, kTail);
    // A table of cos/sin in the order a tensor reads them, built once per token (or per task,
    // cos_sin_at=task) and read by every head of it: of a fixed size, which Halide keeps on the
    // stack.
    auto cos_sin_per_token = [&]() -> Halide::Func & {
        return funcs.cos_sin.compute_at(out, schedule.cos_sin_at == CosSinAt::Task ? task : Var(kTokenLoop))
            .vectorize(v.pair, lanes, kTail);
    };
    const bool lane_by_lane = !funcs.rotated_pairs.defined();  // InterleavedRotation::Swap
    if (lane_by_lane) {
        // A vector holds both lanes of its pairs, so it is loaded whole before it is stored.
        out.reorder(v.half, pair_lane, pair_vector, pair_block).vectorize(v.half).vectorize(pair_lane).unroll(pair_vector);
        // cos/sin repeated per lane (2P lanes per token).
        cos_sin_per_token().vectorize(v.half);
    } else {
        if (schedule.store_order == StoreOrder::Halves && !stores_interleaved(out)) {
            out.reorder(pair_lane, pair_vector, v.half, pair_block);
        } else {
            out.reorder(pair_lane, v.half, pair_vector, pair_block);
        }
        out.vectorize(pair_lane).unroll(v.half).unroll(pair_vector);
        // Storage of a whole block: without the bound, an any-head_dim kernel's last block (the
        // head's pair count is known at run time) sizes it at run time, on the heap, per task.
        funcs.rotated_pairs.compute_at(out, pair_block)
            .bound_storage(v.pair, block)
            .split(v.pair, pair_vector, pair_lane, lanes, kTail)
            .vectorize(pair_lane)
            .unroll(pair_vector);
        if (funcs.word_parity) {
            // Both pairs of a word are rotated before either is stored; cos/sin in (word, parity)
            // order, as a table (inline, each head would deinterleave them again).
            funcs.rotated_pairs.bound_storage(*funcs.word_parity, 2).unroll(*funcs.word_parity);
            cos_sin_per_token().unroll(*funcs.word_parity);
        } else if (schedule.cos_sin_at == CosSinAt::Task) {
            funcs.cos_sin.compute_at(out, task).vectorize(v.pair, lanes, kTail);
        }
    }

    // Layouts, recognised from the output strides (dims 2, 3, 4 = head, seq, batch); each has
    // its own loop nest, and any other stride order takes the strided fallback.
    const Halide::OutputImageParam &buf = funcs.output;
    const Expr head_stride = buf.dim(2).stride(), seq_stride = buf.dim(3).stride(), batch_stride = buf.dim(4).stride();
    const Expr is_bhsd = seq_stride < head_stride;
    const Expr is_sbhd = head_stride <= batch_stride && batch_stride < seq_stride;
    const Expr is_bshd = head_stride < seq_stride && seq_stride <= batch_stride;
    auto schedule_layouts = [&](Stage stage) {
        schedule_tokens(stage.specialize(is_bshd), schedule.bshd, false);
        schedule_tokens(stage.specialize(is_bhsd), schedule.bhsd, false);
        schedule_tokens(stage.specialize(is_sbhd), schedule.sbhd, true);
        schedule_tokens(stage, schedule.strided, false);
    };
    if (narrow_tables.defined()) {
        schedule_layouts(out.specialize(narrow_tables));
    }
    schedule_layouts(out);

    // Pass-through lanes (partial rotary only; usually empty): the lane loop is outermost so an
    // empty slice costs nothing.
    for (Halide::Func *copy : {&funcs.lead, &funcs.tail}) {
        const Var lane_vector{"lane_vector"}, lane_in{"lane_in"}, tokens{"tokens"}, token_tile{"token_tile"};
        copy->split(v.lane, lane_vector, lane_in, lanes, kTail)
            .reorder(lane_in, v.head, v.seq, v.batch, lane_vector)
            .vectorize(lane_in)
            .fuse(v.seq, v.batch, tokens)
            .split(tokens, token_tile, tokens, 64, kTail)
            .parallel(token_tile);
    }
}

void apply_gpu_schedule(std::vector<RotatedTensorFuncs> &tensors, Halide::Func cos_sin, const GpuSchedule &schedule,
                        int fixed_pairs, const Expr &positions_given, const Expr &narrow_tables) {
    const RopeVars v;
    const Var seq_block{"seq_block"}, seq_in{"seq_in"};
    const Var pair_tile{"pair_tile"}, pair_thread{"pair_thread"}, pair_lane{"pair_lane"};
    const Var head_tile{"head_tile"}, head_thread{"head_thread"};
    // Without a fixed head_dim nothing is known about alignment, so vectors would be split into
    // guarded scalar accesses (which spill): the any-head_dim kernel rotates one pair per thread.
    const int lanes = fixed_pairs > 0 ? schedule.vector_pairs : 1;
    const int pair_threads = fixed_pairs > 0 ? std::max(1, fixed_pairs / lanes) : schedule.pair_threads;
    const int head_threads = std::max(1, schedule.threads_per_block / pair_threads);

    Halide::Func &first = tensors.front().rotated;
    for (RotatedTensorFuncs &funcs : tensors) {
        Halide::Func &out = funcs.rotated;
        const bool interleaved = stores_interleaved(out);
        out.split(v.pair, pair_thread, pair_lane, lanes, kTail);
        if (fixed_pairs == 0) {
            out.split(pair_thread, pair_tile, pair_thread, pair_threads, kTail);
        }
        // Blocks over (sequence tile, batch), not over fused tokens: a block's tokens then have
        // exact bounds, so its shared cos/sin holds tokens_per_block rows whatever the sequence
        // length (a fused token's s = token % seq spans the whole sequence to bounds inference).
        out.split(v.head, head_tile, head_thread, head_threads, kTail)
            .split(v.seq, seq_block, seq_in, schedule.tokens_per_block, kTail);
        // The interleaved style stores a pair's two lanes side by side: one dense vector of both,
        // where alignment is known. Without it the two lanes are two stores: LLVM's NVPTX backend
        // stored an f16 pair's 2-byte-aligned <2 x half> as the f32 bits of both lanes, 8 bytes
        // where 4 belong (found on an H200).
        if (interleaved) {
            out.reorder(v.half, pair_lane, pair_thread, head_thread).vectorize(pair_lane);
            if (fixed_pairs > 0) {
                out.vectorize(v.half);
            } else {
                out.unroll(v.half);
            }
        } else {
            out.reorder(pair_lane, v.half, pair_thread, head_thread).vectorize(pair_lane).unroll(v.half);
        }
        if (fixed_pairs == 0) {
            out.reorder(pair_thread, head_thread, pair_tile, head_tile, seq_in, seq_block, v.batch);
        } else {
            out.reorder(pair_thread, head_thread, head_tile, seq_in, seq_block, v.batch);
        }
        out.gpu_blocks(seq_block, v.batch).gpu_threads(pair_thread, head_thread);
        // Both lanes of a pair are loaded into registers before either is stored (in place).
        funcs.rotated_pairs.compute_at(out, pair_thread).vectorize(v.pair);
        if (&out != &first) {
            out.compute_with(first, seq_block);
        }
        // Pass-through lanes (partial rotary): blocks over tokens, so the grid is never empty even
        // when the slice is.
        for (Halide::Func *copy : {&funcs.lead, &funcs.tail}) {
            const Var tokens{"tokens"}, lane_tile{"lane_tile"}, lane_thread{"lane_thread"};
            copy->fuse(v.seq, v.batch, tokens)
                .split(v.lane, lane_tile, lane_thread, 32, kTail)
                .reorder(lane_thread, lane_tile, v.head, tokens)
                .gpu_blocks(tokens)
                .gpu_threads(lane_thread);
        }
    }
    // cos/sin of a block's tokens, computed (or read from the cache) once into shared memory and
    // read from there by every head of q and k. Each loop nest reads only the buffers its call
    // passes: the positions table when there is one, and the pair of cos/sin tables that
    // narrow_tables names (cache source of a 16-bit kernel).
    // Its threads are the block's own (CUDA allows 1024 per block): pair_threads along the pairs
    // and, when a head's pair tiles fit, one tile per row of head threads; otherwise the tiles
    // are a loop.
    cos_sin.compute_at(first, seq_block);
    const bool tiles_in_rows = fixed_pairs > 0 && fixed_pairs % pair_threads == 0 && fixed_pairs / pair_threads <= head_threads;
    auto thread_the_pairs = [&](Stage stage) {
        stage.split(v.pair, pair_tile, pair_thread, pair_threads, kTail);
        if (tiles_in_rows) {
            stage.gpu_threads(pair_thread, pair_tile);
        } else {
            stage.gpu_threads(pair_thread);
        }
    };
    std::vector<Expr> conditions{positions_given};
    if (narrow_tables.defined()) {
        conditions = {positions_given && narrow_tables, positions_given, narrow_tables};
    }
    for (const Expr &condition : conditions) {
        thread_the_pairs(cos_sin.specialize(condition));
    }
    thread_the_pairs(cos_sin);
}

}  // namespace ropegen
