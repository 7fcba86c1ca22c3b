#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of the autotuner's search and file handling (ctest tune.Search). The search runs on
synthetic measurements whose best schedule is known; the file tests write a tuned file and read
it back through the build's own loader (cmake/ropegen_kernels.py). tune.Run (CMakeLists.txt)
runs the real tool, candidates built and timed, on one key."""
import collections
import contextlib
import json
import math
import pathlib
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rope_tune as rt  # noqa: E402

rk = rt.rk
KEY = {"style": "half", "head_dim": 128, "dtype": "bf16", "source": "cache"}
FAMILY, ISA = "x86-64-avx512", "avx512"
SHAPES = {"decode_bshd": "bshd", "prefill_bshd": "bshd", "prefill_bhsd": "bhsd", "prefill_sbhd": "sbhd",
          "decode_strided": "strided"}
IN_PLACE_SHAPES = {"decode_bshd_in_place": "bshd", "prefill_bhsd_in_place": "bhsd"}  # timed with in_place alone


def default_params(key=KEY):
    return rt.canonical(rk.resolve(rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY), key))


class Landscape:
    """Synthetic timings: a candidate's speed on a shape is a product of one factor per knob, the
    layout knobs counting only on their own group's shapes, so the best schedule is known. With
    root_tile, a root cos/sin table tiled by that strided.tokens_per_task also speeds up the
    other layouts' shapes (the generator tiles the table by it). Calls in place (IN_PLACE_SHAPES,
    measured with in_place alone) run at in_place_speed: here the same."""

    BEST_CORE = {"vector_pairs": 8, "unroll_pairs": 4, "cos_sin_at": "inline", "store_order": "pair_vectors",
                 "half_rotation": "words"}
    BEST_LAYOUT = {"bshd": (4, "inside_tokens"), "bhsd": (32, "outside_tokens"), "sbhd": (2, "inside_tokens"),
                   "strided": (1, "outside_tokens")}

    def __init__(self, broken=(), root_tile=None):
        self.broken = [rt.canonical(p) for p in broken]
        self.root_tile = root_tile
        self.calls = []

    def speed(self, params, layout):
        speed = 1.0
        for knob, best in self.BEST_CORE.items():
            speed *= 1.0 if params[knob] == best else 0.9
        tokens, loop = self.BEST_LAYOUT[layout]
        knobs = params["layouts"][layout]
        speed *= 1.0 if knobs["tokens_per_task"] == tokens else 0.95
        speed *= 1.0 if knobs["head_loop"] == loop else 0.97
        if self.root_tile and params["cos_sin_at"] == "root" and layout != "strided":
            speed *= 1.0 if params["layouts"]["strided"]["tokens_per_task"] == self.root_tile else 0.9
        return speed

    def in_place_speed(self, params, layout):
        return self.speed(params, layout)

    def shapes(self, params, in_place=False):
        speed = self.in_place_speed if in_place else self.speed
        return {shape: {"layout": layout, "bytes": 1000, "ns": 100 / speed(params, layout),
                        "memcpy_ns": 50.0, "spread": 0.0}
                for shape, layout in (IN_PLACE_SHAPES if in_place else SHAPES).items()}

    def measure(self, pool, reps, stage, min_bytes=0, below_bytes=None, in_place=False):
        self.calls.append((len(pool), reps, stage))
        result = []
        for params in pool:
            if rt.canonical(params) in self.broken:
                result.append(None)
                continue
            result.append(rt.Measurement({shape: info for shape, info in self.shapes(params, in_place).items()
                                          if min_bytes <= info["bytes"] < (below_bytes or math.inf)}))
        return result


def best_params(default):
    best = rt.with_core(default, Landscape.BEST_CORE)
    for layout, (tokens, loop) in Landscape.BEST_LAYOUT.items():
        best["layouts"][layout] = {"tokens_per_task": tokens, "head_loop": loop}
    return rt.canonical(best)


class SearchTest(unittest.TestCase):
    def test_staged_search_finds_what_the_full_sweep_finds(self):
        default = default_params()
        landscape = Landscape()
        swept = rt.full_sweep(default, KEY, ISA, landscape.measure)
        sweep_calls = sum(n for n, _, _ in landscape.calls)
        landscape.calls.clear()
        tuned, tuned_m, default_m = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False)
        staged_calls = sum(n for n, _, _ in landscape.calls)
        self.assertEqual(swept, best_params(default))
        self.assertEqual(tuned, best_params(default))
        self.assertGreater(tuned_m.score(), default_m.score())
        # The point of staging: a fraction of the candidates.
        self.assertLess(staged_calls * 3, sweep_calls, f"staged {staged_calls} vs full sweep {sweep_calls}")

    def test_strided_tokens_per_task_is_judged_on_every_shape_with_a_root_table(self):
        key = {**KEY, "source": "compat"}  # a root cos/sin table
        default = default_params(key)
        landscape = Landscape(root_tile=64)
        for tuned in (rt.full_sweep(default, key, ISA, landscape.measure),
                      rt.staged_search(default, key, ISA, landscape.measure, lambda: False)[0]):
            # Not 1, the best of the strided shapes alone.
            self.assertEqual(tuned["layouts"]["strided"], {"tokens_per_task": 64, "head_loop": "outside_tokens"})
            self.assertEqual(tuned["layouts"]["bshd"], {"tokens_per_task": 4, "head_loop": "inside_tokens"})
        # Without a root table (the cache source) the strided group is judged on its shapes only.
        landscape.calls.clear()
        rt.staged_search(default_params(), KEY, ISA, landscape.measure, lambda: False)
        self.assertFalse([stage for _, _, stage in landscape.calls if "root table" in stage])

    def test_a_candidate_failing_its_check_is_never_chosen(self):
        default = default_params()
        best_core = rt.with_core(default, Landscape.BEST_CORE)
        tuned, _, _ = rt.staged_search(default, KEY, ISA, Landscape(broken=[best_core]).measure, lambda: False)
        self.assertNotEqual({knob: tuned[knob] for knob in Landscape.BEST_CORE}, Landscape.BEST_CORE)

    def test_the_default_is_kept_unless_beaten(self):
        default = default_params()

        def flat(pool, reps, stage):  # every candidate equally fast: nothing beats the default
            return Landscape().measure([default] * len(pool), reps, stage)

        tuned, tuned_m, default_m = rt.staged_search(default, KEY, ISA, flat, lambda: False)
        self.assertEqual(tuned, default)
        self.assertEqual(tuned_m.score(), default_m.score())

        def slightly_better(pool, reps, stage):  # a gain within the noise is not worth a change
            measurements = Landscape().measure([default] * len(pool), reps, stage)
            for params, m in zip(pool, measurements):
                for info in m.shapes.values():
                    info["ns"] /= 1.005 if params != default else 1.0
            return measurements

        tuned, _, _ = rt.staged_search(default, KEY, ISA, slightly_better, lambda: False)
        self.assertEqual(tuned, default)

    def test_a_win_must_hold_in_a_second_run(self):
        default = default_params()
        landscape = Landscape()

        def lucky_once(pool, reps, stage):  # the second confirmation finds every candidate equal
            if stage == "second confirmation":
                return landscape.measure([default] * len(pool), reps, stage)
            return landscape.measure(pool, reps, stage)

        tuned, tuned_m, default_m = rt.staged_search(default, KEY, ISA, lucky_once, lambda: False)
        self.assertEqual(tuned, default)
        self.assertEqual(tuned_m.score(), default_m.score())
        self.assertEqual(landscape.calls[-1][2], "second confirmation")

    def test_out_of_budget_skips_the_layout_stage(self):
        landscape = Landscape()
        rt.staged_search(default_params(), KEY, ISA, landscape.measure, lambda: True)
        self.assertNotIn("layout knobs", [stage for _, _, stage in landscape.calls])
        self.assertEqual(landscape.calls[-1][2], "second confirmation")

    def test_modelled_search_judges_only_what_the_model_sees(self):
        default = default_params()
        landscape = Landscape()
        tuned, _, _ = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False, rt.MODELLED_KNOBS)
        self.assertNotIn("layout knobs", [stage for _, _, stage in landscape.calls])
        self.assertEqual(tuned["cos_sin_at"], default["cos_sin_at"])
        self.assertEqual(tuned["layouts"], default["layouts"])
        self.assertEqual((tuned["vector_pairs"], tuned["unroll_pairs"], tuned["store_order"]), (8, 4, "pair_vectors"))

    def test_cost_model_pruning(self):
        default = default_params()
        cores = rt.core_candidates(KEY, ISA, default)
        self.assertTrue(all(8 <= c["vector_pairs"] <= 32 for c in cores))  # avx512: 16 f32 lanes
        self.assertTrue(all(c["vector_pairs"] * c["unroll_pairs"] <= 64 for c in cores))  # d128: 64 pairs
        # cos/sin placement: only what the dispatcher reserves scratch for.
        computed = rt.core_candidates({**KEY, "source": "compat"}, ISA, default)
        self.assertEqual({c["cos_sin_at"] for c in computed}, {"root"})
        self.assertEqual({c["cos_sin_at"] for c in cores}, {"inline"})
        # Store order: both for the half style; the interleaved style's stores do not depend on it.
        self.assertEqual({c["store_order"] for c in cores}, set(rk.STORE_ORDERS))
        interleaved = rt.core_candidates({**KEY, "style": "interleaved"}, ISA, default)
        self.assertEqual({c["store_order"] for c in interleaved}, {default["store_order"]})
        # Interleaved rotation: all for a fixed head_dim of the interleaved style (words for 16-bit
        # lanes only), else the default.
        self.assertEqual({c["interleaved_rotation"] for c in interleaved}, set(rk.INTERLEAVED_ROTATIONS))
        interleaved_f32 = rt.core_candidates({**KEY, "style": "interleaved", "dtype": "f32"}, ISA, default)
        self.assertEqual({c["interleaved_rotation"] for c in interleaved_f32}, {"deinterleave", "swap"})
        self.assertEqual({c["interleaved_rotation"] for c in cores}, {default["interleaved_rotation"]})
        any_head_dim = rt.core_candidates({**KEY, "style": "interleaved", "head_dim": 0}, ISA, default)
        self.assertEqual({c["interleaved_rotation"] for c in any_head_dim}, {default["interleaved_rotation"]})
        lanes = [c for c in cores if c["half_rotation"] == "lanes"]
        self.assertEqual(len(interleaved) // len(rk.INTERLEAVED_ROTATIONS), len(lanes) // len(rk.STORE_ORDERS))
        # Half rotation: both for a fixed head_dim of the half style with 16-bit lanes (words: blocks
        # of at most a half's 32 words), else the default.
        self.assertEqual({c["half_rotation"] for c in cores}, set(rk.HALF_ROTATIONS))
        self.assertTrue(all(c["vector_pairs"] * c["unroll_pairs"] <= 32 for c in cores if c["half_rotation"] == "words"))
        for other in ({**KEY, "style": "interleaved"}, {**KEY, "dtype": "f32"}, {**KEY, "head_dim": 0}):
            candidates = rt.core_candidates(other, ISA, default_params(other))
            self.assertEqual({c["half_rotation"] for c in candidates}, {"lanes"}, other)
        small = rt.core_candidates({**KEY, "head_dim": 64}, "sse41", default)
        self.assertTrue(all(2 <= c["vector_pairs"] <= 8 and c["vector_pairs"] * c["unroll_pairs"] <= 32 for c in small))


class LargeLandscape(Landscape):
    """Landscape plus one shape of a GiB (layout bshd), on which vector_pairs 16 beats the rest
    of the best core (the others run at EDGE of its speed there)."""
    EDGE = 0.6

    def shapes(self, params, in_place=False):
        shapes = super().shapes(params, in_place)
        if not in_place:  # a call out of place, as the harness times it
            shapes["prefill_huge"] = {
                "layout": "bshd", "bytes": 1 << 30, "memcpy_ns": 50.0, "spread": 0.0,
                "ns": 100 / self.speed(params, "bshd") / (1.0 if params["vector_pairs"] == 16 else self.EDGE)}
        return shapes

    def measure(self, pool, reps, stage, min_bytes=0, below_bytes=None, in_place=False):
        result = super().measure(pool, reps, stage, min_bytes, below_bytes, in_place)
        self.timed_shapes.append((stage, {shape for m in result if m is not None for shape in m.shapes}))
        return result

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timed_shapes = []  # (stage, the shapes its measurements hold), per measure call


class LargeCallTest(unittest.TestCase):
    def test_the_large_shapes_knobs_become_large_calls(self):
        default, landscape = default_params(), LargeLandscape()
        tuned, tuned_m, _ = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False)
        self.assertEqual(tuned["vector_pairs"], 8)  # six shapes of seven favour it
        entry, large_m, sibling_m = rt.large_call_stage(default, tuned, tuned_m, KEY, ISA, landscape.measure, 1 << 29)
        self.assertEqual((entry["from_bytes"], entry["vector_pairs"]), (1 << 29, 16))
        # Every run of stage 4 timed the large shape alone.
        stage4 = [shapes for stage, shapes in landscape.timed_shapes if stage.startswith("large-call")]
        self.assertEqual(len(stage4), 4)  # knobs, finalists, two confirmations
        self.assertTrue(all(shapes == {"prefill_huge"} for shapes in stage4), stage4)
        # Only what differs from the sibling (here a block of 16 pairs takes a knob of the best core:
        # the unroll or the words, whichever comes first among equals).
        self.assertTrue(all(tuned[knob] != value for knob, value in entry.items() if knob != "from_bytes"))
        self.assertGreater(large_m.score(shapes=["prefill_huge"]), sibling_m.score(shapes=["prefill_huge"]))
        # The entry is what the build reads: a sibling kernel with the knob overlaid.
        (_, _, large), (_, _, sibling) = rk.call_classes(KEY, {**tuned, rk.LARGE_CALLS: entry})
        self.assertEqual((large, sibling), ({**tuned, **{k: v for k, v in entry.items() if k != "from_bytes"}}, tuned))

    def test_the_first_timing_of_the_keys_kernel_is_its_screen(self):
        # --large-calls-only (tuned_m None) times tuned once to find the large shapes; the screen
        # counts that timing as tuned's and times the others: as many timed as with tuned_m given.
        default, landscape = default_params(), LargeLandscape()
        tuned, tuned_m, _ = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False)
        found, screened = [], []
        for known in (tuned_m, None):
            landscape.calls.clear()
            found.append(rt.large_call_stage(default, tuned, known, KEY, ISA, landscape.measure, 1 << 29))
            screened.append(sum(size for size, reps, _ in landscape.calls if reps == rt.REPS_SCREEN))
        self.assertEqual(found[0][0], found[1][0])
        self.assertEqual(screened[0], screened[1])
        self.assertEqual([size for size, _, stage in landscape.calls[:2]], [1, screened[1] - 1])

    def test_none_without_a_large_shape_or_a_win(self):
        default, landscape = default_params(), LargeLandscape()
        tuned, tuned_m, _ = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False)
        landscape.calls.clear()
        self.assertIsNone(rt.large_call_stage(default, tuned, tuned_m, KEY, ISA, landscape.measure, 1 << 31))
        self.assertEqual(landscape.calls, [])  # nothing measured
        plain = Landscape()
        tuned, tuned_m, _ = rt.staged_search(default, KEY, ISA, plain.measure, lambda: False)
        self.assertIsNone(rt.large_call_stage(default, tuned, tuned_m, KEY, ISA, plain.measure, 1000))

    def test_a_win_within_the_noise_adds_no_kernel(self):
        default, landscape = default_params(), LargeLandscape()
        # The best candidate of 16 pairs a vector is two knobs off the best core (0.9 x 0.9 of its
        # speed elsewhere): 2% ahead on the huge shape, below LARGE_CALL_MIN_GAIN.
        landscape.EDGE = 0.9 * 0.9 / 1.02
        tuned, tuned_m, _ = rt.staged_search(default, KEY, ISA, landscape.measure, lambda: False)
        self.assertIsNone(rt.large_call_stage(default, tuned, tuned_m, KEY, ISA, landscape.measure, 1 << 29))
        self.assertEqual(landscape.calls[-1][2], "large-call confirmation")  # chosen, then refused

    def test_last_level_cache_bytes(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            self.assertIsNone(rt.last_level_cache_bytes(root))
            for index, level, size in ((0, 1, "32K"), (2, 2, "1024K"), (3, 3, "32768K")):
                (root / f"index{index}").mkdir()
                (root / f"index{index}" / "level").write_text(f"{level}\n")
                (root / f"index{index}" / "size").write_text(f"{size}\n")
            self.assertEqual(rt.last_level_cache_bytes(root), 32 << 20)


class InPlaceLandscape(Landscape):
    """Landscape whose calls in place favour other knobs: 16 pairs a vector without unroll (0.7
    the speed otherwise), and the BHSD prefill 8 tokens a task; the other knobs count as out of
    place, so that the best is unique."""

    EDGE = 0.7  # the others' speed in place, of the best's

    def in_place_speed(self, params, layout):
        as_if = rt.canonical(params)  # params with the in-place bests standing for the others'
        fits = (params["vector_pairs"], params["unroll_pairs"]) == (16, 1)
        if fits:
            as_if.update({knob: self.BEST_CORE[knob] for knob in ("vector_pairs", "unroll_pairs")})
        bhsd = as_if["layouts"]["bhsd"]
        bhsd["tokens_per_task"] = self.BEST_LAYOUT["bhsd"][0] if bhsd["tokens_per_task"] == 8 else 0
        return self.speed(as_if, layout) * (1.0 if fits else self.EDGE)


# What InPlaceLandscape's calls in place favour, as the in_place_calls of KEY's entry.
IN_PLACE_ENTRY = {"vector_pairs": 16, "unroll_pairs": 1, "layouts": {"bhsd": {"tokens_per_task": 8}}}


class HugeInPlaceLandscape(InPlaceLandscape):
    """InPlaceLandscape plus a call in place of a GiB, measured like the decode step."""

    def shapes(self, params, in_place=False):
        shapes = super().shapes(params, in_place)
        if in_place:
            shapes["prefill_huge_in_place"] = {**shapes["decode_bshd_in_place"], "bytes": 1 << 30}
        return shapes


class InPlaceTest(unittest.TestCase):
    def tuned(self, landscape):
        """KEY's kernel from stages 1-3 on `landscape`."""
        return rt.staged_search(default_params(), KEY, ISA, landscape.measure, lambda: False)[0]

    def test_the_in_place_calls_knobs_become_in_place_calls(self):
        default, landscape = default_params(), InPlaceLandscape()
        tuned = self.tuned(landscape)
        self.assertEqual(tuned, best_params(default))  # judged on the other calls alone
        landscape.calls.clear()
        summary = {}
        with_kernel = rt.with_in_place_kernel(default, tuned, KEY, ISA, landscape.measure, summary)
        self.assertEqual(with_kernel, {**tuned, rk.IN_PLACE_CALLS: IN_PLACE_ENTRY})
        measured = summary[rk.IN_PLACE_CALLS]
        self.assertGreater(measured["memcpy_ratio"], rt.IN_PLACE_MIN_GAIN * measured["incumbent_memcpy_ratio"])
        self.assertEqual(measured["shapes"], sorted(IN_PLACE_SHAPES))
        stages = [stage for _, _, stage in landscape.calls]
        self.assertEqual(stages[-2:], ["in-place confirmation", "in-place second confirmation"])
        # The entry is what the build reads: a sibling kernel for calls in place.
        (call_class, _, kernel), (_, _, own) = rk.call_classes(KEY, with_kernel)
        self.assertEqual((call_class, own), (rk.IN_PLACE_CALLS, tuned))
        self.assertEqual(rt.canonical(kernel)["vector_pairs"], 16)
        self.assertEqual(rt.in_place_kernel(KEY, with_kernel), rt.canonical(kernel))

    def test_nothing_changes_where_the_kernel_of_every_call_serves_them_best(self):
        default, landscape = default_params(), Landscape()
        tuned = self.tuned(landscape)
        summary = {}
        self.assertIs(rt.with_in_place_kernel(default, tuned, KEY, ISA, landscape.measure, summary), tuned)
        self.assertEqual(summary, {})

    def test_a_win_within_the_noise_adds_no_kernel(self):
        default, landscape = default_params(), InPlaceLandscape()
        # The in-place knobs ahead on the BHSD prefill alone, by 1 / 0.95: 2.6% over the two calls in
        # place, below IN_PLACE_MIN_GAIN.
        landscape.EDGE = 1.0
        tuned = self.tuned(landscape)
        self.assertIs(rt.with_in_place_kernel(default, tuned, KEY, ISA, landscape.measure, {}), tuned)
        self.assertEqual(landscape.calls[-1][2], "in-place confirmation")  # chosen, then refused

    def test_a_schedule_files_in_place_kernel_that_loses_is_turned_off(self):
        landscape = Landscape()
        tuned = self.tuned(landscape)
        hand_picked = {"vector_pairs": 32, "layouts": {"bhsd": {"head_loop": "inside_tokens"}}}
        default = {**default_params(), rk.IN_PLACE_CALLS: hand_picked}  # as the schedule file would give it
        summary = {}
        with_kernel = rt.with_in_place_kernel(default, {**tuned, rk.IN_PLACE_CALLS: hand_picked}, KEY, ISA,
                                              landscape.measure, summary)
        # The file's knobs set back to the kernel's own: a class that adds no kernel.
        self.assertEqual(with_kernel[rk.IN_PLACE_CALLS], {
            "vector_pairs": tuned["vector_pairs"], "layouts": {"bhsd": {"head_loop": tuned["layouts"]["bhsd"]["head_loop"]}}})
        self.assertEqual(rk.call_classes(KEY, with_kernel), [(None, 0, tuned)])
        self.assertGreater(summary[rk.IN_PLACE_CALLS]["memcpy_ratio"], summary[rk.IN_PLACE_CALLS]["incumbent_memcpy_ratio"])

    def test_a_tuned_in_place_kernel_that_loses_is_dropped(self):
        default, landscape = default_params(), Landscape()
        tuned = self.tuned(landscape)
        earlier = {**tuned, rk.IN_PLACE_CALLS: {"vector_pairs": 32}}  # an earlier run's, the schedule file has none
        self.assertEqual(rt.with_in_place_kernel(default, earlier, KEY, ISA, landscape.measure, {}), tuned)

    def test_calls_a_large_call_kernel_takes_are_left_out(self):
        default, landscape = default_params(), HugeInPlaceLandscape()
        tuned = self.tuned(landscape)
        seen = []

        def measure(pool, reps, stage, min_bytes=0, below_bytes=None, in_place=False):
            seen.append((below_bytes, in_place))
            return landscape.measure(pool, reps, stage, min_bytes, below_bytes, in_place)

        with_large = {**tuned, rk.LARGE_CALLS: {"from_bytes": 1 << 29, "vector_pairs": 16}}
        summary = {}
        self.assertIn(rk.IN_PLACE_CALLS, rt.with_in_place_kernel(default, with_large, KEY, ISA, measure, summary))
        self.assertEqual(set(seen), {(1 << 29, True)})
        self.assertEqual(summary[rk.IN_PLACE_CALLS]["shapes"], sorted(IN_PLACE_SHAPES))  # not the huge one
        # Every call in place as large as the large-call kernel's size: nothing to judge, nothing changes.
        with_large[rk.LARGE_CALLS]["from_bytes"] = 500
        self.assertIs(rt.with_in_place_kernel(default, with_large, KEY, ISA, measure, {}), with_large)


