#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rope_tune: searches the schedule knobs of every kernel key on this machine and writes
schedules/tuned/<target>/<machine>.json, which the next build of this machine picks up.

  python3 bench/tune/rope_tune.py --target x86-64-avx512 --budget 600

For each key (style, head_dim, dtype, source) the candidates are real kernels: the build's own
generator emits each one ahead of time with the candidate's knobs (the same features as the
library's kernels) and the harness (rope_tune_harness) loads it, checks it against the fp64
oracle, then times it through the dispatcher's path on decode and prefill shapes of every tensor
layout, interleaved with the other candidates and a memcpy of the same bytes. AOT rather than
JIT: a JIT pipeline would not be the kernel the library links, called the way it calls it.

Search, per key (staged, so a budget of minutes finds what the full sweep finds):
  1. core knobs (vector_pairs, unroll_pairs, cos_sin_at, cos_sin_vectors, store_order,
     interleaved_rotation, half_rotation) with the default layout knobs, pruned by a cost model (vectors of half to
     twice the ISA's width, no block or root cos/sin vector wider than a head, cos_sin_vectors for
     root tables of fixed head_dim kernels only, no `inline` for computed sources, where it means `task`, one store
     order for the interleaved style, whose stores do not depend on it, one interleaved rotation
     for the half style and the any-head_dim kernel, which do not read it, and one half rotation for
     the other kernels but the half style's 16-bit fixed head_dim ones), then successive halving: every
     candidate a few repetitions, the best third again with more;
  2. the layout knobs (tokens_per_task, head_loop) with the best core, every layout group at
     once (each candidate sets all four groups alike, each group is judged on its own shapes);
     with a root cos/sin table (computed sources), strided.tokens_per_task is held meanwhile
     and then chosen alone on every shape: it also tiles that table, which every layout reads;
  3. a confirmation: default against tuned, more repetitions; the tuned knobs are kept only if
     they beat the default, so a tuned file is never slower than the defaults it replaces;
  4. a large-call kernel (large_calls): the core knobs again, judged on the shapes that move at
     least the last-level cache size alone (they stream from DRAM), kept if they beat stage 3's;
  5. an in-place kernel (in_place_calls): the core knobs, then the layout knobs, judged on calls in
     place alone (a decode step and prefills), kept if they beat what those calls get without it.
Stages 1-4 judge calls out of place alone, stage 5 calls in place alone: the key's own kernel
serves the first, and stage 5 decides whether it serves the second too.
--full-sweep times every combination instead (for a few keys: it shows what the staged search
misses), and confirms default, staged and full-sweep results against each other.
--large-calls-only and --in-place-only run stage 4 or 5 alone on the kernels the machine's tuned
file already gives each key, and add what they find to it.

Scores are memcpy ratios (median memcpy time / median kernel time, measured in the same run),
combined over shapes by geometric mean. The run is resumable: finished keys are kept in a
state file in the build tree and a rerun of the same command continues after them.
"""
import argparse
import collections
import concurrent.futures
import dataclasses
import datetime
import hashlib
import itertools
import json
import math
import os
import pathlib
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cmake"))
import ropegen_kernels as rk  # noqa: E402  (the build's schedule format, knobs and validation)

sys.path.insert(0, str(ROOT / "bench"))
import neon_asm  # noqa: E402  (aarch64 hot loops and their llvm-mca estimates)

# The knob values the search may try; the schedule format's ranges are wider. Every core knob of
# the format (a new one without values here is a KeyError at import).
CORE_VALUES = {
    "vector_pairs": (4, 8, 16, 32, 64),
    "unroll_pairs": (1, 2, 4),
    "cos_sin_at": rk.COS_SIN_AT,
    "cos_sin_vectors": (1, 2, 4),
    "store_order": rk.STORE_ORDERS,
    "interleaved_rotation": rk.INTERLEAVED_ROTATIONS,
    "half_rotation": rk.HALF_ROTATIONS,
}
CORE_SPACE = {knob: CORE_VALUES[knob] for knob in rk.CORE_KNOBS}
LAYOUT_SPACE = {
    "tokens_per_task": (1, 2, 4, 8, 16, 32, 64),
    "head_loop": rk.HEAD_LOOPS,
}
# The knobs a timing can judge, and those llvm-mca's model of the hot loop can.
MEASURED_KNOBS = rk.CPU_KNOBS
MODELLED_KNOBS = ("vector_pairs", "unroll_pairs", "store_order")
# f32 lanes of one vector register of each ISA: the unit the cost model prunes vector_pairs by.
VECTOR_F32_LANES = {"avx512": 16, "avx2": 8, "sse41": 4, "neon": 4}
# The head_dim the any-head_dim kernel is timed at (the harness's kAnyHeadDim).
ANY_HEAD_DIM = 128
# Keys in the order a budget reaches them: the commonest first.
KEY_ORDER = {"head_dim": (128, 64, 256, 0), "dtype": ("bf16", "f32", "f16"),
             "style": rk.STYLES, "source": rk.SOURCES}
# Repetitions of each stage (successive halving: many candidates briefly, few at length).
REPS_SCREEN, REPS_FINAL, REPS_LAYOUTS, REPS_CONFIRM = 3, 7, 5, 15
# What a tuned schedule must gain over the default to replace it: less is within the noise of a
# shared machine, and a change that does not pay is churn in the file.
MIN_GAIN = 1.01
# What a large-call kernel must gain over the key's kernel on the large shapes: it is one more
# kernel to build and link, worth it only beyond the noise of a DRAM-bound shape.
LARGE_CALL_MIN_GAIN = 1.03
# What an in-place kernel must gain over what calls in place get without it (the key's kernel,
# or the schedule file's in-place one): one more kernel, as for large calls.
IN_PLACE_MIN_GAIN = 1.03
# Joins the runs that wrote a tuned file in its meta.tuned.command.
COMMAND_SEPARATOR = " && "


# ---- Kernel keys and candidates ------------------------------------------------------------------

def key_id(key):
    return f"{key['style']}/{key['source']}/d{key['head_dim'] or 'any'}/{key['dtype']}"


def key_filter(key):
    """The --keys filter that selects `key` alone."""
    return ",".join(f"{name}={key[name]}" for name in rk.MATCH_KEYS)


def all_keys(filters):
    """Every key matching any of `filters` (dicts of key -> allowed values), commonest first."""
    keys = []
    for head_dim, dtype, style, source in itertools.product(*KEY_ORDER.values()):
        key = {"style": style, "head_dim": head_dim, "dtype": dtype, "source": source}
        if not filters or any(all(key[k] in allowed for k, allowed in f.items()) for f in filters):
            keys.append(key)
    return keys


def parse_key_filter(text):
    """"head_dim=128,dtype=bf16|f32" -> {"head_dim": {128}, "dtype": {"bf16", "f32"}}."""
    result = {}
    for part in filter(None, text.split(",")):
        name, _, values = part.partition("=")
        if name not in rk.MATCH_KEYS or not values:
            raise ValueError(f"--keys: {part!r} must be <key>=<value>[|<value>...] with a key of {list(rk.MATCH_KEYS)}")
        allowed = set()
        for value in values.split("|"):
            converted = int(value) if name == "head_dim" and value.isdigit() else value
            if converted not in rk.MATCH_KEYS[name]:
                raise ValueError(f"--keys: {name}={value} is not one of {list(rk.MATCH_KEYS[name])}")
            allowed.add(converted)
        result[name] = allowed
    return result


def canonical(params):
    """A candidate's knobs in resolve()'s shape with sorted layouts: its identity."""
    return json.loads(json.dumps(params, sort_keys=True))


def with_core(params, core):
    return canonical({**params, **core})


def with_layouts(params, knobs):
    return canonical({**params, "layouts": {layout: dict(knobs) for layout in rk.LAYOUTS}})


def core_candidates(key, isa, default, judges=MEASURED_KNOBS):
    """The cost model's pruning of the core grid; knobs the measurement cannot judge keep their
    default."""
    lanes = VECTOR_F32_LANES[isa]
    head_pairs = (key["head_dim"] or ANY_HEAD_DIM) // 2
    result = []
    for values in itertools.product(*CORE_SPACE.values()):
        core = dict(zip(CORE_SPACE, values))
        if not lanes // 2 <= core["vector_pairs"] <= 2 * lanes:
            continue  # narrower: half-empty registers; wider: more registers than work per block
        half_words = key["style"] == "half" and rk.stores_pair_words(key, core)
        if core["vector_pairs"] * core["unroll_pairs"] > (head_pairs // 2 if half_words else head_pairs):
            continue  # a block wider than a head's pairs (half-style words: a half's words) is all tail
        if core["cos_sin_at"] == "inline" and key["source"] != "cache":
            continue  # computed sources build a table anyway: `inline` means `task` for them
        if core["cos_sin_vectors"] != default["cos_sin_vectors"] and (core["cos_sin_at"] != "root" or not key["head_dim"]):
            continue  # read by root tables only; the any-head_dim kernel's pair count is unknown
        if core["vector_pairs"] * core["cos_sin_vectors"] > head_pairs:
            continue  # a table vector wider than a head's pairs is all tail
        if key["style"] == "interleaved" and core["store_order"] != default["store_order"]:
            continue  # the interleaved style stores a pair's lanes together: the order means nothing
        if core["interleaved_rotation"] != default["interleaved_rotation"] and (key["style"] != "interleaved" or not key["head_dim"]):
            continue  # read by fixed head_dim kernels of the interleaved style only
        if core["interleaved_rotation"] == "words" and not rk.stores_pair_words(key, core):
            continue  # words of two 16-bit lanes: for f32 it means deinterleave
        if core["half_rotation"] != default["half_rotation"] and (
                key["style"] != "half" or not rk.stores_pair_words(key, {**core, "half_rotation": "words"})):
            continue  # read by fixed head_dim 16-bit kernels of the half style only
        if rk.rule_violations(key, core):
            continue  # a placement the library does not allow for this key
        if any(knob not in judges and value != default[knob] for knob, value in core.items()):
            continue
        result.append(core)
    return result


def layout_candidates():
    return [dict(zip(LAYOUT_SPACE, values)) for values in itertools.product(*LAYOUT_SPACE.values())]


# ---- Scores -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Measurement:
    """One candidate in one harness run: per timed shape, its layout group, bytes moved, and the
    median times of the candidate and of the memcpy measured beside it."""
    shapes: dict  # shape -> {"layout", "bytes", "ns", "memcpy_ns", "spread"}
    UNIT = "memcpy_ratio"  # what summary() and the tables report

    def ratio(self, shape):
        return self.shapes[shape]["memcpy_ns"] / self.shapes[shape]["ns"]

    def score(self, layout=None, shapes=None):
        """Geometric mean of the memcpy ratios of every shape (of one layout group, or of `shapes`)."""
        ratios = [self.ratio(s) for s, info in self.shapes.items()
                  if (layout is None or info["layout"] == layout) and (shapes is None or s in shapes)]
        return math.exp(sum(map(math.log, ratios)) / len(ratios))

    def headline(self, shapes=None):
        return round(self.score(shapes=shapes), 3)

    def summary(self, default):
        """What the tuned file records of this (tuned) measurement beside the default's: per
        shape its GB/s, memcpy ratio and spread (interquartile range / median of the repetitions)."""
        return {self.UNIT: self.headline(), f"default_{self.UNIT}": default.headline(),
                "speedup": round(self.score() / default.score(), 3),
                "shapes": {s: {"gbps": round(info["bytes"] / info["ns"], 1), "memcpy_ratio": round(self.ratio(s), 3),
                               "spread": round(info["spread"], 3)}
                           for s, info in sorted(self.shapes.items())}}


class ModelledMeasurement(Measurement):
    """llvm-mca's estimate for one candidate: a 'shape' per hot loop, whose 'ns' are the estimated
    cycles per rotated head (memcpy_ns 1, so that score() is the geometric mean of heads/cycle)."""

    UNIT = "cycles_per_head"

    def headline(self, shapes=None):
        return round(1 / self.score(shapes=shapes), 2)

    def summary(self, default):
        return {self.UNIT: self.headline(), f"default_{self.UNIT}": default.headline(),
                "speedup": round(self.score() / default.score(), 3)}


def parse_harness_output(lines, in_place=False):
    """The harness's JSON lines of a run of the calls in place (`in_place`) or of those out of
    place -> ({id: Measurement or failure message}); a shape of the other kind is an error."""
    failures, times = {}, {}
    for line in lines:
        record = json.loads(line)
        if "verified" in record:
            if not record["verified"]:
                failures[record["candidate"]] = record["failure"]
        elif record["in_place"] != in_place:
            raise ValueError(f"the harness timed {record['shape']} (in_place {record['in_place']}) in a run of the "
                             f"calls {'in place' if in_place else 'out of place'}")
        else:
            times.setdefault(record["shape"], {})[record["candidate"]] = record
    results = {}
    for shape, by_id in times.items():
        memcpy_ns = statistics.median(by_id["memcpy"]["ns"])
        for cid, record in by_id.items():
            if cid == "memcpy":
                continue
            ns = sorted(record["ns"])
            quartiles = statistics.quantiles(ns, n=4) if len(ns) > 1 else [ns[0]] * 3
            median = statistics.median(ns)
            results.setdefault(cid, Measurement({})).shapes[shape] = {
                "layout": record["layout"], "bytes": record["bytes"], "ns": median,
                "memcpy_ns": memcpy_ns, "spread": (quartiles[2] - quartiles[0]) / median}
    results.update(failures)
    return results


# ---- Search -------------------------------------------------------------------------------------

def staged_search(default, key, isa, measure, out_of_budget, judges=MEASURED_KNOBS):
    """The staged search of one key. `measure(candidates, reps, stage)` returns a Measurement per
    candidate (None for one that failed its check). Returns (tuned params, their Measurement,
    the default's Measurement) from the confirmation run."""
    # 1. Core knobs, default layouts: successive halving.
    pool = [with_core(default, core) for core in core_candidates(key, isa, default, judges)]
    if canonical(default) not in pool:
        pool.append(canonical(default))
    best = _halving(pool, lambda pool, reps, stage: measure(pool, reps, f"core {stage}"))
    # 2. Layout knobs with the best core.
    if "layouts" in judges and not out_of_budget():
        best, _ = _layout_stage(best, measure, "layout knobs")
    # 3. Confirmation.
    return confirm(default, [best], measure)


def large_call_stage(default, tuned, tuned_m, key, isa, measure, from_bytes, judges=MEASURED_KNOBS):
    """The large-call kernel of a key (schedules' large_calls): the core grid with `tuned`'s
    layouts, judged on the shapes that move at least `from_bytes` alone (as `tuned_m` lists
    them, or a first timing of `tuned` where it is None, which the screen then counts as
    tuned's; only those shapes are timed), by successive halving. Its winner must beat `tuned`
    there by LARGE_CALL_MIN_GAIN in two confirmation runs. Returns (the large_calls entry, its
    Measurement, tuned's), or None when no shape is that large or tuned serves those calls best."""

    def large_calls(pool, reps, stage):  # times those shapes alone
        return measure(pool, reps, f"large-call {stage}", from_bytes)

    tuned = canonical(tuned)
    screened = []  # the screen's timings taken already: tuned's first one, where it finds the large shapes
    if tuned_m is None:
        # tuned alone first: where no shape is that large, the pool's candidates are not built for nothing.
        screened = large_calls([tuned], REPS_SCREEN, "shapes")
        tuned_m = screened[0] or Measurement({})
    if not any(info["bytes"] >= from_bytes for info in tuned_m.shapes.values()):
        return None
    pool = [tuned] + [p for p in (with_core(tuned, core) for core in core_candidates(key, isa, default, judges))
                      if p != tuned]
    best = _halving(pool, large_calls, screened)
    confirmed = best not in (None, tuned) and _beats_twice(tuned, best, large_calls, LARGE_CALL_MIN_GAIN)
    if not confirmed:
        return None
    best_m, tuned_m = confirmed
    knobs = {knob: best[knob] for knob in rk.CORE_KNOBS if knob != "cos_sin_at" and best[knob] != tuned[knob]}
    return {"from_bytes": from_bytes, **knobs}, best_m, tuned_m


def kernels_of(key, params):
    """The kernels `params` gives a key, as the build makes them (ropegen_kernels.call_classes):
    {call class (None: the key's own kernel, of every call): (min_call_bytes, knobs)}."""
    return {call_class: (size, canonical(knobs)) for call_class, size, knobs in rk.call_classes(key, params)}


def own_kernel(key, params):
    """The knobs of a key's kernel of every call."""
    return kernels_of(key, params)[None][1]


def in_place_kernel(key, params):
    """The knobs of the kernel that serves `params`' calls in place below a large-call kernel's size:
    the in-place sibling where `params` has one, else the key's own kernel."""
    kernels = kernels_of(key, params)
    return kernels.get(rk.IN_PLACE_CALLS, kernels[None])[1]


def in_place_stage(default, tuned, key, isa, measure, below_bytes=None):
    """The in-place kernel of a key (schedules' in_place_calls): the core grid on the key's own
    kernel, by successive halving, then the layout knobs, judged on calls in place alone
    (`measure(..., in_place=True)`: a decode step and prefills, those that move `below_bytes` or
    more left out, as a large-call kernel takes them). Its winner must beat the incumbent, the
    kernel that serves those calls without the stage (`in_place_kernel`), by IN_PLACE_MIN_GAIN in
    two confirmation runs. Returns (the winner's knobs, its Measurement, the incumbent's), or None
    where the incumbent stays or no call in place is that small."""
    own, incumbent = own_kernel(key, tuned), in_place_kernel(key, tuned)

    def in_place(pool, reps, stage):
        return measure(pool, reps, f"in-place {stage}", below_bytes=below_bytes, in_place=True)

    pool = []
    for params in [own, incumbent] + [with_core(own, core) for core in core_candidates(key, isa, default)]:
        if params not in pool:
            pool.append(params)
    best = _halving(pool, in_place)
    if best is None:
        return None
    best, _ = _layout_stage(best, in_place, "layout knobs")
    confirmed = best != incumbent and _beats_twice(incumbent, best, in_place, IN_PLACE_MIN_GAIN)
    if not confirmed:
        return None
    best_m, incumbent_m = confirmed
    return best, best_m, incumbent_m


def in_place_class(default, own, kernel, incumbent):
    """The in_place_calls of a tuned entry whose calls in place run `kernel`: its knobs that differ
    from the key's `own`. Where `kernel` is `own`, none (None), unless the schedule file
    (`default`) gives the key an in-place kernel: then the knobs by which `incumbent` differs, set
    back to `own`'s (a tuned entry replaces the file's class whole, and a class of the kernel's
    own knobs adds no kernel, ropegen_kernels.call_classes)."""
    if kernel == own and rk.IN_PLACE_CALLS not in default:
        return None
    differ = changed_params(own, kernel) or changed_params(own, incumbent)
    knobs = {knob: kernel[knob] for knob in differ if knob != "layouts"}
    layouts = {layout: {knob: kernel["layouts"][layout][knob] for knob in group}
               for layout, group in differ.get("layouts", {}).items()}
    return {**knobs, "layouts": layouts} if layouts else knobs


def one_stage_only(default, earlier, defaults, call_class, with_kernel_of, command):
    """--large-calls-only or --in-place-only: the stage that finds a key's `call_class` kernel,
    `with_kernel_of(tuned, summary)` (with_large_call_kernel or with_in_place_kernel), on the
    kernels the machine's file gives the key (its entry, `earlier`, over the schedule file's
    `defaults`). Returns the entry with what the stage found, its measurements and this `command`
    added, or `earlier` itself."""
    tuned = canonical(rk.resolve(defaults, earlier["key"], [("tuned file", earlier["key"], earlier["params"])]))
    summary = dict(earlier["measured"])
    with_kernel = with_kernel_of(tuned, summary)
    if with_kernel is tuned:
        return earlier
    summary[call_class] = {**summary[call_class], "command": command}
    return {"key": earlier["key"], "params": changed_params(default, with_kernel),
            "measured": {**summary, "changed": changed_knobs(default, with_kernel)}}


def large_call_bytes(key, params):
    """The size from which `params`' large-call kernel takes a key's calls, or None without one."""
    return kernels_of(key, params).get(rk.LARGE_CALLS, (None,))[0]


def with_large_call_kernel(default, tuned, tuned_m, key, isa, measure, from_bytes, summary):
    """Stage 4 on `tuned` (the key's kernel from stages 1-3, measured as `tuned_m`, or the kernels
    of the machine's file, tuned_m None): `tuned` with its calls that move `from_bytes` or more
    given to the large-call kernel the stage found, its measurements added to `summary`; `tuned`
    itself where its own kernel stays."""
    found = large_call_stage(default, own_kernel(key, tuned), tuned_m, key, isa, measure, from_bytes)
    if not found:
        return tuned
    entry, large_m, sibling_m = found  # timed on the large shapes alone
    summary[rk.LARGE_CALLS] = {"memcpy_ratio": large_m.headline(), "sibling_memcpy_ratio": sibling_m.headline(),
                               "shapes": sorted(large_m.shapes)}
    return {**tuned, rk.LARGE_CALLS: entry}


def with_in_place_kernel(default, tuned, key, isa, measure, summary):
    """Stage 5 on `tuned` (the key's kernels from stages 1-4, or from the machine's file): `tuned`
    with its calls in place given to the kernel the stage found (the key's own one included,
    where it beats a tuned in-place kernel), its measurements added to `summary`; `tuned` itself
    where the incumbent stays."""
    found = in_place_stage(default, tuned, key, isa, measure, large_call_bytes(key, tuned))
    if not found:
        return tuned
    kernel, kernel_m, incumbent_m = found
    summary[rk.IN_PLACE_CALLS] = {"memcpy_ratio": kernel_m.headline(), "incumbent_memcpy_ratio": incumbent_m.headline(),
                                  "shapes": sorted(kernel_m.shapes)}
    entry = in_place_class(default, own_kernel(key, tuned), kernel, in_place_kernel(key, tuned))
    others = {k: v for k, v in tuned.items() if k != rk.IN_PLACE_CALLS}
    return {**others, rk.IN_PLACE_CALLS: entry} if entry else others


def last_level_cache_bytes(cache_dir=pathlib.Path("/sys/devices/system/cpu/cpu0/cache")):
    """The size of this machine's last-level cache (Linux sysfs), or None where it is not told:
    a call that moves more streams from DRAM."""
    sizes = {}
    for index in cache_dir.glob("index*"):
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"([0-9]+)([KMG]?)", size)
        if match:
            sizes[level] = max(sizes.get(level, 0), int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2]])
    return sizes[max(sizes)] if sizes else None


