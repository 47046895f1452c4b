"""What recording a checkpoint's digest costs a conversion, on a real model size.

Builds (or reuses) scale.py's checkpoint with the released shapes of
Qwen2.5-VL-3B-Instruct (7.5 GB of bfloat16 in two shards), then times, each twice (the
second with the files in the page cache):
  - the digest a conversion records (backend/checkpoint_digest.py): config.json's
    settings, and every tensor's dtype, shape and eight 4 KiB windows of its bytes;
  - hashing every byte of the weights instead (sha256 over each shard, read in 16 MB
    chunks), the other way to identify them;
  - sha256 alone over bytes already in memory, 1 GB: what hashing the weights as the
    conversion reads them would add, per GB.
It also checks that a copy of the checkpoint in other shards, under the names newer
transformers save, has the same digest.

    python benchmarks/digest.py [--work /tmp/mmforge-scale] [--skip-copy]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any


def _timed(label: str, fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args)
    seconds = time.perf_counter() - start
    print(f"{label:<44} {seconds:8.3f} s")
    return result, seconds


def _full_sha256(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            while chunk := f.read(16 * 2**20):
                h.update(chunk)
    return h.hexdigest()


def _resharded_copy(folder: Path, out: Path) -> None:
    """The checkpoint in three shards, under transformers 5's Qwen2.5-VL names."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    names: list[tuple[Path, str]] = []
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            names += [(path, n) for n in f.keys()]  # noqa: SIM118 - safe_open has no iterator
    third = len(names) // 3 + 1
    for i in range(3):
        tensors = {}
        for path, name in names[i * third : (i + 1) * third]:
            with safe_open(path, "pt") as f:
                new = name.replace("model.", "model.language_model.", 1)
                tensors[new.replace("visual.", "model.visual.", 1)] = f.get_tensor(name)
        save_file(tensors, out / f"model-{i + 1:05d}-of-00003.safetensors")
        del tensors
    (out / "config.json").write_text(
        json.dumps(
            {**json.loads((folder / "config.json").read_text()), "transformers_version": "x"}
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-scale"))
    parser.add_argument("--skip-copy", action="store_true")
    args = parser.parse_args()
    from scale import build

    from mmforge.backend.checkpoint_digest import checkpoint_digest

    ck = args.work / "qwen2_5_vl-3b-shapes"
    if not (ck / "config.json").is_file():
        _timed("build the 3B-shaped checkpoint", build, ck, "qwen2_5_vl-3b")
    size = sum(p.stat().st_size for p in ck.glob("*.safetensors"))
    tensors = len(json.loads((ck / "model.safetensors.index.json").read_text())["weight_map"])
    print(f"checkpoint: {size / 1e9:.2f} GB in {tensors} tensors, {os.cpu_count()} cores")
    for run in ("first", "again"):
        digest, _ = _timed(f"recorded digest (config + samples), {run}", checkpoint_digest, ck)
    _timed("sha256 of every weight byte, read from disk", _full_sha256, ck)
    block = os.urandom(2**28)
    h = hashlib.sha256()
    _, seconds = _timed("sha256 of 1 GB in memory", lambda: [h.update(block) for _ in range(4)])
    print(f"  as the conversion reads them: {size / 1e9 * seconds:.1f} s for {size / 1e9:.1f} GB")
    print(json.dumps(digest, indent=1))
    if not args.skip_copy:
        copy = args.work / "qwen2_5_vl-3b-resharded"
        if not (copy / "config.json").is_file():
            _timed("write a resharded, renamed copy", _resharded_copy, ck, copy)
        other = checkpoint_digest(copy)
        print("the resharded, renamed copy has the same digest:", other == digest)


if __name__ == "__main__":
    main()
