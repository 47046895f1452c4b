"""The HTTP routes, on Starlette: /v1/models, /v1/chat/completions and /health.

Every failure is an answer in the API's error shape with its status (`ApiError`); an
unexpected one is a 500 whose traceback goes to the log, never to the client. Web pages
are kept out before any route runs (`guard.WebGuard`).

A streamed answer waits for the model's first token before it sends its headers, so a
request the model refuses (a bad picture, a prompt too long for the context) still gets
its 400 or 422, not a 200 stream holding an error.

A client that hangs up is noticed at once, streamed or not, queued or answered: a task
waits on the connection's next ASGI message, which after the body is read only comes
when the client goes away. (Polling `Request.is_disconnected()` between events, as
before, never ran while tokens came faster than its 0.25 s poll: a whole answer ran to
its end for nobody, and the next client waited 11–18 s.)
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve import protocol
from mmforge.backend.serve.engine import Done, Engine, Event, Job, Token
from mmforge.backend.serve.guard import WebGuard
from mmforge.backend.serve.intake import RequestFiles, write_parts
from mmforge.backend.serve.protocol import ApiError
from mmforge.backend.untrusted import parse_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """What the routes need besides the engine.

    Attributes:
        api_key: The key clients must send (None: none).
        allow_fetch: Fetch pictures given as http(s) URLs.
        max_body_bytes: The largest request body (413 past it).
        body_timeout_s: Seconds a request's body may take to arrive (408 past them).
        hosts: The Host names answered (None: any; `guard.allowed_hosts`).
        origins: The web pages' origins allowed (`guard.normalize_origin`).
    """

    api_key: str | None
    allow_fetch: bool
    max_body_bytes: int
    body_timeout_s: float
    hosts: frozenset[str] | None
    origins: tuple[str, ...] = ()


def _error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


Endpoint = Callable[[Request], Awaitable[Response]]


def _answers_errors(endpoint: Endpoint) -> Endpoint:
    """Every failure of a route as an API error answer."""

    @functools.wraps(endpoint)
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ApiError as e:
            return _error_response(e)
        except MmforgeError as e:
            return _error_response(ApiError(400, e.one_line()))
        except Exception as e:  # the client gets the API's 500, the log the rest
            log.exception("request failed")
            return _error_response(
                ApiError(500, f"The server failed: {type(e).__name__}", code="server_error")
            )

    return wrapped


class _Routes:
    def __init__(self, engine: Engine, settings: Settings):
        self.engine = engine
        self.settings = settings

    def _authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if not key:
            return
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        # Header values arrive as bytes, which Starlette decodes as Latin-1: back to those
        # bytes, against the key's UTF-8 bytes, so a key outside ASCII can match.
        sent = value.strip().encode("latin-1", "replace")
        if scheme.lower() != "bearer" or not hmac.compare_digest(sent, key.encode()):
            raise ApiError(
                401,
                "Incorrect API key provided; send the server's key as "
                "'Authorization: Bearer KEY' (the API key of the official clients)",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _model(self) -> dict[str, Any]:
        return {"id": self.engine.model_id, "object": "model", "created": 0, "owned_by": "mmforge"}

    async def health(self, request: Request) -> Response:
        """Whether the model's worker is alive (no key needed: it names no model)."""
        stopped = self.engine.stopped
        if stopped:
            return JSONResponse({"status": "worker_stopped", "message": stopped}, 503)
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        return JSONResponse({"object": "list", "data": [self._model()]})

    async def model(self, request: Request) -> Response:
        self._authorize(request)
        if request.path_params["model"] != self.engine.model_id:
            raise ApiError(
                404, "No such model on this server", param="model", code="model_not_found"
            )
        return JSONResponse(self._model())

    async def chat_completions(self, request: Request) -> Response:
        self._authorize(request)
        _json_only(request)
        body = await self._body(request)
        request_ = protocol.parse_request(parse_json(body, "the request body", limit=len(body) + 1))
        del body
        if request_.model != self.engine.model_id:
            raise ApiError(
                404,
                f"This server serves the model '{self.engine.model_id}' (see GET /v1/models)",
                param="model",
                code="model_not_found",
            )
        files = await _off_loop(
            lambda: write_parts(
                request_.parts,
                allow_fetch=self.settings.allow_fetch,
                max_bytes=self.settings.max_body_bytes,
            )
        )
        for part in request_.parts:  # the bytes live in the files now
            part.data = b""
        job = Job(request_, files, asyncio.get_running_loop())
        try:
            self.engine.submit(job)
        except BaseException:
            files.cleanup()
            raise
        watch = asyncio.create_task(self._hang_up(job, request))
        try:
            first = await job.events.get()
            if isinstance(first, ApiError):
                raise first
            if request_.stream:  # from here Starlette's stream notices a hang-up itself
                return StreamingResponse(
                    self._stream(job, first),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            return await self._whole(job, first)
        except BaseException:
            self.engine.cancel(job)
            raise
        finally:
            watch.cancel()
            if not request_.stream:
                self.engine.cancel(job)

    async def _body(self, request: Request) -> bytes:
        """The body, at most `max_body_bytes` (413) within `body_timeout_s` (408).

        A declared length over the limit is answered at once, without waiting for the
        body (the connection reads and drops what still comes, bounded).
        """
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(limit)
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(
                408,
                f"The request body did not arrive within {self.settings.body_timeout_s:g} s",
                code="request_timeout",
                headers={"Connection": "close"},
            ) from None
        except ClientDisconnect:
            raise ApiError(499, "The client closed the request") from None
        return b"".join(chunks)

    async def _hang_up(self, job: Job, request: Request) -> None:
        """Stop the job when its client goes away (the body is read: nothing else comes)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.engine.cancel(job)  # a queued job leaves the queue, a running one stops
        job.events.put_nowait(ApiError(499, "The client closed the request"))

    async def _whole(self, job: Job, event: Event) -> Response:
        ids: list[int] = []
        while not isinstance(event, Done):
            if isinstance(event, ApiError):
                raise event
            if event.token_id is not None:
                ids.append(event.token_id)
            event = await job.events.get()
        r = job.request
        body = protocol.completion(
            protocol.completion_id(),
            r.model,
            event.text,
            event.reason,
            (event.prompt_tokens, len(event.token_ids)),
            event.token_ids if r.return_token_ids else None,
            event.tool_calls,
        )
        return JSONResponse(body)

    async def _stream(self, job: Job, event: Event) -> AsyncIterator[str]:
        """Server-sent events as the official client reads them, ending in [DONE].

        A client that goes away cancels this generator (Starlette listens for the
        disconnect); `finally` then stops the answer at its next token.
        """
        r = job.request
        ident = protocol.completion_id()
        ids: list[int] = []
        try:
            yield _sse(protocol.chunk(ident, r.model, {"role": "assistant", "content": ""}))
            while True:
                if isinstance(event, ApiError):
                    yield _sse(event.body())
                    return
                if isinstance(event, Done):
                    for delta in protocol.call_deltas(event.tool_calls or []):
                        yield _sse(protocol.chunk(ident, r.model, delta))
                    tail = ids if r.return_token_ids and ids else None
                    yield _sse(protocol.chunk(ident, r.model, {}, event.reason, tail))
                    if r.include_usage:
                        counts = (event.prompt_tokens, len(event.token_ids))
                        yield _sse(protocol.chunk(ident, r.model, None, counts=counts))
                    yield "data: [DONE]\n\n"
                    return
                assert isinstance(event, Token)
                if event.token_id is not None:
                    ids.append(event.token_id)
                # With token ids asked for, every token is a chunk, its text empty while
                # it ends in an incomplete character (held back until one is complete).
                if event.text or (r.return_token_ids and ids):
                    sent, ids = (ids, []) if r.return_token_ids else (None, ids)
                    yield _sse(protocol.chunk(ident, r.model, {"content": event.text}, None, sent))
                event = await job.events.get()
        finally:
            self.engine.cancel(job)


async def _off_loop(make: Callable[[], RequestFiles]) -> RequestFiles:
    """Write a request's files (maybe fetching them) on a thread of its own.

    A daemon thread per request, not a pool: nothing stays behind once the server stops,
    and files written after the request was abandoned are removed.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[RequestFiles] = loop.create_future()

    def settle(files: RequestFiles | None, error: BaseException | None) -> None:
        if future.cancelled():
            if files is not None:
                files.cleanup()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(files)  # type: ignore[arg-type]

    def run() -> None:
        try:
            files = make()
        except Exception as e:  # noqa: BLE001 - handed to the request's coroutine
            loop.call_soon_threadsafe(settle, None, e)
            return
        try:
            loop.call_soon_threadsafe(settle, files, None)
        except RuntimeError:  # the loop is closed: nobody will take them
            files.cleanup()

    threading.Thread(target=run, name="mmforge-serve-intake", daemon=True).start()
    return await future


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = exc.detail if isinstance(exc, HTTPException) else "The server failed"
    return _error_response(ApiError(status, f"{message}: {request.method} {request.url.path}"))


def _json_only(request: Request) -> None:
    """415 unless the body is declared JSON: a page cannot send that across sites unasked."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            f"The request body must be sent as Content-Type: application/json (got "
            f"{kind or 'none'!r})",
            code="unsupported_media_type",
        )


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The request body is over the server's limit of {limit} bytes",
        code="request_too_large",
    )


def build_app(engine: Engine, settings: Settings) -> WebGuard:
    """The ASGI application over one engine, behind the guard that keeps web pages out."""
    routes = _Routes(engine, settings)
    app = Starlette(
        routes=[
            Route("/health", _answers_errors(routes.health), methods=["GET"]),
            Route("/v1/models", _answers_errors(routes.models), methods=["GET"]),
            Route("/v1/models/{model:path}", _answers_errors(routes.model), methods=["GET"]),
            Route(
                "/v1/chat/completions",
                _answers_errors(routes.chat_completions),
                methods=["POST"],
            ),
        ],
        exception_handlers={HTTPException: _not_found},
    )
    return WebGuard(app, settings.hosts, settings.origins)