def full_sweep(default, key, isa, measure):
    """Every combination of the (pruned) core grid and the layout grid; returns the best params."""
    best, best_score = None, -1.0
    for core in core_candidates(key, isa, default):
        composed, score = _layout_stage(with_core(default, core), measure, f"full sweep of {json.dumps(core)}")
        if score > best_score:
            best, best_score = composed, score
    return best


def confirm(default, contenders, measure):
    """Default and contenders measured together at length: the best of them, its Measurement and
    the default's. A contender must beat the default by MIN_GAIN twice, in this run and in a second,
    independent one (the winner of one run is favoured by that run's noise); else the default
    stays."""
    pool = [canonical(default)] + [c for c in map(canonical, contenders) if c != canonical(default)]
    measurements = measure(pool, REPS_CONFIRM, "confirmation")
    if measurements[0] is None:
        raise RuntimeError("the default schedule failed its check against the oracle")
    scores = [m.score() if m else 0.0 for m in measurements]
    best = max(range(len(pool)), key=lambda i: (scores[i], i == 0))
    if scores[best] < MIN_GAIN * scores[0]:
        return pool[0], measurements[0], measurements[0]
    default_m, best_m = measure([pool[0], pool[best]], REPS_CONFIRM, "second confirmation")
    if best_m.score() < MIN_GAIN * default_m.score():
        return pool[0], default_m, default_m
    return pool[best], best_m, default_m


