"""The main window: Model → Convert → Verify → Chat, and Compare; one page each."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings, Qt, Slot
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QListWidget,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QStackedWidget,
    QWidget,
)

from mmforge.gui import last_session, quit_question, wheel_guard
from mmforge.gui.chat_view import ChatView
from mmforge.gui.compare_view import CompareView
from mmforge.gui.convert_view import ConvertView
from mmforge.gui.model_view import ModelView
from mmforge.gui.state import AppState
from mmforge.gui.theme import SCHEMES, apply_scheme
from mmforge.gui.verify_view import VerifyView

PAGES = ("1  Model", "2  Convert", "3  Verify", "4  Chat", "5  Compare")
DEFAULT_SIZE = (1180, 780)
# The least a window reopens at where the screen has room (a 1024×600 screen has).
REOPEN_AT_LEAST = (960, 540)
SHORTCUTS = (
    ("Ctrl+1 … Ctrl+5", "Model, Convert, Verify, Chat, Compare"),
    ("Ctrl+O", "Open a package to chat with"),
    ("Ctrl+L", "The library of packages and downloads"),
    ("Ctrl+N", "New conversation"),
    ("Enter / Shift+Enter", "Send / a new line in the message"),
    ("Esc or Ctrl+.", "Stop the answer"),
    ("Ctrl+V", "Paste a picture into the message"),
    ("Ctrl+Shift+C", "Copy the last answer"),
    ("↑ ↓ in the conversation list", "Open the conversation above or below"),
    ("Ctrl+Q", "Quit (asked first while a conversion, verify or download runs)"),
)


class MainWindow(QMainWindow):
    """One window; the pages share an `AppState`.

    Args:
        settings: Where choices persist between runs.
        restore: Come back to the last session (page, conversation, loaded package) and
            remember this one when closing; the self-test, which drives a window of its
            own, leaves the user's session alone.
    """

    def __init__(self, settings: QSettings, restore: bool = True):
        super().__init__()
        self.setWindowTitle("Multimodal Forge")
        app = QApplication.instance()
        if isinstance(app, QApplication):
            wheel_guard.install(app)  # the wheel scrolls pages, not the settings on them
        self.state = AppState(settings, self)
        self.model_view = ModelView(self.state)
        self.convert_view = ConvertView(self.state)
        self.verify_view = VerifyView(self.state)
        self.chat_view = ChatView(self.state)
        self.compare_view = CompareView(self.state)
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setAccessibleName("Pages")
        self.nav.addItems(PAGES)
        self.nav.setFixedWidth(150)
        self.pages = QStackedWidget()
        self._order = (
            self.model_view,
            self.convert_view,
            self.verify_view,
            self.chat_view,
            self.compare_view,
        )
        for page in self._order:
            # A small screen scrolls a page rather than cutting its lower rows off.
            scroll = QScrollArea()
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QScrollArea.Shape.NoFrame)
            scroll.setWidget(page)
            self.pages.addWidget(scroll)
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.model_view.convert_requested.connect(self._to_convert)
        self.convert_view.verify_requested.connect(self._to_verify)
        self.convert_view.chat_requested.connect(self._chat_with_converted)
        self.verify_view.chat_requested.connect(self._chat_with_verified)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.addWidget(self.nav)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)
        self.nav.setCurrentRow(0)
        self._system_palette = QApplication.palette()
        self._menus()
        geometry = settings.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            self.resize(*DEFAULT_SIZE)
        self._fit_screen()
        self._remember = restore
        if restore:
            last_session.restore(self)

    def _fit_screen(self) -> None:
        """No larger than the screen's free area (a saved size from a bigger screen too)."""
        screen = self.screen()
        if screen is None:
            return
        free = screen.availableGeometry()
        # The frame (title bar, borders) is not in the window's size: leave room for it.
        room = (free.width() - 16, free.height() - 40)
        # Nor smaller than a page needs: a size saved on a larger screen came back from
        # Qt as 678×373 on a 1024×600 one, hiding Load and Send until maximised.
        least = (min(REOPEN_AT_LEAST[0], room[0]), min(REOPEN_AT_LEAST[1], room[1]))
        width = max(min(self.width(), room[0]), least[0])
        height = max(min(self.height(), room[1]), least[1])
        if (width, height) != (self.width(), self.height()):
            self.resize(width, height)
            self.move(free.topLeft())

    def _action(self, menu: QMenu, text: str, slot: object, shortcut: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _menus(self) -> None:
        """File, View, Chat and Help, with the shortcuts people expect."""
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&Open package…", self._open_package, "Ctrl+O")
        self._action(file, "&Library…", self.show_library, "Ctrl+L")
        self._action(file, "Hugging Face &account…", self.model_view.account)
        file.addSeparator()
        self.quit_action = self._action(file, "&Quit", self.request_quit, "Ctrl+Q")
        self.quit_action.setMenuRole(QAction.MenuRole.QuitRole)  # macOS: the app menu's
        view = bar.addMenu("&View")
        self.page_actions = [
            self._action(view, name.split()[1], lambda _=False, i=i: self.go(i), f"Ctrl+{i + 1}")
            for i, name in enumerate(PAGES)
        ]
        view.addSeparator()
        appearance = view.addMenu("&Appearance")
        group = QActionGroup(self)
        chosen = self.state.text("appearance", "system")
        self.scheme_actions: dict[str, QAction] = {}
        for scheme in SCHEMES:
            action = QAction(scheme.capitalize(), self, checkable=True)
            action.setChecked(scheme == chosen)
            action.triggered.connect(lambda _=False, s=scheme: self.set_appearance(s))
            group.addAction(action)
            appearance.addAction(action)
            self.scheme_actions[scheme] = action
        if chosen != "system":
            self.set_appearance(chosen)
        chat = bar.addMenu("&Chat")
        self._action(chat, "&New conversation", self._new_conversation, "Ctrl+N")
        self._action(chat, "&Copy last answer", self.chat_view.copy_last_answer, "Ctrl+Shift+C")
        self._action(chat, "&Stop the answer", self.chat_view.stop, "Ctrl+.")
        chat.addSeparator()
        self.compare_action = self._action(
            chat, "Co&mpare two packages of a model…", self._to_compare
        )
        help_menu = bar.addMenu("&Help")
        self.shortcuts_action = self._action(
            help_menu, "&Keyboard shortcuts", self.show_shortcuts, "F1"
        )
        self.guide_action = self._action(help_menu, "&User guide", self.show_guide)
        self.about_action = self._action(help_menu, "&About Multimodal Forge", self.show_about)

    @Slot(str)
    def set_appearance(self, scheme: str) -> None:
        """System, light or dark colours (remembered)."""
        app = QApplication.instance()
        if scheme not in SCHEMES or not isinstance(app, QApplication):
            return
        apply_scheme(app, scheme, self._system_palette)
        self.state.settings.setValue("appearance", scheme)
        self.scheme_actions[scheme].setChecked(True)

    @Slot()
    def show_library(self) -> None:
        """Packages and downloaded models: sizes, dates, open, chat, delete, move."""
        from mmforge.gui.library_dialog import LibraryDialog

        dialog = LibraryDialog(self.state, self)
        dialog.chat_requested.connect(self._chat_with)
        dialog.exec()

    @Slot(str)
    def _chat_with(self, package: str) -> None:
        """Show Chat with this package loaded (loading it unless it is the loaded one)."""
        self.show_page(self.chat_view)
        if package:
            self.chat_view.chat_with(package)

    @Slot()
    def _chat_with_converted(self) -> None:
        """The package the finished conversion made, else the selection's package."""
        converted = self.state.selection.converted
        self._chat_with(converted.package if converted is not None else self.state.package)

    @Slot()
    def _chat_with_verified(self) -> None:
        """Verify's package: the selection's, paired with the picked model."""
        self._chat_with(self.state.package)

    @Slot()
    def _open_package(self) -> None:
        self.show_page(self.chat_view)
        self.chat_view.choose_package()

    @Slot()
    def _new_conversation(self) -> None:
        self.show_page(self.chat_view)
        self.chat_view.new_conversation()

    @Slot()
    def show_shortcuts(self) -> None:
        """Help > Keyboard shortcuts."""
        rows = "".join(f"<tr><td><b>{k}</b></td><td>{what}</td></tr>" for k, what in SHORTCUTS)
        box = QMessageBox(self)
        box.setObjectName("shortcuts")
        box.setWindowTitle("Keyboard shortcuts")
        box.setText(f"<table cellpadding='4'>{rows}</table>")
        box.open()

    @Slot()
    def show_guide(self) -> None:
        """Help > User guide: the README's guide, shipped with the app."""
        from mmforge.gui.user_guide import UserGuideDialog

        dialog = UserGuideDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    @Slot()
    def show_about(self) -> None:
        """The version and the licences of what the app bundles."""
        from mmforge.gui.about_dialog import AboutDialog

        AboutDialog(self).exec()

    def go(self, index: int) -> None:
        """Show a page (0 Model, 1 Convert, 2 Verify, 3 Chat, 4 Compare).

        The keys go where that page is typed into (the model field, the message, the
        prompt): after Ctrl+4 the first words typed were lost.
        """
        self.nav.setCurrentRow(index)
        typed_into = {
            self.model_view: self.model_view.source,
            self.chat_view: self.chat_view.input,
            self.compare_view: self.compare_view.input,
        }.get(self._order[index])
        if typed_into is not None and typed_into.isEnabled():
            typed_into.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def current_page(self) -> QWidget:
        """The page shown."""
        return self._order[self.pages.currentIndex()]

    def show_page(self, page: QWidget) -> None:
        """Show this page."""
        self.go(self._order.index(page))

    @Slot()
    def _to_convert(self) -> None:
        self.show_page(self.convert_view)

    @Slot()
    def _to_verify(self) -> None:
        self.show_page(self.verify_view)

    @Slot()
    def _to_compare(self) -> None:
        self.show_page(self.compare_view)

    @Slot()
    def request_quit(self) -> None:
        """Ctrl+Q, File > Quit: asked first while a conversion, verify or download runs."""
        if quit_question.confirm(self):
            self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        """Save the geometry and the session; stop workers (a conversion cancels cleanly).

        The window's close button asks first while a long job runs, as Quit does; a
        close made by the program (Quit after its question, the self-test) does not.
        """
        if event.spontaneous() and not quit_question.confirm(self):
            event.ignore()
            return
        self.state.settings.setValue("geometry", self.saveGeometry())
        if self._remember:
            last_session.remember(self)
        self.shutdown_workers()
        super().closeEvent(event)

    def shutdown_workers(self) -> None:
        """Stop every worker and wait for it (cancel, then end it); a second call does nothing.

        Called on close and when the app quits by any other way: a quit need not close the
        window first (under Wine with no display, `close()` on the window returns without
        a close event, so `closeEvent` never runs).
        """
        for runner in (self.model_view.runner, self.convert_view.runner, self.verify_view.runner):
            runner.shutdown()
        self.chat_view.shutdown()
        self.compare_view.shutdown()
