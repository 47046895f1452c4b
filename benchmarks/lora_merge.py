"""Phi-4-multimodal's vision LoRA merged into the weights, or kept as a LoRA path: cost.

Builds the decoder projections Phi-4-multimodal's adapters wrap (per layer: the fused
q/k/v, o, the fused gate/up and down projections, at the released sizes) as an ONNX
graph three ways, and times them in onnxruntime on this machine:
- merged: one MatMul per projection, W + (alpha/r)·B·A folded in (what mmforge builds);
- lora: the base MatMul plus x·Aᵀ·Bᵀ·scale beside it (rank 256, the vision adapter's);
- rank 0: the LoRA path with empty A and B, as a graph whose adapter is off by default.

    python benchmarks/lora_merge.py [--layers 4] [--prompt 512] [--steps 16] [--rounds 5]

Prints the time of a prefill of --prompt tokens and of one decode step, and the ratios
to the merged graph. The projections are most of a decode step's work, so the ratio is
an upper bound for the whole decoder.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

HIDDEN = 3072
KV = 1024  # 8 KV heads of 128
INTERMEDIATE = 8192
PROJECTIONS = {  # name -> (in, out), as Phi-4-multimodal's decoder has them
    "qkv_proj": (HIDDEN, HIDDEN + 2 * KV),
    "o_proj": (HIDDEN, HIDDEN),
    "gate_up_proj": (HIDDEN, 2 * INTERMEDIATE),
    "down_proj": (INTERMEDIATE, HIDDEN),
}


def build(layers: int, rank: int | None, seed: int = 0) -> bytes:
    """The projections of `layers` layers; rank None: merged, else a LoRA path of `rank`."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        outputs = []
        for name, (fan_in, fan_out) in PROJECTIONS.items():
            src = x if name != "down_proj" else f"l{i}.act"
            w = f"l{i}.{name}.weight"
            inits.append(numpy_helper.from_array(_weight(rng, fan_in, fan_out), w))
            base = f"l{i}.{name}.base"
            nodes.append(helper.make_node("MatMul", [src, w], [base]))
            out = base
            if rank is not None:
                a, b = f"l{i}.{name}.lora_A", f"l{i}.{name}.lora_B"
                inits.append(numpy_helper.from_array(_weight(rng, fan_in, rank), a))
                inits.append(numpy_helper.from_array(_weight(rng, rank, fan_out) * 2.0, b))
                nodes.append(helper.make_node("MatMul", [src, a], [f"{a}.out"]))
                nodes.append(helper.make_node("MatMul", [f"{a}.out", b], [f"{b}.out"]))
                out = f"l{i}.{name}.out"
                nodes.append(helper.make_node("Add", [base, f"{b}.out"], [out]))
            outputs.append(out)
            if name == "gate_up_proj":  # the activation the down projection reads
                nodes.append(
                    helper.make_node(
                        "Slice",
                        [out, "zero", "inter", "minus_one"],
                        [f"l{i}.act"],
                    )
                )
        # The next layer reads the sum of this layer's outputs that have the hidden width.
        nodes.append(helper.make_node("Add", [outputs[1], outputs[3]], [f"l{i}.h"]))
        x = f"l{i}.h"
    inits += [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([INTERMEDIATE], np.int64), "inter"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    graph = helper.make_graph(
        nodes,
        "projections",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None, HIDDEN])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, None, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _weight(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    return (rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.sqrt(fan_in)).astype(
        np.float32
    )


def _session(model: bytes) -> Any:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.zeros((1, 1, HIDDEN), np.float32)})  # weights paged in
    return session


def timed(session: Any, tokens: int, repeats: int) -> float:
    """Median milliseconds of one run on `tokens` positions."""
    x = np.random.default_rng(1).standard_normal((1, tokens, HIDDEN), dtype=np.float32) * 0.02
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, {"x": x})
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    """Build the three graphs and print their prefill and decode times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    variants = {"merged": None, "lora r=256": 256, "lora r=0": 0}
    sessions = {label: _session(build(args.layers, rank)) for label, rank in variants.items()}
    samples: dict[str, tuple[list[float], list[float]]] = {v: ([], []) for v in variants}
    for _ in range(args.rounds):  # interleaved, so drift in the machine hits all alike
        for label, session in sessions.items():
            samples[label][0].append(timed(session, args.prompt, 1))
            samples[label][1].append(timed(session, 1, args.steps))
    results = {
        label: (statistics.median(p), statistics.median(d)) for label, (p, d) in samples.items()
    }
    merged = results["merged"]
    print(f"{args.layers} layers of Phi-4-multimodal's adapted projections, onnxruntime CPU")
    print(f"{'graph':<12} {'prefill ' + str(args.prompt):>14} {'decode step':>12}  ratios")
    for label, (prefill, decode) in results.items():
        print(
            f"{label:<12} {prefill:>11.1f} ms {decode:>9.2f} ms  "
            f"{prefill / merged[0]:.2f}× / {decode / merged[1]:.2f}×"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
