"""A "Details" expander: the technical tables one click away, collapsed at first."""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QSizePolicy, QToolButton, QVBoxLayout, QWidget


class Details(QWidget):
    """A toggle button over a body that starts hidden.

    The plain sentence leads each page; what an engineer checks (mappings, ids, per-stage
    numbers) waits here.
    """

    def __init__(self, body: QWidget, title: str = "Details", parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.body = body
        self.toggle = QToolButton()
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.setText(title)
        self.toggle.setAccessibleName(title)
        self.toggle.toggled.connect(self.set_expanded)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.toggle)
        layout.addWidget(body, 1)
        self.set_expanded(False)

    def expanded(self) -> bool:
        """Whether the body is shown."""
        return self.toggle.isChecked()

    @Slot(bool)
    def set_expanded(self, shown: bool) -> None:
        """Show or hide the body."""
        if self.toggle.isChecked() != shown:
            self.toggle.setChecked(shown)  # comes back here through toggled
            return
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.body.setVisible(shown)
        # Collapsed, it keeps to its button's height: a stretch given to it stays unused
        # rather than becoming an empty band.
        grow = QSizePolicy.Policy.Expanding if shown else QSizePolicy.Policy.Maximum
        self.setSizePolicy(QSizePolicy.Policy.Preferred, grow)
