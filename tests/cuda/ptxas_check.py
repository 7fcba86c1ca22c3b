#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compiles the PTX of every CUDA kernel of a build with ptxas, the way the driver will.

The build lists its CUDA kernels in runtime/kernel_ptx.txt (name, Halide target, PTX file). Each
PTX file is assembled for the architecture it targets and for sm_90 (Hopper runs the newest PTX a
build has), with the register cap Halide's CUDA runtime gives the driver's JIT (64 per thread).
Any ptxas error, and any spill, fails the check; registers, spills, stack and shared memory of
every function are written to --table as CSV, and --summary writes a Markdown summary (one row per
CUDA level and architecture) between the ptxas markers of a README.

With --lint, ptxas is not run: instead no kernel may store an element from part of a 64-bit
register (`st.global.b16 [..], %rd7`). That is how LLVM's NVPTX backend writes a vector it
cannot store whole, for want of alignment, and the kernels never ask for one: fixed head_dim
kernels need 16-byte alignment, the any-head_dim kernels make scalar accesses. An H200 found the
any-head_dim interleaved f16 kernels storing a 2-byte-aligned f16 pair as both lanes' f32 bits
that way (8 bytes where 4 belong); ptxas accepts such PTX, this check does not.

Exit status: 0 all accepted without spills; 1 a failure; 77 ptxas not available (a skip).
"""
import argparse
import concurrent.futures
import csv
import os
import pathlib
import re
import subprocess
import sys

# What Halide's CUDA runtime passes as CU_JIT_MAX_REGISTERS when it loads a module.
JIT_MAX_REGISTERS = 64
HOPPER = 90
MARKERS = ("<!-- ptxas:begin -->", "<!-- ptxas:end -->")

FUNCTION = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>sm_\d+)'")
USAGE = re.compile(r"Used (?P<registers>\d+) registers")
SPILLS = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads")
SHARED = re.compile(r"(?P<shared>\d+) bytes smem")


# A store of 8-, 16- or 32-bit elements whose data is a 64-bit register: st[.global][.cs].b16 [addr], %rdN,
# predicated or not, or a vector store with such an element.
SPLIT_STORE = re.compile(r"^\s*(?:@!?%p\d+\s+)?st(?:\.[a-z0-9_:]+)*?\.[bsuf](?:8|16|32)\s+\[[^]]*\],"
                         r"\s*(?:%rd\d+|\{[^}]*%rd\d+[^}]*\})\s*;", re.MULTILINE)


def split_stores(ptx_text):
    """The lines of a PTX text that store an element out of a 64-bit register."""
    return [match.group(0).strip() for match in SPLIT_STORE.finditer(ptx_text)]


def ptx_target(ptx_text):
    match = re.search(r"^\s*\.target\s+sm_(\d+)", ptx_text, re.MULTILINE)
    if not match:
        raise ValueError("no .target directive")
    return int(match.group(1))


def assemble(ptxas, kernel, ptx_path, arch):
    """ptxas one PTX file for one architecture; returns (kernel, arch, functions, error text)."""
    command = [ptxas, f"-arch=sm_{arch}", "-v", f"--maxrregcount={JIT_MAX_REGISTERS}", "-o", os.devnull, str(ptx_path)]
    result = subprocess.run(command, capture_output=True, text=True)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        return kernel, arch, [], f"{' '.join(command)} failed ({result.returncode}):\n{log}"
    functions, current = [], None
    for line in log.splitlines():
        if match := FUNCTION.search(line):
            current = {"function": match.group("name"), "registers": 0, "stack": 0, "spill_stores": 0,
                       "spill_loads": 0, "shared": 0}
            functions.append(current)
        elif current is not None:
            if match := SPILLS.search(line):
                current.update(stack=int(match.group("stack")), spill_stores=int(match.group("stores")),
                               spill_loads=int(match.group("loads")))
            if match := USAGE.search(line):
                current["registers"] = int(match.group("registers"))
            if match := SHARED.search(line):
                current["shared"] = int(match.group("shared"))
    if not functions:
        return kernel, arch, [], f"{' '.join(command)} reported no entry function:\n{log}"
    return kernel, arch, functions, ""


def write_summary(readme, rows):
    """Replaces the text between the ptxas markers of `readme` with a table of `rows`."""
    by_group = {}
    for row in rows:
        level = row["kernel"].rsplit("__", 1)[1]
        by_group.setdefault((level, row["arch"]), []).append(row)
    lines = ["| level | ptxas arch | kernels | entry functions | registers (max) | spill bytes | stack bytes (max) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for (level, arch), group in sorted(by_group.items()):
        lines.append(f"| {level} | {arch} | {len({r['kernel'] for r in group})} | {len(group)} | "
                     f"{max(r['registers'] for r in group)} | {sum(r['spill_stores'] + r['spill_loads'] for r in group)} | "
                     f"{max(r['stack'] for r in group)} |")
    text = readme.read_text()
    begin, end = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
    readme.write_text(text[:begin] + "\n" + "\n".join(lines) + "\n" + text[end:])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", required=True, type=pathlib.Path, help="runtime/kernel_ptx.txt of a build")
    parser.add_argument("--ptxas", default="ptxas")
    parser.add_argument("--table", type=pathlib.Path, help="CSV of every function's resources")
    parser.add_argument("--summary", type=pathlib.Path, help="README whose ptxas markers get the summary table")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lint", action="store_true", help="check the stores of the PTX instead of running ptxas")
    args = parser.parse_args()
    kernels = [line.split(" ", 2) for line in args.kernels.read_text().splitlines()]
    if not kernels:
        print(f"FAILED: {args.kernels} lists no CUDA kernel", file=sys.stderr)
        return 1

    if args.lint:
        failures = 0
        for kernel, _target, ptx in kernels:
            for line in split_stores(pathlib.Path(ptx).read_text()):
                print(f"FAILED: {kernel} stores an element out of a 64-bit register: {line}", file=sys.stderr)
                failures += 1
        print(f"{len(kernels)} kernels, {failures} stores of an element out of a 64-bit register")
        return 1 if failures else 0

    try:
        version = subprocess.run([args.ptxas, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"SKIPPED: ptxas is not available ({err}); install the CUDA toolkit to check the PTX", file=sys.stderr)
        return 77
    print(version.strip().splitlines()[-1])

    jobs = []
    for kernel, _target, ptx in kernels:
        own = ptx_target(pathlib.Path(ptx).read_text())
        for arch in sorted({own, HOPPER}):
            jobs.append((kernel, pathlib.Path(ptx), arch))

    rows, failures = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for kernel, arch, functions, error in pool.map(lambda job: assemble(args.ptxas, *job), jobs):
            if error:
                failures.append(f"{kernel} (sm_{arch}): {error}")
            for function in functions:
                row = {"kernel": kernel, "arch": f"sm_{arch}", **function}
                rows.append(row)
                if function["spill_stores"] or function["spill_loads"]:
                    failures.append(f"{kernel} (sm_{arch}) {function['function']}: spills {function['spill_stores']} bytes "
                                    f"and reloads {function['spill_loads']} bytes at {JIT_MAX_REGISTERS} registers")
    rows.sort(key=lambda r: (r["kernel"], r["arch"], r["function"]))
    if args.table:
        with args.table.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if args.summary and rows:
        write_summary(args.summary, rows)
    kernels = len({job[0] for job in jobs})
    print(f"ptxas: {kernels} kernels, {len(jobs)} assemblies, {len(rows)} entry functions, "
          f"max {max((r['registers'] for r in rows), default=0)} registers, "
          f"{sum(r['spill_stores'] + r['spill_loads'] for r in rows)} spill bytes")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
