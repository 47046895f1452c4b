"""scripts/venv: torch's CPU index is added whenever it answers (issue 31's fresh machine).

From the public index alone, `torch==2.13.0` resolves to the CUDA build (22 nvidia
packages); the README's commands go through scripts/venv so a fresh machine gets the CPU
build from torch's own index.
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


def test_the_cpu_index_is_used_when_it_answers(index):
    said, command = _dry_run("dev", index=index)
    assert said == f"torch: the CPU build, from {index}"
    assert command == f"python -m pip install --quiet --extra-index-url {index} -e .[dev]"


def test_without_the_cpu_index_pip_is_told_nothing_new_and_the_user_is_told_why():
    said, command = _dry_run(index="http://127.0.0.1:9/whl/cpu")  # refused at once
    assert "does not answer" in said and "CUDA build" in said
    assert command == "python -m pip install --quiet -e ."


def test_the_readme_commands_go_through_scripts_venv():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/venv && .venv/bin/mmforge" in readme
    assert "bash scripts/venv dev" in (ROOT / "scripts" / "check").read_text(encoding="utf-8")
