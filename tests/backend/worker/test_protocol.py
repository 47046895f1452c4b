"""The worker protocol: one place checks every event; nothing malformed crashes a client."""

from __future__ import annotations

import json
import sys

import pytest

from mmforge.backend.jobs import Progress
from mmforge.backend.worker import client as client_module
from mmforge.backend.worker.client import WorkerJob
from mmforge.backend.worker.protocol import PROTOCOL_VERSION, hello, parse_event

HELLO = json.dumps(hello())


@pytest.mark.parametrize(
    "line,why",
    [
        ('{"event": "progress", "stage": "x", "done": 1, "colour": "red"}', "unexpected"),
        ('{"event": "progress", "stage": "x", "done": "half"}', "wrong type"),
        ("this is not JSON", "not JSON"),
        ('{"event": "ready"}', "missing"),
        ('{"event": "result", "job": "inspect", "value": 3}', "not an object"),
        ('{"event": "teleport"}', "not a known event"),
        ("[1, 2]", "not a known event"),
    ],
)
def test_a_malformed_event_becomes_an_error_event_holding_the_line(line, why):
    event = parse_event(line)
    assert event["event"] == "error" and event["message"] == "The worker sent a malformed event"
    assert why in event["details"] and line in event["details"]


def test_well_formed_events_pass_as_sent():
    for line in (
        HELLO,
        '{"event": "progress", "stage": "x", "done": 1, "total": null, "unit": "steps",'
        ' "message": ""}',
        '{"event": "error", "message": "m", "hint": null, "details": null, "seq": 3}',
        '{"event": "turn", "seq": 1, "value": {}, "conversation": {}}',
    ):
        assert parse_event(line) == json.loads(line)


def test_another_protocol_version_is_refused():
    event = parse_event(json.dumps({"event": "hello", "protocol": PROTOCOL_VERSION + 1}))
    assert event["event"] == "error" and "protocol" in event["message"]


def _fake_worker(monkeypatch, *lines: str) -> None:
    """The next WorkerJob runs a process that prints these lines."""
    script = "import sys\n" + "".join(f"print({line!r}, flush=True)\n" for line in lines)
    script += "sys.stdin.read()\n"
    monkeypatch.setattr(client_module, "worker_command", lambda: [sys.executable, "-c", script])


@pytest.mark.parametrize(
    "lines",
    [
        [HELLO, '{"event": "progress", "stage": "x", "done": 1, "colour": "red"}'],
        [HELLO, "Traceback (most recent call last): something printed"],
        [HELLO, '{"event": "result", "job": "inspect"}'],
        ['{"event": "result", "job": "inspect", "value": {}}'],  # no hello: an old worker
    ],
)
def test_a_client_ends_a_job_on_a_malformed_event_with_an_error_not_a_crash(monkeypatch, lines):
    _fake_worker(monkeypatch, *lines)
    job = WorkerJob("inspect", {})
    events = list(job.events())
    assert events and events[-1]["event"] == "error"
    assert lines[-1][:40] in events[-1]["details"]
    assert job.process.poll() is not None  # reaped


def test_a_real_worker_greets_then_reports(monkeypatch):
    job = WorkerJob("eps", {})
    events = list(job.events())
    assert [e["event"] for e in events if not isinstance(e, Progress)] == ["result"]
    assert events[-1]["value"]["cpu"] is None
