# SPDX-License-Identifier: Apache-2.0
"""ropegen against its peers on the same shapes, data and thread count, in one run.

Implementations (half style, cos/sin from one cache, out of place, Llama-3-8B heads):
  - ropegen: the Python binding's prepared call (ropegen.prepare) of rope_dispatch, cache source;
  - ONNX Runtime: one session holding two RotaryEmbedding nodes (ai.onnx opset 23, interleaved=0)
    for q and k, CPU execution provider, inputs and outputs bound once with io_binding;
  - PyTorch eager: transformers' Llama apply_rotary_pos_emb on [B, H, S, D] views with cos/sin
    [B, S, D] gathered before timing (that gather, an engine's cost, is not timed: it favours torch);
  - memcpy: q -> q_out and k -> k_out, the floor every out-of-place RoPE pays.
Every implementation reads q and k from the same arrays (BSHD memory; torch sees the [B, H, S, D]
view transformers' Llama attention makes with transpose(1, 2)) and uses the same positions and tables.

GB/s = (bytes of q and k read + bytes of q_out and k_out written) / median time of a call.
Before any timing, each implementation's output on each shape is compared with an fp64 reference
of the rotation (spec §2) from the same inputs and table values; a disagreement aborts the run.

    bash bench/peers/run.sh              # full run: bench/peers/*.png, results.md, bench/README.md section
    peer_bench.py --check                # small shapes, agreement only (ctest peers.Agreement)
"""
import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[2]
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Llama-3-8B
PAIRS = HEAD_DIM // 2
ROPE_THETA = 500000.0  # Llama-3's base
CACHE_LEN = 32768  # covers the scattered decode positions and the longest prefill
DTYPES = {"f32": np.float32, "f16": np.float16}
# Per element |y - y_ref| <= TOLERANCE * max(|x_pair|): a few roundings of the dtype, since the
# peers round each product and sum separately (spec §7 allows ropegen 2^-22 in f32).
TOLERANCE = {"f32": 2.0 ** -21, "f16": 2.0 ** -9}
IDLE_PAUSE_SECONDS = 0.05  # before each implementation's block: other pools' threads stop spinning
README_BEGIN = "<!-- peers:begin (bench/peers/run.sh writes this section; edits here are overwritten) -->"
README_END = "<!-- peers:end -->"


@dataclass
class Case:
    """One shape in one dtype: the inputs every implementation reads."""
    regime: str  # "decode" (batch sequences, one new token each) or "prefill" (one sequence)
    dtype: str
    batch: int
    seq: int
    q: np.ndarray  # [batch, seq, Q_HEADS, HEAD_DIM]
    k: np.ndarray  # [batch, seq, KV_HEADS, HEAD_DIM]
    positions: np.ndarray  # int64 [batch, seq]
    cos: np.ndarray  # [CACHE_LEN, PAIRS] in the tensors' dtype
    sin: np.ndarray

    @property
    def tokens(self):
        return self.batch * self.seq

    @property
    def bytes_moved(self):
        return 2 * (self.q.nbytes + self.k.nbytes)

    @property
    def name(self):
        return f"{self.regime} {self.batch}x{self.seq} {self.dtype}"


def cos_sin_tables(dtype):
    """cos and sin of position * theta^(-2i/D) (spec §1), computed in fp64 and rounded once to dtype."""
    angle = np.arange(CACHE_LEN, dtype=np.float64)[:, None] * ROPE_THETA ** (-np.arange(PAIRS) * 2.0 / HEAD_DIM)
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def make_case(regime, dtype, batch, seq, tables, rng):
    if regime == "decode":  # scattered positions, so that each sequence reads its own cache row
        positions = (1000 + 61 * np.arange(batch, dtype=np.int64))[:, None]
    else:
        positions = np.arange(seq, dtype=np.int64)[None, :].repeat(batch, axis=0)
    q = rng.uniform(-1, 1, (batch, seq, Q_HEADS, HEAD_DIM)).astype(DTYPES[dtype])
    k = rng.uniform(-1, 1, (batch, seq, KV_HEADS, HEAD_DIM)).astype(DTYPES[dtype])
    return Case(regime, dtype, batch, seq, q, k, positions, *tables[dtype])


