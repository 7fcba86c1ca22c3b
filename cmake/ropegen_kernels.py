#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Resolves the kernel grid against schedules/*.json and writes the build's kernel list.

Called by CMake at configure time. For every (isa, style, head_dim, dtype, source) asked for, it
finds the schedule parameters in the isa's schedule file (validated strictly: a bad file is an
error that names the file, the entry and the rule, never a silent default), and writes:
  --out-cmake  a CMake script setting ROPEGEN_KERNELS and, per kernel, its Halide target and
               generator PARAMS (what add_halide_library needs);
  --out-inc    kernels.inc, one ROPE_KERNEL(...) line per CPU kernel, best ISA first, then one
               ROPE_CUDA_KERNEL(...) line per CUDA kernel, newest compute capability first; within a
               level a key's (style, source, dtype) kernels together, fixed head_dims before the
               any-head_dim kernel: the single list the kernel table and its index expand;
  --out-schedules  (optional) schedules.inc, where every kernel's schedule came from, for
               ropegen-info: ROPE_SCHEDULE_FAMILY(family, default file, tuned file, provenance)
               per family and ROPE_KERNEL_SCHEDULE(name, family, entries, params) per kernel.
With --tuned-machine, a family's tuned file <tuned-dir>/<family>/<machine>.json (the autotuner's,
validated as strictly and refused when stale) adds one entry per kernel it tuned, overlaid last:
the knobs the tuner changed from the defaults it tuned against (a later change of a default
reaches the others).
The same validation (load_schedule_file, load_tuned_file, or read_tuned_file and stale_reason
apart) and the machine's name (host_machine) are importable for tools such as the autotuner.
"""
import argparse
import copy
import itertools
import json
import pathlib
import re
import sys

SCHEDULE_FORMAT = "ropegen-schedule"
SCHEDULE_VERSION = 1

# isa -> (architecture, schedule target family, Halide target, rope_isa enumerator); best first
# within an architecture. neon is built with Halide's arm_fp16 (+fullfp16), for which alone Halide
# converts f16 with fcvtl/fcvtn, ARMv8.0 AdvSIMD (without it, in integer arithmetic: 4-5x the
# cycles); the kernels compute in f32, and neon.HotLoopAudit assembles every one for armv8-a.
# The runtime's neon_fp16 level (FEAT_FP16 CPUs) therefore has no kernels of its own: it runs neon's.
ISAS = {
    "avx512": ("x86_64", "x86-64-avx512", "x86-64-linux-avx512_skylake", "ROPE_ISA_AVX512"),
    "avx2": ("x86_64", "x86-64-avx2", "x86-64-linux-avx-avx2-fma-f16c-sse41", "ROPE_ISA_AVX2"),
    "sse41": ("x86_64", "x86-64-sse41", "x86-64-linux-sse41", "ROPE_ISA_SSE41"),
    "neon": ("aarch64", "arm-64-neon", "arm-64-linux-arm_fp16", "ROPE_ISA_NEON"),
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
# Halide libraries the dispatcher runs besides the kernels -> their generator: compat's inv_freq
# table, which it keeps across calls (runtime/src/inv_freq_cache.cpp). Built for the baseline,
# like the runtime, and strict_float like the kernels, whose arithmetic they repeat bit for bit.
PIPELINES = {"ropegen_compat_inv_freq": "ropegen_compat_inv_freq"}
PIPELINE_FEATURES = ["user_context", "strict_float", "no_bounds_query", "no_asserts"]
CUDA_KERNEL_FEATURES = [f for f in KERNEL_FEATURES if f != "large_buffers"]

STYLES = ("half", "interleaved")
SOURCES = ("cache", "compat", "precise")
DTYPES = {"f32": ("float32", "ROPE_DTYPE_F32"), "f16": ("float16", "ROPE_DTYPE_F16"), "bf16": ("bfloat16", "ROPE_DTYPE_BF16")}
HEAD_DIMS = (64, 128, 256, 0)  # 0: any even head_dim
LAYOUTS = ("bshd", "bhsd", "sbhd", "strided")
MATCH_KEYS = {"style": STYLES, "head_dim": HEAD_DIMS, "dtype": tuple(DTYPES), "source": SOURCES}
HEAD_LOOPS = ("inside_tokens", "outside_tokens")
COS_SIN_AT = ("task", "inline", "root")
STORE_ORDERS = ("pair_vectors", "halves")
INTERLEAVED_ROTATIONS = ("deinterleave", "swap", "words")
HALF_ROTATIONS = ("lanes", "words")
# The knobs whose "words" stores 16-bit lanes as 32-bit words (stores_pair_words): each read by
# fixed head_dim 16-bit kernels of one style; for the others words means the plain value.
PAIR_WORDS_KNOBS = (("interleaved_rotation", "interleaved", "deinterleave"), ("half_rotation", "half", "lanes"))
# The knobs of each kind of target family: CPU families are named after an ISA, CUDA ones "cuda-*".
# CORE_KNOBS shape a CPU kernel's rotation loops (the autotuner's core grid); "layouts" holds the
# loop nest knobs of each layout group.
CORE_KNOBS = ("vector_pairs", "unroll_pairs", "cos_sin_at", "cos_sin_vectors", "store_order", "interleaved_rotation",
              "half_rotation")
CPU_KNOBS = CORE_KNOBS + ("layouts",)
GPU_KNOBS = ("vector_pairs", "gpu")
# A CPU kernel's call classes (optional, in any entry), each a sibling kernel built with the knobs
# it lists overlaid on the kernel's own: the core ones but cos_sin_at, which the allocation rule
# fixes per source, and the layouts.
# - large_calls: calls moving at least from_bytes (read and written, q and k) take <name>_large
#   (from DRAM the widths and orders that win in cache can lose);
# - in_place_calls: calls that rotate q and k where they lie (q_out = q, k_out = k) take
#   <name>_inplace (with half the memory traffic the loop's shuffles bound it, so the rotation that
#   wins out of place can lose in place). A call large enough for a large-call kernel takes that
#   one, in place or not.
LARGE_CALLS = "large_calls"
IN_PLACE_CALLS = "in_place_calls"
CALL_CLASSES = (LARGE_CALLS, IN_PLACE_CALLS)
CALL_CLASS_KNOBS = tuple(knob for knob in CPU_KNOBS if knob != "cos_sin_at")
MAX_FROM_BYTES = 1 << 62
GPU_GROUP_KNOBS = ("threads_per_block", "pair_threads", "tokens_per_block")
# Static shared memory a CUDA block may use: a block's cos/sin table must fit in it.
CUDA_STATIC_SHARED_BYTES = 48 * 1024
# A tuned file's provenance (meta.tuned): all strings.
TUNED_META_KEYS = ("machine", "cpu", "method", "halide", "ropegen", "date", "command")
SLUG = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # a machine's name: a tuned file's stem
VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


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
    # The type too: Python's equality takes false for 0 and 128.0 for 128.
    if not any(type(value) is type(choice) and value == choice for choice in choices):
        raise ScheduleError(f"{where}: {json.dumps(value)} must be one of {list(choices)}")


def _check_params(where, params, complete, gpu):
    keys = GPU_KNOBS if gpu else CPU_KNOBS
    optional = () if gpu else CALL_CLASSES
    _check_keys(where, params, keys if complete else (), (() if complete else keys) + optional)
    for call_class in CALL_CLASSES:
        if call_class not in params:
            continue
        sizes = ("from_bytes",) if call_class == LARGE_CALLS else ()
        knobs = params[call_class]
        _check_keys(f"{where}.{call_class}", knobs, sizes, CALL_CLASS_KNOBS)
        if sizes:
            _check_int(f"{where}.{call_class}.from_bytes", knobs["from_bytes"], 1, MAX_FROM_BYTES)
        class_knobs = {k: v for k, v in knobs.items() if k not in sizes}
        _check_params(f"{where}.{call_class}", class_knobs, False, gpu)
        if not generator_params(_as_resolved(class_knobs)):  # empty layouts set nothing either
            raise ScheduleError(f"{where}.{call_class}: sets no knob, so its kernel would be its sibling's twin; "
                                f"set some of {list(CALL_CLASS_KNOBS)}, or drop it")
    if "vector_pairs" in params:
        _check_int(f"{where}.vector_pairs", params["vector_pairs"], 1, 64, power_of_two=True)
    if "unroll_pairs" in params:
        _check_int(f"{where}.unroll_pairs", params["unroll_pairs"], 1, 16)
    if "cos_sin_at" in params:
        _check_choice(f"{where}.cos_sin_at", params["cos_sin_at"], COS_SIN_AT)
    if "cos_sin_vectors" in params:
        _check_int(f"{where}.cos_sin_vectors", params["cos_sin_vectors"], 1, 8)
    if "store_order" in params:
        _check_choice(f"{where}.store_order", params["store_order"], STORE_ORDERS)
    if "interleaved_rotation" in params:
        _check_choice(f"{where}.interleaved_rotation", params["interleaved_rotation"], INTERLEAVED_ROTATIONS)
    if "half_rotation" in params:
        _check_choice(f"{where}.half_rotation", params["half_rotation"], HALF_ROTATIONS)
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


def _load_entries(path, target, tuned):
    """The checks of every schedule file: JSON, format, version, target, and each entry's keys,
    match values and knobs. A default file's all-"*" entry sets every knob; in a tuned file every
    entry names one kernel (no "*") and sets only the knobs the tuner changed, and meta is
    required. Returns the document and its (where, match, params) entries."""
    try:
        doc = json.loads(pathlib.Path(path).read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ScheduleError(f"{path}: cannot read a JSON schedule file: {err}")
    except ScheduleError as err:
        raise ScheduleError(f"{path}: {err}")
    top = ("format", "version", "target", "kernels")
    _check_keys(str(path), doc, top + ("meta",) if tuned else top, () if tuned else ("meta",))
    if doc["format"] != SCHEDULE_FORMAT:
        raise ScheduleError(f"{path}: format {json.dumps(doc['format'])} must be \"{SCHEDULE_FORMAT}\"")
    if type(doc["version"]) is not int or doc["version"] != SCHEDULE_VERSION:
        raise ScheduleError(f"{path}: version {json.dumps(doc['version'])} is not supported (expected {SCHEDULE_VERSION})")
    if doc["target"] != target:
        raise ScheduleError(f"{path}: target {json.dumps(doc['target'])} must be \"{target}\"")
    if not isinstance(doc["kernels"], list) or not doc["kernels"]:
        raise ScheduleError(f"{path}: kernels must be a non-empty list")
    entries, first = [], {}
    for index, entry in enumerate(doc["kernels"]):
        where = f"{path}: kernels[{index}]"
        # The tuner records what it measured for every entry it writes (and reads it back).
        _check_keys(where, entry, ("match", "params", "measured") if tuned else ("match", "params"),
                    ("note",) if tuned else ("measured", "note"))
        if not isinstance(entry.get("note", ""), str):
            raise ScheduleError(f"{where}.note: {json.dumps(entry['note'])} must be a string")
        if not isinstance(entry.get("measured", {}), dict):
            raise ScheduleError(f"{where}.measured: {json.dumps(entry['measured'])} must be an object")
        match = entry["match"]
        _check_keys(f"{where}.match", match, tuple(MATCH_KEYS))
        for key, allowed in MATCH_KEYS.items():
            if match[key] == "*" and tuned:
                raise ScheduleError(f"{where}.match.{key}: \"*\" is not allowed in a tuned file "
                                    "(each entry names one kernel)")
            if match[key] != "*":
                _check_choice(f"{where}.match.{key}", match[key], allowed)
        key = tuple(match[k] for k in MATCH_KEYS)
        if key in first:
            raise ScheduleError(f"{where}.match: {json.dumps(match)} is also the match of kernels[{first[key]}]; "
                                "one entry per match (merge the two)")
        first[key] = index
        complete = all(value == "*" for value in match.values())
        _check_params(f"{where}.params", entry["params"], complete=complete, gpu=target.startswith("cuda-"))
        # The entry's own knobs and its call classes' (`words` there makes a twin, dropped, of a
        # kernel that cannot store words).
        for params_where, params in [(f"{where}.params", entry["params"])] + [
                (f"{where}.params.{name}", entry["params"][name]) for name in CALL_CLASSES if name in entry["params"]]:
            for knob, style, plain in PAIR_WORDS_KNOBS:
                matched = (dict(zip(MATCH_KEYS, values)) for values in itertools.product(*MATCH_KEYS.values()))
                if params.get(knob) == "words" and not any(
                        key["style"] == style and stores_pair_words(key, {knob: "words"})
                        for key in matched if all(match[k] in ("*", key[k]) for k in MATCH_KEYS)):
                    raise ScheduleError(f"{params_where}.{knob}: \"words\" is read by fixed head_dim f16 and bf16 kernels "
                                        f"of the {style} style only, which this entry's match excludes (for its kernels "
                                        f"it would mean {json.dumps(plain)}); set it there, or drop it")
        entries.append((where, match, entry["params"]))
    return doc, entries


def _unique_keys(pairs):
    """json.loads's object_pairs_hook: it would keep a repeated key's last value and drop the
    others unseen."""
    obj = {}
    for name, value in pairs:
        if name in obj:
            raise ScheduleError(f"duplicate key {json.dumps(name)}: each key may appear once per object")
        obj[name] = value
    return obj


def load_schedule_file(path, target):
    """Parses and validates one default schedule file; returns its list of (where, match, params)
    entries. Every kernel of the family's key grid is resolved, not only those a build asks for,
    so that whether a file is valid does not depend on ROPEGEN_DTYPES or ROPEGEN_HEAD_DIMS."""
    _, entries = _load_entries(path, target, tuned=False)
    defaults = [e for e in entries if all(v == "*" for v in e[1].values())]
    if len(defaults) != 1:
        raise ScheduleError(f"{path}: needs exactly one entry whose match is all \"*\" (the complete default), found {len(defaults)}")
    for values in itertools.product(*MATCH_KEYS.values()):
        key = dict(zip(MATCH_KEYS, values))
        call_classes(key, resolve(entries, key))
    return entries


def load_tuned_file(path, target, halide_version, ropegen_version):
    """Parses and validates one tuned file, <tuned-dir>/<target>/<machine>.json; returns its list of
    (where, match, params) entries, resolve()'s `tuned` (they match one kernel each and win over
    every default entry). A stale file (made with another Halide, or another ropegen major.minor)
    is an error like a malformed one, and every error says how to retune."""
    return _load_tuned(pathlib.Path(path), target, halide_version, ropegen_version)[1]


def _load_tuned(path, target, halide_version, ropegen_version):
    """load_tuned_file, returning meta.tuned too."""
    try:
        tuned, entries = read_tuned_file(path, target)
        stale = stale_reason(tuned, halide_version, ropegen_version)
        if stale:
            raise ScheduleError(f"{path}: stale: {stale}")
    except ScheduleError as err:
        raise ScheduleError(f"{err}. A stale or malformed tuned file: retune with `python3 bench/tune/rope_tune.py --target "
                            f"{target}` or configure with -DROPEGEN_TUNED_MACHINE=none") from None
    return tuned, entries


def read_tuned_file(path, target):
    """Parses and validates one tuned file, whatever its versions: (meta.tuned, entries). The
    autotuner reads a file it replaces this way: a malformed one is an error, a stale one is not."""
    path = pathlib.Path(path)
    doc, entries = _load_entries(path, target, tuned=True)
    _check_keys(f"{path}: meta", doc["meta"], ("tuned",))
    tuned = doc["meta"]["tuned"]
    where = f"{path}: meta.tuned"
    _check_keys(where, tuned, TUNED_META_KEYS)
    for key in TUNED_META_KEYS:
        if not isinstance(tuned[key], str) or not tuned[key]:
            raise ScheduleError(f"{where}.{key}: {json.dumps(tuned[key])} must be a non-empty string")
    for key, pattern, rule in (("machine", SLUG, "lower-case letters, digits and single inner '-'"),
                               ("halide", VERSION, "a version X.Y.Z"), ("ropegen", VERSION, "a version X.Y.Z"),
                               ("date", DATE, "a date YYYY-MM-DD")):
        if not pattern.fullmatch(tuned[key]):
            raise ScheduleError(f"{where}.{key}: {json.dumps(tuned[key])} must be {rule}")
    if tuned["method"] != "measured" and not tuned["method"].startswith("modelled"):
        raise ScheduleError(f"{where}.method: {json.dumps(tuned['method'])} must be \"measured\" or start with \"modelled\"")
    if tuned["machine"] != path.stem:
        raise ScheduleError(f"{where}.machine: {json.dumps(tuned['machine'])} must be the file's name, \"{path.stem}\"")
    if path.parent.name != target:
        raise ScheduleError(f"{path}: its directory \"{path.parent.name}\" must be named after its target, \"{target}\"")
    for entry_where, match, params in entries:
        for message in rule_violations(match, params).values():
            raise ScheduleError(f"{entry_where}.params: {message}")
    return tuned, entries


def stale_reason(tuned, halide_version, ropegen_version):
    """Why a file tuned as meta.tuned `tuned` says is stale for this build (another Halide, or
    another ropegen major.minor), or None."""
    if tuned["halide"] != halide_version:
        return f"tuned with Halide {tuned['halide']}, this build uses Halide {halide_version}"
    if tuned["ropegen"].split(".")[:2] != ropegen_version.split(".")[:2]:
        return f"tuned with ropegen {tuned['ropegen']}, this is ropegen {ropegen_version} (another major.minor)"
    return None


def host_machine(cpuinfo=None):
    """This machine's identity, from /proc/cpuinfo (or the text of one): {"slug": the name of its
    tuned files, lower-case letters, digits and '-'; "cpu": one line for people}. x86: the model
    name without trademarks, clock, core count and the words CPU and Processor, then
    f<family>m<model> ("amd-epyc-f25m17"); aarch64: implementer and part ("arm-0x41-0xd0c")."""
    if cpuinfo is None:
        try:
            cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError as err:
            raise ScheduleError(f"cannot identify this machine: {err}; set ROPEGEN_TUNED_MACHINE to a machine or none")
    fields = {}
    logical = 0
    for line in cpuinfo.splitlines():
        name, colon, value = line.partition(":")
        name = name.strip()
        if colon:
            fields.setdefault(name, value.strip())  # the first CPU's
        if name == "processor":
            logical += 1
    cpus = f"{logical} logical CPU{'s' if logical != 1 else ''}"

    def field(name):
        if name not in fields:
            raise ScheduleError(f"cannot identify this machine: /proc/cpuinfo has no \"{name}\"; "
                                "set ROPEGEN_TUNED_MACHINE to a machine or none")
        return fields[name]

    if "CPU implementer" in fields:  # aarch64
        implementer, part = field("CPU implementer").lower(), field("CPU part").lower()
        return {"slug": _slug(f"arm {implementer} {part}"),
                "cpu": f"ARM implementer {implementer} part {part} variant {field('CPU variant')} "
                       f"revision {field('CPU revision')}, {cpus}"}
    model_name, family, model = field("model name"), field("cpu family"), field("model")
    words = re.sub(r"\((r|tm)\)|@.*|\b[0-9]+-core\b|\b(cpu|processor)\b", " ", model_name, flags=re.IGNORECASE)
    return {"slug": _slug(f"{words} f{family}m{model}"),
            "cpu": f"{field('vendor_id')} {model_name}, family {family} model {model} stepping {field('stepping')}, {cpus}"}


def _slug(text):
    """Lower case, every run of other characters than letters and digits one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _matching(entries, key):
    """The (specificity, where, params) of the entries that match one kernel key, least specific first."""
    matching = []
    for where, match, params in entries:
        if all(match[k] == "*" or match[k] == key[k] for k in MATCH_KEYS):
            matching.append((sum(v != "*" for v in match.values()), where, params))
    matching.sort(key=lambda item: item[0])
    return matching


