"""Words every layer shares: the execution providers, the app's folders.

The CLI, the GUI and the jobs read them from here (precisions have their own home,
precisions.py; the demo checkpoint is tiny/demo.py's). The folders follow each platform's
conventions (platformdirs); nothing here creates them.
"""

from __future__ import annotations

from pathlib import Path

APP_NAME = "mmforge"

# The targets a package is converted for and chat runs on.
EPS = ("cpu", "cuda")
DEFAULT_EP = "cpu"

# A package's component (the manifest's name) -> its section of genai_config.json.
GENAI_SECTIONS = {
    "decoder": "decoder",
    "embedding": "embedding",
    "vision_encoder": "vision",
    "audio_encoder": "speech",
}


def data_folder() -> Path:
    """The user's data folder for the app (packages, conversations)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME, appauthor=False))


def cache_folder() -> Path:
    """The user's cache folder for the app (the demo checkpoint)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP_NAME, appauthor=False))


def log_folder() -> Path:
    """The user's log folder for the app."""
    from platformdirs import user_log_dir

    return Path(user_log_dir(APP_NAME, appauthor=False))


def packages_folder() -> Path:
    """Where packages go unless the user chooses otherwise."""
    return data_folder() / "packages"


def conversations_folder() -> Path:
    """Where chat conversations are kept."""
    return data_folder() / "conversations"
