# SPDX-License-Identifier: Apache-2.0
"""The Python binding (python/ropegen, ctypes over libropegen.so): numpy arrays and torch tensors
passed without copies, results against an fp64 reference of spec §2, the library's validation as
RopeError, the cache builder (ctest label "python")."""
import gc
import os
import subprocess
import sys
import unittest
import weakref

import numpy as np
import torch

import ropegen


def reference_half(x, positions, base=10000.0, attn_factor=1.0, mrope_section=None):
    """Half-style forward RoPE in fp64 (spec §1-§2, §6 mrope): x [batch, seq, heads, D], positions
    [batch, seq], or with mrope_section [3, batch, seq] streams, pair i taking the stream whose section holds it."""
    x = np.asarray(x, dtype=np.float64)
    pairs = x.shape[-1] // 2
    inv_freq = base ** (-np.arange(pairs) * 2.0 / x.shape[-1])
    if mrope_section is None:
        pair_positions = positions[..., None]
    else:
        pair_positions = np.moveaxis(positions, 0, -1)[..., np.repeat(np.arange(3), mrope_section)]
    angle = pair_positions.astype(np.float64) * inv_freq  # [batch, seq, pairs]
    c, s = attn_factor * np.cos(angle)[:, :, None], attn_factor * np.sin(angle)[:, :, None]
    a, b = x[..., :pairs], x[..., pairs:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


class Binding(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(5)

    def test_numpy_in_place_matches_the_reference(self):
        q = self.rng.uniform(-1, 1, (2, 5, 3, 64)).astype(np.float32)
        before, address = q.copy(), q.__array_interface__["data"][0]
        positions = np.arange(10, dtype=np.int64).reshape(2, 5) * 37
        kernel = ropegen.rope(q, positions=positions, source="precise")
        self.assertIn("precise_d64_f32", kernel)
        self.assertEqual(q.__array_interface__["data"][0], address)
        np.testing.assert_allclose(q, reference_half(before, positions), atol=2e-6, rtol=0)

    def test_numpy_strided_views_and_offsets(self):
        # BHSD memory seen as [batch, seq, heads, D]; q and k views into one packed buffer.
        packed = self.rng.uniform(-1, 1, (2, 6, 4, 32)).astype(np.float32)  # [batch, 3 q + 3 k heads, seq, D]
        q, k = packed[:, :3].transpose(0, 2, 1, 3), packed[:, 3:].transpose(0, 2, 1, 3)
        before = packed.copy()
        offsets = np.array([0, 100], dtype=np.int32)
        ropegen.rope(q, k, positions=offsets, source="precise")
        positions = np.arange(4)[None, :] + offsets[:, None]
        want_q = reference_half(before[:, :3].transpose(0, 2, 1, 3), positions)
        want_k = reference_half(before[:, 3:].transpose(0, 2, 1, 3), positions)
        np.testing.assert_allclose(q, want_q, atol=2e-6, rtol=0)
        np.testing.assert_allclose(k, want_k, atol=2e-6, rtol=0)

    def test_torch_bf16_transposed_view_is_not_copied(self):
        q = torch.from_numpy(self.rng.uniform(-1, 1, (1, 8, 16, 128)).astype(np.float32)).to(torch.bfloat16)  # BHSD
        out = torch.empty_like(q)
        positions = torch.arange(16, dtype=torch.int32)[None]
        ropegen.rope(q.transpose(1, 2), q_out=out.transpose(1, 2), positions=positions, source="compat")
        want = reference_half(q.transpose(1, 2).float().numpy(), positions.numpy().astype(np.int64))
        got = out.transpose(1, 2).float().numpy()
        np.testing.assert_allclose(got, want, atol=2 ** -7, rtol=2 ** -7)

    def test_errors_are_exceptions_and_touch_nothing(self):
        q = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        before = q.copy()
        llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192}
        cases = [(dict(rotary_dim=65), "ROPE_ERR_BAD_ROTARY", "rotary_dim=65"),
                 (dict(positions=np.array([[0, 1, -3, 2]], dtype=np.int64)), "ROPE_ERR_POSITION_OUT_OF_RANGE", "-3"),
                 (dict(scaling=llama3), "ROPE_ERR_BAD_VALUE", "high_freq_factor"),
                 (dict(k=q.astype(np.float64)), "ROPE_ERR_DTYPE_MISMATCH", "k.dtype=float64"),
                 (dict(k_out=np.zeros_like(q)), "ROPE_ERR_NULL_POINTER", "k is None but k_out is given")]
        for arguments, status, message in cases:
            with self.subTest(status):
                with self.assertRaises(ropegen.RopeError) as raised:
                    ropegen.rope(q, **arguments)  # in place: q is the output the refusal must not touch
                self.assertEqual(raised.exception.status, status)
                self.assertIn(message, str(raised.exception))
                np.testing.assert_array_equal(q, before)

    def test_gpt_neox_fused_qkv_rotates_q_and_k_in_place(self):
        # GPT-NeoX's fused projection [batch, seq, heads, 3 * D]: q, k and v are lane slices of every
        # head, interleaved within each token; v stays as it was.
        qkv = torch.from_numpy(self.rng.uniform(-1, 1, (2, 5, 4, 3 * 64)).astype(np.float32))
        before = qkv.numpy().copy()
        q, k = qkv[..., :64], qkv[..., 64:128]
        positions = torch.arange(10, dtype=torch.int64).reshape(2, 5) * 3
        ropegen.rope(q, k, positions=positions, source="precise")
        for part in (0, 1):
            want = reference_half(before[..., part * 64:(part + 1) * 64], positions.numpy())
            np.testing.assert_allclose(qkv.numpy()[..., part * 64:(part + 1) * 64], want, atol=2e-6, rtol=0)
        np.testing.assert_array_equal(qkv.numpy()[..., 128:], before[..., 128:])

    def test_attn_factor_scales_cos_and_sin(self):
        q = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        before = q.copy()
        positions = np.array([[0, 5, 77, 1000]], np.int64)
        ropegen.rope(q, positions=positions, attn_factor=0.5, source="precise")
        np.testing.assert_allclose(q, reference_half(before, positions, attn_factor=0.5), atol=2e-6, rtol=0)

    def test_thd_packed_sequences_equal_each_alone(self):
        cu_seqlens = np.array([0, 3, 3, 10, 11], dtype=np.int32)
        packed = self.rng.uniform(-1, 1, (11, 2, 64)).astype(np.float32)  # [total_tokens, heads, D]
        alone = packed.copy()
        offsets = np.array([5, 0, 4000, 9], dtype=np.int64)
        scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1000}
        ropegen.rope(packed, positions=offsets, cu_seqlens=cu_seqlens, scaling=scaling)
        for b in range(4):
            first, last = cu_seqlens[b], cu_seqlens[b + 1]
            if last > first:
                ropegen.rope(alone[first:last], offset=int(offsets[b]), scaling=scaling)
        np.testing.assert_array_equal(packed, alone)

    def test_positions_shape_must_fit_q(self):
        # (positions shape, q shape, mrope_section): arrays smaller than q's [batch, seq] the library would read past.
        cases = [((1, 1), (1, 1 << 22, 1, 2), None), ((1,), (4, 1, 1, 64), None), ((1, 2), (2, 4, 1, 64), None),
                 ((2, 4), (2, 5, 1, 64), None), ((3, 1, 1), (2, 4, 2, 64), [8, 12, 12]), ((2,), (2, 4, 2, 64), [8, 12, 12])]
        for shape, q_shape, mrope_section in cases:
            with self.subTest(positions=shape, q=q_shape):
                q = np.ones(q_shape, np.float32)
                with self.assertRaises(ropegen.RopeError) as raised:
                    ropegen.rope(q, positions=np.zeros(shape, np.int64), mrope_section=mrope_section)
                self.assertEqual(raised.exception.status, "ROPE_ERR_BAD_SHAPE")
                self.assertIn(f"positions.shape={shape}", str(raised.exception))
                self.assertIn("expected", str(raised.exception))
                self.assertTrue((q == 1).all())

    def test_one_sequence_positions_as_a_1d_table(self):
        q = self.rng.uniform(-1, 1, (5, 2, 64)).astype(np.float32)  # [seq, heads, D]
        table = q.copy()
        positions = np.array([3, 9, 1, 400, 2], np.int64)
        ropegen.rope(q, positions=positions, source="precise")
        ropegen.rope(table, positions=positions[None], source="precise")
        np.testing.assert_array_equal(q, table)

    def test_one_row_of_positions_serves_every_sequence(self):
        # transformers' default position_ids is [1, seq] for any batch, with mrope [3, 1, seq].
        q = self.rng.uniform(-1, 1, (3, 5, 2, 64)).astype(np.float32)
        shared = q.copy()
        positions = np.array([[3, 9, 1, 400, 2]], np.int64)
        ropegen.rope(q, positions=np.repeat(positions, 3, axis=0), source="precise")
        ropegen.rope(shared, positions=positions, source="precise")
        np.testing.assert_array_equal(q, shared)
        streams = np.stack([positions, positions + 7, positions * 2])  # [3, 1, seq]
        q = self.rng.uniform(-1, 1, (3, 5, 2, 64)).astype(np.float32)
        shared = q.copy()
        ropegen.rope(q, positions=np.repeat(streams, 3, axis=1), mrope_section=[8, 12, 12], source="compat")
        ropegen.rope(shared, positions=streams, mrope_section=[8, 12, 12], source="compat")
        np.testing.assert_array_equal(q, shared)

    def test_thd_positions_kind_when_num_seqs_equals_total_tokens(self):
        cu_seqlens = np.array([0, 0, 2], np.int32)  # two sequences, two tokens: [2] is a table or offsets
        positions = np.array([5, 100], np.int64)
        packed = self.rng.uniform(-1, 1, (2, 1, 64)).astype(np.float32)
        before = packed.copy()
        with self.assertRaises(ropegen.RopeError) as raised:
            ropegen.rope(packed, positions=positions, cu_seqlens=cu_seqlens, source="precise")
        self.assertIn("positions_kind", str(raised.exception))
        np.testing.assert_array_equal(packed, before)
        as_offsets, alone = packed.copy(), packed.copy()
        ropegen.rope(as_offsets, positions=positions, cu_seqlens=cu_seqlens, positions_kind="offsets", source="precise")
        ropegen.rope(alone, offset=100, source="precise")  # sequence 1 is tokens 0 and 1, from offset 100
        np.testing.assert_array_equal(as_offsets, alone)
        ropegen.rope(packed, positions=positions, cu_seqlens=cu_seqlens, positions_kind="table", source="precise")
        np.testing.assert_allclose(packed, reference_half(before[None], positions[None])[0], atol=2e-6, rtol=0)
        with self.assertRaises(ropegen.RopeError):
            ropegen.rope(packed, positions=positions[:1], cu_seqlens=cu_seqlens, positions_kind="table")
        # One token per sequence: both readings agree, so rope() infers; prepare() cannot rely on cu_seqlens.
        one_each = np.array([0, 1, 2], np.int32)
        inferred, table = before.copy(), before.copy()
        ropegen.rope(inferred, positions=positions, cu_seqlens=one_each, source="precise")
        ropegen.rope(table, positions=positions, cu_seqlens=one_each, positions_kind="table", source="precise")
        np.testing.assert_array_equal(inferred, table)
        with self.assertRaises(ropegen.RopeError):
            ropegen.prepare(before, positions=positions, cu_seqlens=one_each)

    def test_mrope_numpy_streams(self):
        # Three different streams, so a wrong section or stream stride moves some pair's angle.
        mrope_section = [8, 12, 12]
        streams = self.rng.integers(0, 5000, (3, 2, 4))
        layouts = {"[3, batch, seq] contiguous": streams.copy(),
                   "[batch, seq, 3] memory (stream stride 1)": np.ascontiguousarray(streams.transpose(1, 2, 0)).transpose(2, 0, 1)}
        for layout, positions in layouts.items():
            with self.subTest(layout):
                q = self.rng.uniform(-1, 1, (2, 4, 2, 64)).astype(np.float32)
                want = reference_half(q, streams, mrope_section=mrope_section)
                ropegen.rope(q, positions=positions, mrope_section=mrope_section, source="precise")
                np.testing.assert_allclose(q, want, atol=2e-6, rtol=0)

    def test_prepared_call_reads_the_arrays_anew_at_every_call(self):
        q = self.rng.uniform(-1, 1, (3, 1, 4, 64)).astype(np.float32)
        k = self.rng.uniform(-1, 1, (3, 1, 2, 64)).astype(np.float32)
        q_out, k_out = np.full_like(q, np.nan), np.full_like(k, np.nan)
        positions = np.array([[7], [900], [31]], dtype=np.int64)
        prepared = ropegen.prepare(q, k, q_out=q_out, k_out=k_out, positions=positions, source="precise")
        self.assertIn("precise_d64_f32", prepared.kernel)
        self.assertTrue(np.isnan(q_out).all() and np.isnan(k_out).all())  # preparing runs nothing
        for step in range(3):  # a decode loop: new inputs and positions in the same arrays
            q[...] = self.rng.uniform(-1, 1, q.shape)
            k[...] = self.rng.uniform(-1, 1, k.shape)
            positions += 1 + step
            prepared()
            np.testing.assert_allclose(q_out, reference_half(q, positions), atol=2e-6, rtol=0)
            np.testing.assert_allclose(k_out, reference_half(k, positions), atol=2e-6, rtol=0)
            want_q, want_k = np.empty_like(q), np.empty_like(k)
            ropegen.rope(q, k, q_out=want_q, k_out=want_k, positions=positions, source="precise")
            np.testing.assert_array_equal(q_out, want_q)
            np.testing.assert_array_equal(k_out, want_k)

    def test_prepared_call_validates_at_prepare_and_at_every_call(self):
        q = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        with self.assertRaises(ropegen.RopeError) as raised:
            ropegen.prepare(q, rotary_dim=65)
        self.assertEqual(raised.exception.status, "ROPE_ERR_BAD_ROTARY")
        cos, sin = np.zeros((16, 32), np.float32), np.zeros((16, 32), np.float32)
        ropegen.build_cos_sin_cache(cos, sin, rotary_dim=64)
        positions = np.arange(4, dtype=np.int32)[None]
        q_out = np.zeros_like(q)
        prepared = ropegen.prepare(q, q_out=q_out, positions=positions, source="cache", cos_cache=cos, sin_cache=sin)
        positions[0, 2] = 16  # past the table: refused by the call, which writes nothing
        with self.assertRaises(ropegen.RopeError) as raised:
            prepared()
        self.assertEqual(raised.exception.status, "ROPE_ERR_POSITION_OUT_OF_RANGE")
        np.testing.assert_array_equal(q_out, 0)
        positions[0, 2] = 15
        prepared()
        self.assertFalse(np.array_equal(q_out, 0))

    def test_prepared_call_keeps_its_arrays_alive(self):
        q = self.rng.uniform(-1, 1, (1, 2, 2, 64)).astype(np.float32)
        source, out = q.copy(), np.zeros_like(q)
        source_alive = weakref.ref(source)
        prepared = ropegen.prepare(source, q_out=out, offset=3, source="precise")
        del source
        gc.collect()
        self.assertIsNotNone(source_alive())
        prepared()
        np.testing.assert_allclose(out, reference_half(q, np.array([[3, 4]])), atol=2e-6, rtol=0)

    def test_query_names_the_kernel_and_runs_nothing(self):
        q = self.rng.uniform(-1, 1, (1, 4, 2, 80)).astype(np.float32)
        before = q.copy()
        self.assertIn("dany", ropegen.query(q, style="interleaved"))
        np.testing.assert_array_equal(q, before)

    def test_cache_builder_feeds_the_cache_source(self):
        for dtype in (np.float32, np.float16):
            with self.subTest(dtype=dtype.__name__):
                scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
                cos, sin = np.zeros((200, 40), dtype), np.zeros((200, 40), dtype)
                ropegen.build_cos_sin_cache(cos, sin, rotary_dim=64, scaling=scaling)
                x = self.rng.uniform(-1, 1, (1, 200, 2, 64)).astype(dtype)
                computed, cached = x.copy(), x.copy()
                ropegen.rope(computed, scaling=scaling, round_cos_sin=True)
                ropegen.rope(cached, source="cache", cos_cache=cos[:, :32], sin_cache=sin[:, :32])
                np.testing.assert_array_equal(computed, cached)


    def test_cache_tables_the_library_would_read_past_are_refused(self):
        row, wide = np.ones(32, np.float32), np.ones((16, 64), np.float32)
        good = np.ones((16, 32), np.float32)
        cases = {"broadcast rows (row stride 0)": (np.broadcast_to(row, (16, 32)), np.broadcast_to(row, (16, 32))),
                 "rows narrower than rotary_dim/2": (wide[:, :8], wide[:, 8:16]),
                 "sin shorter than cos": (good, good[:1]),
                 "sin of another dtype": (good, good.astype(np.float16)),
                 "sin of other strides": (good, wide[:, :32]),
                 "column stride 2": (wide[:, ::2], wide[:, 1::2]),
                 "1-D tables": (row, row)}
        for case, (cos, sin) in cases.items():
            with self.subTest(case):
                q = np.ones((1, 1, 1, 64), np.float32)
                with self.assertRaises(ropegen.RopeError) as raised:
                    ropegen.rope(q, positions=np.array([[15]]), source="cache", cos_cache=cos, sin_cache=sin)
                self.assertIn(raised.exception.status, ("ROPE_ERR_BAD_SHAPE", "ROPE_ERR_BAD_STRIDE"))
                self.assertRegex(str(raised.exception), "(cos|sin)_cache")
                self.assertTrue((q == 1).all())

    def test_cache_builder_refuses_tables_it_would_write_past(self):
        parent = torch.full((1 << 12,), -1.0)
        expanded = parent[:32].expand(64, 32)  # writable, row stride 0
        columns = np.full((16, 40), -1, np.float32)
        other = np.full((16, 40), -1, np.float32)
        read_only = np.zeros((16, 32), np.float32)
        read_only.flags.writeable = False
        cases = {"expanded (row stride 0)": (expanded, parent[64:96].expand(64, 32), ropegen.RopeError),
                 "8 columns of 32": (columns[:, :8], other[:, :8], ropegen.RopeError),
                 "read-only": (read_only, np.zeros((16, 32), np.float32), ValueError),
                 "one array for both": (other[:, :32], other[:, :32], ropegen.RopeError)}
        for case, (cos, sin, error) in cases.items():
            with self.subTest(case):
                with self.assertRaises(error):
                    ropegen.build_cos_sin_cache(cos, sin, rotary_dim=64)
        self.assertTrue((parent == -1).all() and (columns == -1).all() and (other == -1).all())


    def test_big_endian_arrays_are_refused(self):
        import ml_dtypes
        x = self.rng.uniform(-1, 1, (1, 4, 1, 64)).astype(np.float32)
        cos, sin = np.ones((8, 32), np.float32), np.zeros((8, 32), np.float32)
        positions = np.arange(4, dtype=np.int64)[None]
        for dtype in (np.dtype(">f4"), np.dtype(">f2"), np.dtype(ml_dtypes.bfloat16).newbyteorder(">")):
            swapped = x.astype(dtype)
            cases = {"q": dict(q=swapped), "k": dict(q=x.astype(dtype.newbyteorder("<")), k=swapped)}
            for name, arguments in cases.items():
                with self.subTest(dtype=str(dtype), array=name):
                    before = swapped.copy()
                    with self.assertRaises(ropegen.RopeError) as raised:
                        ropegen.rope(**arguments)
                    self.assertIn(f"{name}.dtype=>", str(raised.exception))
                    np.testing.assert_array_equal(swapped, before)
        cases = {"q_out": dict(q_out=np.zeros_like(x).astype(">f4")),
                 "cos_cache": dict(source="cache", cos_cache=cos.astype(">f4"), sin_cache=sin.astype(">f4")),
                 "positions": dict(positions=positions.astype(">i8"))}
        for name, arguments in cases.items():
            with self.subTest(array=name):
                with self.assertRaisesRegex(ropegen.RopeError, f"{name}.dtype=>.*big-endian"):
                    ropegen.rope(x.copy(), **arguments)
        with self.assertRaisesRegex(ropegen.RopeError, "cos.dtype=>f4 is big-endian"):
            ropegen.build_cos_sin_cache(cos.astype(">f4"), sin.astype(">f4"), rotary_dim=64)


    def test_scaling_reads_rope_theta_and_attention_factor_like_the_arguments(self):
        x = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        positions = np.array([[1, 70, 3000, 9]], np.int64)

        def rotated(**arguments):
            y = x.copy()
            ropegen.rope(y, positions=positions, **arguments)
            return y

        np.testing.assert_array_equal(rotated(scaling={"rope_type": "default", "rope_theta": 500000.0}),
                                      rotated(base=500000.0))
        self.assertFalse(np.array_equal(rotated(base=500000.0), rotated()))
        np.testing.assert_array_equal(rotated(scaling={"rope_theta": 500000.0}, base=500000.0), rotated(base=500000.0))
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
        np.testing.assert_array_equal(rotated(scaling=dict(yarn, attention_factor=0.5)),
                                      rotated(scaling=yarn, attn_factor=0.5))
        self.assertFalse(np.array_equal(rotated(scaling=dict(yarn, attention_factor=0.5)), rotated(scaling=yarn)))
        refused = {"base=10000.0": dict(base=10000.0, scaling={"rope_theta": 500000.0}),
                   "attn_factor=0.25": dict(attn_factor=0.25, scaling=dict(yarn, attention_factor=0.5)),
                   "'partial_rotary_factor'": dict(scaling={"rope_type": "default", "partial_rotary_factor": 0.5}),
                   "'facter'": dict(scaling={"rope_type": "linear", "facter": 2.0})}
        for message, arguments in refused.items():
            with self.subTest(message):
                y = x.copy()
                with self.assertRaises(ropegen.RopeError) as raised:
                    ropegen.rope(y, **arguments)
                self.assertIn(message, str(raised.exception))
                np.testing.assert_array_equal(y, x)

    def test_dynamic_grows_from_max_position_embeddings_as_transformers_does(self):
        x = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        from_max, from_original, unscaled = x.copy(), x.copy(), x.copy()
        positions = np.array([[1, 70, 300, 9]], np.int64)  # longer than 64: a larger base
        ropegen.rope(from_max, positions=positions, scaling={"rope_type": "dynamic", "factor": 2.0,
                                                             "max_position_embeddings": 64})
        ropegen.rope(from_original, positions=positions, scaling={"rope_type": "dynamic", "factor": 2.0,
                                                                  "original_max_position_embeddings": 64})
        ropegen.rope(unscaled, positions=positions)
        np.testing.assert_array_equal(from_max, from_original)
        self.assertFalse(np.array_equal(from_max, unscaled))


    def test_torch_outputs_requiring_grad_are_refused_in_grad_mode(self):
        x = torch.randn(1, 4, 1, 64, requires_grad=True)
        q = x.exp()  # exp saves its output for backward: an untracked write would corrupt x.grad
        before = q.detach().clone()
        cases = {"q": dict(q=q), "q_out": dict(q=x.detach(), q_out=q),
                 "k_out": dict(q=x.detach(), k=x.detach(), q_out=torch.empty(1, 4, 1, 64), k_out=q)}
        for name, arguments in cases.items():
            with self.subTest(name):
                with self.assertRaisesRegex(RuntimeError, f"^{name} requires grad"):
                    ropegen.rope(**arguments)
        self.assertTrue(torch.equal(q.detach(), before))
        with torch.no_grad():  # what an engine does at inference: allowed
            ropegen.rope(q)
        self.assertFalse(torch.equal(q.detach(), before))


    def test_torch_writes_bump_the_version_so_backward_refuses_what_it_saved_before(self):
        # torch's own in-place operations do this under no_grad too; without it the backward pass
        # below would take the rotated values for exp's saved output and return a wrong x.grad.
        writes = {"q in place": lambda q: ropegen.rope(q),
                  "q_out": lambda q: ropegen.rope(q.detach().clone(), q_out=q),
                  "k in place": lambda q: ropegen.rope(torch.zeros(1, 4, 1, 64), q),
                  "k_out": lambda q: ropegen.rope(torch.zeros(1, 4, 1, 64), q.detach().clone(),
                                                  q_out=torch.empty(1, 4, 1, 64), k_out=q),
                  "prepared": lambda q: ropegen.prepare(q)(),
                  "cos table": lambda q: ropegen.build_cos_sin_cache(q[0, :, 0, :], torch.empty(4, 64), rotary_dim=128)}
        for name, write in writes.items():
            with self.subTest(name):
                x = torch.randn(1, 4, 1, 64, requires_grad=True)
                q = x.exp()  # saves its output for backward
                with torch.no_grad():
                    write(q)
                with self.assertRaisesRegex(RuntimeError, "modified by an inplace operation"):
                    q.sum().backward()


    def test_empty_torch_tensors_work_like_numpy_empties(self):
        q = torch.rand(1, 4, 2, 64)
        before = q.clone()
        empty_k = torch.empty(1, 4, 0, 64)
        self.assertEqual(empty_k.data_ptr(), 0)
        ropegen.rope(q, empty_k, source="precise")  # batch, seq and heads may be 0
        want = reference_half(before.numpy(), np.arange(4)[None])
        np.testing.assert_allclose(q.numpy(), want, atol=2e-6, rtol=0)
        for shape in ((0, 4, 2, 64), (2, 0, 2, 64)):
            with self.subTest(shape=shape):
                ropegen.rope(torch.empty(shape), torch.empty(shape), q_out=torch.empty(shape), k_out=torch.empty(shape),
                             positions=torch.empty(shape[:2], dtype=torch.int64))

    def test_an_unloadable_ropegen_library_is_an_import_error(self):
        environment = dict(os.environ, ROPEGEN_LIBRARY="/nonexistent/libropegen.so", PYTHONPATH=os.pathsep.join(sys.path))
        run = subprocess.run([sys.executable, "-c", "import ropegen"], env=environment, capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("ImportError: ropegen: ROPEGEN_LIBRARY=/nonexistent/libropegen.so cannot be loaded", run.stderr)

    def test_read_only_outputs_are_named(self):
        q = np.ones((1, 2, 1, 64), np.float32)
        q.flags.writeable = False
        for name, arguments in {"q": dict(q=q), "q_out": dict(q=q.copy(), q_out=q),
                                "k": dict(q=q.copy(), k=q), "k_out": dict(q=q.copy(), k=q.copy(), k_out=q)}.items():
            with self.subTest(name):
                with self.assertRaisesRegex(ValueError, f"^{name} is read-only") as raised:
                    ropegen.rope(**arguments)
                self.assertNotIsInstance(raised.exception, ropegen.RopeError)  # no library status applies

    def test_yarn_without_a_factor_takes_the_ratio_of_the_lengths(self):
        # transformers: factor = max_position_embeddings / original_max_position_embeddings.
        q = self.rng.uniform(-1, 1, (1, 4, 2, 64)).astype(np.float32)
        lengths = {"original_max_position_embeddings": 16, "max_position_embeddings": 128}
        positions = np.array([[0, 5, 90, 127]], np.int32)
        got, want = np.empty_like(q), np.empty_like(q)
        ropegen.rope(q, q_out=got, positions=positions, scaling={"rope_type": "yarn", **lengths})
        ropegen.rope(q, q_out=want, positions=positions, scaling={"rope_type": "yarn", "factor": 8.0, **lengths})
        np.testing.assert_array_equal(got, want)
        self.assertFalse(np.array_equal(got, q))

    def assert_bad_values(self, q, cases):
        """Each of `cases` ({message: rope() arguments}) refused with ROPE_ERR_BAD_VALUE and the message."""
        for message, arguments in cases.items():
            with self.subTest(message):
                with self.assertRaises(ropegen.RopeError) as raised:
                    ropegen.rope(q, **arguments)
                self.assertEqual(raised.exception.status, "ROPE_ERR_BAD_VALUE")
                self.assertIn(message, str(raised.exception))

    def test_arguments_the_call_would_not_read_are_refused(self):
        q = np.ones((1, 2, 1, 64), np.float32)
        cos, sin = np.zeros((4, 32), np.float32), np.zeros((4, 32), np.float32)
        cases = {"cos_cache/sin_cache with source='compat'": dict(cos_cache=cos, sin_cache=sin),
                 "offset=3 with positions": dict(positions=np.zeros((1, 2), np.int32), offset=3),
                 "positions_kind='table' without positions": dict(positions_kind="table")}
        self.assert_bad_values(q, cases)
        with self.assertRaises(ropegen.RopeError) as raised:
            ropegen.build_cos_sin_cache(cos, sin, rotary_dim=64, source="Compat")
        self.assertEqual(raised.exception.status, "ROPE_ERR_BAD_ENUM")
        self.assertIn("source='Compat'", str(raised.exception))
        self.assertTrue((q == 1).all())
        self.assertTrue((cos == 0).all())

    def test_integers_that_would_wrap_in_the_c_fields_are_refused(self):
        q = np.ones((1, 2, 1, 64), np.float32)
        cases = {"rotary_dim=4294967360": dict(rotary_dim=2 ** 32 + 64),
                 "rotary_offset=-4294967296": dict(rotary_offset=-2 ** 32),
                 "offset=18446744073709551619": dict(offset=2 ** 64 + 3),
                 "mrope_section[0]=4294967304": dict(positions=np.zeros((3, 1, 2), np.int64),
                                                     mrope_section=[2 ** 32 + 8, 12, 12]),
                 "num_threads=4294967297": dict(num_threads=2 ** 32 + 1)}
        self.assert_bad_values(q, cases)
        with self.assertRaisesRegex(TypeError, "^rotary_dim=64.0: an integer"):
            ropegen.rope(q, rotary_dim=64.0)
        with self.assertRaisesRegex(ropegen.RopeError, "rotary_dim=4294967360"):
            ropegen.build_cos_sin_cache(np.zeros((4, 32), np.float32), np.zeros((4, 32), np.float32), rotary_dim=2 ** 32 + 64)
        self.assertTrue((q == 1).all())

    def test_lists_for_arrays_are_type_errors_naming_the_argument(self):
        q = np.ones((2, 1, 64), np.float32)
        for name, arguments in {"q": dict(q=[[1.0]]), "positions": dict(q=q, positions=[0, 1]),
                                "cu_seqlens": dict(q=q, cu_seqlens=[0, 2])}.items():
            with self.subTest(name):
                with self.assertRaisesRegex(TypeError, f"^{name}: a torch tensor or a numpy array"):
                    ropegen.rope(**arguments)


if __name__ == "__main__":
    unittest.main(verbosity=2)
