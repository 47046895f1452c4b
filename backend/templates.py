"""Chat templates are programs written by strangers: render them under limits first.

A template loop of 10^10 steps, a macro that calls itself, or a string that doubles in a
loop would hang or kill whatever renders it: transformers (jinja2) or ONNX Runtime
GenAI's native renderer, which neither Cancel nor SIGTERM reaches. So before a
conversion writes a template into a package, and before chat renders a package's, the
template is rendered once on a sample conversation in a child process (`mmforge
render-template`), with a memory limit, a CPU limit and a deadline, its output counted
and cut off at `MAX_OUTPUT_CHARS`, inside jinja2's sandbox (whose `range` is bounded).
The waiting side checks the job's cancel flag, so Cancel and signals reach it. A template
that exceeds a limit is refused, naming it; one that merely raises on the sample (a
template that wants a system message, say) is not this check's business.

The same child also finds which content form the template takes (content_form.py): it
renders one user message with its text as a list of parts and as a plain string, and
reports the form whose text comes through (a list preferred; one written into the prompt
as Python's form of the list does not count).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.untrusted import read_json_object

log = logging.getLogger(__name__)

RENDER_TEMPLATE = "render-template"  # internal: `mmforge render-template` (JSON on stdin)
TIMEOUT_S = 5.0  # real templates render the sample in milliseconds
# The child's own start (an interpreter and its imports) is not the template's time: the
# child times its rendering itself; the parent's deadline allows for a slow start (a
# cold Windows start, antivirus scanning, Wine) on top, and is the backstop.
STARTUP_S = 60.0
MAX_OUTPUT_CHARS = 1 << 20
MEMORY_BYTES = 1 << 30
SAMPLE = [
    {
        "role": "user",
        "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
    {"role": "user", "content": [{"type": "text", "text": "What colour is it?"}]},
]
# Failures that mean "a limit was hit", not "the template dislikes the sample".
_LIMITS = ("RecursionError", "MemoryError", "OverflowError", "SecurityError")
_PROBE = "mmforge-probe-text"
# Checked templates (by their text's digest) and the content form each takes: the same
# template is checked by convert, its validation and verify's two sides.
_FORMS: dict[str, str | None] = {}


def template_of(folder: Path) -> tuple[str, str] | None:
    """The chat template a folder holds (text, where it is), as packaging picks it."""
    config = folder / "tokenizer_config.json"
    if config.is_file():
        with contextlib.suppress(MmforgeError):
            value = read_json_object(config, "model").get("chat_template")
            if isinstance(value, list):  # named templates: the default one
                named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
                value = named.get("default") or next(iter(named.values()), None)
            if isinstance(value, str) and value:
                return value, f"the chat template in {config}"
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace"), str(jinja)
    as_json = folder / "chat_template.json"
    if as_json.is_file():
        with contextlib.suppress(MmforgeError):
            value = read_json_object(as_json, "model").get("chat_template")
            if isinstance(value, str) and value:
                return value, f"the chat template in {as_json}"
    return None


def check_folder_template(folder: Path, ctx: JobContext | None = None) -> str | None:
    """Check the chat template a folder holds, if any; its content form (`check_template`)."""
    found = template_of(folder)
    if found is None:
        return None
    return check_template(*found, ctx=ctx)


def check_template(template: str, where: str, ctx: JobContext | None = None) -> str | None:
    """Render `template` on a sample conversation in a child process under limits.

    Returns:
        The content form it takes (`content_form.LIST` or `TEXT`), None when a single
        user message renders in neither.

    Raises:
        MmforgeError: It ran over `TIMEOUT_S`, wrote over `MAX_OUTPUT_CHARS`, ran out of
            memory or recursion depth, or crashed the renderer; the message names it.
        Cancelled: The job was cancelled while it rendered (the child is killed).
    """
    import hashlib

    from mmforge.backend.worker.child import app_command

    digest = hashlib.sha256(template.encode("utf-8", "replace")).hexdigest()
    if digest in _FORMS:
        return _FORMS[digest]
    ctx = ctx or JobContext()
    request = json.dumps({"template": template, "messages": SAMPLE, "probe": True})
    child = subprocess.Popen(
        app_command(RENDER_TEMPLATE),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",  # not the code page: the protocol and its messages are UTF-8
    )
    try:
        out, _ = _wait(child, request, ctx)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    try:
        answer = json.loads(out or "{}")
    except ValueError:
        answer = {}
    problem = answer.get("limit")
    if not (problem or answer.get("ok") or answer.get("error")):
        problem = f"the renderer died (exit {child.returncode})"
    if problem:
        raise MmforgeError(
            f"{where[0].upper()}{where[1:]} exceeds mmforge's limits: {problem}",
            "A chat template must render a short conversation quickly; fix the template "
            "(or use the model's original one)",
        )
    if answer.get("error"):
        log.info("the chat template raised on the sample conversation: %s", answer["error"])
    form = answer.get("form")
    _FORMS[digest] = form if isinstance(form, str) else None
    return _FORMS[digest]


def _wait(child: subprocess.Popen[str], request: str, ctx: JobContext) -> tuple[str, str]:
    """Hand the child its request and wait for it, in short steps that check cancel."""
    deadline = time.monotonic() + STARTUP_S + TIMEOUT_S
    step = 0.02
    pending: str | None = request
    while True:
        try:  # the request goes in on the first call; a retry loses no output
            return child.communicate(input=pending, timeout=step)
        except subprocess.TimeoutExpired:
            pending = None
            ctx.check_cancel()
            if time.monotonic() > deadline:
                child.kill()
                child.communicate()
                return json.dumps({"limit": f"it ran over {TIMEOUT_S:.0f} s"}), ""
            step = min(0.1, step * 2)
        except BrokenPipeError:  # the child died before reading: its exit code says why
            pending = None


def render_child() -> int:
    """`mmforge render-template`: render the request on stdin, report on stdout.

    Runs in its own process, under its own memory and CPU limits (`limit_this_process`;
    the parent's deadline holds everywhere).
    """
    limit_this_process()
    request = json.loads(sys.stdin.read())
    reply = _Reply()
    # The render's own clock, started now that the interpreter is up and has the request.
    over = {"limit": f"it ran over {TIMEOUT_S:.0f} s"}
    watchdog = threading.Timer(TIMEOUT_S, reply.send, args=(over,), kwargs={"end": True})
    watchdog.daemon = True
    watchdog.start()
    try:
        chars = _render(request["template"], request["messages"])
    except Exception as e:  # noqa: BLE001 - reported to the parent, which decides
        name = type(e).__name__
        if name in _LIMITS or isinstance(e, RecursionError | MemoryError | OverflowError):
            answer: dict[str, Any] = {"limit": _limit_words(e)}
        else:
            answer = {"error": f"{name}: {e}"[:500]}
    else:
        answer = {"ok": True, "chars": chars}
        if chars > MAX_OUTPUT_CHARS:
            answer = {"limit": f"it wrote over {MAX_OUTPUT_CHARS:,} characters"}
    if request.get("probe") and "limit" not in answer:
        answer["form"] = _content_form(request["template"])
    watchdog.cancel()
    reply.send(answer)
    return 0


class _Reply:
    """The child's one answer on stdout: the render's, or the watchdog's when it ran over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = False

    def send(self, answer: dict[str, Any], end: bool = False) -> None:
        """Write `answer` unless one was written; with `end`, end the process at once."""
        with self._lock:
            if not self._sent:
                self._sent = True
                sys.stdout.write(json.dumps(answer))
                sys.stdout.flush()
            if end:  # the watchdog: the render is still running, in this process
                os._exit(0)


def limit_this_process() -> str:
    """Put this process under the renderer's memory limit (and CPU limit where there is one).

    POSIX: `resource` limits (address space, CPU seconds). Windows has no `resource`: a
    job object caps the process's committed memory; the CPU time is left to the parent's
    deadline, which kills the child. Returns how it was limited ("rlimit", "job" or "none":
    the deadline alone), for the tests and the log.
    """
    try:
        import resource
    except ImportError:  # Windows
        return "job" if _windows_job_limit(MEMORY_BYTES) else "none"
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        cpu = int(TIMEOUT_S) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        return "rlimit"
    return "none"


def _windows_job_limit(memory_bytes: int) -> bool:
    """Windows: this process in a new job object whose processes may commit `memory_bytes`."""
    import ctypes

    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return False
    from ctypes import wintypes

    class IoCounters(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in (
            "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
            "ReadTransferCount", "WriteTransferCount", "OtherTransferCount",
        )]  # fmt: skip

    class BasicLimits(ctypes.Structure):
        _fields_ = [
            ("PerProcessUserTimeLimit", ctypes.c_int64),
            ("PerJobUserTimeLimit", ctypes.c_int64),
            ("LimitFlags", wintypes.DWORD),
            ("MinimumWorkingSetSize", ctypes.c_size_t),
            ("MaximumWorkingSetSize", ctypes.c_size_t),
            ("ActiveProcessLimit", wintypes.DWORD),
            ("Affinity", ctypes.c_size_t),
            ("PriorityClass", wintypes.DWORD),
            ("SchedulingClass", wintypes.DWORD),
        ]

    class ExtendedLimits(ctypes.Structure):
        _fields_ = [
            ("BasicLimitInformation", BasicLimits),
            ("IoInfo", IoCounters),
            ("ProcessMemoryLimit", ctypes.c_size_t),
            ("JobMemoryLimit", ctypes.c_size_t),
            ("PeakProcessMemoryUsed", ctypes.c_size_t),
            ("PeakJobMemoryUsed", ctypes.c_size_t),
        ]

    job_object_limit_process_memory = 0x100
    job_object_extended_limit_information = 9
    kernel32 = windll.kernel32
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    try:
        job = kernel32.CreateJobObjectW(None, None)
        if not job:
            return False
        limits = ExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = job_object_limit_process_memory
        limits.ProcessMemoryLimit = memory_bytes
        if not kernel32.SetInformationJobObject(
            wintypes.HANDLE(job), job_object_extended_limit_information,
            ctypes.byref(limits), ctypes.sizeof(limits),
        ):  # fmt: skip
            return False
        # The handle stays open for the process's life: the job lasts as long as it.
        this_process = wintypes.HANDLE(kernel32.GetCurrentProcess())  # the pseudo-handle -1
        return bool(kernel32.AssignProcessToJobObject(wintypes.HANDLE(job), this_process))
    except (AttributeError, OSError, ctypes.ArgumentError):
        return False


def _limit_words(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "it recursed too deeply"
    if isinstance(e, MemoryError):
        return f"it needed over {MEMORY_BYTES >> 20} MB of memory"
    return f"{type(e).__name__}: {e}"[:200]


def _content_form(template: str) -> str | None:
    """The content form under which one user message's text reaches the output."""
    from mmforge.backend.content_form import LIST, TEXT

    parts = [{"type": "text", "text": _PROBE}]
    for form, content in ((LIST, parts), (TEXT, _PROBE)):
        out: list[str] = []
        try:
            _render(template, [{"role": "user", "content": content}], out)
        except Exception:  # noqa: BLE001 - this form fails: try the next one
            continue
        text = "".join(out)
        # A template that prints the content as is writes the list's Python form.
        if _PROBE in text and "'type'" not in text and '"type"' not in text:
            return form
    return None


def _generation_tag() -> Any:
    """The `{% generation %}…{% endgeneration %}` tag, written through unchanged.

    transformers' renderer knows it (it marks the assistant's tokens for training
    masks); released templates use it (llava-hf's LLaVA-1.5), and plain jinja2 refuses
    them without it.
    """
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        def __init__(self, environment: Any) -> None:
            super().__init__(environment)
            self.tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Generation


def _render(template: str, messages: list[dict[str, Any]], out: list[str] | None = None) -> int:
    """Characters the template writes for `messages`, stopping past the output cap.

    The text is appended to `out` when given.
    """
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _generation_tag()]
    )
    env.filters["tojson"] = lambda v, indent=None, **_: json.dumps(v, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    compiled = env.from_string(template)
    chars = 0
    for piece in compiled.generate(
        messages=messages,
        add_generation_prompt=True,
        bos_token="<s>",
        eos_token="</s>",
        tools=None,
    ):
        chars += len(piece)
        if out is not None:
            out.append(piece)
        if chars > MAX_OUTPUT_CHARS:
            break
    return chars
