"""Serving speed: `mmforge serve` through the official client against the in-process session.

Builds a synthetic Qwen2.5-VL checkpoint (random weights, offline), converts it, starts
`mmforge serve` on it as its own process (127.0.0.1, a free port), and answers the same
greedy request with the probe picture on each side, interleaved:
  - session: `ChatSession.prepare_attachments` + `send` in this process;
  - server:  `openai` client, streamed, the picture as a data: URL.
Both sides are timed the same way, by the wall clock around the whole request: time to
first token (TTFT) and decode tokens/s after the first token. The server's tokens are
checked equal to the session's (`return_token_ids`). Then `--clients` clients stream at
once: their total tokens/s and their median TTFT (which includes waiting in the queue).

    python benchmarks/serve.py [--size 100M] [--dtype f32] [--tokens 128] [--rounds 5]
                               [--clients 4] [--work /tmp/mmforge-serve-bench]

Goal (issue #33): the server within 5 % of the session on tokens/s and TTFT.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _synthetic import SIZES, build_checkpoint

PROMPT = "Describe this image in detail."


def _session(session: Any, image: Path, n: int) -> tuple[float, float, list[int]]:
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import GenerationOptions

    times: list[float] = []
    session.new_conversation()
    start = time.perf_counter()
    attachments = session.prepare_attachments([(image, IMAGE)])
    turn = session.send(
        PROMPT,
        attachments,
        GenerationOptions(max_new_tokens=n),
        on_token=lambda text, token: times.append(time.perf_counter()),
    )
    end = time.perf_counter()
    return times[0] - start, (len(times) - 1) / (end - times[0]), turn.token_ids


def _server(client: Any, model: str, url: str, n: int) -> tuple[float, float, list[int]]:
    picture = {"type": "image_url", "image_url": {"url": url}}
    messages = [{"role": "user", "content": [picture, {"type": "text", "text": PROMPT}]}]
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=n,
        temperature=0,
        stream=True,
        extra_body={"return_token_ids": True},
    )
    first = 0.0
    ids: list[int] = []
    for chunk in stream:
        for choice in chunk.choices:
            got = (choice.model_extra or {}).get("token_ids") or []
            if got and not ids:
                first = time.perf_counter()
            ids += got
    end = time.perf_counter()
    return first - start, (len(ids) - 1) / (end - first), ids


def _concurrent(
    client: Any, model: str, url: str, n: int, clients: int
) -> tuple[float, float, int]:
    """Total tokens/s over the wall time, the median TTFT, and the tokens in all."""
    results: list[tuple[float, float, list[int]]] = []
    lock = threading.Lock()

    def one() -> None:
        r = _server(client, model, url, n)
        with lock:
            results.append(r)

    start = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    total = sum(len(r[2]) for r in results)
    return total / wall, statistics.median(r[0] for r in results), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="100M")
    parser.add_argument("--dtype", choices=("f32", "f16", "int4"), default="f32")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-serve-bench"))
    args = parser.parse_args()

    import openai

    from mmforge import resources
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.convert import convert

    args.work.mkdir(parents=True, exist_ok=True)
    ck = args.work / f"checkpoint-{args.size}"
    pkg = args.work / f"package-{args.size}-{args.dtype}"
    if not (ck / "config.json").is_file():
        params = build_checkpoint(args.size, ck)
        print(f"built a {params / 1e6:.0f}M-parameter checkpoint", flush=True)
    if not (pkg / "genai_config.json").is_file():
        convert(str(ck), pkg, dtype=args.dtype)
    image = resources.probe_image()
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()

    argv = [sys.executable, "-m", "mmforge.app", "serve", str(pkg), "--port", "0", "--events"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        listening = json.loads(server.stdout.readline())
        threading.Thread(target=server.stdout.read, daemon=True).start()  # drain the events
        client = openai.OpenAI(base_url=listening["url"], api_key="-", max_retries=0)
        model = listening["model"]
        session = ChatSession(pkg)
        sides = {
            "session (in process)": lambda: _session(session, image, args.tokens),
            "server (openai client)": lambda: _server(client, model, url, args.tokens),
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        tokens = {name: run()[2] for name, run in sides.items()}  # warm-up
        for _ in range(args.rounds):
            for name, run in sides.items():
                ttft, tps, _ = run()
                results[name].append((ttft, tps))
        together = [
            _concurrent(client, model, url, args.tokens, args.clients) for _ in range(args.rounds)
        ]
        session.close()
    finally:
        server.terminate()
        server.wait(60)

    print(f"\n{args.size} {args.dtype}, {args.tokens} greedy tokens, median of {args.rounds}")
    print(f"{'side':<26}{'TTFT ms':>10}{'tok/s':>10}")
    medians = {}
    for name, rows in results.items():
        ttft = statistics.median(r[0] for r in rows)
        tps = statistics.median(r[1] for r in rows)
        medians[name] = (ttft, tps)
        print(f"{name:<26}{ttft * 1000:>10.1f}{tps:>10.1f}")
    (s_ttft, s_tps), (v_ttft, v_tps) = medians.values()
    print(
        f"server against session: TTFT {100 * (v_ttft / s_ttft - 1):+.1f} %, "
        f"tokens/s {100 * (v_tps / s_tps - 1):+.1f} %"
    )
    same = len(set(map(tuple, tokens.values()))) == 1
    print(f"same tokens on both sides: {same}")
    tps = statistics.median(t[0] for t in together)
    ttft = statistics.median(t[1] for t in together)
    print(
        f"{args.clients} clients at once: {tps:.1f} tok/s in all, median TTFT "
        f"{ttft * 1000:.0f} ms (queued one after another)"
    )


if __name__ == "__main__":
    main()
