"""What an answer must be (`response_format`, `tools`), as a constraint on decoding.

ONNX Runtime GenAI 0.18 masks every token that would leave a JSON schema, a regular
expression or a Lark grammar (`GeneratorParams.set_guidance`, llguidance inside; the CPU
wheel has it, measured), so the constraint holds whatever the model, a random one
included. The schema is compiled where the generator is made; one llguidance refuses is
a 400 naming the field (`engine`).

- `response_format` json_schema: the answer is JSON valid against the schema, written
  compactly (`COMPACT`); json_object: any JSON object. Non-strict schemas are constrained
  too (the API only tries); `strict: true` schemas must also meet the API's strict rules
  (`check_strict`).
- `tools`: a call is written as Qwen's and Hermes' chat templates teach, and read back
  (`read_calls`) into `message.tool_calls`::

      <tool_call>
      {"name": "NAME", "arguments": {...}}
      </tool_call>

  "required": one call or more (one with `parallel_tool_calls: false`), each of a tool
  given and its arguments valid against that tool's parameters; a named function: one
  call of it; "auto": such calls, or text that does not begin with `<tool_call>` (or the
  JSON of `response_format`); "none": the tools are not shown and nothing is called.
  The template gets the tools (`template_tools`); one that does not use them has them
  described in the system text (`chat.generation.tools_in_system`).

Nothing here knows HTTP: a request this cannot take raises `Unfit` (the protocol's 400).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.untrusted import parse_json

MAX_TOOLS = 128  # as the API allows
MAX_SCHEMA_CHARS = 256 << 10  # every schema of a request, as JSON text
MAX_SCHEMA_DEPTH = 32
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the API's rule for tool and format names
OPEN, CLOSE, NL = "<tool_call>", "</tool_call>", "\n"
# llguidance's JSON options: no free whitespace (a small model loops in it), the
# separators Python's json.dumps and the templates' tojson write.
COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
NEVER, MAY, MUST = "never", "may", "must"


class Unfit(ValueError):
    """A request's format or tools this server cannot take (a 400 naming `param`)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]

    def template_form(self) -> dict[str, Any]:
        """As chat templates take it (the API's own shape)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Output:
    """What the answer must be.

    Attributes:
        schema: The JSON schema of `response_format` (None: text).
        tools: The tools the model may call.
        choice: "none", "auto", "required" or "function" (`function` names it).
        function: The function a named `tool_choice` asks for.
        parallel: Whether several calls may be made at once.
    """

    schema: dict[str, Any] | None = None
    tools: tuple[Tool, ...] = ()
    choice: str = "none"
    function: str = ""
    parallel: bool = True

    @property
    def calls(self) -> str:
        """Whether the answer makes calls: `NEVER`, `MAY` or `MUST`."""
        if not self.tools or self.choice == "none":
            return NEVER
        return MAY if self.choice == "auto" else MUST

    @property
    def param(self) -> str:
        """The request field a refused constraint came from."""
        return "response_format" if self.calls == NEVER else "tools"

    def template_tools(self) -> str:
        """The tools for the chat template, as JSON text ("" when no call can be made)."""
        if self.calls == NEVER:
            return ""
        return json.dumps([t.template_form() for t in self.tools], ensure_ascii=False)

    def guidance(self) -> tuple[str, str]:
        """The runtime's guidance (type, data); ("", "") for a free answer.

        Calls are a Lark grammar: the tags and each call's name are literals, and each
        tool's parameters its own `%json` schema (so a `$ref` in it resolves in it).
        """
        if self.calls == NEVER:
            if self.schema is None:
                return "", ""
            return "json_schema", _schema_text(self.schema)
        tools = [t for t in self.tools if self.choice != "function" or t.name == self.function]
        each = " | ".join(f"c{i}" for i in range(len(tools)))
        rules = [f"call: {_lark(OPEN + NL)} ({each}) {_lark(NL + CLOSE)}"]
        for i, t in enumerate(tools):
            head = _lark(f'{{"name": "{t.name}", "arguments": ')
            rules.append(f"c{i}: {head} %json{_schema_text(t.parameters)} {_lark('}')}")
        one = self.choice == "function" or not self.parallel
        rules.append("calls: call" if one else f"calls: call ({_lark(NL)} call)*")
        if self.calls == MUST:
            start = "start: calls"
        elif self.schema is not None:
            start = f"start: calls | %json{_schema_text(self.schema)}"
        else:  # text that does not begin a call, or nothing
            start = f"start: (calls | TEXT)?\nTEXT: /{_not_opening(OPEN)}/"
        return "lark_grammar", "\n".join([start, *rules])


def _lark(text: str) -> str:
    """A Lark string literal (JSON's escapes, which Lark reads alike)."""
    return json.dumps(text)


def _schema_text(schema: dict[str, Any]) -> str:
    return json.dumps({**schema, "x-guidance": COMPACT})


def _not_opening(prefix: str) -> str:
    """A regex for text that does not begin with `prefix` (may be a part of it, not empty)."""
    branches = [re.escape(prefix[:i]) + f"[^{re.escape(prefix[i])}]" for i in range(len(prefix))]
    whole = "(" + "|".join(branches) + r")[\s\S]*"
    return "|".join([whole, *(re.escape(prefix[:i]) for i in range(1, len(prefix)))])


def read_output(data: dict[str, Any]) -> Output:
    """`response_format`, `tools`, `tool_choice` and `parallel_tool_calls` of a request.

    Raises:
        Unfit: Naming the field.
    """
    schema = _response_format(data.get("response_format"))
    tools = _tools(data.get("tools"))
    choice, function = _tool_choice(data.get("tool_choice"), tools)
    parallel = data.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise Unfit("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    size = len(json.dumps([schema, [t.parameters for t in tools]]))
    if size > MAX_SCHEMA_CHARS:
        raise Unfit(
            f"The request's schemas hold {size} characters; this server takes at most "
            f"{MAX_SCHEMA_CHARS}",
            "tools" if tools else "response_format",
        )
    return Output(schema, tools, choice, function, parallel is not False)


def _response_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise Unfit(
            "'response_format' must be of type text, json_object or json_schema",
            "response_format",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise Unfit("response_format needs a 'json_schema' object", "response_format.json_schema")
    where = "response_format.json_schema"
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise Unfit(f"'{where}.name' must be 1 to 64 letters, digits, '_' or '-'", f"{where}.name")
    schema = spec.get("schema", {"type": "object"})
    _check_schema(schema, f"{where}.schema")
    if _strict(spec, where):
        if schema.get("type") != "object" or "anyOf" in schema:
            raise Unfit(
                f"Invalid schema for response_format '{name}': a strict schema's root must be "
                "an object, not anyOf",
                f"{where}.schema",
            )
        check_strict(schema, f"response_format '{name}'", f"{where}.schema")
    return dict(schema)


def _strict(spec: dict[str, Any], where: str) -> bool:
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise Unfit(f"'{where}.strict' must be true or false", f"{where}.strict")
    return strict is True


def _check_schema(schema: Any, param: str) -> None:
    if not isinstance(schema, dict):
        raise Unfit(f"'{param}' must be a JSON Schema object", param)
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise Unfit(f"'{param}' nests deeper than {MAX_SCHEMA_DEPTH} levels", param)
        inner = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in inner if isinstance(v, dict | list))


def check_strict(schema: dict[str, Any], what: str, param: str) -> None:
    """The API's rules for a strict schema: every object closed, every property required.

    Raises:
        Unfit: Naming where in the schema, as the API words it.
    """
    stack: list[tuple[Any, tuple[str, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object" or "properties" in node:
            properties = node.get("properties") or {}
            if node.get("additionalProperties") is not False:
                raise Unfit(
                    f"Invalid schema for {what}: In context={path}, 'additionalProperties' "
                    "is required to be supplied and to be false",
                    param,
                )
            required = node.get("required") or []
            missing = [k for k in properties if k not in required]
            if not isinstance(properties, dict) or missing:
                raise Unfit(
                    f"Invalid schema for {what}: In context={path}, 'required' must list "
                    f"every key in 'properties' (missing {missing[:3]})",
                    param,
                )
            stack.extend((v, (*path, "properties", k)) for k, v in properties.items())
        for key in ("items", "$defs", "definitions", "anyOf"):
            child = node.get(key)
            if isinstance(child, dict) and key in ("$defs", "definitions"):
                stack.extend((v, (*path, key, k)) for k, v in child.items())
            elif isinstance(child, list):
                stack.extend((v, (*path, key, str(i))) for i, v in enumerate(child))
            elif isinstance(child, dict):
                stack.append((child, (*path, key)))


def _tools(value: Any) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Unfit("'tools' must be a list", "tools")
    if len(value) > MAX_TOOLS:
        raise Unfit(f"'tools' holds at most {MAX_TOOLS} tools", "tools")
    tools: list[Tool] = []
    for i, raw in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(raw, dict) or raw.get("type") != "function":
            raise Unfit(f"{at}: only tools of type 'function' are supported", f"{at}.type")
        function = raw.get("function")
        if not isinstance(function, dict):
            raise Unfit(f"{at} needs a 'function' object", f"{at}.function")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise Unfit(
                f"'{at}.function.name' must be 1 to 64 letters, digits, '_' or '-'",
                f"{at}.function.name",
            )
        if any(t.name == name for t in tools):
            raise Unfit(f"{at}: a second function named {name!r}", f"{at}.function.name")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise Unfit(f"'{at}.function.description' must be text", f"{at}.function.description")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        _check_schema(parameters, f"{at}.function.parameters")
        if _strict(function, f"{at}.function"):
            check_strict(parameters, f"function '{name}'", f"{at}.function.parameters")
        tools.append(Tool(name, description, parameters))
    return tuple(tools)


def _tool_choice(value: Any, tools: tuple[Tool, ...]) -> tuple[str, str]:
    if value is None:
        return ("auto" if tools else "none"), ""
    if value in ("none", "auto", "required"):
        if value == "required" and not tools:
            raise Unfit("tool_choice 'required' needs 'tools'", "tool_choice")
        return str(value), ""
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise Unfit(
            "'tool_choice' must be none, auto, required or "
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if not any(t.name == name for t in tools):
        raise Unfit(f"tool_choice names {name[:64]!r}, which is not in 'tools'", "tool_choice")
    return "function", name


# -- the answer --------------------------------------------------------------------------


class CallWatch:
    """Tells calls from text while an answer streams.

    Under the constraint an answer is calls exactly when it begins with `<tool_call>`;
    text is held back only while it could still be that beginning.
    """

    def __init__(self, calls: str):
        self.mode = {NEVER: "text", MAY: "", MUST: "call"}[calls]
        self.held = ""

    @property
    def calling(self) -> bool:
        """Whether the answer is calls."""
        return self.mode == "call"

    def feed(self, piece: str) -> str:
        """The text to show now ("" for a call, or while undecided)."""
        if self.mode == "text":
            return piece
        if self.mode == "call":
            return ""
        self.held += piece
        if self.held.startswith(OPEN):
            self.mode, self.held = "call", ""
        elif not OPEN.startswith(self.held):
            self.mode = "text"
            out, self.held = self.held, ""
            return out
        return ""

    def flush(self) -> str:
        """What is still held at the end (an answer that stopped within `<tool_call>`)."""
        out, self.held = self.held, ""
        return out


def read_calls(text: str, tools: tuple[Tool, ...]) -> list[dict[str, Any]] | None:
    """The API's `tool_calls` from an answer that is calls; None when it is not whole.

    Whitespace around the tags is allowed, and the tags may be missing (a tokenizer that
    marks `<tool_call>` special leaves it out of the decoded text).
    """
    names = {t.name for t in tools}
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    at = 0
    while True:
        at = _skip(text, at, OPEN)
        if at >= len(text):
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError):
            return None
        if not isinstance(value, dict) or value.get("name") not in names:
            return None
        arguments = value.get("arguments")
        if not isinstance(arguments, dict):
            return None
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": value["name"],
                    "arguments": json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        at = _skip(text, at, CLOSE)
    return calls or None


def _skip(text: str, at: int, tag: str) -> int:
    """Past whitespace, `tag` if it comes next, and whitespace."""
    while at < len(text) and text[at].isspace():
        at += 1
    if text.startswith(tag, at):
        at += len(tag)
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def render_calls(text: str, calls: Any, where: str) -> str:
    """An assistant message's `tool_calls` as text after its content, in the call form.

    Raises:
        Unfit: A call that is not {id, type function, function {name, arguments}}.
    """
    if not isinstance(calls, list) or len(calls) > MAX_TOOLS:
        raise Unfit(f"{where}.tool_calls must be a list of at most {MAX_TOOLS}", where)
    out = [text] if text else []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise Unfit(f"{at} needs function.name and function.arguments (text)", at)
        try:  # the one reader of untrusted JSON: its size, depth and number limits
            value: Any = parse_json(arguments, at, limit=MAX_SCHEMA_CHARS)
        except MmforgeError:
            value = arguments  # as the client wrote it
        body = json.dumps({"name": name, "arguments": value}, ensure_ascii=False)
        out.append(f"{OPEN}\n{body}\n{CLOSE}")
    return "\n".join(out)


def render_result(text: str) -> str:
    """A tool's result (a `tool` message) as the user's text, as Qwen's templates write it."""
    return f"<tool_response>\n{text}\n</tool_response>"
