"""`mmforge gui --self-test`: the demo flow driven through the real window, offline.

Model (build the demo checkpoint, inspect) → Convert → Verify (PASS expected) → Chat (one
turn with the probe image). Every step runs in worker processes, as for a user. Exits
non-zero with the reason on stderr when a step fails or the whole flow takes too long.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtWidgets import QApplication

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat.conversations import ConversationStore
from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.backend.inspect import Profile
from mmforge.backend.verify import VerifyReport

TIMEOUT_MS = 600_000


class SelfTest(QObject):
    """Drives a `MainWindow` through the demo flow; `ok` tells how it went."""

    def __init__(self, window: Any, snapshot: Callable[[str], None] | None = None):
        super().__init__(window)
        self.window = window
        self.snapshot = snapshot
        self.ok = False
        self.steps: list[str] = []
        self._finished = False
        self._tmp = tempfile.TemporaryDirectory(prefix="mmforge-self-test-")
        window.chat_view.store = ConversationStore(Path(self._tmp.name) / "conversations")
        state = window.state
        state.profile_changed.connect(self._inspected)
        state.package_changed.connect(self._converted)
        window.verify_view.runner.succeeded.connect(self._verified)
        window.chat_view.bridge.ready.connect(self._loaded)
        window.chat_view.bridge.turn.connect(self._answered)
        for runner in (
            window.model_view.runner,
            window.convert_view.runner,
            window.verify_view.runner,
        ):
            runner.failed.connect(self._failed)
        window.chat_view.bridge.failed.connect(self._failed)
        self._timer = QTimer(self, singleShot=True, interval=TIMEOUT_MS)
        self._timer.timeout.connect(self._timed_out)

    def start(self) -> None:
        """Begin with the demo model."""
        self._timer.start()
        self._step("building and inspecting the demo model")
        self.window.model_view.use_demo()

    def _step(self, text: str) -> None:
        self.steps.append(text)
        print(f"self-test: {text}", file=sys.stderr, flush=True)

    def _then(self, page: str, action: Callable[[], None]) -> None:
        """Let the page finish redrawing, hand it to `snapshot`, then go on."""

        def run() -> None:
            if self.snapshot is not None:
                self.snapshot(page)
            action()

        QTimer.singleShot(300, run)

    @Slot(object)
    def _inspected(self, profile: Profile) -> None:
        if not profile.runnable:
            self._fail(f"the demo model is not runnable: {profile.runtime_reason}")
            return
        self._then("model", self._convert)

    def _convert(self) -> None:
        self._step("converting")
        self.window.go(1)
        self.window.convert_view.output.setText(str(Path(self._tmp.name) / "package"))
        self.window.convert_view.convert()

    @Slot(str)
    def _converted(self, package: str) -> None:
        self._step(f"verifying {package}")
        self._then("convert", self._verify)

    def _verify(self) -> None:
        self.window.go(2)
        self.window.verify_view.run()

    @Slot(object)
    def _verified(self, report: VerifyReport) -> None:
        if report.verdict != "PASS":
            self._fail(f"verify says {report.verdict}: {report.cause}")
            return
        self._step("verify PASS; loading the chat")
        self._then("verify", self._load)

    def _load(self) -> None:
        self.window.go(3)
        self.window.chat_view.load()

    @Slot(object)
    def _loaded(self, info: SessionInfo) -> None:
        self._step("one chat turn with the probe image")
        chat = self.window.chat_view
        chat.max_tokens.setValue(16)
        chat.strip.add(resources.probe_image(), IMAGE)
        chat.input.setPlainText("What is in this picture?")
        chat.send()

    @Slot(object)
    def _answered(self, turn: TurnResult) -> None:
        if not turn.token_ids:
            self._fail("the chat answer is empty")
            return
        self._step(f"answered {len(turn.token_ids)} tokens; all steps passed")
        self.ok = True
        self._then("chat", self._finish)

    @Slot(dict)
    def _failed(self, error: dict[str, Any]) -> None:
        self._fail(str(error.get("message")))

    @Slot()
    def _timed_out(self) -> None:
        self._fail(f"timed out after {TIMEOUT_MS // 1000} s at: {self.steps[-1]}")

    def _fail(self, reason: str) -> None:
        if self._finished:  # a worker ended by the finish reports its end: not a failure
            return
        print(f"self-test FAILED: {reason}", file=sys.stderr, flush=True)
        self.ok = False
        self._finish()

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._timer.stop()
        # The workers end here, not through the window's close event: under Wine with no
        # display (its null driver), close() on the window returns True with no close
        # event and the window stays up (packaging/windows/wine/close_repro.py).
        self.window.shutdown_workers()
        self.window.close()
        try:
            self._remove_scratch()
        finally:  # the app ends whatever the folder does
            app = QApplication.instance()
            if app is not None:
                # exit(), not quit(): Qt 6's quit() first closes every window, and retries
                # for ever while a visible window's close() neither closes it nor refuses
                # (measured under Wine's null driver: 100% of a core in
                # QApplicationPrivate::tryCloseAllWidgetWindows).
                app.exit(0 if self.ok else 1)

    def _remove_scratch(self) -> None:
        """Remove the test's folder, trying for a few seconds, then leave it.

        On Windows a file stays locked while the chat worker that opened it is ending
        (measured under Wine: the package's folder was still open when the window
        closed, and the cleanup's error kept the app from quitting).
        """
        for _ in range(50):
            try:
                self._tmp.cleanup()
                return
            except OSError:
                time.sleep(0.1)
        print(f"self-test: could not remove {self._tmp.name}", file=sys.stderr, flush=True)
