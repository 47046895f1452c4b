"""What each precision's rounding costs, apart from whether the conversion is exact.

For each family's release-shaped test checkpoint (the release's config.json text, bf16
shards under the release's names, shrunk; random weights; the tiny checkpoint where no
released config.json was at hand), converts it to f16, int8 and
int4 (those the family converts to) and runs `verify` on each package, which prints:
  - conversion: the verdict against the reference that holds the package's own rounded
    weights (int8 / int4: the f32 tolerances, exact float32 arithmetic; f16: float16's
    bounds, since its arithmetic is float16 too), and the first stage that differs;
  - tokens: the package's greedy tokens that match that reference's;
  - the rounding's own cost, original against rounded transformers, teacher-forced over
    the original's greedy answer: top-1 agreement of next-token choices, mean KL
    divergence (nats), the quality grade (docs/verification.md) and the first greedy
    token where the rounded model's answer leaves the original's.

Random weights round far worse than trained ones (no structure for the rounding to keep),
so the costs here are upper bounds that say nothing about a real model's quality; the
exactness column is what the test checkpoints can prove. To measure your own model:

    python benchmarks/rounding.py --model /path/to/checkpoint [--dtypes int4,int8]
    python benchmarks/rounding.py [--families qwen2_5_vl,gemma3] [--work /tmp/mmforge-rounding]

(`mmforge verify PACKAGE MODEL` prints the same figures for one package.)
"""

from __future__ import annotations

import argparse
import gc
import shutil
import time
from pathlib import Path

DTYPES = ("f16", "int8", "int4")
HEADER = (
    f"{'checkpoint':<24} {'dtype':<5} {'conversion':<28} {'tokens':>7} "
    f"{'top-1':>6} {'mean KL':>8} {'grade':<5} {'leaves at':>9} {'s':>5}"
)


def _row(name: str, dtype: str, checkpoint: Path, work: Path, tokens: int) -> str:
    from mmforge.backend.convert import convert
    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.verify import verify

    out = work / f"{name}-{dtype}"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    try:
        convert(str(checkpoint), out, dtype=dtype)
        report = verify(out, str(checkpoint), tokens=tokens)
    except MmforgeError as e:
        return f"{name:<24} {dtype:<5} not measured: {e.user_message}"
    finally:
        gc.collect()
    seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    verdict = report.verdict
    if report.first_divergent_stage:
        verdict += f" at {report.first_divergent_stage}"
    matched = f"{report.tokens.get('matched')}/{report.tokens.get('total')}"
    cost = report.rounding
    if cost is None:
        figures = f"{'-':>6} {'-':>8} {'-':<5} {'-':>9}"
    else:
        leaves = "-" if cost.first_difference is None else str(cost.first_difference)
        figures = f"{cost.top1_agreement:>6.0%} {cost.mean_kl:>8.4f} {cost.grade:<5} {leaves:>9}"
    return f"{name:<24} {dtype:<5} {verdict:<28} {matched:>7} {figures} {seconds:>5.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a checkpoint folder of your own")
    parser.add_argument("--families", help="family keys, comma-separated (default: all)")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-rounding"))
    args = parser.parse_args()
    from mmforge.backend.families import ALL, lookup
    from mmforge.backend.source import read_json
    from mmforge.backend.tiny import FAMILIES, build_tiny
    from mmforge.backend.tiny.release import write_release

    args.work.mkdir(parents=True, exist_ok=True)
    wanted = [d for d in args.dtypes.split(",") if d]
    print(HEADER)
    if args.model is not None:
        family = lookup(read_json(args.model / "config.json", "config.json").get("model_type"))
        if family.package is None:
            raise SystemExit(f"{family.name} is not converted by this version")
        for dtype in (d for d in wanted if d in family.package.dtypes):
            print(_row(args.model.name, dtype, args.model, args.work, args.tokens), flush=True)
        return
    keys = set(args.families.split(",")) if args.families else None
    for family in ALL:
        if family.package is None or (keys is not None and family.key not in keys):
            continue
        if family.fixtures.released:
            spec = family.fixtures.released[0]  # one release per family
            name, folder = spec.key, args.work / f"released-{spec.key}"
            if not (folder / "config.json").is_file():
                write_release(spec, folder)
        elif family.key in FAMILIES:  # no released config.json at hand: the tiny one
            name, folder = f"{family.key} (tiny)", args.work / f"tiny-{family.key}"
            if not (folder / "config.json").is_file():
                build_tiny(family.key, folder)
        else:
            continue
        for dtype in (d for d in wanted if d in family.package.dtypes):
            print(_row(name, dtype, folder, args.work, args.tokens), flush=True)


if __name__ == "__main__":
    main()
