"""The `mmforge` command line.

Every command drives a backend job. User errors print one line on stderr and exit 2;
unexpected failures print one line pointing at a log file holding the traceback and exit
70. With `--json`, a failure also prints one JSON object on stdout: {"error": {...}}.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import signal
import sys
import traceback
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from mmforge.app.stdio import utf8_stdio
from mmforge.app.terminal import (
    emit_profile,
    failed,
    log_file,
    print_turn_figures,
    progress_printer,
    render_profile,
)
from mmforge.backend.jobs import CancelToken
from mmforge.backend.precisions import DTYPES
from mmforge.backend.units import human_bytes
from mmforge.backend.untrusted import EscapingFormatter, escape
from mmforge.backend.vocabulary import DEFAULT_EP, EPS

EXIT_USER_ERROR = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: never confused with verify's FAIL (1)
EXIT_CANCELLED = 130
STREAM_KEPT = "\n\t"  # the only control characters a streamed answer writes as they are
EXIT_CODES = (
    "exit codes: 0 success (verify: PASS); 1 verify FAIL; 2 bad input (one line on stderr "
    "says what to do); 3 verify AMBIGUOUS; 4 verify APPROXIMATE (an approximated package that "
    "matches transformers run the same way); 70 internal error (the traceback goes to a log "
    "file); 130 cancelled (Ctrl+C or SIGTERM). With --json, a failure also prints "
    '{"error": {"kind", "message", "hint", "exit_code"}} on stdout.'
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"mmforge: error: {message} (see `{self.prog} --help`)\n")


_SOURCE_HELP = "hub id org/name[@revision] or a local folder"
_REMOTE_HELP = "accept models whose classes exist only as code in their repository"


def _build_parser() -> argparse.ArgumentParser:
    from mmforge.backend import __version__

    parser = _Parser(
        prog="mmforge",
        description="Convert Hugging Face multimodal models to ONNX Runtime GenAI packages, "
        "verify them stage by stage, and chat with them.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"mmforge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for add in (
        _add_inspect,
        _add_convert,
        _add_demo,
        _add_worker,
        _add_chat,
        _add_verify,
        _add_serve,
    ):
        add(sub)
    p = sub.add_parser("gui", help="open the desktop app (the default)")
    p.add_argument(
        "--self-test",
        action="store_true",
        help="drive the demo flow (convert, verify, chat) offscreen; exit 0 on success",
    )
    p.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help="with --self-test: save a picture of the window at each page into DIR",
    )
    p.set_defaults(func=_cmd_gui)
    return parser


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser("inspect", help="profile a model before converting it")
    p.add_argument("source", metavar="SOURCE", help=_SOURCE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--trust-remote-code", action="store_true", help=_REMOTE_HELP)
    p.set_defaults(func=_cmd_inspect)


def _add_convert(sub: Any) -> None:
    p = sub.add_parser("convert", help="convert a model to an ONNX Runtime GenAI package")
    p.add_argument("source", metavar="SOURCE", help=_SOURCE_HELP)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        metavar="OUT",
        help="package folder (replaced atomically if it holds an mmforge package)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="f32",
        help="f32, f16 (all components), int4 or int8 (decoder MatMuls and token table); "
        "default f32",
    )
    p.add_argument(
        "--encoders",
        choices=("auto", "f32"),
        default="auto",
        help="auto: encoders in f16 where a probe run shows it safe (f16, int4, int8); "
        "f32: keep them float32",
    )
    p.add_argument("--ep", choices=EPS, default=DEFAULT_EP, help="target; default cpu")
    p.add_argument("--json", action="store_true", help="print the manifest as one JSON object")
    p.add_argument("--trust-remote-code", action="store_true", help=_REMOTE_HELP)
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="accept pickled .bin weights (loaded with weights_only=True)",
    )
    p.add_argument(
        "--approximate",
        action="store_true",
        help="convert a model that no runtime pipeline runs exactly as released, with the "
        "approximation `inspect` names (verify then says APPROXIMATE, never PASS)",
    )
    p.set_defaults(func=_cmd_convert)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="build the offline demo checkpoint, inspect and convert it")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--sound",
        action="store_true",
        help="the demo that also takes sound clips (a tiny Gemma 4), chatted with the probe clip",
    )
    p.set_defaults(func=_cmd_demo)


def _add_worker(sub: Any) -> None:
    p = sub.add_parser("worker", help="run one job for a client over JSON lines (internal)")
    p.set_defaults(func=_cmd_worker)


def _add_attachments(p: argparse.ArgumentParser, image_help: str, audio_help: str) -> None:
    p.add_argument(
        "--image", action="append", default=[], type=Path, metavar="IMG", help=image_help
    )
    p.add_argument(
        "--audio", action="append", default=[], type=Path, metavar="WAV", help=audio_help
    )


def _add_chat(sub: Any) -> None:
    p = sub.add_parser("chat", help="send one message to a package and stream the answer")
    p.add_argument("package", type=Path, metavar="PACKAGE", help="a package folder")
    _add_attachments(p, "attach an image", "attach audio")
    p.add_argument("--prompt", required=True, help="the message text")
    p.add_argument("--system", default="", metavar="TEXT", help="a system prompt before it")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N", help="default 256")
    p.add_argument("--ep", choices=EPS, default=DEFAULT_EP, help="default cpu")
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sample at this temperature (default 0: greedy)",
    )
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="when sampling")
    p.add_argument("--top-k", type=int, default=50, metavar="K", help="when sampling")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (0–2147483647)")
    p.add_argument("--save", action="store_true", help="keep the conversation in the app's history")
    p.add_argument(
        "--json", action="store_true", help="print text, token ids and stats as one JSON object"
    )
    p.set_defaults(func=_cmd_chat)


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="compare a package with its Hugging Face reference, stage by stage",
        description="Exit codes: 0 PASS, 1 FAIL, 3 AMBIGUOUS, 4 APPROXIMATE, 2 bad input, "
        "70 internal error, 130 cancelled.",
    )
    p.add_argument("package", type=Path, metavar="PACKAGE", help="a package folder")
    p.add_argument(
        "--reference",
        required=True,
        metavar="SOURCE",
        help="the checkpoint it came from: hub id org/name[@revision] or a local folder",
    )
    _add_attachments(p, "default: probe", "default: probe")
    p.add_argument("--text-only", action="store_true", help="a prompt without images or audio")
    p.add_argument("--tokens", type=int, default=32, metavar="N", help="greedy tokens (32)")
    p.add_argument(
        "--json", type=Path, metavar="FILE", help="write the report as JSON ('-': stdout)"
    )
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.set_defaults(func=_cmd_verify)


def _add_serve(sub: Any) -> None:
    from mmforge.backend.serve import DEFAULT_PORT, LOOPBACK

    p = sub.add_parser(
        "serve", help="serve a package to other apps through an OpenAI-compatible API"
    )
    p.add_argument("package", type=Path, metavar="PACKAGE", help="a package folder")
    p.add_argument(
        "--host",
        default=LOOPBACK,
        help=f"the address to listen on (default {LOOPBACK}: this computer only; another "
        "address needs a key)",
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"default {DEFAULT_PORT}"
    )
    p.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="clients must send the key this file holds (default: the MMFORGE_API_KEY "
        "environment variable, else none)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="the key on the command line, where other users of this computer can read it "
        "(prefer --api-key-file or MMFORGE_API_KEY)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="URL",
        help="let the web page at this origin (e.g. http://localhost:3000) use the server; "
        "requests from other pages are refused (repeatable)",
    )
    p.add_argument("--ep", choices=EPS, default=DEFAULT_EP, help="default cpu")
    p.add_argument(
        "--allow-fetch",
        action="store_true",
        help="fetch pictures that requests give as http(s) URLs, from public addresses only "
        "(bounded in size and time)",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=32, metavar="MB", help="largest request (32)"
    )
    p.add_argument("--queue", type=int, default=8, metavar="N", help="requests that may wait (8)")
    p.add_argument(
        "--events",
        action="store_true",
        help="print JSON lines on stdout: listening, requests (each change), worker_stopped, "
        "stopped",
    )
    p.set_defaults(func=_cmd_serve)


def _serve_key(args: argparse.Namespace) -> str | None:
    """The server's key: from --api-key-file, --api-key (with a warning) or MMFORGE_API_KEY."""
    import os

    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.serve.server import read_key_file

    if args.api_key_file is not None and args.api_key is not None:
        raise MmforgeError("--api-key-file and --api-key both give a key", "Pass one of them")
    if args.api_key_file is not None:
        return read_key_file(args.api_key_file)
    if args.api_key:
        print(
            "mmforge: warning: other users of this computer can read --api-key in the process "
            "list; put the key in a file for --api-key-file, or in MMFORGE_API_KEY",
            file=sys.stderr,
        )
        return str(args.api_key)
    return os.environ.get("MMFORGE_API_KEY") or None


