r"""Content written by strangers: one JSON reader and one escape for the terminal and logs.

A checkpoint's files, a hub's answers and a safetensors header are all written by someone
else. JSON from them is read here, and only here, with every bound at once: the size of
the file, the nesting depth, the size of a number (Python refuses an integer of more than
4,300 digits with a ValueError, and `1e400` silently becomes infinity), the non-standard
NaN and Infinity, and the file kind (a FIFO named `config.json` would block the read
forever). A failure is a `MmforgeError` naming the file and, where there is one, the field.

Text from the same sources that reaches a terminal or a log (a model_type in an error
line, a token the model streams) goes through `escape`: control characters and the
bidirectional overrides are shown as visible escapes (`\x1b`, `\u202e`), so a checkpoint
cannot retitle or clear the terminal, hide text or write the clipboard (OSC 52).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any

from mmforge.backend.bounds import MAX_DEPTH, check_depth, nested_error
from mmforge.backend.errors import MmforgeError

# The most bytes of a config-like file (config.json, generation_config.json, a processor
# or tokenizer config, an index, a hub answer): real ones are under 100 KB; the largest
# chat templates inside tokenizer_config.json stay under 1 MB.
CONFIG_LIMIT = 16 << 20
# The most bytes of a tokenizer.json: the largest released (Gemma 3's 262k vocabulary)
# is 33 MB. A 200 MB file with 10 million entries took gigabytes to parse.
TOKENIZER_LIMIT = 64 << 20
# The most digits of an integer: no count, size, id or byte offset has more than 20.
MAX_DIGITS = 40

# Bidirectional controls that reorder what a terminal shows (Trojan Source).
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), *map(ord, _BIDI)]


def _escaped(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {code: _escaped(code) for code in _CONTROLS}


def escape(text: str, keep: str = "") -> str:
    r"""`text` with control characters and bidi overrides shown as visible escapes.

    C0 and C1 controls (ESC, BEL, CR, backspace...), DEL and the bidirectional
    overrides become `\x1b`, `\x9b`, `\u202e` and so on; everything else, other
    scripts and emoji included, is left as it is.

    Args:
        text: A string from a checkpoint, a hub or a model's answer.
        keep: Control characters to leave as they are ("\n\t" for streamed text).
    """
    return text.translate(_table(keep))


@functools.lru_cache(maxsize=8)
def _table(keep: str) -> dict[int, str]:
    return {k: v for k, v in _TABLE.items() if chr(k) not in keep}


class EscapingFormatter(logging.Formatter):
    """Log lines with control characters shown as escapes: messages quote strangers.

    Line breaks stay, so that a traceback keeps its shape.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record's line, escaped."""
        return escape(super().format(record), keep="\n")


class _Refused:
    """A value the parser met that no file of ours may hold, kept to name its field."""

    __slots__ = ("reason", "text")

    def __init__(self, text: str, reason: str):
        self.text, self.reason = text, reason


def _shown(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}…({len(text):,} characters)"


def parse_json(data: bytes | str, where: str, *, limit: int = CONFIG_LIMIT) -> Any:
    """Parse JSON from a stranger within every bound; the value, of any JSON type.

    Args:
        data: The JSON text (bytes are read as UTF-8).
        where: The file (or hub answer) it came from, named in every message.
        limit: The most bytes accepted.

    Raises:
        MmforgeError: Too large, not UTF-8, not JSON, nested deeper than `MAX_DEPTH`, or
            holding a number out of bounds (naming its field).
    """
    if len(data) > limit:
        raise _too_large(where, limit)
    refused: list[_Refused] = []

    def keep(value: _Refused) -> _Refused:
        refused.append(value)
        return value

    def whole(text: str) -> Any:
        digits = len(text.lstrip("-"))
        return int(text) if digits <= MAX_DIGITS else keep(_Refused(text, "too large a number"))

    def real(text: str) -> Any:
        value = float(text)
        return value if math.isfinite(value) else keep(_Refused(text, "not a finite number"))

    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(
            text,
            parse_int=whole,
            parse_float=real,
            parse_constant=lambda name: keep(_Refused(name, "not a number JSON allows")),
        )
    except RecursionError:
        raise _nested(where) from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        raise MmforgeError(
            f"{where} is not valid JSON ({_first_line(e)})",
            "The file is malformed: fix it or download it again",
        ) from None
    check_depth(value, Path(where))
    if refused:
        key = _field_of(value, refused[0])
        raise MmforgeError(
            f"{where}: {key or 'a value'} is {_shown(refused[0].text)}, {refused[0].reason}",
            "The file is malformed or hostile: fix it or download it again",
        )
    return value


