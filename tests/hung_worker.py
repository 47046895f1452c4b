"""A worker that hangs: says hello, reads its command, then ignores everything.

It ignores SIGTERM (as a worker stuck rendering a chat template did) and starts a child
that holds its output pipe open, so only killing its whole process group ends the pipe.
It writes its pid and its child's pid to the file named by HUNG_MARK once it hangs.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from mmforge.backend.worker.protocol import PROTOCOL_VERSION

SCRIPT = f"""
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(json.dumps({{"event": "hello", "protocol": {PROTOCOL_VERSION}}}), flush=True)
sys.stdin.readline()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
with open(os.environ["HUNG_MARK"] + ".tmp", "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
os.replace(os.environ["HUNG_MARK"] + ".tmp", os.environ["HUNG_MARK"])
while True:
    time.sleep(1)
"""


def use_hung_worker(monkeypatch, mark: Path) -> None:
    """Make every WorkerJob start the hung worker instead of `mmforge worker`."""
    from mmforge.backend.worker import client

    monkeypatch.setattr(client, "worker_command", lambda: [sys.executable, "-c", SCRIPT])
    monkeypatch.setenv("HUNG_MARK", str(mark))


def wait_hung(mark: Path, timeout: float = 20) -> list[int]:
    """The pids of the hung worker and its child, once it hangs."""
    deadline = time.monotonic() + timeout
    while not mark.exists():
        assert time.monotonic() < deadline, "the hung worker did not start"
        time.sleep(0.02)
    return [int(p) for p in mark.read_text().split()]


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def end(pids: list[int]) -> None:
    """Clean up after a test that failed to stop them."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
