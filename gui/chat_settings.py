"""The chat page's settings: system prompt, answer length, how tokens are picked, a full context."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from mmforge.backend.chat.values import (
    CONTEXT_CARRY,
    CONTEXT_DROP,
    CONTEXT_STOP,
    CONTEXT_SUMMARY,
)
from mmforge.gui.state import AppState

# A large answer cap: answers end on their own long before it, and the runtime stops at the
# context anyway. (256, the old default, cut real answers mid-sentence.)
ANSWER_CAP = 4096
MODEL_PENALTY = 0.95  # the repeat penalty box's "model's default" step
TOOLTIP = Qt.ItemDataRole.ToolTipRole
# Short enough to read whole in the closed box on a 1024 px screen (a longer one was cut
# to "(marked in the conversation"); each choice's tooltip says the rest.
CONTEXT_CHOICES = (
    (
        CONTEXT_DROP,
        "Drop the oldest turns",
        "The model stops reading the oldest turns; a line in the conversation marks where. "
        "They stay saved.",
    ),
    (CONTEXT_STOP, "Stop and say so", "Start a new conversation to go on."),
    (
        CONTEXT_CARRY,
        "New conversation, latest turns",
        "Go on in a new conversation that starts with the latest turns.",
    ),
    (
        CONTEXT_SUMMARY,
        "New conversation, summary",
        "Go on in a new conversation that starts with a summary the model writes.",
    ),
)


def _sampling_words(box: ChatSettings) -> tuple[tuple[str, QWidget, str], ...]:
    """Each varied-answer setting: its label (chat apps' name), its box, what it does."""
    return (
        (
            "Temperature",
            box.temperature,
            "How adventurous the word choice is: low keeps to the likeliest words, high "
            "gives more surprising (and more often wrong) answers.",
        ),
        (
            "Top P",
            box.top_p,
            "Choose only among the likeliest next words that together make up this share "
            "of the chances: 1.0 keeps them all, 0.9 leaves out the unlikely tenth.",
        ),
        (
            "Top K",
            box.top_k,
            "Consider only this many of the most likely next words.",
        ),
        (
            "Seed",
            box.seed,
            "The same number with the same settings and message gives the same answer "
            'again; "random" gives a new one each time.',
        ),
    )


class ChatSettings(QGroupBox):
    """What the next answer is made with, remembered between runs.

    The system prompt is the open conversation's own (saved with it).
    """

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__("Answer settings", parent)
        self.state = state
        self.setObjectName("chatSettings")
        self.system = QPlainTextEdit()
        self.system.setObjectName("systemPrompt")
        self.system.setAccessibleName("System prompt")
        self.system.setPlaceholderText(
            "Optional: instructions the model reads before the conversation (this "
            "conversation's own; saved with it)"
        )
        self.system.setTabChangesFocus(True)
        self.system.setMaximumHeight(64)
        self.max_tokens = QSpinBox(minimum=1, maximum=32768)
        # A new key: profiles that saved the old 256 on every send get the new cap.
        self.max_tokens.setValue(self.state.number("chat/answer_cap", ANSWER_CAP))
        self.max_tokens.setAccessibleName("Longest answer")
        self.max_tokens.setToolTip(
            "The most word pieces (tokens) one answer may have; answers usually end on "
            "their own well before it"
        )
        self.max_tokens.setMaximumWidth(120)
        self.context_full = QComboBox()
        self.context_full.setObjectName("contextFull")
        self.context_full.setAccessibleName("When the conversation gets too long")
        for value, text, tip in CONTEXT_CHOICES:
            self.context_full.addItem(text, value)
            self.context_full.setItemData(self.context_full.count() - 1, tip, TOOLTIP)
        self.context_full.setToolTip(
            "What happens when the conversation no longer fits in what the model can read "
            "at once (its context). Nothing is deleted: every turn stays saved."
        )
        # As wide as the page allows, not as its longest choice (the list shows it whole).
        self.context_full.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.context_full.setMinimumContentsLength(20)
        chosen = self.state.text("chat/context_full", CONTEXT_DROP)
        self.context_full.setCurrentIndex(max(0, self.context_full.findData(chosen)))
        self.sample = QCheckBox("Vary the answers (otherwise the most likely words, every time)")
        self.sample.setChecked(self.state.text("chat/sample", "false") == "true")
        self.temperature = QDoubleSpinBox(minimum=0.05, maximum=2.0, singleStep=0.05)
        self.temperature.setValue(self.state.number("chat/temperature", 0.7))
        self.top_p = QDoubleSpinBox(minimum=0.05, maximum=1.0, singleStep=0.05)
        self.top_p.setValue(self.state.number("chat/top_p", 0.95))
        self.top_k = QSpinBox(minimum=1, maximum=1000)
        self.top_k.setValue(self.state.number("chat/top_k", 50))
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(self.state.number("chat/seed", -1))
        # Greedy or sampled alike: not one of the sampling settings.
        # Its lowest step is "the model's default" (the package's generation_config, as
        # transformers uses it); 1.00 turns a default penalty off.
        self.repeat_penalty = QDoubleSpinBox(
            minimum=MODEL_PENALTY, maximum=2.0, singleStep=0.05, decimals=2
        )
        self.repeat_penalty.setSpecialValueText("model's default")
        self.repeat_penalty.setObjectName("repeatPenalty")
        self.repeat_penalty.setAccessibleName("Repeat penalty")
        self.repeat_penalty.setToolTip(
            "Above 1.00, words already in the conversation become less likely: a model that "
            'repeats itself repeats less. 1.00 turns it off; "model\'s default" uses the '
            "model's own setting."
        )
        self.repeat_penalty.setValue(self.state.number("chat/repeat_penalty", MODEL_PENALTY))
        self.repeat_penalty.setMaximumWidth(120)
        # Two pairs a row: four in one row made the page wider than a 1024 px screen.
        sampling = QGridLayout()
        for i, (label, widget, tip) in enumerate(_sampling_words(self)):
            # The names chat apps use on the page; what each does in its tooltip.
            widget.setAccessibleName(label)
            widget.setToolTip(tip)
            shown = QLabel(label)
            shown.setBuddy(widget)
            shown.setToolTip(tip)
            sampling.addWidget(shown, i // 2, (i % 2) * 2)
            sampling.addWidget(widget, i // 2, (i % 2) * 2 + 1)
        sampling.setColumnStretch(4, 1)
        self.sample.toggled.connect(self._sampling_changed)
        self._sampling_widgets = (self.temperature, self.top_p, self.top_k, self.seed)
        self._sampling_changed(self.sample.isChecked())
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.addRow("System prompt", self.system)
        form.addRow("Longest answer (tokens)", self.max_tokens)
        form.addRow("When the conversation is too long", self.context_full)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow(self.sample)
        form.addRow("", sampling)

    @Slot(bool)
    def _sampling_changed(self, on: bool) -> None:
        for widget in self._sampling_widgets:
            widget.setEnabled(on)

    def options(self) -> dict[str, Any]:
        """The generation options the settings say (remembered for the next run)."""
        saved = self.state.settings
        values = {
            "sample": "true" if self.sample.isChecked() else "false",
            "temperature": self.temperature.value(),
            "top_p": self.top_p.value(),
            "top_k": self.top_k.value(),
            "seed": self.seed.value(),
            "answer_cap": self.max_tokens.value(),
            "context_full": str(self.context_full.currentData()),
            "repeat_penalty": self.repeat_penalty.value(),
        }
        for key, value in values.items():
            saved.setValue(f"chat/{key}", value)
        options: dict[str, Any] = {
            "max_new_tokens": self.max_tokens.value(),
            "context_full": str(self.context_full.currentData()),
        }
        if self.repeat_penalty.value() > MODEL_PENALTY + 0.001:
            options["repetition_penalty"] = round(self.repeat_penalty.value(), 2)
        if self.sample.isChecked():
            options.update(
                do_sample=True,
                temperature=self.temperature.value(),
                top_p=self.top_p.value(),
                top_k=self.top_k.value(),
                seed=None if self.seed.value() < 0 else self.seed.value(),
            )
        return options

    def another_answer(self) -> dict[str, Any]:
        """Regenerate's options: another answer, as chat apps give one.

        Sampled with the settings' temperature, top-p and top-k and a new random seed,
        whether or not "Vary the answers" is on: the most likely words again would repeat
        the last answer token for token.
        """
        options = self.options()
        options.update(
            do_sample=True,
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            seed=None,
        )
        return options
