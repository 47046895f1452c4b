"""Serve on this computer: the chat page starts `mmforge serve`, shows its address and count."""

from __future__ import annotations

import json
import urllib.request

import pytest

from mmforge.gui.serve_bar import ServeBar


def test_serve_bar_serves_counts_and_stops(qtbot, package) -> None:
    folder = str(package("qwen2_5_vl"))
    bar = ServeBar(lambda: (folder, "cpu"), port=0)
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.serving, timeout=120_000) as started:
        bar.button.click()
    assert started.args == [True]
    url = bar.address.text()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert bar.copy_button.isEnabled() and bar.count.text() == "0 requests"
    body = {
        "model": "qwen2_5_vl-f32",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 3,
    }
    request = urllib.request.Request(
        url + "/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] == 3
    qtbot.waitUntil(lambda: bar.count.text() == "1 request", timeout=30_000)
    with qtbot.waitSignal(bar.serving, timeout=30_000) as ended:
        bar.button.click()
    assert ended.args == [False] and not bar.running
    assert bar.address.text() == "" and bar.button.text() == "Serve on this computer"


def test_serve_bar_says_why_it_could_not_start(qtbot, tmp_path) -> None:
    bar = ServeBar(lambda: (str(tmp_path), "cpu"), port=0)
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.serving, timeout=60_000) as ended:
        bar.button.click()
    assert ended.args == [False]
    assert bar.count.text() and "Traceback" not in bar.count.text()


def _start(qtbot, bar: ServeBar) -> str:
    with qtbot.waitSignal(bar.serving, timeout=120_000) as started:
        bar.button.click()
    assert started.args == [True]
    return bar.address.text()


def _stop(qtbot, bar: ServeBar) -> None:
    with qtbot.waitSignal(bar.serving, timeout=30_000):
        bar.button.click()


def test_serve_bar_does_not_pick_up_a_key_from_the_environment(qtbot, package, monkeypatch) -> None:
    """MMFORGE_API_KEY is for `mmforge serve`; the app's own server takes no key unseen."""
    monkeypatch.setenv("MMFORGE_API_KEY", "set-for-something-else")
    folder = str(package("qwen2_5_vl"))
    bar = ServeBar(lambda: (folder, "cpu"), port=0)
    qtbot.addWidget(bar)
    url = _start(qtbot, bar)
    try:
        with urllib.request.urlopen(url + "/models", timeout=30) as response:
            assert response.status == 200
    finally:
        _stop(qtbot, bar)


def test_serve_bar_shows_that_the_model_worker_stopped(qtbot, package) -> None:
    psutil = pytest.importorskip("psutil")
    folder = str(package("qwen2_5_vl"))
    bar = ServeBar(lambda: (folder, "cpu"), port=0)
    qtbot.addWidget(bar)
    _start(qtbot, bar)
    try:
        assert bar._process is not None
        server = psutil.Process(bar._process.processId())
        workers = server.children(recursive=True)
        assert workers
        for worker in workers:
            worker.kill()
        qtbot.waitUntil(lambda: "worker" in bar.count.text(), timeout=30_000)
        assert "restart" in bar.count.text().lower() and bar.running
    finally:
        _stop(qtbot, bar)
