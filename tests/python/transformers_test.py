# SPDX-License-Identifier: Apache-2.0
"""ropegen through its Python binding against transformers itself (ctest label "transformers").

For each rope_type the model's own rotary embedding class is built from a config written here (no
hub downloads), transformers computes cos/sin and applies them with the model's
apply_rotary_pos_emb, and ropegen rotates the same torch tensors (BHSD, passed as views) with
rope_dispatch, in one call for the whole batch:
  - f32, the compat source: within spec §7's bound against transformers,
    (2^-22 + 2^-23 |angle|) * max|x_pair|, with three ulps of the angle (see angle_bound);
  - bf16, the compat source in the parity mode (cos/sin rounded to bf16 as transformers does):
    bit-exact, or within one ulp of the result plus the rounding of transformers' two bf16
    products, which our single rounding of the exact rotation does not have, plus the angle term.
Positions reach 131072, and each batch holds sequences below, across and far beyond the models'
original length: transformers picks dynamic-NTK and LongRoPE frequencies from the largest
position of its whole input, so it runs each sequence alone, while ropegen runs the batch and
picks them per sequence.
"""
import unittest

import torch
from transformers import GPTNeoXConfig, LlamaConfig, Phi3Config, Qwen2VLTextConfig
from transformers.models.gpt_neox import modeling_gpt_neox as neox
from transformers.models.llama import modeling_llama as llama
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl

import ropegen

HEAD_DIM, Q_HEADS, K_HEADS, SEQ = 128, 4, 2, 8


