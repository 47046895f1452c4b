"""A worker that hangs can always be ended, while another thread reads its events."""

from __future__ import annotations

import threading
import time

from mmforge.backend.worker.client import WorkerJob
from tests.hung_worker import alive, end, use_hung_worker, wait_hung


def test_kill_ends_a_hung_worker_that_ignores_sigterm_while_a_thread_reads(tmp_path, monkeypatch):
    use_hung_worker(monkeypatch, tmp_path / "hung")
    job = WorkerJob("inspect", {"source": "x"})
    events: list = []
    reader = threading.Thread(target=lambda: events.extend(job.events()), daemon=True)
    reader.start()
    pids = wait_hung(tmp_path / "hung")
    try:
        start = time.monotonic()
        killer = threading.Thread(target=job.kill, daemon=True)
        killer.start()
        killer.join(timeout=8)
        reader.join(timeout=5)
        assert not killer.is_alive() and not reader.is_alive()
        assert time.monotonic() - start < 8
        assert not any(alive(pid) for pid in pids)  # the child holding the pipe too
        assert job.killed and events == []
    finally:
        end(pids)