def matching_entries(entries, key, tuned=()):
    """The (where, params) of the entries that match one kernel key, in the order resolve()
    overlays them: the default file's `entries`, least specific first, then the tuned file's."""
    return [(where, params) for _, where, params in _matching(entries, key) + _matching(tuned, key)]


def resolve(entries, key, tuned=()):
    """Parameters for one kernel key: the default file's `entries` overlaid least specific first,
    then the key's entry of the tuned file (`tuned`), if any. The tuned layer is above every
    default entry, a fully specific one included, so it is no party to the default file's rule
    that equally specific entries set different knobs."""
    matching = _matching(entries, key)
    for i, (spec_a, where_a, params_a) in enumerate(matching):
        for spec_b, where_b, params_b in matching[i + 1:]:
            shared = _knob_names(params_a) & _knob_names(params_b)
            if spec_a == spec_b and shared:
                raise ScheduleError(f"{where_a} and {where_b} both set {sorted(shared)} for kernel {key} and are equally "
                                    "specific; make one more specific")
    resolved = {"layouts": {}}
    layers = matching_entries(entries, key, tuned)
    for _, params in layers:
        _overlay(resolved, params)
    for (group, knobs), message in rule_violations(key, resolved).items():
        # The last layer that set a knob of the rule broke it.
        setter = next(where for where, params in reversed(layers)
                      if set(knobs) & set(params.get(group, {}) if group else params))
        raise ScheduleError(f"{setter}.params, for kernel {key}: {message}")
    return _plain_words(key, resolved)