def positions_straddling(original_max):
    """Three sequences of SEQ tokens: short, across original_max, and ending at 131071."""
    starts = [17, original_max - SEQ // 2, 131072 - SEQ]
    return torch.stack([torch.arange(s, s + SEQ, dtype=torch.int64) for s in starts])


class Model:
    """A model family's rotary embedding class, its apply_rotary_pos_emb and a config."""

    def __init__(self, name, module, rotary_class, config, per_sequence=False):
        self.name, self.module, self.rotary_class, self.config = name, module, rotary_class, config
        self.per_sequence = per_sequence
        parameters = config.rope_parameters
        self.rotary_dim = int(HEAD_DIM * parameters.get("partial_rotary_factor", 1.0))
        self.mrope_section = parameters.get("mrope_section")
        # ropegen's scaling is what transformers reads: the config's rope_parameters (rope_theta
        # included; rotary_dim and mrope_section are arguments of their own) and its
        # max_position_embeddings (where dynamic NTK grows from, LongRoPE's attention factor).
        self.scaling = {key: value for key, value in parameters.items()
                        if key not in ("partial_rotary_factor", "mrope_section")}
        self.scaling["max_position_embeddings"] = config.max_position_embeddings

    def positions(self):
        """positions_straddling's; mrope: three streams, height and width small as in an image grid."""
        original_max = self.scaling.get("original_max_position_embeddings", 4096)
        temporal = positions_straddling(original_max)
        if self.mrope_section is None:
            return temporal
        rng = torch.Generator().manual_seed(17)
        grid = torch.randint(0, 64, (2, *temporal.shape), generator=rng)
        return torch.cat([temporal[None], temporal[None] - SEQ + grid], dim=0).clamp(min=0)

    def transformers_rope(self, q, k, positions):
        """transformers' result, and the f32 angles of every (batch, seq, pair) it rotated by (for the bound)."""
        outputs, angles = [], []
        batches = [slice(b, b + 1) for b in range(q.shape[0])] if self.per_sequence else [slice(None)]
        for rows in batches:
            rotary = self.rotary_class(self.config)  # fresh: dynamic NTK keeps state across calls
            if self.mrope_section is None:
                cos, sin = rotary(q[rows], positions[rows])
                angles.append(positions[rows][..., None].float() * rotary.inv_freq.float())
            else:  # [3, batch, seq] positions; each pair's angle from its stream
                cos, sin = rotary(q, positions)
                streams = positions[..., None].float() * rotary.inv_freq.float()
                angles.append(rotary.recomposition_frequencies(streams)[..., : self.rotary_dim // 2])
            outputs.append(self.module.apply_rotary_pos_emb(q[rows], k[rows], cos, sin))
        q_out = torch.cat([o[0] for o in outputs]), torch.cat([o[1] for o in outputs])
        return q_out, torch.cat(angles)

    def ropegen_rope(self, q, k, positions, parity):
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        # BHSD memory as the [batch, seq, heads, head_dim] views the ABI takes: no copy.
        ropegen.rope(q.transpose(1, 2), k.transpose(1, 2), q_out=q_out.transpose(1, 2), k_out=k_out.transpose(1, 2),
                     positions=positions, source="compat", scaling=self.scaling,
                     rotary_dim=self.rotary_dim, round_cos_sin=parity, mrope_section=self.mrope_section)
        return q_out, k_out


def llama_config(rope_parameters, max_position_embeddings=131072):
    return LlamaConfig(hidden_size=Q_HEADS * HEAD_DIM, num_attention_heads=Q_HEADS, num_key_value_heads=K_HEADS,
                       head_dim=HEAD_DIM, max_position_embeddings=max_position_embeddings,
                       rope_parameters=rope_parameters)


def models():
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    deepseek_yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 1.0}
    qwen_yarn = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768}
    linear = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}
    dynamic = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    rng = torch.Generator().manual_seed(3)
    pairs = int(HEAD_DIM * 0.75) // 2
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
                "short_factor": (1 + torch.rand(pairs, generator=rng)).tolist(),
                "long_factor": (1 + 30 * torch.rand(pairs, generator=rng)).tolist()}
    phi3_config = Phi3Config(hidden_size=Q_HEADS * HEAD_DIM, num_attention_heads=Q_HEADS, num_key_value_heads=K_HEADS,
                             max_position_embeddings=131072, original_max_position_embeddings=4096,
                             partial_rotary_factor=0.75, rope_parameters=dict(longrope))
    neox_config = GPTNeoXConfig(hidden_size=Q_HEADS * HEAD_DIM, num_attention_heads=Q_HEADS, rotary_pct=0.25,
                                max_position_embeddings=131072)
    qwen2_vl_config = Qwen2VLTextConfig(hidden_size=Q_HEADS * HEAD_DIM, num_attention_heads=Q_HEADS,
                                        num_key_value_heads=K_HEADS, max_position_embeddings=131072,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                         "mrope_section": [16, 24, 24]})
    return [
        Model("llama_default", llama, llama.LlamaRotaryEmbedding,
              llama_config({"rope_type": "default", "rope_theta": 500000.0})),
        Model("llama_linear", llama, llama.LlamaRotaryEmbedding, llama_config(linear)),
        Model("llama_dynamic", llama, llama.LlamaRotaryEmbedding, llama_config(dynamic, 4096), per_sequence=True),
        Model("llama3_1", llama, llama.LlamaRotaryEmbedding, llama_config(llama3)),
        Model("deepseek_yarn", llama, llama.LlamaRotaryEmbedding, llama_config(deepseek_yarn)),
        Model("qwen_yarn", llama, llama.LlamaRotaryEmbedding, llama_config(qwen_yarn)),
        Model("phi3_longrope", phi3, phi3.Phi3RotaryEmbedding, phi3_config, per_sequence=True),
        Model("gpt_neox_partial", neox, neox.GPTNeoXRotaryEmbedding, neox_config),
        Model("qwen2_vl_mrope", qwen2_vl, qwen2_vl.Qwen2VLRotaryEmbedding, qwen2_vl_config),
    ]


def pair_maximum(x, rotary_dim):
    """max(|x_a|, |x_b|) of the pair each lane belongs to (half style); |x| for lanes outside the slice."""
    half = rotary_dim // 2
    a, b = x[..., :half].abs(), x[..., half:rotary_dim].abs()
    m = torch.maximum(a, b)
    return torch.cat([m, m, x[..., rotary_dim:].abs()], dim=-1)


