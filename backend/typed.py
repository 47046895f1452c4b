"""Typed values from their JSON form, for results that cross the worker boundary.

A job's result travels as `dataclasses.asdict` JSON; `from_dict(Cls, data)` rebuilds the
dataclass, nested dataclasses, lists, tuples and paths included, from the field types.
Each result type exposes it as its own `from_dict`, so a client holds the same value
the job returned; a nested type that has its own `from_dict` is rebuilt by it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from mmforge.backend.errors import MmforgeError

T = TypeVar("T")


def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """An instance of the dataclass `cls` from its JSON form.

    Keys the class does not have are ignored; fields with defaults may be absent.

    Raises:
        MmforgeError: A required field is missing or `data` is not an object.
    """
    if not isinstance(data, Mapping):
        raise MmforgeError(
            f"Expected a {cls.__name__} object, got {type(data).__name__}",
            "The worker and the app disagree; reinstall mmforge",
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise MmforgeError(
                f"A {cls.__name__} without '{f.name}'",
                "The worker and the app disagree; reinstall mmforge",
            )
    return cls(**kwargs)


def _value(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        # A type with its own JSON form (Conversation resolves attachment paths) uses it.
        own = getattr(tp, "from_dict", None)
        return own(value) if own is not None else from_dict(tp, value)
    if tp is Path:
        return Path(value)
    if origin in (typing.Union, types.UnionType):
        concrete = [a for a in args if a is not type(None)]
        return _value(concrete[0], value) if len(concrete) == 1 else value
    if origin is list:
        return [_value(args[0], v) for v in value] if args else list(value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        return tuple(_value(a, v) for a, v in zip(args, value, strict=False)) if args else value
    if origin is dict:
        return {k: _value(args[1], v) for k, v in value.items()} if args else dict(value)
    return value
