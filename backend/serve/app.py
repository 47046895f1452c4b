"""The HTTP routes, on Starlette: /v1/models and /v1/chat/completions.

Every failure is an answer in the API's error shape with its status (`ApiError`); an
unexpected one is a 500 whose traceback goes to the log, never to the client.

A streamed answer waits for the model's first token before it sends its headers, so a
request the model refuses (a bad picture, a prompt too long for the context) still gets
its 400 or 422, not a 200 stream holding an error.
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
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve import protocol
from mmforge.backend.serve.engine import Done, Engine, Event, Job, Token
from mmforge.backend.serve.intake import RequestFiles, write_parts
from mmforge.backend.serve.protocol import ApiError
from mmforge.backend.untrusted import parse_json

log = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.25
DRAIN_FACTOR = 8  # an oversized body is read (and dropped) up to this many times the limit


@dataclass(frozen=True)
class Settings:
    """What the routes need besides the engine."""

    api_key: str | None
    allow_fetch: bool
    max_body_bytes: int


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
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), key.encode()
        ):
            raise ApiError(
                401,
                "Incorrect API key provided",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _model(self) -> dict[str, Any]:
        return {"id": self.engine.model_id, "object": "model", "created": 0, "owned_by": "mmforge"}

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
        try:
            first = await self._next(job, request)
        except BaseException:
            self.engine.cancel(job)
            raise
        if isinstance(first, ApiError):
            raise first
        if request_.stream:
            return StreamingResponse(
                self._stream(job, first),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            return await self._whole(job, first, request)
        finally:
            self.engine.cancel(job)

    async def _body(self, request: Request) -> bytes:
        """The body, at most `max_body_bytes`; 413 past it (read and dropped, bounded)."""
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_large = declared.isdigit() and int(declared) > limit
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                too_large = True
                chunks.clear()
            elif not too_large:
                chunks.append(chunk)
            if size > limit * DRAIN_FACTOR:
                break  # the client may see the connection close instead of the 413
        if too_large:
            raise ApiError(
                413,
                f"The request body is over the server's limit of {limit} bytes",
                code="request_too_large",
            )
        return b"".join(chunks)

    async def _next(self, job: Job, request: Request) -> Event:
        """The job's next event; stops waiting when the client goes away."""
        while True:
            try:
                return await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():  # nobody reads the answer: stop it
                    raise ApiError(499, "The client closed the request") from None

    async def _whole(self, job: Job, event: Event, request: Request) -> Response:
        ids: list[int] = []
        while not isinstance(event, Done):
            if isinstance(event, ApiError):
                raise event
            if event.token_id is not None:
                ids.append(event.token_id)
            event = await self._next(job, request)
        r = job.request
        body = protocol.completion(
            protocol.completion_id(),
            r.model,
            event.text,
            event.reason,
            (event.prompt_tokens, len(event.token_ids)),
            event.token_ids if r.return_token_ids else None,
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


def build_app(engine: Engine, settings: Settings) -> Starlette:
    """The ASGI application over one engine."""
    routes = _Routes(engine, settings)
    return Starlette(
        routes=[
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
