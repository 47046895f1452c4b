"""The registry lists every family folder: a folder left out would never be reached."""

from __future__ import annotations

from pathlib import Path

from mmforge.backend import families


def test_every_family_folder_is_in_the_registry():
    here = Path(families.__file__).parent
    folders = {p.parent.name for p in here.glob("*/__init__.py")}
    assert folders <= set(families.FOLDERS)
    for name in families.FOLDERS:  # a folder, or a module (others.py)
        assert (here / name / "__init__.py").is_file() or (here / f"{name}.py").is_file()
