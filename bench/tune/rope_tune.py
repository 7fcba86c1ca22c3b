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
  1. core knobs (vector_pairs, unroll_pairs, cos_sin_at) with the default layout knobs, pruned by
     a cost model (vectors of half to twice the ISA's width, no block wider than a head, no
     `inline` for computed sources, where it means `task`), then successive halving: every
     candidate a few repetitions, the best third again with more;
  2. the layout knobs (tokens_per_task, head_loop) with the best core, every layout group at
     once (each candidate sets all four groups alike, each group is judged on its own shapes);
  3. a confirmation: default against tuned, more repetitions; the tuned knobs are kept only if
     they beat the default, so a tuned file is never slower than the defaults it replaces.
--full-sweep times every combination instead (for a few keys: it shows what the staged search
misses), and confirms default, staged and full-sweep results against each other.

Scores are memcpy ratios (median memcpy time / median kernel time, measured in the same run),
combined over shapes by geometric mean. The run is resumable: finished keys are kept in a
state file in the build tree and a rerun of the same command continues after them.
"""
import argparse
import concurrent.futures
import dataclasses
import datetime
import hashlib
import itertools
import json
import math
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cmake"))
import ropegen_kernels as rk  # noqa: E402  (the build's schedule format, knobs and validation)

# The knob values the search may try; the schedule format's ranges are wider.
CORE_SPACE = {
    "vector_pairs": (4, 8, 16, 32, 64),
    "unroll_pairs": (1, 2, 4),
    "cos_sin_at": rk.COS_SIN_AT,
}
LAYOUT_SPACE = {
    "tokens_per_task": (1, 2, 4, 8, 16, 32, 64),
    "head_loop": rk.HEAD_LOOPS,
}
# f32 lanes of one vector register of each ISA: the unit the cost model prunes vector_pairs by.
VECTOR_F32_LANES = {"avx512": 16, "avx2": 8, "sse41": 4, "neon_fp16": 4, "neon": 4}
# The head_dim the any-head_dim kernel is timed at (the harness's kAnyHeadDim).
ANY_HEAD_DIM = 128
# Keys in the order a budget reaches them: the commonest first.
KEY_ORDER = {"head_dim": (128, 64, 256, 0), "dtype": ("bf16", "f32", "f16"),
             "style": rk.STYLES, "source": rk.SOURCES}
# Repetitions of each stage (successive halving: many candidates briefly, few at length).
REPS_SCREEN, REPS_FINAL, REPS_LAYOUTS, REPS_CONFIRM = 3, 7, 5, 15


# ---- Kernel keys and candidates ------------------------------------------------------------------

def key_id(key):
    return f"{key['style']}/{key['source']}/d{key['head_dim'] or 'any'}/{key['dtype']}"


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


def core_of(params):
    return {name: params[name] for name in CORE_SPACE}


def core_candidates(key, isa):
    """The cost model's pruning of the core grid."""
    lanes = VECTOR_F32_LANES[isa]
    head_pairs = (key["head_dim"] or ANY_HEAD_DIM) // 2
    result = []
    for vector_pairs, unroll_pairs, cos_sin_at in itertools.product(*CORE_SPACE.values()):
        if not lanes // 2 <= vector_pairs <= 2 * lanes:
            continue  # narrower: half-empty registers; wider: more registers than work per block
        if vector_pairs * unroll_pairs > head_pairs:
            continue  # a block wider than a head's pairs is all tail
        if cos_sin_at == "inline" and key["source"] != "cache":
            continue  # computed sources build a table anyway: `inline` means `task` for them
        result.append({"vector_pairs": vector_pairs, "unroll_pairs": unroll_pairs, "cos_sin_at": cos_sin_at})
    return result


def layout_candidates():
    return [dict(zip(LAYOUT_SPACE, values)) for values in itertools.product(*LAYOUT_SPACE.values())]


