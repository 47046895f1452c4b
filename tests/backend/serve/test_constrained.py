"""`response_format` and `tools` through the official `openai` client (issue 50).

The answers come from a random tiny model: their words are nonsense, but the runtime's
constrained decoding (llguidance) makes them valid JSON of the schema, and calls of the
tools given. Every server binds 127.0.0.1 on a free port and is stopped by its fixture.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mmforge.backend.serve import constrain
from mmforge.backend.serve.protocol import parse_request
from mmforge.backend.serve.server import ServeOptions, ServerHandle, start
from tests.backend.serve.test_serve import _picture_message

PICTURE = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
        "round": {"type": "boolean"},
    },
    "required": ["colour", "count", "round"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 3},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
CALL_TOKENS = 200  # the tiny vocabulary writes a call nearly a character a token


@pytest.fixture(scope="module")
def served(package) -> Iterator[ServerHandle]:
    handle = start(package("qwen2_5_vl"), ServeOptions(port=0))
    try:
        yield handle
    finally:
        handle.stop()


def _client(handle: ServerHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.url, api_key="none", max_retries=0, timeout=120)


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` meets the schemas used here (enum, bounded integer, boolean, object)."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema["type"]
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        bounded = schema.get("minimum", value) <= value <= schema.get("maximum", value)
        return isinstance(value, int) and not isinstance(value, bool) and bounded
    properties = schema["properties"]
    return (
        isinstance(value, dict)
        and set(value) == set(properties)
        and all(_valid(value[k], s) for k, s in properties.items())
    )


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"]["parameters"]


def test_json_schema_answer_about_a_picture(served: ServerHandle) -> None:
    answer = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message("Describe it as JSON."),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "picture", "schema": PICTURE, "strict": True},
        },
        max_tokens=64,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert _valid(json.loads(choice.message.content or ""), PICTURE)
    # json_object: any object
    answer = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message("Describe it as JSON."),
        response_format={"type": "json_object"},
        max_tokens=64,
    )
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(answer.choices[0].message.content or ""), dict)


def test_streamed_json_schema_answer(served: ServerHandle) -> None:
    stream = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message("Describe it as JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PICTURE}},
        max_tokens=64,
        stream=True,
    )
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert _valid(json.loads(text), PICTURE)


def test_required_tool_call_about_a_picture(served: ServerHandle) -> None:
    answer = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message("What is the weather where this was taken?"),
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=CALL_TOKENS,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id.startswith("call_")
    tool = {"get_weather": WEATHER, "get_time": TIME}[calls[0].function.name]
    assert _valid(json.loads(calls[0].function.arguments), _parameters(tool))


def test_named_tool_call_streamed(served: ServerHandle) -> None:
    stream = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message("What time is it?"),
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=CALL_TOKENS,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    reasons = []
    for chunk in stream:
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            assert not choice.delta.content  # a call is no text
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert reasons[-1] == "tool_calls"
    assert list(calls) == [0] and calls[0]["name"] == "get_time" and calls[0]["id"]
    assert _valid(json.loads(calls[0]["arguments"]), _parameters(TIME))


def test_auto_answers_text_or_calls_and_takes_tool_history(served: ServerHandle) -> None:
    """A conversation with a call and its result; "auto" lets the model answer in words."""
    history = [
        *_picture_message("What is the weather there?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Snow, -3 C"},
    ]
    answer = _client(served).chat.completions.create(
        model=served.model_id, messages=history, tools=[WEATHER, TIME], max_tokens=24
    )
    choice = answer.choices[0]
    if choice.finish_reason == "tool_calls":  # the model may call again: then a whole call
        assert choice.message.tool_calls and choice.message.content is None
    else:
        assert choice.message.tool_calls is None
        assert not (choice.message.content or "").startswith(constrain.OPEN)


def test_schemas_the_runtime_or_the_api_refuse_are_400(served: ServerHandle) -> None:
    client = _client(served)

    def refused(**extra: Any) -> openai.BadRequestError:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=served.model_id, messages=_picture_message(), max_tokens=4, **extra
            )
        assert "Traceback" not in caught.value.message
        return caught.value

    def schema(value: Any, strict: bool = False) -> dict[str, Any]:
        spec = {"name": "s", "schema": value, "strict": strict}
        return {"response_format": {"type": "json_schema", "json_schema": spec}}

    e = refused(**schema({"type": "object", "properties": {"a": {"type": "nonsense"}}}))
    assert e.code == "invalid_schema" and e.param == "response_format"
    assert "nonsense" in e.message
    e = refused(**schema({"type": "string", "pattern": "(?<=a)b"}))  # no look-around
    assert e.code == "invalid_schema"
    open_object = {**PICTURE, "additionalProperties": True}
    e = refused(**schema(open_object, strict=True))
    assert e.param == "response_format.json_schema.schema" and "additionalProperties" in e.message
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(20):  # 40 levels: within the body's 64, past a schema's 32
        deep = {"type": "object", "properties": {"a": deep}}
    assert refused(**schema(deep)).param == "response_format.json_schema.schema"
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}
    e = refused(tools=[bad_tool], tool_choice="required")
    assert e.code == "invalid_schema" and e.param == "tools"
    assert refused(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "x"}})
    assert refused(tools=[{"type": "retrieval"}]).param == "tools[0].type"
    # the server still answers
    answer = client.chat.completions.create(
        model=served.model_id, messages=_picture_message(), max_tokens=2
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 2


def test_tool_history_is_written_into_the_prompt_text() -> None:
    request = parse_request(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "Snow"},
                {"role": "tool", "tool_call_id": "c2", "content": "Wind"},
            ],
        }
    )
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "Weather?"),
        (
            "assistant",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
        ),
        (
            "user",
            "<tool_response>\nSnow\n</tool_response>\n\n<tool_response>\nWind\n</tool_response>",
        ),
    ]
    assert request.output.calls == constrain.NEVER


def test_in_process_chat_takes_guidance_and_tools(package, tmp_path: Path) -> None:
    """ChatSession's own path: a constrained answer, and the tools in the template's prompt.

    The tiny package's template has no tools: they are described in the system text. With
    Qwen3-VL's template (which renders `tools`) the template's own words carry them.
    """
    from importlib.resources import files

    from mmforge.backend.chat import ChatSession, GenerationOptions

    schema = json.dumps({**PICTURE, "x-guidance": constrain.COMPACT})
    tools = json.dumps([WEATHER])
    options = GenerationOptions(
        max_new_tokens=64, guidance_type="json_schema", guidance_data=schema, tools=tools
    )
    folder = tmp_path / "with-tools"
    shutil.copytree(package("qwen2_5_vl"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = files("mmforge.resources").joinpath("qwen3_vl_chat_template.jinja")
    config["chat_template"] = template.read_text(encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for package_folder, words in [
        (package("qwen2_5_vl"), "You may call functions"),
        (folder, "# Tools"),
    ]:
        session = ChatSession(package_folder)
        try:
            result = session.send("Describe it.", [], options)
            assert _valid(json.loads(result.text), PICTURE)
            prompt = session.driver.render(options)
            assert words in prompt and '"name": "get_weather"' in prompt
        finally:
            session.close()