def reference(x, positions, cos, sin):
    """Half-style forward rotation (spec §2) in fp64 of x [B, S, H, D] by the table rows of positions."""
    x = x.astype(np.float64)
    c = cos[positions].astype(np.float64)[:, :, None, :]  # [B, S, 1, P]
    s = sin[positions].astype(np.float64)[:, :, None, :]
    a, b = x[..., :PAIRS], x[..., PAIRS:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def check_rotation(case, implementation, x, got, tensor_name):
    want = reference(x, case.positions, case.cos, case.sin)
    pair_max = np.maximum(np.abs(x[..., :PAIRS]), np.abs(x[..., PAIRS:])).astype(np.float64)
    bound = TOLERANCE[case.dtype] * np.concatenate([pair_max, pair_max], axis=-1)
    error = np.abs(got.astype(np.float64) - want)
    if not np.all(error <= bound):  # also false for NaN, e.g. an output never written
        ratio = np.where(np.isnan(error), np.inf, error / np.maximum(bound, 1e-300))
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), error.shape))
        raise SystemExit(f"PEER MISMATCH: {implementation} on {case.name}, {tensor_name}: "
                         f"{int(np.sum(~(error <= bound)))} elements outside {TOLERANCE[case.dtype]:.3g} * max|x_pair|; "
                         f"worst at {worst}: got {got[worst]}, reference {want[worst]}")


# --- the implementations: prepare(case) returns a call that does the whole q and k step, and
# outputs() the arrays (numpy, [B, S, H, D]) that call wrote ------------------------------------
class Memcpy:
    """numpy's copyto on the calling thread: the least per-call overhead of any copy from Python."""
    label = "memcpy (numpy, 1 thread)"

    def prepare(self, case):
        self.q_out, self.k_out = np.empty_like(case.q), np.empty_like(case.k)
        q, k, q_out, k_out = case.q, case.k, self.q_out, self.k_out

        def step():
            np.copyto(q_out, q)
            np.copyto(k_out, k)
        return step

    def outputs(self):
        return self.q_out, self.k_out


class TorchCopy:
    """torch's copy_ on its intra-op pool: the copy at the benchmark's thread count (large shapes)."""
    label = "memcpy (torch, all threads)"

    def __init__(self, torch):
        self.torch = torch

    def prepare(self, case):
        self.q_out, self.k_out = np.empty_like(case.q), np.empty_like(case.k)
        q, k = self.torch.from_numpy(case.q), self.torch.from_numpy(case.k)
        q_out, k_out = self.torch.from_numpy(self.q_out), self.torch.from_numpy(self.k_out)

        def step():
            q_out.copy_(q)
            k_out.copy_(k)
        return step

    def outputs(self):
        return self.q_out, self.k_out


class Ropegen:
    """The same call as the peers': [B, S, heads, D] views, positions [B, S]."""
    label = "ropegen"

    def __init__(self, ropegen):
        self.ropegen = ropegen
        self.kernels = set()  # the kernels rope_dispatch chose, for the report

    def prepare(self, case):
        self.q_out, self.k_out = np.full_like(case.q, np.nan), np.full_like(case.k, np.nan)
        prepared = self.ropegen.prepare(case.q, case.k, q_out=self.q_out, k_out=self.k_out, positions=case.positions,
                                        style="half", source="cache", cos_cache=case.cos, sin_cache=case.sin)
        self.kernels.add(prepared.kernel)
        return prepared

    def outputs(self):
        return self.q_out, self.k_out


