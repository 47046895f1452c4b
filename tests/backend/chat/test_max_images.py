"""How many images a package takes is a manifest field; older packages stay readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmforge.backend.chat.values import _max_images
from mmforge.backend.convert import Manifest
from mmforge.backend.families.phi.graph_fixes import PER_IMAGE_NOTE


def _package(folder: Path, manifest: dict) -> Path:
    folder.mkdir()
    (folder / "mmforge_manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_new_manifest_says_how_many_images_the_package_takes():
    assert "max_images" in Manifest("s", "f", "k", "p", [], "f32", "cpu").to_dict()


@pytest.mark.parametrize(
    "manifest,expected",
    [
        ({"max_images": None, "notes": []}, None),  # the field, not the notes, decides
        ({"max_images": 2, "notes": []}, 2),
        ({"max_images": "many"}, None),  # a hand-edited manifest is no limit, not a crash
        # Written before the field: Phi-4 packages without the per-image Loop took one.
        ({"notes": []}, 1),
        ({"notes": [f"Phi-4 vision: mobius's one-image graph {PER_IMAGE_NOTE} in a Loop"]}, None),
    ],
)
def test_the_limit_is_read_from_the_field_and_old_packages_from_their_notes(
    tmp_path, manifest, expected
):
    assert _max_images(_package(tmp_path / "pkg", manifest), "phi4mm") == expected


def test_no_manifest_or_an_unreadable_one_is_no_limit(tmp_path):
    assert _max_images(tmp_path, "phi4mm") is None
    assert _max_images(_package(tmp_path / "bad", []), "phi4mm") is None  # type: ignore[arg-type]