def _cmd_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl+C or SIGTERM; exits 0 after a clean stop."""
    import math
    import threading
    import time

    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.serve.engine import Counts, describe
    from mmforge.backend.serve.guard import normalize_origin
    from mmforge.backend.serve.server import MAX_BODY_MB, ServeOptions, check_options, start

    body_mb = args.max_body_mb
    if not (math.isfinite(body_mb) and 1 / 1024 <= body_mb <= MAX_BODY_MB):
        raise MmforgeError(
            f"--max-body-mb must be a size from 0.001 to {MAX_BODY_MB} (got {body_mb})",
            "Pass the largest request in MB, e.g. --max-body-mb 32",
        )
    options = ServeOptions(
        host=args.host,
        port=args.port,
        api_key=_serve_key(args),
        allow_fetch=args.allow_fetch,
        max_body_bytes=int(body_mb * (1 << 20)),
        max_queue=args.queue,
        allow_origins=tuple(dict.fromkeys(normalize_origin(o) for o in args.allow_origin)),
    )
    check_options(options)  # said before the model loads
    lock = threading.Lock()

    def emit(event: dict[str, Any]) -> None:
        with lock:
            print(json.dumps(event), flush=True)

    def on_change(counts: Counts) -> None:
        if args.events:
            emit(describe(counts))

    def on_stopped(message: str) -> None:
        if args.events:
            emit({"event": "worker_stopped", "message": message})
        else:
            print(f"mmforge: {message}", file=sys.stderr)

    handle = start(args.package, options, args.ep, on_change, on_stopped)
    try:
        if args.events:
            emit({"event": "listening", "url": handle.url, "model": handle.model_id})
        else:
            print(
                f"mmforge: serving {escape(handle.model_id)} at {handle.url} "
                "(OpenAI-compatible; Ctrl+C stops)",
                file=sys.stderr,
            )
        while not args.cancel.cancelled and handle.running:
            time.sleep(0.2)
    finally:
        handle.stop()
    if args.events:
        emit({"event": "stopped", **handle.counts.to_dict()})
    return 0


def _cmd_gui(args: argparse.Namespace) -> int:
    from mmforge.gui.app import run

    shots = getattr(args, "screenshots", None)
    return run(self_test=bool(getattr(args, "self_test", False)), screenshots=shots)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.jobs import JobContext
    from mmforge.backend.library import is_package

    if is_package(Path(args.source)):
        return _inspect_package(Path(args.source), as_json=args.json)
    profile = inspect_source(
        args.source,
        JobContext(on_progress=progress_printer(), cancel=args.cancel),
        trust_remote_code=args.trust_remote_code,
    )
    emit_profile(profile, as_json=args.json)
    return 0


def _inspect_package(folder: Path, *, as_json: bool) -> int:
    """A converted package: what it is, and what programs that hand it files must do."""
    from mmforge.backend.attachments import package_intake
    from mmforge.backend.library import approximation, read_manifest
    from mmforge.backend.picture_sizing import for_other_programs

    manifest = read_manifest(folder)
    intake = package_intake(folder)
    sizing = intake.sizing if intake is not None else None
    advice = for_other_programs(intake)
    family, dtype = str(manifest.get("family", "?")), str(manifest.get("dtype", "?"))
    differs = approximation(folder)
    if as_json:
        pictures = {"sizing": sizing.to_dict() if sizing else None, "other_programs": advice}
        print(
            json.dumps(
                {
                    "package": str(folder),
                    "family": family,
                    "dtype": dtype,
                    "pictures": pictures,
                    "approximation": differs,
                }
            )
        )
        return 0
    print(escape(f"{family} package ({dtype}) at {folder}"))
    if differs is not None:
        print(escape(f"  approximation (converted with --approximate): {differs}"))
    if sizing is not None:
        print(f"  pictures: {sizing.describe()}")
    elif "pictures" not in manifest:
        print(
            "  pictures: converted before mmforge recorded how transformers sizes them for "
            "this model; convert it again so that chat matches transformers at every size"
        )
    print(f"  for programs that hand it picture files: {advice}")
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from mmforge.backend.worker.server import serve

    return serve()


GENAI_BUILDER = "genai-builder"  # internal: `mmforge genai-builder ARGS...`


def _genai_builder(builder_args: list[str]) -> int:
    """ONNX Runtime GenAI's model builder as a program of this app.

    LFM2-VL's decoder is built in a child process, which a frozen app can only start
    through its own executable. Its arguments are the builder's own, so this runs before
    mmforge's parser sees them.
    """
    import runpy

    sys.argv = ["onnxruntime_genai.models.builder", *builder_args]
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from mmforge.backend.convert import convert
    from mmforge.backend.jobs import JobContext

    manifest = convert(
        args.source,
        args.output,
        JobContext(on_progress=progress_printer(), cancel=args.cancel),
        dtype=args.dtype,
        ep=args.ep,
        trust_remote_code=args.trust_remote_code,
        allow_pickle=args.allow_pickle,
        encoders=args.encoders,
        approximate=args.approximate,
    )
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=2))
        return 0
    total = sum(size for name, size in manifest.files.items())
    print(
        f"{manifest.family} → ONNX Runtime GenAI '{manifest.pipeline_type}' package "
        f"({manifest.dtype}, {manifest.ep})"
    )
    print(f"  written to   {args.output}")
    print(f"  components   {' + '.join(manifest.components)}")
    print(f"  size         {human_bytes(total)} in {len(manifest.files)} files")
    w = manifest.weights
    print(f"  weights      {w['mapped']} mapped, {w['unused']} unused, 0 missing")
    if manifest.precisions:
        stored = ", ".join(f"{c} {p}" for c, p in manifest.precisions.items())
        print(f"  precisions   {stored}")
    for note in manifest.notes:
        if " kept in f32" in note:
            print(f"  kept in f32  {note}")
    if manifest.validation["ep"].startswith("not run"):
        print("  runtime      NOT RUN: this machine has no CUDA device (config and graphs checked)")
    else:
        print(
            f"  runtime      runs on {manifest.validation['ep']}; "
            f"{manifest.validation['image_tokens']} image tokens for the probe"
        )
    stages: dict[str, float] = {}
    for name, seconds in manifest.timings_s.items():
        stage = name.split("/")[0]
        stages[stage] = stages.get(stage, 0.0) + seconds
    print("  timings      " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()))
    return 0


EXIT_VERDICT = {"PASS": 0, "FAIL": 1, "AMBIGUOUS": 3, "APPROXIMATE": 4}


def _cmd_verify(args: argparse.Namespace) -> int:
    from mmforge.backend.jobs import JobContext
    from mmforge.backend.verify import verify
    from mmforge.backend.verify.report import render_html, render_table

    report = verify(
        args.package,
        args.reference,
        JobContext(on_progress=progress_printer(), cancel=args.cancel),
        images=args.image,
        audios=args.audio,
        tokens=args.tokens,
        text_only=args.text_only,
    )
    data = json.dumps(report.to_dict(), indent=2)
    if args.json is not None and str(args.json) == "-":
        print(data)
    else:
        print(escape(render_table(report), keep="\n"))
        if args.json is not None:
            _write_report(args.json, data)
    if args.html is not None:
        _write_report(args.html, render_html(report))
    return EXIT_VERDICT[report.verdict]


def _write_report(path: Path, text: str) -> None:
    from mmforge.backend.errors import MmforgeError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise MmforgeError(f"Cannot write {path}: {e.strerror}", "Pick a writable path") from None


def _cmd_chat(args: argparse.Namespace) -> int:
    import signal

    from mmforge.backend.attachments import AUDIO, IMAGE, refuse_video
    from mmforge.backend.chat.client import ChatClient
    from mmforge.backend.errors import Cancelled, MmforgeError

    options = _chat_options(args)
    files = [(p, IMAGE) for p in args.image] + [(p, AUDIO) for p in args.audio]
    for path, _ in files:
        refuse_video(path)  # said before the model loads
        if not path.is_file():
            raise MmforgeError(f"No such file: {path}", "Check the attachment path")
    live = sys.stdout if not args.json else (sys.stderr if sys.stderr.isatty() else None)
    interrupted = False
    with ChatClient(args.package, args.ep, save=args.save) as client:

        def on_interrupt(*_: Any) -> None:
            nonlocal interrupted
            interrupted = True
            args.cancel.cancel()
            client.stop()

        # Ctrl+C and SIGTERM (timeout, a service manager, the GUI's stop) both stop the
        # answer at the next token: what was streamed is kept, and the exit code says so.
        previous = {s: signal.signal(s, on_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if args.cancel.cancelled:  # a signal came while the model loaded: ask nothing
                raise Cancelled
            if args.system:
                client.set_system(args.system)
            events = client.send(args.prompt, files, options)
            first = next(events)  # the request is out: a Stop from now on reaches it
            if interrupted:  # a signal came between the handlers and the request
                client.stop()
            turn, attachments = _stream_turn(itertools.chain([first], events), args, live)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        info = client.info
    if args.json:
        load = {"load_s": info["load_s"], "load_memory_bytes": info["load_memory_bytes"]}
        print(json.dumps({**turn, "attachments": attachments, "load": load}, indent=2))
    else:
        if live is not None:
            live.write("\n")
        print_turn_figures(turn, info)
    return EXIT_CANCELLED if interrupted else 0


def _chat_options(args: argparse.Namespace) -> dict[str, Any]:
    from mmforge.backend.errors import MmforgeError

    if args.max_new_tokens < 1:
        raise MmforgeError("--max-new-tokens must be at least 1", "Pass a positive number")
    if args.temperature < 0:
        raise MmforgeError(
            f"--temperature must not be negative (got {args.temperature})",
            "Pass 0 for greedy answers, or a positive temperature to sample",
        )
    from mmforge.backend.chat.values import MAX_SEED

    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:  # said before the model loads
        raise MmforgeError(
            f"--seed must be a whole number from 0 to {MAX_SEED} (got {args.seed})",
            "Pick a smaller seed, or leave --seed out for a random one",
        )
    options: dict[str, Any] = {"max_new_tokens": args.max_new_tokens}
    if args.temperature > 0:
        options.update(
            do_sample=True,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        )
    return options


def _stream_turn(
    events: Any, args: argparse.Namespace, live: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Show the answer as it streams; the turn and the prepared attachments."""
    from mmforge.backend.errors import MmforgeError

    turn: dict[str, Any] = {}
    attachments: list[dict[str, Any]] = []
    for event in events:
        kind = event["event"]
        if kind == "token" and live is not None:
            # Always escaped, terminal or not: a pipe into `less -R` or a log replays it
            # too. Line breaks and tabs stay; --json keeps the exact text.
            live.write(escape(str(event["text"]), keep=STREAM_KEPT))
            live.flush()
        elif kind == "attachments":
            attachments = event["value"]
            for a in attachments:
                if a["note"] and not args.json:
                    print(escape(f"mmforge: {a['name']}: {a['note']}"), file=sys.stderr)
        elif kind == "error":
            raise MmforgeError(str(event["message"]), event.get("hint"))
        elif kind == "turn":
            turn = event["value"]
    return turn, attachments


