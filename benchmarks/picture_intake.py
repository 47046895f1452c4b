"""What the picture intake costs a 12-megapixel JPEG's first token.

Two ways to hand a package a 4000×3000 quality-90 JPEG, interleaved round by round:
  - raw: the file itself (what mmforge did before the intake: the runtime decodes the
    JPEG with its own decoder and resizes it);
  - intake: `attachments.prepare` as chat does it (PIL decodes it as transformers'
    load_image, resizes it to transformers' size where the package records it, writes a
    lossless PNG), then the runtime reads that PNG.
Each round times, for both, the way from the file to the first generated token: the
preparation, the runtime's processor, the prefill and one decoding step. It prints the
medians and the median of the paired differences (intake minus raw), in milliseconds.

    python benchmarks/picture_intake.py [--package DIR] [--rounds 7] [--size 4000x3000]

Without --package it uses the demo package (a tiny Qwen2.5-VL, built offline if missing),
so the model's own compute is small and the figures are the picture's handling alone.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _jpeg(folder: Path, width: int, height: int) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255) // width, (y * 255) // height, ((x // 40 + y // 40) % 2) * 200], -1)
    rgb = rgb + rng.integers(0, 12, rgb.shape)
    path = folder / "photo.jpg"
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(path, quality=90, subsampling=2)
    return path


def _first_token(runtime: Any, prompt: str, picture: Path) -> None:
    inputs = runtime.process(prompt, [picture])
    runtime.greedy(inputs, 1)


def main() -> None:
    """Run the benchmark and print its figures."""
    from mmforge.backend.attachments import IMAGE, package_intake, prepare
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify.hf_reference import messages_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", default="4000x3000")
    args = parser.parse_args()
    package = args.package or _demo_package()
    width, height = (int(v) for v in args.size.split("x"))
    intake = package_intake(package)
    runtime = Runtime(package)
    prompt = runtime.prompt(messages_for("Describe the picture.", 1, 0))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        photo = _jpeg(folder, width, height)
        timings: dict[str, list[float]] = {"raw": [], "intake": []}
        for n in range(args.rounds + 1):  # the first round warms the caches, not counted
            order = ["raw", "intake"] if n % 2 else ["intake", "raw"]
            for way in order:
                dest = folder / f"{way}-{n}"
                start = time.perf_counter()
                if way == "raw":
                    dest.mkdir()
                    sent = dest / photo.name
                    shutil.copyfile(photo, sent)
                else:
                    sent = prepare(photo, IMAGE, dest, intake).path
                _first_token(runtime, prompt, sent)
                if n:
                    timings[way].append((time.perf_counter() - start) * 1000)
                shutil.rmtree(dest)
    raw, taken = timings["raw"], timings["intake"]
    paired = [b - a for a, b in zip(raw, taken, strict=True)]
    print(f"package: {package} ({'sizing recorded' if intake and intake.sizing else 'no sizing'})")
    print(f"picture: {width}×{height} JPEG, {args.rounds} interleaved rounds")
    print(f"first token, raw file  : median {statistics.median(raw):7.1f} ms")
    print(f"first token, intake    : median {statistics.median(taken):7.1f} ms")
    spread = f"{min(paired):+.1f} … {max(paired):+.1f}"
    print(f"intake - raw (paired)  : median {statistics.median(paired):+7.1f} ms ({spread})")


def _demo_package() -> Path:
    from mmforge.backend.convert import convert
    from mmforge.backend.library import is_package
    from mmforge.backend.tiny.demo import demo_checkpoint, demo_package_folder

    folder = demo_package_folder()
    if not is_package(folder) or '"pictures"' not in (folder / "mmforge_manifest.json").read_text():
        convert(str(demo_checkpoint()), folder, dtype="f32")
    return folder


if __name__ == "__main__":
    main()