def _halving(pool, measure, screened=()):
    """Successive halving: every candidate of `pool` a few repetitions, the best third (three at
    least) again with more; `screened`: those repetitions of the pool's first candidates, taken
    already. The best finalist, or None where no shape was timed (every call of the stage out of
    the sizes measured)."""
    unscreened = pool[len(screened):]
    screened = [*screened, *(measure(unscreened, REPS_SCREEN, "knobs") if unscreened else [])]
    if not any(m is not None and m.shapes for m in screened):
        return None
    ranked = _ranked(pool, screened)
    finalists = ranked[:max(3, len(ranked) // 3)]
    return _ranked(finalists, measure(finalists, REPS_FINAL, "finalists"))[0]


def _beats_twice(incumbent, best, measure, gain):
    """A call class's kernel against the one it would replace: (best's Measurement, incumbent's)
    of the second of two confirmation runs, where `best` beats `incumbent` by `gain` in both
    (one more kernel must pay beyond the noise); else None."""
    for stage in ("confirmation", "second confirmation"):
        incumbent_m, best_m = measure([incumbent, best], REPS_CONFIRM, stage)
        if best_m is None or best_m.score() < gain * incumbent_m.score():
            return None
    return best_m, incumbent_m


def _ranked(pool, measurements):
    scored = [(m.score(), i) for i, m in enumerate(measurements) if m is not None]
    return [pool[i] for _, i in sorted(scored, key=lambda item: (-item[0], item[1]))]


def _layout_stage(base, measure, stage):
    """The layout knobs for `base` and their score: every group at once, each judged on its own
    shapes. A root cos/sin table (computed sources) couples the groups: its parallel tiles are
    strided.tokens_per_task tokens whatever the layout (generators/rope_schedule.cpp,
    schedule_shared_cos_sin). So the first pass holds that knob at base's value, and a second
    judges it alone on every shape: the strided shapes alone do not see what it costs the others."""
    root = base["cos_sin_at"] == "root"

    def with_strided_tokens(params, tokens):
        params = canonical(params)
        params["layouts"]["strided"]["tokens_per_task"] = tokens
        return params

    pool = [with_layouts(base, knobs) for knobs in layout_candidates()]
    if root:
        pool = [with_strided_tokens(params, base["layouts"]["strided"]["tokens_per_task"]) for params in pool]
    best, score = _best_per_layout(base, pool, measure(pool, REPS_LAYOUTS, stage))
    if not root:
        return best, score
    pool = [with_strided_tokens(best, tokens) for tokens in LAYOUT_SPACE["tokens_per_task"]]
    measurements = measure(pool, REPS_LAYOUTS, f"{stage}, root table tiles")
    score, winner = max((m.score(), -i) for i, m in enumerate(measurements) if m is not None)
    return pool[-winner], score


def _best_per_layout(base, pool, measurements):
    """`base` with every timed layout group's knobs taken from the candidate that scored best on it
    (a group without a timed shape, as in the in-place stage, keeps base's), and the composition's
    score: the geometric mean of the winners' ratios on their own shapes (the groups' shapes are
    disjoint)."""
    params = canonical(base)
    logs = []
    timed = {info["layout"] for m in measurements if m is not None for info in m.shapes.values()}
    for layout in (layout for layout in rk.LAYOUTS if layout in timed):
        scored = [(m.score(layout), i) for i, m in enumerate(measurements) if m is not None]
        _, winner = max(scored, key=lambda item: (item[0], -item[1]))
        params["layouts"][layout] = dict(pool[winner]["layouts"][layout])
        logs += [math.log(measurements[winner].ratio(shape))
                 for shape, info in measurements[winner].shapes.items() if info["layout"] == layout]
    return canonical(params), math.exp(sum(logs) / len(logs))


# ---- Building and timing candidates -------------------------------------------------------------

class Workbench:
    """Builds candidates with the build tree's generator and times them with its harness."""

    method = "measured"
    judges = MEASURED_KNOBS  # the knobs its measurements can tell apart
    measurement = Measurement

    def __init__(self, build, family, isa, jobs, log):
        self.generator = build / "generators" / "ropegen_generator"
        self.harness = build / "bench" / "tune" / "rope_tune_harness"
        for tool in self.tools():
            if not tool.exists():
                raise SystemExit(f"rope_tune: {tool} is missing: build first (cmake --build {build})")
        self.cache = build / "tune" / family / "candidates"
        self.cache.mkdir(parents=True, exist_ok=True)
        _, _, halide_target, _ = rk.ISAS[isa]
        self.target = "-".join([halide_target, *rk.KERNEL_FEATURES, "no_runtime"])
        self.isa = isa
        self.jobs = jobs
        self.log = log
        # Candidates depend on the generator alone; measurements on every tool.
        self.generator_hash = hashlib.sha256(self.generator.read_bytes()).hexdigest()[:16]
        self.fingerprint = hashlib.sha256(b"".join(tool.read_bytes() for tool in self.tools())).hexdigest()[:16]

    def tools(self):
        return [self.generator, self.harness]

    def machine(self):
        return rk.host_machine()

    def use_hint(self, machine):
        return "the builds of this machine use it from their next configure"

    def build(self, key, params):
        """The candidate's product (cached by everything that makes it) and its function name."""
        variant = {"style": key["style"], "head_dim": key["head_dim"], "dtype": rk.DTYPES[key["dtype"]][0],
                   "source": key["source"]}
        args = [f"target={self.target}"] + [f"{k}={v}" for k, v in {**variant, **rk.generator_params(params)}.items()]
        digest = hashlib.sha256(" ".join([self.generator_hash] + args).encode()).hexdigest()[:20]
        function = f"ropegen_tune_{digest}"
        product = self.cache / f"{function}{self.suffix}"
        if not product.exists():
            with tempfile.TemporaryDirectory(dir=self.cache) as scratch:
                subprocess.run([str(self.generator), "-g", "ropegen_rope", "-f", function, "-o", scratch,
                                "-e", self.emit, *args], check=True, capture_output=True, text=True)
                self.finish(pathlib.Path(scratch), function).rename(product)
        return product, function

    def build_all(self, key, pool):
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as executor:
            return list(executor.map(lambda params: self.build(key, params), pool))

    # Halide emits an object; the harness loads a shared object.
    emit, suffix = "object", ".so"

    def finish(self, scratch, function):
        shared = scratch / f"{function}.so"
        subprocess.run([os.environ.get("CC", "cc"), "-shared", "-o", str(shared), str(scratch / f"{function}.o")],
                       check=True, capture_output=True, text=True)
        return shared

    def measure(self, key, pool, reps, min_bytes=0, below_bytes=None, in_place=False):
        """A Measurement per candidate of `pool` (None for one that fails its check), on the shapes
        that move at least `min_bytes` and fewer than `below_bytes`: the calls in place alone with
        `in_place`, else the calls out of place alone."""
        built = self.build_all(key, pool)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=self.cache, delete=False) as listing:
            for index, ((shared, function), params) in enumerate(zip(built, pool)):
                # pair_words: the harness describes the candidate's output as the runtime does.
                listing.write(f"c{index} {shared} {function} {int(rk.stores_pair_words(key, params))}\n")
        try:
            run = subprocess.run([str(self.harness), "--style", key["style"], "--source", key["source"],
                                  "--dtype", key["dtype"], "--head-dim", str(key["head_dim"]), "--isa", self.isa,
                                  "--candidates", listing.name, "--reps", str(reps), "--min-bytes", str(min_bytes),
                                  "--in-place", str(int(in_place))]
                                 + (["--below-bytes", str(below_bytes)] if below_bytes is not None else []),
                                 capture_output=True, text=True)
        finally:
            os.unlink(listing.name)
        if run.returncode != 0:
            raise SystemExit(f"rope_tune: the harness failed ({run.returncode}): {run.stderr.strip()}")
        try:
            results = parse_harness_output(run.stdout.splitlines(), in_place)
        except ValueError as error:
            raise SystemExit(f"rope_tune: {error}") from None
        measurements = []
        for index, params in enumerate(pool):
            result = results.get(f"c{index}", Measurement({}))  # verified, and no shape that large
            if isinstance(result, str):
                self.log(f"\nrope_tune: {key_id(key)} candidate {json.dumps(params)} FAILED its check: {result}\n")
                result = None
            measurements.append(result)
        return measurements


class ModelledBench(Workbench):
    """Targets this machine cannot run (aarch64): candidates are judged by llvm-mca's estimate of
    their hot loops' cycles per rotated head (bench/neon_asm.py finds the loops), not timed. The
    model sees the rotation loop only, not threading, layouts' loop orders or the cos/sin
    tables, so it judges vector_pairs and unroll_pairs alone. Nothing runs here: the aarch64
    build that uses the file checks every kernel against the oracle under qemu."""

    judges = MODELLED_KNOBS
    measurement = ModelledMeasurement
    emit, suffix = "assembly", ".s"

    def __init__(self, build, family, isa, jobs, log, mca_cpu):
        self.llvm_mca = pathlib.Path(shutil.which("llvm-mca") or "/usr/bin/llvm-mca")
        self.mca_cpu = mca_cpu
        self.method = f"modelled (llvm-mca -mcpu={mca_cpu})"
        super().__init__(build, family, isa, jobs, log)
        self.scores = {}
        # The aarch64 build's C compiler (cmake/toolchains/aarch64-linux-gnu.cmake), for the audit's
        # check that a candidate assembles for its level's architecture.
        self.assembler = shutil.which("aarch64-linux-gnu-gcc")
        if self.assembler is None:
            log("rope_tune: no aarch64-linux-gnu-gcc: candidates are not assembled for their level's architecture "
                "here, only by the aarch64 build's neon.HotLoopAudit\n")

    def tools(self):
        return [self.generator, self.llvm_mca]

    def machine(self):
        version = subprocess.run([str(self.llvm_mca), "--version"], capture_output=True, text=True).stdout
        llvm = re.search(r"LLVM version (\S+)", version)
        return {"slug": f"llvm-mca-{self.mca_cpu}",
                "cpu": f"{self.mca_cpu} as llvm-mca {llvm.group(1) if llvm else '?'} models it (not measured)"}

    def use_hint(self, machine):
        return f"aarch64 builds use it with -DROPEGEN_TUNED_MACHINE={machine['slug']} (the aarch64 preset does)"

    def finish(self, scratch, function):
        return scratch / f"{function}.s"

    def measure(self, key, pool, reps, min_bytes=0, below_bytes=None, in_place=False):
        assert (min_bytes, below_bytes, in_place) == (0, None, False), "the model has no calls to select"
        head_bytes = (key["head_dim"] or ANY_HEAD_DIM) * neon_asm.ELEMENT_BYTES[key["dtype"]]
        measurements = []
        for (assembly, _), params in zip(self.build_all(key, pool), pool):
            if assembly not in self.scores:  # deterministic: estimated once
                loops = neon_asm.hot_loops(neon_asm.read_loops(assembly))
                if not loops:
                    raise SystemExit(f"rope_tune: no rotation hot loop found in {assembly}")
                # The check of a candidate that cannot run here: the NEON audit's (vector code,
                # no spills, ld2/st2 for the interleaved style, no instruction beyond its level),
                # which the aarch64 build enforces.
                problems = [f"{loop.function}: {problem}" for loop in loops
                            for problem in loop.problems(key["style"] == "interleaved")]
                if self.assembler and (beyond := neon_asm.beyond_level(assembly, self.isa, [self.assembler])):
                    problems.insert(0, beyond)
                if problems:
                    self.log(f"\nrope_tune: {key_id(key)} candidate {json.dumps(params)} fails the NEON audit: "
                             f"{problems[0]}\n")
                    self.scores[assembly] = None
                else:
                    self.scores[assembly] = ModelledMeasurement({
                        f"{loop.function}/{loop.header}": {
                            "layout": "model", "bytes": 0, "memcpy_ns": 1.0, "spread": 0.0,
                            "ns": neon_asm.mca_cycles_per_iteration(loop, self.mca_cpu, str(self.llvm_mca))
                            * head_bytes / loop.store_bytes()}
                        for loop in loops})
            measurements.append(self.scores[assembly])
        return measurements


# ---- Progress -----------------------------------------------------------------------------------

class Progress:
    """One status line on a terminal (a line per key otherwise): keys done, the stage, ETA."""

    def __init__(self, total, budget, stream=sys.stderr):
        self.total, self.budget, self.stream = total, budget, stream
        self.start = time.monotonic()
        self.done = 0
        self.key_seconds = []
        self.live = stream.isatty()

    def elapsed(self):
        return time.monotonic() - self.start

    def eta(self):
        if not self.key_seconds:
            return None
        remaining = statistics.mean(self.key_seconds) * (self.total - self.done)
        return min(remaining, max(0.0, self.budget - self.elapsed()))

    def show(self, text):
        width = 24
        filled = width * self.done // max(1, self.total)
        eta = self.eta()
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} keys  "
                f"{_clock(self.elapsed())} elapsed  ETA {_clock(eta) if eta is not None else '?'}  {text}")
        if self.live:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def key_done(self, seconds):
        self.done += 1
        self.key_seconds.append(seconds)

    def write(self, text):
        self.stream.write(text)
        self.stream.flush()