# ---- Scores -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Measurement:
    """One candidate in one harness run: per timed shape, its layout group, bytes moved, and the
    median times of the candidate and of the memcpy measured beside it."""
    shapes: dict  # shape -> {"layout", "bytes", "ns", "memcpy_ns", "spread"}

    def ratio(self, shape):
        return self.shapes[shape]["memcpy_ns"] / self.shapes[shape]["ns"]

    def score(self, layout=None):
        """Geometric mean of the memcpy ratios of every shape (of one layout group)."""
        ratios = [self.ratio(s) for s, info in self.shapes.items() if layout is None or info["layout"] == layout]
        return math.exp(sum(map(math.log, ratios)) / len(ratios))

    def summary(self):
        return {"memcpy_ratio": round(self.score(), 3),
                "shapes": {s: {"gbps": round(info["bytes"] / info["ns"], 1), "memcpy_ratio": round(self.ratio(s), 3)}
                           for s, info in sorted(self.shapes.items())}}


def parse_harness_output(lines):
    """The harness's JSON lines -> ({id: Measurement or failure message})."""
    failures, times = {}, {}
    for line in lines:
        record = json.loads(line)
        if "verified" in record:
            if not record["verified"]:
                failures[record["candidate"]] = record["failure"]
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
                "layout": record["layout"], "bytes": record["bytes"], "ns": median, "memcpy_ns": memcpy_ns,
                "spread": (quartiles[2] - quartiles[0]) / median}
    results.update(failures)
    return results


# ---- Search -------------------------------------------------------------------------------------