def _overlay(resolved, params):
    """Sets the knobs of `params` in `resolved`, a group's (a layout's, gpu's) knob by knob."""
    for name, value in params.items():
        if name == "layouts":
            for layout, knobs in value.items():
                resolved["layouts"].setdefault(layout, {}).update(knobs)
        elif name == "gpu":
            resolved.setdefault("gpu", {}).update(value)
        else:
            resolved[name] = value
    return resolved


def _plain_words(key, params):
    """`params` with what words means for the other style's knob, f32 and the any-head_dim kernel."""
    for knob, style, plain in PAIR_WORDS_KNOBS:
        if params.get(knob) == "words" and (key["style"] != style or not stores_pair_words(key, params)):
            params[knob] = plain
    return params


def stores_pair_words(key, params):
    """Whether the kernel stores its 16-bit lanes as 32-bit words (kernels.inc's pair_words): the
    interleaved style with interleaved_rotation words (a pair a word), the half style with
    half_rotation words (a lane of two neighbouring pairs a word); both need 16-bit lanes and a
    fixed head_dim (for other kernels words means deinterleave or lanes)."""
    knob = "interleaved_rotation" if key["style"] == "interleaved" else "half_rotation"
    return params.get(knob) == "words" and DTYPES[key["dtype"]][0] != "float32" and bool(key["head_dim"])


