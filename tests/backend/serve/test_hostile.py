"""Hostile content, fourth round (issue 47): the server against web pages and bad clients.

Every server binds 127.0.0.1 on a free port and every one is stopped by its fixture or
its `with` block; every socket a test opens goes to that server or to a loopback picture
server of its own. Request loops are bounded in count and time.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mmforge import resources
from mmforge.app.cli import main
from mmforge.backend.serve import intake
from mmforge.backend.serve.protocol import ApiError, Part
from mmforge.backend.serve.server import ServeOptions, ServerHandle, start
from tests.backend.serve.test_serve import _idle, _wait_for

LONG = "Write a poem."  # the tiny model answers it with 2,775 tokens (about 3 s)
HALF_HEADERS = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appli"


@pytest.fixture(scope="module")
def served(package) -> Iterator[ServerHandle]:
    """A server with the default settings (no key, loopback)."""
    handle = start(package("qwen2_5_vl"), ServeOptions(port=0))
    try:
        yield handle
    finally:
        handle.stop()


def _request(
    handle: ServerHandle,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(handle.host, handle.port, timeout=60)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, data, {k: v for k, v in sent.items() if v is not None})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _error(data: bytes) -> dict[str, Any]:
    error = json.loads(data)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def _ask(handle: ServerHandle, **extra: Any) -> dict[str, Any]:
    return {
        "model": handle.model_id,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 2,
        **extra,
    }


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes the socket within `within` seconds (what it sent is read)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:  # reset: closed as well
            return True
    return False


# -- web pages: DNS rebinding, cross-site requests, content types -----------------------


def test_a_page_under_another_host_name_is_refused(served: ServerHandle) -> None:
    """DNS rebinding: a page whose name now points at 127.0.0.1 sends its own Host."""
    before = served.counts.received
    rebound = f"rebind.example:{served.port}"
    status, _, data = _request(served, "GET", "/v1/models", headers={"Host": rebound})
    assert status == 403 and _error(data)["code"] == "host_not_allowed"
    status, _, data = _request(
        served, "POST", "/v1/chat/completions", _ask(served), {"Host": rebound}
    )
    assert status == 403 and _error(data)["code"] == "host_not_allowed"
    assert served.counts.received == before  # the model never saw it
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "LOCALHOST", "[::1]"):
        status, _, data = _request(served, "GET", "/v1/models", headers={"Host": host})
        assert status == 200, (host, data)


def test_a_cross_site_request_is_refused(served: ServerHandle) -> None:
    """A page elsewhere may POST to loopback without a preflight: it is refused unread."""
    before = served.counts.received
    page = {"Origin": "https://evil.example"}
    status, headers, data = _request(served, "POST", "/v1/chat/completions", _ask(served), page)
    assert status == 403 and _error(data)["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in headers
    status, _, _ = _request(served, "GET", "/v1/models", headers=page)
    assert status == 403
    preflight = {**page, "Access-Control-Request-Method": "POST"}
    status, headers, _ = _request(served, "OPTIONS", "/v1/chat/completions", headers=preflight)
    assert status == 403 and "access-control-allow-origin" not in headers
    assert served.counts.received == before


def test_a_body_not_sent_as_json_is_415(served: ServerHandle) -> None:
    """A form or text/plain POST (what a page may send without asking) never runs the model."""
    _idle(served)
    before = served.counts.received
    body = json.dumps(_ask(served)).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        status, _, data = _request(
            served, "POST", "/v1/chat/completions", body, {"Content-Type": kind}
        )
        assert status == 415, kind
        assert _error(data)["code"] == "unsupported_media_type"
    assert served.counts.received == before
    kind = "application/json; charset=utf-8"
    status, _, _ = _request(served, "POST", "/v1/chat/completions", body, {"Content-Type": kind})
    assert status == 200


def test_an_allowed_origin_gets_cors_and_its_preflight(package) -> None:
    page = "http://app.example:3000"
    options = ServeOptions(port=0, allow_origins=(page,))
    with start(package("qwen2_5_vl"), options) as handle:
        preflight = {
            "Origin": page,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
        }
        status, headers, _ = _request(handle, "OPTIONS", "/v1/chat/completions", None, preflight)
        assert status == 204
        assert headers["access-control-allow-origin"] == page
        assert "POST" in headers["access-control-allow-methods"]
        allowed = headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed and "content-type" in allowed
        assert "x-stainless-os" in allowed
        status, headers, _ = _request(
            handle, "POST", "/v1/chat/completions", _ask(handle), {"Origin": page}
        )
        assert status == 200 and headers["access-control-allow-origin"] == page
        assert "origin" in headers.get("vary", "").lower()
        # An error answer is readable by the allowed page too.
        status, headers, _ = _request(
            handle, "POST", "/v1/chat/completions", _ask(handle, n=2), {"Origin": page}
        )
        assert status == 400 and headers["access-control-allow-origin"] == page
        other = {**preflight, "Origin": "http://app.example:3001"}
        status, headers, _ = _request(handle, "OPTIONS", "/v1/chat/completions", None, other)
        assert status == 403 and "access-control-allow-origin" not in headers


@pytest.mark.parametrize(
    "origin", ["*", "null", "app.example", "ftp://app.example", "http://app.example/chat"]
)
def test_an_origin_the_server_cannot_match_is_refused(package, capsys, origin: str) -> None:
    code = main(["serve", str(package("qwen2_5_vl")), "--port", "0", "--allow-origin", origin])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "--allow-origin" in err


# -- slow and vanished clients ----------------------------------------------------------


def test_half_open_sockets_do_not_lock_others_out(served: ServerHandle) -> None:
    """30 sockets that send half their headers: others are answered, and they are closed."""
    sockets = [socket.create_connection((served.host, served.port), timeout=10) for _ in range(30)]
    try:
        for sock in sockets:
            sock.sendall(HALF_HEADERS)
        start_s = time.monotonic()
        status, _, data = _request(served, "GET", "/v1/models")
        assert status == 200, data
        assert time.monotonic() - start_s < 10
        # The default header timeout is 10 s: closed within a few seconds of it.
        assert all(_closed_by_server(sock, 25) for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


def test_the_oldest_half_open_sockets_make_room(package) -> None:
    """Past the connection limit the oldest unfinished requests go, not the new client."""
    options = ServeOptions(port=0, header_timeout_s=60, max_connections=12)
    with start(package("qwen2_5_vl"), options) as handle:
        sockets = [socket.create_connection((handle.host, handle.port), timeout=10)]
        try:
            for _ in range(19):
                sockets[-1].sendall(HALF_HEADERS)
                time.sleep(0.02)  # in order: the first ones are the oldest
                sockets.append(socket.create_connection((handle.host, handle.port), timeout=10))
            status, _, _ = _request(handle, "GET", "/v1/models")
            assert status == 200
            assert _closed_by_server(sockets[0], 5)  # the oldest made room
            assert not _closed_by_server(sockets[-2], 0.5)  # a recent one is still open
        finally:
            for sock in sockets:
                sock.close()


def test_a_body_that_trickles_is_408(package) -> None:
    options = ServeOptions(port=0, body_timeout_s=2)
    with (
        start(package("qwen2_5_vl"), options) as handle,
        socket.create_connection((handle.host, handle.port), timeout=15) as sock,
    ):
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model"'
        )
        start_s = time.monotonic()
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after it
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"request_timeout" in answer
        assert time.monotonic() - start_s < 10
        assert handle.counts.received == 0


def test_a_declared_body_over_the_limit_is_413_at_once(served: ServerHandle) -> None:
    with socket.create_connection((served.host, served.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2000000000\r\n\r\n"
        )
        start_s = time.monotonic()
        answer = sock.recv(65536)
        while b"request_too_large" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer
        assert time.monotonic() - start_s < 10


def test_a_client_that_hangs_up_stops_a_whole_answer(served: ServerHandle) -> None:
    """A request that is not streamed stops within a token or two of its client leaving."""
    _idle(served)
    before = served.counts
    body = json.dumps(
        {
            "model": served.model_id,
            "messages": [{"role": "user", "content": LONG}],
            "max_tokens": 3000,
        }
    ).encode()
    with socket.create_connection((served.host, served.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        _wait_for(lambda: served.counts.active == 1)
        time.sleep(0.5)  # tokens flow
    _wait_for(lambda: served.counts.cancelled == before.cancelled + 1, timeout=10)
    _idle(served)
    assert served.counts.served == before.served
    # The next client is answered at once, not after the vanished one's answer.
    start_s = time.monotonic()
    status, _, _ = _request(served, "POST", "/v1/chat/completions", _ask(served))
    assert status == 200 and time.monotonic() - start_s < 10


# -- client errors are 4xx --------------------------------------------------------------


def test_a_seed_past_32_bits_is_400(served: ServerHandle) -> None:
    sampled = {"temperature": 0.8, "max_tokens": 3}
    for seed in (2**31, 2**63 - 1, -1):
        status, _, data = _request(
            served, "POST", "/v1/chat/completions", _ask(served, seed=seed, **sampled)
        )
        assert status == 400 and _error(data)["param"] == "seed", (seed, data)
    status, _, _ = _request(
        served, "POST", "/v1/chat/completions", _ask(served, seed=2**31 - 1, **sampled)
    )
    assert status == 200


def test_a_top_k_above_the_vocabulary_means_the_whole_vocabulary(
    served: ServerHandle, package
) -> None:
    vocab = json.loads((package("qwen2_5_vl") / "genai_config.json").read_text())["model"][
        "vocab_size"
    ]
    answers = []
    for top_k in (vocab, 1 << 20):
        status, _, data = _request(
            served,
            "POST",
            "/v1/chat/completions",
            _ask(served, temperature=1.5, top_k=top_k, seed=7, max_tokens=8),
        )
        assert status == 200, data
        answers.append(json.loads(data)["choices"][0]["message"]["content"])
    assert answers[0] == answers[1]


def test_generation_options_take_a_32_bit_seed_and_any_top_k() -> None:
    from mmforge.backend.chat.values import MAX_SEED, GenerationOptions
    from mmforge.backend.errors import MmforgeError

    assert MAX_SEED == 2**31 - 1
    GenerationOptions(do_sample=True, seed=MAX_SEED)
    for seed in (MAX_SEED + 1, -1):
        with pytest.raises(MmforgeError, match="seed"):
            GenerationOptions(do_sample=True, seed=seed)
    options = GenerationOptions(do_sample=True, top_k=1 << 20)
    assert options.within_vocabulary(391).top_k == 391
    assert options.within_vocabulary(None) is options
    assert GenerationOptions(top_k=40).within_vocabulary(391).top_k == 40


def test_chat_refuses_a_seed_past_32_bits_before_loading(package, capsys) -> None:
    folder = str(package("qwen2_5_vl"))
    start_s = time.monotonic()
    code = main(["chat", folder, "--prompt", "Hi", "--temperature", "0.8", "--seed", "2147483648"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--seed" in err and "2147483647" in err
    assert time.monotonic() - start_s < 5  # said before the model loads


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_body_limit_that_is_no_size_is_refused(package, capsys, value: str) -> None:
    code = main(["serve", str(package("qwen2_5_vl")), "--port", "0", "--max-body-mb", value])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "--max-body-mb" in err


# -- the key ----------------------------------------------------------------------------


def test_a_key_outside_ascii_matches_its_utf8_bytes(package) -> None:
    key = "clé-ключ-✓"
    with start(package("qwen2_5_vl"), ServeOptions(port=0, api_key=key)) as handle:
        conn = http.client.HTTPConnection(handle.host, handle.port, timeout=30)
        try:
            conn.putrequest("GET", "/v1/models")
            conn.putheader("Authorization", b"Bearer " + key.encode())
            conn.endheaders()
            assert conn.getresponse().status == 200
        finally:
            conn.close()
        status, _, _ = _request(handle, "GET", "/v1/models", headers={"Authorization": "Bearer x"})
        assert status == 401


def _serve_cli(package, check: Any, *extra: str, env: dict[str, str] | None = None) -> str:
    """`mmforge serve` in a child: `check(url)` while it listens; its stderr after SIGTERM."""
    import os
    import signal

    command = [sys.executable, "-m", "mmforge.app", "serve", str(package("qwen2_5_vl"))]
    proc = subprocess.Popen(
        [*command, "--port", "0", "--events", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=60)[1]
        check(json.loads(line)["url"])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return str(err)


def _models(url: str, key: str | None) -> int:
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url + "/models", headers=headers), timeout=30
        ) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_key_from_a_file_or_the_environment(package, tmp_path: Path) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text("from-a-file\n")
    seen: list[tuple[int, int]] = []
    err = _serve_cli(
        package,
        lambda url: seen.append((_models(url, None), _models(url, "from-a-file"))),
        "--api-key-file",
        str(key_file),
    )
    assert seen == [(401, 200)] and "warning" not in err.lower()
    _serve_cli(
        package,
        lambda url: seen.append((_models(url, None), _models(url, "from-env"))),
        env={"MMFORGE_API_KEY": "from-env"},
    )
    assert seen[-1] == (401, 200)


def test_a_key_on_the_command_line_works_and_warns(package) -> None:
    seen: list[int] = []
    err = _serve_cli(package, lambda url: seen.append(_models(url, "k")), "--api-key", "k")
    assert seen == [200]
    assert "--api-key" in err and "other users" in err and "--api-key-file" in err


@pytest.mark.parametrize("content", [None, "", "  \n", "a\x00b"])
def test_a_key_file_that_holds_no_key_is_refused(package, tmp_path, capsys, content) -> None:
    key_file = tmp_path / "key.txt"
    if content is not None:
        key_file.write_text(content)
    folder = str(package("qwen2_5_vl"))
    code = main(["serve", folder, "--port", "0", "--api-key-file", str(key_file)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "key.txt" in err


# -- a dead worker ----------------------------------------------------------------------


def test_a_dead_worker_is_reported_on_health_and_as_503(package) -> None:
    stopped: list[str] = []
    handle = start(package("qwen2_5_vl"), ServeOptions(port=0))
    try:
        status, _, data = _request(handle, "GET", "/health")
        assert status == 200 and json.loads(data)["status"] == "ok"
        handle.engine.on_stopped = stopped.append
        handle.engine.client._job.process.kill()
        handle.engine.client._job.process.wait(30)

        def reported() -> bool:
            return _request(handle, "GET", "/health")[0] == 503

        _wait_for(reported, timeout=10)
        body = json.loads(_request(handle, "GET", "/health")[2])
        assert body["status"] == "worker_stopped" and "restart" in body["message"]
        assert stopped and "restart" in stopped[0]
        for _ in range(2):
            status, _, data = _request(handle, "POST", "/v1/chat/completions", _ask(handle))
            assert status == 503 and _error(data)["code"] == "worker_stopped"
    finally:
        handle.stop()


# -- --allow-fetch: public addresses only, bounded in time and size ---------------------


class _Pictures(BaseHTTPRequestHandler):
    """A loopback web server: /probe.png, /redirect?to=URL, /trickle, /garbage."""

    hits: list[str]
    folder: Path

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", self.path.split("=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/trickle":  # one byte every 0.2 s, for at most 12 s
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                try:
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)
        elif self.path.startswith("/big"):
            data = b"\0" * (40 << 10)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            data = (self.folder / "probe.png").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


@contextlib.contextmanager
def _picture_server(folder: Path, address: str) -> Iterator[tuple[str, list[str]]]:
    """A loopback picture server: its base URL and the paths it was asked."""
    import shutil

    shutil.copy(resources.probe_image(), folder / "probe.png")
    hits: list[str] = []
    handler = type("Handler", (_Pictures,), {"hits": hits, "folder": folder})
    web = ThreadingHTTPServer((address, 0), handler)
    web.daemon_threads = True
    thread = threading.Thread(target=web.serve_forever)
    thread.start()
    try:
        yield f"http://{address}:{web.server_address[1]}", hits
    finally:
        web.shutdown()
        web.server_close()
        thread.join()


@pytest.fixture
def pictures(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A picture server at 127.0.0.1."""
    with _picture_server(tmp_path, "127.0.0.1") as served:
        yield served


