"""The OpenAI chat-completions shapes: a request read and checked, answers and errors written.

Only what the server does is accepted; anything it cannot honour is a 400 naming the
field, never a silent ignore that would change the answer (`n` > 1, a tool of another
type than function). Fields that change nothing here (`user`, `metadata`, `store`,
`logit_bias` empty, `presence_penalty` 0, ...) are accepted.

`response_format` (json_object, json_schema) and `tools` with `tool_choice` constrain the
decoding (`constrain`). Tool calls and tool results in the history are written into the
messages' text in the form a call is read back in (`constrain.render_calls`,
`constrain.render_result`; a `tool` message is the user's turn).

Sampling follows `mmforge chat`: greedy unless `temperature` is above 0, so an app that
sends no temperature gets the same answer twice.

`return_token_ids` (an extension, as vLLM names it) adds the answer's token ids to each
choice or chunk, so a caller can check an answer token by token.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from mmforge.backend.attachments import AUDIO, IMAGE
from mmforge.backend.chat.values import MAX_SEED
from mmforge.backend.serve.constrain import Output, Unfit, read_output, render_calls, render_result

# The API's error types by status (the official client maps status to its exception).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}
MAX_STOPS = 4  # as the API allows
MAX_MESSAGES = 1024
MAX_PARTS = 64  # pictures and clips in one request, all messages together
AUDIO_FORMATS = {"wav": ".wav", "mp3": ".mp3", "flac": ".flac", "ogg": ".ogg"}
IMAGE_TYPES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/jpg": ".jpg",
    "image/webp": ".webp",
    "image/gif": ".gif",
    "image/bmp": ".bmp",
    "image/tiff": ".tiff",
}
# Accepted and meaning nothing here (or meaning their default only).
_INERT = {"user", "metadata", "store", "service_tier", "modalities"}
_NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "logprobs": False}


class ApiError(Exception):
    """An answer in the API's error shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        kind = _ERROR_TYPES.get(self.status, "invalid_request_error")
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }


