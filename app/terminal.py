"""What the command line shows on a terminal: progress, profiles and chat figures."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmforge.backend.units import human_bytes, human_count


def progress_printer() -> Callable[[Any], None]:
    """Draw progress on stderr when it is a terminal; stay quiet otherwise."""
    if not sys.stderr.isatty():
        return lambda event: None

    def show(event: Any) -> None:
        if event.unit == "bytes" and event.total:
            text = (
                f"{event.stage}: {event.done / 1e6:.1f}/{event.total / 1e6:.1f} MB {event.message}"
            )
        else:
            text = f"{event.stage}: {event.message}"
        sys.stderr.write("\r" + text[:100].ljust(100))
        if event.total is not None and event.done >= event.total:
            sys.stderr.write("\n")
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
    else:
        print(render_profile(profile))


def render_profile(p: Any) -> str:
    """The human-readable profile printed by `mmforge inspect`."""
    lines = [
        f"{p.family}  (model_type {p.model_type}, {p.dtype})",
        f"  source       {p.source}" + (f" @ {p.commit[:12]}" if p.commit else ""),
    ]
    if p.runnable:
        lines.append(f"  runtime      ONNX Runtime GenAI pipeline '{p.pipeline_type}'")
    else:
        lines.append(f"  runtime      not runnable: {p.runtime_reason}")
    lines.append(f"  components   {' + '.join(p.components)}")
    lines.append(f"  projector    {p.projector.variant}: {p.projector.architecture}")
    lines.append(f"               {p.projector.reason}")
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
        lines.append(f"  checkpoint   {human_bytes(s.checkpoint_bytes)}")
        for d in s.package_bytes:
            lines.append(
                f"  package {d:<4} {human_bytes(s.package_bytes[d])}, "
                f"runtime memory ≈ {human_bytes(s.memory_bytes[d])}"
            )
        lines.append(
            f"  convert peak ≈ {human_bytes(s.convert_peak_bytes)} "
            f"(then ≈ {human_bytes(s.package_bytes['f32'])} while the runtime check loads "
            "the package)"
        )
    else:
        lines.append("  parameters   unknown")
    lines.append(f"  remote code  {'needed' if p.remote_code else 'not needed'}")
    lines.extend(f"  warning: {w}" for w in p.warnings)
    lines.extend(f"  note: {n}" for n in p.notes)
    return "\n".join(lines)


def log_file() -> Path:
    """The file internal errors' tracebacks go to (the user's log folder)."""
    from platformdirs import user_log_dir

    folder = Path(user_log_dir("mmforge", appauthor=False))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "mmforge.log"


def failed(as_json: bool, kind: str, message: str, hint: str | None, code: int) -> int:
    """The exit code; with --json, the failure as one JSON object on stdout first."""
    if as_json:
        error = {"kind": kind, "message": message, "hint": hint, "exit_code": code}
        print(json.dumps({"error": error}, indent=2))
    return code
