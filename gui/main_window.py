"""The main window: Model → Convert → Verify → Chat, one page each."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings, Slot
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QMainWindow,
    QStackedWidget,
    QWidget,
)

from mmforge.gui.chat_view import ChatView
from mmforge.gui.convert_view import ConvertView
from mmforge.gui.model_view import ModelView
from mmforge.gui.state import AppState
from mmforge.gui.verify_view import VerifyView

PAGES = ("1  Model", "2  Convert", "3  Verify", "4  Chat")


class MainWindow(QMainWindow):
    """One window; the pages share an `AppState`."""

    def __init__(self, settings: QSettings):
        super().__init__()
        self.setWindowTitle("Multimodal Forge")
        self.state = AppState(settings, self)
        self.model_view = ModelView(self.state)
        self.convert_view = ConvertView(self.state)
        self.verify_view = VerifyView(self.state)
        self.chat_view = ChatView(self.state)
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.addItems(PAGES)
        self.nav.setFixedWidth(150)
        self.pages = QStackedWidget()
        for page in (self.model_view, self.convert_view, self.verify_view, self.chat_view):
            self.pages.addWidget(page)
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.model_view.convert_requested.connect(self._to_convert)
        self.convert_view.verify_requested.connect(self._to_verify)
        self.convert_view.chat_requested.connect(self._to_chat)
        self.verify_view.chat_requested.connect(self._to_chat)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.addWidget(self.nav)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)
        self.nav.setCurrentRow(0)
        self.about_action = QAction("&About Multimodal Forge", self)
        self.about_action.triggered.connect(self.show_about)
        self.menuBar().addMenu("&Help").addAction(self.about_action)
        geometry = settings.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            self.resize(1180, 780)

    @Slot()
    def show_about(self) -> None:
        """The version and the licences of what the app bundles."""
        from mmforge.gui.about_dialog import AboutDialog

        AboutDialog(self).exec()

    def go(self, index: int) -> None:
        """Show a page (0 Model, 1 Convert, 2 Verify, 3 Chat)."""
        self.nav.setCurrentRow(index)

    @Slot()
    def _to_convert(self) -> None:
        self.go(1)

    @Slot()
    def _to_verify(self) -> None:
        self.go(2)

    @Slot()
    def _to_chat(self) -> None:
        self.go(3)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Save the geometry; stop workers (a running conversion is cancelled cleanly)."""
        self.state.settings.setValue("geometry", self.saveGeometry())
        for runner in (self.model_view.runner, self.convert_view.runner, self.verify_view.runner):
            runner.shutdown()
        self.chat_view.shutdown()
        super().closeEvent(event)