class KeysTest(unittest.TestCase):
    def test_filters(self):
        keys = rt.all_keys([rt.parse_key_filter("head_dim=128,dtype=bf16|f32")])
        self.assertEqual(len(keys), 2 * 2 * 3)
        self.assertEqual(keys[0], {"style": "half", "head_dim": 128, "dtype": "bf16", "source": "cache"})
        self.assertEqual(len(rt.all_keys([])), 72)

    def test_bad_filters_are_errors(self):
        for text in ("head_dim=96", "layout=bshd", "dtype", "dtype=f64"):
            with self.assertRaises(ValueError, msg=text):
                rt.parse_key_filter(text)


class HarnessOutputTest(unittest.TestCase):
    def test_medians_ratios_and_failures(self):
        lines = [
            '{"candidate": "c0", "verified": true, "failure": ""}',
            '{"candidate": "c1", "verified": false, "failure": "lane 3 off by 2 ulp"}',
            '{"candidate": "memcpy", "shape": "s", "layout": "bshd", "in_place": true, "bytes": 800, "ns": [10, 12, 11]}',
            '{"candidate": "c0", "shape": "s", "layout": "bshd", "in_place": true, "bytes": 800, "ns": [20, 24, 22, 90]}',
        ]
        results = rt.parse_harness_output(lines, in_place=True)
        self.assertEqual(results["c1"], "lane 3 off by 2 ulp")
        self.assertEqual(results["c0"].shapes["s"]["ns"], 23)  # median, not the minimum or the mean
        self.assertAlmostEqual(results["c0"].ratio("s"), 11 / 23)
        self.assertEqual(results["c0"].summary(results["c0"])["shapes"]["s"]["gbps"], round(800 / 23, 1))
        # A run of the calls out of place times none in place: the key's own kernel is judged on
        # the first, its in-place one (stage 5) on the second.
        with self.assertRaisesRegex(ValueError, "timed s .in_place True. in a run of the calls out of place"):
            rt.parse_harness_output(lines)
        # The workbench stops the tool there, naming the shape, rather than scoring a mix.
        bench = object.__new__(rt.Workbench)
        bench.harness, bench.isa = pathlib.Path("rope_tune_harness"), ISA
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt.Workbench, "build_all", lambda self, key, pool: [(pathlib.Path("c0.so"), "f")]), \
                mock.patch.object(rt.subprocess, "run", return_value=mock.Mock(returncode=0, stdout="\n".join(lines))):
            bench.cache = pathlib.Path(tmp)
            with self.assertRaisesRegex(SystemExit, "rope_tune: the harness timed s"):
                bench.measure(KEY, [default_params()], reps=1)


