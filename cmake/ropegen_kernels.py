#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Resolves the kernel grid against schedules/*.json and writes the build's kernel list.

Called by CMake at configure time. For every (isa, style, head_dim, dtype, source) asked for, it
finds the schedule parameters in the isa's schedule file (validated strictly: a bad file is an
error that names the file, the entry and the rule, never a silent default), and writes:
  --out-cmake  a CMake script setting ROPEGEN_KERNELS and, per kernel, its Halide target and
               generator PARAMS (what add_halide_library needs);
  --out-inc    kernels.inc, one ROPE_KERNEL(...) line per CPU kernel, best ISA first and fixed
               head_dim before the any-head_dim kernel, then one ROPE_CUDA_KERNEL(...) line per CUDA
               kernel, newest compute capability first: the single list the kernel table expands.
The same validation is importable (load_schedule_file) for tools such as an autotuner.
"""
import argparse
import json
import pathlib
import sys

SCHEDULE_FORMAT = "ropegen-schedule"
SCHEDULE_VERSION = 1

# isa -> (architecture, schedule target family, Halide target, rope_isa enumerator); best first
# within an architecture. neon_fp16 adds Halide's arm_fp16 (+fullfp16): f16 loads and stores
# convert natively instead of through emulated bit arithmetic.
ISAS = {
    "avx512": ("x86_64", "x86-64-avx512", "x86-64-linux-avx512_skylake", "ROPE_ISA_AVX512"),
    "avx2": ("x86_64", "x86-64-avx2", "x86-64-linux-avx-avx2-fma-f16c-sse41", "ROPE_ISA_AVX2"),
    "sse41": ("x86_64", "x86-64-sse41", "x86-64-linux-sse41", "ROPE_ISA_SSE41"),
    "neon_fp16": ("aarch64", "arm-64-neon_fp16", "arm-64-linux-arm_fp16", "ROPE_ISA_NEON_FP16"),
    "neon": ("aarch64", "arm-64-neon", "arm-64-linux", "ROPE_ISA_NEON"),
}
# CUDA levels -> (schedule target family, Halide capability feature, compute capability); newest
# first. A kernel's PTX targets its capability; the driver compiles it for the GPU it runs on.
# cuda_capability_86 is the newest Halide 21 knows; Hopper (sm_90) runs its PTX.
CUDA_LEVELS = {
    "sm86": ("cuda-sm86", "cuda_capability_86", 86),
    "sm80": ("cuda-sm80", "cuda_capability_80", 80),
}
# The one Halide runtime per architecture, built for its baseline so it runs on any CPU of it.
RUNTIME_TARGETS = {"x86_64": "x86-64-linux", "aarch64": "arm-64-linux"}
# Features of every kernel: the caller's report travels as user_context; 64-bit indexing for
# tensors over 2^31 elements; strict_float so results are deterministic and NaN-safe;
# no_bounds_query and no_asserts because the dispatcher validates every argument and builds every
# buffer itself before a kernel runs (the asserts re-checked that at ~180 ns, 40% of a decode
# call's fixed cost).
# CUDA kernels index with 32 bits (large_buffers defeats the alignment analysis that gives them
# 16-byte loads); the dispatcher splits calls whose views span 2^31 elements or more.
KERNEL_FEATURES = ["user_context", "large_buffers", "strict_float", "no_bounds_query", "no_asserts"]
CUDA_KERNEL_FEATURES = [f for f in KERNEL_FEATURES if f != "large_buffers"]

STYLES = ("half", "interleaved")
SOURCES = ("cache", "compat", "precise")
DTYPES = {"f32": ("float32", "ROPE_DTYPE_F32"), "f16": ("float16", "ROPE_DTYPE_F16"), "bf16": ("bfloat16", "ROPE_DTYPE_BF16")}
HEAD_DIMS = (64, 128, 256, 0)  # 0: any even head_dim
LAYOUTS = ("bshd", "bhsd", "sbhd", "strided")
MATCH_KEYS = {"style": STYLES, "head_dim": HEAD_DIMS, "dtype": tuple(DTYPES), "source": SOURCES}
HEAD_LOOPS = ("inside_tokens", "outside_tokens")
COS_SIN_AT = ("task", "inline", "root")
# The knobs of each kind of target family: CPU families are named after an ISA, CUDA ones "cuda-*".
CPU_KNOBS = ("vector_pairs", "unroll_pairs", "cos_sin_at", "layouts")
GPU_KNOBS = ("vector_pairs", "gpu")
GPU_GROUP_KNOBS = ("threads_per_block", "pair_threads", "tokens_per_block")


class ScheduleError(Exception):
    pass


def _check_keys(where, obj, required, optional=()):
    if not isinstance(obj, dict):
        raise ScheduleError(f"{where}: expected an object, got {json.dumps(obj)}")
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        raise ScheduleError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(set(required) | set(optional))}")
    missing = sorted(set(required) - set(obj))
    if missing:
        raise ScheduleError(f"{where}: missing key(s) {missing}")


def _check_int(where, value, low, high, power_of_two=False):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ScheduleError(f"{where}: {json.dumps(value)} must be an integer in [{low}, {high}]")
    if power_of_two and value & (value - 1):
        raise ScheduleError(f"{where}: {value} must be a power of two")


def _check_choice(where, value, choices):
    if value not in choices:
        raise ScheduleError(f"{where}: {json.dumps(value)} must be one of {list(choices)}")


def _check_params(where, params, complete, gpu):
    keys = GPU_KNOBS if gpu else CPU_KNOBS
    _check_keys(where, params, keys if complete else (), () if complete else keys)
    if "vector_pairs" in params:
        _check_int(f"{where}.vector_pairs", params["vector_pairs"], 1, 64, power_of_two=True)
    if "unroll_pairs" in params:
        _check_int(f"{where}.unroll_pairs", params["unroll_pairs"], 1, 16)
    if "cos_sin_at" in params:
        _check_choice(f"{where}.cos_sin_at", params["cos_sin_at"], COS_SIN_AT)
    if "layouts" in params:
        layouts = params["layouts"]
        _check_keys(f"{where}.layouts", layouts, LAYOUTS if complete else (), () if complete else LAYOUTS)
        for name, layout in layouts.items():
            lw = f"{where}.layouts.{name}"
            _check_keys(lw, layout, ("tokens_per_task", "head_loop") if complete else (), () if complete else ("tokens_per_task", "head_loop"))
            if "tokens_per_task" in layout:
                _check_int(f"{lw}.tokens_per_task", layout["tokens_per_task"], 1, 65536)
            if "head_loop" in layout:
                _check_choice(f"{lw}.head_loop", layout["head_loop"], HEAD_LOOPS)
    if "gpu" in params:
        group = params["gpu"]
        _check_keys(f"{where}.gpu", group, GPU_GROUP_KNOBS if complete else (), () if complete else GPU_GROUP_KNOBS)
        if "threads_per_block" in group:
            _check_int(f"{where}.gpu.threads_per_block", group["threads_per_block"], 32, 1024, power_of_two=True)
        if "pair_threads" in group:
            _check_int(f"{where}.gpu.pair_threads", group["pair_threads"], 1, 1024, power_of_two=True)
        if "tokens_per_block" in group:
            _check_int(f"{where}.gpu.tokens_per_block", group["tokens_per_block"], 1, 1024)


def load_schedule_file(path, target):
    """Parses and validates one schedule file; returns its list of (match, params) entries."""
    try:
        doc = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ScheduleError(f"{path}: cannot read a JSON schedule file: {err}")
    _check_keys(str(path), doc, ("format", "version", "target", "kernels"), ("meta",))
    if doc["format"] != SCHEDULE_FORMAT:
        raise ScheduleError(f"{path}: format {json.dumps(doc['format'])} must be \"{SCHEDULE_FORMAT}\"")
    if doc["version"] != SCHEDULE_VERSION:
        raise ScheduleError(f"{path}: version {json.dumps(doc['version'])} is not supported (expected {SCHEDULE_VERSION})")
    if doc["target"] != target:
        raise ScheduleError(f"{path}: target {json.dumps(doc['target'])} must be \"{target}\"")
    if not isinstance(doc["kernels"], list) or not doc["kernels"]:
        raise ScheduleError(f"{path}: kernels must be a non-empty list")
    entries = []
    for index, entry in enumerate(doc["kernels"]):
        where = f"{path}: kernels[{index}]"
        _check_keys(where, entry, ("match", "params"), ("measured", "note"))
        match = entry["match"]
        _check_keys(f"{where}.match", match, tuple(MATCH_KEYS))
        for key, allowed in MATCH_KEYS.items():
            if match[key] != "*":
                _check_choice(f"{where}.match.{key}", match[key], allowed)
        is_default = all(value == "*" for value in match.values())
        _check_params(f"{where}.params", entry["params"], complete=is_default, gpu=target.startswith("cuda-"))
        entries.append((where, match, entry["params"]))
    defaults = [e for e in entries if all(v == "*" for v in e[1].values())]
    if len(defaults) != 1:
        raise ScheduleError(f"{path}: needs exactly one entry whose match is all \"*\" (the complete default), found {len(defaults)}")
    return entries


def resolve(entries, key):
    """Parameters for one kernel key: the default, overlaid by matching entries, least specific first."""
    matching = []
    for where, match, params in entries:
        if all(match[k] == "*" or match[k] == key[k] for k in MATCH_KEYS):
            matching.append((sum(v != "*" for v in match.values()), where, params))
    matching.sort(key=lambda item: item[0])
    for i, (spec_a, where_a, params_a) in enumerate(matching):
        for spec_b, where_b, params_b in matching[i + 1:]:
            shared = set(generator_params(_as_resolved(params_a))) & set(generator_params(_as_resolved(params_b)))
            if spec_a == spec_b and shared:
                raise ScheduleError(f"{where_a} and {where_b} both set {sorted(shared)} for kernel {key} and are equally "
                                    "specific; make one more specific")
    resolved = {"layouts": {}}
    for _, _, params in matching:
        for name, value in params.items():
            if name == "layouts":
                for layout, knobs in value.items():
                    resolved["layouts"].setdefault(layout, {}).update(knobs)
            elif name == "gpu":
                resolved.setdefault("gpu", {}).update(value)
            else:
                resolved[name] = value
    return resolved


def _as_resolved(params):
    """One entry's params in the shape of resolve()'s result."""
    return {"layouts": {}, **params}


def generator_params(resolved):
    """Flattens resolved parameters into the generator's GeneratorParam names: a knob of a group
    (a layout, or gpu) is named <group>_<knob>."""
    params = {k: v for k, v in resolved.items() if k not in ("layouts", "gpu")}
    groups = sorted(resolved["layouts"].items()) + ([("gpu", resolved["gpu"])] if "gpu" in resolved else [])
    for group, knobs in groups:
        for knob, value in knobs.items():
            params[f"{group}_{knob}"] = value
    return params


def kernel_name(isa, style, head_dim, dtype, source):
    return f"ropegen_{style}_{source}_d{head_dim or 'any'}_{dtype}__{isa}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", required=True, type=pathlib.Path)
    parser.add_argument("--arch", required=True, choices=tuple(RUNTIME_TARGETS))
    parser.add_argument("--isas", default="all", help="';'-separated levels of --arch, or all")
    parser.add_argument("--cuda", default="", help="';'-separated CUDA levels (sm86, sm80), all, or empty for none")
    parser.add_argument("--dtypes", default=";".join(DTYPES))
    parser.add_argument("--head-dims", default=";".join(map(str, HEAD_DIMS)))
    parser.add_argument("--out-cmake", required=True, type=pathlib.Path)
    parser.add_argument("--out-inc", required=True, type=pathlib.Path)
    args = parser.parse_args()

    def pick(option, text, allowed, convert=str):
        values = [convert(v) for v in text.split(";") if v]
        for value in values:
            if value not in allowed:
                raise ScheduleError(f"{option}: {value!r} is not one of {list(allowed)}")
        return [v for v in allowed if v in values]  # canonical order

    try:
        arch_isas = tuple(isa for isa, (arch, *_) in ISAS.items() if arch == args.arch)
        isas = list(arch_isas) if args.isas == "all" else pick(f"ROPEGEN_ISAS ({args.arch})", args.isas, arch_isas)
        cuda_levels = list(CUDA_LEVELS) if args.cuda == "all" else pick("ROPEGEN_CUDA_LEVELS", args.cuda, tuple(CUDA_LEVELS))
        dtypes = pick("ROPEGEN_DTYPES", args.dtypes, tuple(DTYPES))
        head_dims = pick("ROPEGEN_HEAD_DIMS", args.head_dims, HEAD_DIMS, int)
        if 0 not in head_dims:
            raise ScheduleError("ROPEGEN_HEAD_DIMS must include 0 (the any-head_dim fallback kernel)")
        host = RUNTIME_TARGETS[args.arch]
        # (level, schedule family, Halide target, features, kernels.inc line maker, CMake list), best first.
        levels = []
        for isa in isas:
            _, family, halide_target, isa_enum = ISAS[isa]
            levels.append((isa, family, halide_target, KERNEL_FEATURES,
                           lambda name, key, params, isa_enum=isa_enum: f"ROPE_KERNEL({name}, {isa_enum}, {_key_args(key)})",
                           "ROPEGEN_KERNELS"))
        for level in cuda_levels:
            family, feature, capability = CUDA_LEVELS[level]
            levels.append((f"cuda_{level}", family, f"{host}-cuda-{feature}", CUDA_KERNEL_FEATURES,
                           lambda name, key, params, capability=capability: (
                               f"ROPE_CUDA_KERNEL({name}, {capability}, {_key_args(key)}, "
                               f"{params['vector_pairs'] if key['head_dim'] else 0})"),
                           "ROPEGEN_CUDA_KERNELS"))
        cmake_lines = ["# Auto-generated by cmake/ropegen_kernels.py from schedules/*.json. Do not edit."]
        inc_lines = ["// Auto-generated by cmake/ropegen_kernels.py from schedules/*.json. Do not edit.",
                     "// ROPE_KERNEL(name, isa, style, source, dtype, head_dim); best ISA first.",
                     "// ROPE_CUDA_KERNEL(name, capability, style, source, dtype, head_dim, vector_elements):",
                     "// vector_elements > 0: the kernel needs 16-byte aligned data and strides in multiples of it."]
        names = {"ROPEGEN_KERNELS": [], "ROPEGEN_CUDA_KERNELS": []}
        for level, family, halide_target, features, inc_line, list_name in levels:
            entries = load_schedule_file(args.schedules / f"{family}.json", family)
            for head_dim in head_dims:
                for style in STYLES:
                    for dtype in dtypes:
                        for source in SOURCES:
                            key = {"style": style, "head_dim": head_dim, "dtype": dtype, "source": source}
                            params = generator_params(resolve(entries, key))
                            name = kernel_name(level, style, head_dim, dtype, source)
                            names[list_name].append(name)
                            variant = {"style": style, "head_dim": head_dim, "dtype": DTYPES[dtype][0], "source": source}
                            all_params = " ".join(f"{k}={v}" for k, v in {**variant, **params}.items())
                            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_TARGET \"{halide_target}\")")
                            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_FEATURES {' '.join(features)})")
                            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_PARAMS {all_params})")
                            inc_lines.append(inc_line(name, key, params))
        runtime_target = host + ("-cuda" if cuda_levels else "")
        cmake_lines.insert(1, f"set(ROPEGEN_HALIDE_RUNTIME_TARGET {runtime_target})")
        for list_name, list_names in reversed(names.items()):
            cmake_lines.insert(1, f"set({list_name}" + "".join(f"\n    {n}" for n in list_names) + ")")
    except ScheduleError as err:
        print(f"ropegen schedule error: {err}", file=sys.stderr)
        return 1
    for path, lines in ((args.out_cmake, cmake_lines), (args.out_inc, inc_lines)):
        text = "\n".join(lines) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:  # keep timestamps stable for the build
            path.write_text(text)
    return 0


def _key_args(key):
    """A kernel key as the enumerators of kernels.inc: style, source, dtype, head_dim."""
    return (f"ROPE_STYLE_{key['style'].upper()}, ROPE_SOURCE_{key['source'].upper()}, "
            f"{DTYPES[key['dtype']][1]}, {key['head_dim']}")


if __name__ == "__main__":
    sys.exit(main())
