"""Inspect's package-size estimate against the package a conversion writes, per family.

For each family's tiny checkpoint (and its release-shaped one with `--released`), this
inspects the folder, converts it at f32 and int4, and prints the estimate, the package's
bytes on disk and their ratio, with the package's largest files. On tiny checkpoints the
weights are a small part of a package, so the graphs, the weights report and the copied
tokenizer files dominate: `GRAPH_BYTES`, `DECODER_GRAPH_BYTES` and
`REPORT_BYTES_PER_TENSOR` in backend/inspect.py come from these figures.

    python benchmarks/package_sizes.py [--families qwen2_5_vl,phi4mm] [--work /tmp/sizes]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

DTYPES = ("f32", "int4")


def main() -> None:
    from mmforge.backend.convert import convert
    from mmforge.backend.families import ALL
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.tiny import build_tiny

    tested = [f.key for f in ALL if f.fixtures.tiny is not None and f.reference is not None]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(tested))
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-package-sizes"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    worst = 0.0
    print(f"{'family':<18} {'dtype':<5} {'estimate':>12} {'on disk':>12} {'ratio':>6}")
    for key in args.families.split(","):
        tiny = args.work / key
        if not (tiny / "config.json").is_file():
            build_tiny(key, tiny)
        estimate = inspect_source(str(tiny)).sizes.package_bytes
        for dtype in DTYPES:
            if dtype not in estimate:
                continue
            out = args.work / f"{key}-{dtype}"
            shutil.rmtree(out, ignore_errors=True)
            convert(str(tiny), out, dtype=dtype)
            files = {p: p.stat().st_size for p in out.rglob("*") if p.is_file()}
            actual = sum(files.values())
            ratio = estimate[dtype] / actual
            worst = max(worst, abs(ratio - 1))
            print(f"{key:<18} {dtype:<5} {estimate[dtype]:>12,} {actual:>12,} {ratio:>6.2f}")
            largest = sorted(files.items(), key=lambda kv: -kv[1])[:4]
            print("      largest: " + ", ".join(f"{p.name} {n:,}" for p, n in largest))
            shutil.rmtree(out, ignore_errors=True)
    print(f"largest difference: {worst:.0%}")


if __name__ == "__main__":
    main()
