#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The build's schedule files (cmake/ropegen_kernels.py): every default file loads and resolves
every kernel; a tuned file's entries win, and each rule a tuned file can break (malformed, stale,
misplaced) is a configure error that names the file, the field, the value and the rule; the
configure-time CLI uses, ignores or refuses tuned files as ROPEGEN_TUNED_MACHINE says; and
host_machine() names the machine.

Run by ctest (schedules.TunedFiles), or directly: python3 tests/schedules/schedule_files_test.py
"""
import copy
import itertools
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "cmake" / "ropegen_kernels.py"
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(SCRIPT.parent))
import ropegen_kernels as rk  # noqa: E402 (found through the path above)

HALIDE = "21.0.0"
ROPEGEN = "0.1.0"
MACHINE = "test-box-f1m2"
TARGET = "x86-64-avx512"
RETUNE = f"retune with `python3 bench/tune/rope_tune.py --target {TARGET}` or configure with -DROPEGEN_TUNED_MACHINE=none"
KEY = {"style": "half", "head_dim": 128, "dtype": "f32", "source": "cache"}
CPU_PARAMS = {"vector_pairs": 8, "unroll_pairs": 4, "cos_sin_at": "inline", "cos_sin_vectors": 1, "store_order": "pair_vectors",
              "interleaved_rotation": "swap", "half_rotation": "lanes",
              "layouts": {layout: {"tokens_per_task": 32, "head_loop": "outside_tokens"} for layout in rk.LAYOUTS}}
GPU_PARAMS = {"vector_pairs": 2, "gpu": {"threads_per_block": 128, "pair_threads": 64, "tokens_per_block": 4}}


def tuned_doc(target=TARGET, params=CPU_PARAMS):
    """A valid tuned file of one entry (KEY) for MACHINE."""
    return {
        "format": "ropegen-schedule",
        "version": 1,
        "target": target,
        "meta": {"tuned": {"machine": MACHINE, "cpu": "Test CPU, family 1 model 2 stepping 0, 2 logical CPUs",
                           "method": "measured", "halide": HALIDE, "ropegen": ROPEGEN, "date": "2026-11-21",
                           "command": f"bench/tune/rope_tune.py --target {target}"}},
        "kernels": [{"match": dict(KEY), "params": copy.deepcopy(params), "measured": {"gbps": 1.0}}],
    }


class TunedFileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.tuned_dir = pathlib.Path(self.tmp.name) / "tuned"

    def write(self, doc, directory=TARGET, machine=MACHINE):
        path = self.tuned_dir / directory / f"{machine}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
        return path

    def assert_rejected(self, path, *fragments, halide=HALIDE, ropegen=ROPEGEN):
        with self.assertRaises(rk.ScheduleError) as caught:
            rk.load_tuned_file(path, TARGET, halide, ropegen)
        message = str(caught.exception)
        for fragment in (str(path), *fragments, RETUNE):
            self.assertIn(fragment, message)

    def test_valid_file_wins(self):
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        default = rk.resolve(entries, KEY)
        tuned = rk.load_tuned_file(self.write(tuned_doc()), TARGET, HALIDE, ROPEGEN)
        self.assertEqual(rk.resolve(entries, KEY, tuned), CPU_PARAMS)
        self.assertNotEqual(default, CPU_PARAMS)
        other = dict(KEY, dtype="bf16")
        self.assertEqual(rk.resolve(entries, other, tuned)["vector_pairs"], default["vector_pairs"])

    def test_tuned_entry_wins_over_a_fully_specific_default_entry(self):
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        entries.append(("a default entry", dict(KEY), {"unroll_pairs": 2}))
        tuned = rk.load_tuned_file(self.write(tuned_doc()), TARGET, HALIDE, ROPEGEN)
        self.assertEqual(rk.resolve(entries, KEY, tuned), CPU_PARAMS)
        self.assertEqual([where for where, _ in rk.matching_entries(entries, KEY, tuned)][-2:],
                         ["a default entry", f"{self.tuned_dir / TARGET / MACHINE}.json: kernels[0]"])

    def test_valid_gpu_file_wins(self):
        path = self.write(tuned_doc("cuda-sm86", GPU_PARAMS), directory="cuda-sm86")
        entries = rk.load_schedule_file(REPO / "schedules" / "cuda-sm86.json", "cuda-sm86")
        resolved = rk.resolve(entries, KEY, rk.load_tuned_file(path, "cuda-sm86", HALIDE, ROPEGEN))
        self.assertEqual((resolved["vector_pairs"], resolved["gpu"]), (GPU_PARAMS["vector_pairs"], GPU_PARAMS["gpu"]))

    def test_other_patch_version_is_not_stale(self):
        rk.load_tuned_file(self.write(tuned_doc()), TARGET, HALIDE, "0.1.7")

    def test_bad_json(self):
        self.assert_rejected(self.write('{"format": "ropegen-schedule",'), "cannot read a JSON schedule file")

    def test_not_utf8(self):
        path = self.write(json.dumps(tuned_doc()))
        path.write_bytes(path.read_bytes().replace(b'"meta": {', b'"meta": {"by": "Jos\xe9", ', 1))
        self.assert_rejected(path, "cannot read a JSON schedule file", "utf-8")

    def test_unknown_key(self):
        doc = tuned_doc()
        doc["kernels"][0]["params"]["vector_width"] = 8
        self.assert_rejected(self.write(doc), "kernels[0].params: unknown key(s) ['vector_width']")

    def test_wildcard_match(self):
        doc = tuned_doc()
        doc["kernels"][0]["match"]["head_dim"] = "*"
        self.assert_rejected(self.write(doc), 'kernels[0].match.head_dim: "*" is not allowed in a tuned file')

    def test_partial_params_overlay_the_defaults(self):
        # A tuned entry holds the knobs the tuner changed: the defaults fill the others, so a later
        # change of a default reaches them.
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        default = rk.resolve(entries, KEY)
        for params in ({}, {"unroll_pairs": 4, "layouts": {"sbhd": {"tokens_per_task": 32}}}):
            doc = tuned_doc(params=params)
            expected = copy.deepcopy(default)
            expected.update({k: v for k, v in params.items() if k != "layouts"})
            expected["layouts"]["sbhd"].update(params.get("layouts", {}).get("sbhd", {}))
            tuned = rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN)
            self.assertEqual(rk.resolve(entries, KEY, tuned), expected)
            changed = copy.deepcopy(entries)
            changed[0][2]["vector_pairs"] = 32
            self.assertEqual(rk.resolve(changed, KEY, tuned), {**expected, "vector_pairs": 32})

    def test_out_of_range_knob(self):
        doc = tuned_doc()
        doc["kernels"][0]["params"]["unroll_pairs"] = 17
        self.assert_rejected(self.write(doc), "kernels[0].params.unroll_pairs: 17 must be an integer in [1, 16]")
        doc = tuned_doc()
        doc["kernels"][0]["params"]["cos_sin_vectors"] = 0
        self.assert_rejected(self.write(doc), "kernels[0].params.cos_sin_vectors: 0 must be an integer in [1, 8]")
        doc = tuned_doc()
        doc["kernels"][0]["params"]["store_order"] = "by_half"
        self.assert_rejected(self.write(doc),
                             "kernels[0].params.store_order: \"by_half\" must be one of ['pair_vectors', 'halves']")
        doc = tuned_doc()
        doc["kernels"][0]["params"]["interleaved_rotation"] = "shuffle"
        self.assert_rejected(self.write(doc), "kernels[0].params.interleaved_rotation: \"shuffle\" must be one of "
                                              "['deinterleave', 'swap', 'words']")
        doc = tuned_doc()
        doc["kernels"][0]["params"]["half_rotation"] = "pairs"
        self.assert_rejected(self.write(doc), "kernels[0].params.half_rotation: \"pairs\" must be one of ['lanes', 'words']")
        doc = tuned_doc("cuda-sm86", GPU_PARAMS)
        doc["kernels"][0]["params"]["gpu"]["threads_per_block"] = 96
        path = self.write(doc, directory="cuda-sm86")
        rule = "kernels[0].params.gpu.threads_per_block: 96 must be a power of two"
        with self.assertRaisesRegex(rk.ScheduleError, re.escape(rule)):
            rk.load_tuned_file(path, "cuda-sm86", HALIDE, ROPEGEN)

    def test_large_calls(self):
        doc = tuned_doc()
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 0, "vector_pairs": 16}
        self.assert_rejected(self.write(doc), "kernels[0].params.large_calls.from_bytes: 0 must be an integer in [1, ")
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25}
        self.assert_rejected(self.write(doc), "kernels[0].params.large_calls: sets no knob")
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "cos_sin_at": "root"}
        self.assert_rejected(self.write(doc), "kernels[0].params.large_calls: unknown key(s) ['cos_sin_at']")
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 12}
        self.assert_rejected(self.write(doc), "kernels[0].params.large_calls.vector_pairs: 12 must be a power of two")
        doc = tuned_doc("cuda-sm86", GPU_PARAMS)
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 4}
        with self.assertRaisesRegex(rk.ScheduleError, re.escape("kernels[0].params: unknown key(s) ['large_calls']")):
            rk.load_tuned_file(self.write(doc, directory="cuda-sm86"), "cuda-sm86", HALIDE, ROPEGEN)

    def test_in_place_calls(self):
        doc = tuned_doc()
        doc["kernels"][0]["params"]["in_place_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 16}
        self.assert_rejected(self.write(doc), "kernels[0].params.in_place_calls: unknown key(s) ['from_bytes']")
        for nothing in ({}, {"layouts": {}}, {"layouts": {"bhsd": {}}}):
            doc["kernels"][0]["params"]["in_place_calls"] = nothing
            self.assert_rejected(self.write(doc), "kernels[0].params.in_place_calls: sets no knob")
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "layouts": {}}
        self.assert_rejected(self.write(doc), "kernels[0].params.large_calls: sets no knob")
        del doc["kernels"][0]["params"]["large_calls"]
        doc["kernels"][0]["params"]["in_place_calls"] = {"interleaved_rotation": "shuffle"}
        self.assert_rejected(self.write(doc), "kernels[0].params.in_place_calls.interleaved_rotation: \"shuffle\" must be")
        doc["kernels"][0]["params"]["in_place_calls"] = {"layouts": {"bhsd": {"head_loop": "sideways"}}}
        self.assert_rejected(self.write(doc), "kernels[0].params.in_place_calls.layouts.bhsd.head_loop")
        doc = tuned_doc("cuda-sm86", GPU_PARAMS)
        doc["kernels"][0]["params"]["in_place_calls"] = {"vector_pairs": 4}
        with self.assertRaisesRegex(rk.ScheduleError, re.escape("kernels[0].params: unknown key(s) ['in_place_calls']")):
            rk.load_tuned_file(self.write(doc, directory="cuda-sm86"), "cuda-sm86", HALIDE, ROPEGEN)

    def test_call_classes_make_sibling_kernels_in_the_dispatchers_order(self):
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        doc = tuned_doc()
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 16}
        # One knob of one layout: the others keep the kernel's own.
        doc["kernels"][0]["params"]["in_place_calls"] = {"unroll_pairs": 2, "layouts": {"bhsd": {"head_loop": "inside_tokens"}}}
        resolved = rk.resolve(entries, KEY, rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN))
        classes = rk.call_classes(KEY, resolved)
        self.assertEqual([(call_class, size) for call_class, size, _ in classes],
                         [("large_calls", 1 << 25), ("in_place_calls", 0), (None, 0)])
        layouts = dict(CPU_PARAMS["layouts"], bhsd={"tokens_per_task": 32, "head_loop": "inside_tokens"})
        self.assertEqual(classes[1][2], dict(CPU_PARAMS, unroll_pairs=2, layouts=layouts))
        self.assertEqual(classes[2][2], CPU_PARAMS)  # the overlay left the kernel's own knobs alone
        # Knobs that are the kernel's own: no second kernel.
        doc["kernels"][0]["params"]["in_place_calls"] = {"unroll_pairs": 4}
        resolved = rk.resolve(entries, KEY, rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN))
        self.assertEqual([c for c, _, _ in rk.call_classes(KEY, resolved)], ["large_calls", None])

    def test_large_calls_make_a_sibling_kernel(self):
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        doc = tuned_doc()
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 16}
        resolved = rk.resolve(entries, KEY, rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN))
        (_, from_bytes, large), (_, every, sibling) = rk.call_classes(KEY, resolved)
        self.assertEqual((from_bytes, every), (1 << 25, 0))
        self.assertEqual(sibling, CPU_PARAMS)
        self.assertEqual(large, dict(CPU_PARAMS, vector_pairs=16))
        # The sibling's own knobs (a later change of the defaults can make them so): no second kernel.
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 1 << 25, "vector_pairs": 8}
        resolved = rk.resolve(entries, KEY, rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN))
        self.assertEqual(rk.call_classes(KEY, resolved), [(None, 0, CPU_PARAMS)])

    def test_cos_sin_placement_must_be_what_the_dispatcher_reserves(self):
        doc = tuned_doc()
        for placement in ("task", "root"):  # the cache source reads its tables inline
            doc["kernels"][0]["params"]["cos_sin_at"] = placement
            self.assert_rejected(self.write(doc), f'kernels[0].params: cos_sin_at "{placement}" is not allowed for the '
                                 "cache source", "beyond the scratch the dispatcher reserves", "use inline")
        doc["kernels"][0]["match"]["source"] = "compat"
        for placement in ("task", "inline"):  # a computed source builds them at root
            doc["kernels"][0]["params"]["cos_sin_at"] = placement
            self.assert_rejected(self.write(doc), f'cos_sin_at "{placement}" is not allowed for the compat source',
                                 "use root")
        doc["kernels"][0]["params"]["cos_sin_at"] = "root"
        rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN)
        # A default file's wildcard entries resolve to the same rule.
        entries = rk.load_schedule_file(REPO / "schedules" / f"{TARGET}.json", TARGET)
        entries.append(("a test entry", {"style": "*", "head_dim": "*", "dtype": "*", "source": "cache"},
                        {"cos_sin_at": "task"}))
        with self.assertRaisesRegex(rk.ScheduleError, re.escape(f'a test entry.params, for kernel {KEY}: cos_sin_at "task" '
                                                                'is not allowed for the cache source')):
            rk.resolve(entries, KEY)

    def test_cuda_shared_cos_sin_must_fit_static_shared_memory(self):
        doc = tuned_doc("cuda-sm86", GPU_PARAMS)  # head_dim 128: 64 pairs x 8 bytes a token
        doc["kernels"][0]["params"]["gpu"]["tokens_per_block"] = 96  # 48 KiB exactly
        rk.load_tuned_file(self.write(doc, directory="cuda-sm86"), "cuda-sm86", HALIDE, ROPEGEN)
        doc["kernels"][0]["params"]["gpu"]["tokens_per_block"] = 97
        path = self.write(doc, directory="cuda-sm86")
        rule = ("kernels[0].params: gpu.tokens_per_block 97 is too many for head_dim 128: a block's shared cos/sin "
                "table of 97 rows of 64 pairs x 8 bytes would exceed the 48 KiB of static shared memory; at most 96")
        with self.assertRaisesRegex(rk.ScheduleError, re.escape(f"{path}: {rule}")):
            rk.load_tuned_file(path, "cuda-sm86", HALIDE, ROPEGEN)
        # A default file's entry for every head_dim: the rule holds for each fixed one, not for the
        # any-head_dim kernel, which sizes its table at run time.
        entries = rk.load_schedule_file(REPO / "schedules" / "cuda-sm86.json", "cuda-sm86")
        entries.append(("a test entry", {"style": "*", "head_dim": "*", "dtype": "*", "source": "compat"},
                        {"gpu": {"tokens_per_block": 64}}))
        rk.resolve(entries, dict(KEY, head_dim=128, source="compat"))
        rk.resolve(entries, dict(KEY, head_dim=0, source="compat"))
        with self.assertRaisesRegex(rk.ScheduleError, re.escape("a test entry.params, for kernel ") + ".*"
                                    + re.escape("gpu.tokens_per_block 64 is too many for head_dim 256")):
            rk.resolve(entries, dict(KEY, head_dim=256, source="compat"))

    def test_duplicate_key(self):
        doc = tuned_doc()
        doc["kernels"].append(copy.deepcopy(doc["kernels"][0]))
        self.assert_rejected(self.write(doc), "kernels[1].match:", "is also the match of kernels[0]",
                             "one entry per match")

    def test_measured_is_required_and_an_object(self):
        doc = tuned_doc()
        doc["kernels"][0]["measured"] = 1.5
        self.assert_rejected(self.write(doc), "kernels[0].measured: 1.5 must be an object")
        del doc["kernels"][0]["measured"]
        self.assert_rejected(self.write(doc), "kernels[0]: missing key(s) ['measured']")

    def test_cuda_pair_threads_within_the_block(self):
        doc = tuned_doc("cuda-sm86", GPU_PARAMS)
        doc["kernels"][0]["params"]["gpu"]["pair_threads"] = 256  # threads_per_block 128
        path = self.write(doc, directory="cuda-sm86")
        with self.assertRaisesRegex(rk.ScheduleError, re.escape(
                f"{path}: kernels[0].params: gpu.pair_threads 256 exceeds gpu.threads_per_block 128")):
            rk.load_tuned_file(path, "cuda-sm86", HALIDE, ROPEGEN)

    def test_a_broken_gpu_rule_names_the_entry_that_broke_it(self):
        # A sets pair_threads within the default block; B, more specific, then shrinks the block.
        entries = rk.load_schedule_file(REPO / "schedules" / "cuda-sm86.json", "cuda-sm86")
        entries.append(("entry A", dict(KEY, style="*", head_dim="*", source="*"), {"gpu": {"pair_threads": 64}}))
        entries.append(("entry B", dict(KEY, head_dim="*", source="*"), {"gpu": {"threads_per_block": 32}}))
        with self.assertRaisesRegex(rk.ScheduleError, r"^entry B\.params, .*gpu\.pair_threads 64 exceeds gpu\.threads_per_block 32"):
            rk.resolve(entries, KEY)

    def test_machine_must_be_the_file_name(self):
        self.assert_rejected(self.write(tuned_doc(), machine="other-box"),
                             f'meta.tuned.machine: "{MACHINE}" must be the file\'s name, "other-box"')

    def test_directory_must_be_the_target(self):
        self.assert_rejected(self.write(tuned_doc(), directory="x86-64-avx2"),
                             f'its directory "x86-64-avx2" must be named after its target, "{TARGET}"')

    def test_target_must_be_the_family(self):
        self.assert_rejected(self.write(tuned_doc("x86-64-avx2")), f'target "x86-64-avx2" must be "{TARGET}"')

    def test_meta_tuned_required(self):
        doc = tuned_doc()
        doc["meta"] = {}
        self.assert_rejected(self.write(doc), "meta: missing key(s) ['tuned']")
        del doc["meta"]
        self.assert_rejected(self.write(doc), "missing key(s) ['meta']")

    def test_meta_tuned_fields(self):
        for field, value, rule in (("date", "21.11.2026", 'meta.tuned.date: "21.11.2026" must be a date YYYY-MM-DD'),
                                   ("method", "guessed", 'meta.tuned.method: "guessed" must be "measured" or start with'),
                                   ("cpu", 7, "meta.tuned.cpu: 7 must be a non-empty string"),
                                   ("halide", "21", 'meta.tuned.halide: "21" must be a version X.Y.Z')):
            doc = tuned_doc()
            doc["meta"]["tuned"][field] = value
            self.assert_rejected(self.write(doc), rule)
        doc = tuned_doc()
        doc["meta"]["tuned"]["host"] = "x"
        self.assert_rejected(self.write(doc), "meta.tuned: unknown key(s) ['host']")
        doc = tuned_doc()
        doc["meta"]["tuned"]["method"] = "modelled (llvm-mca)"
        rk.load_tuned_file(self.write(doc), TARGET, HALIDE, ROPEGEN)

    def test_stale_halide(self):
        self.assert_rejected(self.write(tuned_doc()), f"stale: tuned with Halide {HALIDE}, this build uses Halide 22.0.0",
                             halide="22.0.0")

    def test_stale_ropegen_minor(self):
        self.assert_rejected(self.write(tuned_doc()), f"stale: tuned with ropegen {ROPEGEN}, this is ropegen 0.2.0",
                             ropegen="0.2.0")
        self.assert_rejected(self.write(tuned_doc()), "stale", ropegen="1.1.0")


class DefaultFileRulesTest(unittest.TestCase):
    """A default file is as strict as a tuned one: JSON that Python would read loosely, and
    conflicts between entries anywhere in the family's key grid, are errors."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())

    def write(self, text=None):
        path = pathlib.Path(self.tmp.name) / f"{TARGET}.json"
        path.write_text(json.dumps(self.doc, indent=2) if text is None else text)
        return path

    def assert_rejected(self, path, *fragments):
        with self.assertRaises(rk.ScheduleError) as caught:
            rk.load_schedule_file(path, TARGET)
        for fragment in (str(path), *fragments):
            self.assertIn(fragment, str(caught.exception))

    def test_the_file_as_committed_loads(self):
        rk.load_schedule_file(self.write(), TARGET)

    def test_duplicate_key(self):
        text = json.dumps(self.doc, indent=2).replace('"vector_pairs": 16', '"vector_pairs": 16, "vector_pairs": 8', 1)
        self.assert_rejected(self.write(text), 'duplicate key "vector_pairs"', "once per object")

    def test_wrong_types_equal_in_python(self):
        self.doc["version"] = True
        self.assert_rejected(self.write(), "version true is not supported (expected 1)")
        for value, shown in ((False, "false"), (128.0, "128.0")):
            self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
            self.doc["kernels"][1]["match"]["head_dim"] = value
            self.assert_rejected(self.write(), f"kernels[1].match.head_dim: {shown} must be one of [64, 128, 256, 0]")
        self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
        self.doc["kernels"][0]["params"]["layouts"]["bshd"]["tokens_per_task"] = 8.0
        self.assert_rejected(self.write(), "kernels[0].params.layouts.bshd.tokens_per_task: 8.0 must be an integer")
        self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
        self.doc["kernels"][1]["note"] = ["a list"]
        self.assert_rejected(self.write(), 'kernels[1].note: ["a list"] must be a string')

    def test_one_entry_per_match(self):
        self.doc["kernels"].append(copy.deepcopy(self.doc["kernels"][1]))
        last = len(self.doc["kernels"]) - 1
        self.assert_rejected(self.write(), f"kernels[{last}].match:", "is also the match of kernels[1]", "merge the two")

    def test_words_where_the_match_excludes_every_kernel_that_reads_it(self):
        for match, knob in (({"dtype": "f32"}, "half_rotation"), ({"style": "half"}, "interleaved_rotation"),
                            ({"head_dim": 0}, "interleaved_rotation")):
            with self.subTest(match=match, knob=knob):
                self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
                self.doc["kernels"].append({"match": {**dict.fromkeys(rk.MATCH_KEYS, "*"), **match},
                                            "params": {knob: "words"}})
                last = len(self.doc["kernels"]) - 1
                self.assert_rejected(self.write(), f'kernels[{last}].params.{knob}: "words" is read by fixed head_dim',
                                     "which this entry's match excludes")
        # Inside a call class too, where it would make a twin of the kernel, which is dropped.
        for name in rk.CALL_CLASSES:
            with self.subTest(call_class=name):
                self.doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
                self.doc["kernels"].append({"match": {**dict.fromkeys(rk.MATCH_KEYS, "*"), "dtype": "f32"},
                                            "params": {name: {"half_rotation": "words",
                                                              **({"from_bytes": 1 << 25} if name == rk.LARGE_CALLS else {})}}})
                last = len(self.doc["kernels"]) - 1
                self.assert_rejected(self.write(), f'kernels[{last}].params.{name}.half_rotation: "words" is read by '
                                     "fixed head_dim", "which this entry's match excludes")

    def test_conflicts_anywhere_in_the_key_grid(self):
        # Equally specific, both set vector_pairs, and both match only the interleaved f16 kernels.
        first = len(self.doc["kernels"])
        for match in ({"dtype": "f16"}, {"style": "interleaved"}):
            self.doc["kernels"].append({"match": {**dict.fromkeys(rk.MATCH_KEYS, "*"), **match},
                                        "params": {"vector_pairs": 8}})
        self.assert_rejected(self.write(), f"kernels[{first}] and", f"kernels[{first + 1}] both set ['vector_pairs'] for kernel",
                             "'style': 'interleaved'", "'dtype': 'f16'", "equally specific")


