"""The standard streams in UTF-8 on any code page, and present in a windowed process.

On Windows a pipe or a file as stdout takes the ANSI code page (cp1252 in Western
Europe), where printing `→` or a model's Chinese answer raises UnicodeEncodeError; a
console takes UTF-8 since Python 3.6, but a redirected stream does not. The GUI started
through pythonw.exe (the Start-menu shortcut) has no streams at all: sys.stdout and
sys.stderr are None, and a library's stray print or a log line would fail.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys


def utf8_stdio() -> None:
    """Make stdin, stdout and stderr UTF-8 (unencodable output replaced, never raised).

    A stream that is missing (pythonw) becomes the null device. Streams already in UTF-8
    (Linux, macOS, a test's capture) are left as they are.
    """
    for name in ("stdin", "stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            mode = "r" if name == "stdin" else "w"
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115
            continue
        if _is_utf8(getattr(stream, "encoding", None)):
            continue
        if isinstance(stream, io.TextIOWrapper):
            errors = "strict" if name == "stdin" else "replace"
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                stream.reconfigure(encoding="utf-8", errors=errors)


def _is_utf8(encoding: str | None) -> bool:
    return (encoding or "").lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