class FileTest(unittest.TestCase):
    META = {"machine": "test-machine", "cpu": "a test CPU", "method": "measured", "halide": "21.0.0",
            "ropegen": "0.1.0", "date": "2026-11-21", "command": "bench/tune/rope_tune.py --target x86-64-avx512"}

    def result(self, key, params):
        return {"key": key, "params": params, "measured": {"memcpy_ratio": 1.0, "default_memcpy_ratio": 0.9,
                                                            "speedup": 1.111, "changed": [], "shapes": {}}}

    def test_written_file_is_what_the_build_reads(self):
        default = default_params()
        tuned = best_params(default)
        other = {**KEY, "dtype": "f32"}
        results = {rt.key_id(other): self.result(other, rt.changed_params(default, default)),
                   rt.key_id(KEY): self.result(KEY, rt.changed_params(default, tuned))}
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            rt.write_json(path, rt.tuned_document(FAMILY, self.META, results))
            first = path.read_bytes()
            # Deterministic: the same results in another order give the same bytes.
            rt.write_json(path, rt.tuned_document(FAMILY, self.META, dict(reversed(list(results.items())))))
            self.assertEqual(first, path.read_bytes())
            entries = rk.load_tuned_file(path, FAMILY, "21.0.0", "0.1.0")
            self.assertEqual([e[1] for e in entries], [KEY, other])  # key order: bf16 before f32
            defaults = rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY)
            self.assertEqual(rt.canonical(rk.resolve(defaults, KEY, entries)), tuned)
            self.assertEqual(rt.canonical(rk.resolve(defaults, other, entries)), default_params(other))
            # A later run keeps the keys it does not tune.
            kept, commands = rt.existing_results(path, FAMILY, "21.0.0", "0.1.0", print)
            self.assertEqual(set(kept), set(results))
            self.assertEqual(commands, [self.META["command"]])

    def test_an_entry_holds_the_changed_knobs_only(self):
        layout = {"tokens_per_task": 8, "head_loop": "inside_tokens"}
        default = {"vector_pairs": 16, "unroll_pairs": 1, "layouts": {name: dict(layout) for name in rk.LAYOUTS}}
        tuned = rt.canonical(default)
        tuned["unroll_pairs"] = 2
        tuned["layouts"]["sbhd"]["tokens_per_task"] = 32
        self.assertEqual(rt.changed_params(default, tuned), {"unroll_pairs": 2, "layouts": {"sbhd": {"tokens_per_task": 32}}})
        self.assertEqual(rt.changed_knobs(default, tuned), ["sbhd_tokens_per_task=32", "unroll_pairs=2"])
        self.assertEqual(rt.changed_params(default, default), {})

    def test_commands_of_a_file_that_listed_only_its_last_run_come_first(self):
        results = {f"k{i}": {"measured": {"command": command}}
                   for i, command in enumerate(["full"] * 3 + ["retune b", "retune a", "last"])}
        self.assertEqual(rt.file_command([], "last", results), "full && retune a && retune b && last")

    def test_an_existing_bad_file_is_an_error_not_overwritten(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            path.parent.mkdir()
            path.write_text("{ not json")
            with self.assertRaises(rk.ScheduleError):
                rt.existing_results(path, FAMILY, "21.0.0", "0.1.0", print)
            self.assertEqual(path.read_text(), "{ not json")


class FakeWorkbench(rt.Workbench):
    """Stands in for the build tree in the resume test: synthetic timings, an interruption."""
    interrupt_after = None  # keys measured before a KeyboardInterrupt
    measure_calls = collections.Counter()  # per key id, in the order first measured
    broken = ()  # candidates that fail their check
    min_bytes_seen = set()  # the sizes of the shapes measurements were asked for
    landscape_class = Landscape  # the synthetic timings; a test may set another

    def __init__(self, build, family, isa, jobs, log):
        self.fingerprint = "fake"
        self.landscape = FakeWorkbench.landscape_class(broken=FakeWorkbench.broken)

    def machine(self):
        return {"slug": "test-machine", "cpu": "a test CPU"}

    def measure(self, key, pool, reps, min_bytes=0, below_bytes=None, in_place=False):
        calls = FakeWorkbench.measure_calls
        if rt.key_id(key) not in calls and len(calls) == FakeWorkbench.interrupt_after:
            raise KeyboardInterrupt
        calls[rt.key_id(key)] += 1
        FakeWorkbench.min_bytes_seen.add(min_bytes)
        return self.landscape.measure(pool, reps, "", min_bytes, below_bytes, in_place)


HALF_KEY = ["--keys", "head_dim=128,dtype=bf16,source=cache,style=half"]  # KEY as the tool's option


@contextlib.contextmanager
def fake_tool(landscape_class=Landscape):
    """The tool run on FakeWorkbench with `landscape_class`'s timings (a test may switch it),
    counters reset: yields a scratch folder and the mocked stdout."""
    with tempfile.TemporaryDirectory() as tmp, \
            mock.patch.object(rt, "Workbench", FakeWorkbench), \
            mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")), \
            mock.patch("sys.stdout") as stdout:
        FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
        FakeWorkbench.landscape_class = landscape_class
        try:
            yield tmp, stdout
        finally:
            FakeWorkbench.landscape_class = Landscape


class ResumeTest(unittest.TestCase):
    def test_an_interrupted_run_continues_where_it_stopped(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), \
                mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")):
            argv = ["--target", FAMILY, "--keys", "head_dim=128,dtype=bf16,source=cache", "--build", tmp,
                    "--out-dir", tmp]
            FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), 1
            with self.assertRaises(KeyboardInterrupt):
                rt.main(argv)
            self.assertEqual(list(FakeWorkbench.measure_calls), ["half/cache/d128/bf16"])
            FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
            with mock.patch("sys.stdout"):  # another budget: still the same search, resumed
                self.assertEqual(rt.main(argv + ["--budget", "1000"]), 0)
            # The finished key is not measured again; the interrupted one is, from its start.
            self.assertEqual(list(FakeWorkbench.measure_calls), ["interleaved/cache/d128/bf16"])
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            document = json.loads(out.read_text())
            self.assertEqual([e["match"]["style"] for e in document["kernels"]], ["half", "interleaved"])
            self.assertEqual(document["meta"]["tuned"]["method"], "measured")
            # The knobs the search changed, nothing it kept.
            self.assertEqual(document["kernels"][0]["params"], rt.changed_params(default_params(), best_params(default_params())))
            self.assertNotIn("cos_sin_at", document["kernels"][0]["params"])

    def test_a_stale_file_is_replaced_by_a_file_of_this_run(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), mock.patch("sys.stdout"), \
                mock.patch.object(rt.Progress, "write", autospec=True) as write:
            common = ["--target", FAMILY, "--build", tmp, "--out-dir", tmp, "--fresh"]
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            for halide, style in (("20.0.0", "half|interleaved"), ("21.0.0", "interleaved")):
                FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
                with mock.patch.object(rt, "versions", lambda build, halide=halide: (halide, "0.1.0")):
                    self.assertEqual(rt.main(common + ["--keys", f"head_dim=128,dtype=bf16,source=cache,style={style}"]), 0)
            document = json.loads(out.read_text())
            self.assertEqual(document["meta"]["tuned"]["halide"], "21.0.0")
            # Nothing kept from the stale file: its half-style entry and its command are gone.
            self.assertEqual([e["match"]["style"] for e in document["kernels"]], ["interleaved"])
            self.assertNotIn("&&", document["meta"]["tuned"]["command"])
            reported = "".join(call.args[1] for call in write.call_args_list)
            self.assertIn(f"{out} is stale (tuned with Halide 20.0.0, this build uses Halide 21.0.0)", reported)

    def test_a_malformed_file_is_an_error_before_any_measuring(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), \
                mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")):
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            out.parent.mkdir()
            out.write_text('{"format": "ropegen-schedule"}')
            FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
            with self.assertRaises(SystemExit) as caught:
                rt.main(["--target", FAMILY, "--keys", "head_dim=128,dtype=bf16,source=cache", "--build", tmp,
                         "--out-dir", tmp, "--fresh"])
            self.assertIn(f"{out}: missing key(s)", str(caught.exception))
            self.assertIn("does not overwrite a malformed file", str(caught.exception))
            self.assertEqual(FakeWorkbench.measure_calls, {})
            self.assertEqual(out.read_text(), '{"format": "ropegen-schedule"}')

    def test_compare_writes_its_machines_readme_section_only(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), \
                mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")), \
                mock.patch("sys.stdout"):
            argv = ["--target", FAMILY, "--keys", "head_dim=128,dtype=bf16,source=cache,style=half", "--build", tmp,
                    "--out-dir", tmp]
            FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
            self.assertEqual(rt.main(argv + ["--fresh"]), 0)
            readme = pathlib.Path(tmp) / "README.md"
            sections = {slug: (f"<!-- tune:{FAMILY}/{slug}:begin -->", f"<!-- tune:{FAMILY}/{slug}:end -->")
                        for slug in ("other-machine", "test-machine")}
            readme.write_text("".join(f"{begin}\nold table\n{end}\n" for begin, end in sections.values()))
            self.assertEqual(rt.main(argv + ["--compare", "--write-readme", str(readme)]), 0)
            text = readme.read_text()
            begin, end = sections["test-machine"]
            written = text[text.index(begin):text.index(end)]
            self.assertIn("| half/cache/d128/bf16 |", written)
            self.assertNotIn("old table", written)
            begin, end = sections["other-machine"]
            self.assertEqual(text[text.index(begin):text.index(end) + len(end)], f"{begin}\nold table\n{end}")

    def test_compare_times_a_large_call_kernel_against_its_sibling_on_its_calls(self):
        with fake_tool() as (tmp, stdout):
            argv = ["--target", FAMILY, *HALF_KEY, "--build", tmp, "--out-dir", tmp]
            self.assertEqual(rt.main(argv + ["--fresh", "--large-calls-from", "0"]), 0)
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            document = json.loads(out.read_text())
            document["kernels"][0]["params"][rk.LARGE_CALLS] = {"from_bytes": 1 << 29, "vector_pairs": 16}
            out.write_text(json.dumps(document))
            FakeWorkbench.min_bytes_seen, FakeWorkbench.landscape_class = set(), LargeLandscape
            self.assertEqual(rt.main(argv + ["--compare"]), 0)
            FakeWorkbench.landscape_class = Landscape  # no shape of a GiB below
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
            # Both rows: the key's own kernel against the default on the calls it serves (the
            # huge shape left out: 0.344 is the default's score without it), and the large-call
            # kernel against it on the huge shape alone.
            self.assertIn("| half/cache/d128/bf16, calls below 536870912 bytes | 0.344 |", printed)
            self.assertIn("| half/cache/d128/bf16, calls from 536870912 bytes (tuned: the large-call kernel) "
                          "| 0.3 | 0.45 | 1.500 | large_calls(536870912):vector_pairs=16 |", printed)
            self.assertEqual(FakeWorkbench.min_bytes_seen, {0, 1 << 29})
            # A key whose own kernel is the default's gets the large-call row alone; a size above
            # every timed shape is a row that says so.
            document["kernels"][0]["params"] = {rk.LARGE_CALLS: {"from_bytes": 2000, "vector_pairs": 8}}
            out.write_text(json.dumps(document))
            stdout.reset_mock()
            self.assertEqual(rt.main(argv + ["--compare"]), 0)
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
            self.assertNotIn("| half/cache/d128/bf16 |", printed)
            self.assertIn("| half/cache/d128/bf16, calls from 2000 bytes (tuned: the large-call kernel) "
                          "| no shape of that size | no shape of that size | - |", printed)
            self.assertIn("The other 0 keys kept the defaults.", printed)

    def test_an_in_place_kernel_is_written_and_compared_on_calls_in_place(self):
        with fake_tool(InPlaceLandscape) as (tmp, stdout):
            argv = ["--target", FAMILY, *HALF_KEY, "--build", tmp, "--out-dir", tmp]
            self.assertEqual(rt.main(argv + ["--fresh", "--large-calls-from", "0"]), 0)
            entry = json.loads((pathlib.Path(tmp) / FAMILY / "test-machine.json").read_text())["kernels"][0]
            self.assertEqual(entry["params"][rk.IN_PLACE_CALLS], IN_PLACE_ENTRY)
            self.assertEqual(entry["measured"][rk.IN_PLACE_CALLS]["shapes"], sorted(IN_PLACE_SHAPES))
            self.assertIn("in_place_calls:vector_pairs=16", entry["measured"]["changed"])
            stdout.reset_mock()
            self.assertEqual(rt.main(argv + ["--compare"]), 0)
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
            # The key's own kernel on its calls, out of place, and the in-place one against the
            # default's kernel on calls in place alone.
            defaults = rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY)
            tuned = rk.resolve(defaults, KEY, [("tuned file", KEY, entry["params"])])
            own_row = [rt.Measurement(InPlaceLandscape().shapes(params)).headline()
                       for params in (default_params(), rt.own_kernel(KEY, tuned))]
            self.assertIn(f"| half/cache/d128/bf16 | {own_row[0]} | {own_row[1]} |", printed)
            self.assertIn("| half/cache/d128/bf16, calls in place (tuned: the in-place kernel) | ", printed)
            # Its knobs: how the two kernels that serve calls in place differ.
            in_place_line = next(line for line in printed.splitlines() if "calls in place" in line)
            self.assertIn("| bhsd_tokens_per_task=8, ", in_place_line)  # the in-place class's
            self.assertIn("store_order=pair_vectors", in_place_line)  # the tuned own kernel's, which the class keeps
            self.assertNotIn("vector_pairs", in_place_line)  # the class's 16 is the default's

    def test_in_place_only_adds_in_place_kernels_to_the_machines_file(self):
        with fake_tool() as (tmp, _), mock.patch("sys.stderr"):
            base = ["--target", FAMILY, "--build", tmp, "--out-dir", tmp]
            in_place = ["--keys", "head_dim=128,dtype=bf16,source=cache", "--in-place-only"]
            with self.assertRaises(SystemExit):  # no file to add to
                rt.main(base + in_place)
            self.assertEqual(rt.main(base + HALF_KEY + ["--fresh", "--large-calls-from", "0"]), 0)  # no in-place kernel pays
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            before = json.loads(out.read_text())["kernels"][0]
            self.assertNotIn(rk.IN_PLACE_CALLS, before["params"])
            FakeWorkbench.landscape_class = InPlaceLandscape
            self.assertEqual(rt.main(base + in_place), 0)
            # Finished, though a key had no entry: a rerun starts afresh, not from a state.
            self.assertFalse((pathlib.Path(tmp) / "tune" / FAMILY / "test-machine.state.json").exists())
            document = json.loads(out.read_text())
            self.assertEqual(len(document["kernels"]), 1)  # the interleaved key had no entry: left out
            after = document["kernels"][0]
            # The key's own kernel is the file's; the in-place one is added, with its command.
            self.assertEqual({k: v for k, v in after["params"].items() if k != rk.IN_PLACE_CALLS}, before["params"])
            self.assertEqual(after["params"][rk.IN_PLACE_CALLS], IN_PLACE_ENTRY)
            self.assertEqual(after["measured"]["memcpy_ratio"], before["measured"]["memcpy_ratio"])
            in_place_command = "bench/tune/rope_tune.py " + " ".join(base + in_place)
            self.assertEqual(after["measured"][rk.IN_PLACE_CALLS]["command"], in_place_command)
            self.assertEqual(document["meta"]["tuned"]["command"].split(rt.COMMAND_SEPARATOR),
                             [before["measured"]["command"], in_place_command])
            defaults = rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY)
            resolved = rk.resolve(defaults, KEY, rk.load_tuned_file(out, FAMILY, "21.0.0", "0.1.0"))
            self.assertEqual(resolved[rk.IN_PLACE_CALLS], IN_PLACE_ENTRY)

    def test_large_calls_only_adds_large_call_kernels_to_the_machines_file(self):
        with fake_tool() as (tmp, _), mock.patch("sys.stderr"):
            base = ["--target", FAMILY, *HALF_KEY, "--build", tmp, "--out-dir", tmp]
            large = ["--large-calls-only", "--large-calls-from", str(1 << 29)]
            self.assertEqual(rt.main(base + ["--fresh", "--large-calls-from", "0"]), 0)  # stage 4 off
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            before = json.loads(out.read_text())["kernels"][0]
            self.assertNotIn(rk.LARGE_CALLS, before["params"])
            for refused in (["--large-calls-only", "--large-calls-from", "0"], large + ["--in-place-only"],
                            large + ["--full-sweep"]):
                with self.assertRaises(SystemExit):
                    rt.main(base + refused)
            FakeWorkbench.landscape_class, FakeWorkbench.min_bytes_seen = LargeLandscape, set()
            self.assertEqual(rt.main(base + large), 0)
            self.assertEqual(FakeWorkbench.min_bytes_seen, {1 << 29})  # the large shape alone was timed
            self.assertFalse((pathlib.Path(tmp) / "tune" / FAMILY / "test-machine.state.json").exists())
            document = json.loads(out.read_text())
            after = document["kernels"][0]
            # The key's own kernel is the file's; the large-call one is added, with its command.
            self.assertEqual({k: v for k, v in after["params"].items() if k != rk.LARGE_CALLS}, before["params"])
            entry = after["params"][rk.LARGE_CALLS]
            self.assertEqual((entry["from_bytes"], entry["vector_pairs"]), (1 << 29, 16))
            self.assertEqual(after["measured"]["memcpy_ratio"], before["measured"]["memcpy_ratio"])
            self.assertEqual(after["measured"][rk.LARGE_CALLS]["shapes"], ["prefill_huge"])
            self.assertIn("large_calls(536870912):vector_pairs=16", after["measured"]["changed"])
            large_command = "bench/tune/rope_tune.py " + " ".join(base + large)
            self.assertEqual(after["measured"][rk.LARGE_CALLS]["command"], large_command)
            self.assertEqual(document["meta"]["tuned"]["command"].split(rt.COMMAND_SEPARATOR),
                             [before["measured"]["command"], large_command])
            # A key with a large-call kernel keeps it: nothing is timed.
            FakeWorkbench.measure_calls = collections.Counter()
            self.assertEqual(rt.main(base + large + ["--large-calls-from", str(1 << 28)]), 0)
            self.assertEqual(FakeWorkbench.measure_calls, {})
            self.assertEqual(json.loads(out.read_text())["kernels"][0]["params"], after["params"])

    def test_compare_times_the_schedule_files_in_place_kernel_over_each_side(self):
        # The AVX-512 file gives this key an in-place kernel; the tuned file does not set one.
        key = {**KEY, "style": "interleaved", "dtype": "f32"}
        with fake_tool() as (tmp, stdout):
            argv = ["--target", FAMILY, "--keys", "style=interleaved,head_dim=128,dtype=f32,source=cache",
                    "--build", tmp, "--out-dir", tmp]
            self.assertEqual(rt.main(argv + ["--fresh", "--large-calls-from", "0"]), 0)
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            entry = json.loads(out.read_text())["kernels"][0]
            self.assertNotIn(rk.IN_PLACE_CALLS, entry["params"])
            stdout.reset_mock()
            self.assertEqual(rt.main(argv + ["--compare"]), 0)
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
            # The own row on the calls out of place; the calls in place get the file's in-place
            # kernel over the default kernel against the same over the tuned one.
            defaults = rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY)
            tuned = rt.canonical(rk.resolve(defaults, key, [("tuned file", key, entry["params"])]))
            landscape = Landscape()
            own_row = [rt.Measurement(landscape.shapes(rt.own_kernel(key, params))).headline()
                       for params in (default_params(key), tuned)]
            self.assertIn(f"| interleaved/cache/d128/f32 | {own_row[0]} | {own_row[1]} |", printed)
            in_place_row = [rt.Measurement(landscape.shapes(rt.in_place_kernel(key, params), in_place=True)).headline()
                            for params in (default_params(key), tuned)]
            self.assertIn(f"| interleaved/cache/d128/f32, calls in place (tuned: the in-place kernel) | {in_place_row[0]} | "
                          f"{in_place_row[1]} |", printed)
            # Its knobs: the tuned own kernel's that the file's class leaves (vector_pairs), not
            # those the class sets on both sides (unroll_pairs 4).
            in_place_line = next(line for line in printed.splitlines() if "calls in place" in line)
            self.assertIn("vector_pairs=8 |", in_place_line)
            self.assertNotIn("unroll_pairs", in_place_line)

    def test_a_key_whose_own_kernel_changed_gets_a_row_of_calls_in_place(self):
        # No in-place kernel on either side: the calls in place run the key's own kernel, the
        # default's against the tuned one, each judged in place alone.
        with fake_tool() as (tmp, stdout):
            argv = ["--target", FAMILY, *HALF_KEY, "--build", tmp, "--out-dir", tmp]
            self.assertEqual(rt.main(argv + ["--fresh", "--large-calls-from", "0"]), 0)
            entry = json.loads((pathlib.Path(tmp) / FAMILY / "test-machine.json").read_text())["kernels"][0]
            self.assertNotIn(rk.IN_PLACE_CALLS, entry["params"])
            self.assertEqual(sorted(entry["measured"]["shapes"]), sorted(SHAPES))  # out of place alone
            stdout.reset_mock()
            self.assertEqual(rt.main(argv + ["--compare"]), 0)
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
        defaults = rk.load_schedule_file(rt.ROOT / "schedules" / f"{FAMILY}.json", FAMILY)
        tuned = rt.canonical(rk.resolve(defaults, KEY, [("tuned file", KEY, entry["params"])]))
        in_place_row = [rt.Measurement(Landscape().shapes(params, in_place=True)).headline()
                        for params in (default_params(), rt.own_kernel(KEY, tuned))]
        self.assertIn(f"| half/cache/d128/bf16, calls in place (tuned: its own kernel) | {in_place_row[0]} | "
                      f"{in_place_row[1]} | ", printed)
        self.assertIn("| bhsd_tokens_per_task=32, ", printed.split("calls in place")[1])  # the own kernel's knobs

    def test_a_one_stage_run_stopped_by_its_budget_goes_on_from_its_file(self):
        with fake_tool() as (tmp, _), mock.patch("sys.stderr"):
            base = ["--target", FAMILY, "--keys", "head_dim=128,dtype=bf16,source=cache", "--build", tmp, "--out-dir", tmp]
            self.assertEqual(rt.main(base + ["--fresh", "--large-calls-from", "0"]), 0)  # both styles, no in-place kernel
            FakeWorkbench.landscape_class, FakeWorkbench.measure_calls = InPlaceLandscape, collections.Counter()
            with mock.patch.object(rt.Progress, "elapsed", lambda progress: 1e9 if progress.done else 0.0):
                self.assertEqual(rt.main(base + ["--in-place-only"]), 0)  # the budget is spent after the first key
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            self.assertEqual([rk.IN_PLACE_CALLS in e["params"] for e in json.loads(out.read_text())["kernels"]],
                             [True, False])
            # The rerun goes on with the second key: the first, whose in-place kernel the file now
            # holds, would be searched again from a fresh start.
            FakeWorkbench.measure_calls = collections.Counter()
            self.assertEqual(rt.main(base + ["--in-place-only"]), 0)
            self.assertEqual(list(FakeWorkbench.measure_calls), ["interleaved/cache/d128/bf16"])
            document = json.loads(out.read_text())
            self.assertEqual([rk.IN_PLACE_CALLS in e["params"] for e in document["kernels"]], [True, True])
            self.assertEqual(len(document["meta"]["tuned"]["command"].split(rt.COMMAND_SEPARATOR)), 2)

    def test_the_file_names_every_command_that_wrote_it_in_order(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), \
                mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")), \
                mock.patch("sys.stdout"):
            common = ["--target", FAMILY, "--build", tmp, "--out-dir", tmp, "--fresh"]
            runs = [["--keys", "head_dim=128,dtype=bf16,source=cache"],  # both styles
                    ["--keys", "head_dim=128,dtype=bf16,source=cache,style=interleaved"],
                    ["--keys", "head_dim=128,dtype=bf16,source=cache,style=half"]]
            first, second, third = (f"bench/tune/rope_tune.py {' '.join(common + run)}" for run in runs)
            # The third run retunes the last key the first had written: the first drops out.
            expected = [first, f"{first} && {second}", f"{second} && {third}"]
            out = pathlib.Path(tmp) / FAMILY / "test-machine.json"
            for run, command in zip(runs, expected):
                FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
                self.assertEqual(rt.main(common + run), 0)
                self.assertEqual(json.loads(out.read_text())["meta"]["tuned"]["command"], command)

    def test_compare_fails_on_a_tuned_schedule_that_fails_its_check(self):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(rt, "Workbench", FakeWorkbench), \
                mock.patch.object(rt, "versions", lambda build: ("21.0.0", "0.1.0")), \
                mock.patch("sys.stdout") as stdout, mock.patch("sys.stderr") as stderr:
            argv = ["--target", FAMILY, "--keys", "head_dim=128,dtype=bf16,source=cache,style=half", "--build", tmp,
                    "--out-dir", tmp]
            FakeWorkbench.measure_calls, FakeWorkbench.interrupt_after = collections.Counter(), None
            self.assertEqual(rt.main(argv + ["--fresh"]), 0)
            readme = pathlib.Path(tmp) / "README.md"
            readme.write_text("untouched\n")
            try:  # the tuned schedule, which the build of this tuned file would use, now fails
                FakeWorkbench.broken = [best_params(default_params())]
                self.assertEqual(rt.main(argv + ["--compare", "--write-readme", str(readme)]), 1)
            finally:
                FakeWorkbench.broken = ()
            printed = "".join(call.args[0] for call in stdout.write.call_args_list)
            self.assertIn("| half/cache/d128/bf16 | 0.344 | fails its check | - |", printed)
            reported = "".join(call.args[0] for call in stderr.write.call_args_list)
            self.assertIn("fail their check on this build: half/cache/d128/bf16", reported)
            self.assertIn(f"--target {FAMILY} --keys style=half,head_dim=128,dtype=bf16,source=cache", reported)
            self.assertEqual(readme.read_text(), "untouched\n")


if __name__ == "__main__":
    unittest.main()
