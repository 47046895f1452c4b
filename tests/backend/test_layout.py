"""The backend's shape: no import circle, and a checkpoint's config.json parsed once a job."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_backend_has_no_import_circle():
    import grimp

    graph = grimp.build_graph(
        "mmforge.backend", include_external_packages=False, exclude_type_checking_imports=True
    )
    assert len(graph.modules) > 40  # the whole backend was read
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"a"}, "c": {"a"}}

    class Graph:
        def __init__(self) -> None:
            self.modules = set(edges)

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return edges[module]

    assert _cycles(Graph()) == [["a", "b"]]


_opened: list[Path] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | Path):
        path = Path(args[0])
        if path.name == "config.json":
            _opened.append(path)


@contextmanager
def _config_reads() -> Iterator[list[Path]]:
    """Every open() of a file named config.json in this process while the block runs."""
    global _opened
    if not getattr(_config_reads, "hooked", False):
        sys.addaudithook(_audit)  # audit hooks cannot be removed: this one is idle outside
        _config_reads.hooked = True  # type: ignore[attr-defined]
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None


@pytest.mark.slow
def test_config_json_is_read_once_per_conversion_and_once_per_verification(tiny, tmp_path):
    from mmforge.backend.convert import convert
    from mmforge.backend.verify import verify

    source = tiny("qwen2_5_vl")
    with _config_reads() as reads:
        convert(str(source), tmp_path / "pkg")
    assert reads == [source / "config.json"]
    with _config_reads() as reads:
        report = verify(tmp_path / "pkg", str(source), tokens=2)
    assert report.verdict == "PASS"
    assert reads == [source / "config.json"]


def test_the_read_counter_sees_transformers_reading_config_json(tiny):
    from transformers import AutoConfig

    source = tiny("qwen2_5_vl")
    with _config_reads() as reads:
        AutoConfig.from_pretrained(source)
    assert reads == [source / "config.json"]