def _cmd_demo(args: argparse.Namespace) -> int:
    from mmforge import resources
    from mmforge.backend.attachments import AUDIO, IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.convert import convert
    from mmforge.backend.errors import Cancelled
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.jobs import JobContext
    from mmforge.backend.tiny.demo import demo_checkpoint, demo_package_folder

    kind = "sound" if args.sound else "pictures"
    folder = demo_checkpoint(kind)
    ctx = JobContext(on_progress=progress_printer(), cancel=args.cancel)
    profile = inspect_source(str(folder), ctx)
    out = demo_package_folder(kind)
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = convert(str(folder), out, ctx)
    session = ChatSession(out)
    attached, question, what = (
        ((resources.probe_audio(), AUDIO), "What do you hear?", "the probe clip")
        if args.sound
        else ((resources.probe_image(), IMAGE), "What is in this picture?", "the probe image")
    )
    try:
        files = session.prepare_attachments([attached])
        turn = session.send(
            question,
            files,
            GenerationOptions(max_new_tokens=24),
            should_stop=lambda: args.cancel.cancelled,
        )
    finally:
        session.close()
    if args.cancel.cancelled:
        raise Cancelled
    if args.json:
        print(
            json.dumps(
                {
                    "profile": profile.to_dict(),
                    "package": str(out),
                    "manifest": manifest.to_dict(),
                    "chat": turn.to_dict(),
                },
                indent=2,
            )
        )
        return 0
    print(escape(render_profile(profile), keep="\n"))
    print(
        f"\nConverted to {out}: {' + '.join(manifest.components)}; ONNX Runtime GenAI "
        f"loads it and generates."
    )
    st = turn.stats
    print(
        f"\nOne chat turn with {what}: {st.new_tokens} tokens, first after "
        f"{st.time_to_first_token_s:.2f} s, {st.decode_tokens_per_s:.0f} tokens/s:\n  "
        f"{turn.text!r}"
    )
    print(
        "\nThis is the built-in demo: a tiny random-weight model, built offline. It talks "
        "nonsense by design;\nit lets the whole flow run with no network. Chat with it:\n"
        f"  mmforge chat {out} --{'audio WAV' if args.sound else 'image IMG'} --prompt TEXT"
    )
    return 0