def _only_127_0_0_1_is_public(monkeypatch) -> None:
    """Treat 127.0.0.1 as a public address (the loopback server stands in for the web)."""
    import ipaddress

    real = getattr(intake, "is_public", None)

    def is_public(address: Any) -> bool:
        if address == ipaddress.ip_address("127.0.0.1"):
            return True
        return bool(real(address)) if real is not None else False

    monkeypatch.setattr(intake, "is_public", is_public, raising=False)


def _fetch(url: str, max_bytes: int = 1 << 20) -> intake.RequestFiles:
    return intake.write_parts([Part("image", "", url=url)], allow_fetch=True, max_bytes=max_bytes)


def test_fetch_refuses_this_computer(pictures) -> None:
    base, hits = pictures
    port = base.rsplit(":", 1)[1]
    for url in (f"{base}/probe.png", f"http://localhost:{port}/probe.png"):
        with pytest.raises(ApiError) as refused:
            _fetch(url)
        assert refused.value.status == 400 and refused.value.code == "fetch_not_allowed"
    assert hits == []  # never contacted


def test_only_public_addresses_are_fetched() -> None:
    import ipaddress

    from mmforge.backend.serve.intake import is_public

    for text in (
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
        "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::",
        "192.0.2.1", "198.51.100.1",
    ):  # fmt: skip
        assert not is_public(ipaddress.ip_address(text)), text
    for text in ("93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"):
        assert is_public(ipaddress.ip_address(text)), text