def staged_search(default, key, isa, measure, out_of_budget):
    """The staged search of one key. `measure(candidates, reps, stage)` returns a Measurement per
    candidate (None for one that failed its check). Returns (tuned params, their Measurement,
    the default's Measurement) from the confirmation run."""
    # 1. Core knobs, default layouts: successive halving.
    pool = [with_core(default, core) for core in core_candidates(key, isa)]
    if canonical(default) not in pool:
        pool.append(canonical(default))
    ranked = _ranked(pool, measure(pool, REPS_SCREEN, "core knobs"))
    finalists = ranked[:max(3, len(ranked) // 3)]
    best = _ranked(finalists, measure(finalists, REPS_FINAL, "core finalists"))[0]
    # 2. Layout knobs with the best core, every group at once.
    if not out_of_budget():
        pool = [with_layouts(best, knobs) for knobs in layout_candidates()]
        best = _best_per_layout(best, pool, measure(pool, REPS_LAYOUTS, "layout knobs"))
    # 3. Confirmation.
    return confirm(default, [best], measure)


def full_sweep(default, key, isa, measure):
    """Every combination of the (pruned) core grid and the layout grid; returns the best params."""
    layouts = layout_candidates()
    best, best_score = None, -1.0
    for core in core_candidates(key, isa):
        base = with_core(default, core)
        pool = [with_layouts(base, knobs) for knobs in layouts]
        measurements = measure(pool, REPS_LAYOUTS, f"full sweep of {json.dumps(core)}")
        composed = _best_per_layout(base, pool, measurements)
        # The composition's score from the groups' winners (each group's shapes are disjoint).
        logs, count = 0.0, 0
        for layout in rk.LAYOUTS:
            winner = max((m for m in measurements if m), key=lambda m: m.score(layout))
            for shape, info in winner.shapes.items():
                if info["layout"] == layout:
                    logs, count = logs + math.log(winner.ratio(shape)), count + 1
        score = math.exp(logs / count)
        if score > best_score:
            best, best_score = composed, score
    return best


def confirm(default, contenders, measure):
    """Default and contenders measured together at length: the best of them, its Measurement and
    the default's. Ties go to the default."""
    pool = [canonical(default)] + [c for c in map(canonical, contenders) if c != canonical(default)]
    measurements = measure(pool, REPS_CONFIRM, "confirmation")
    if measurements[0] is None:
        raise RuntimeError("the default schedule failed its check against the oracle")
    best = max(range(len(pool)), key=lambda i: (measurements[i].score() if measurements[i] else -1, i == 0))
    return pool[best], measurements[best], measurements[0]


def _ranked(pool, measurements):
    scored = [(m.score(), i) for i, m in enumerate(measurements) if m is not None]
    return [pool[i] for _, i in sorted(scored, key=lambda item: (-item[0], item[1]))]


def _best_per_layout(base, pool, measurements):
    """`base` with every layout group's knobs taken from the candidate that scored best on it."""
    params = canonical(base)
    for layout in rk.LAYOUTS:
        scored = [(m.score(layout), i) for i, m in enumerate(measurements) if m is not None]
        _, winner = max(scored, key=lambda item: (item[0], -item[1]))
        params["layouts"][layout] = dict(pool[winner]["layouts"][layout])
    return canonical(params)


# ---- Building and timing candidates -------------------------------------------------------------

class Workbench:
    """Builds candidates with the build tree's generator and times them with its harness."""

    def __init__(self, build, family, isa, jobs, log):
        self.generator = build / "generators" / "ropegen_generator"
        self.harness = build / "bench" / "tune" / "rope_tune_harness"
        for tool in (self.generator, self.harness):
            if not tool.exists():
                raise SystemExit(f"rope_tune: {tool} is missing: build first (cmake --build {build})")
        self.cache = build / "tune" / family / "candidates"
        self.cache.mkdir(parents=True, exist_ok=True)
        _, _, halide_target, _ = rk.ISAS[isa]
        self.target = "-".join([halide_target, *rk.KERNEL_FEATURES, "no_runtime"])
        self.isa = isa
        self.jobs = jobs
        self.log = log
        self.fingerprint = hashlib.sha256(self.generator.read_bytes() + self.harness.read_bytes()).hexdigest()[:16]
        self.compiler = os.environ.get("CC", "cc")

    def build(self, key, params):
        """The shared object of one candidate (cached by everything that makes it)."""
        variant = {"style": key["style"], "head_dim": key["head_dim"], "dtype": rk.DTYPES[key["dtype"]][0],
                   "source": key["source"]}
        args = [f"target={self.target}"] + [f"{k}={v}" for k, v in {**variant, **rk.generator_params(params)}.items()]
        digest = hashlib.sha256(" ".join([self.fingerprint] + args).encode()).hexdigest()[:20]
        function = f"ropegen_tune_{digest}"
        shared = self.cache / f"{function}.so"
        if not shared.exists():
            with tempfile.TemporaryDirectory(dir=self.cache) as scratch:
                subprocess.run([str(self.generator), "-g", "ropegen_rope", "-f", function, "-o", scratch, "-e", "object",
                                *args], check=True, capture_output=True, text=True)
                partial = pathlib.Path(scratch) / f"{function}.so"
                subprocess.run([self.compiler, "-shared", "-o", str(partial), str(pathlib.Path(scratch) / f"{function}.o")],
                               check=True, capture_output=True, text=True)
                partial.rename(shared)
        return shared, function

    def measure(self, key, pool, reps):
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as executor:
            built = list(executor.map(lambda params: self.build(key, params), pool))
        with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=self.cache, delete=False) as listing:
            for index, (shared, function) in enumerate(built):
                listing.write(f"c{index} {shared} {function}\n")
        try:
            run = subprocess.run([str(self.harness), "--style", key["style"], "--source", key["source"],
                                  "--dtype", key["dtype"], "--head-dim", str(key["head_dim"]), "--isa", self.isa,
                                  "--candidates", listing.name, "--reps", str(reps)],
                                 capture_output=True, text=True)
        finally:
            os.unlink(listing.name)
        if run.returncode != 0:
            raise SystemExit(f"rope_tune: the harness failed ({run.returncode}): {run.stderr.strip()}")
        results = parse_harness_output(run.stdout.splitlines())
        measurements = []
        for index, params in enumerate(pool):
            result = results[f"c{index}"]
            if isinstance(result, str):
                self.log(f"\nrope_tune: {key_id(key)} candidate {json.dumps(params)} FAILED its check: {result}\n")
                result = None
            measurements.append(result)
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
    """The tuned file: one fully specific entry per key, in key order, with what was measured."""
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
    scratch.write_text(json.dumps(document, indent=2) + "\n")
    scratch.replace(path)


def existing_results(path, family, halide, ropegen):
    """The keys of a valid tuned file already at `path` (kept when this run tunes others)."""
    if not path.exists():
        return {}
    rk.load_tuned_file(path, family, halide, ropegen)  # a bad file is an error, never overwritten silently
    return {key_id(entry["match"]): {"key": entry["match"], "params": entry["params"], "measured": entry["measured"]}
            for entry in json.loads(path.read_text())["kernels"]}


def table(results, keys):
    lines = [f"{'key':<28} {'default':>8} {'tuned':>8} {'speedup':>8}  changed knobs"]
    for key in keys:
        result = results.get(key_id(key))
        if result is None:
            lines.append(f"{key_id(key):<28} {'(not tuned: budget)':>26}")
            continue
        measured = result["measured"]
        lines.append(f"{key_id(key):<28} {measured['default_memcpy_ratio']:>8.3f} {measured['memcpy_ratio']:>8.3f} "
                     f"{measured['speedup']:>7.3f}x  {', '.join(measured['changed']) or '-'}")
    return "\n".join(lines)


def changed_knobs(default, params):
    flat_default, flat = rk.generator_params(default), rk.generator_params(params)
    return [f"{k}={flat[k]}" for k in sorted(flat) if flat[k] != flat_default[k]]


# ---- Main ---------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cpu_families = {family: isa for isa, (arch, family, *_) in rk.ISAS.items() if arch == "x86_64"}
    parser.add_argument("--target", required=True, choices=sorted(cpu_families), help="schedule family to tune")
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
    args = parser.parse_args(argv)
    try:
        filters = [parse_key_filter(text) for text in args.keys]
    except ValueError as err:
        parser.error(str(err))

    family, isa = args.target, cpu_families[args.target]
    build = args.build.resolve()
    halide, ropegen = versions(build)
    machine = rk.host_machine()
    out = args.out_dir / family / f"{machine['slug']}.json"
    defaults = rk.load_schedule_file(ROOT / "schedules" / f"{family}.json", family)
    keys = all_keys(filters)
    progress = Progress(len(keys), args.budget)
    bench = Workbench(build, family, isa, args.jobs, progress.write)
    command = " ".join(["bench/tune/rope_tune.py"] + [shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])])

    # Resume: the state of an interrupted run of the same command on the same tools.
    state_path = build / "tune" / family / f"{machine['slug']}.state.json"
    identity = {"command": command, "tools": bench.fingerprint, "halide": halide}
    state = json.loads(state_path.read_text()) if state_path.exists() and not args.fresh else {}
    results = state.get("results", {}) if state.get("identity") == identity else {}
    if results:
        progress.write(f"rope_tune: resuming {state_path}: {len(results)} key(s) already tuned\n")
    sweep_report = state.get("sweeps", {}) if results else {}

    for key in keys:
        kid = key_id(key)
        if kid in results:
            progress.done += 1
            continue
        if progress.elapsed() > args.budget:
            break
        started = time.monotonic()
        default = canonical(rk.resolve(defaults, key))

        def measure(pool, reps, stage, key=key, kid=kid):
            progress.show(f"{kid}: {stage}, {len(pool)} candidates x {reps} reps")
            return bench.measure(key, pool, reps)

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
                                                      lambda: progress.elapsed() > args.budget)
        results[kid] = {"key": key, "params": tuned, "measured": {
            **tuned_m.summary(), "default_memcpy_ratio": round(default_m.score(), 3),
            "speedup": round(tuned_m.score() / default_m.score(), 3), "changed": changed_knobs(default, tuned)}}
        write_json(state_path, {"identity": identity, "results": results, "sweeps": sweep_report})
        progress.key_done(time.monotonic() - started)
    progress.show("done\n" if progress.done == len(keys) else "budget spent\n")

    meta = {"machine": machine["slug"], "cpu": machine["cpu"], "method": "measured", "halide": halide,
            "ropegen": ropegen, "date": datetime.date.today().isoformat(), "command": command}
    merged = {**existing_results(out, family, halide, ropegen), **results}
    write_json(out, tuned_document(family, meta, merged))
    rk.load_tuned_file(out, family, halide, ropegen)  # what the build will read
    print(table(results, keys))
    for kid, report in sweep_report.items():
        print(f"full sweep {kid}: default {report['default']}, staged {report['staged']}, "
              f"full sweep {report['full_sweep']} (staged reaches {report['staged_of_full']:.1%} of it)")
    print(f"wrote {out} ({len(merged)} tuned keys); the build of this machine uses it from the next configure")
    if len(results) == len(keys):
        state_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
