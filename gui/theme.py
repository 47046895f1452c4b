"""Colours for the HTML the pages draw, taken from the palette (light or dark).

Qt styles widgets from the palette, but HTML in a QTextBrowser or QLabel carries its own
colours. Every colour the pages write into HTML comes from `colours()`, so a dark palette
gets dark backgrounds and light text, never light boxes with unreadable text on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication


@dataclass(frozen=True)
class Colours:
    """Named colours (as #rrggbb) for one palette.

    Attributes:
        dark: Whether the palette is dark (light text on dark backgrounds).
        text: Body text.
        muted: Secondary text (figures, notes).
        user_bubble: Background of the user's messages.
        model_bubble: Background of the model's answers.
        chip: Background of attachment and component chips.
        chip_border: Their border.
        note: Background of a highlighted note (the demo banner, a failing row).
        code: Background of code blocks.
        border: Table rules.
        ok, warn, bad: Verdict colours (PASS, AMBIGUOUS and warnings, FAIL and errors).
        link: Links.
        pygments: The Pygments style for code blocks.
    """

    dark: bool
    text: str
    muted: str
    user_bubble: str
    model_bubble: str
    chip: str
    chip_border: str
    note: str
    code: str
    border: str
    ok: str
    warn: str
    bad: str
    link: str
    pygments: str


LIGHT_ACCENTS = {"ok": "#1a7f37", "warn": "#9a6700", "bad": "#cf222e", "link": "#0969da"}
DARK_ACCENTS = {"ok": "#3fb950", "warn": "#d29922", "bad": "#f85149", "link": "#58a6ff"}


def _mix(a: QColor, b: QColor, t: float) -> str:
    """`a` moved a fraction `t` of the way to `b`."""
    mixed = QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )
    return str(mixed.name())


def is_dark(palette: QPalette) -> bool:
    """Whether text is lighter than the window behind it."""
    window = palette.color(QPalette.ColorRole.Window)
    text = palette.color(QPalette.ColorRole.WindowText)
    return text.lightness() > window.lightness()


def colours(palette: QPalette | None = None) -> Colours:
    """The colours for `palette` (the application's by default)."""
    if palette is None:
        palette = QApplication.palette()
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    accent = palette.color(QPalette.ColorRole.Highlight)
    dark = is_dark(palette)
    accents = DARK_ACCENTS if dark else LIGHT_ACCENTS
    warn = QColor(accents["warn"])
    return Colours(
        dark=dark,
        text=str(text.name()),
        muted=_mix(text, base, 0.4),
        user_bubble=_mix(base, accent, 0.28 if dark else 0.14),
        model_bubble=_mix(base, text, 0.08 if dark else 0.045),
        chip=_mix(base, accent, 0.35 if dark else 0.18),
        chip_border=_mix(base, accent, 0.7),
        note=_mix(base, warn, 0.25 if dark else 0.2),
        code=_mix(base, text, 0.12 if dark else 0.06),
        border=_mix(base, text, 0.3),
        pygments="monokai" if dark else "default",
        **accents,
    )


def stylesheet(c: Colours) -> str:
    """The default style sheet for rich-text documents drawn with these colours."""
    return (
        f"pre {{ background: {c.code}; padding: 8px; }}\n"
        "code { font-family: 'DejaVu Sans Mono', monospace; }\n"
        "table.md { border-collapse: collapse; }\n"
        f"table.md td, table.md th {{ border: 1px solid {c.border}; padding: 4px 8px; }}\n"
        f"a {{ color: {c.link}; }}\n"
    )


SCHEMES = ("system", "light", "dark")


def dark_palette() -> QPalette:
    """A dark palette for the Fusion style (dark grey surfaces, light text, blue accents)."""
    roles = QPalette.ColorRole
    palette = QPalette()
    for role, colour in (
        (roles.Window, "#202124"),
        (roles.WindowText, "#e8eaed"),
        (roles.Base, "#17181a"),
        (roles.AlternateBase, "#26282b"),
        (roles.ToolTipBase, "#303134"),
        (roles.ToolTipText, "#e8eaed"),
        (roles.PlaceholderText, "#9aa0a6"),
        (roles.Text, "#e8eaed"),
        (roles.Button, "#2d2e31"),
        (roles.ButtonText, "#e8eaed"),
        (roles.BrightText, "#ffffff"),
        (roles.Light, "#3c4043"),
        (roles.Midlight, "#34363a"),
        (roles.Mid, "#2a2b2e"),
        (roles.Dark, "#111214"),
        (roles.Shadow, "#000000"),
        (roles.Highlight, "#2f6fd6"),
        (roles.HighlightedText, "#ffffff"),
        (roles.Link, "#8ab4f8"),
        (roles.LinkVisited, "#c58af9"),
    ):
        palette.setColor(role, QColor(colour))
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        palette.setColor(disabled, role, QColor("#6f7378"))
    return palette


# Fusion outlines fields and check boxes in a shade darker than the window: on a dark
# window that is near black, so an empty check box (1.1:1 against the page) and a text
# field could not be seen. On dark palettes they get a light outline, and a ticked box
# the accent colour.
DARK_FIELDS = """
QLineEdit, QPlainTextEdit, QTextEdit {
    border: 1px solid #80868b; border-radius: 3px; padding: 2px;
}
QLineEdit:disabled { border-color: #4a4d51; }
QCheckBox::indicator, QGroupBox::indicator {
    width: 13px; height: 13px; border: 1px solid #9aa0a6; border-radius: 2px;
    background: #17181a;
}
QCheckBox::indicator:checked, QGroupBox::indicator:checked {
    background: #8ab4f8; border-color: #8ab4f8; image: url(CHECK);
}
QCheckBox::indicator:disabled { border-color: #4a4d51; }
"""


def dark_fields() -> str:
    """`DARK_FIELDS` with the check mark's file in place."""
    from mmforge.resources import check_mark

    return DARK_FIELDS.replace("CHECK", check_mark().as_posix())


def apply_scheme(app: QApplication, scheme: str, system: QPalette) -> None:
    """Light, dark, or the palette the system gave (`system`, kept from start-up)."""
    if scheme == "dark":
        app.setPalette(dark_palette())
    elif scheme == "light":
        app.setPalette(app.style().standardPalette() if is_dark(system) else system)
    else:
        app.setPalette(system)
    app.setStyleSheet(dark_fields() if is_dark(app.palette()) else "")
