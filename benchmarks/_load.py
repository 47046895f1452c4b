"""Decode speed of CPU thread settings on an idle and on a busy machine (`chat.py --load`).

Each setting is a `session_options` overlay on the decoder (the embedding and vision
sessions of a package that sets no options of their own inherit it, as they do under
`Runtime`). "Busy" means one pure-Python spin loop per usable core, started by this
benchmark for the busy half of each round and killed at its end; a spinner also exits on
its own when this process is gone, so nothing is left running even after a kill.

Every round runs every setting in both conditions (the order of settings rotated and the
conditions alternated from round to round), and each figure is compared with the stock
`og.Model` of the *same* round and condition; the medians of those paired ratios are
printed, with their spread. A second copy of the stock thread count, set explicitly, is
an identical configuration (an A/A control): how far its ratio strays from 1 is the
noise, and a setting counts as slower than stock only beyond it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
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


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def stock_threads() -> int:
    """ONNX Runtime GenAI 0.18's own intra-op default: half the hardware threads, 1..16."""
    return min(16, max(1, (os.cpu_count() or 2) // 2))


def settings(runtime_options: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """The candidate decoder session options by label; None is the stock og.Model."""
    n, s = usable_cores(), stock_threads()
    off = {"session.intra_op.allow_spinning": "0"}
    candidates: dict[str, dict[str, Any] | None] = {
        "stock og.Model": None,
        f"{s} thread(s), set (A/A)": {"intra_op_num_threads": s},
        f"{s} threads, no spinning": {"intra_op_num_threads": s, **off},
        f"{n} threads, spinning (old)": {"intra_op_num_threads": n},
        f"{n} threads, no spinning": {"intra_op_num_threads": n, **off},
        f"{n - 1} threads, spinning": {"intra_op_num_threads": n - 1},
        f"{n - 1} threads, no spinning": {"intra_op_num_threads": n - 1, **off},
    }
    out: dict[str, dict[str, Any] | None] = {}
    seen: list[tuple[Any, ...]] = []
    for label, options in candidates.items():
        if options is not None:
            key = _key(options)
            if int(key[0]) < 1 or key in seen:
                continue  # 0 threads, or the same configuration as one already listed
            seen.append(key)
            if key == _key(runtime_options):
                label += " <- Runtime"
        out[label] = options
    if _key(runtime_options) not in seen:
        out["Runtime"] = runtime_options
    return out


def _key(options: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two settings differ: one thread has no pool, so no pool options count."""
    threads = int(options.get("intra_op_num_threads", stock_threads()))
    if threads <= 1:
        return (threads,)
    return threads, str(options.get("session.intra_op.allow_spinning", "1"))


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


def _load_model(folder: Path, options: dict[str, Any] | None) -> Any:
    import onnxruntime_genai as og

    if options is None:
        return og.Model(str(folder))
    config = og.Config(str(folder))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    return og.Model(config)


def _run(model: Any, image: Path, prompt_text: str, n: int) -> tuple[float, float, float]:
    """(TTFT s, decode tokens/s, CPU seconds per wall second while decoding)."""
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
    count, first, cpu = 0, 0.0, 0.0
    while count < n and not gen.is_done():
        gen.generate_next_token()
        stream.decode(int(gen.get_next_tokens()[0]))
        if count == 0:
            first, cpu = time.perf_counter(), time.process_time()
        count += 1
    end, cpu = time.perf_counter(), time.process_time() - cpu
    return first - start, (count - 1) / (end - first), cpu / (end - first)


def run(folder: Path, image: Path, prompt_text: str, tokens: int, rounds: int) -> None:
    """Measure every setting idle and busy, and print the table of ratios against stock."""
    from mmforge.backend.runtime import cpu_session_options

    runtime_options = cpu_session_options(folder)
    table = settings(runtime_options)
    n = usable_cores()
    print(f"{n} usable cores; stock og.Model uses {stock_threads()} intra-op thread(s)")
    print(f"Runtime's decoder options for this package: {runtime_options}")
    models = {label: _load_model(folder, options) for label, options in table.items()}
    conditions = ("idle", f"busy (+{n} spinning processes)")
    # results[condition][label] = [(ttft, tps, cpu share), ...], one entry per round
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        c: {label: [] for label in table} for c in conditions
    }
    load: dict[str, list[float]] = {c: [] for c in conditions}
    for model in models.values():  # warm-up
        _run(model, image, prompt_text, tokens)
    labels = list(table)
    done = 0
    # `timeout` (SIGTERM) ends the rounds early: the table then covers the rounds done.
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        for r in range(rounds):
            order = labels[r % len(labels) :] + labels[: r % len(labels)]
            for condition in conditions if r % 2 == 0 else conditions[::-1]:
                with busy(n) if condition.startswith("busy") else _nothing():
                    load[condition].append(os.getloadavg()[0])
                    for label in order:
                        results[condition][label].append(
                            _run(models[label], image, prompt_text, tokens)
                        )
            done += 1
            print(f"round {done}/{rounds} done", flush=True)
    except _Stopped:
        print(f"stopped: the table covers the {done} complete round(s)", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not done:
        return
    for condition, by_label in results.items():
        del load[condition][done:]
        for runs in by_label.values():
            del runs[done:]
    _report(results, load)


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _report(
    results: dict[str, dict[str, list[tuple[float, float, float]]]], load: dict[str, list[float]]
) -> None:
    control = next(label for label in next(iter(results.values())) if "(A/A)" in label)
    stock = "stock og.Model"
    noise = MIN_NOISE
    ratios: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for condition, by_label in results.items():
        ratios[condition] = {}
        base = by_label[stock]
        for label, runs in by_label.items():
            ttft = [b[0] / x[0] for x, b in zip(runs, base, strict=True)]  # >1: faster
            tps = [x[1] / b[1] for x, b in zip(runs, base, strict=True)]
            ratios[condition][label] = (ttft, tps)
        noise = max(noise, abs(statistics.median(ratios[condition][control][1]) - 1))
    print(
        "\nRatios are this setting / stock in the same round and condition (median of "
        "rounds, [min-max]); above 1 is faster. TTFT ratio is stock's TTFT / this one's."
    )
    print(
        f"Noise band: ±{noise * 100:.1f}% (the A/A control's largest deviation of its median "
        "decode ratio from 1, floor 3%); SLOWER marks a median decode ratio below it"
    )
    for condition, by_label in results.items():
        avg = statistics.median(load[condition])
        print(f"\n{condition}: 1-minute load average at the runs' start, median {avg:.2f}")
        print(
            f"{'setting':>34} {'TTFT ms':>8} {'tok/s':>7} {'CPU/s':>6} "
            f"{'TTFT vs stock':>14} {'decode vs stock [min-max]':>26}"
        )
        for label, runs in by_label.items():
            ttft_r, tps_r = ratios[condition][label]
            med = [statistics.median(x[i] for x in runs) for i in range(3)]
            verdict = " SLOWER" if statistics.median(tps_r) < 1 - noise else ""
            print(
                f"{label:>34} {med[0] * 1e3:>8.0f} {med[1]:>7.1f} {med[2]:>6.2f} "
                f"{statistics.median(ttft_r):>14.2f} "
                f"{statistics.median(tps_r):>9.2f} [{min(tps_r):.2f}-{max(tps_r):.2f}]{verdict}"
            )
    sys.stdout.flush()
