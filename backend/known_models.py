"""The built-in list of known-good models: released ids of the families mmforge converts.

The list is data (`resources/known_models.json`), so it ships with the app and can be
read with no network. Its sizes are approximate (what the release names, its bfloat16
download); inspect reads the exact figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from mmforge.backend.errors import MmforgeError


@dataclass(frozen=True)
class KnownModel:
    """A released model that mmforge converts.

    Attributes:
        repo_id: Its hub id.
        family: The family's name in the registry.
        params_b: Parameters in billions, approximate (None: inspect says).
        download_gb: Download size in GB, approximate (None: inspect says).
        note: A few words for the user ("gated: …").
    """

    repo_id: str
    family: str
    params_b: float | None = None
    download_gb: float | None = None
    note: str = ""

    def size_words(self) -> str:
        """The sizes in words (about 3.8B parameters, a 7.5 GB download), as far as known."""
        parts = []
        if self.params_b is not None:
            parts.append(f"about {self.params_b:g}B parameters")
        if self.download_gb is not None:
            parts.append(f"a {self.download_gb:g} GB download")
        return ", ".join(parts)


NOTE_KEY = "note"


@cache
def known_models() -> tuple[KnownModel, ...]:
    """The built-in list, in the file's order (smallest first, roughly).

    Raises:
        MmforgeError: The shipped file is missing or damaged (a broken install).
    """
    from mmforge.resources import known_models_file

    path = known_models_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return tuple(KnownModel(**entry) for entry in data["models"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MmforgeError(
            "The app's list of known models is missing or damaged",
            "Reinstall the app",
            details=f"{path}: {e}",
        ) from e


def known_note() -> str:
    """The sentence that says the sizes are approximate."""
    from mmforge.resources import known_models_file

    try:
        data = json.loads(known_models_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    note = data.get(NOTE_KEY) if isinstance(data, dict) else None
    return note if isinstance(note, str) else ""
