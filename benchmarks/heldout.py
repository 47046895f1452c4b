"""Each family on a tiny checkpoint the test suite never builds: convert, verify, chat.

The suite's tiny checkpoints are built with seed 0 at fixed sizes; a conversion could fit
them by accident. This builds each family's held-out checkpoint instead: another seed,
noised vectors, and the sizes its expect.py names under `held_out` (other widths, depths,
expert counts). For each it prints:
  - f32 and int4: verify's verdict (int4 against transformers holding the package's own
    rounded weights) and the greedy tokens that match;
  - chat: a ChatSession asked about a JPEG photo (4:2:0, 900×600), 16 greedy tokens,
    against transformers' greedy answer to the same ids and pixels.

    python benchmarks/heldout.py [--families qwen2_vl,qwen3_vl_moe] [--work /tmp/heldout]
        [--processor '{"do_image_splitting": true}']

`--processor` sets image processor settings in the held-out checkpoint's
preprocessor_config.json (Idefics2 with its image splitting, say).

A family's expected verdict is its expect.py's; a row that differs ends with "<- differs".
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import time
from pathlib import Path

SEED = 7
TOKENS = 32
CHAT_TOKENS = 16


def _checkpoint(key: str, work: Path, processor: dict[str, object]) -> Path:
    import json

    from mmforge.backend.families import ALL
    from mmforge.backend.tiny.build import with_config, write_tiny

    family = next(f for f in ALL if f.key == key)
    spec = family.fixtures.tiny
    if spec is None:
        raise SystemExit(f"{key} has no tiny checkpoint")
    held = with_config(spec, dict(family.fixtures.expect.held_out))
    folder = write_tiny(held, work / f"{key}-heldout", seed=SEED).folder
    if processor:
        path = folder / "preprocessor_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **processor}, indent=2))
    return folder


def _verify_row(key: str, checkpoint: Path, dtype: str, work: Path, expected: str) -> str:
    from mmforge.backend.convert import convert
    from mmforge.backend.families import ALL
    from mmforge.backend.verify import verify

    out = work / f"{key}-{dtype}"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    # A family that converts only as an approximation is measured as one (APPROXIMATE).
    approximate = any(f.key == key and f.approximation is not None for f in ALL)
    convert(str(checkpoint), out, dtype=dtype, approximate=approximate)
    report = verify(out, str(checkpoint), tokens=TOKENS)
    seconds = time.perf_counter() - start
    verdict = report.verdict
    if report.first_divergent_stage:
        verdict += f" at {report.first_divergent_stage}"
    tokens = f"{report.tokens['matched']}/{report.tokens['total']}"
    flag = "" if report.verdict == expected else "  <- differs"
    return f"{key:<16} {dtype:<5} {verdict:<32} {tokens:>7} {seconds:>5.0f}s{flag}"


def _chat_row(key: str, checkpoint: Path, work: Path) -> str:
    import numpy as np

    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.verify import hf_reference
    from tests.images import user_pictures

    package = work / f"{key}-f32"
    photo = user_pictures(work / "pictures", big=(900, 600))["jpeg"]
    session = ChatSession(package)
    answer = session.send(
        "Describe this.",
        session.prepare_attachments([(photo, IMAGE)]),
        GenerationOptions(max_new_tokens=CHAT_TOKENS),  # greedy
    )
    ids = session.context_ids(1)
    assert ids is not None
    held = [a.path for m in session.messages[:1] for a in m.attachments]
    inputs = session.runtime.process(session.prompt_text(1), held, [])
    arrays = dict(inputs.arrays)
    arrays["input_ids"] = np.asarray([ids], dtype=np.int64)
    reference = hf_reference.from_runtime(checkpoint, session.prompt_text(1), arrays)
    hf = hf_reference.greedy_generate(
        hf_reference.load_model(checkpoint), reference, len(answer.token_ids)
    )
    eos = set(session.info.eos_token_ids)
    ours = [t for t in answer.token_ids if t not in eos]
    theirs = [t for t in hf if t not in eos][: len(ours)]
    same = sum(1 for a, b in zip(ours, theirs, strict=False) if a == b)
    flag = "" if ours == theirs else "  <- differs"
    # A random model may generate an image or audio placeholder itself; past it neither
    # side's answer means anything (verify calls such a run AMBIGUOUS, not FAIL).
    read = Checkpoint.read(checkpoint)
    kinds = ("image_token_id", "audio_token_id", "video_token_id")
    placeholders = {v for k, v in read.family.profile.token_ids(read.cfg).items() if k in kinds}
    split = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    made = [i for i, t in enumerate(ours) if t in placeholders]
    if flag and split is not None and made and made[0] < split:
        flag = f"  (both generated a placeholder at step {made[0]}: random weights)"
    return f"{key:<16} chat  {'photo, greedy':<32} {same:>3}/{len(ours):<3} {'':>6}{flag}"


def main(argv: list[str] | None = None) -> int:
    """Print the table for the families asked for (default: every tested family)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--families", default="", help="comma-separated family keys")
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-heldout"))
    parser.add_argument(
        "--processor", default="{}", help="image processor settings (a JSON object) to set"
    )
    args = parser.parse_args(argv)
    import json

    processor = json.loads(args.processor)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.images
    from tests.backend.families import TESTED, verdict

    keys = [k for k in args.families.split(",") if k] or TESTED
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"{'family':<16} {'dtype':<5} {'verdict':<32} {'tokens':>7} {'time':>6}")
    for key in keys:
        checkpoint = _checkpoint(key, args.work, processor)
        for dtype in ("f32", "int4"):
            print(_verify_row(key, checkpoint, dtype, args.work, verdict(key)), flush=True)
            gc.collect()
        print(_chat_row(key, checkpoint, args.work), flush=True)
        for dtype in ("f32", "int4"):
            shutil.rmtree(args.work / f"{key}-{dtype}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