def _interrupt(cancel: CancelToken, signum: int, frame: Any) -> None:
    """Ctrl+C or SIGTERM: ask the command's job to stop; a second time, stop at once."""
    if cancel.cancelled:
        raise KeyboardInterrupt
    cancel.cancel()
    sys.stderr.write("\nmmforge: cancelling (again to stop at once)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code."""
    utf8_stdio()  # before anything is read or written: a pipe on Windows is cp1252
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == [GENAI_BUILDER]:
        return _genai_builder(args_list[1:])
    if args_list[:1] == ["render-template"]:  # internal: a chat template under limits
        from mmforge.backend.templates import render_child

        return render_child()
    parser = _build_parser()
    args = parser.parse_args(argv)
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    for log_handler in root.handlers:  # the one basicConfig added: log lines quote strangers
        if log_handler not in before:
            log_handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    if args.command is None:
        args = parser.parse_args(["gui"])
    args.cancel = CancelToken()
    previous = {}
    if args.command not in ("worker", "gui"):
        # Ctrl+C or SIGTERM asks the job to stop at its next check, which cleans up its
        # staging folder and temp files; a second one stops at once. (Workers and the GUI
        # handle signals themselves; chat turns Ctrl+C into Stop.)
        with contextlib.suppress(ValueError):  # only the main thread sets handlers
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, partial(_interrupt, args.cancel))
    # A worker has a private temp folder from the process that started it; everything
    # else runs the runtime in this process (convert's check, verify) or starts workers.
    with contextlib.nullcontext() if args.command == "worker" else _private_tmp():
        try:
            return _run(args)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def _private_tmp() -> Iterator[None]:
    """This process's temporary files in a fresh 0700 folder, removed at the end.

    ONNX Runtime GenAI writes its telemetry to `$TMPDIR/.ses` and follows a link there,
    so in a shared /tmp anyone could plant `.ses` as a link to a file of the user's and
    have `mmforge convert` or `verify` overwrite it (the workers have their own folder
    already: backend/worker/client.py).
    """
    import os
    import shutil
    import tempfile

    from mmforge.backend.worker.client import tmpdir_env

    names = ("TMPDIR", "TEMP", "TMP")
    before = {name: os.environ.get(name) for name in names}
    cached = tempfile.tempdir
    folder = Path(tempfile.mkdtemp(prefix="mmforge-"))  # 0700, a name nobody can guess
    os.environ.update(tmpdir_env(folder))
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = cached
        shutil.rmtree(folder, ignore_errors=True)