def _bad(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass
class Part:
    """A picture or clip from a message: its bytes (or a URL to fetch) and a file suffix."""

    kind: str
    suffix: str
    data: bytes = b""
    url: str = ""


@dataclass
class InMessage:
    """One message of the request, as the chat session takes it."""

    role: str  # "user" or "assistant"
    text: str
    parts: list[Part] = field(default_factory=list)


@dataclass
class ChatRequest:
    """A checked chat-completions request."""

    model: str
    system: str
    messages: list[InMessage]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stops: list[str]
    return_token_ids: bool
    output: Output = field(default_factory=Output)

    @property
    def parts(self) -> list[Part]:
        """Every picture and clip, in message order."""
        return [p for m in self.messages for p in m.parts]


def parse_request(data: Any) -> ChatRequest:
    """Read a chat-completions body (parsed JSON); `ApiError` 400 names what is wrong."""
    if not isinstance(data, dict):
        raise _bad("The request body must be a JSON object")
    known = {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "n",
        "return_token_ids",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        *_INERT,
        *_NEUTRAL,
    }
    for key in data:
        if key not in known:
            raise _bad(f"This server does not support '{key}'", key, "unsupported_parameter")
    for key, neutral in _NEUTRAL.items():
        if data.get(key, neutral) not in (neutral, None):
            raise _bad(f"This server supports only {key}={neutral!r}", key)
    if data.get("n", 1) not in (1, None):
        raise _bad("This server writes one choice per request (n=1)", "n")
    try:
        output = read_output(data)
    except Unfit as e:
        raise _bad(e.message, e.param) from None
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' must name the served model (see GET /v1/models)", "model")
    stream = _flag(data, "stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    system, messages = _messages(data.get("messages"))
    temperature = _number(data, "temperature", 0.0, low=0.0, high=2.0)
    return ChatRequest(
        model=model,
        system=system,
        messages=messages,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        max_tokens=_max_tokens(data),
        temperature=temperature,
        top_p=_number(data, "top_p", 1.0, low=0.0, high=1.0, open_low=True),
        top_k=int(_number(data, "top_k", 50, low=1, high=1 << 20, integer=True)),
        seed=_seed(data),
        stops=_stops(data.get("stop")),
        return_token_ids=_flag(data, "return_token_ids"),
        output=output,
    )


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(f"'{key}' must be true or false", key)
    return value


def _number(
    data: dict[str, Any],
    key: str,
    default: float,
    *,
    low: float,
    high: float,
    open_low: bool = False,
    integer: bool = False,
) -> float:
    value = data.get(key)
    if value is None:
        return default
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type:
        raise _bad(f"'{key}' must be a {'whole ' if integer else ''}number", key)
    if not (low < value if open_low else low <= value) or value > high:
        raise _bad(f"'{key}' must be within {low}–{high} (got {value})", key)
    return float(value)


def _max_tokens(data: dict[str, Any]) -> int | None:
    key = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(f"'{key}' must be a whole number of at least 1", key)
    return value


def _seed(data: dict[str, Any]) -> int | None:
    value = data.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise _bad(f"'seed' must be a whole number from 0 to {MAX_SEED}", "seed")
    return value


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _bad("'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOPS:
        raise _bad(f"'stop' takes at most {MAX_STOPS} strings", "stop")
    return [s for s in stops if s]


def _messages(value: Any) -> tuple[str, list[InMessage]]:
    """The system text and the user/assistant messages (neighbours of one role merged)."""
    if not isinstance(value, list) or not value:
        raise _bad("'messages' must be a non-empty list", "messages")
    if len(value) > MAX_MESSAGES:
        raise _bad(f"'messages' holds at most {MAX_MESSAGES} messages", "messages")
    system: list[str] = []
    out: list[InMessage] = []
    for i, raw in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise _bad(f"{where} must be an object", where)
        role = raw.get("role")
        text, parts = _content(raw.get("content"), where, role == "user", role != "user")
        try:
            if role == "tool":  # a tool's result: the user's turn, as the templates write it
                if not isinstance(raw.get("tool_call_id"), str):
                    raise Unfit(f"{where} needs the 'tool_call_id' it answers", where)
                role, text = "user", render_result(text)
            elif role == "assistant" and raw.get("tool_calls") is not None:
                text = render_calls(text, raw["tool_calls"], where)
        except Unfit as e:
            raise _bad(e.message, e.param) from None
        if role in ("system", "developer"):
            if out:
                raise _bad(f"{where}: a system message must come before the others", where)
            system.append(text)
        elif role in ("user", "assistant"):
            if out and out[-1].role == role:  # the chat template wants turns to alternate
                out[-1].text = f"{out[-1].text}\n\n{text}" if out[-1].text else text
                out[-1].parts.extend(parts)
            else:
                out.append(InMessage(role, text, parts))
        else:
            raise _bad(f"{where}: role {role!r} is not supported here", f"{where}.role")
    if not out or out[-1].role != "user":
        raise _bad("The last message must be the user's", "messages")
    if sum(len(m.parts) for m in out) > MAX_PARTS:
        raise _bad(f"A request holds at most {MAX_PARTS} pictures and clips", "messages")
    return "\n\n".join(system), out


def _content(value: Any, where: str, media: bool, empty: bool) -> tuple[str, list[Part]]:
    """A message's text and its pictures and clips (only a user message may carry them).

    `empty`: the content may be null (an assistant's that only calls tools).
    """
    if isinstance(value, str):
        return value, []
    if value is None and empty:
        return "", []
    if not isinstance(value, list):
        raise _bad(f"{where}.content must be a string or a list of parts", f"{where}.content")
    texts: list[str] = []
    parts: list[Part] = []
    for j, part in enumerate(value):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "input_audio") and not media:
            raise _bad(f"{at}: only a user message may carry pictures and clips", at)
        elif kind == "image_url":
            parts.append(_image_part(part.get("image_url"), at))
        elif kind == "input_audio":
            parts.append(_audio_part(part.get("input_audio"), at))
        else:
            raise _bad(
                f"{at}: expected a part of type text, image_url or input_audio", at, "invalid_type"
            )
    return "\n".join(texts), parts


def _image_part(value: Any, at: str) -> Part:
    url = value.get("url") if isinstance(value, dict) else None
    if not isinstance(url, str) or not url:
        raise _bad(f"{at}: image_url needs a 'url'", f"{at}.image_url.url")
    if url.startswith(("http://", "https://")):
        return Part(IMAGE, "", url=url)
    if not url.startswith("data:"):
        raise _bad(f"{at}: the image URL must be a data: URL or http(s)", f"{at}.image_url.url")
    header, comma, payload = url[5:].partition(",")
    mime, _, encoding = header.partition(";")
    suffix = IMAGE_TYPES.get(mime.strip().lower())
    if not comma or encoding.strip().lower() != "base64" or suffix is None:
        raise _bad(
            f"{at}: expected data:image/<png|jpeg|webp|gif|bmp|tiff>;base64,...",
            f"{at}.image_url.url",
        )
    return Part(IMAGE, suffix, data=_base64(payload, f"{at}.image_url.url"))


def _audio_part(value: Any, at: str) -> Part:
    if not isinstance(value, dict):
        raise _bad(f"{at}: input_audio needs 'data' and 'format'", f"{at}.input_audio")
    fmt = value.get("format")
    suffix = AUDIO_FORMATS.get(fmt) if isinstance(fmt, str) else None
    if suffix is None:
        raise _bad(
            f"{at}: input_audio format must be one of {', '.join(AUDIO_FORMATS)}",
            f"{at}.input_audio.format",
        )
    data = value.get("data")
    if not isinstance(data, str):
        raise _bad(f"{at}: input_audio data must be base64 text", f"{at}.input_audio.data")
    return Part(AUDIO, suffix, data=_base64(data, f"{at}.input_audio.data"))


def _base64(text: str, param: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("The data is not valid base64", param) from None
    if not data:
        raise _bad("The data is empty", param)
    return data


# -- answers --------------------------------------------------------------------------


def completion_id() -> str:
    """A fresh id for one answer."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def finish_reason(stop_reason: str, stop_hit: bool) -> str:
    """The API's finish reason for a session's stop reason."""
    return "length" if stop_reason == "length" and not stop_hit else "stop"


def usage(prompt: int, completion: int) -> dict[str, int]:
    """The `usage` object."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion(
    ident: str,
    model: str,
    text: str,
    reason: str,
    counts: tuple[int, int],
    token_ids: list[int] | None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A whole (not streamed) answer; with `tool_calls`, its content is null."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": reason,
        "logprobs": None,
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(*counts),
    }


def chunk(
    ident: str,
    model: str,
    delta: dict[str, Any] | None,
    reason: str | None = None,
    token_ids: list[int] | None = None,
    counts: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One streamed chunk; `delta=None` is the usage-only chunk (no choices)."""
    out: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
    }
    if delta is not None:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "finish_reason": reason,
            "logprobs": None,
        }
        if token_ids is not None:
            choice["token_ids"] = token_ids
        out["choices"].append(choice)
    if counts is not None:
        out["usage"] = usage(*counts)
    return out


def call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Streamed deltas of finished calls, as the API sends them.

    Each call's id, type and name with empty arguments first, then its arguments.
    """
    deltas: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        function = call["function"]
        head = {**call, "index": i, "function": {"name": function["name"], "arguments": ""}}
        deltas.append({"tool_calls": [head]})
        arguments = {"index": i, "function": {"arguments": function["arguments"]}}
        deltas.append({"tool_calls": [arguments]})
    return deltas


class StopText:
    """Cuts streamed text at the first `stop` string, holding back what may begin one."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.held = ""
        self.hit = False

    def feed(self, piece: str) -> str:
        """The text that can be shown now ("" once a stop string was met)."""
        if self.hit:
            return ""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit, self.held = True, ""
            return text[: min(found)]
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:k]):
                    keep = k
                    break
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, at the end of the answer."""
        out, self.held = ("" if self.hit else self.held), ""
        return out