def _clock(seconds):
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


# ---- Files --------------------------------------------------------------------------------------

def cache_value(build, name):
    match = re.search(rf"^{re.escape(name)}:[A-Z]+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    if not match:
        raise SystemExit(f"rope_tune: {build}/CMakeCache.txt has no {name}: configure the build first")
    return match.group(1)


def versions(build):
    """(Halide, ropegen) versions of the build the candidates come from."""
    halide_config = pathlib.Path(cache_value(build, "Halide_DIR")) / "HalideConfigVersion.cmake"
    halide = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', halide_config.read_text()).group(1)
    return halide, cache_value(build, "CMAKE_PROJECT_VERSION")


def tuned_document(family, meta, results):
    """The tuned file: one fully specific entry per key, in key order, with the knobs the tuner
    changed and what was measured."""
    order = {key_id(k): i for i, k in enumerate(all_keys([]))}
    entries = []
    for kid in sorted(results, key=order.__getitem__):
        result = results[kid]
        entries.append({"match": result["key"], "params": result["params"], "measured": result["measured"]})
    return {"format": rk.SCHEDULE_FORMAT, "version": rk.SCHEDULE_VERSION, "target": family,
            "meta": {"tuned": meta}, "kernels": entries}


def write_json(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".partial")
    scratch.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    scratch.replace(path)


def existing_results(path, family, halide, ropegen, log):
    """The keys of a tuned file already at `path` (kept when this run tunes others) and the
    commands that wrote it, in the order they ran. A malformed file is an error, never
    overwritten silently; a stale one (another Halide or ropegen major.minor, whose schedules
    other code judged) keeps nothing."""
    if not path.exists():
        return {}, []
    tuned, _ = rk.read_tuned_file(path, family)
    stale = rk.stale_reason(tuned, halide, ropegen)
    if stale:
        log(f"rope_tune: {path} is stale ({stale}): tuning from nothing, none of its entries kept\n")
        return {}, []
    document = json.loads(path.read_text(encoding="utf-8"))
    results = {key_id(entry["match"]): {"key": entry["match"], "params": entry["params"], "measured": entry["measured"]}
               for entry in document["kernels"]}
    return results, document["meta"]["tuned"]["command"].split(COMMAND_SEPARATOR)


def file_command(earlier_commands, command, results):
    """meta.tuned.command of a file whose entries are `results`, written by `command` after
    `earlier_commands`: the commands that wrote its entries (each records its own), in the order
    they ran, so that running it rebuilds the file. A key tuned again drops the earlier entry."""
    # A kernel added by --large-calls-only or --in-place-only names its own command.
    used = collections.Counter(run for result in results.values() for run in (
        result["measured"].get("command"), *(result["measured"].get(c, {}).get("command") for c in rk.CALL_CLASSES))
        if run)
    runs = [c for c in earlier_commands if c != command] + [command]  # a rerun of a command ran last
    ordered = [c for c in runs if c in used]
    # Commands of entries written before meta listed them all ran before it; the widest first.
    unlisted = sorted((c for c in used if c and c not in ordered), key=lambda c: (-used[c], c))
    return COMMAND_SEPARATOR.join(unlisted + ordered)


def table(results, keys):
    """Default against tuned per key: memcpy ratios (measured) or cycles per head (modelled)."""
    lines = [f"{'key':<28} {'default':>8} {'tuned':>8} {'speedup':>8}  changed knobs"]
    for key in keys:
        result = results.get(key_id(key))
        if result is None:
            lines.append(f"{key_id(key):<28} {'(not tuned: budget)':>26}")
            continue
        measured = result["measured"]
        unit = next(name for name in (Measurement.UNIT, ModelledMeasurement.UNIT) if name in measured)
        lines.append(f"{key_id(key):<28} {measured['default_' + unit]:>8.3f} {measured[unit]:>8.3f} "
                     f"{measured['speedup']:>7.3f}x  {', '.join(measured['changed']) or '-'}")
    return "\n".join(lines)


def compare(bench, defaults, tuned_entries, keys, progress):
    """Default against tuned, measured afresh (not the run that chose them, whose winner is
    favoured by its own noise), for every key the tuned file (`tuned_entries`) holds, and a key's
    large-call kernel against its sibling on the shapes it serves, and what the tuned file gives
    calls in place (its in-place kernel or its own) against what the defaults give them, where
    they differ: a markdown table, and the keys whose default or tuned schedule fails its check on
    this build (a row says which)."""
    tuned_keys = {key_id(match) for _, match, _ in tuned_entries}
    rows, kept, failed = [], 0, []

    def row(key, label, pair, knobs, min_bytes=0, below_bytes=math.inf, in_place=False):
        """`pair` measured and scored on the shapes that move [min_bytes, below_bytes), the calls in
        place with `in_place`, else those out of place."""
        progress.show(f"{label}: {REPS_CONFIRM} reps")
        measured = bench.measure(key, pair, REPS_CONFIRM, min_bytes, in_place=in_place)
        if None in measured and key not in failed:
            failed.append(key)
        shapes = [[s for s, info in m.shapes.items() if info["bytes"] < below_bytes] if m else [] for m in measured]
        cells = [m.headline(names) if m and names else "fails its check" if m is None else "no shape of that size"
                 for m, names in zip(measured, shapes)]
        timed = all(shapes)
        speedup = f"{measured[1].score(shapes=shapes[1]) / measured[0].score(shapes=shapes[0]):.3f}" if timed else "-"
        rows.append(f"| {label} | {cells[0]} | {cells[1]} | {speedup} | {', '.join(knobs)} |")

    for key in (k for k in keys if key_id(k) in tuned_keys):
        progress.done += 1
        default_all, tuned_all = (canonical(rk.resolve(defaults, key, layer)) for layer in ((), tuned_entries))
        default_kernels, kernels = kernels_of(key, default_all), kernels_of(key, tuned_all)
        default, own = default_kernels[None][1], kernels[None][1]
        measured = bench.judges == MEASURED_KNOBS  # the model sees neither call sizes nor calls in place
        large_row = measured and rk.LARGE_CALLS in kernels
        # With a large-call kernel, the key's own one serves the calls below its size only. The
        # calls in place have a row of their own where the defaults and the tuned file serve them
        # with different kernels (an in-place one, or the key's own ones where they differ).
        in_place_row = measured and in_place_kernel(key, default_all) != in_place_kernel(key, tuned_all)
        if own == default and not large_row and not in_place_row:
            kept += 1
            continue
        knobs = changed_knobs(default_all, tuned_all)
        from_bytes, large = kernels[rk.LARGE_CALLS] if large_row else (math.inf, None)
        if own != default:
            label = key_id(key) if not large_row else f"{key_id(key)}, calls below {from_bytes} bytes"
            row(key, label, [default, own], [k for k in knobs if not k.startswith(rk.CALL_CLASSES)], below_bytes=from_bytes)
        if large_row:
            row(key, f"{key_id(key)}, calls from {from_bytes} bytes (tuned: the large-call kernel)",
                [own, large], [k for k in knobs if k.startswith(rk.LARGE_CALLS)], min_bytes=from_bytes)
        if in_place_row:
            # The knobs by which the two kernels differ: a tuned own kernel changes an in-place
            # kernel's knobs that its class does not set.
            pair = [in_place_kernel(key, default_all), in_place_kernel(key, tuned_all)]
            served_by = "the in-place kernel" if rk.IN_PLACE_CALLS in kernels else "its own kernel"
            row(key, f"{key_id(key)}, calls in place (tuned: {served_by})", pair, changed_knobs(*pair),
                below_bytes=from_bytes, in_place=True)
    header = [f"| key | default ({bench.measurement.UNIT.replace('_', ' ')}) | tuned | speedup | changed knobs |",
              "|---|---|---|---|---|"]
    return "\n".join(header + rows) + f"\n\nThe other {kept} keys kept the defaults.\n", failed


def changed_params(default, params):
    """The knobs of `params` that differ from `default`, nested as in a schedule entry: what a
    tuned entry holds, so that a later change of a default reaches the knobs the tuner kept."""
    changed = {knob: value for knob, value in params.items() if knob != "layouts" and value != default.get(knob)}
    layouts = {layout: {knob: value for knob, value in knobs.items() if value != default["layouts"][layout][knob]}
               for layout, knobs in params["layouts"].items()}
    if any(layouts.values()):
        changed["layouts"] = {layout: knobs for layout, knobs in layouts.items() if knobs}
    return changed


def changed_knobs(default, params):
    """changed_params as generator parameters, "name=value"."""
    changed = changed_params(default, params)
    flat = rk.generator_params({"layouts": {}, **changed})
    knobs = [f"{k}={flat[k]}" for k in sorted(flat)]
    for call_class in rk.CALL_CLASSES:
        if call_class in changed:
            entry = dict(changed[call_class])
            size = entry.pop("from_bytes", None)
            label = call_class if size is None else f"{call_class}({size})"
            class_flat = rk.generator_params({"layouts": {}, **entry})
            knobs += [f"{label}:{k}={class_flat[k]}" for k in sorted(class_flat)]
    return knobs


# ---- Main ---------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cpu_families = {family: (isa, arch) for isa, (arch, family, *_) in rk.ISAS.items()}
    parser.add_argument("--target", required=True, choices=sorted(cpu_families),
                        help="schedule family to tune: measured on this machine's architecture, modelled for aarch64")
    parser.add_argument("--keys", action="append", default=[],
                        help="only keys matching, e.g. head_dim=128,dtype=bf16|f32 (repeatable; default: all)")
    parser.add_argument("--budget", type=float, default=600, help="seconds; no key starts after it (default 600)")
    parser.add_argument("--build", type=pathlib.Path, default=ROOT / "build" / "release", help="a configured, built tree")
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT / "schedules" / "tuned",
                        help="writes <out-dir>/<target>/<machine>.json (default: schedules/tuned)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel candidate builds")
    parser.add_argument("--full-sweep", action="store_true",
                        help="also time every combination of each key and compare it with the staged search")
    parser.add_argument("--fresh", action="store_true", help="ignore the state of an interrupted run")
    parser.add_argument("--large-calls-from", type=int, default=None, metavar="BYTES",
                        help="search a large-call kernel (large_calls) for calls moving at least BYTES; "
                             "default: this machine's last-level cache size; 0: none")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--large-calls-only", action="store_true",
                      help="search the large-call kernels (stage 4) alone, on the kernels the machine's tuned file "
                           "gives each key (those with one keep it), and add them to it")
    only.add_argument("--in-place-only", action="store_true",
                      help="search the in-place kernels (stage 5) alone, on the kernels the machine's tuned file "
                           "gives each key, and add them to it")
    parser.add_argument("--mca-cpu", default="neoverse-n1", help="llvm-mca's CPU for modelled targets (default neoverse-n1)")
    parser.add_argument("--compare", action="store_true",
                        help="tune nothing: measure the existing tuned file's keys against the defaults afresh")
    parser.add_argument("--write-readme", type=pathlib.Path,
                        help="with --compare: put the table into this file between its tune markers")
    args = parser.parse_args(argv)
    try:
        filters = [parse_key_filter(text) for text in args.keys]
    except ValueError as err:
        parser.error(str(err))

    family, (isa, arch) = args.target, cpu_families[args.target]
    build = args.build.resolve()
    halide, ropegen = versions(build)
    defaults = rk.load_schedule_file(ROOT / "schedules" / f"{family}.json", family)
    keys = all_keys(filters)
    progress = Progress(len(keys), args.budget)
    host_arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    if arch == host_arch:
        bench = Workbench(build, family, isa, args.jobs, progress.write)
    elif arch == "aarch64":
        bench = ModelledBench(build, family, isa, args.jobs, progress.write, args.mca_cpu)
    else:
        parser.error(f"{family} kernels cannot run on this {host_arch} machine, and only aarch64 has a model")
    # One stage alone (--large-calls-only, --in-place-only): its call class and its option.
    only_stage = next(((call_class, option) for call_class, option, chosen in (
        (rk.LARGE_CALLS, "--large-calls-only", args.large_calls_only),
        (rk.IN_PLACE_CALLS, "--in-place-only", args.in_place_only)) if chosen), None)
    if only_stage and (args.full_sweep or args.compare or bench.judges != MEASURED_KNOBS):
        parser.error(f"{only_stage[1]} times calls on this machine, on the kernels the machine's file gives: "
                     "not with --full-sweep or --compare, nor for a modelled target")
    if args.in_place_only and args.large_calls_from is not None:
        parser.error("--in-place-only leaves the large-call kernels as the machine's file has them: "
                     "not with --large-calls-from")
    if args.full_sweep and bench.judges != MEASURED_KNOBS:
        parser.error("--full-sweep needs measurements: the model of a target this machine cannot run judges only "
                     f"{', '.join(bench.judges)}")
    machine = bench.machine()
    out = args.out_dir / family / f"{machine['slug']}.json"
    command = " ".join(["bench/tune/rope_tune.py"] + [shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])])
    if args.compare:
        tuned_entries = rk.load_tuned_file(out, family, halide, ropegen)
        markdown, failed = compare(bench, defaults, tuned_entries, keys, progress)
        progress.show("done\n")
        print(markdown)
        if failed:  # the build would reject (aarch64: the NEON audit) or miscompute these: no README table
            retune = " ".join(f"--keys {shlex.quote(key_filter(key))}" for key in failed)
            print(f"rope_tune: {len(failed)} key(s) fail their check on this build: "
                  f"{', '.join(map(key_id, failed))}; retune them: "
                  f"bench/tune/rope_tune.py --target {family} {retune}", file=sys.stderr)
            return 1
        if args.write_readme:
            # One section per tuned file: a family may have a file per machine.
            section = f"{family}/{machine['slug']}"
            begin, end = f"<!-- tune:{section}:begin -->", f"<!-- tune:{section}:end -->"
            shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out  # --out-dir may lie elsewhere
            neon_asm.write_readme(args.write_readme, f"{machine['cpu']}; {shown}.\n\n{markdown}",
                                  command, begin, end)
        return 0

    # The file this run adds to, judged before any measuring.
    try:
        earlier_results, earlier_commands = existing_results(out, family, halide, ropegen, progress.write)
    except rk.ScheduleError as err:
        raise SystemExit(f"rope_tune: {err}; the tuner does not overwrite a malformed file: fix or remove it")

    # Resume: the state of an interrupted run of the same search (keys, tools, Halide).
    state_path = build / "tune" / family / f"{machine['slug']}.state.json"
    # Calls moving more than the last-level cache stream from DRAM, where other knobs can win.
    from_bytes = last_level_cache_bytes() if args.large_calls_from is None else args.large_calls_from
    if from_bytes is not None and not 0 <= from_bytes <= rk.MAX_FROM_BYTES:
        parser.error(f"--large-calls-from: {from_bytes} must be 0 (none) or a byte count up to {rk.MAX_FROM_BYTES}")
    if args.large_calls_only and not from_bytes:
        parser.error("--large-calls-only needs a size from which calls are large: --large-calls-from BYTES "
                     "(not 0), or a last-level cache size this machine tells")
    if only_stage and not earlier_results:
        parser.error(f"{only_stage[1]} adds kernels to the entries of {out}, and it holds no current one: "
                     "tune without it first")
    # What decides the results: the budget and --fresh do not, so a rerun may change them. A run of
    # one stage alone builds on the file's entries as it found them.
    file_hash = hashlib.sha256(out.read_bytes()).hexdigest()[:16] if only_stage else None
    identity = {"target": family, "keys": args.keys, "full_sweep": args.full_sweep, "mca_cpu": args.mca_cpu,
                "large_calls_from": None if args.in_place_only else from_bytes,
                "only": [only_stage[1], file_hash] if only_stage else None,
                "tools": bench.fingerprint, "halide": halide}
    state = json.loads(state_path.read_text()) if state_path.exists() and not args.fresh else {}
    if only_stage and file_hash == state.get("wrote"):  # the file a run stopped by its budget wrote: it goes on
        identity["only"] = state["identity"]["only"]
    results = state.get("results", {}) if state.get("identity") == identity else {}
    if results:
        progress.write(f"rope_tune: resuming {state_path}: {len(results)} key(s) already tuned\n")
    sweep_report = state.get("sweeps", {}) if results else {}

    finished = True  # every key done, none left by the budget
    for key in keys:
        kid = key_id(key)
        if kid in results:
            progress.done += 1
            continue
        if progress.elapsed() > args.budget:
            finished = False
            break
        started = time.monotonic()
        default = canonical(rk.resolve(defaults, key))

        def measure(pool, reps, stage, min_bytes=0, below_bytes=None, in_place=False, key=key, kid=kid):
            progress.show(f"{kid}: {stage}, {len(pool)} candidates x {reps} reps")
            return bench.measure(key, pool, reps, min_bytes, below_bytes, in_place)

        if only_stage:
            call_class, option = only_stage
            earlier = earlier_results.get(kid)
            if earlier is None:
                progress.write(f"\nrope_tune: {kid} has no entry in {out} to add a kernel to: "
                               f"tune it first (without {option})\n")
            else:
                def with_kernel_of(tuned, summary, default=default, key=key, measure=measure):
                    if call_class == rk.IN_PLACE_CALLS:
                        return with_in_place_kernel(default, tuned, key, isa, measure, summary)
                    # A key with a large-call kernel keeps it: a run of the whole key searches again.
                    if large_call_bytes(key, tuned) is not None:
                        return tuned
                    return with_large_call_kernel(default, tuned, None, key, isa, measure, from_bytes, summary)

                results[kid] = one_stage_only(default, earlier, defaults, call_class, with_kernel_of, command)
                write_json(state_path, {"identity": identity, "results": results, "sweeps": sweep_report})
            progress.key_done(time.monotonic() - started)
            continue
        if args.full_sweep:
            swept = full_sweep(default, key, isa, measure)
            staged, _, _ = staged_search(default, key, isa, measure, lambda: False)
            pool = [canonical(default), staged, swept]
            m = measure(pool, REPS_CONFIRM, "staged against full sweep")
            sweep_report[kid] = {"default": round(m[0].score(), 3), "staged": round(m[1].score(), 3),
                                 "full_sweep": round(m[2].score(), 3),
                                 "staged_of_full": round(m[1].score() / m[2].score(), 3)}
            tuned, tuned_m, default_m = confirm(default, [staged, swept], measure)
        else:
            tuned, tuned_m, default_m = staged_search(default, key, isa, measure,
                                                      lambda: progress.elapsed() > args.budget, bench.judges)
        summary = tuned_m.summary(default_m)
        if from_bytes and bench.judges == MEASURED_KNOBS and not progress.elapsed() > args.budget:
            tuned = with_large_call_kernel(default, tuned, tuned_m, key, isa, measure, from_bytes, summary)
        if bench.judges == MEASURED_KNOBS and not progress.elapsed() > args.budget:
            tuned = with_in_place_kernel(default, tuned, key, isa, measure, summary)
        # The command per entry: a file may gather keys of several runs (--keys).
        results[kid] = {"key": key, "params": changed_params(default, tuned), "measured": {
            **summary, "changed": changed_knobs(default, tuned), "command": command}}
        write_json(state_path, {"identity": identity, "results": results, "sweeps": sweep_report})
        progress.key_done(time.monotonic() - started)
    progress.show("done\n" if finished else "budget spent\n")

    merged = {**earlier_results, **results}
    meta = {"machine": machine["slug"], "cpu": machine["cpu"], "method": bench.method, "halide": halide,
            "ropegen": ropegen, "date": datetime.date.today().isoformat(),
            "command": file_command(earlier_commands, command, merged)}
    write_json(out, tuned_document(family, meta, merged))
    if only_stage and not finished and state_path.exists():  # a rerun goes on from the file written here
        state = json.loads(state_path.read_text())
        write_json(state_path, {**state, "wrote": hashlib.sha256(out.read_bytes()).hexdigest()[:16]})
    rk.load_tuned_file(out, family, halide, ropegen)  # what the build will read
    print(table(results, [key for key in keys if key_id(key) in results] if only_stage else keys))
    for kid, report in sweep_report.items():
        print(f"full sweep {kid}: default {report['default']}, staged {report['staged']}, "
              f"full sweep {report['full_sweep']} (staged reaches {report['staged_of_full']:.1%} of it)")
    print(f"wrote {out} ({len(merged)} tuned keys); {bench.use_hint(machine)}")
    if finished:
        state_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
