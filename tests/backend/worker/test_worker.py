"""Jobs in a worker process over JSON lines: progress, result, cancel, hard kill."""

from __future__ import annotations

import os
import signal

from mmforge.backend.jobs import Progress
from mmforge.backend.worker.client import WorkerJob


def _env(tmp_path):
    return {"HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_convert_in_a_worker_streams_progress_then_the_manifest(tiny, tmp_path):
    job = WorkerJob(
        "convert",
        {"source": str(tiny("qwen2_5_vl")), "output": str(tmp_path / "pkg")},
        env=_env(tmp_path),
    )
    events = list(job.events())
    stages = {e.stage for e in events if isinstance(e, Progress)}
    assert {"build", "write", "validate"} <= stages
    assert events[-1]["event"] == "result"
    assert events[-1]["value"]["pipeline_type"] == "qwen2_5_vl"
    assert (tmp_path / "pkg" / "genai_config.json").is_file()


def test_user_errors_come_back_as_one_error_event(tmp_path):
    job = WorkerJob("inspect", {"source": str(tmp_path / "missing")}, env=_env(tmp_path))
    events = list(job.events())
    assert events[-1]["event"] == "error"
    assert "No such folder" in events[-1]["message"] and events[-1]["hint"]


def test_cancel_stops_the_job_and_leaves_nothing(tiny, tmp_path):
    out = tmp_path / "pkg"
    job = WorkerJob(
        "convert", {"source": str(tiny("gemma4")), "output": str(out)}, env=_env(tmp_path)
    )
    final = None
    for event in job.events():
        if isinstance(event, Progress) and event.stage == "build":
            job.cancel()
        elif not isinstance(event, Progress):
            final = event
    assert final == {"event": "cancelled"}
    assert not out.exists()
    assert not any(p.name.startswith(".pkg.mmforge-") for p in tmp_path.iterdir())


def test_a_killed_worker_leaves_no_package_and_its_staging_is_cleaned_next_time(tiny, tmp_path):
    out = tmp_path / "pkg"
    job = WorkerJob(
        "convert", {"source": str(tiny("gemma4")), "output": str(out)}, env=_env(tmp_path)
    )
    for event in job.events():
        if isinstance(event, Progress) and event.stage == "build":
            os.kill(job.process.pid, signal.SIGKILL)
            break
    job.close()
    assert not out.exists()
    job = WorkerJob(
        "convert", {"source": str(tiny("qwen2_5_vl")), "output": str(out)}, env=_env(tmp_path)
    )
    assert list(job.events())[-1]["event"] == "result"
    assert not any(p.name.startswith(".pkg.mmforge-") for p in tmp_path.iterdir())


def test_verify_runs_as_a_worker_job_with_progress(tiny, package, tmp_path):
    job = WorkerJob(
        "verify",
        {"package": str(package("gemma3")), "reference": str(tiny("gemma3")), "tokens": 4},
        env=_env(tmp_path),
    )
    events = list(job.events())
    assert any(isinstance(e, Progress) and e.stage == "verify" for e in events)
    assert events[-1]["event"] == "result" and events[-1]["value"]["verdict"] == "PASS"


def test_verify_can_be_cancelled(tiny, package, tmp_path):
    job = WorkerJob(
        "verify",
        {"package": str(package("gemma3")), "reference": str(tiny("gemma3"))},
        env=_env(tmp_path),
    )
    final = None
    for event in job.events():
        if isinstance(event, Progress) and event.stage == "verify":
            job.cancel()
        elif not isinstance(event, Progress):
            final = event
    assert final == {"event": "cancelled"}