def rule_violations(key, params):
    """What in `params` (resolved, or one entry's) the kernel `key` may not have, as
    {(group or None, (knob, ...)): message}, naming the knobs the rule involves.
    cos_sin_at: the library's allocation guarantee. Before a kernel runs, the dispatcher reserves
    exactly the scratch of the computed sources' root tables (and nothing for the cache source),
    so that a failed allocation is reported with no output written. A kernel must allocate
    nothing more: the cache source reads its tables inline, the computed sources build them at
    root (`task` tables would be allocated inside the parallel loop).
    gpu.tokens_per_block: a CUDA block holds cos/sin of its tokens in static shared memory. The
    any-head_dim kernel sizes its table at run time (a launch that does not fit fails, and the
    call returns its status), so only fixed head_dim kernels are checked here.
    gpu.pair_threads: at most threads_per_block, which a block would otherwise exceed."""
    violations = {}
    placement = params.get("cos_sin_at")  # CPU families only
    allowed = "inline" if key["source"] == "cache" else "root"
    if placement is not None and placement != allowed:
        violations[None, ("cos_sin_at",)] = (
            f"cos_sin_at {json.dumps(placement)} is not allowed for the {key['source']} source: a kernel may allocate "
            f"nothing beyond the scratch the dispatcher reserves before it runs; use {allowed}")
    gpu = params.get("gpu", {})
    if gpu.get("pair_threads", 0) > gpu.get("threads_per_block", 1024):
        violations["gpu", ("pair_threads", "threads_per_block")] = (
            f"gpu.pair_threads {gpu['pair_threads']} exceeds gpu.threads_per_block {gpu['threads_per_block']}: a block's "
            "threads are pair_threads along a head's pairs times threads_per_block / pair_threads heads")
    tokens = gpu.get("tokens_per_block")
    pair_bytes = 8  # cos and sin, f32
    if tokens is not None and key["head_dim"] and tokens * key["head_dim"] // 2 * pair_bytes > CUDA_STATIC_SHARED_BYTES:
        violations["gpu", ("tokens_per_block",)] = (
            f"gpu.tokens_per_block {tokens} is too many for head_dim {key['head_dim']}: a block's shared cos/sin table "
            f"of {tokens} rows of {key['head_dim'] // 2} pairs x {pair_bytes} bytes would exceed the "
            f"{CUDA_STATIC_SHARED_BYTES // 1024} KiB of static shared memory; at most "
            f"{CUDA_STATIC_SHARED_BYTES // (key['head_dim'] // 2 * pair_bytes)}")
    return violations


