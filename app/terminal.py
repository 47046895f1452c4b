"""What the command line shows on a terminal: progress, profiles and chat figures."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmforge.backend.units import human_bytes, human_count, human_rate
from mmforge.backend.untrusted import escape


class ProgressLine:
    """One terminal line per stage: a bar, the amount, the rate and the time left.

    A stage's line is redrawn in place while it runs and kept when the next stage begins.
    Byte stages show MB, MB/s and the time left; counted stages show done/total; stages
    of unknown length show their message and the time so far.
    """

    def __init__(self, width: int = 100, clock: Callable[[], float] = time.monotonic):
        self.width = width
        self.clock = clock
        self.stage: str | None = None
        self.started = 0.0

    def text(self, event: Any) -> str:
        """The line for one progress event (and start timing a new stage)."""
        now = self.clock()
        if event.stage != self.stage:
            self.stage, self.started = event.stage, now
        elapsed = now - self.started
        head = f"{event.stage:<9}"
        if not event.total:
            return f"{head} {event.message}  {_clock(elapsed)}"[: self.width]
        share = min(1.0, max(0.0, event.done / event.total))
        bar = "#" * round(share * 20) + "." * (20 - round(share * 20))
        if event.unit == "bytes":
            amount = f"{event.done / 1e6:.1f}/{event.total / 1e6:.1f} MB"
            rate = event.done / elapsed if elapsed > 0.5 else 0.0
            pace = human_rate(rate) if rate else ""
            left = f"{_clock((event.total - event.done) / rate)} left" if rate else ""
            tail = "  ".join(t for t in (amount, pace, left) if t)
        else:
            tail = f"{event.done:g}/{event.total:g}"
        return f"{head} [{bar}] {share:4.0%}  {tail}  {event.message}"[: self.width]


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def progress_printer() -> Callable[[Any], None]:
    """Draw progress on stderr when it is a terminal; stay quiet otherwise."""
    if not sys.stderr.isatty():
        return lambda event: None
    line = ProgressLine(width=max(40, shutil.get_terminal_size().columns - 1))

    def show(event: Any) -> None:
        if line.stage is not None and event.stage != line.stage:
            sys.stderr.write("\n")  # the finished stage keeps its line
        sys.stderr.write("\r" + line.text(event).ljust(line.width))
        if event.total and event.done >= event.total:
            sys.stderr.write("\n")  # finished: the next output starts on its own line
            line.stage = None
        sys.stderr.flush()

    return show


def print_turn_figures(turn: dict[str, Any], info: dict[str, Any]) -> None:
    """The load and the answer's figures, on stderr, after a chat turn."""
    st = turn["stats"]
    print(
        f"[loaded in {info['load_s']:.2f} s, {human_bytes(info['load_memory_bytes'])} of memory]",
        file=sys.stderr,
    )
    ended = {"eos": "end of answer", "length": "token limit", "stopped": "stopped"}
    print(
        f"[{st['prompt_tokens']} prompt tokens · "
        f"first token {st['time_to_first_token_s']:.2f} s"
        f" · {st['new_tokens']} tokens at {st['decode_tokens_per_s']:.1f} tok/s · "
        f"{ended.get(turn['stop_reason'], turn['stop_reason'])}]",
        file=sys.stderr,
    )


def emit_profile(profile: Any, *, as_json: bool) -> None:
    """A profile on stdout: one JSON object, or the readable card."""
    if as_json:
        print(json.dumps(profile.to_dict(), indent=2))
    else:  # a profile quotes the checkpoint (model_type, token texts): escaped
        print(escape(render_profile(profile), keep="\n"))


def render_profile(p: Any) -> str:
    """The human-readable profile printed by `mmforge inspect`."""
    lines = [
        f"{p.family}  (model_type {p.model_type}, {p.dtype})",
        f"  source       {p.source}" + (f" @ {p.commit[:12]}" if p.commit else ""),
    ]
    if p.runnable:
        lines.append(f"  runtime      ONNX Runtime GenAI pipeline '{p.pipeline_type}'")
    else:
        lines.append(f"  runtime      no pipeline of its own: {p.runtime_reason}")
    if p.converts:  # (a profile saved before this field has none)
        from mmforge.backend.families.catalog import CANNOT, CONSENT, EXACT, NOT_YET

        said = {
            EXACT: "exactly",
            CONSENT: "with your consent",
            NOT_YET: "not yet",
            CANNOT: "no",
        }[p.converts]
        why = "" if p.converts == EXACT else f": {p.converts_reason}"
        lines.append(f"  converts     {said}{why}")
    lines.append(f"  components   {' + '.join(p.components)}")
    lines.append(f"  projector    {p.projector.variant}: {p.projector.architecture}")
    lines.append(f"               {p.projector.reason}")
    for line in p.architecture:
        lines.append(f"  layers       {line}")
    for name, value in p.token_ids.items():
        text = p.token_strings.get(name)
        lines.append(f"  {name:<24} {value}" + (f"  {text}" if text else ""))
    it = p.image_tokens
    if it.fixed is not None:
        lines.append(f"  image tokens {it.fixed} per image ({it.rule})")
    else:
        span = f"{it.minimum or '?'}–{it.maximum or '?'}"
        lines.append(f"  image tokens {span} per image ({it.rule})")
    s = p.sizes
    if s.parameters:
        parts = ", ".join(f"{k} {human_count(v)}" for k, v in s.parameters.items() if k != "total")
        lines.append(
            f"  parameters   {human_count(s.parameters['total'])} ({parts}; from {s.source})"
        )
        if s.active_parameters is not None:
            lines.append(
                f"  active       {human_count(s.active_parameters)} per token (top-k experts)"
            )
        lines.append(f"  checkpoint   {human_bytes(s.checkpoint_bytes)}")
        for d in s.package_bytes:
            peak = s.convert_peak_by_dtype.get(d)
            lines.append(
                f"  package {d:<4} {human_bytes(s.package_bytes[d])}, "
                f"runtime memory ≈ {human_bytes(s.memory_bytes[d])}"
                + (f", conversion peak ≈ {human_bytes(peak)}" if peak else "")
            )
    else:
        lines.append("  parameters   unknown")
    lines.append(f"  remote code  {'needed' if p.remote_code else 'not needed'}")
    lines.extend(f"  warning: {w}" for w in p.warnings)
    lines.extend(f"  refused field: {r}" for r in p.refused_fields)
    if p.unlisted_fields:
        lines.append(
            "  fields transformers' config class does not define (not read): "
            + ", ".join(p.unlisted_fields)
        )
    lines.extend(f"  note: {n}" for n in p.notes)
    return "\n".join(lines)


def log_file() -> Path:
    """The file internal errors' tracebacks go to (the user's log folder)."""
    from mmforge.backend.vocabulary import log_folder

    folder = log_folder()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "mmforge.log"


def failed(as_json: bool, kind: str, message: str, hint: str | None, code: int) -> int:
    """The exit code; with --json, the failure as one JSON object on stdout first."""
    if as_json:
        error = {"kind": kind, "message": message, "hint": hint, "exit_code": code}
        print(json.dumps({"error": error}, indent=2))
    return code
