"""The built-in demo model: a tiny Qwen2.5-VL built once into the user cache."""

from __future__ import annotations

import json
from pathlib import Path

from mmforge.backend.tiny import build_tiny

DEMO_FAMILY = "qwen2_5_vl"
# Bump when the tiny spec changes, so an old cached demo is rebuilt.
DEMO_VERSION = 1


def demo_folder() -> Path:
    """Where the demo checkpoint lives."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("mmforge", appauthor=False)) / "demo" / DEMO_FAMILY


def demo_checkpoint() -> Path:
    """The demo checkpoint folder, built (offline, a few seconds) if missing or stale."""
    folder = demo_folder()
    marker = folder / "mmforge_demo.json"
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