class OnnxRuntime:
    """One session per dtype with both RotaryEmbedding nodes; q and k as [B, S, heads*D] (BSHD)."""
    label = "ONNX Runtime"

    def __init__(self, onnx, ort, threads):
        self.onnx, self.ort, self.threads = onnx, ort, threads
        self.sessions, self.unsupported = {}, {}

    def model(self, dtype):
        helper, TensorProto = self.onnx.helper, self.onnx.TensorProto
        element = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16}[dtype]
        nodes = [helper.make_node("RotaryEmbedding", [x, "cos_cache", "sin_cache", "position_ids"], [f"{x}_out"],
                                  name=f"rope_{x}", num_heads=heads, interleaved=0)
                 for x, heads in (("q", Q_HEADS), ("k", KV_HEADS))]
        graph = helper.make_graph(
            nodes, "rope_q_k",
            [helper.make_tensor_value_info("q", element, ["batch", "seq", Q_HEADS * HEAD_DIM]),
             helper.make_tensor_value_info("k", element, ["batch", "seq", KV_HEADS * HEAD_DIM]),
             helper.make_tensor_value_info("cos_cache", element, ["cache_len", PAIRS]),
             helper.make_tensor_value_info("sin_cache", element, ["cache_len", PAIRS]),
             helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])],
            [helper.make_tensor_value_info("q_out", element, ["batch", "seq", Q_HEADS * HEAD_DIM]),
             helper.make_tensor_value_info("k_out", element, ["batch", "seq", KV_HEADS * HEAD_DIM])])
        # IR version 10 (onnx 1.16) is one every recent onnxruntime loads; opset 23 is what matters.
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
        self.onnx.checker.check_model(model, full_check=True)
        return model.SerializeToString()

    def session(self, dtype):
        """The dtype's session, or None (with the reason in self.unsupported) when ORT has no kernel for it."""
        if dtype not in self.sessions and dtype not in self.unsupported:
            options = self.ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
            try:
                self.sessions[dtype] = self.ort.InferenceSession(self.model(dtype), options,
                                                                 providers=["CPUExecutionProvider"])
            except Exception as error:  # onnxruntime raises its own exception types, one per status
                if "NOT_IMPLEMENTED" not in str(error) and "Could not find an implementation" not in str(error):
                    raise
                self.unsupported[dtype] = str(error).strip().splitlines()[-1]
        return self.sessions.get(dtype)

    def prepare(self, case):
        session = self.session(case.dtype)
        self.q_out, self.k_out = np.full_like(case.q, np.nan), np.full_like(case.k, np.nan)
        binding = session.io_binding()
        q_shape, k_shape = [case.batch, case.seq, Q_HEADS * HEAD_DIM], [case.batch, case.seq, KV_HEADS * HEAD_DIM]
        # Raw pointers: ORT reads and writes the benchmark's own arrays, no copy in or out.
        for name, array, shape in (("q", case.q, q_shape), ("k", case.k, k_shape),
                                   ("cos_cache", case.cos, case.cos.shape), ("sin_cache", case.sin, case.sin.shape),
                                   ("position_ids", case.positions, case.positions.shape)):
            binding.bind_input(name, "cpu", 0, array.dtype, list(shape), array.ctypes.data)
        for name, array, shape in (("q_out", self.q_out, q_shape), ("k_out", self.k_out, k_shape)):
            binding.bind_output(name, "cpu", 0, array.dtype, list(shape), array.ctypes.data)
        return lambda: session.run_with_iobinding(binding)

    def outputs(self):
        return self.q_out, self.k_out