def _knob_names(params):
    """The knobs one entry's params set, as generator parameters, plus its call classes."""
    return set(generator_params(_as_resolved(params))) | (set(CALL_CLASSES) & set(params))


def _as_resolved(params):
    """One entry's params in the shape of resolve()'s result."""
    return {"layouts": {}, **params}


def generator_params(resolved):
    """Flattens resolved parameters into the generator's GeneratorParam names: a knob of a group
    (a layout, or gpu) is named <group>_<knob>."""
    params = {k: v for k, v in resolved.items() if k not in ("layouts", "gpu", *CALL_CLASSES)}
    groups = sorted(resolved["layouts"].items()) + ([("gpu", resolved["gpu"])] if "gpu" in resolved else [])
    for group, knobs in groups:
        for knob, value in knobs.items():
            params[f"{group}_{knob}"] = value
    return params


def kernel_name(isa, style, head_dim, dtype, source, call_class=None):
    suffix = {None: "", LARGE_CALLS: "_large", IN_PLACE_CALLS: "_inplace"}[call_class]
    return f"ropegen_{style}_{source}_d{head_dim or 'any'}_{dtype}{suffix}__{isa}"


def call_classes(key, resolved):
    """A kernel key's kernels as (call class, min_call_bytes, resolved params), the dispatcher's
    order: the large-call sibling, then the in-place one, where the schedule has them, then the
    kernel of every call (call class None, min_call_bytes 0). A class whose knobs are the
    kernel's own (a later change of the defaults can make them so) adds no kernel."""
    own = {k: v for k, v in resolved.items() if k not in CALL_CLASSES}
    classes = [(None, 0, own)]
    for call_class in reversed(CALL_CLASSES):
        if call_class not in resolved:
            continue
        knobs = dict(resolved[call_class])
        from_bytes = knobs.pop("from_bytes", 0)
        params = _plain_words(key, _overlay(copy.deepcopy(own), knobs))
        for message in rule_violations(key, params).values():
            raise ScheduleError(f"{call_class} of kernel {key}: {message}")
        if params != own:
            classes.insert(0, (call_class, from_bytes, params))
    return classes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", required=True, type=pathlib.Path)
    parser.add_argument("--arch", required=True, choices=tuple(RUNTIME_TARGETS))
    parser.add_argument("--isas", default="all", help="';'-separated levels of --arch, or all")
    parser.add_argument("--cuda", default="", help="';'-separated CUDA levels (sm86, sm80), all, or empty for none")
    parser.add_argument("--dtypes", default=";".join(DTYPES))
    parser.add_argument("--head-dims", default=";".join(map(str, HEAD_DIMS)))
    parser.add_argument("--tuned-dir", type=pathlib.Path,
                        help="tuned files, <dir>/<family>/<machine>.json (default: <schedules>/tuned)")
    parser.add_argument("--tuned-machine", default="host",
                        help="the machine whose tuned files to use: a name, host (this one's), or none")
    parser.add_argument("--halide-version", required=True, help="the build's Halide (a file tuned with another is stale)")
    parser.add_argument("--ropegen-version", required=True,
                        help="ropegen's version (a file tuned for another major.minor is stale)")
    parser.add_argument("--out-cmake", required=True, type=pathlib.Path)
    parser.add_argument("--out-inc", required=True, type=pathlib.Path)
    parser.add_argument("--out-schedules", type=pathlib.Path)
    args = parser.parse_args()
    source_root = f"{args.schedules.resolve().parent}/"

    def c_string(text):  # a C string literal of text, paths relative to the source tree
        return json.dumps(str(text).replace(source_root, ""))

    def pick(option, text, allowed, convert=str, may_be_empty=False):
        try:
            values = [convert(v) for v in text.split(";") if v]
        except ValueError as err:
            raise ScheduleError(f"{option}: {text!r}: {err}") from None
        for value in values:
            if value not in allowed:
                raise ScheduleError(f"{option}: {value!r} is not one of {list(allowed)}")
        if not values and not may_be_empty:
            raise ScheduleError(f"{option}: {text!r} names none of {list(allowed)}: a build without any would serve no call")
        return [v for v in allowed if v in values]  # canonical order

    try:
        arch_isas = tuple(isa for isa, (arch, *_) in ISAS.items() if arch == args.arch)
        if args.arch == "aarch64" and "neon_fp16" in args.isas.split(";"):
            raise ScheduleError("ROPEGEN_ISAS: neon_fp16 has no kernels of its own (the neon kernels convert f16 in "
                                "hardware and serve both aarch64 levels): use neon or all")
        isas = list(arch_isas) if args.isas == "all" else pick(f"ROPEGEN_ISAS ({args.arch})", args.isas, arch_isas)
        cuda_levels = (list(CUDA_LEVELS) if args.cuda == "all"
                       else pick("ROPEGEN_CUDA_LEVELS", args.cuda, tuple(CUDA_LEVELS), may_be_empty=True))
        dtypes = pick("ROPEGEN_DTYPES", args.dtypes, tuple(DTYPES))
        head_dims = pick("ROPEGEN_HEAD_DIMS", args.head_dims, HEAD_DIMS, int)
        if 0 not in head_dims:
            raise ScheduleError("ROPEGEN_HEAD_DIMS must include 0 (the any-head_dim fallback kernel)")
        machine, unidentified = args.tuned_machine, None
        if machine == "host":
            try:
                machine = host_machine()["slug"]
            except ScheduleError as err:  # an unknown machine has no tuned files: the defaults serve
                machine, unidentified = "none", str(err)
        if machine != "none" and not SLUG.fullmatch(machine):
            raise ScheduleError(f"ROPEGEN_TUNED_MACHINE: {machine!r} must be host, none, or a machine's name "
                                "(lower-case letters, digits and single inner '-')")
        tuned_dir = args.tuned_dir or args.schedules / "tuned"
        host = RUNTIME_TARGETS[args.arch]
        # (level, schedule family, Halide target, features, kernels.inc line maker, CMake list), best first.
        levels = []
        for isa in isas:
            _, family, halide_target, isa_enum = ISAS[isa]
            levels.append((isa, family, halide_target, KERNEL_FEATURES,
                           lambda name, key, params, call_class, min_call_bytes, isa_enum=isa_enum: (
                               f"ROPE_KERNEL({name}, {isa_enum}, {_key_args(key)}, "
                               f"{int(stores_pair_words(key, params))}, {min_call_bytes}ull, "
                               f"{int(call_class == IN_PLACE_CALLS)})"),
                           "ROPEGEN_KERNELS"))
        for level in cuda_levels:
            family, feature, capability = CUDA_LEVELS[level]
            levels.append((f"cuda_{level}", family, f"{host}-cuda-{feature}", CUDA_KERNEL_FEATURES,
                           lambda name, key, params, call_class, min_call_bytes, capability=capability: (
                               f"ROPE_CUDA_KERNEL({name}, {capability}, {_key_args(key)}, "
                               f"{params['vector_pairs'] if key['head_dim'] else 0})"),
                           "ROPEGEN_CUDA_KERNELS"))
        cmake_lines = ["# Auto-generated by cmake/ropegen_kernels.py from schedules/*.json. Do not edit."]
        inc_lines = ["// Auto-generated by cmake/ropegen_kernels.py from schedules/*.json. Do not edit.",
                     "// ROPE_KERNEL(name, isa, style, source, dtype, head_dim, pair_words, min_call_bytes, in_place);",
                     "// best ISA first; within a level a key's kernels together, fixed head_dims first.",
                     "// pair_words 1: the kernel stores its 16-bit lanes as 32-bit words (interleaved_rotation or half_rotation words).",
                     "// min_call_bytes > 0: a large-call kernel, for calls moving at least that many bytes; listed before its sibling.",
                     "// in_place 1: an in-place kernel, for calls with q_out = q and k_out = k; listed before its sibling.",
                     "// ROPE_CUDA_KERNEL(name, capability, style, source, dtype, head_dim, vector_elements):",
                     "// vector_elements > 0: the kernel needs 16-byte aligned data and strides in multiples of it."]
        names = {"ROPEGEN_KERNELS": [], "ROPEGEN_CUDA_KERNELS": []}
        looked_for, used = [], []  # tuned files
        reports = []  # per family: its tuned file or the defaults, for the configure log
        schedule_lines = ["// Auto-generated by cmake/ropegen_kernels.py from schedules/*.json. Do not edit.",
                          "// ROPE_SCHEDULE_FAMILY(family, default file, tuned file or \"\", tuned provenance as JSON or \"\")",
                          "// ROPE_KERNEL_SCHEDULE(name, family, the entries that set its knobs, its generator params)"]
        for level, family, halide_target, features, inc_line, list_name in levels:
            default_path = args.schedules / f"{family}.json"
            entries, tuned_entries = load_schedule_file(default_path, family), []
            tuned_file, provenance = "", ""
            report = f"defaults ({unidentified})" if unidentified else "defaults (tuned schedules off)"
            if machine != "none":
                tuned_path = tuned_dir / family / f"{machine}.json"
                looked_for.append(tuned_path)
                report = f"defaults (no tuned file for {machine})"
                if tuned_path.exists():
                    tuned, tuned_entries = _load_tuned(tuned_path, family, args.halide_version, args.ropegen_version)
                    used.append(tuned_path)
                    report = f"tuned schedule {tuned_path} ({tuned['method']}, {tuned['date']})"
                    tuned_file, provenance = tuned_path, json.dumps(tuned, sort_keys=True)
            schedule_lines.append(f"ROPE_SCHEDULE_FAMILY({c_string(family)}, {c_string(default_path.resolve())}, "
                                  f"{c_string(tuned_file and tuned_file.resolve())}, {json.dumps(provenance)})")
            reports.append(f"    message(STATUS {_cmake_string(f'ropegen: {family}: {report}')})")
            # A key's kernels together (the dispatcher's index spans them, kernel_table.cpp),
            # fixed head_dims before the any-head_dim kernel.
            for style in STYLES:
                for source in SOURCES:
                    for dtype in dtypes:
                        for head_dim in head_dims:
                            key = {"style": style, "head_dim": head_dim, "dtype": dtype, "source": source}
                            entries_used = "; ".join(where for where, _ in matching_entries(entries, key, tuned_entries))
                            for call_class, min_call_bytes, resolved in call_classes(key, resolve(entries, key, tuned_entries)):
                                params = generator_params(resolved)
                                name = kernel_name(level, style, head_dim, dtype, source, call_class)
                                knobs = " ".join(f"{k}={v}" for k, v in params.items())
                                schedule_lines.append(f"ROPE_KERNEL_SCHEDULE({name}, {c_string(family)}, "
                                                      f"{c_string(entries_used)}, {c_string(knobs)})")
                                names[list_name].append(name)
                                variant = {"style": style, "head_dim": head_dim, "dtype": DTYPES[dtype][0], "source": source}
                                all_params = " ".join(f"{k}={v}" for k, v in {**variant, **params}.items())
                                cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_TARGET \"{halide_target}\")")
                                cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_FEATURES {' '.join(features)})")
                                cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_PARAMS {all_params})")
                                inc_lines.append(inc_line(name, key, params, call_class, min_call_bytes))
        if args.tuned_machine not in ("host", "none") and not used:
            raise ScheduleError(f"ROPEGEN_TUNED_MACHINE={machine}: no tuned file for the families built; looked for "
                                f"{', '.join(map(str, looked_for))}")
        for name, generator in PIPELINES.items():
            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_TARGET \"{host}\")")
            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_FEATURES {' '.join(PIPELINE_FEATURES)})")
            cmake_lines.append(f"set(ROPEGEN_KERNEL_{name}_GENERATOR {generator})")
        names["ROPEGEN_PIPELINES"] = list(PIPELINES)
        runtime_target = host + ("-cuda" if cuda_levels else "")
        cmake_lines.insert(1, f"set(ROPEGEN_HALIDE_RUNTIME_TARGET {runtime_target})")
        for list_name, list_names in reversed(names.items()):
            cmake_lines.insert(1, f"set({list_name}" + "".join(f"\n    {n}" for n in list_names) + ")")
        # The configure log says once which schedules were used (tests/cuda includes this script too).
        cmake_lines[1:1] = ["get_property(ropegen_schedules_reported GLOBAL PROPERTY ROPEGEN_SCHEDULES_REPORTED)",
                            "if (NOT ropegen_schedules_reported)",
                            "    set_property(GLOBAL PROPERTY ROPEGEN_SCHEDULES_REPORTED ON)",
                            *reports, "endif ()"]
    except ScheduleError as err:
        print(f"ropegen schedule error: {err}", file=sys.stderr)
        return 1
    outputs = [(args.out_cmake, cmake_lines), (args.out_inc, inc_lines)]
    if args.out_schedules:
        outputs.append((args.out_schedules, schedule_lines))
    for path, lines in outputs:
        text = "\n".join(lines) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:  # keep timestamps stable for the build
            path.write_text(text)
    return 0


def _cmake_string(text):
    """text as a quoted CMake argument."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _key_args(key):
    """A kernel key as the enumerators of kernels.inc: style, source, dtype, head_dim."""
    return (f"ROPE_STYLE_{key['style'].upper()}, ROPE_SOURCE_{key['source'].upper()}, "
            f"{DTYPES[key['dtype']][1]}, {key['head_dim']}")


if __name__ == "__main__":
    sys.exit(main())
