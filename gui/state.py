"""The Qt side of what the pages share: signals over `selection.Selection`, and QSettings.

The choice itself (model, card, precision, target, package, reference, loaded package and
what hangs off them) lives in the Qt-free `Selection`; this bridge persists the package,
precision and target, and turns the selection's changes into signals.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QObject, QSettings, Signal

from mmforge.backend.inspect import Profile
from mmforge.gui.selection import Converted, Selection, library_package

log = logging.getLogger(__name__)

Number = TypeVar("Number", int, float)


class AppState(QObject):
    """Shared selection, with QSettings for what persists between runs.

    Signals:
        source_changed(str), profile_changed(Profile),
        package_changed(str): a package was converted or picked (`set_package`),
        changed(frozenset): the selection's fields that changed, cleared ones included
            (a new source clears the package, Convert's result, Verify's report, ...),
        library_changed(): packages were deleted or moved.
    """

    source_changed = Signal(str)
    profile_changed = Signal(object)
    package_changed = Signal(str)
    changed = Signal(object)
    library_changed = Signal()

    def __init__(self, settings: QSettings, parent: QObject | None = None):
        super().__init__(parent)
        self.settings = settings
        self.selection = Selection(
            package=self.text("package", ""),
            dtype=self.text("dtype", "f32"),
            target=self.text("target", "cpu"),
            newest_package=lambda source: library_package(self.packages_folder())(source),
        )
        self.selection.subscribe(self._selection_changed)
        # Consents given this session, per model (gui/consent.py): kind -> sources.
        self._consents: dict[str, set[str]] = {}

    def _selection_changed(self, fields: frozenset[str]) -> None:
        s = self.selection
        if "package" in fields:
            self.settings.setValue("package", s.package)
        if "dtype" in fields:
            self.settings.setValue("dtype", s.dtype)
        if "target" in fields:
            self.settings.setValue("target", s.target)
        self.changed.emit(fields)

    @property
    def source(self) -> str:
        """The picked model (hub id or folder)."""
        return self.selection.source

    @property
    def profile(self) -> Profile | None:
        """The picked model's card (its inspection), None before it."""
        profile: Profile | None = self.selection.profile
        return profile

    @property
    def package(self) -> str:
        """The package converted or picked, paired with the picked model."""
        return self.selection.package

    @property
    def reference(self) -> str:
        """The model Verify compares the package with."""
        return self.selection.reference

    @property
    def loaded_package(self) -> str:
        """The package Chat has loaded ("" when none): Convert warns before replacing it."""
        return self.selection.loaded

    @loaded_package.setter
    def loaded_package(self, package: str) -> None:
        self.selection.set_loaded(package)

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
        recent = [s for s in self.recent_sources() if s != source]
        self.settings.setValue("recent_sources", [source, *recent][:10])
        self.selection.set_source(source)
        self.source_changed.emit(source)

    def set_profile(self, profile: Profile) -> None:
        """Inspection finished."""
        self.selection.set_profile(profile)
        self.profile_changed.emit(profile)

    def set_package(self, package: str) -> None:
        """A package was converted or picked."""
        self.selection.set_package(package)
        self.package_changed.emit(package)

    def set_converted(self, converted: Converted) -> None:
        """A conversion finished: its package is the package now."""
        self.selection.set_converted(converted)
        self.package_changed.emit(converted.package)

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
