"""The built-in demo models, built once into the user cache with no network.

Two kinds: "pictures", a tiny Qwen2.5-VL, and "sound", a tiny Gemma 4 that takes pictures
and sound clips (so audio can be tried offline too).
"""

from __future__ import annotations

import json
from pathlib import Path

from mmforge.backend.tiny import build_tiny
from mmforge.backend.vocabulary import cache_folder, packages_folder

DEMOS = {"pictures": "qwen2_5_vl", "sound": "gemma4"}  # kind -> tiny family
DEMO_FAMILY = DEMOS["pictures"]
# Bump when the tiny spec changes, so an old cached demo is rebuilt.
DEMO_VERSION = 1
MARKER = "mmforge_demo.json"  # in the demo checkpoint's folder


def _family(kind: str) -> str:
    if kind not in DEMOS:
        raise ValueError(f"no demo of kind {kind!r}: {', '.join(DEMOS)}")
    return DEMOS[kind]


# The folder names people see (their packages are named after them: "Qwen2.5-VL-demo-int4").
NAMES = {"pictures": "Qwen2.5-VL-demo", "sound": "Gemma-4-demo"}


def demo_folder(kind: str = "pictures") -> Path:
    """Where a demo checkpoint lives."""
    _family(kind)
    return cache_folder() / "demo" / NAMES[kind]


def demo_package_folder(kind: str = "pictures") -> Path:
    """Where `mmforge demo` writes a demo's package."""
    _family(kind)
    return packages_folder() / NAMES[kind]


def is_demo_source(source: str | Path) -> bool:
    """Whether a checkpoint folder (a manifest's `source`) is a built-in demo's."""
    folder = Path(source)
    try:
        return (folder / MARKER).is_file() or any(
            folder.resolve() == demo_folder(kind).resolve() for kind in DEMOS
        )
    except (OSError, ValueError):
        return False


def is_demo_package(package: Path) -> bool:
    """Whether a package was converted from the built-in demo checkpoint."""
    from mmforge.backend.library import read_manifest

    return is_demo_source(str(read_manifest(package).get("source", "")))


def demo_checkpoint(kind: str = "pictures") -> Path:
    """A demo checkpoint folder, built (offline, a few seconds) if missing or stale."""
    family = _family(kind)
    folder = demo_folder(kind)
    marker = folder / MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text(encoding="utf-8")).get("version") == DEMO_VERSION:
                return folder
        except ValueError:
            pass
    build_tiny(family, folder)
    marker.write_text(json.dumps({"version": DEMO_VERSION, "family": family}), encoding="utf-8")
    return folder
