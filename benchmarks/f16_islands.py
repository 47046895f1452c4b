"""What computing norms and the DeltaNet recurrence in float32 costs an f16 package's decode.

Builds (or reuses) a synthetic Qwen2.5-VL checkpoint (_synthetic.py, default 200M),
converts it to f16 twice, with `graphs.float32_islands` and without it (the same weights),
then times greedy decoding of a text prompt on each, alternating, and prints tokens/s
and the ratio (islands / plain):

    python benchmarks/f16_islands.py [--size 200M] [--tokens 64] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _ablation import converted
from _synthetic import SIZES, build_checkpoint


def _speed(folder: Path, tokens: int) -> float:
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference

    rt = Runtime(folder)
    inputs = rt.process(rt.prompt(hf_reference.messages_for("Describe a picture.", n_images=0)))
    start = time.perf_counter()
    made = rt.greedy(inputs, tokens)
    return len(made) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="200M")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-f16-islands"))
    args = parser.parse_args()
    checkpoint = args.work / f"qwen2_5_vl-{args.size}"
    if not (checkpoint / "config.json").is_file():
        build_checkpoint(args.size, checkpoint)
    converted(checkpoint, args.work / f"{args.size}-f16-islands", "f16")
    converted(checkpoint, args.work / f"{args.size}-f16-plain", "f16", "float32_islands")
    rates: dict[str, list[float]] = {"islands": [], "plain": []}
    for r in range(args.rounds):
        for label in ("islands", "plain") if r % 2 == 0 else ("plain", "islands"):
            rates[label].append(_speed(args.work / f"{args.size}-f16-{label}", args.tokens))
    for label, values in rates.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"{label:<8} {statistics.median(values):6.1f} tokens/s (rounds: {shown})")
    ratio = statistics.median(rates["islands"]) / statistics.median(rates["plain"])
    print(f"islands / plain: {ratio:.3f}")


if __name__ == "__main__":
    main()