class TorchEager:
    """transformers' apply_rotary_pos_emb, as LlamaAttention calls it, under inference_mode."""
    label = "PyTorch eager (transformers)"

    def __init__(self, torch, apply_rotary_pos_emb):
        self.torch, self.apply_rotary_pos_emb = torch, apply_rotary_pos_emb

    def prepare(self, case):
        torch = self.torch
        # LlamaAttention: q_proj(x).view(B, S, H, D).transpose(1, 2), a [B, H, S, D] view of BSHD memory.
        q, k = torch.from_numpy(case.q).transpose(1, 2), torch.from_numpy(case.k).transpose(1, 2)
        # LlamaRotaryEmbedding's output, [B, S, D] (cat of the pair values with themselves), from the same table rows.
        cos = torch.from_numpy(np.concatenate([case.cos, case.cos], axis=-1)[case.positions])
        sin = torch.from_numpy(np.concatenate([case.sin, case.sin], axis=-1)[case.positions])
        self.result = None

        def step():
            self.result = self.apply_rotary_pos_emb(q, k, cos, sin)
        return step

    def outputs(self):
        q_out, k_out = self.result
        return q_out.transpose(1, 2).numpy(), k_out.transpose(1, 2).numpy()


def check_case(case, implementations):
    """Runs each implementation once on the case and aborts unless its outputs agree with the reference."""
    for implementation in implementations:
        implementation.prepare(case)()
        q_out, k_out = implementation.outputs()
        if implementation.label.startswith("memcpy"):
            if not (np.array_equal(q_out, case.q) and np.array_equal(k_out, case.k)):
                raise SystemExit(f"PEER MISMATCH: {implementation.label} on {case.name} did not copy its inputs")
            continue
        check_rotation(case, implementation.label, case.q, q_out, "q")
        check_rotation(case, implementation.label, case.k, k_out, "k")


def median_seconds(case, implementations, passes, samples, sample_seconds):
    """Median seconds per call of each implementation. Each pass times every implementation in a
    block of back-to-back samples (the order rotating between passes, so that a noisy neighbour
    hits all alike), after a pause: the libraries' pools (OpenMP's, ONNX Runtime's) keep spinning
    for a while after a call, and on a machine with as many threads as cores that steals the
    next block's cores."""
    steps = [implementation.prepare(case) for implementation in implementations]
    repeats = []
    for step in steps:  # warm up, then size each sample to about sample_seconds
        step()
        start = time.perf_counter()
        step()
        repeats.append(max(1, round(sample_seconds / max(time.perf_counter() - start, 1e-9))))
    timings = [[] for _ in steps]
    for p in range(passes):
        for i in np.roll(np.arange(len(steps)), p):
            step, repeat = steps[i], repeats[i]
            time.sleep(IDLE_PAUSE_SECONDS)
            step()
            for _ in range(samples):
                start = time.perf_counter()
                for _ in range(repeat):
                    step()
                timings[i].append((time.perf_counter() - start) / repeat)
    return [float(np.median(t)) for t in timings]


# --- the report -----------------------------------------------------------------------------
def machine():
    model = re.search(r"^Model name:\s*(.+)$", subprocess.run(["lscpu"], capture_output=True, text=True).stdout, re.M)
    return f"{model.group(1).strip() if model else platform.processor()}, {os.cpu_count()} logical CPUs"


def versions(ropegen):
    packages = ["numpy", "torch", "transformers", "onnxruntime", "onnx", "matplotlib"]
    return [f"Python {platform.python_version()}", f"ropegen {ropegen.library_version()}"] + \
        [f"{name} {importlib.metadata.version(name)}" for name in packages]


def implementations_of(rows):
    """The implementations measured on these rows, in the order they were run."""
    return list(dict.fromkeys(label for r in rows for label in r["gbps"]))


