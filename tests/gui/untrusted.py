"""Helpers for the untrusted-content tests: a file that tells when it is opened."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# Opens the FIFO's writing end over and over without blocking: that succeeds only while
# someone holds its reading end open, so each success is a read the GUI tried. Opening
# the writing end also unblocks the reader, so a test never hangs on a file it opened.
WATCH = """
import os, sys, time
fifo, marks = sys.argv[1], sys.argv[2]
open(marks, "w").close()
while True:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        time.sleep(0.001)
        continue
    os.close(fd)
    with open(marks, "a") as f:
        f.write("x")
"""


class WatchedFile:
    """A FIFO named like a picture, and whether anything opened it to read."""

    def __init__(self, folder: Path, name: str = "secret.png"):
        self.path = folder / name
        os.mkfifo(self.path)
        self._marks = folder / f".{name}.opened"
        self._watcher = subprocess.Popen(
            [sys.executable, "-c", WATCH, str(self.path), str(self._marks)]
        )
        deadline = time.monotonic() + 10
        while not self._marks.exists():
            assert time.monotonic() < deadline, "the watcher did not start"
            time.sleep(0.01)

    def opened(self) -> int:
        """How many times the file was found open for reading so far."""
        return self._marks.stat().st_size

    def close(self) -> None:
        """Stop watching (call it once nothing may open the file any more)."""
        self._watcher.kill()
        self._watcher.wait()


def hostile_fragments(path: Path) -> list[str]:
    """Markdown and HTML that name `path` in every way a document can load a file."""
    p = str(path)
    return [
        f"![x]({p})",
        f"![x](file://{p})",
        f"![x](thumb://{p})",
        "![x](thumb:0) ![y](thumb:1)",
        f'<img src="{p}">',
        f"<img src='file://{p}' width=10>",
        f'<link rel="stylesheet" type="text/css" href="{p}">',
        f"<style>@import url({p});</style>",
        f"<table background='{p}'><tr><td background='{p}'>cell</td></tr></table>",
        f"<p style=\"background-image: url('{p}')\">styled</p>",
        f"[a link]({p})",
        f"<a href='file://{p}'>file link</a>",
        f"![x](data:image/png;base64,iVBORw0KGgo=) [y](javascript:alert(1)) {p}",
        f"| a | b |\n|---|---|\n| c | ![t]({p}) |",
    ]
