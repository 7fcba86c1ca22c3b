#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns rope_bench's Google Benchmark JSON into Markdown tables and updates bench/README.md.

    ./build/bench/rope_bench --benchmark_format=json --benchmark_out=results.json ...
    bench/bench_table.py results.json                 # prints, and rewrites the README section
    bench/bench_table.py results.json --no-readme     # prints only

Benchmark names are "kind/key:value/..." (kind: rope, rope_inplace, rope_plan, memcpy, copy,
rewrite, scalar, scalar_inplace, call). The `vs memcpy`, `vs scalar`, `vs rewrite` and
`vs rope_dispatch` ratios, and the interleaved/half, computed/cache and bf16/f32 targets, are the rows' own
counters (memcpy_ratio, scalar_ratio, rewrite_ratio, dispatch_ratio, half_ratio, cache_ratio, f32_ratio), which
rope_bench measures paired (the row's call and the other timed in alternation), not ratios of
rows timed minutes apart. With
--benchmark_repetitions the "median" aggregate is used. Python standard library only.
"""
import argparse
import datetime
import json
import pathlib
import statistics
import sys

BEGIN = "<!-- bench_table.py: begin results (generated; edits here are overwritten) -->"
END = "<!-- bench_table.py: end results -->"
UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
CASE_KEYS = ("shape", "dtype", "style", "source", "threads")


def parse_name(name):
    parts = name.split("/")
    return parts[0], dict(part.split(":", 1) for part in parts[1:] if ":" in part)


def load_runs(doc):
    """One dict per benchmark: kind, its name's keys, seconds, gbps, label (or error)."""
    groups = {}
    for entry in doc.get("benchmarks", []):
        groups.setdefault(entry.get("run_name", entry["name"]), []).append(entry)
    runs = []
    for run_name, entries in groups.items():
        kind, keys = parse_name(run_name)
        run = {"kind": kind, "name": run_name, **keys}
        errors = [e for e in entries if e.get("error_occurred")]
        if errors:
            run["error"] = errors[0].get("error_message", "")
            runs.append(run)
            continue
        chosen = [e for e in entries if e.get("run_type") == "aggregate" and e.get("aggregate_name") == "median"]
        chosen = chosen or [e for e in entries if e.get("run_type", "iteration") == "iteration"]
        if not chosen:
            continue

        def median_of(field):
            values = [e[field] for e in chosen if field in e]
            return statistics.median(values) if values else None

        run["seconds"] = statistics.median(e["real_time"] * UNIT_SECONDS[e.get("time_unit", "ns")] for e in chosen)
        bytes_per_second = median_of("bytes_per_second")
        run["gbps"] = bytes_per_second / 1e9 if bytes_per_second else None
        run["memcpy_ratio"] = median_of("memcpy_ratio")
        run["scalar_ratio"] = median_of("scalar_ratio")
        run["half_ratio"] = median_of("half_ratio")
        run["cache_ratio"] = median_of("cache_ratio")
        run["f32_ratio"] = median_of("f32_ratio")
        run["rewrite_ratio"] = median_of("rewrite_ratio")
        run["dispatch_ratio"] = median_of("dispatch_ratio")
        run["label"] = chosen[0].get("label", "")
        runs.append(run)
    return runs


def case_text(run, skip=()):
    parts = [run.get(key) for key in CASE_KEYS if key not in skip and run.get(key)]
    if "threads" not in skip and run.get("threads"):
        parts[-1] = f"t{run['threads']}"
    return " ".join(parts)


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e3:.3f} ms"


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


class Results:
    def __init__(self, runs):
        self.runs = [r for r in runs if "error" not in r]
        self.errors = [r for r in runs if "error" in r]
        self.index = {(r["kind"],) + tuple(r.get(k) for k in CASE_KEYS): r for r in self.runs}

    def of_kind(self, kind):
        return [r for r in self.runs if r["kind"] == kind]

    def find(self, kind, run, **override):
        fields = {k: run.get(k) for k in CASE_KEYS}
        fields.update(override)
        return self.index.get((kind,) + tuple(fields[k] for k in CASE_KEYS))


def ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def inverse(value):
    return 1 / value if value else None


def case_table(runs, counters, extra=lambda run: []):
    """A row per run of a library call: its case, kernel, time and GB/s, then `counters` (header,
    field) and the cells `extra(run)` adds after them (their headers last in `counters`)."""
    headers = ["shape", "dtype", "style", "source", "threads", "kernel", "time", "GB/s", *(h for h, _ in counters)]
    lines = ["| " + " | ".join(headers) + " |", "|---|---|---|---|---|---|" + "---:|" * (len(headers) - 6)]
    for run in runs:
        cells = [run["shape"], run["dtype"], run["style"], run["source"], run["threads"], f"`{run['label']}`",
                 fmt_time(run["seconds"]), fmt(run["gbps"], 1), *(fmt(run[f]) for _, f in counters if f), *extra(run)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def rope_table(results):
    # scalar_ratio: cache-source rows only (the scalar loop reads the cache).
    return case_table(results.of_kind("rope"), [("vs memcpy", "memcpy_ratio"), ("vs scalar", "scalar_ratio")])


def in_place_table(results):
    def in_place_over_out_of_place(run):
        out_of_place = results.find("rope", run)
        return [fmt(ratio(run["seconds"], out_of_place["seconds"] if out_of_place else None))]

    return case_table(results.of_kind("rope_inplace"),
                      [("vs memcpy (out of place)", "memcpy_ratio"), ("vs rewrite", "rewrite_ratio"),
                       ("vs scalar in place", "scalar_ratio"), ("in place / out of place", None)],
                      in_place_over_out_of_place)


def plan_table(results):
    return case_table(results.of_kind("rope_plan"), [("vs memcpy", "memcpy_ratio"), ("vs scalar", "scalar_ratio"),
                                                     ("vs rope_dispatch", "dispatch_ratio")])


def baseline_table(results):
    lines = ["| baseline | shape | dtype | style | threads | time | GB/s | vs memcpy |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for run in [run for kind in ("memcpy", "copy", "rewrite", "scalar", "scalar_inplace") for run in results.of_kind(kind)]:
        vs_memcpy = 1.0 if run["kind"] == "memcpy" else run["memcpy_ratio"]
        lines.append(f"| {run['kind']} | {run['shape']} | {run['dtype']} | {run.get('style') or '-'} "
                     f"| {run['threads']} | {fmt_time(run['seconds'])} | {fmt(run['gbps'], 1)} | {fmt(vs_memcpy)} |")
    return lines


def call_table(results):
    lines = ["| call (1 token, 1 head, head_dim 64, f32, 1 thread) | kernel | ns per call |", "|---|---|---:|"]
    for run in results.of_kind("call"):
        lines.append(f"| {run.get('call')} | `{run['label']}` | {run['seconds'] * 1e9:.0f} |")
    return lines


# ---- Acceptance targets (measured, never asserted by the benchmark) ---------------------------

def acceptance(results):
    """(target, limit, [(case, run, value)], headline(run)) for each target of the lead. A limit
    (">=", 0.9) means value >= 0.9 passes."""
    rope = results.of_kind("rope")
    prefill_f32 = [r for r in rope if r["shape"].startswith("prefill") and r["dtype"] == "f32" and r["source"] == "cache"]
    decode8 = [r for r in rope if r["shape"] == "decode_b8" and r["dtype"] == "f32" and r["source"] == "cache"]
    decode8_in_place = [r for r in results.of_kind("rope_inplace") if r["shape"] == "decode_b8" and r["dtype"] == "f32"]
    decode8_plan = [r for r in results.of_kind("rope_plan") if r["shape"] == "decode_b8" and r["dtype"] == "f32"]

    def cases(runs, value):
        return [(case_text(run), run, value(run)) for run in runs]

    def counter_cases(field, a, counter, keep=lambda run: True):
        """Rows whose `field` is `a`: their time / their paired partner's (1 / counter)."""
        return [(case_text(run, (field,)), run, inverse(run[counter])) for run in rope if run.get(field) == a and keep(run)]

    def prefill_d128(run):
        return run["shape"] == "prefill_d128"

    def headline_f32(fixed):
        return lambda run: run["shape"] in ("prefill_d128", "decode_b8") and run["dtype"] == "f32" and fixed(run)

    return [
        ("prefill f32 bandwidth / memcpy bandwidth (same threads)", (">=", 0.9),
         cases(prefill_f32, lambda r: r["memcpy_ratio"]), prefill_d128),
        ("decode batch-8 f32 time / memcpy time", ("<=", 1.5),
         cases(decode8, lambda r: inverse(r["memcpy_ratio"])), lambda run: True),
        ("decode batch-8 f32 time / scalar-loop time", ("<", 1.0),
         cases(decode8, lambda r: inverse(r["scalar_ratio"])), lambda run: True),
        ("decode batch-8 f32 through a plan (rope_plan_run): time / scalar-loop time", ("<", 1.0),
         cases(decode8_plan, lambda r: inverse(r["scalar_ratio"])), lambda run: True),
        ("decode batch-8 f32 in place: time / out-of-place memcpy time", ("<=", 1.5),
         cases(decode8_in_place, lambda r: inverse(r["memcpy_ratio"])), lambda run: True),
        ("decode batch-8 f32 in place: time / in-place rewrite time", ("<=", 1.5),
         cases(decode8_in_place, lambda r: inverse(r["rewrite_ratio"])), lambda run: True),
        ("decode batch-8 f32 in place: time / in-place scalar-loop time", ("<", 1.0),
         cases(decode8_in_place, lambda r: inverse(r["scalar_ratio"])), lambda run: True),
        ("bf16 prefill time / f32 time", ("<=", 0.6),
         counter_cases("dtype", "bf16", "f32_ratio", lambda run: run["shape"].startswith("prefill")),
         lambda run: prefill_d128(run) and run["source"] == "cache" and run["style"] == "half"),
        ("interleaved time / half time", ("<=", 1.15), counter_cases("style", "interleaved", "half_ratio"),
         headline_f32(lambda run: run["source"] == "cache")),
        ("compat (computed) time / cache time", ("<=", 1.3), counter_cases("source", "compat", "cache_ratio"),
         headline_f32(lambda run: run["style"] == "half")),
        ("precise (computed) time / cache time", ("<=", 1.3), counter_cases("source", "precise", "cache_ratio"),
         headline_f32(lambda run: run["style"] == "half")),
    ]


def passes(limit, value):
    op, bound = limit
    return {">=": value >= bound, "<=": value <= bound, "<": value < bound}[op]


def acceptance_table(results):
    lines = ["| target | case | measured | pass |", "|---|---|---:|:---:|"]
    for target, limit, measured, headline in acceptance(results):
        title = f"{target} {limit[0]} {limit[1]}"
        # A case without its value (a row that lacks its paired counter) is named, not dropped.
        missing = [case for case, _, value in measured if value is None]
        measured = [m for m in measured if m[2] is not None]
        unmeasured = f"; {len(missing)} not measured: {', '.join(missing)}" if missing else ""
        if not measured:
            lines.append(f"| {title} | (not measured{unmeasured}) | - | - |")
            continue
        for case, run, value in measured:
            if headline(run):
                lines.append(f"| {title} | {case} | {value:.2f} | {'yes' if passes(limit, value) else '**no**'} |")
        # The summary names the case furthest on the wrong side (or nearest the limit if all pass).
        worst = (min if limit[0] == ">=" else max)(measured, key=lambda m: m[2])
        failing = sum(not passes(limit, m[2]) for m in measured)
        lines.append(f"| {title} | all {len(measured)} cases: {len(measured) - failing} pass; worst: {worst[0]}{unmeasured} "
                     f"| {worst[2]:.2f} | {'**no**' if failing or missing else 'yes'} |")
    return lines


# ---- Report ----------------------------------------------------------------------------------

def cpu_model(context):
    """The CPU the run names (rope_bench writes it); not this machine's, which may be another."""
    return context.get("cpu_model") or "unknown CPU (the results do not name it)"


def stamp(context, json_path, script_command):
    caches = ", ".join(f"L{c['level']}{c['type'][0].lower() if c['type'] != 'Unified' else ''} "
                       f"{c['size'] // 1024} KiB" + (f" ×{c['num_sharing']}" if c.get("num_sharing", 0) > 1 else "")
                       for c in context.get("caches", []))
    load = ", ".join(f"{x:.2f}" for x in context.get("load_avg", []))
    return [
        f"- CPU: {cpu_model(context)}, {context.get('num_cpus', '?')} logical CPUs at {context.get('mhz_per_cpu', '?')} MHz"
        + (f"; caches: {caches}" if caches else ""),
        f"- Date: {context.get('date', datetime.datetime.now().isoformat(timespec='seconds'))}; "
        f"load average at start: {load or '?'}",
        f"- ropegen {context.get('ropegen_version', '?')}, active ISA {context.get('ropegen_active_isa', '?')}, "
        f"{context.get('ropegen_kernels_built', '?')} kernels built; all-threads = {context.get('bench_threads', '?')}",
        f"- Benchmark command: `{context.get('command', '?')}`",
        f"- Table command: `{script_command}` (from `{json_path}`)",
    ]


def report(doc, json_path, script_command):
    results = Results(load_runs(doc))
    lines = ["## Results", "", *stamp(doc.get("context", {}), json_path, script_command), "",
             "`vs memcpy` = memcpy time of the same bytes at the same thread count / time (1.00 = memcpy speed);",
             "`vs scalar` = scalar-loop time (same shape, dtype, style, threads; cache source) / time (> 1 = faster);",
             "both timed paired, in alternation with the row's own call, in the row's run.", "",
             "### Acceptance targets", "", *acceptance_table(results), "",
             "### rope_dispatch", "", *rope_table(results), "",
             "### rope_dispatch in place (q_out = q, k_out = k; decode steps)", "",
             "`vs rewrite` = time of a loop reading every byte of q and k and writing it back in place (the in-place",
             "floor; the `rewrite` baseline rows) / time; `in place / out of place` = this time / the out-of-place row's",
             "time (< 1 = in place is faster).", "",
             *in_place_table(results), "",
             "### Plans (rope_plan_run of a plan made once; decode steps, out of place)", "",
             "`vs rope_dispatch` = rope_dispatch()'s time for the same call / time (> 1 = the plan is faster).", "",
             *plan_table(results), "",
             "### Baselines", "", *baseline_table(results), "",
             "### Cost of one call", "", *call_table(results)]
    if results.errors:
        lines += ["", "### Skipped", ""]
        lines += [f"- `{r['name']}`: {r['error']}" for r in results.errors]
    return "\n".join(lines) + "\n"


def update_readme(path, section):
    block = f"{BEGIN}\n{section}{END}\n"
    text = path.read_text() if path.exists() else "# ropegen benchmarks\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=pathlib.Path, help="Google Benchmark JSON (--benchmark_out)")
    parser.add_argument("--readme", type=pathlib.Path, default=pathlib.Path(__file__).with_name("README.md"))
    parser.add_argument("--no-readme", action="store_true", help="print the tables, leave the README alone")
    args = parser.parse_args()
    try:
        doc = json.loads(args.results.read_text())
    except (OSError, json.JSONDecodeError) as err:
        sys.exit(f"{args.results}: cannot read Google Benchmark JSON: {err}")
    section = report(doc, args.results, " ".join([pathlib.Path(sys.argv[0]).name] + sys.argv[1:]))
    sys.stdout.write(section)
    if not args.no_readme:
        update_readme(args.readme, section)


if __name__ == "__main__":
    main()
