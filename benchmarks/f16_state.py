"""What carrying the Gated DeltaNet state in float32 changes in an f16 package's long decode.

Builds release-shaped Qwen3.5 / Qwen3.6 checkpoints (backend/tiny/release.py), converts
each to f32 (the baseline) and to f16 twice, with `graphs.float32_recurrent_state` (the
state carried between steps in float32, as transformers' cache holds it) and without it
(float16), then feeds each package, through ONNX Runtime GenAI one token at a time, the
same prompt and `--steps` seeded random tokens, and compares each step's logits with
transformers' (float32, one forward over the whole sequence). transformers itself run in
float16 is the yardstick of what float16 arithmetic costs. Prints, per row, how many
steps' top-1 token agrees and the largest logit difference in each stretch of steps:

    python benchmarks/f16_state.py [--steps 256] [--release qwen3_5-0.8b qwen3_6-35b-a3b]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from _ablation import converted

STRETCHES = (1, 16, 64, 128, 256, 512, 1024)


def _runtime_logits(folder: Path, prompt_ids: list[int], forced: list[int]) -> Any:
    import numpy as np

    from mmforge.backend.runtime import Runtime

    rt = Runtime(folder)
    og = rt.og
    params = og.GeneratorParams(rt.model)
    params.set_search_options(max_length=len(prompt_ids) + len(forced) + 1)
    generator = og.Generator(rt.model, params)
    generator.append_tokens(np.asarray([prompt_ids], dtype=np.int32))
    rows = []
    for token in forced:
        rows.append(np.asarray(generator.get_logits(), dtype=np.float32).reshape(-1))
        generator.append_tokens(np.asarray([[token]], dtype=np.int32))
    return np.stack(rows)


def _reference_logits(checkpoint: Path, ids: list[int], first: int, half: bool = False) -> Any:
    import torch

    from mmforge.backend.verify import hf_reference

    model = hf_reference.load_model(checkpoint)
    if half:
        model = model.half()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)))
    return out.logits[0, first - 1 : len(ids) - 1].float().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--release", nargs="+", default=["qwen3_5-0.8b", "qwen3_6-35b-a3b"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-f16-state"))
    args = parser.parse_args()
    import numpy as np

    from mmforge.backend.families import ALL
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.tiny.release import write_release
    from mmforge.backend.verify import hf_reference

    released = {r.key: r for f in ALL for r in f.fixtures.released}
    for key in args.release:
        checkpoint = args.work / key
        if not (checkpoint / "config.json").is_file():
            write_release(released[key], checkpoint)
        packages = {
            "float32 state": converted(checkpoint, args.work / f"{key}-f16-float32", "f16"),
            "float16 state": converted(
                checkpoint, args.work / f"{key}-f16-float16", "f16", "float32_recurrent_state"
            ),
            "f32 package (baseline)": converted(checkpoint, args.work / f"{key}-f32", "f32"),
        }
        rt = Runtime(next(iter(packages.values())))
        prompt = rt.prompt(hf_reference.messages_for("Tell me a long story.", n_images=0))
        prompt_ids = rt.process(prompt).input_ids
        vocab = _vocab(checkpoint_package := next(iter(packages.values())))
        del rt, checkpoint_package
        rng = np.random.default_rng(0)
        forced = [int(t) for t in rng.integers(0, vocab, args.steps)]
        reference = _reference_logits(checkpoint, prompt_ids + forced, len(prompt_ids))
        print(f"{key}: {len(prompt_ids)} prompt tokens, then {args.steps} forced steps")
        for label, folder in packages.items():
            _show(label, _runtime_logits(folder, prompt_ids, forced), reference, args.steps)
        torch_f16 = _reference_logits(checkpoint, prompt_ids + forced, len(prompt_ids), half=True)
        _show("transformers in float16 (the yardstick)", torch_f16, reference, args.steps)


def _show(label: str, got: Any, reference: Any, steps: int) -> None:
    import numpy as np

    got = got[:, : reference.shape[1]].astype(np.float32)
    diff = np.abs(got - reference).max(axis=1)
    agree = (got.argmax(axis=1) == reference.argmax(axis=1)).mean()
    spans, start = [], 0
    for end in STRETCHES:
        if start >= steps:
            break
        spans.append(f"{start + 1}-{min(end, steps)}: {diff[start:end].max():.4f}")
        start = end
    print(f"  {label}: top-1 {agree:.1%}; max |Δlogit| by steps  " + "  ".join(spans))


def _vocab(folder: Path) -> int:
    import json

    return int(json.loads((folder / "genai_config.json").read_text())["model"]["vocab_size"])


if __name__ == "__main__":
    main()
