"""What the user chose, in one place, with no Qt: the pages read it and follow its changes.

The choice is a chain: a model source (and the card inspecting it made), the precision
and target to convert at, the package, the reference Verify compares the package with,
and the package Chat has loaded. What a page made from an earlier choice hangs off it:
Convert's finished result, Verify's report, Compare's pair. A change clears what
depended on it, so no page can show or use the previous model's results:

- another source: its card, Convert's result, Verify's report and Compare's pair go; the
  package becomes the newest one converted from the new source (or none), and the
  reference is the new source;
- another precision or target: Convert's result goes;
- another package: the reference becomes the model its manifest names; Verify's report
  and Compare's pair go;
- another reference: Verify's report goes.

Observers are plain callables, `callback(changed: frozenset[str])`, called once per
change with every field that changed (cleared ones included). `gui/state.py`'s
`AppState` turns them into Qt signals and persists the package, precision and target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Observer = Callable[[frozenset[str]], None]

# What each field's change clears (the fields whose value was made from it).
CLEARS: dict[str, tuple[str, ...]] = {
    "source": ("profile", "converted", "verified", "compared", "typed"),
    "dtype": ("converted",),
    "target": ("converted",),
    "package": ("verified", "compared"),
    "reference": ("verified",),
}
FIELDS = (
    "source",
    "profile",
    "dtype",
    "target",
    "package",
    "reference",
    "loaded",
    "converted",
    "verified",
    "compared",
    "typed",
)


@dataclass(frozen=True)
class Converted:
    """A finished conversion: what it was made from, at what, and where it went."""

    source: str
    package: str
    dtype: str
    target: str


def manifest_source(package: str) -> str:
    """The model a package was converted from, as its manifest names it ("" if none)."""
    if not package:
        return ""
    from mmforge.backend.library import read_manifest

    return str(read_manifest(Path(package)).get("source", "") or "")


def library_package(folder: Path) -> Callable[[str], str]:
    """A finder of the newest package in `folder` converted from a source ("" if none)."""

    def newest(source: str) -> str:
        from mmforge.backend.library import packages

        try:
            mine = [e for e in packages(folder) if e.source == source]
        except OSError:
            return ""
        best = max(mine, key=lambda e: e.converted, default=None)
        return str(best.folder) if best is not None else ""

    return newest


class Selection:
    """The user's choice and what hangs off it; see the module's docstring.

    Read the fields as attributes; change them with the `set_*` methods, which clear
    what depended on them and tell the observers.
    """

    def __init__(
        self,
        *,
        package: str = "",
        dtype: str = "f32",
        target: str = "cpu",
        source_of: Callable[[str], str] = manifest_source,
        newest_package: Callable[[str], str] = lambda source: "",
    ):
        self._source_of = source_of
        self.newest_package = newest_package
        self.source = ""
        self.profile: Any = None
        self.dtype = dtype
        self.target = target
        self.package = package
        # What Verify compares the package with: the model the package was converted from.
        self.reference = source_of(package)
        self.loaded = ""  # the package Chat has loaded
        self.converted: Converted | None = None
        self.verified: Any = None  # Verify's report of (package, reference)
        self.compared: tuple[str, str] | None = None  # the pair the user picked in Compare
        # A model typed on the Model page over the card and not inspected yet (None or ""
        # when none): Convert waits for it wherever it is pressed.
        self.typed: str | None = None
        self._observers: list[Observer] = []

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(changed_fields)` after each change; returns an unsubscribe."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer) if observer in self._observers else None

    def _apply(self, values: dict[str, Any]) -> frozenset[str]:
        """Set these fields, clear what they cleared, tell the observers what changed."""
        changed = {name for name, value in values.items() if getattr(self, name) != value}
        for name in changed:
            setattr(self, name, values[name])
        cleared = {d for name in changed for d in CLEARS.get(name, ()) if d not in values}
        for name in cleared:
            if getattr(self, name) is not None:
                setattr(self, name, None)
                changed.add(name)
        result = frozenset(changed)
        if result:
            for observer in list(self._observers):
                observer(result)
        return result

    def set_source(self, source: str, profile: Any = None) -> frozenset[str]:
        """A model was picked (and inspected, when `profile` is given).

        The package must be one converted from this model: the one picked stays when it
        is, else the newest in the library, else none.
        """
        values: dict[str, Any] = {"source": source}
        if profile is not None or source != self.source:
            values["profile"] = profile
        if source:  # picked again too: a package picked since may be another model's
            if self._source_of(self.package) != source:
                values["package"] = self.newest_package(source)
            values["reference"] = source
        return self._apply(values)

    def set_typed(self, typed: str) -> frozenset[str]:
        """A model typed over the card ("" when the field holds the card's model again)."""
        return self._apply({"typed": typed or None})

    def set_profile(self, profile: Any) -> frozenset[str]:
        """The source's inspection finished."""
        return self._apply({"profile": profile})

    def set_precision(self, dtype: str | None = None, target: str | None = None) -> frozenset[str]:
        """Another precision or target on Convert."""
        values = {"dtype": dtype or self.dtype, "target": target or self.target}
        return self._apply(values)

    def set_package(self, package: str) -> frozenset[str]:
        """A package was converted or picked; its reference is the model it came from."""
        values = {"package": package}
        if package != self.package or not self.reference:
            values["reference"] = self._source_of(package) or self.source
        return self._apply(values)

    def set_reference(self, reference: str) -> frozenset[str]:
        """The user named another reference model for Verify."""
        return self._apply({"reference": reference})

    def set_loaded(self, package: str) -> frozenset[str]:
        """Chat loaded this package ("" when it unloaded)."""
        return self._apply({"loaded": package})

    def set_converted(self, converted: Converted | None) -> frozenset[str]:
        """Convert finished (None: its result was put away).

        A conversion makes a package: the package becomes it, which clears the pairing
        of the previous one.
        """
        if converted is None:
            return self._apply({"converted": None})
        package = converted.package
        return self._apply(
            {
                "converted": converted,
                "package": package,
                "reference": self._source_of(package) or converted.source,
            }
        )

    def set_verified(self, report: Any) -> frozenset[str]:
        """Verify finished for the current package and reference (None: put away)."""
        return self._apply({"verified": report})

    def set_compared(self, pair: Iterable[str] | None) -> frozenset[str]:
        """The user picked Compare's pair (None: follow the package again)."""
        return self._apply({"compared": tuple(pair) if pair is not None else None})

    def current_conversion(self) -> Converted | None:
        """The finished conversion, when it is of the current source, precision and target."""
        c = self.converted
        if c is None or (c.source, c.dtype, c.target) != (self.source, self.dtype, self.target):
            return None
        return c