def test_fetch_does_not_follow_a_redirect_to_a_private_address_or_ftp(
    pictures, monkeypatch, tmp_path_factory
) -> None:
    base, hits = pictures
    _only_127_0_0_1_is_public(monkeypatch)
    files = _fetch(f"{base}/probe.png")  # the stand-in for the web is fetched
    files.cleanup()
    try:
        inside = _picture_server(tmp_path_factory.mktemp("inside"), "127.0.0.2")
        inside_base, inside_hits = inside.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 is not a loopback address here")
    try:
        with pytest.raises(ApiError) as refused:
            _fetch(f"{base}/redirect?to={inside_base}/probe.png")
        assert refused.value.status == 400 and refused.value.code == "fetch_not_allowed"
        assert inside_hits == []  # the address behind the redirect was never contacted
    finally:
        inside.__exit__(None, None, None)
    port = base.rsplit(":", 1)[1]
    with pytest.raises(ApiError) as refused:
        _fetch(f"{base}/redirect?to=ftp://127.0.0.1:{port}/x.png")
    assert refused.value.status == 400
    assert "/x.png" not in hits


def test_fetch_errors_do_not_tell_an_open_port_from_a_closed_one(pictures, monkeypatch) -> None:
    _only_127_0_0_1_is_public(monkeypatch)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def garbage() -> None:  # an open port that is no web server
        listener.settimeout(20)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    thread = threading.Thread(target=garbage, daemon=True)
    thread.start()
    messages = []
    try:
        for port in (closed_port, listener.getsockname()[1]):
            with pytest.raises(ApiError) as failed:
                _fetch(f"http://127.0.0.1:{port}/x.png")
            messages.append((failed.value.status, failed.value.message, failed.value.code))
    finally:
        listener.close()
        thread.join(30)
    assert messages[0] == messages[1]


