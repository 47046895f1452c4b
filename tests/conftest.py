"""Shared fixtures: tiny checkpoints built once per session, a local hub, leak checks."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

# Qt without a display: the offscreen platform (set before any Qt import).
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# No test may touch the real hub.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")  # refused at once if ever used

from tests.hubserver import HubServer


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


_built: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tiny(tiny_root: Path):
    """tiny(family_key) -> folder of that family's tiny checkpoint, built once."""
    from mmforge.backend.tiny import build_tiny

    def get(family_key: str) -> Path:
        if family_key not in _built:
            _built[family_key] = build_tiny(family_key, tiny_root / family_key).folder
        return _built[family_key]

    return get


def approximated(family_key: str) -> bool:
    """Whether the family converts only as an approximation (its tests accept it)."""
    from mmforge.backend.families import ALL

    return any(f.key == family_key and f.approximation is not None for f in ALL)


_packages: dict[tuple[str, str], Path] = {}


@pytest.fixture(scope="session")
def package(tiny, tmp_path_factory):
    """package(family, dtype="f32") -> folder of the converted tiny checkpoint, built once."""
    from mmforge.backend.convert import convert

    def get(family: str, dtype: str = "f32") -> Path:
        key = (family, dtype)
        if key not in _packages:
            out = tmp_path_factory.mktemp("pkg") / f"{family}-{dtype}"
            convert(str(tiny(family)), out, dtype=dtype, approximate=approximated(family))
            _packages[key] = out
        return _packages[key]

    return get


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A local hub on loopback, with HF_ENDPOINT pointing at it and a private cache."""
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        # huggingface_hub reads HF_HUB_OFFLINE once, at import: a test that imported it
        # while offline (the GUI tests) must not leave the hub tests offline.
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


@pytest.fixture(autouse=True)
def no_leaked_threads_or_processes() -> Iterator[None]:
    """Fail a test that leaves threads or child processes running."""
    import multiprocessing

    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [
        t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon
    ]
    children = multiprocessing.active_children()
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"
    assert not children, f"processes left running: {children}"