def _did_you_mean(args: argparse.Namespace, e: Exception) -> str | None:
    """For a hub id the hub does not have, the nearest names, as the GUI's browser gives.

    The hub is searched for the name (the known-good list counts too); when it cannot
    be reached, only the known-good list.
    """
    from mmforge.backend.errors import MmforgeError

    spec = getattr(args, "source", None) or getattr(args, "reference", None)
    if not isinstance(e, MmforgeError) or e.kind != "hub_not_found" or not spec:
        return None
    from mmforge.backend.hubsearch import close_matches, suggestions
    from mmforge.backend.jobs import JobContext
    from mmforge.backend.known_models import known_models

    try:
        near = [f.repo_id for f in suggestions(spec, JobContext(cancel=args.cancel))]
    except MmforgeError:
        try:
            near = close_matches(spec, {m.repo_id for m in known_models()})
        except MmforgeError:
            near = []
    return f"Did you mean {', '.join(near)}?" if near else None


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; exit codes and error reporting as the module says."""
    from mmforge.backend.errors import Cancelled, MmforgeError

    as_json = bool(getattr(args, "json", None))
    try:
        return int(args.func(args))
    except MmforgeError as e:
        line = e.one_line()
        near = _did_you_mean(args, e)
        if near:
            line += " " + near
            e.hint = f"{e.hint or ''} {near}".strip()
        if e.details and not args.verbose:
            line += " (run with -v for the details)"
        print(f"mmforge: error: {escape(line)}", file=sys.stderr)
        if e.details and args.verbose:
            details = escape(" ".join(e.details.split())[:4000])
            print(f"mmforge: details: {details}", file=sys.stderr)
        return failed(as_json, "bad_input", e.user_message, e.hint, EXIT_USER_ERROR)
    except (Cancelled, KeyboardInterrupt):
        print("mmforge: cancelled", file=sys.stderr)
        return failed(as_json, "cancelled", "Cancelled", None, EXIT_CANCELLED)
    except Exception as e:  # noqa: BLE001 - the last resort: one line, traceback to the log
        log_path = log_file()
        _append_private(log_path, escape(traceback.format_exc(), keep="\n"))
        text = escape(" ".join(str(e).split())[:500])  # one line, whatever the exception holds
        message = f"Internal error: {type(e).__name__}: {text}"
        print(
            f"mmforge: internal error: {type(e).__name__}: {text} (details in {log_path})",
            file=sys.stderr,
        )
        hint = f"Please report it with {log_path}"
        return failed(as_json, "internal", message, hint, EXIT_INTERNAL)


def _append_private(path: Path, text: str) -> None:
    """Append to a log only this user can read (0600 in a 0700 folder), as the GUI's is.

    The log names files, models and errors. A log an older version made 0644 is made
    private too. A log that cannot be written is given up: the error line still comes.
    """
    import os

    with contextlib.suppress(OSError):
        path.parent.chmod(0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "a", encoding="utf-8") as f:
            if os.name != "nt":
                os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
            f.write(text)


if __name__ == "__main__":  # `python -m mmforge.app.cli` runs it too, not only `-m mmforge.app`
    raise SystemExit(main())
