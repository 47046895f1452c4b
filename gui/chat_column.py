"""The chat page's centre column: the transcript, the draft and the turn buttons.

Only the widgets, laid out; `ChatView` connects them to what they do.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from mmforge.gui.chat_input import AttachmentStrip, ChatInput, StatusLine
from mmforge.gui.chat_settings import ChatSettings
from mmforge.gui.safe_text import plain_label
from mmforge.gui.transcript import Transcript


def input_hint(vision: bool, audio: bool) -> str:
    """The message box's placeholder: what can be attached to this model."""
    what = [w for w, takes in (("a picture", vision), ("a sound clip", audio)) if takes]
    attach = f"; paste or drop {' or '.join(what)} to attach it" if what else ""
    return f"Type a message. Enter sends, Shift+Enter starts a new line{attach}."


class ChatColumn(QWidget):
    """The column's widgets, from the top down.

    The transcript, the status line, the bar that offers to load a saved conversation's
    model, the settings (hidden until asked for), the attachments, the message box, and
    the row of turn buttons.
    """

    def __init__(self, settings: ChatSettings, parent: QWidget | None = None):
        super().__init__(parent)
        self.transcript = Transcript()
        self.transcript.setObjectName("transcript")
        self.transcript.setAccessibleName("Conversation")
        self.status = StatusLine()
        self.status.setObjectName("chatStatus")
        self.continue_note = plain_label(wrap=True)
        self.continue_button = QPushButton("Load its model to continue")
        self.continue_button.setObjectName("continueButton")
        continue_row = QHBoxLayout()
        continue_row.addWidget(self.continue_note, 1)
        continue_row.addWidget(self.continue_button)
        self.continue_bar = QWidget()
        self.continue_bar.setObjectName("continueBar")
        self.continue_bar.setLayout(continue_row)
        self.continue_bar.setVisible(False)
        self.strip = AttachmentStrip()
        self.strip.setVisible(False)
        self.input = ChatInput()
        self.input.setObjectName("chatInput")
        self.input.setAccessibleName("Message")
        self.input.setMaximumHeight(80)
        self.input.setPlaceholderText(input_hint(vision=True, audio=False))
        centre = QVBoxLayout(self)
        centre.setContentsMargins(0, 0, 0, 0)
        centre.addWidget(self.transcript, 1)
        centre.addWidget(self.status)
        centre.addWidget(self.continue_bar)
        centre.addWidget(settings)
        centre.addWidget(self.strip)
        centre.addWidget(self.input)
        centre.addLayout(self._turn_buttons(settings))

    def _turn_buttons(self, settings: ChatSettings) -> QHBoxLayout:
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach an image or audio clip (or paste or drop one)")
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip(
            "Another answer to the last message (varied with the answer settings' "
            "temperature, top-p and top-k, a new random seed each time)"
        )
        self.edit_button = QPushButton("Edit last")
        self.edit_button.setToolTip("Put your last message back in the box to change it")
        self.settings_button = QPushButton("Settings")
        self.settings_button.setCheckable(True)
        self.settings_button.setToolTip(
            "System prompt, answer length, variety, and what happens when the conversation "
            "gets too long"
        )
        self.settings_button.toggled.connect(settings.setVisible)
        buttons = QHBoxLayout()
        for w in (self.attach_button, self.regen_button, self.edit_button, self.settings_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        return buttons
