"""Typed fields of a JSON object written by a stranger, each refusal naming its field.

`untrusted.parse_json` bounds the file (its size, depth and numbers); `Fields` then reads
an object of it field by field with the type the program needs, instead of `str()` and
`int()` making something of anything (`int(1e400)` raises OverflowError, `str([...])` is
text). A field of the wrong type is a `MmforgeError` naming the file and the dotted
field: `conversation.json: messages[3].token_ids[0] is text, not a whole number`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from mmforge.backend.errors import MmforgeError

_ABSENT = object()
HINT = "The file is malformed or hostile: fix it by hand, or move it away"


def described(value: Any) -> str:
    """A JSON value as an error names it: its type, or a short number."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 24 else f"{text[:12]}…({len(text):,} digits)"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "text" if isinstance(value, str) else "null"


class Fields:
    """One JSON object from a stranger, read field by field.

    Args:
        data: The parsed value that must be an object.
        where: The file it came from, named in every refusal.
        key: The object's own dotted name in that file ("" for the whole file).
    """

    def __init__(self, data: Any, where: str, key: str = ""):
        self.where, self.key = where, key
        if not isinstance(data, dict):
            raise self._wrong(key or "the file", data, "an object")
        self.data: dict[str, Any] = data

    def name(self, key: str) -> str:
        """The dotted name of `key` in the file."""
        return f"{self.key}.{key}" if self.key else key

    def text(self, key: str, default: Any = _ABSENT) -> str:
        """`key` as text; absent or null gives `default` (refused where there is none)."""
        value = self._get(key, default)
        if value is default and default is not _ABSENT:
            return default  # type: ignore[no-any-return]
        if not isinstance(value, str):
            raise self._wrong(self.name(key), value, "text")
        return value

    def choice(self, key: str, options: Collection[str], default: Any = _ABSENT) -> str:
        """`key` as one of `options`."""
        value = self.text(key, default)
        if value not in options:
            shown = " or ".join(repr(o) for o in options)
            raise MmforgeError(
                f"{self.where}: {self.name(key)} is {value[:40]!r}, not {shown}", HINT
            )
        return value

    def whole(self, key: str, default: Any = _ABSENT, *, low: int = 0, high: int) -> int:
        """`key` as a whole number in [low, high]."""
        return self._whole(self.name(key), self._get(key, default), low, high)

    def number(self, key: str, default: Any = _ABSENT, *, low: float = 0, high: float) -> float:
        """`key` as a finite number (whole or not) in [low, high]."""
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(self.name(key), value, "a number")
        if not (math.isfinite(value) and low <= value <= high):
            raise self._range(self.name(key), value, low, high)
        return float(value)

    def wholes(self, key: str, *, low: int = 0, high: int) -> list[int]:
        """`key` as a list of whole numbers in [low, high] (absent: empty)."""
        values = self._list(key)
        return [self._whole(f"{self.name(key)}[{i}]", v, low, high) for i, v in enumerate(values)]

    def objects(self, key: str) -> list[Fields]:
        """`key` as a list of objects (absent: empty), each read as `Fields`."""
        values = self._list(key)
        return [Fields(v, self.where, f"{self.name(key)}[{i}]") for i, v in enumerate(values)]

    def object(self, key: str) -> Fields:
        """`key` as an object (absent: empty)."""
        return Fields(self._get(key, {}), self.where, self.name(key))

    # -- internals -----------------------------------------------------------------------

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is not None:
            return value
        if default is _ABSENT:
            raise MmforgeError(f"{self.where}: {self.name(key)} is missing", HINT)
        return default

    def _list(self, key: str) -> list[Any]:
        value = self._get(key, [])
        if not isinstance(value, list):
            raise self._wrong(self.name(key), value, "a list")
        return value

    def _whole(self, name: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, value, "a whole number")
        if not low <= value <= high:
            raise self._range(name, value, low, high)
        return value

    def _wrong(self, name: str, value: Any, wanted: str) -> MmforgeError:
        return MmforgeError(f"{self.where}: {name} is {described(value)}, not {wanted}", HINT)

    def _range(self, name: str, value: float, low: float, high: float) -> MmforgeError:
        return MmforgeError(
            f"{self.where}: {name} is {described(value)}, outside {low:g} to {high:g}", HINT
        )
