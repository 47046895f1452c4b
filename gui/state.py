"""What the pages share: the chosen model source, its profile and the current package."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QObject, QSettings, Signal

from mmforge.backend.inspect import Profile

log = logging.getLogger(__name__)

Number = TypeVar("Number", int, float)


class AppState(QObject):
    """Shared selection, with QSettings for what persists between runs.

    Signals:
        source_changed(str), profile_changed(Profile), package_changed(str),
        library_changed(): packages were deleted or moved.
    """

    source_changed = Signal(str)
    profile_changed = Signal(object)
    package_changed = Signal(str)
    library_changed = Signal()

    def __init__(self, settings: QSettings, parent: QObject | None = None):
        super().__init__(parent)
        self.settings = settings
        self.source = ""
        self.profile: Profile | None = None
        self.package = self.text("package", "")
        # The package Chat has loaded ("" when none): Convert warns before replacing it.
        self.loaded_package = ""
        # Consents given this session, per model (gui/consent.py): kind -> sources.
        self._consents: dict[str, set[str]] = {}

    def consent(self, kind: str, source: str) -> None:
        """The user agreed to `kind` (remote code, pickled weights) for `source`."""
        self._consents.setdefault(kind, set()).add(source)

    def consents(self, source: str) -> dict[str, bool]:
        """The worker arguments the consents given for `source` set."""
        from mmforge.gui.consent import ARGUMENTS

        return {arg: source in self._consents.get(kind, ()) for kind, arg in ARGUMENTS.items()}

    def number(self, key: str, default: Number) -> Number:
        """A numeric setting; a value of another type gives `default`.

        The settings file is text a person may edit: `top_k=abc` must not keep the app
        from starting.
        """
        raw = self.settings.value(key, default)
        try:
            value = type(default)(str(raw))
        except (TypeError, ValueError):
            value = None
        if value is None or not math.isfinite(value):
            log.warning("setting %s=%r is not a number: using %r", key, raw, default)
            return default
        return value

    def text(self, key: str, default: str) -> str:
        """A text setting; anything but one string (a list, say) gives `default`."""
        raw = self.settings.value(key, default)
        if not isinstance(raw, str):
            log.warning("setting %s=%r is not text: using %r", key, raw, default)
            return default
        return raw

    def set_source(self, source: str) -> None:
        """A model was picked (hub id or folder)."""
        self.source = source
        recent = [s for s in self.recent_sources() if s != source]
        self.settings.setValue("recent_sources", [source, *recent][:10])
        self.source_changed.emit(source)

    def set_profile(self, profile: Profile) -> None:
        """Inspection finished."""
        self.profile = profile
        self.profile_changed.emit(profile)

    def set_package(self, package: str) -> None:
        """A package was converted or picked."""
        self.package = package
        self.settings.setValue("package", package)
        self.package_changed.emit(package)

    def packages_removed(self) -> None:
        """Packages were deleted or moved: lists of them read the folder again."""
        self.library_changed.emit()

    def recent_sources(self) -> list[str]:
        """Recently used sources, newest first."""
        value = self.settings.value("recent_sources", []) or []
        return [str(v) for v in (value if isinstance(value, list) else [value])]

    def packages_folder(self) -> Path:
        """Where packages go by default."""
        from mmforge.backend.vocabulary import packages_folder

        default = packages_folder()
        return Path(self.text("packages_folder", str(default)) or default)
