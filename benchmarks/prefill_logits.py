"""First token with the decoder's output layer on the last position only, against all.

backend/last_logits.py makes every package's decoder compute the last position's
logits alone (the runtime reads no other). This measures what that saves: the synthetic
~100M Qwen2.5-VL checkpoint (benchmarks/_synthetic.py, vocabulary 32,000) converted with
pictures of about 1,000 image tokens, asked about a 1008×784 picture with about 1,000
words of text (about 2,100 prompt tokens); the same package with its decoder unpruned
(`last_logits.unpruned`, every other file hard-linked) is the baseline. Each round loads
neither (both models stay loaded) and times processor + prefill + the first token on
each, interleaved; the medians and their ratio are printed, and the first tokens are
checked equal.

    python benchmarks/prefill_logits.py [--dtype f32|int4] [--rounds 5] [--work DIR]

A benchmark, not a test: these machines are noisy, so read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from _synthetic import build_checkpoint


def _inputs(work: Path, dtype: str) -> tuple[Path, Path, str]:
    """The package (pictures up to ~1,000 tokens), a 1008×784 picture and ~1,000 words.

    The inputs of `benchmarks/chat.py --load --long`, made the same way.
    """
    from chat import _long_inputs

    checkpoint = work / "checkpoint-100M"
    if not (checkpoint / "config.json").is_file():
        build_checkpoint("100M", checkpoint)
    _, package, picture, text = _long_inputs(checkpoint, work, dtype)
    return package, picture, text


def _unpruned_copy(package: Path, into: Path) -> Path:
    """The package with its decoder computing every position's logits."""
    from mmforge.backend.last_logits import unpruned

    whole = unpruned(package / "decoder.onnx")
    if whole is None:
        raise SystemExit(f"{package} was converted before decoders were pruned: convert again")
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    for path in package.iterdir():
        if path.is_file() and path.name != "decoder.onnx":
            os.link(path, into / path.name)
    import onnx

    onnx.save(whole, str(into / "decoder.onnx"))
    return into


def _first_token(model: Any, picture: Path, text: str) -> tuple[float, int, int]:
    """(seconds to the first token, that token, prompt length): processor, prefill, sample."""
    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    processor = model.create_multimodal_processor()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    start = time.perf_counter()
    prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
    inputs = processor(prompt, images=og.Images.open(str(picture)))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=4096, do_sample=False, top_k=1)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    generator.generate_next_token()
    token = int(generator.get_next_tokens()[0])
    took = time.perf_counter() - start
    return took, token, int(inputs["input_ids"].as_numpy().size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("f32", "int4"), default="f32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-prefill-bench"))
    args = parser.parse_args()
    import onnxruntime_genai as og

    args.work.mkdir(parents=True, exist_ok=True)
    package, picture, text = _inputs(args.work, args.dtype)
    baseline = _unpruned_copy(package, args.work / f"package-{args.dtype}-unpruned")
    models = {"last position": og.Model(str(package)), "every position": og.Model(str(baseline))}
    times: dict[str, list[float]] = {name: [] for name in models}
    tokens: dict[str, set[int]] = {name: set() for name in models}
    length = 0
    for model in models.values():  # a warm-up each
        _first_token(model, picture, text)
    for _ in range(args.rounds):
        for name, model in models.items():
            took, token, length = _first_token(model, picture, text)
            times[name].append(took)
            tokens[name].add(token)
    print(f"{args.dtype}, {length} prompt tokens, {args.rounds} interleaved rounds")
    for name in models:
        print(f"  {name:15s} first token {statistics.median(times[name]) * 1000:7.0f} ms")
    ratio = statistics.median(times["last position"]) / statistics.median(times["every position"])
    print(f"  ratio (last / every): {ratio:.2f}")
    same = tokens["last position"] == tokens["every position"] and len(tokens["last position"]) == 1
    print(f"  same first token: {same}")


if __name__ == "__main__":
    main()
