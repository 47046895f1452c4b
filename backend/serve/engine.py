"""One loaded model, one generation at a time, and a fair bounded queue in front of it.

The model runs in a chat worker process (`ChatClient`, the same session and protocol as
chat in the app), not in the server's process: ONNX Runtime GenAI 0.18 holds the GIL
inside `generate_next_token`, and with the session on a thread beside the event loop the
loop got the GIL back only a token later at every socket write (a 32-token answer reached
the client in 3 bursts, its first token 250 ms late, measured on a 50M model). Here the
server's threads only wait on a pipe. One thread (the engine) owns the client and answers
requests one after another, first come first served. Batching several requests into one
generator is not offered: the 0.18 Python API batches only prompts of one length given
together, and multimodal prompts not at all (its processor takes one prompt).

- The queue holds at most `max_queue` waiting requests; one more is refused at once
  (429 with a Retry-After estimated from recent answers), so memory stays bounded: each
  waiting request holds at most its body and its files.
- Each request has a cancel flag. A client that goes away sets it: a waiting request
  leaves the queue, a running one is stopped at its next token (chat's Stop).
- A worker that dies (killed, out of memory) is noticed within `WORKER_CHECK_S` even when
  no request comes: `stopped` says why, every request from then on gets 503
  (`worker_stopped`), and `on_stopped` tells whoever runs the server.
- Every request is a turn of its own in the worker's session (`ChatClient.answer`): the
  same intake (`prepare_attachments`), the same chat template and the same context policy
  as chat (`GenerationOptions.context_full`, "drop": the oldest turns leave the model's
  view; a last message that does not fit alone is refused, 422).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend.chat.client import ChatClient
from mmforge.backend.chat.values import GenerationOptions
from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve.constrain import CallWatch, read_calls
from mmforge.backend.serve.intake import RequestFiles
from mmforge.backend.serve.protocol import ApiError, ChatRequest, StopText, finish_reason
from mmforge.backend.untrusted import escape

log = logging.getLogger(__name__)

WORKER_CHECK_S = 0.5


@dataclass(frozen=True)
class Token:
    """Text the client may be shown now (may be ""), and the token that brought it."""

    text: str
    token_id: int | None


@dataclass(frozen=True)
class Done:
    """The answer ended: its whole text (or its tool calls), why, and the token counts."""

    text: str
    reason: str
    prompt_tokens: int
    token_ids: list[int]
    tool_calls: list[dict[str, Any]] | None = None


Event = Token | Done | ApiError


@dataclass
class Job:
    """One request on its way through the queue."""

    request: ChatRequest
    files: RequestFiles
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def put(self, event: Event) -> None:
        """Hand an event to the request's coroutine (from the engine thread)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the server's loop is gone: nobody listens any more
            self.cancelled.set()


@dataclass(frozen=True)
class Counts:
    """What the server has done, for the app's live count and the log.

    Attributes:
        received: Requests taken into the queue.
        served: Answers finished (streamed to the end or returned).
        failed: Requests answered with an error after they were queued.
        cancelled: Requests whose client went away.
        refused: Requests refused because the queue was full.
        active: Answers being generated now (0 or 1).
        queued: Requests waiting.
    """

    received: int = 0
    served: int = 0
    failed: int = 0
    cancelled: int = 0
    refused: int = 0
    active: int = 0
    queued: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return asdict(self)


