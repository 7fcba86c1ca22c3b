#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Instruction audit and llvm-mca estimates of the aarch64 kernels' hot loops.

Reads the kernel list of an aarch64 build (build/aarch64/runtime/kernel_assembly.txt: name, Halide
target and assembly file of every kernel; the build keeps the assembly Halide emits).

  audit  Every rotation task of every kernel (q and k, each tensor layout's loop nest) has a hot
         loop: the loop over whole pair blocks (hot_loops() says how it is found). It must be vector code:
         vector FP multiplies, no scalar FP arithmetic, no spills (stores to the stack), and the
         interleaved style must load with ld2 and store with st2 (not shuffles). Any violation
         is printed and the exit status is 1 (ctest: neon.HotLoopAudit). Reloads from the stack
         (values spilled before the loop, loaded again every iteration) are listed as notes.
         With --assembler (a C compiler for aarch64 or an assembler; --assembler-flag adds its
         options, as clang's --target=aarch64-linux-gnu), each kernel must also assemble with
         -march of no more than the dispatcher checks before it runs the kernel's level
         (LEVEL_MARCH): an instruction beyond it would fault on a CPU the level admits.
  mca    llvm-mca (Debian's LLVM) estimates the cycles of one iteration of those hot loops on
         Neoverse-N1 and Apple M1; cycles per rotated head = cycles per iteration x iterations per
         head (head bytes / bytes stored per iteration). The table (head_dim 128 kernels, median
         over the layouts' loop nests) goes to stdout, or into bench/README.md between its markers
         with --write-readme.

The estimates are the hot loop alone, at steady state, with every load hitting L1: a lower bound
on compute, not a bandwidth claim.
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys

MCA_CPUS = (("neoverse-n1", "Neoverse-N1"), ("apple-m1", "Apple M1"))
README_BEGIN = "<!-- neon-mca:begin (bench/neon_asm.py mca --write-readme) -->"
README_END = "<!-- neon-mca:end -->"
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}

INSTRUCTION = re.compile(r"^\t([a-z][\w.]*)\s*(.*?)\s*(//.*)?$")
FUNCTION = re.compile(r"^([A-Za-z_][\w.$]*):")
BLOCK = re.compile(r"^(?:\.L(BB\d+_\d+):|// %bb\.\d+:)")
INNER_HEADER = re.compile(r"=>\s*This Inner Loop Header")
IN_LOOP = re.compile(r"in Loop: Header=(BB\d+_\d+)")
VECTOR_REG = re.compile(r"\bv\d+\.(\d+)([bhsd])\b")
SCALAR_FP_REG = re.compile(r"^[hsd]\d+\b")
FP_ARITHMETIC = ("fmul", "fadd", "fsub", "fmla", "fmls", "fneg", "fdiv", "fmadd", "fmsub", "fnmadd", "fnmsub")
REG_BYTES = {"q": 16, "d": 8, "s": 4, "h": 2, "b": 1}
# A stack slot. Only sp-relative: Halide's kernels use x29 as a general register, not a frame pointer.
STACK_SLOT = re.compile(r"\[sp\b")
# Per level, the architecture of what the dispatcher checks before it runs the level's kernels
# (runtime/src/isa_aarch64.cpp): FP and AdvSIMD, ARMv8.0. The neon kernels are built with Halide's
# arm_fp16 (for its f16 conversions, fcvtl/fcvtn), which would let LLVM use FEAT_FP16 arithmetic.
LEVEL_MARCH = {"neon": "armv8-a"}


class Loop:
    """One innermost loop: its instructions as (mnemonic, operands) and the source text."""

    def __init__(self, function, header):
        self.function = function
        self.header = header
        self.instructions = []

    def text(self):
        return "".join(f"{mnemonic} {operands}\n" for mnemonic, operands in self.instructions)

    def store_bytes(self):
        """Bytes the loop stores to memory other than the stack, per iteration."""
        total = 0
        for mnemonic, operands in self.instructions:
            if STACK_SLOT.search(operands):
                continue
            registers, _, lane = operands.partition("}")
            if mnemonic.startswith(("st1", "st2", "st3", "st4")):
                if lane.startswith("["):  # one lane of each register: st1 { v0.s }[1]
                    total += sum(REG_BYTES[t] for t in re.findall(r"v\d+\.([bhsd])\b", registers))
                else:
                    total += sum(int(n) * REG_BYTES[t] for n, t in re.findall(r"v\d+\.(\d+)([bhsd])", registers))
            elif mnemonic in ("str", "stur", "stp", "stnp", "strh", "strb", "sturh", "sturb"):
                width = {"h": 2, "b": 1}.get(mnemonic[-1]) if mnemonic in ("strh", "strb", "sturh", "sturb") else None
                for register in re.findall(r"\b([qdshbwx])\d+\b|\b(wzr|xzr)\b", operands.split("[")[0]):
                    name = register[0] or register[1][0]
                    total += width or REG_BYTES.get(name, 4 if name == "w" else 8)
        return total

    def reloads(self):
        """Loads from the stack: values spilled before the loop and reloaded in every iteration."""
        return [f"{m} {ops}" for m, ops in self.instructions if m.startswith("ld") and STACK_SLOT.search(ops)]

    def single_lane_accesses(self):
        """Loads or stores of one vector lane (ld1 {v0.s}[2]): the per-lane guards of a tail."""
        return any(m.startswith(("ld1", "st1")) and "}[" in ops for m, ops in self.instructions)

    def bytes_per_instruction(self):
        return self.store_bytes() / max(1, len(self.instructions))

    def problems(self, interleaved):
        found = []
        vector_fp = [m for m, ops in self.instructions if m in FP_ARITHMETIC and VECTOR_REG.search(ops)]
        scalar_fp = [f"{m} {ops}" for m, ops in self.instructions if m in FP_ARITHMETIC and SCALAR_FP_REG.match(ops)]
        stack = [f"{m} {ops}" for m, ops in self.instructions if m.startswith("st") and STACK_SLOT.search(ops)]
        if not vector_fp:
            found.append("no vector FP arithmetic")
        if scalar_fp:
            found.append(f"scalar FP arithmetic: {scalar_fp[:3]}")
        if stack:
            found.append(f"spills to the stack: {stack[:3]}")
        for op, what in (("ld2", "de-interleaving loads"), ("st2", "interleaving stores")):
            if interleaved and not any(m.startswith(op) for m, _ in self.instructions):
                found.append(f"interleaved style without {op} {what}")
        return found


def read_loops(assembly_path):
    """Innermost loops of every rotation task function ('..._rotated_s0_..._task'), from LLVM's
    loop annotations: the header block says 'This Inner Loop Header', each other block of the loop
    'in Loop: Header=<its label>' (and may come before the header in the file)."""
    blocks = []  # [function, label, is_inner_header, header it belongs to, Loop-to-be instructions]
    function = None
    for line in pathlib.Path(assembly_path).read_text().splitlines():
        match = FUNCTION.match(line)
        if match:
            function = match.group(1) if re.search(r"_rotated_s\d+_.*_task", match.group(1)) else None
            continue
        if function is None:
            continue
        block = BLOCK.match(line)
        if block:
            blocks.append({"function": function, "label": block.group(1), "inner_header": False, "in_loop": None,
                           "instructions": []})
        if not blocks or blocks[-1]["function"] != function:
            continue
        if block or line.lstrip().startswith("//"):
            if INNER_HEADER.search(line):
                blocks[-1]["inner_header"] = True
            in_loop = IN_LOOP.search(line)
            if in_loop:
                blocks[-1]["in_loop"] = in_loop.group(1)
            continue
        instruction = INSTRUCTION.match(line)
        if instruction:
            blocks[-1]["instructions"].append((instruction.group(1), instruction.group(2)))
    loops = []
    for header in (b for b in blocks if b["inner_header"] and b["label"]):
        loop = Loop(header["function"], header["label"])
        members = [b for b in blocks if b["function"] == header["function"] and
                   (b is header or b["in_loop"] == header["label"])]
        for member in members:
            loop.instructions += member["instructions"]
        loops.append(loop)
    return loops


def hot_loops(loops):
    """The hot loop of each rotation task function: the loop over whole pair blocks, i.e. of its
    innermost loops the one storing the most bytes per instruction, passing over the GuardWithIf
    copies for a partial last block (they load and store single lanes) when there is another."""
    by_function = {}
    for loop in loops:
        best = by_function.get(loop.function)
        key = (not loop.single_lane_accesses(), loop.bytes_per_instruction())
        if best is None or key > (not best.single_lane_accesses(), best.bytes_per_instruction()):
            by_function[loop.function] = loop
    return [loop for loop in by_function.values() if loop.store_bytes() > 0]


def read_kernels(build):
    listing = pathlib.Path(build) / "runtime" / "kernel_assembly.txt"
    if not listing.exists():
        raise SystemExit(f"{listing} not found: configure and build an aarch64 build first (cmake --workflow --preset aarch64)")
    # Name, Halide target (unused: a kernel's level is in its name) and assembly file.
    return [kernel_entry(name, assembly) for name, _, assembly in
            (line.split(maxsplit=2) for line in listing.read_text().splitlines())]


def kernel_entry(name, assembly):
    """A kernel of the list, its key read back from its name."""
    match = re.match(r"ropegen_(half|interleaved)_(cache|compat|precise)_d(\d+|any)_(f32|f16|bf16)(?:_large|_inplace)?__(\w+)$", name)
    if match is None:
        raise SystemExit(f"{name}: not a ropegen kernel name (ropegen_<style>_<source>_d<head_dim>_<dtype>[_large|_inplace]__<isa>)")
    style, source, head_dim, dtype, isa = match.groups()
    return {"name": name, "assembly": assembly, "style": style, "source": source,
            "head_dim": head_dim, "dtype": dtype, "isa": isa}


def beyond_level(assembly, isa, assembler):
    """Why the assembly of a kernel of level `isa` does not assemble for its level's architecture
    ("" when it does). `assembler`: the command, with its options, that assembles aarch64."""
    march = LEVEL_MARCH[isa]
    command = [*assembler, f"-march={march}", "-c", "-o", os.devnull, str(assembly)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode == 0:
        return ""
    errors = [line for line in result.stderr.splitlines() if "rror" in line] or [result.stderr.strip()]
    return f"does not assemble with -march={march}, what its level's CPUs are checked for: {errors[0]}"


def audit(kernels, assembler=None):
    failures = 0
    loops_checked = 0
    reloading = []
    for kernel in kernels:
        if assembler and (problem := beyond_level(kernel["assembly"], kernel["isa"], assembler)):
            print(f"FAIL {kernel['name']}: {problem}")
            failures += 1
        all_loops = read_loops(kernel["assembly"])
        loops = hot_loops(all_loops)
        tasks = {loop.function for loop in all_loops}
        if not loops or len(loops) < len(tasks):
            print(f"FAIL {kernel['name']}: {len(tasks)} rotation tasks but {len(loops)} hot loops found")
            failures += 1
        for loop in loops:
            loops_checked += 1
            for problem in loop.problems(kernel["style"] == "interleaved"):
                print(f"FAIL {kernel['name']} {loop.function} (loop .L{loop.header}): {problem}")
                failures += 1
            if loop.reloads() and kernel["name"] not in reloading:
                reloading.append(kernel["name"])
                print(f"note {kernel['name']}: its hot loops load from the stack, e.g. {loop.reloads()[:2]}")
    assembled = ", each assembled for its level's architecture" if assembler else ""
    print(f"{len(kernels)} kernels{assembled}, {loops_checked} hot loops audited, {failures} problem(s); "
          f"{len(reloading)} kernel(s) with stack loads in a hot loop")
    return 1 if failures else 0


def mca_cycles_per_iteration(loop, cpu, llvm_mca):
    # No -mattr: the CPU's own features. The kernels are built with Halide's arm_fp16 (LLVM's
    # +fullfp16) but are ARMv8.0 code, which neon.HotLoopAudit checks by assembling them for armv8-a.
    body = loop.text()
    result = subprocess.run([llvm_mca, "-mtriple=aarch64-linux-gnu", f"-mcpu={cpu}", "-iterations=100",
                             "-summary-view", "-instruction-info=0", "-resource-pressure=0"],
                            input=body, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"llvm-mca failed on {loop.function}: {result.stderr.strip()}")
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", result.stdout).group(1))
    return cycles / 100.0


def mca_table(kernels, llvm_mca):
    rows = []
    header = ["kernel", "level", "loop instructions", "bytes stored / iteration"]
    header += [f"{label} cycles / head" for _, label in MCA_CPUS]
    for kernel in kernels:
        if kernel["head_dim"] != "128":
            continue
        loops = [loop for loop in hot_loops(read_loops(kernel["assembly"])) if "_q_rotated_" in loop.function]
        if not loops:
            raise SystemExit(f"{kernel['name']}: no q rotation hot loop found in {kernel['assembly']}")
        head_bytes = 128 * ELEMENT_BYTES[kernel["dtype"]]
        cells = [f"{kernel['style']} {kernel['source']} {kernel['dtype']}", kernel["isa"],
                 str(round(statistics.median(len(loop.instructions) for loop in loops))),
                 str(round(statistics.median(loop.store_bytes() for loop in loops)))]
        for cpu, _ in MCA_CPUS:
            per_head = [mca_cycles_per_iteration(loop, cpu, llvm_mca) * head_bytes / loop.store_bytes()
                        for loop in loops]
            cells.append(f"{statistics.median(per_head):.1f} ({min(per_head):.1f}-{max(per_head):.1f})")
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_readme(readme, table, command, begin=README_BEGIN, end=README_END):
    """Replaces the text between the markers `begin` and `end` of `readme` (also bench/tune's)."""
    text = readme.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{readme} has no {begin} ... {end} section")
    before = text[:text.index(begin) + len(begin)]
    after = text[text.index(end):]
    readme.write_text(f"{before}\n\nMade by `{command}`.\n\n{table}\n{after}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("audit", "mca"))
    parser.add_argument("--build", default="build/aarch64", help="the aarch64 build tree (default: build/aarch64)")
    parser.add_argument("--llvm-mca", default="llvm-mca")
    parser.add_argument("--write-readme", type=pathlib.Path, help="replace the table section of this file (bench/README.md)")
    parser.add_argument("--assembly", nargs="+", type=pathlib.Path,
                        help="audit these files (named <kernel>.s) instead of a build's kernels")
    parser.add_argument("--assembler", help="audit: also assemble each kernel for its level (an aarch64 gcc, clang or as)")
    parser.add_argument("--assembler-flag", action="append", default=[], metavar="FLAG",
                        help="an option of --assembler, e.g. --assembler-flag=--target=aarch64-linux-gnu for a clang "
                             "(repeatable; '=' keeps argparse from reading the flag as an option of its own)")
    args = parser.parse_args()
    if args.assembler_flag and not args.assembler:
        parser.error("--assembler-flag needs --assembler")
    if args.assembly:
        kernels = [kernel_entry(path.stem, str(path)) for path in args.assembly]
    else:
        kernels = read_kernels(args.build)
    if args.mode == "audit":
        return audit(kernels, [args.assembler, *args.assembler_flag] if args.assembler else None)
    table = mca_table(kernels, args.llvm_mca)
    if args.write_readme:
        write_readme(args.write_readme, table, "python3 bench/neon_asm.py mca --write-readme bench/README.md")
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
