"""Shared words have one home: execution providers and app folders (vocabulary.py), the
demo (tiny/demo.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mmforge.backend.tiny.demo import MARKER, demo_folder, is_demo_package, is_demo_source
from mmforge.backend.vocabulary import EPS, data_folder, log_folder, packages_folder

ROOT = Path(__file__).resolve().parents[2]
# Spelled out anywhere else, these drift apart (each was defined in 3 to 6 places).
DEFINITIONS = re.compile(
    r"user_(data|cache|log)_dir\(|\(\"cpu\", \"cuda\"\)|\[\"cpu\", \"cuda\"\]|mmforge/demo/"
)
HOMES = {"backend/vocabulary.py"}
# Under concurrent rework (chat); it moves to vocabulary.conversations_folder with it.
PENDING = {"backend/chat/conversations.py"}


def test_shared_words_are_defined_in_one_place():
    found = []
    for folder in ("app", "backend", "gui"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in HOMES | PENDING:
                continue
            if DEFINITIONS.search(path.read_text(encoding="utf-8")):
                found.append(name)
    assert found == []


def test_folders_follow_the_platform(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert packages_folder() == data_folder() / "packages" == tmp_path / "data/mmforge/packages"
    assert log_folder().is_relative_to(tmp_path / "state")
    assert EPS == ("cpu", "cuda")


def _package(folder: Path, source: Path) -> Path:
    folder.mkdir()
    manifest = {"source": str(source)}
    (folder / "mmforge_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_a_package_knows_it_is_the_demos(monkeypatch, tmp_path):
    """By its source folder (the demo's, or one holding the demo's marker), not by a
    path fragment with '/' that a Windows path does not have."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert is_demo_package(_package(tmp_path / "a", demo_folder()))
    moved = tmp_path / "moved-demo"
    moved.mkdir()
    (moved / MARKER).write_text("{}", encoding="utf-8")
    assert is_demo_source(moved) and is_demo_package(_package(tmp_path / "b", moved))
    assert not is_demo_package(_package(tmp_path / "c", tmp_path / "mmforge/demo/other"))
    assert not is_demo_package(tmp_path / "no-package")
