"""Driving the chat page: waits that end when the worker is idle again, not before.

The chat worker reports a request's result (`conversation`, `turn`) before it reports
that it is idle (`busy(False)`); under load the GUI thread can see the first long before
the second. The chat page ignores New, Rename and Send while busy, so a test that acts on
the result alone races the worker. Every wait here ends on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LONG = 180_000  # ms: a conversion or verification of a tiny checkpoint on a slow machine


def idle(busy: bool) -> bool:
    return not busy


@contextmanager
def settled(qtbot, chat, timeout: int = LONG) -> Iterator[None]:
    """Wait for the conversation the request reports and for the worker to be idle."""
    with (
        qtbot.waitSignal(chat.bridge.conversation, timeout=timeout),
        qtbot.waitSignal(chat.bridge.busy, timeout=timeout, check_params_cb=idle),
    ):
        yield


@contextmanager
def answered(qtbot, chat, timeout: int = LONG) -> Iterator[object]:
    """Wait for the turn a message gets and for the worker to be idle; yields the turn's wait."""
    with (
        qtbot.waitSignal(chat.bridge.turn, timeout=timeout) as turn,
        qtbot.waitSignal(chat.bridge.busy, timeout=timeout, check_params_cb=idle),
    ):
        yield turn


def load(qtbot, chat, package: Path) -> None:
    chat.package.setText(str(package))
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.load_button.click()


def send(qtbot, chat, text: str) -> None:
    chat.input.setPlainText(text)
    with answered(qtbot, chat):
        chat.send_button.click()


def typed_in(text: str):
    """QInputDialog.exec standing in for the user: types `text` and presses OK."""
    from PySide6.QtWidgets import QInputDialog

    def exec_(dialog: QInputDialog) -> QInputDialog.DialogCode:
        dialog.setTextValue(text)
        return QInputDialog.DialogCode.Accepted

    return exec_
