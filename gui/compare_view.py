"""Compare page: one prompt answered by two packages of one model, side by side.

Each package runs in its own chat worker (`ChatBridge`). The answers are greedy, so two
packages of one model differ only where their precision makes them differ, and the first
token where they part is marked in both columns (`backend.chat.compare`). By default the
two answer one after the other: run at once on a laptop's few cores, each would take
about half of them and the speeds shown would say nothing about either package.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QImage, QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend import memory
from mmforge.backend.attachments import VIDEO, kind_of
from mmforge.backend.chat.compare import (
    divergence,
    fit_together,
    parting_words,
    speed_words,
    summary,
)
from mmforge.backend.chat.footprint import package_memory_bytes
from mmforge.backend.chat.values import PackageInfo, SessionInfo, TurnResult
from mmforge.backend.errors import MmforgeError
from mmforge.gui.bridge import ChatBridge
from mmforge.gui.chat_attachments import FILE_TYPES, attachment_problem, refusal, refusal_hint
from mmforge.gui.chat_input import AttachmentStrip, ChatInput
from mmforge.gui.chat_turns import same_package
from mmforge.gui.compare_column import AnswerColumn, heading
from mmforge.gui.compare_pair import LETTERS, PackagePair
from mmforge.gui.errors import show_error
from mmforge.gui.safe_text import as_html, for_display, plain_label
from mmforge.gui.state import AppState

GREEDY_NOTE = (
    "Both answer greedily (the most likely token at every step), so the same model gives "
    "the same answer every time, and any difference comes from the precision."
)
ORDER_NOTE = (
    "They answer one after the other: run at once on a machine with few cores, each "
    "gets about half of them and the speeds compare nothing."
)


class CompareView(QWidget):
    """Two packages of one model, one prompt, two columns, and where the answers part.

    Signals:
        finished(): a comparison ended (answered, stopped or failed); both workers idle.
    """

    finished = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.bridges = (ChatBridge(self), ChatBridge(self))
        self.columns = (AnswerColumn("A"), AnswerColumn("B"))
        # The compare sessions' conversations are scratch: not in the Chat page's list.
        self._scratch = tempfile.TemporaryDirectory(prefix="mmforge-compare-")
        self.sessions: list[SessionInfo | None] = [None, None]
        self._loading: list[Path | None] = [None, None]
        # Every load ends with one `closed` (the worker replaced, or one that failed to
        # load): counted, so that an earlier worker's `closed` does not end a new run.
        self._runs, self._closes = [0, 0], [0, 0]
        self._outstanding = [0, 0]  # requests queued in each worker and not yet done
        self._queue: list[int] = []  # columns still to answer, in order
        self._request: tuple[str, list[tuple[Path, str]], dict[str, Any]] | None = None
        self.running = False
        self._at_once = False  # how the running comparison runs
        self._names = LETTERS  # what the sentences call A and B
        # Pairs the user said to compare though they may not be of one model.
        self._vouched: set[tuple[Path | None, Path | None]] = set()
        # Two packages that do not fit in memory together answer one by one, each worker
        # closed before the other loads: its memory estimate while loaded, the closes
        # this page asked for (their `closed` ends nothing), and the column to ask once
        # its worker is ready.
        self._one_by_one = False
        self._held = [0, 0]
        self._retired = [0, 0]
        self._ask_when_ready: int | None = None
        self.pair = PackagePair(state)
        self.pair.changed.connect(self._picked)
        self.pair.together.toggled.connect(self._order_note)
        layout = QVBoxLayout(self)
        layout.addWidget(self.pair)
        self.note = plain_label(f"{GREEDY_NOTE} {ORDER_NOTE}", wrap=True)
        layout.addWidget(self.note)
        layout.addLayout(self._prompt_rows())
        self.verdict = heading("")
        self.verdict.setObjectName("compareVerdict")
        layout.addWidget(self.verdict)
        answers = QHBoxLayout()
        for column in self.columns:
            answers.addWidget(column, 1)
        layout.addLayout(answers, 1)
        for i, bridge in enumerate(self.bridges):
            bridge.ready.connect(partial(self._on_ready, i))
            bridge.token.connect(self.columns[i].add)
            bridge.turn.connect(partial(self._on_turn, i))
            bridge.failed.connect(partial(self._on_failed, i))
            bridge.busy.connect(partial(self._on_busy, i))
            bridge.closed.connect(partial(self._on_closed, i))
        stop = QShortcut(QKeySequence("Esc"), self)
        stop.setContext(stop.context().WidgetWithChildrenShortcut)
        stop.activated.connect(self.stop)
        self._picked()
        self._update_buttons()

    def _prompt_rows(self) -> QVBoxLayout:
        self.strip = AttachmentStrip()
        self.strip.setVisible(False)
        self.input = ChatInput()
        self.input.setObjectName("compareInput")
        self.input.setAccessibleName("Prompt")
        self.input.setMaximumHeight(64)
        self.input.setPlaceholderText(
            "The prompt both packages answer. Enter compares; paste or drop an image to attach it."
        )
        self.input.send_requested.connect(self.compare)
        self.input.stop_requested.connect(self.stop)
        self.input.files_added.connect(self.add_files)
        self.input.image_pasted.connect(self._add_image)
        attach = QPushButton("Attach…")
        attach.setToolTip("Attach an image or audio clip (or paste or drop one)")
        attach.clicked.connect(self._pick_files)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 1024)
        self.max_tokens.setValue(self.state.number("compare/max_tokens", 128))
        self.max_tokens.setAccessibleName("Longest answer, in tokens")
        self.max_tokens.setToolTip("The longest answer, in tokens")
        self.max_tokens.setSuffix(" tokens at most")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("compareStop")
        self.stop_button.setToolTip("Stop both answers (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setObjectName("compareButton")
        self.compare_button.setDefault(True)
        self.compare_button.clicked.connect(self.compare)
        # The attachments sit in the buttons' row: a row of their own pushed the answers
        # below the fold at 1024×600.
        buttons = QHBoxLayout()
        buttons.addWidget(attach)
        buttons.addWidget(self.max_tokens)
        buttons.addWidget(self.strip, 1)
        buttons.addStretch(1)  # the buttons stay right with no attachment
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.compare_button)
        rows = QVBoxLayout()
        rows.addWidget(self.input)
        rows.addLayout(buttons)
        return rows

    def showEvent(self, event: QShowEvent) -> None:
        """List the packages again when the page is shown (Chat may have loaded another)."""
        super().showEvent(event)
        if not self.running:
            self.pair.refresh()

    @Slot()
    def _picked(self) -> None:
        for i, column in enumerate(self.columns):
            entry = self.pair.entry(i)
            column.set_package(entry.folder if entry else None, entry.dtype if entry else "")
            session = self.sessions[i]
            if session is not None and entry and same_package(session.package, str(entry.folder)):
                column.set_loaded(session)

    @Slot(bool)
    def _order_note(self, together: bool) -> None:
        order = (
            "They answer at the same time: on a machine with few cores each runs slower "
            "than alone, so compare the answers, not the speeds."
            if together
            else ORDER_NOTE
        )
        self.note.setText(f"{GREEDY_NOTE} {order}")

    # -- attachments ---------------------------------------------------------------------

    @Slot()
    def _pick_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self,
            "Attach",
            "",
            FILE_TYPES,
        )
        self.add_files(files)

    @Slot(list)
    def add_files(self, files: list[str]) -> None:
        """Attach files to the prompt (refused at once when package A cannot take them)."""
        for f in files:
            kind = kind_of(Path(f))
            why = self._attachment_refusal(kind)
            if why is not None:
                hint = refusal_hint(kind) if kind == VIDEO else None
                show_error(
                    self,
                    {
                        "message": f"{Path(f).name} was not attached: {why}.",
                        "hint": hint or "Compare packages of a model that takes it",
                    },
                )
                continue
            if attachment_problem(self, Path(f), kind):
                continue
            self.strip.add(Path(f), kind)

    def _attachment_refusal(self, kind: str) -> str | None:
        folder = self.pair.chosen(0)
        if folder is None:
            return None
        try:
            info = PackageInfo.read(folder)
        except MmforgeError:
            return None  # said when the package loads
        return refusal(info, kind)

    @Slot(QImage)
    def _add_image(self, image: QImage) -> None:
        path = Path(self._scratch.name) / f"pasted-{len(self.strip.files) + 1}.png"
        # PySide6 6.11 takes the format as a str (its stubs say bytes).
        if image.isNull() or not image.save(str(path), "PNG"):  # type: ignore[call-overload]
            show_error(self, {"message": "The pasted image could not be attached"})
            return
        self.add_files([str(path)])

    # -- a comparison --------------------------------------------------------------------

    @Slot()
    def compare(self) -> None:
        """Both packages answer the prompt (loading them first where needed)."""
        text = self.input.toPlainText().strip()
        files = list(self.strip.files)
        if self.running:
            return
        refusal = self.pair.refusal()
        if refusal is not None:
            show_error(self, refusal)
            return
        if not text and not files:  # (the button did nothing, with no word why)
            show_error(
                self,
                {
                    "message": "Nothing to compare yet",
                    "hint": "Type a prompt, or attach a picture, for both packages to answer",
                },
            )
            self.input.setFocus()
            return
        if not self._sure_of_the_pair() or not self._plan_memory():
            return
        self.state.settings.setValue("compare/max_tokens", self.max_tokens.value())
        options = {"max_new_tokens": self.max_tokens.value(), "do_sample": False}
        self._request = (text, files, options)
        # Named by precision in the sentences ("int4 decodes 2.1× as fast as f32").
        dtypes = [e.dtype if (e := self.pair.entry(i)) else "" for i in range(2)]
        distinct = all(dtypes) and dtypes[0] != dtypes[1]
        self._names = (dtypes[0], dtypes[1]) if distinct else LETTERS
        self.running = True
        self.verdict.setText("")
        ep = self.pair.ep.currentText()
        stale = [
            (session := self.sessions[i]) is None
            or not same_package(session.package, str(self.pair.chosen(i)))
            or session.ep != ep
            for i in range(2)
        ]
        for column in self.columns:
            column.clear("Waiting for its turn…")
        if self._one_by_one:
            # Only A loads to start; B loads when A is done and closed. B's worker from an
            # earlier comparison goes first when anything is to load.
            if self.sessions[1] is not None and (stale[0] or stale[1]):
                self._retire(1)
            stale[1] = False
        for i in range(2):
            if stale[i]:
                folder = self.pair.chosen(i)
                assert folder is not None
                self._load(i, folder)
        self._update_buttons()
        self._start_if_loaded()

    def _plan_memory(self) -> bool:
        """Whether A and B stay loaded together, or answer one by one (False: refused).

        Both at once with two packages that do not fit together is refused in a dialog.
        """
        ep = self.pair.ep.currentText()
        folders = [self.pair.chosen(i) for i in range(2)]
        needs = tuple(package_memory_bytes(f, ep) if f is not None else None for f in folders)
        together = fit_together((needs[0], needs[1]), sum(self._held), memory.available_bytes())
        if not together and self.pair.together.isChecked():
            show_error(
                self,
                {
                    "message": "Packages A and B do not fit in this computer's memory together",
                    "hint": "Untick Both at once: they then answer one after the other, "
                    "each loaded only while it answers.",
                },
            )
            return False
        self._one_by_one = not together
        return True

    def _retire(self, i: int) -> None:
        """Close column i's worker to free its memory (its `closed` ends nothing)."""
        self._retired[i] += 1
        self.sessions[i] = None
        self._held[i] = 0
        self.bridges[i].close()
        self.columns[i].loaded.setText("")

    def _sure_of_the_pair(self) -> bool:
        """Whether to go on with a pair that may not be of one model (asked once per pair)."""
        doubt = self.pair.doubt()
        pair = (self.pair.chosen(0), self.pair.chosen(1))
        if doubt is None or pair in self._vouched:
            return True
        answer = QMessageBox.question(
            self,
            "Compare these two packages?",
            as_html(  # names from the manifests: escaped, and bounded
                for_display(
                    f"These two packages may not be of one model: {doubt}. Their answers can "
                    "be compared token by token only if they are. Compare them anyway?",
                    800,
                )
            ),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self._vouched.add(pair)
        return True

    def _load(self, i: int, folder: Path) -> None:
        self.sessions[i] = None
        self._loading[i] = folder
        self.columns[i].say(f"Loading {folder.name}…")
        self._runs[i] += 1
        self.bridges[i].load(folder, self.pair.ep.currentText(), Path(self._scratch.name))

    def _start_if_loaded(self) -> None:
        first = self.sessions[:1] if self._one_by_one else self.sessions
        if not self.running or self._queue or any(s is None for s in first):
            return
        if any(self._outstanding) or self._ask_when_ready is not None:
            return
        self._at_once = self.pair.together.isChecked() and not self._one_by_one
        if self._at_once:
            for i in range(2):
                self._ask(i)
        else:
            self._queue = [1]
            self._ask(0)

    def _ask(self, i: int) -> None:
        assert self._request is not None
        text, files, options = self._request
        self.columns[i].say("Reading the prompt…")
        self._outstanding[i] += 2
        self.bridges[i].new_conversation()  # each prompt on its own, no earlier turns
        self.bridges[i].send(text, files, options)

    @Slot()
    def stop(self) -> None:
        """Stop both answers (the one waiting its turn does not start)."""
        if not self.running:
            return
        self._queue = []
        for i, bridge in enumerate(self.bridges):
            if self._outstanding[i]:
                bridge.stop()
            elif self.columns[i].turn is None:
                self.columns[i].say("Not run: stopped.")
        if not any(self._outstanding):
            self._end()  # still loading: nothing to wait for

    def _on_ready(self, i: int, info: SessionInfo) -> None:
        loading = self._loading[i]
        if loading is None or not same_package(info.package, str(loading)):
            return  # a worker replaced while it loaded
        self.sessions[i] = info
        self._loading[i] = None
        self._held[i] = package_memory_bytes(loading, info.ep) or 0
        self.columns[i].set_loaded(info)
        self.columns[i].say("Waiting for its turn…" if self.running else "")
        if self._ask_when_ready == i:
            self._ask_when_ready = None
            if self.running:
                self._ask(i)
            return
        self._start_if_loaded()

    def _on_turn(self, i: int, turn: TurnResult) -> None:
        self.columns[i].finish(turn)

    def _on_failed(self, i: int, error: dict[str, Any]) -> None:
        name = self.columns[i].title.text()
        column = self.columns[i]
        if self._loading[i] is not None:
            column.say(for_display(f"Not loaded: {error.get('message')}", 300))
            error = {
                **error,
                "message": f"Package {LETTERS[i]} could not be loaded: {error.get('message')}",
            }
        else:
            column.say(for_display(f"Failed: {error.get('message')}", 300))
        self._queue = []
        was_running = self.running
        if not any(self._outstanding):
            self._end()
        else:
            for j, bridge in enumerate(self.bridges):
                if j != i and self._outstanding[j]:
                    bridge.stop()
        if was_running or self._loading[i] is not None:
            show_error(self, error, title=name[:80] or "Compare")

    def _on_busy(self, i: int, busy: bool) -> None:
        if busy:
            return
        self._outstanding[i] = max(0, self._outstanding[i] - 1)
        if self._outstanding[i]:
            return
        if self._queue and self.running:
            j = self._queue.pop(0)
            if self.sessions[j] is None and self._one_by_one:
                # One by one: this worker's memory goes back before the next one loads.
                self._retire(i)
                folder = self.pair.chosen(j)
                assert folder is not None
                self._ask_when_ready = j
                self._load(j, folder)
            else:
                self._ask(j)
        elif not any(self._outstanding) and self.running:
            self._end()

    def _on_closed(self, i: int) -> None:
        self._closes[i] += 1
        if self._retired[i]:
            self._retired[i] -= 1  # closed by this page to free its memory
            return
        if self._closes[i] < self._runs[i]:
            return  # an earlier worker's
        self.sessions[i] = None
        self._loading[i] = None
        self._outstanding[i] = 0
        self._held[i] = 0
        if self._ask_when_ready == i:
            self._ask_when_ready = None
        self.columns[i].loaded.setText("")
        if self.running and not any(self._outstanding):
            self._queue = []
            self._end()

    def _end(self) -> None:
        """Both are done (or stopped, or failed): mark where the answers part."""
        if not self.running:
            return
        self.running = False
        self._queue = []
        self._ask_when_ready = None
        self._update_buttons()
        a, b = self.columns
        if a.turn is None or b.turn is None:
            self.finished.emit()
            return
        d = divergence(a.turn.token_ids, b.turn.token_ids, a.pieces, b.pieces)
        names = self._names
        said = summary(d, len(a.turn.token_ids), len(b.turn.token_ids), *names)
        words = parting_words(d, a.pieces, b.pieces, *names)
        # At once, each ran at part of the machine's speed: no ratio to show then.
        speed = ""
        if not self._at_once:
            rates = (a.turn.stats.decode_tokens_per_s, b.turn.stats.decode_tokens_per_s)
            speed = speed_words(*rates, *names)
        self.verdict.setText(for_display(f"{said} {words}".strip() + f"\n{speed}", 400).strip())
        if not d.same:
            a.mark(d.a_span)
            b.mark(d.b_span)
        self.finished.emit()

    def _update_buttons(self) -> None:
        self.compare_button.setEnabled(not self.running)
        self.stop_button.setEnabled(self.running)
        for widget in (*self.pair.pickers, self.pair.ep, self.pair.together):
            widget.setEnabled(not self.running)

    def shutdown(self) -> None:
        """Close both workers (on window close)."""
        self._queue = []
        for bridge in self.bridges:
            bridge.close()
        self._scratch.cleanup()
