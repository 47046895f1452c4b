"""The CPU thread policy on an idle and on a busy machine (`chat.py --load`).

Sides, each answering the same prompt with the probe picture (greedy):
  - stock og.Model: the raw generator loop on `og.Model(folder)`, ONNX Runtime GenAI's own
    threads (half the logical CPUs) with spinning on; every ratio is against it;
  - stock again (A/A): a second stock og.Model, the same configuration: how far its ratio
    strays from 1 is the noise, and a side counts as slower than stock only beyond it;
  - ChatSession: the chat engine with mmforge's thread policy (`backend.threads`), a new
    conversation each round, so the plan is chosen afresh at every turn;
  - transformers: `generate` on the f32 checkpoint with torch's own threads.

"Idle" is checked before each idle half-round: the benchmark waits (up to a minute) until
other processes use at most `threads.FREE_SHARE` of the cores, and prints what they used.
"Busy" is one pure-Python spin loop per usable core, started for the busy half of each
round and killed at its end (they also exit if the benchmark dies). Rounds alternate the
conditions and rotate the order of the sides; each figure is divided by stock's in the
same round and condition, and the median of those ratios is printed with its range.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Runs until killed, or until its parent (this benchmark) is gone.
_SPIN = """
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""
MIN_NOISE = 0.03  # never judge on a band narrower than this, whatever the control shows
STOCK, CONTROL, SESSION, HF = "stock og.Model", "stock again (A/A)", "ChatSession", "transformers"

Run = Callable[[], tuple[float, float]]  # () -> (TTFT s, decode tokens/s)


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pin(cores: int) -> None:
    """Run on the first `cores` usable CPUs from here on, as `taskset` would."""
    cpus = sorted(os.sched_getaffinity(0))
    if not 1 <= cores <= len(cpus):
        raise SystemExit(f"--cores must be 1..{len(cpus)}")
    os.sched_setaffinity(0, cpus[:cores])


@contextmanager
def busy(n: int) -> Iterator[None]:
    """`n` spinning processes while the block runs; all of them ended after it."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]
    try:
        time.sleep(0.5)  # let them start and reach the spin loop
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@contextmanager
def idle(limit_s: float = 60.0) -> Iterator[float]:
    """Wait until other processes leave the cores free; yields the cores they used."""
    from mmforge.backend.threads import FREE_SHARE, CpuWatch

    watch = CpuWatch()
    deadline = time.monotonic() + limit_s
    while True:
        time.sleep(0.5)
        others = watch.others()
        if others is None:
            break
        if others <= FREE_SHARE * watch.cores() or time.monotonic() > deadline:
            if others > FREE_SHARE * watch.cores():
                print(f"  (not idle after {limit_s:.0f} s: others use {others:.2f} cores)")
            break
        watch.look()
    yield others if others is not None else float("nan")


def raw_loop(model: Any, image: Path, prompt_text: str, n: int) -> tuple[float, float]:
    """The runtime's own loop: processor, generator, token stream; (TTFT s, tokens/s)."""
    import json

    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    processor = model.create_multimodal_processor()
    start = time.perf_counter()
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt_text}]}
    ]
    prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=4096, do_sample=False, top_k=1)
    gen = og.Generator(model, params)
    gen.set_inputs(processor(prompt, images=og.Images.open(str(image))))
    stream = tokenizer.create_stream()
    count, first = 0, 0.0
    while count < n and not gen.is_done():
        gen.generate_next_token()
        stream.decode(int(gen.get_next_tokens()[0]))
        if count == 0:
            first = time.perf_counter()
        count += 1
    end = time.perf_counter()
    return first - start, (count - 1) / (end - first)


def run(sides: dict[str, Run], rounds: int, session: Any) -> None:
    """Measure every side idle and busy, and print the ratios against stock."""
    n = usable_cores()
    conditions = ("idle", f"busy (+{n} spinning processes)")
    results: dict[str, dict[str, list[tuple[float, float]]]] = {
        c: {label: [] for label in sides} for c in conditions
    }
    others: list[float] = []
    spinning: dict[str, list[bool]] = {c: [] for c in conditions}
    for go in sides.values():  # warm-up
        go()
    labels = list(sides)
    done = 0
    previous = signal.signal(signal.SIGTERM, _stop)  # `timeout` ends the rounds early
    try:
        for r in range(rounds):
            order = labels[r % len(labels) :] + labels[: r % len(labels)]
            for condition in conditions if r % 2 == 0 else conditions[::-1]:
                context = busy(n) if condition.startswith("busy") else idle()
                with context as seen:
                    if condition == "idle":
                        others.append(seen)
                    for label in order:
                        results[condition][label].append(sides[label]())
                        if label == SESSION:
                            spinning[condition].append(bool(session.runtime.plan.spinning))
            done += 1
            print(f"round {done}/{rounds} done", flush=True)
    except _Stopped:
        print(f"stopped: the table covers the {done} complete round(s)", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if done:
        for by_label in results.values():
            for runs in by_label.values():
                del runs[done:]
        _report(results, others[:done], spinning)


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


def _report(
    results: dict[str, dict[str, list[tuple[float, float]]]],
    others: list[float],
    spinning: dict[str, list[bool]],
) -> None:
    noise = MIN_NOISE
    ratios: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for condition, by_label in results.items():
        base = by_label[STOCK]
        ratios[condition] = {
            label: (
                [b[0] / x[0] for x, b in zip(runs, base, strict=True)],  # >1: sooner
                [x[1] / b[1] for x, b in zip(runs, base, strict=True)],  # >1: faster
            )
            for label, runs in by_label.items()
        }
        noise = max(noise, abs(statistics.median(ratios[condition][CONTROL][1]) - 1))
    print(
        "\nRatios are this side / stock in the same round and condition (median of rounds, "
        "[min-max]); above 1 is faster. TTFT ratio is stock's TTFT / this side's."
    )
    print(
        f"Noise band: ±{noise * 100:.1f}% (the A/A control's largest deviation of its median "
        "decode ratio from 1, floor 3%); SLOWER marks a median decode ratio below it"
    )
    if others:
        print(
            f"idle rounds: other processes used {statistics.median(others):.2f} cores "
            f"(median; max {max(others):.2f}) before each"
        )
    for condition, by_label in results.items():
        spun = spinning[condition]
        print(f"\n{condition}: ChatSession's threads spun in {sum(spun)} of {len(spun)} rounds")
        print(
            f"{'side':>20} {'TTFT ms':>8} {'tok/s':>7} {'TTFT vs stock':>14} "
            f"{'decode vs stock [min-max]':>26} {'vs HF':>6}"
        )
        hf = statistics.median(x[1] for x in by_label[HF])
        for label, runs in by_label.items():
            ttft_r, tps_r = ratios[condition][label]
            ttft = statistics.median(x[0] for x in runs)
            tps = statistics.median(x[1] for x in runs)
            verdict = " SLOWER" if statistics.median(tps_r) < 1 - noise else ""
            print(
                f"{label:>20} {ttft * 1e3:>8.0f} {tps:>7.1f} {statistics.median(ttft_r):>14.2f} "
                f"{statistics.median(tps_r):>9.2f} [{min(tps_r):.2f}-{max(tps_r):.2f}]"
                f"{verdict:7} {tps / hf:>6.2f}"
            )
    sys.stdout.flush()