def test_a_fetch_has_a_total_time_limit(pictures, monkeypatch) -> None:
    base, _ = pictures
    _only_127_0_0_1_is_public(monkeypatch)
    monkeypatch.setattr(intake, "FETCH_TIMEOUT_S", 2.0)
    start_s = time.monotonic()
    with pytest.raises(ApiError) as failed:
        _fetch(f"{base}/trickle")
    assert failed.value.status == 400
    assert time.monotonic() - start_s < 8  # a 1,000-byte trickle takes 200 s


def test_fetched_pictures_share_one_size_budget(pictures, monkeypatch) -> None:
    base, _ = pictures
    _only_127_0_0_1_is_public(monkeypatch)
    written: list[intake.RequestFiles] = []
    real = intake.RequestFiles

    def recorded() -> intake.RequestFiles:
        written.append(real())
        return written[-1]

    monkeypatch.setattr(intake, "RequestFiles", recorded)
    parts = [Part("image", "", url=f"{base}/big{n}") for n in range(3)]  # 40 KiB each
    with pytest.raises(ApiError) as too_large:
        intake.write_parts(parts, allow_fetch=True, max_bytes=64 << 10)
    assert too_large.value.status == 413
    assert written and not written[0].folder.exists()  # nothing left behind
    files = intake.write_parts(parts[:1], allow_fetch=True, max_bytes=64 << 10)
    files.cleanup()
