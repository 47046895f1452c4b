"""Chat speed: ChatSession against a raw onnxruntime_genai loop and transformers generate.

Builds a synthetic ~100M-parameter Qwen2.5-VL checkpoint (random weights, offline),
converts it (f32 by default, CPU), and answers the same prompt with the probe image on each
side:
  - raw:        processor → Generator → generate_next_token / TokenizerStream loop, on the
                model as `Runtime` loads it (spinning off);
  - raw, stock: the same loop on `og.Model(folder)` with the runtime's default threads;
  - session:    `ChatSession.send` (template, attachments, streaming callback, stats);
  - worker:     `ChatClient` (the session in a worker process, tokens over JSON lines);
  - transformers: `generate` with a streamer, on the same input ids and pixels.
Every side is greedy and, for f32, produces the same tokens (checked). Runs are interleaved and the
median of `--rounds` is printed, with time to first token (TTFT) and decode tokens/s.

    python benchmarks/chat.py [--dtype f32|f16|int4] [--tokens 128] [--rounds 5]
                              [--work /tmp/mmforge-chat-bench] [--load]

`--load` measures CPU thread settings instead (see `_load.py`): the stock og.Model, the
options `Runtime` applies and other candidates, each on an idle machine and with one
spinning process per core, as ratios against stock in the same round.

Targets (issue #5): session overhead at most 5% against the raw loop; at least 2x
transformers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _load
from _synthetic import build_checkpoint

PROMPT = "Describe this image in detail."


def _raw(model: Any, image: Path, n: int) -> tuple[float, float, list[int]]:
    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    processor = model.create_multimodal_processor()
    start = time.perf_counter()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
    inputs = processor(prompt, images=og.Images.open(str(image)))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=4096, do_sample=False, top_k=1)
    gen = og.Generator(model, params)
    gen.set_inputs(inputs)
    stream = tokenizer.create_stream()
    tokens: list[int] = []
    first = 0.0
    while len(tokens) < n and not gen.is_done():
        gen.generate_next_token()
        token = int(gen.get_next_tokens()[0])
        if not tokens:
            first = time.perf_counter()
        tokens.append(token)
        stream.decode(token)
    end = time.perf_counter()
    return first - start, (len(tokens) - 1) / (end - first), tokens


def _session(session: Any, image: Path, n: int) -> tuple[float, float, list[int]]:
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import GenerationOptions

    session.new_conversation()
    attachments = session.prepare_attachments([(image, IMAGE)])
    turn = session.send(PROMPT, attachments, GenerationOptions(max_new_tokens=n))
    return turn.stats.time_to_first_token_s, turn.stats.decode_tokens_per_s, turn.token_ids


def _worker(client: Any, image: Path, n: int) -> tuple[float, float, list[int]]:
    client.new_conversation()
    start = time.perf_counter()
    first = 0.0
    tokens: list[int] = []
    for event in client.send(PROMPT, [(image, "image")], {"max_new_tokens": n}):
        if event["event"] == "token":
            if not tokens:
                first = time.perf_counter()
            tokens.append(event["id"])
    end = time.perf_counter()
    return first - start, (len(tokens) - 1) / (end - first), tokens


def _transformers(model: Any, ref: Any, n: int) -> tuple[float, float, list[int]]:
    import torch
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):  # type: ignore[misc]
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: Any) -> None:
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    clock = Clock()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **ref.tensors, max_new_tokens=n, do_sample=False, num_beams=1, streamer=clock
        )
    end = time.perf_counter()
    tokens = [int(t) for t in out[0, len(ref.input_ids) :]]
    first = clock.times[1]  # the first put is the prompt
    return first - start, (len(tokens) - 1) / (end - first), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("f32", "f16", "int4"), default="f32")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-chat-bench"))
    parser.add_argument(
        "--load", action="store_true", help="thread settings, idle and busy, against stock"
    )
    args = parser.parse_args()

    from mmforge import resources
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.chat.client import ChatClient
    from mmforge.backend.convert import convert
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference

    args.work.mkdir(parents=True, exist_ok=True)
    ck, pkg = args.work / "checkpoint-100M", args.work / f"package-100M-{args.dtype}"
    if not (ck / "config.json").is_file():
        params = build_checkpoint("100M", ck)
        print(f"built a {params / 1e6:.0f}M-parameter checkpoint", flush=True)
    if not (pkg / "genai_config.json").is_file():
        convert(str(ck), pkg, dtype=args.dtype)
    image = resources.probe_image()
    if args.load:
        _load.run(pkg, image, PROMPT, args.tokens, args.rounds)
        print(f"\npackage: {args.dtype}; {args.tokens} tokens, {args.rounds} rounds")
        return

    import onnxruntime_genai as og

    runtime = Runtime(pkg)
    stock = og.Model(str(pkg))
    session = ChatSession(pkg)
    client = ChatClient(pkg, save=False)
    model = hf_reference.load_model(ck)
    prompt = runtime.prompt(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    )
    arrays = runtime.process(prompt, [image]).arrays
    ref = hf_reference.from_runtime(ck, prompt, arrays)

    sides: dict[str, Callable[[], tuple[float, float, list[int]]]] = {
        "raw onnxruntime_genai": lambda: _raw(runtime.model, image, args.tokens),
        "raw, stock og.Model": lambda: _raw(stock, image, args.tokens),
        "ChatSession": lambda: _session(session, image, args.tokens),
        "ChatClient (worker)": lambda: _worker(client, image, args.tokens),
        "transformers": lambda: _transformers(model, ref, args.tokens),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    tokens: dict[str, list[int]] = {}
    for name, run in sides.items():  # warm-up
        tokens[name] = run()[2]
    for _ in range(args.rounds):
        for name, run in sides.items():
            ttft, tps, _ = run()
            results[name].append((ttft, tps))
    client.close()

    # transformers' list ends with EOS when it stops early; the others drop it.
    reference = tokens["raw onnxruntime_genai"]
    for name, ids in tokens.items():
        same = ids[: len(reference)] == reference
        print(f"{name:>22}: {len(ids)} tokens, {'same' if same else 'DIFFERENT'} as raw")

    print(f"\n{'side':>22} {'TTFT ms':>9} {'decode tok/s':>13} {'vs raw':>8} {'vs HF':>7}")
    med = {
        k: (statistics.median(t for t, _ in v), statistics.median(s for _, s in v))
        for k, v in results.items()
    }
    raw_tps, hf_tps = med["raw onnxruntime_genai"][1], med["transformers"][1]
    for name, (ttft, tps) in med.items():
        print(
            f"{name:>22} {ttft * 1e3:>9.1f} {tps:>13.1f} {tps / raw_tps:>8.3f} {tps / hf_tps:>7.2f}"
        )
    overhead = 1 - med["ChatSession"][1] / raw_tps
    print(f"\npackage: {args.dtype}; transformers runs the f32 checkpoint")
    print(
        f"ChatSession decode overhead vs raw: {overhead * 100:+.1f}% (target ≤ 5%); "
        f"ChatSession vs transformers: {med['ChatSession'][1] / hf_tps:.2f}x (target ≥ 2x)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
