"""The Convert page's result: what the package holds, where to go next, the weight mapping."""

from __future__ import annotations

import html
import json
from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.convert import Manifest
from mmforge.backend.units import a_or_an, human_bytes
from mmforge.gui.details import Details

FILTERS = ("all", "mapped", "unused", "missing", "shape mismatch")


PART_WORDS = {
    "vision_encoder": "image encoder",
    "audio_encoder": "audio encoder",
    "embedding": "embedding",
    "decoder": "language model",
}


def part_words(components: list[str] | tuple[str, ...]) -> str:
    """A package's components in words: "image encoder, embedding and language model"."""
    words = [PART_WORDS.get(c, c.replace("_", " ")) for c in components]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


class ConvertResult(QWidget):
    """A finished conversion: its summary, where to go next, and its weight mapping.

    The buttons are Open folder, Chat with it and Verify; the mapping (which checkpoint
    tensor went where) is under Details.

    Signals:
        verify_requested(), chat_requested(), open_requested(): the buttons.
    """

    verify_requested = Signal()
    chat_requested = Signal()
    open_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.filter = QComboBox()
        self.filter.addItems(FILTERS)
        self.filter.currentTextChanged.connect(self._fill_weights)
        self.weights = QTableWidget(0, 4)
        self.weights.setAccessibleName("Weights in the package")
        self.weights.setHorizontalHeaderLabels(
            ["checkpoint tensor", "status", "initializer", "shape"]
        )
        header = self.weights.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.ResizeToContents)
        self.weights.setWordWrap(False)
        self.weights.verticalHeader().setVisible(False)
        self.next_button = QPushButton("Verify →")
        self.next_button.clicked.connect(self.verify_requested)
        # When a conversion ends: where it is, and straight to talking with it.
        self.open_button = QPushButton("Open folder")
        self.open_button.clicked.connect(self.open_requested)
        self.chat_button = QPushButton("Chat with it →")
        self.chat_button.clicked.connect(self.chat_requested)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.open_button)
        row.addWidget(self.chat_button)
        row.addWidget(self.next_button)
        layout.addLayout(row)
        # Which checkpoint tensor went where: for whoever checks the conversion.
        mapping = QWidget()
        mapping_layout = QVBoxLayout(mapping)
        mapping_layout.setContentsMargins(0, 0, 0, 0)
        show = QHBoxLayout()
        show.addWidget(QLabel("Show"))
        show.addWidget(self.filter)
        show.addStretch(1)
        mapping_layout.addLayout(show)
        mapping_layout.addWidget(self.weights, 1)
        self.weights.setMinimumHeight(200)
        self.details = Details(mapping, "Details: the weight mapping")
        layout.addWidget(self.details)
        self._report: list[tuple[str, str, str, str]] = []
        self.clear()

    def clear(self) -> None:
        """No result: no summary, no mapping, the buttons off."""
        self.summary.setText("")
        self._report = []
        self.weights.setRowCount(0)
        self.set_enabled(False)

    def set_enabled(self, enabled: bool) -> None:
        """Verify, Open folder and Chat with it: on once there is a package."""
        for button in (self.next_button, self.open_button, self.chat_button):
            button.setEnabled(enabled)

    def show_manifest(self, manifest: Manifest, out: str) -> None:
        """What the conversion made in `out`, and its weight mapping."""
        files = manifest.files
        w = manifest.weights
        esc = html.escape
        where = "an NVIDIA GPU" if manifest.ep == "cuda" else "this computer's processor"
        named = a_or_an(manifest.family)  # "an Idefics2", "a Qwen2.5-VL"
        # One plain line first; the parts and the weight counts, for those who look, after.
        self.summary.setText(
            f"<b>{esc(named[:1].upper() + named[1:])} package at "
            f"{esc(manifest.dtype)}</b> for "
            f"{where}: {human_bytes(sum(files.values()))} in {esc(out)}<br>"
            f"<small>Parts: {esc(part_words(manifest.components))}; every checkpoint "
            f"weight accounted for ({esc(str(w.get('mapped')))} used, "
            f"{esc(str(w.get('unused')))} not needed); {len(files)} files.</small>"
        )
        self._report = _weight_rows(Path(out) / "weights_report.json")
        self._fill_weights(self.filter.currentText())

    @Slot(str)
    def _fill_weights(self, which: str) -> None:
        rows = [r for r in self._report if which == "all" or r[1] == which]
        self.weights.setRowCount(len(rows))
        for i, cells in enumerate(rows):
            for j, text in enumerate(cells):
                self.weights.setItem(i, j, QTableWidgetItem(text))


def _weight_rows(path: Path) -> list[tuple[str, str, str, str]]:
    """(tensor, status, initializers, shape) rows of a package's weights_report.json."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    rows = []
    for key, status in (
        ("mapped", "mapped"),
        ("unused", "unused"),
        ("missing", "missing"),
        ("mismatched", "shape mismatch"),
    ):
        for entry in report.get(key, []):
            name = str(entry.get("checkpoint") or entry.get("initializer") or entry.get("name", ""))
            targets = ", ".join(
                str(t) for t in entry.get("targets", []) or [entry.get("initializer", "")]
            )
            rows.append((name, status, targets, str(entry.get("shape", ""))))
    return rows
