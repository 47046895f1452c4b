"""`mmforge serve` through the official `openai` client and plain HTTP, on tiny packages.

Every server binds 127.0.0.1 on a free port, and every one is stopped by its fixture.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mmforge import resources
from mmforge.app.cli import main
from mmforge.backend.serve.server import ServeOptions, ServerHandle, start

KEY = "test-key"
PROMPT = "What is in this picture?"
LONG = "Write a poem."  # the tiny model answers it with 2,775 tokens (about 3 s)


def _serve(package: Path, **options: Any) -> ServerHandle:
    return start(package, ServeOptions(port=0, **options))


@pytest.fixture(scope="module")
def served(package) -> Iterator[ServerHandle]:
    handle = _serve(package("qwen2_5_vl"), api_key=KEY)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def tight(package) -> Iterator[ServerHandle]:
    """A server with a 64 KiB body limit and no room to wait."""
    handle = _serve(package("qwen2_5_vl"), max_body_bytes=64 << 10, max_queue=0)
    try:
        yield handle
    finally:
        handle.stop()


def _client(handle: ServerHandle, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.url, api_key=key, max_retries=0, timeout=120)


def _data_url(path: Path, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _picture_message(text: str = PROMPT) -> list[dict[str, Any]]:
    picture = {"type": "image_url", "image_url": {"url": _data_url(resources.probe_image())}}
    return [{"role": "user", "content": [{"type": "text", "text": text}, picture]}]


def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _idle(handle: ServerHandle) -> None:
    _wait_for(lambda: handle.counts.active == 0 and handle.counts.queued == 0)


def test_models_lists_the_package(served: ServerHandle) -> None:
    models = _client(served).models.list()
    assert [m.id for m in models] == [served.model_id] == ["qwen2_5_vl-f32"]


def test_streamed_picture_answer_is_token_identical_to_chat_json(
    served: ServerHandle, package, capsys
) -> None:
    folder = package("qwen2_5_vl")
    argv = ["chat", str(folder), "--image", str(resources.probe_image()), "--prompt", PROMPT]
    assert main([*argv, "--max-new-tokens", "24", "--json"]) == 0
    chat = json.loads(capsys.readouterr().out)
    stream = _client(served).chat.completions.create(
        model=served.model_id,
        messages=_picture_message(),
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True},
    )
    text, ids, usage, reasons = "", [], None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            ids += (choice.model_extra or {}).get("token_ids") or []
            reasons.append(choice.finish_reason)
    assert ids == chat["token_ids"] and len(ids) == 24
    assert text == chat["text"]
    assert usage is not None and usage.completion_tokens == 24
    assert usage.prompt_tokens == chat["stats"]["prompt_tokens"]
    assert reasons[-1] == ("length" if chat["stop_reason"] == "length" else "stop")


def test_whole_answer_with_options_and_usage(served: ServerHandle) -> None:
    client = _client(served)
    answer = client.chat.completions.create(
        model=served.model_id,
        messages=_picture_message(),
        max_completion_tokens=12,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and answer.usage is not None
    assert answer.usage.completion_tokens == 12 and answer.usage.prompt_tokens > 12
    ids = (choice.model_extra or {})["token_ids"]
    assert len(ids) == 12
    # Sampling with a seed repeats itself; a stop string cuts the answer before it.
    sampled = [
        client.chat.completions.create(
            model=served.model_id,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=16,
            temperature=0.8,
            top_p=0.9,
            seed=5,
        )
        .choices[0]
        .message.content
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]
    full = choice.message.content or ""
    stop = full[3:5]
    cut = client.chat.completions.create(
        model=served.model_id,
        messages=_picture_message(),
        max_tokens=12,
        temperature=0,
        stop=[stop],
    )
    assert cut.choices[0].message.content == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_disconnect_mid_stream_stops_the_answer(served: ServerHandle) -> None:
    _idle(served)
    before = served.counts
    stream = _client(served).chat.completions.create(
        model=served.model_id,
        messages=[{"role": "user", "content": LONG}],
        max_tokens=3000,
        stream=True,
    )
    for n, _ in enumerate(stream):
        if n == 3:
            break
    stream.close()
    _wait_for(lambda: served.counts.cancelled == before.cancelled + 1)
    _idle(served)
    assert served.counts.served == before.served


def test_two_clients_at_once_are_answered_in_turn(served: ServerHandle) -> None:
    _idle(served)
    before = served.counts.served
    answers: dict[int, str] = {}

    def ask(n: int) -> None:
        stream = _client(served).chat.completions.create(
            model=served.model_id, messages=_picture_message(), max_tokens=16, stream=True
        )
        answers[n] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 2 and answers[0] == answers[1] and answers[0]
    _wait_for(lambda: served.counts.served == before + 2)


def test_bad_key_is_refused(served: ServerHandle) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        _client(served, "wrong").models.list()
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"


def test_oversized_body_is_413(tight: ServerHandle) -> None:
    big = io.BytesIO(b"\0" * (100 << 10)).getvalue()
    url = "data:image/png;base64," + base64.b64encode(big).decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    with pytest.raises(openai.APIStatusError) as caught:
        _client(tight).chat.completions.create(model=tight.model_id, messages=messages)
    assert caught.value.status_code == 413
    assert caught.value.code == "request_too_large"


def test_full_queue_is_429_with_retry_after(tight: ServerHandle) -> None:
    _idle(tight)
    stream = _client(tight).chat.completions.create(
        model=tight.model_id,
        messages=[{"role": "user", "content": LONG}],
        max_tokens=3000,
        stream=True,
    )
    try:
        next(iter(stream))
        with pytest.raises(openai.RateLimitError) as caught:
            _client(tight).chat.completions.create(
                model=tight.model_id, messages=[{"role": "user", "content": "Hi"}]
            )
        assert int(caught.value.response.headers["retry-after"]) >= 1
    finally:
        stream.close()
    _idle(tight)


def test_audio_part(package) -> None:
    clip = base64.b64encode(resources.probe_audio().read_bytes()).decode()
    audio = {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "Listen."}, audio]}]
    with _serve(package("gemma4")) as handle:
        answer = _client(handle).chat.completions.create(
            model=handle.model_id, messages=messages, max_tokens=6, temperature=0
        )
        assert answer.usage is not None and answer.usage.completion_tokens == 6
        # A clip the package cannot hear, in a picture-only package's server, is a 400.
    with _serve(package("qwen2_5_vl")) as handle, pytest.raises(openai.BadRequestError) as bad:
        _client(handle).chat.completions.create(
            model=handle.model_id, messages=messages, max_tokens=6
        )
    assert "cannot hear audio" in bad.value.message


def _post(handle: ServerHandle, path: str, body: Any, key: str = KEY) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(handle.host, handle.port, timeout=120)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    conn.request("POST", path, data, headers)
    return conn.getresponse()


def test_plain_http_stream_and_errors(served: ServerHandle) -> None:
    """What curl would see: server-sent events ending in [DONE], and errors' shapes."""
    body = {
        "model": served.model_id,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 5,
        "stream": True,
    }
    response = _post(served, "/v1/chat/completions", body)
    assert response.status == 200
    assert response.getheader("content-type", "").startswith("text/event-stream")
    events = [
        line[len("data: ") :]
        for line in response.read().decode().splitlines()
        if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"

    def error(body: Any, status: int) -> dict[str, Any]:
        response = _post(served, "/v1/chat/completions", body)
        assert response.status == status
        data = json.loads(response.read())
        assert set(data["error"]) == {"message", "type", "param", "code"}
        return data["error"]

    text_part = {"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}
    bad_part = {**body, "messages": [{"role": "user", "content": [text_part]}]}
    assert error(bad_part, 400)["param"] == "messages[0].content[0].image_url.url"
    not_picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}
    assert error({**body, "messages": [{"role": "user", "content": [not_picture]}]}, 400)
    assert error(b"{not json", 400)
    assert error({**body, "n": 2}, 400)["param"] == "n"
    assert error({**body, "model": "other"}, 404)["code"] == "model_not_found"
    fetch = {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}
    assert error({**body, "messages": [{"role": "user", "content": [fetch]}]}, 400)["code"] == (
        "fetch_not_allowed"
    )
    long = {**body, "messages": [{"role": "user", "content": "word " * 5000}]}
    assert error(long, 422)["code"] == "context_length_exceeded"
    response = _post(served, "/v1/nothing", body)
    assert response.status == 404 and "error" in json.loads(response.read())


def test_cli_refuses_another_host_without_a_key(package, capsys) -> None:
    code = main(["serve", str(package("qwen2_5_vl")), "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("mmforge: error: Serving on 0.0.0.0") and "--api-key" in err


def test_cli_serves_until_sigterm(package, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import urllib.request

    folder = str(package("qwen2_5_vl"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmforge.app", "serve", folder, "--port", "0", "--events"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        listening = json.loads(proc.stdout.readline())
        assert listening["event"] == "listening" and listening["model"] == "qwen2_5_vl-f32"
        with urllib.request.urlopen(listening["url"] + "/models", timeout=30) as response:
            assert json.loads(response.read())["data"][0]["id"] == "qwen2_5_vl-f32"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert json.loads(out.splitlines()[-1])["event"] == "stopped"


def test_pictures_by_web_address_only_when_allowed(package, tmp_path: Path, monkeypatch) -> None:
    import functools
    import ipaddress
    import shutil
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from mmforge.backend.serve import intake

    # The loopback server stands in for the web (only public addresses are fetched).
    loopback = ipaddress.ip_address("127.0.0.1")
    monkeypatch.setattr(intake, "is_public", lambda address: address == loopback)

    shutil.copy(resources.probe_image(), tmp_path / "probe.png")
    (tmp_path / "big.png").write_bytes(b"\0" * (100 << 10))

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    web = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=tmp_path))
    thread = threading.Thread(target=web.serve_forever)
    thread.start()
    try:
        base = f"http://127.0.0.1:{web.server_address[1]}"

        def ask(handle: ServerHandle, name: str) -> Any:
            picture = {"type": "image_url", "image_url": {"url": f"{base}/{name}"}}
            return _client(handle).chat.completions.create(
                model=handle.model_id,
                messages=[{"role": "user", "content": [picture]}],
                max_tokens=4,
            )

        with _serve(package("qwen2_5_vl"), allow_fetch=True, max_body_bytes=64 << 10) as handle:
            assert ask(handle, "probe.png").usage.prompt_tokens > 30  # the picture's tokens
            with pytest.raises(openai.APIStatusError) as too_large:
                ask(handle, "big.png")
            assert too_large.value.status_code == 413
    finally:
        web.shutdown()
        web.server_close()
        thread.join()


def test_a_conversation_given_whole_is_answered_as_chat_continues_one(
    served: ServerHandle, package
) -> None:
    """History with a picture and an answer, then a question.

    The API gives earlier answers as text, so the server answers as chat does when it
    continues a saved conversation (its history prefilled afresh from the text).
    """
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.chat.conversations import Conversation, Message

    session = ChatSession(package("qwen2_5_vl"))
    try:
        picture = session.prepare_attachments([(resources.probe_image(), IMAGE)])
        first = session.send(PROMPT, picture, GenerationOptions(max_new_tokens=6))
        saved = Conversation(
            id="unsaved",
            package=str(package("qwen2_5_vl")),
            system="Be brief.",
            messages=[Message("user", PROMPT, picture), Message("assistant", first.text)],
        )
        session.open_conversation(saved)
        expected = session.send("And the colours?", [], GenerationOptions(max_new_tokens=8))
    finally:
        session.close()
    messages = [
        {"role": "system", "content": "Be brief."},
        *_picture_message(),
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And the colours?"},
    ]
    answer = _client(served).chat.completions.create(
        model=served.model_id,
        messages=messages,
        max_tokens=8,
        extra_body={"return_token_ids": True},
    )
    assert (answer.choices[0].model_extra or {})["token_ids"] == expected.token_ids
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == expected.stats.prompt_tokens


def test_a_worker_that_dies_is_an_error_not_a_hang(package) -> None:
    with _serve(package("qwen2_5_vl")) as handle:
        handle.engine.client._job.process.kill()
        handle.engine.client._job.process.wait(30)
        client = _client(handle)
        ask = {"model": handle.model_id, "messages": [{"role": "user", "content": "Hi"}]}
        for _ in range(2):  # at once (noticed while idle) and from then on
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(**ask, max_tokens=3)
            assert caught.value.status_code == 503 and caught.value.code == "worker_stopped"
            assert "restart the server" in caught.value.message
