"""scripts/venv: the lock, hashes checked, and torch's CPU index whenever it answers.

From the public index alone, `torch==2.13.0` resolves to the CUDA build (22 nvidia
packages); the README's commands go through scripts/venv, which installs the lock's
torch 2.13.0+cpu from torch's own CPU index (issue 31's fresh machine), and every other
distribution at the version the lock pins (issue 45: a new release changes nothing).
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    """A local package index that has a torch page."""
    (tmp_path / "whl" / "cpu" / "torch").mkdir(parents=True)
    (tmp_path / "whl" / "cpu" / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _dry_run(*args: str, index: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "venv"), *args, "--dry-run"],
        env={"PATH": "/usr/bin:/bin", "MMFORGE_TORCH_INDEX": index},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _locked_here() -> bool:
    """Whether this Python is the lock's (CPython 3.11, Linux x86-64): hashes are checked."""
    python = ROOT / ".venv" / "bin" / "python"
    probe = "import platform, sys; print(sys.version_info[:2] == (3, 11), platform.machine())"
    done = subprocess.run(
        [str(python) if python.exists() else "python3", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split() == ["True", "x86_64"]


def test_the_cpu_index_is_used_when_it_answers(index):
    said, lock, deps, self = _dry_run("dev", index=index)
    assert said == f"torch: the CPU build, from {index}"
    assert lock.startswith("dependencies: locks/linux-x86_64-cpu-dev.txt")
    assert deps.startswith(f"python -m pip install --quiet --no-deps --extra-index-url {index} ")
    if _locked_here():
        assert deps.endswith("--require-hashes -r locks/linux-x86_64-cpu-dev.txt")
    assert self == "python -m pip install --quiet --no-deps --no-build-isolation -e ."


def test_without_the_cpu_index_pip_is_told_nothing_new_and_the_user_is_told_why():
    said, lock, deps, _ = _dry_run(index="http://127.0.0.1:9/whl/cpu")  # refused at once
    assert "does not answer" in said and "torch 2.13.0+cpu" in said
    assert "locks/linux-x86_64-cpu.txt" in lock
    assert "--extra-index-url" not in deps
    if _locked_here():
        assert deps.endswith("--require-hashes -r locks/linux-x86_64-cpu.txt")
    else:
        assert "-c build/venv-constraints.txt" in deps


def test_the_readme_commands_go_through_scripts_venv():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/venv && .venv/bin/mmforge" in readme
    assert "bash scripts/venv dev" in (ROOT / "scripts" / "check").read_text(encoding="utf-8")