class CommandLineTest(unittest.TestCase):
    """cmake/ropegen_kernels.py as CMake runs it: the AVX-512 kernels of f32, head_dims 128 and any."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.root = pathlib.Path(self.tmp.name)
        self.tuned_dir = self.root / "tuned"

    def run_script(self, machine, halide=HALIDE, schedules=REPO / "schedules", isas="avx512", dtypes="f32"):
        out = self.root / "kernels.cmake"
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--schedules", str(schedules), "--tuned-dir", str(self.tuned_dir),
             "--tuned-machine", machine, "--halide-version", halide, "--ropegen-version", ROPEGEN, "--arch", "x86_64",
             "--isas", isas, "--cuda", "", "--dtypes", dtypes, "--head-dims", "128;0", "--out-cmake", str(out),
             "--out-inc", str(self.root / "kernels.inc"), "--out-schedules", str(self.root / "schedules.inc")],
            capture_output=True, text=True, check=False)
        return result, out.read_text() if result.returncode == 0 else None

    def write_tuned(self):
        path = self.tuned_dir / TARGET / f"{MACHINE}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(tuned_doc()))
        return path

    @staticmethod
    def params_line(script):
        prefix = "set(ROPEGEN_KERNEL_ropegen_half_cache_d128_f32__avx512_PARAMS "
        return next(line for line in script.splitlines() if line.startswith(prefix))

    def test_tuned_file_used(self):
        path = self.write_tuned()
        result, script = self.run_script(MACHINE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("vector_pairs=8 unroll_pairs=4 cos_sin_at=inline cos_sin_vectors=1 store_order=pair_vectors "
                      "interleaved_rotation=swap half_rotation=lanes "
                      "bhsd_tokens_per_task=32 bhsd_head_loop=outside_tokens",
                      self.params_line(script))
        self.assertIn(f'message(STATUS "ropegen: {TARGET}: tuned schedule {path} (measured, 2026-11-21)")', script)

    def test_a_build_of_no_isa_or_no_dtype_is_refused(self):
        for option, isas, dtypes in (("ROPEGEN_ISAS", "", "f32"), ("ROPEGEN_DTYPES", "avx512", ";")):
            with self.subTest(option):
                result, _ = self.run_script("none", isas=isas, dtypes=dtypes)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(f"{option}", result.stderr)
                self.assertIn("names none of", result.stderr)

    def test_large_calls_kernel_listed_before_its_sibling(self):
        path = self.write_tuned()
        doc = json.loads(path.read_text())
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 33554432, "vector_pairs": 16}
        path.write_text(json.dumps(doc))
        result, script = self.run_script(MACHINE)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [line for line in (self.root / "kernels.inc").read_text().splitlines()
                 if line.startswith("ROPE_KERNEL(ropegen_half_cache_d128_f32")]
        self.assertEqual(lines, [
            "ROPE_KERNEL(ropegen_half_cache_d128_f32_large__avx512, ROPE_ISA_AVX512, ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, "
            "ROPE_DTYPE_F32, 128, 0, 33554432ull, 0)",
            "ROPE_KERNEL(ropegen_half_cache_d128_f32__avx512, ROPE_ISA_AVX512, ROPE_STYLE_HALF, ROPE_SOURCE_CACHE, "
            "ROPE_DTYPE_F32, 128, 0, 0ull, 0)"])
        self.assertIn(" vector_pairs=8 ", " " + self.params_line(script))
        large = next(line for line in script.splitlines()
                     if line.startswith("set(ROPEGEN_KERNEL_ropegen_half_cache_d128_f32_large__avx512_PARAMS "))
        self.assertIn(" vector_pairs=16 unroll_pairs=4 ", large)
        self.assertNotIn("large_calls", script)

    def test_in_place_kernel_listed_after_the_large_one_and_before_its_sibling(self):
        path = self.write_tuned()
        doc = json.loads(path.read_text())
        doc["kernels"][0]["params"]["large_calls"] = {"from_bytes": 33554432, "vector_pairs": 16}
        doc["kernels"][0]["params"]["in_place_calls"] = {"unroll_pairs": 2}
        path.write_text(json.dumps(doc))
        result, script = self.run_script(MACHINE)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [line for line in (self.root / "kernels.inc").read_text().splitlines()
                 if line.startswith("ROPE_KERNEL(ropegen_half_cache_d128_f32")]
        self.assertEqual([line.split(",")[0] for line in lines],
                         ["ROPE_KERNEL(ropegen_half_cache_d128_f32_large__avx512",
                          "ROPE_KERNEL(ropegen_half_cache_d128_f32_inplace__avx512",
                          "ROPE_KERNEL(ropegen_half_cache_d128_f32__avx512"])
        self.assertEqual([line.split(", ")[-2:] for line in lines],
                         [["33554432ull", "0)"], ["0ull", "1)"], ["0ull", "0)"]])
        in_place = next(line for line in script.splitlines()
                        if line.startswith("set(ROPEGEN_KERNEL_ropegen_half_cache_d128_f32_inplace__avx512_PARAMS "))
        self.assertIn(" vector_pairs=8 unroll_pairs=2 ", in_place)
        self.assertNotIn("in_place_calls", script)

    def test_tuned_file_wins_over_a_fully_specific_default_entry(self):
        doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
        doc["kernels"].append({"match": dict(KEY), "params": {"unroll_pairs": 2}})
        schedules = self.root / "schedules"
        schedules.mkdir()
        (schedules / f"{TARGET}.json").write_text(json.dumps(doc))
        self.write_tuned()
        result, script = self.run_script(MACHINE, schedules=schedules)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(" unroll_pairs=4 ", self.params_line(script))
        # ropegen-info's provenance names both, the tuned entry last.
        line = next(line for line in (self.root / "schedules.inc").read_text().splitlines()
                    if line.startswith("ROPE_KERNEL_SCHEDULE(ropegen_half_cache_d128_f32__avx512,"))
        self.assertIn(f"schedules/{TARGET}.json: kernels[{len(doc['kernels']) - 1}]; tuned/{TARGET}/{MACHINE}.json: "
                      "kernels[0]", line)

    def test_stale_file_fails(self):
        self.write_tuned()
        result, _ = self.run_script(MACHINE, halide="22.0.0")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ropegen schedule error:", result.stderr)
        self.assertIn("stale: tuned with Halide 21.0.0, this build uses Halide 22.0.0", result.stderr)
        self.assertIn(RETUNE, result.stderr)

    def test_none_ignores_the_file(self):
        self.write_tuned()
        result, script = self.run_script("none", halide="22.0.0")  # stale, and still not read
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("vector_pairs=16", self.params_line(script))
        self.assertIn(f'message(STATUS "ropegen: {TARGET}: defaults (tuned schedules off)")', script)

    def test_named_machine_without_files_fails(self):
        result, _ = self.run_script("no-such-box")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ROPEGEN_TUNED_MACHINE=no-such-box: no tuned file for the families built", result.stderr)
        self.assertIn(str(self.tuned_dir / TARGET / "no-such-box.json"), result.stderr)

    def test_machine_name_must_be_a_slug(self):
        result, _ = self.run_script("../x86-64-avx512/test")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("must be host, none, or a machine's name", result.stderr)

    def test_a_conflict_among_kernels_not_built_fails(self):
        doc = json.loads((REPO / "schedules" / f"{TARGET}.json").read_text())
        for match in ({"dtype": "f16"}, {"style": "interleaved"}):  # only f32 is built
            doc["kernels"].append({"match": {**dict.fromkeys(rk.MATCH_KEYS, "*"), **match}, "params": {"vector_pairs": 8}})
        schedules = self.root / "schedules"
        schedules.mkdir()
        (schedules / f"{TARGET}.json").write_text(json.dumps(doc))
        result, _ = self.run_script("none", schedules=schedules)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("both set ['vector_pairs'] for kernel", result.stderr)

    def test_a_head_dim_that_is_not_an_integer(self):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--schedules", str(REPO / "schedules"), "--tuned-machine", "none",
             "--halide-version", HALIDE, "--ropegen-version", ROPEGEN, "--arch", "x86_64", "--isas", "avx512",
             "--cuda", "", "--dtypes", "f32", "--head-dims", "12x;0", "--out-cmake", str(self.root / "kernels.cmake"),
             "--out-inc", str(self.root / "kernels.inc")],
            capture_output=True, text=True, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ROPEGEN_HEAD_DIMS: '12x;0': invalid literal for int()", result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_host_without_files_uses_defaults(self):
        self.write_tuned()  # another machine's
        result, script = self.run_script("host")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"defaults (no tuned file for {rk.host_machine()['slug']})", script)

    def test_unidentified_host_uses_defaults(self):
        out = self.root / "kernels.cmake"
        argv = ["ropegen_kernels.py", "--schedules", str(REPO / "schedules"), "--halide-version", HALIDE,
                "--ropegen-version", ROPEGEN, "--arch", "x86_64", "--isas", "avx512", "--dtypes", "f32",
                "--head-dims", "128;0", "--out-cmake", str(out), "--out-inc", str(self.root / "kernels.inc")]
        unknown = rk.ScheduleError("cannot identify this machine: no model name")
        with mock.patch.object(sys, "argv", argv), mock.patch.object(rk, "host_machine", side_effect=unknown):
            self.assertEqual(rk.main(), 0)
        self.assertIn(f'message(STATUS "ropegen: {TARGET}: defaults ({unknown})")', out.read_text())


class HostMachineTest(unittest.TestCase):
    SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

    def test_this_machine(self):
        machine = rk.host_machine()
        self.assertRegex(machine["slug"], self.SLUG)
        self.assertTrue(machine["cpu"] and "\n" not in machine["cpu"], machine)

    def test_x86(self):
        cpu = ("processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
               "model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\nstepping\t: 8\n\n")
        machine = rk.host_machine("".join(cpu.format(n=n) for n in range(4)))
        self.assertEqual(machine, {"slug": "intel-xeon-platinum-8481c-f6m143",
                                   "cpu": "GenuineIntel Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, "
                                          "family 6 model 143 stepping 8, 4 logical CPUs"})
        amd = ("processor : 0\nvendor_id : AuthenticAMD\ncpu family : 25\nmodel : 1\n"
               "model name : AMD EPYC 7B13 64-Core Processor\nstepping : 0\n")
        self.assertEqual(rk.host_machine(amd)["slug"], "amd-epyc-7b13-f25m1")

    def test_aarch64(self):
        cpu = ("processor\t: {n}\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
               "CPU variant\t: 0x3\nCPU part\t: 0xD0C\nCPU revision\t: 1\n\n")
        machine = rk.host_machine(cpu.format(n=0))
        self.assertEqual(machine, {"slug": "arm-0x41-0xd0c",
                                   "cpu": "ARM implementer 0x41 part 0xd0c variant 0x3 revision 1, 1 logical CPU"})

    def test_unknown_cpu(self):
        with self.assertRaisesRegex(rk.ScheduleError, 'no "model name"'):
            rk.host_machine("processor : 0\n")


class DefaultFilesTest(unittest.TestCase):
    def test_every_default_file_resolves_every_kernel(self):
        files = sorted((REPO / "schedules").glob("*.json"))
        families = {family for _, family, *_ in rk.ISAS.values()} | {family for family, *_ in rk.CUDA_LEVELS.values()}
        self.assertEqual({path.stem for path in files}, families)
        cpu_knobs = {"vector_pairs", "unroll_pairs", "cos_sin_at", "cos_sin_vectors", "store_order", "interleaved_rotation",
                     "half_rotation"} | {
            f"{layout}_{knob}" for layout in rk.LAYOUTS for knob in ("tokens_per_task", "head_loop")}
        gpu_knobs = {"vector_pairs"} | {f"gpu_{knob}" for knob in rk.GPU_GROUP_KNOBS}
        for path in files:
            entries = rk.load_schedule_file(path, path.stem)
            for values in itertools.product(*rk.MATCH_KEYS.values()):
                params = rk.generator_params(rk.resolve(entries, dict(zip(rk.MATCH_KEYS, values))))
                self.assertEqual(set(params), gpu_knobs if path.stem.startswith("cuda-") else cpu_knobs, path)


    def test_every_committed_tuned_file_is_current_and_resolves_every_kernel(self):
        # The versions this checkout builds with: the pinned Halide wheel and the project's own.
        halide = re.search(r"^halide==(\S+)$", (REPO / "cmake" / "requirements.txt").read_text(), re.M).group(1)
        ropegen = re.search(r"project\(ropegen VERSION (\S+)", (REPO / "CMakeLists.txt").read_text()).group(1)
        files = sorted((REPO / "schedules" / "tuned").glob("*/*.json"))
        self.assertTrue(files)
        for path in files:
            family = path.parent.name
            tuned = rk.load_tuned_file(path, family, halide, ropegen)  # a stale file is an error
            entries = rk.load_schedule_file(REPO / "schedules" / f"{family}.json", family)
            for values in itertools.product(*rk.MATCH_KEYS.values()):
                key = dict(zip(rk.MATCH_KEYS, values))
                rk.call_classes(key, rk.resolve(entries, key, tuned))


if __name__ == "__main__":
    unittest.main()