def _too_large(where: str, limit: int, size: int | None = None) -> MmforgeError:
    shown = f" ({size:,} bytes)" if size is not None else ""
    return MmforgeError(
        f"{where}{shown} is larger than the {limit:,} bytes mmforge reads of it",
        "The file is malformed or hostile: fix it or download it again",
    )


def _first_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200]


def _nested(where: str) -> MmforgeError:
    return nested_error(Path(where))


def _field_of(data: Any, target: _Refused) -> str | None:
    """The dotted key of `target` in parsed JSON (without recursion)."""
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        key, value, depth = stack.pop()
        if value is target:
            return key
        if depth > MAX_DEPTH:
            continue
        if isinstance(value, dict):
            stack.extend(
                (f"{key}.{k}" if key else str(k), v, depth + 1)
                for k, v in value.items()
                if isinstance(v, dict | list | _Refused)
            )
        elif isinstance(value, list):
            stack.extend(
                (f"{key}[{i}]", v, depth + 1)
                for i, v in enumerate(value)
                if isinstance(v, dict | list | _Refused)
            )
    return None


def read_json_file(path: Path, what: str, *, limit: int = CONFIG_LIMIT) -> Any:
    """Read and parse a JSON file from a stranger; the value, of any JSON type.

    Only a regular file is opened (a FIFO would block, a device never end), and no more
    than `limit` bytes of it are read.

    Args:
        path: The file.
        what: What kind of folder holds it ("model", "tokenizer"), for the hint when it
            is missing.
        limit: The most bytes accepted.

    Raises:
        MmforgeError: Missing, not a regular file, unreadable, or refused by `parse_json`.
    """
    try:
        found = os.stat(path)
    except FileNotFoundError as e:
        raise MmforgeError(f"{path.parent} has no {path.name}", f"Is this a {what} folder?") from e
    except OSError as e:
        raise MmforgeError(f"Cannot read {path}: {e.strerror}", "Check the file") from None
    if not stat.S_ISREG(found.st_mode):
        raise MmforgeError(
            f"{path} is not a regular file (a FIFO, socket, device or folder)",
            "Replace it with the file itself",
        )
    if found.st_size > limit:
        raise _too_large(str(path), limit, found.st_size)
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise MmforgeError(f"Cannot read {path}: {e.strerror}", "Check the file") from None
    return parse_json(data, str(path), limit=limit)


def read_json_object(path: Path, what: str, *, limit: int = CONFIG_LIMIT) -> dict[str, Any]:
    """`read_json_file`, for a file that must hold a JSON object.

    Raises:
        MmforgeError: As `read_json_file`, or the file holds another JSON type.
    """
    data = read_json_file(path, what, limit=limit)
    if not isinstance(data, dict):
        raise MmforgeError(f"{path} does not hold a JSON object", "Re-download the model")
    return data


def text_field(data: dict[str, Any], key: str, where: str) -> str | None:
    """`data[key]` when it is text (None when absent or null).

    Raises:
        MmforgeError: The field holds a list, an object, a number or a boolean.
    """
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    kind = {dict: "an object", list: "a list", bool: "true or false"}.get(type(value), "a number")
    raise MmforgeError(
        f"{where}: {key} is {kind}, not a name",
        "The file is malformed or hostile: fix it or download it again",
    )