def lane_angles(angles, head_dim):
    """[batch, seq, pairs] angles as [batch, 1, seq, head_dim] per lane (0 outside the rotary slice)."""
    lanes = torch.cat([angles, angles], dim=-1)
    pad = torch.zeros(*lanes.shape[:-1], head_dim - lanes.shape[-1], dtype=lanes.dtype)
    return torch.cat([lanes, pad], dim=-1)[:, None]


def angle_bound(angles, x, rotary_dim):
    """Spec §7's bound against transformers, (2^-22 + 2^-23 |angle|) * max|x_pair|, with three ulps of
    the f32 angle instead of one: torch's powf is not correctly rounded (it errs by an ulp where
    ropegen's power is exact to the last bit), and that error passes through the products and the
    reciprocal of the frequency chain, so transformers' angle may lie two or three ulps away."""
    return (2.0 ** -22 + 3 * 2.0 ** -23 * lane_angles(angles, HEAD_DIM).abs()) * pair_maximum(x, rotary_dim)


def bf16_ulp(x):
    """One unit in the last place of bf16 values (of their f32 widening), at least the smallest normal's."""
    exponent = torch.floor(torch.log2(x.float().abs().clamp(min=2.0 ** -126)))
    return torch.pow(2.0, exponent - 7)


class TransformersParity(unittest.TestCase):
    def inputs(self, dtype):
        rng = torch.Generator().manual_seed(11)
        q = (2 * torch.rand(3, Q_HEADS, SEQ, HEAD_DIM, generator=rng) - 1).to(dtype)
        k = (2 * torch.rand(3, K_HEADS, SEQ, HEAD_DIM, generator=rng) - 1).to(dtype)
        return q, k

    def results(self, model, dtype, parity):
        """(input, transformers' output, ropegen's output) for q and k, and transformers' angles."""
        q, k = self.inputs(dtype)
        positions = model.positions()
        (want_q, want_k), angles = model.transformers_rope(q, k, positions)
        got_q, got_k = model.ropegen_rope(q, k, positions, parity=parity)
        return ((q, want_q, got_q), (k, want_k, got_k)), angles

    def test_f32_within_the_compat_bound(self):
        for model in models():
            with self.subTest(model=model.name):
                tensors, angles = self.results(model, torch.float32, parity=False)
                for x, want, got in tensors:
                    bound = angle_bound(angles, x, model.rotary_dim)
                    error = (got.double() - want.double()).abs()
                    worst = (error / bound).max().item()
                    self.assertLessEqual(worst, 1.0, f"{model.name}: error/bound reaches {worst:.3f}")
                    passthrough = slice(model.rotary_dim, None)
                    self.assertTrue(torch.equal(got[..., passthrough], x[..., passthrough]))

    def test_bf16_parity_mode(self):
        for model in models():
            with self.subTest(model=model.name):
                tensors, angles = self.results(model, torch.bfloat16, parity=True)
                same = total = 0
                for x, want, got in tensors:
                    # transformers rounds x_a*c and x_b*s to bf16 before adding them, then the sum;
                    # ropegen rounds the exact x_a*c - x_b*s once. Their results may differ by the
                    # products' rounding (half an ulp of each) plus one ulp of the result.
                    product_bound = bf16_ulp(pair_maximum(x, model.rotary_dim))
                    bound = bf16_ulp(want) + product_bound + angle_bound(angles, x, model.rotary_dim)
                    error = (got.float() - want.float()).abs()
                    self.assertTrue(bool((error <= bound).all()), f"{model.name}: max error/bound {(error / bound).max():.3f}")
                    same += int((got.view(torch.int16) == want.view(torch.int16)).sum())
                    total += got.numel()
                print(f"{model.name}: bf16 bit-exact {same}/{total} ({100.0 * same / total:.1f}%)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