def peers_table(results):
    """Markdown: per regime and dtype, GB/s of each implementation and its ratio to the memcpy floor."""
    lines = []
    for regime, axis in (("decode", "batch (1 token each)"), ("prefill", "tokens (1 sequence)")):
        for dtype in DTYPES:
            rows = [r for r in results if r["regime"] == regime and r["dtype"] == dtype]
            if not rows:
                continue
            labels = implementations_of(rows)
            lines += [f"**{regime}, {dtype}**: GB/s (ratio to the memcpy floor)", "",
                      f"| {axis} | MiB moved | memcpy floor | " + " | ".join(labels) + " |",
                      "|---:|---:|---:|" + "---:|" * len(labels)]
            for r in rows:
                cells = []
                for label in labels:
                    gbps = r["gbps"].get(label)
                    cells.append("n/a" if gbps is None else f"{gbps:.1f} ({gbps / r['floor']:.2f})")
                lines.append(f"| {r['tokens']} | {r['bytes'] / 2 ** 20:.2f} | {r['floor']:.1f} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


# One colour and marker per implementation in every plot.
LINE_STYLES = {"ropegen": ("C0", "o"), "ONNX Runtime": ("C2", "D"),
               "PyTorch eager (transformers)": ("C3", "^")}


def plot(results, regime, path, subtitle):
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    dtypes = [d for d in DTYPES if any(r["regime"] == regime and r["dtype"] == d for r in results)]
    figure, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.8), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        rows = [r for r in results if r["regime"] == regime and r["dtype"] == dtype]
        tokens = [r["tokens"] for r in rows]
        ax.plot(tokens, [r["floor"] for r in rows], "k--", linewidth=2, label="memcpy floor (roofline)")
        for label in implementations_of(rows):
            color, marker = LINE_STYLES[label]
            points = [(r["tokens"], r["gbps"][label]) for r in rows if r["gbps"].get(label) is not None]
            ax.plot(*zip(*points), color=color, marker=marker, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(tokens, [str(t) for t in tokens])
        ax.set_xlabel("tokens (decode: sequences of 1 new token)" if regime == "decode" else "tokens (1 sequence)")
        ax.set_ylabel("GB/s (q, k read + q_out, k_out written)")
        ax.set_title(f"{regime}, {dtype}")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(f"RoPE, Llama-3-8B heads (32 q, 8 kv, head_dim 128): {subtitle}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def rewrite_readme(readme, section):
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{readme}: the markers {README_BEGIN!r} and {README_END!r} are missing")
    head, rest = text.split(README_BEGIN, 1)
    readme.write_text(head + README_BEGIN + "\n" + section + "\n" + README_END + rest.split(README_END, 1)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="small shapes, agreement with the reference only")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("ROPE_NUM_THREADS") or os.cpu_count()),
                        help="threads of every implementation (default: ROPE_NUM_THREADS, else the cores)")
    parser.add_argument("--decode", default="1,2,4,8,16,32,64,128,256", help="decode batch sizes")
    parser.add_argument("--prefill", default="128,256,512,1024,2048,4096,8192", help="prefill sequence lengths")
    parser.add_argument("--dtypes", default="f32,f16")
    parser.add_argument("--passes", type=int, default=3, help="blocks of samples per implementation and shape")
    parser.add_argument("--samples", type=int, default=7, help="samples per block (the median of all is reported)")
    parser.add_argument("--sample-ms", type=float, default=4.0, help="length of one sample")
    parser.add_argument("--out-dir", type=Path, default=REPOSITORY / "bench" / "peers")
    parser.add_argument("--readme", type=Path, default=REPOSITORY / "bench" / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="write the table and plots only")
    args = parser.parse_args()

    # The library reads ROPE_NUM_THREADS at its first call, so before ropegen is imported.
    os.environ["ROPE_NUM_THREADS"] = str(args.threads)
    import onnx
    import onnxruntime
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    import ropegen
    torch.set_num_threads(args.threads)
    onnx_runtime = OnnxRuntime(onnx, onnxruntime, args.threads)
    rotations = [Ropegen(ropegen), onnx_runtime, TorchEager(torch, apply_rotary_pos_emb)]
    copies = [Memcpy(), TorchCopy(torch)]

    if args.check:  # a few tokens, odd counts included; the Llama heads, both dtypes
        shapes = [("decode", 1, 1), ("decode", 3, 1), ("prefill", 1, 5), ("prefill", 1, 33)]
        dtypes = list(DTYPES)
    else:
        shapes = [("decode", int(b), 1) for b in args.decode.split(",") if b] + \
                 [("prefill", 1, int(s)) for s in args.prefill.split(",") if s]
        dtypes = args.dtypes.split(",")
    rng = np.random.default_rng(2024)
    tables = {dtype: cos_sin_tables(DTYPES[dtype]) for dtype in dtypes}
    results = []
    with torch.inference_mode():
        for dtype in dtypes:
            for regime, batch, seq in shapes:
                case = make_case(regime, dtype, batch, seq, tables, rng)
                # ORT without a kernel for the dtype is reported, not run.
                present = [r for r in rotations if r is not onnx_runtime or onnx_runtime.session(dtype)]
                check_case(case, copies + present)
                if args.check:
                    print(f"{case.name}: {', '.join(r.label for r in present)} agree with the fp64 reference")
                    continue
                seconds = median_seconds(case, copies + present, args.passes, args.samples, args.sample_ms / 1000)
                gbps = {i.label: case.bytes_moved / s / 1e9 for i, s in zip(copies + present, seconds)}
                floor = max(gbps.pop(c.label) for c in copies)
                results.append(dict(regime=regime, dtype=dtype, tokens=case.tokens, bytes=case.bytes_moved,
                                    floor=floor, gbps=gbps))
                print(f"{case.name}: memcpy floor {floor:.1f} GB/s; " +
                      ", ".join(f"{label} {value:.1f}" for label, value in gbps.items()), flush=True)
    for dtype, reason in onnx_runtime.unsupported.items():
        print(f"ONNX Runtime {onnxruntime.__version__} has no CPU RotaryEmbedding kernel for {dtype}: {reason}")
    if args.check:
        print(f"peers check: {len(shapes) * len(dtypes)} shapes agree (threads {args.threads})")
        return

    args.out_dir.mkdir(parents=True, exist_ok=True)
    subtitle = f"{args.threads} threads each, {machine()}"
    for regime in ("decode", "prefill"):
        if any(r["regime"] == regime for r in results):
            plot(results, regime, args.out_dir / f"{regime}.png", subtitle)
    command = "bash bench/peers/run.sh"
    notes = [f"- Command: `{command}` ({' '.join(sys.argv[1:]) or 'default arguments'}); "
             f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
             f"load average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}",
             f"- Machine: {machine()}; every implementation at {args.threads} threads "
             f"(ROPE_NUM_THREADS, torch.set_num_threads, ORT intra_op_num_threads)",
             f"- Versions: {', '.join(versions(ropegen))}",
             f"- ropegen kernels: {', '.join(f'`{kernel}`' for kernel in sorted(rotations[0].kernels))}",
             f"- Median of {args.passes} x {args.samples} samples of about {args.sample_ms:g} ms each; memcpy floor = the faster of "
             f"numpy copyto (1 thread) and torch copy_ ({args.threads} threads)"]
    notes += [f"- ONNX Runtime {onnxruntime.__version__} has no CPU kernel for RotaryEmbedding in {dtype}: "
              f"\"{reason}\"" for dtype, reason in onnx_runtime.unsupported.items()]
    table = peers_table(results)
    (args.out_dir / "results.md").write_text("# Peer benchmarks (generated by bench/peers/run.sh)\n\n" +
                                             "\n".join(notes) + "\n\n" + table)
    if not args.no_readme:
        images = " ".join(f"![{regime}]({os.path.relpath(args.out_dir / f'{regime}.png', args.readme.parent)})"
                          for regime in ("decode", "prefill") if (args.out_dir / f"{regime}.png").exists())
        rewrite_readme(args.readme, "\n".join(notes) + "\n\n" + images + "\n\n" + table)
    print(table)


if __name__ == "__main__":
    main()