class Engine:
    """The worker's owner: a thread answering queued requests one by one.

    Args:
        client: A chat worker with the package loaded (the engine closes it in `close`).
        context_length: The package's context, the answer's length when none is asked.
        max_queue: Requests that may wait while one is answered.
        on_change: Hears the counts after every change (from any thread).
        on_stopped: Hears why, once, when the worker process has died (from any thread).
    """

    def __init__(
        self,
        client: ChatClient,
        context_length: int,
        max_queue: int = 8,
        on_change: Callable[[Counts], None] | None = None,
        on_stopped: Callable[[str], None] | None = None,
    ):
        self.client = client
        self.context_length = context_length
        self.max_queue = max_queue
        self.on_stopped = on_stopped
        self._on_change = on_change
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._broken = ""  # why the worker is gone, once it is
        self._running: Job | None = None
        self._counts: dict[str, int] = Counts().to_dict()
        self._recent: deque[float] = deque(maxlen=16)  # seconds per answer
        self._thread = threading.Thread(target=self._loop, name="mmforge-serve", daemon=True)
        self._thread.start()

    @property
    def model_id(self) -> str:
        """The name clients use for the served package: its folder name."""
        return Path(str(self.client.info["package"])).name

    @property
    def counts(self) -> Counts:
        """A snapshot of the counts."""
        with self._cond:
            return Counts(**self._counts)

    @property
    def stopped(self) -> str:
        """Why the model's worker is gone ("" while it runs)."""
        with self._cond:
            return self._broken

    def submit(self, job: Job) -> None:
        """Queue a request; `ApiError` 429 when the queue is full, 503 when closing."""
        with self._cond:
            if self._closed:
                raise ApiError(503, "The server is shutting down", code="shutting_down")
            if self._broken:
                raise ApiError(503, self._broken, code="worker_stopped")
            busy = self._running is not None or bool(self._jobs)
            if busy and len(self._jobs) >= self.max_queue:
                self._counts["refused"] += 1
                wait = self._retry_after()
                self._changed()
                raise ApiError(
                    429,
                    f"{len(self._jobs)} requests are waiting for the model; try again in {wait} s",
                    code="queue_full",
                    headers={"Retry-After": str(wait)},
                )
            self._jobs.append(job)
            self._counts["received"] += 1
            self._changed()
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """The client went away: drop the request, or stop its answer at the next token."""
        job.cancelled.set()
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
                job.files.cleanup()
                self._counts["cancelled"] += 1
                self._changed()
                return
            running = self._running is job
        if running:
            self.client.stop()  # safe from any thread; a finished answer ignores it

    def close(self) -> None:
        """Stop answering: waiting requests get 503, the running one stops; ends the worker."""
        with self._cond:
            self._closed = True
            waiting = list(self._jobs)
            self._jobs.clear()
            running = self._running
            if running is not None:
                running.cancelled.set()
            self._cond.notify_all()
        if running is not None:
            self.client.stop()
        for job in waiting:
            job.files.cleanup()
            job.put(ApiError(503, "The server is shutting down", code="shutting_down"))
        self._thread.join()
        self.client.close()

    # -- the engine thread --------------------------------------------------------------

    def _retry_after(self) -> int:
        each = sum(self._recent) / len(self._recent) if self._recent else 1.0
        return max(1, min(600, math.ceil(each * (len(self._jobs) + 1))))

    def _changed(self) -> None:
        """Report the counts (the caller holds the lock)."""
        self._counts["queued"] = len(self._jobs)
        self._counts["active"] = int(self._running is not None)
        if self._on_change is not None:
            try:
                self._on_change(Counts(**self._counts))
            except Exception:  # a listener never stops the server
                log.exception("the counts listener failed")

    def _worker_alive(self) -> bool:
        return bool(getattr(self.client, "alive", True))

    def _worker_died(self, why: str) -> None:
        """Record that the worker is gone (once) and tell `on_stopped`."""
        with self._cond:
            if self._broken or self._closed:
                return
            self._broken = f"The model's worker process stopped ({why}); restart the server"
            message = self._broken
        log.error("%s", message)
        if self.on_stopped is not None:
            try:
                self.on_stopped(message)
            except Exception:  # a listener never stops the server
                log.exception("the stop listener failed")

    def _loop(self) -> None:
        while True:
            died = False
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait(WORKER_CHECK_S)
                    died = not self._jobs and not self._broken and not self._worker_alive()
                    if died:
                        break
                if self._closed:
                    return
                if not died:
                    job = self._jobs.popleft()
                    self._running = job
                    self._changed()
            if died:  # while idle: said now, not at the next request
                self._worker_died(_exit_words(self.client))
                continue
            start = time.perf_counter()
            outcome = "failed"
            try:
                outcome = self._answer(job)
            finally:
                job.files.cleanup()
                with self._cond:
                    self._running = None
                    self._recent.append(time.perf_counter() - start)
                    self._counts[outcome] += 1
                    self._changed()

    def _answer(self, job: Job) -> str:
        """Run one request; events go to its coroutine. Returns the count it adds to."""
        try:
            done = self._generate(job)
        except ApiError as e:
            job.put(e)
            return "failed"
        except Exception as e:  # the server goes on; the client gets a 500
            log.exception("answering a request failed")
            job.put(ApiError(500, f"The server failed: {type(e).__name__}", code="server_error"))
            return "failed"
        if job.cancelled.is_set():  # the client went away, or the server is closing
            job.put(ApiError(503, "The answer was stopped", code="stopped"))
            return "cancelled"
        job.put(done)
        return "served"

    def _generate(self, job: Job) -> Done:
        """The worker's answer to the request, streamed as `Token` events."""
        request = job.request
        # A top_k above the vocabulary is taken as all of it where the chat worker starts
        # its generator (generation.py), as for chat.
        options = asdict(_options(request, self.context_length))
        files = iter(job.files.files)
        turns = [(m.role, m.text, [next(files) for _ in m.parts]) for m in request.messages]
        _, text, last = turns.pop()
        stops = StopText(request.stops)
        # Tool calls are sent once whole; text streams as it comes (stop strings apply to
        # text only).
        watch = CallWatch(request.output.calls)
        raw: list[str] = []
        shown: list[str] = []
        ids: list[int] = []
        turn: dict[str, Any] = {}
        try:
            for event in self.client.answer(request.system, turns, text, last, options):
                kind = event.get("event")
                if kind == "token" and not stops.hit:
                    piece = str(event["text"])
                    raw.append(piece)
                    ids.append(int(event["id"]))
                    shown.append(stops.feed(watch.feed(piece)))
                    job.put(Token(shown[-1], ids[-1]))
                    if stops.hit:
                        self.client.stop()
                elif kind == "turn":
                    turn = event["value"]
                elif kind == "error":
                    raise _api_error(event, request.output.param)
        except MmforgeError as e:  # the worker itself stopped: every later request fails
            log.error("%s: %s", e.user_message, escape(e.details or ""))
            self._worker_died(_exit_words(self.client))
            raise ApiError(503, self.stopped, code="worker_stopped") from None
        # The whole answer is its ids decoded; the stream held back an incomplete
        # character at the end, which the decode shows (as U+FFFD).
        whole, streamed = str(turn.get("text", "")), "".join(raw)
        if whole.startswith(streamed) and len(whole) > len(streamed):
            tail = stops.feed(watch.feed(whole[len(streamed) :]))
            shown.append(tail)
            job.put(Token(tail, None))
        prompt = int(turn.get("stats", {}).get("prompt_tokens", 0))
        if watch.calling:
            calls = read_calls(whole, request.output.tools)
            if calls is not None:
                return Done("", "tool_calls", prompt, ids, calls)
            # A call cut short (max_tokens, a Stop) is no call: its text is the answer.
            job.put(Token(whole, None))
            return Done(whole, finish_reason(str(turn.get("stop_reason", "")), False), prompt, ids)
        rest = stops.feed(watch.flush()) + stops.flush()
        if rest:
            shown.append(rest)
            job.put(Token(rest, None))
        reason = finish_reason(str(turn.get("stop_reason", "")), stops.hit)
        return Done("".join(shown), reason, prompt, ids)


