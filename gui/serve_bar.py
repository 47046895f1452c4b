"""The chat page's "Serve on this computer" row: the package to other apps, and its count.

The server is `mmforge serve PACKAGE --port N --events` in a child process (a QProcess),
as every other job runs outside the GUI: it loads its own copy of the model, the window
never blocks, and Stop ends it with SIGTERM (a clean stop: its socket is closed, an answer
in flight stops at its next token), or ends it outright after a grace period. The child
prints JSON lines (`listening`, `requests` after each change, `worker_stopped` if the
model's worker dies, `stopped`), read here as they come, in the GUI thread.

The app's server takes no key: it answers this computer only, and refuses web pages
(`mmforge.backend.serve.guard`). MMFORGE_API_KEY, which `mmforge serve` would take, is
kept from it, so that the address shown here never answers 401 for a key nobody sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QProcess, QProcessEnvironment, QTimer, Signal, Slot
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from mmforge.backend.serve import DEFAULT_PORT
from mmforge.backend.worker.child import app_command
from mmforge.gui.safe_text import for_display, plain_label

STOP_GRACE_MS = 5000
KEY_VARIABLE = "MMFORGE_API_KEY"
START = "Serve on this computer"
STOP = "Stop serving"


class ServeBar(QWidget):
    """Serve the chosen package at a local OpenAI-compatible address.

    Args:
        package: Gives the package folder and the execution provider to serve on.
        port: The port to listen on (0: any free one, for tests).

    Signals:
        serving(bool): The server started listening (True) or ended (False).
    """

    serving = Signal(bool)

    def __init__(
        self,
        package: Callable[[], tuple[str, str]],
        port: int = DEFAULT_PORT,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self._package = package
        self._port = port
        self._process: QProcess | None = None
        self._buffer = b""
        self._stderr = b""
        self._stopping = False
        self._worker_stopped = ""
        self.url = ""
        self.button = QPushButton(START)
        self.button.setObjectName("serveButton")
        self.button.setToolTip(
            "Let other programs on this computer (editors, scripts, chat apps) use the "
            "package through an OpenAI-compatible address. It loads its own copy of the model."
        )
        self.button.clicked.connect(self.toggle)
        self.address = QLineEdit()
        self.address.setReadOnly(True)
        self.address.setAccessibleName("Server address")
        self.address.setPlaceholderText("not serving")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self.copy_address)
        self.count = plain_label()
        self.count.setObjectName("serveCount")
        self._kill_timer = QTimer(self, singleShot=True, interval=STOP_GRACE_MS)
        self._kill_timer.timeout.connect(self._kill)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addWidget(QLabel("Address:"))
        row.addWidget(self.address, 1)
        row.addWidget(self.copy_button)
        row.addWidget(self.count)

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None

    @Slot()
    def toggle(self) -> None:
        """Start serving, or stop."""
        if self._process is None:
            self.start()
        else:
            self.stop()

    def start(self) -> None:
        """Start the server on the package the page names."""
        package, ep = self._package()
        if not package:
            self.count.setText("Choose a package first.")
            return
        command = app_command("serve", package, "--port", str(self._port), "--ep", ep, "--events")
        process = QProcess(self)
        process.setProgram(command[0])
        process.setArguments(command[1:])
        environment = QProcessEnvironment.systemEnvironment()
        environment.remove(KEY_VARIABLE)
        process.setProcessEnvironment(environment)
        process.readyReadStandardOutput.connect(self._read)
        process.readyReadStandardError.connect(self._read_errors)
        process.finished.connect(self._finished)
        self._process, self._buffer, self._stderr, self._stopping = process, b"", b"", False
        self._worker_stopped = ""
        self.button.setText(STOP)
        self.count.setText("Loading the model…")
        process.start()

    def stop(self) -> None:
        """Stop the server: SIGTERM, then end it if it has not stopped after the grace."""
        if self._process is None or self._stopping:
            return
        self._stopping = True
        self.count.setText("Stopping…")
        self._process.terminate()
        self._kill_timer.start()

    def shutdown(self) -> None:
        """Stop and wait (on window close)."""
        process = self._process
        if process is None:
            return
        self.stop()
        if not process.waitForFinished(STOP_GRACE_MS):
            process.kill()
            process.waitForFinished(STOP_GRACE_MS)

    @Slot()
    def copy_address(self) -> None:
        """Put the address on the clipboard."""
        if self.url:
            QApplication.clipboard().setText(self.url)

    @Slot()
    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    @Slot()
    def _read(self) -> None:
        if self._process is None:
            return
        self._buffer += bytes(self._process.readAllStandardOutput().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._on_event(event)

    @Slot()
    def _read_errors(self) -> None:
        if self._process is not None:
            self._stderr = (self._stderr + bytes(self._process.readAllStandardError().data()))[
                -4000:
            ]

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "listening":
            self.url = str(event.get("url", ""))
            self.address.setText(self.url)
            self.copy_button.setEnabled(True)
            self.count.setText("0 requests")
            self.serving.emit(True)
        elif kind == "requests" and not self._worker_stopped:
            self.count.setText(_count_text(event))
        elif kind == "worker_stopped":
            # The server still answers (503, and /health says why); the model does not.
            self._worker_stopped = for_display(str(event.get("message", "")))
            self.count.setText(self._worker_stopped or "The model's worker process stopped")

    @Slot(int, QProcess.ExitStatus)
    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._kill_timer.stop()
        stopping = self._stopping
        self._process = None
        self.url = ""
        self.address.clear()
        self.copy_button.setEnabled(False)
        self.button.setText(START)
        lines = self._stderr.decode("utf-8", "replace").strip().splitlines()
        if code != 0 and not stopping and lines:
            self.count.setText(for_display(lines[-1].removeprefix("mmforge: error: ")))
        else:
            self.count.setText("")
        self.serving.emit(False)


def _count_text(event: dict[str, Any]) -> str:
    """`12 requests · answering 1 · 2 waiting` from a `requests` event."""
    done = int(event.get("served", 0)) + int(event.get("failed", 0))
    done += int(event.get("cancelled", 0))
    text = f"{done} request{'s' if done != 1 else ''}"
    if event.get("active"):
        text += " · answering 1"
    if event.get("queued"):
        text += f" · {event['queued']} waiting"
    if event.get("refused"):
        text += f" · {event['refused']} turned away"
    return text
