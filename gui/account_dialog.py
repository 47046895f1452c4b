"""Signing in to the Hugging Face hub: who you are, a checked token, and signing out.

The token goes to the standard token store (which huggingface_hub and transformers read
too) only after the hub has said whose it is; it is never shown, logged or sent anywhere
but the hub endpoint. Checks run on a thread: the hub may be slow, the window is not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

log = logging.getLogger(__name__)


class _Call(QObject):
    """Runs one function on a thread; `done` carries (result, error message or None)."""

    done = Signal(object, object)

    def start(self, fn: Callable[[], Any]) -> None:
        def run() -> None:
            from mmforge.backend.errors import MmforgeError

            try:
                self.done.emit(fn(), None)
            except MmforgeError as e:
                self.done.emit(None, f"{e.user_message}. {e.hint or ''}".strip())
            except Exception as e:  # the dialog must never wait forever
                log.warning("account check failed", exc_info=True)
                self.done.emit(None, f"The check failed: {type(e).__name__}")

        threading.Thread(target=run, daemon=True).start()


class AccountDialog(QDialog):
    """Sign in with a token, see the account, sign out."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Hugging Face account")
        self.setMinimumWidth(480)
        self.who = QLabel("")
        self.who.setObjectName("accountStatus")
        self.who.setWordWrap(True)
        self.who.setTextFormat(Qt.TextFormat.PlainText)
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("hf_… (a read token is enough)")
        self.token.setAccessibleName("Access token")
        self.sign_in_button = QPushButton("Check and sign in")
        self.sign_in_button.setDefault(True)
        self.sign_in_button.clicked.connect(self.sign_in)
        self.sign_out_button = QPushButton("Sign out")
        self.sign_out_button.clicked.connect(self.sign_out)
        row = QHBoxLayout()
        row.addWidget(self.token, 1)
        row.addWidget(self.sign_in_button)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.who)
        about = QLabel(
            "Gated and private models need a token: create one at "
            "huggingface.co/settings/tokens, and accept the model's terms on its page."
        )
        about.setObjectName("accountAbout")
        about.setWordWrap(True)  # one line was cut at the dialog's edge ("…the model'")
        layout.addWidget(about)
        layout.addLayout(row)
        layout.addWidget(self.sign_out_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(close)
        self._call = _Call(self)
        self._call.done.connect(self._on_done)
        self._after: Callable[[Any], str] = str
        self._signing_in = False
        self.refresh()

    def _run(self, busy: str, fn: Callable[[], Any], after: Callable[[Any], str]) -> None:
        self.who.setText(busy)
        self.sign_in_button.setEnabled(False)
        self.sign_out_button.setEnabled(False)
        self._after = after
        self._call.start(fn)

    @Slot(object, object)
    def _on_done(self, result: Any, error: str | None) -> None:
        self.sign_in_button.setEnabled(True)
        self.who.setText(error if error is not None else self._after(result))
        # A refused or failed sign-in keeps the pasted token for another try (a typo, no
        # network yet); a stored one leaves the field.
        if self._signing_in and error is None:
            self.token.clear()
        self._signing_in = False
        self._update()

    def _update(self) -> None:
        from mmforge.backend.credentials import stored_token

        self.sign_out_button.setEnabled(stored_token() is not None)

    @Slot()
    def refresh(self) -> None:
        """Say who the stored token belongs to (asking the hub)."""
        from mmforge.backend.credentials import environment_token, stored_token, whoami

        token = stored_token()
        note = " HF_TOKEN is set and takes precedence over it." if environment_token() else ""
        if token is None:
            self.who.setText("Not signed in." + note)
            self._update()
            return
        self._run(
            "Checking the stored token…",
            lambda: whoami(token),
            lambda name: f"Signed in as {name}.{note}",
        )

    @Slot()
    def sign_in(self) -> None:
        """Check the typed token with the hub; store it when the hub knows it."""
        from mmforge.backend.credentials import sign_in

        token = self.token.text()
        if not token.strip():
            self.who.setText("Paste a token first.")
            return
        self._signing_in = True
        self._run(
            "Checking the token with the hub…",
            lambda: sign_in(token),
            lambda result: f"Signed in as {result[0]}. The token is saved in {result[1]}.",
        )

    @Slot()
    def sign_out(self) -> None:
        """Remove the stored token."""
        from mmforge.backend.credentials import environment_token, sign_out
        from mmforge.backend.errors import MmforgeError

        try:
            sign_out()
        except MmforgeError as e:
            self.who.setText(e.user_message)
            return
        still = " HF_TOKEN is still set in the environment." if environment_token() else ""
        self.who.setText("Signed out: the stored token is removed." + still)
        self._update()
