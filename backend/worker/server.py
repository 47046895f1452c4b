"""The worker side: run one job as the commands on stdin say, report on stdout.

The GUI (and any client that must stay responsive) starts `mmforge worker`, writes one
`run` command, and reads events until `result`, `error` or `cancelled` (see `protocol`).
A `cancel` command stops the job at its next check; terminating the process is the hard
cancel. Heavy libraries (torch, transformers, onnxruntime-genai) are imported in the
worker only.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.worker.protocol import Channel, error_event, hello, read_command

log = logging.getLogger(__name__)


def _inspect(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.inspect import inspect_source

    profile = inspect_source(
        str(args["source"]), ctx, trust_remote_code=bool(args.get("trust_remote_code", False))
    )
    return profile.to_dict()


def _convert(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.convert import convert

    manifest = convert(
        str(args["source"]),
        Path(args["output"]),
        ctx,
        dtype=str(args.get("dtype", "f32")),
        ep=str(args.get("ep", "cpu")),
        trust_remote_code=bool(args.get("trust_remote_code", False)),
        allow_pickle=bool(args.get("allow_pickle", False)),
        approximate=bool(args.get("approximate", False)),
    )
    return manifest.to_dict()


def _verify(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.verify import verify

    report = verify(
        Path(args["package"]),
        str(args["reference"]),
        ctx,
        images=[Path(p) for p in args.get("images", [])],
        audios=[Path(p) for p in args.get("audios", [])],
        tokens=int(args.get("tokens", 32)),
    )
    return report.to_dict()


def _demo(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.tiny.demo import DEMOS, demo_checkpoint

    kind = str(args.get("kind", "pictures"))
    if kind not in DEMOS:
        raise MmforgeError(f"No demo model of kind {kind[:40]!r}", f"Use {' or '.join(DEMOS)}")
    ctx.report("demo", 0, 1, message="offline, a few seconds", force=True)
    folder = demo_checkpoint(kind)
    ctx.report("demo", 1, 1, message="ready")
    return {"folder": str(folder)}


def _eps(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.chat import available_eps

    return dict(available_eps())


JOBS: dict[str, Callable[[dict[str, Any], JobContext], dict[str, Any]]] = {
    "inspect": _inspect,
    "convert": _convert,
    "verify": _verify,
    "demo": _demo,
    "eps": _eps,
}


def take_stdin() -> IO[str]:
    """The command pipe, moved off descriptor 0, which becomes the null device.

    A thread waits for the next command while the job runs. Windows' C runtime holds a
    descriptor's lock for the whole of a blocking `_read`, so while that thread waits on
    descriptor 0, any library that touches descriptor 0 (`_lseeki64(0)` when a DLL loads:
    numpy's native module does) waits for a command that may never come; measured under
    Wine 8 as a worker hung in `import numpy`, and shown by
    packaging/windows/wine/repro_stdin_lock.py. Reading the commands from a descriptor of
    their own leaves descriptor 0 (and Windows' standard input handle) to such callers.
    """
    import os

    commands = os.dup(0)  # not inherited by children
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.name == "nt":  # DLLs with their own C runtime take standard input from here
        import ctypes
        import msvcrt

        std_input_handle = -10
        handle = msvcrt.get_osfhandle(0)  # type: ignore[attr-defined]
        ctypes.windll.kernel32.SetStdHandle(std_input_handle, handle)  # type: ignore[attr-defined]
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's
    return open(commands, encoding="utf-8")


def serve(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Run one job as the commands on stdin say; report on stdout. Returns an exit code.

    Anything else that writes to stdout (a library's print) is redirected to stderr, so
    the event stream stays parseable.
    """
    stdin = stdin or take_stdin()
    channel = Channel(stdout or sys.stdout)
    sys.stdout = sys.stderr
    channel.send(hello())
    first = read_command(stdin)
    if first is not None and first.get("cmd") == "run" and first.get("job") == "chat":
        from mmforge.backend.chat.worker import serve_chat

        return serve_chat(dict(first.get("args") or {}), stdin, channel.send)
    if first is None or first.get("cmd") != "run" or first.get("job") not in JOBS:
        channel.send({"event": "error", "message": f"Expected a run command, got {first}"})
        return 2
    ctx = JobContext(on_progress=lambda p: channel.send({"event": "progress", **asdict(p)}))
    # Terminating the worker is the hard cancel: stop at the next check and clean up.
    signal.signal(signal.SIGTERM, lambda *_: ctx.cancel.cancel())
    listener = threading.Thread(target=_listen, args=(stdin, ctx), daemon=True)
    listener.start()
    job = str(first["job"])
    try:
        value = JOBS[job](dict(first.get("args") or {}), ctx)
    except Cancelled:
        channel.send({"event": "cancelled"})
        return 130
    except MmforgeError as e:
        channel.send(error_event(e))
        return 2
    except Exception as e:  # noqa: BLE001 - reported as an event; the client shows it
        channel.send(error_event(e))
        return 1
    channel.send({"event": "result", "job": job, "value": value})
    return 0


def _listen(stdin: IO[str], ctx: JobContext) -> None:
    """Set the cancel flag on a cancel command, or when the client goes away."""
    while True:
        command = read_command(stdin)
        if command is None or command.get("cmd") == "cancel":
            ctx.cancel.cancel()
            return
