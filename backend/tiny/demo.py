"""The built-in demo model: a tiny Qwen2.5-VL built once into the user cache."""

from __future__ import annotations

import json
from pathlib import Path

from mmforge.backend.tiny import build_tiny
from mmforge.backend.vocabulary import cache_folder, packages_folder

DEMO_FAMILY = "qwen2_5_vl"
# Bump when the tiny spec changes, so an old cached demo is rebuilt.
DEMO_VERSION = 1
MARKER = "mmforge_demo.json"  # in the demo checkpoint's folder


def demo_folder() -> Path:
    """Where the demo checkpoint lives."""
    return cache_folder() / "demo" / DEMO_FAMILY


def demo_package_folder() -> Path:
    """Where `mmforge demo` writes the demo's package."""
    return packages_folder() / f"demo-{DEMO_FAMILY}"


def is_demo_source(source: str | Path) -> bool:
    """Whether a checkpoint folder (a manifest's `source`) is the built-in demo's."""
    folder = Path(source)
    try:
        return (folder / MARKER).is_file() or folder.resolve() == demo_folder().resolve()
    except (OSError, ValueError):
        return False


def is_demo_package(package: Path) -> bool:
    """Whether a package was converted from the built-in demo checkpoint."""
    from mmforge.backend.library import read_manifest

    return is_demo_source(str(read_manifest(package).get("source", "")))


def demo_checkpoint() -> Path:
    """The demo checkpoint folder, built (offline, a few seconds) if missing or stale."""
    folder = demo_folder()
    marker = folder / MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text(encoding="utf-8")).get("version") == DEMO_VERSION:
                return folder
        except ValueError:
            pass
    build_tiny(DEMO_FAMILY, folder)
    marker.write_text(
        json.dumps({"version": DEMO_VERSION, "family": DEMO_FAMILY}), encoding="utf-8"
    )
    return folder
