"""The user's choice without Qt (gui/selection.py): a change clears what depended on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mmforge.gui.selection import Converted, Selection, library_package, manifest_source

# Which package was converted from which model, as manifests would say.
MADE_FROM = {"/lib/a-f32": "org/a", "/lib/a-int4": "org/a", "/lib/b-f32": "org/b"}
NEWEST = {"org/a": "/lib/a-int4", "org/b": "/lib/b-f32"}


def _selection(package: str = "") -> tuple[Selection, list[frozenset[str]]]:
    selection = Selection(
        package=package,
        source_of=lambda p: MADE_FROM.get(p, ""),
        newest_package=lambda s: NEWEST.get(s, ""),
    )
    seen: list[frozenset[str]] = []
    selection.subscribe(seen.append)
    return selection, seen


def test_another_source_clears_the_card_the_result_the_report_and_the_pair():
    s, seen = _selection()
    s.set_source("org/a")
    s.set_profile("card of a")
    s.set_converted(Converted("org/a", "/lib/a-f32", "f32", "cpu"))
    s.set_verified("report of a")
    s.set_compared(["/lib/a-f32", "/lib/a-int4"])
    assert (s.package, s.reference) == ("/lib/a-f32", "org/a")
    seen.clear()
    s.set_source("org/b")
    assert s.profile is None and s.converted is None
    assert s.verified is None and s.compared is None
    assert (s.package, s.reference) == ("/lib/b-f32", "org/b")
    assert seen == [
        frozenset(
            {"source", "profile", "package", "reference", "converted", "verified", "compared"}
        )
    ]


def test_a_source_with_no_package_leaves_no_package():
    s, _ = _selection()
    s.set_source("org/a")
    s.set_package("/lib/a-f32")
    s.set_source("org/new")
    assert (s.package, s.reference) == ("", "org/new")


def test_the_package_stays_when_it_is_of_the_source_picked():
    s, _ = _selection("/lib/a-f32")
    s.set_source("org/a")
    assert s.package == "/lib/a-f32"  # not replaced by the newest (a-int4)


def test_a_package_kept_from_a_restart_is_not_paired_with_another_source():
    """The issue's case: Phi-4's package kept over a restart, then the demo picked."""
    s, _ = _selection("/lib/a-f32")  # what the settings kept
    assert (s.source, s.reference) == ("", "org/a")  # paired with its own model at once
    s.set_source("org/b")
    assert (s.package, s.reference) == ("/lib/b-f32", "org/b")


def test_another_precision_or_target_clears_convert_s_result_only():
    s, seen = _selection()
    s.set_source("org/a")
    s.set_converted(Converted("org/a", "/lib/a-f32", "f32", "cpu"))
    s.set_verified("report")
    assert s.current_conversion() is not None
    s.set_precision(dtype="int4")
    assert s.converted is None and s.verified == "report" and s.package == "/lib/a-f32"
    s.set_converted(Converted("org/a", "/lib/a-int4", "int4", "cpu"))
    seen.clear()
    s.set_precision(target="cuda")
    assert s.converted is None and seen == [frozenset({"target", "converted"})]
    s.set_precision(target="cuda")  # no change: nobody is told
    assert len(seen) == 1


def test_another_package_takes_its_reference_and_clears_the_report_and_pair():
    s, _ = _selection()
    s.set_source("org/a")
    s.set_package("/lib/a-f32")
    s.set_verified("report")
    s.set_compared(("/lib/a-f32", "/lib/a-int4"))
    s.set_package("/lib/b-f32")
    assert s.reference == "org/b" and s.verified is None and s.compared is None
    s.set_verified("report of b")
    s.set_reference("org/b-other")
    assert s.verified is None and s.package == "/lib/b-f32"


def test_a_package_without_a_manifest_takes_the_source_as_reference():
    s, _ = _selection()
    s.set_source("org/a")
    s.set_package("/elsewhere/pkg")
    assert s.reference == "org/a"


def test_loading_in_chat_clears_nothing():
    s, seen = _selection()
    s.set_source("org/a")
    s.set_package("/lib/a-f32")
    s.set_verified("report")
    s.set_loaded("/lib/b-f32")
    assert s.loaded == "/lib/b-f32" and s.verified == "report"
    assert seen[-1] == frozenset({"loaded"})


def test_unsubscribe():
    s, seen = _selection()
    calls: list[frozenset[str]] = []
    stop = s.subscribe(calls.append)
    s.set_source("org/a")
    stop()
    s.set_source("org/b")
    assert len(calls) == 1 and len(seen) == 2


def test_the_library_readers_use_the_manifests(tmp_path: Path):
    for name, source, when in (("a-f32", "org/a", 1), ("a-int4", "org/a", 2), ("b", "org/b", 3)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "genai_config.json").write_text("{}")
        manifest = folder / "mmforge_manifest.json"
        manifest.write_text(json.dumps({"source": source, "dtype": "f32"}))
        os.utime(manifest, (1e9 + when, 1e9 + when))  # the library dates a package by it
    assert manifest_source(str(tmp_path / "b")) == "org/b"
    assert manifest_source("") == "" and manifest_source(str(tmp_path / "none")) == ""
    newest = library_package(tmp_path)
    assert newest("org/b") == str(tmp_path / "b")
    assert newest("org/none") == ""
    assert newest("org/a") == str(tmp_path / "a-int4")


def test_the_selection_imports_no_qt():
    code = (
        "import sys; import mmforge.gui.selection as s; "
        "s.Selection().set_source('x'); "
        "print([m for m in sys.modules if m.startswith('PySide6')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_picking_the_same_model_again_pairs_the_package_again():
    s, _ = _selection()
    s.set_source("org/a")
    s.set_package("/lib/b-f32")  # picked in Verify: its own model is the reference
    assert s.reference == "org/b"
    s.set_source("org/a")  # the model page picked (inspected) org/a again
    assert (s.package, s.reference) == ("/lib/a-int4", "org/a")