def _options(request: ChatRequest, context: int) -> GenerationOptions:
    """The session's options for a request; no max_tokens means up to the context."""
    sample = request.temperature > 0
    guidance_type, guidance_data = request.output.guidance()
    return GenerationOptions(
        max_new_tokens=request.max_tokens or context,
        do_sample=sample,
        temperature=request.temperature if sample else 1.0,
        top_p=request.top_p,
        top_k=request.top_k,
        seed=request.seed,
        guidance_type=guidance_type,
        guidance_data=guidance_data,
        tools=request.output.template_tools(),
    )


def _exit_words(client: ChatClient) -> str:
    """How the worker ended, in words: "killed by signal 9", "exit code 1"."""
    process = getattr(getattr(client, "_job", None), "process", None)
    code = None if process is None else process.poll()
    if code is None:
        return "it no longer answers"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _api_error(event: dict[str, Any], constrained: str) -> ApiError:
    """A worker's error event in the API's terms (`constrained`: the field guidance came from)."""
    e = MmforgeError(str(event.get("message")), event.get("hint"))
    kind = event.get("kind")
    if kind == "guidance":  # a schema the runtime cannot compile
        return ApiError(400, e.one_line(), param=constrained, code="invalid_schema")
    if kind == "context_full":
        return ApiError(422, e.one_line(), param="messages", code="context_length_exceeded")
    if kind == "attachment":
        return ApiError(400, e.one_line(), param="messages", code="invalid_attachment")
    if kind == "runtime" or e.user_message.startswith("Internal error"):
        log.warning("the model failed: %s", escape(str(event.get("details") or "")[:2000]))
        return ApiError(500, e.one_line(), code="runtime_error")
    return ApiError(400, e.one_line(), param="messages")


def describe(counts: Counts) -> dict[str, Any]:
    """The counts as the `--events` stream writes them."""
    return {"event": "requests", **counts.to_dict()}
