"""One loaded model, one generation at a time, and a fair bounded queue in front of it.

ONNX Runtime GenAI 0.18 holds the GIL inside `generate_next_token` and a `ChatSession`
holds one generator, so requests are answered one after another, first come first
served, on one thread that owns the session. Batching several requests into one
generator is not offered: the 0.18 Python API batches only prompts of one length given
together, and multimodal prompts not at all (their processor takes one prompt).

- The queue holds at most `max_queue` waiting requests; one more is refused at once
  (429 with a Retry-After estimated from recent answers), so memory stays bounded: each
  waiting request holds at most its body and its files.
- Each request has a cancel flag. A client that goes away sets it: a waiting request
  leaves the queue, a running one stops at its next token (the session checks between
  tokens, as chat's Stop does).
- Every request runs through the chat session as a fresh conversation: the same intake
  (`prepare_attachments`), the same chat template and the same context policy as chat
  (`GenerationOptions.context_full`, "drop": the oldest turns leave the model's view; a
  last message that does not fit alone is refused, 422).
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
from typing import Any

from mmforge.backend.attachments import Attachment, AttachmentError
from mmforge.backend.chat.conversations import Conversation, Message
from mmforge.backend.chat.session import ChatSession
from mmforge.backend.chat.values import GenerationOptions, TurnResult
from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve.intake import RequestFiles
from mmforge.backend.serve.protocol import ApiError, ChatRequest, StopText, finish_reason
from mmforge.backend.untrusted import escape

log = logging.getLogger(__name__)

HANDOFF_S = 0.1  # the longest a token waits for the client's chunk to go out


@dataclass(frozen=True)
class Token:
    """Text the client may be shown now (may be ""), and the token that brought it."""

    text: str
    token_id: int | None


@dataclass(frozen=True)
class Done:
    """The answer ended: its whole text, why, and the token counts."""

    text: str
    reason: str
    prompt_tokens: int
    token_ids: list[int]


Event = Token | Done | ApiError


@dataclass
class Job:
    """One request on its way through the queue."""

    request: ChatRequest
    files: RequestFiles
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Released by the streaming coroutine once a token's chunk is sent (see `handed_on`).
    sent: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def handed_on(self) -> None:
        """Wait (briefly) until the coroutine has sent the last token on to the client.

        ONNX Runtime GenAI 0.18 holds the GIL inside `generate_next_token`, and the event
        loop gives up the GIL several times per chunk (each socket write): without this
        wait, it got the GIL back only a token later each time, and a 32-token answer
        reached the client in 3 bursts, the first token 250 ms late (measured on a 50M
        model). Waiting here releases the GIL to the loop; the bound keeps a slow or
        gone client from holding the model.
        """
        if self.request.stream:
            self.sent.acquire(timeout=HANDOFF_S)

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
    """The session's owner: a thread answering queued requests one by one.

    Args:
        session: A loaded chat session (the engine closes it in `close`).
        max_queue: Requests that may wait while one is answered.
        on_change: Hears the counts after every change (from any thread).
    """

    def __init__(
        self,
        session: ChatSession,
        max_queue: int = 8,
        on_change: Callable[[Counts], None] | None = None,
    ):
        self.session = session
        self.max_queue = max_queue
        self._on_change = on_change
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._running: Job | None = None
        self._counts: dict[str, int] = Counts().to_dict()
        self._recent: deque[float] = deque(maxlen=16)  # seconds per answer
        self._thread = threading.Thread(target=self._loop, name="mmforge-serve", daemon=True)
        self._thread.start()

    @property
    def model_id(self) -> str:
        """The name clients use for the served package: its folder name."""
        return self.session.info.folder.name

    @property
    def counts(self) -> Counts:
        """A snapshot of the counts."""
        with self._cond:
            return Counts(**self._counts)

    def submit(self, job: Job) -> None:
        """Queue a request; `ApiError` 429 when the queue is full, 503 when closing."""
        with self._cond:
            if self._closed:
                raise ApiError(503, "The server is shutting down", code="shutting_down")
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

    def close(self) -> None:
        """Stop answering: waiting requests get 503, the running one stops; joins the thread."""
        with self._cond:
            self._closed = True
            waiting = list(self._jobs)
            self._jobs.clear()
            if self._running is not None:
                self._running.cancelled.set()
            self._cond.notify_all()
        for job in waiting:
            job.files.cleanup()
            job.put(ApiError(503, "The server is shutting down", code="shutting_down"))
        self._thread.join()
        self.session.close()

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

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = self._jobs.popleft()
                self._running = job
                self._changed()
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
        prepared: list[Attachment] = []
        try:
            result, shown, stops = self._generate(job, prepared)
        except ApiError as e:
            job.put(e)
            return "failed"
        except Exception as e:  # the server goes on; the client gets a 500
            log.exception("answering a request failed")
            job.put(ApiError(500, f"The server failed: {type(e).__name__}", code="server_error"))
            return "failed"
        finally:
            for a in prepared:
                a.path.unlink(missing_ok=True)
        if job.cancelled.is_set():  # the client went away, or the server is closing
            job.put(ApiError(503, "The answer was stopped", code="stopped"))
            return "cancelled"
        reason = finish_reason(result.stop_reason, stops.hit)
        job.put(Done(shown, reason, result.stats.prompt_tokens, list(result.token_ids)))
        return "served"

    def _generate(self, job: Job, prepared: list[Attachment]) -> tuple[TurnResult, str, StopText]:
        """The session's answer to the request, streamed as `Token` events."""
        request, session = job.request, self.session
        stops = StopText(request.stops)
        raw: list[str] = []
        shown: list[str] = []

        def on_token(piece: str, token: int) -> None:
            raw.append(piece)
            text = stops.feed(piece)
            shown.append(text)
            job.put(Token(text, token))
            job.handed_on()

        def should_stop() -> bool:
            return job.cancelled.is_set() or stops.hit

        options = _options(request, session.info.context_length)
        session.new_conversation()
        try:
            prepared.extend(session.prepare_attachments(job.files.files))
            history: list[Message] = []
            at = 0
            for m in request.messages:
                history.append(Message(m.role, m.text, prepared[at : at + len(m.parts)]))
                at += len(m.parts)
            last = history.pop()
            conversation = Conversation(
                id="unsaved",
                package=str(session.info.folder),
                system=request.system,
                messages=history,
            )
            session.open_conversation(conversation)
            result = session.send(last.text, last.attachments, options, on_token, should_stop)
        except AttachmentError as e:
            raise ApiError(400, e.one_line(), param="messages", code="invalid_attachment") from None
        except MmforgeError as e:
            raise _api_error(e) from None
        # The whole answer is its ids decoded; the stream held back an incomplete
        # character at the end, which the decode shows (as U+FFFD).
        streamed = "".join(raw)
        if result.text.startswith(streamed) and len(result.text) > len(streamed):
            text = stops.feed(result.text[len(streamed) :])
            shown.append(text)
            job.put(Token(text, None))
        tail = stops.flush()
        if tail:
            shown.append(tail)
            job.put(Token(tail, None))
        return result, "".join(shown), stops


def _options(request: ChatRequest, context: int) -> GenerationOptions:
    """The session's options for a request; no max_tokens means up to the context."""
    sample = request.temperature > 0
    return GenerationOptions(
        max_new_tokens=request.max_tokens or context,
        do_sample=sample,
        temperature=request.temperature if sample else 1.0,
        top_p=request.top_p,
        top_k=request.top_k,
        seed=request.seed,
    )


def _api_error(e: MmforgeError) -> ApiError:
    """A session error in the API's terms."""
    if e.kind == "context_full":
        return ApiError(422, e.one_line(), param="messages", code="context_length_exceeded")
    if e.kind == "runtime":
        log.warning("runtime failure: %s", escape(e.details or ""))
        return ApiError(500, e.one_line(), code="runtime_error")
    return ApiError(400, e.one_line(), param="messages")


def describe(counts: Counts) -> dict[str, Any]:
    """The counts as the `--events` stream writes them."""
    return {"event": "requests", **counts.to_dict()}
