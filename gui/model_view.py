"""Model page: pick a hub id or a folder, inspect it, see what conversion will make."""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend import precisions
from mmforge.backend.errors import REMOTE_CODE
from mmforge.backend.families.catalog import CONSENT, NOT_YET
from mmforge.backend.inspect import Profile
from mmforge.backend.tiny.demo import is_demo_source
from mmforge.backend.units import a_or_an, human_bytes, human_count
from mmforge.gui import consent
from mmforge.gui.bridge import JobRunner
from mmforge.gui.details import Details
from mmforge.gui.errors import in_app_words, show_error
from mmforge.gui.fit import MEANING, Machine, recommendation, this_machine
from mmforge.gui.safe_text import SHORT, SHORT_LINES, SafeBrowser, for_display, plain_label
from mmforge.gui.state import AppState
from mmforge.gui.theme import Colours, colours

if TYPE_CHECKING:
    from mmforge.gui.model_browser import ModelBrowser


def parts_of(params: dict[str, Any]) -> list[tuple[str, Any]]:
    """Parameter counts per component (the total left out)."""
    return [(k, v) for k, v in params.items() if k != "total"]


TAKES = {"vision_encoder": "pictures", "audio_encoder": "sound"}


def plain_sentence(p: Profile) -> str:
    """What this model is and takes, in one sentence a non-developer reads."""
    takes = [TAKES[c] for c in p.components if c in TAKES]
    inputs = " and ".join(["text", *takes])
    total = p.sizes.parameters.get("total")
    size = f" with {human_count(int(total))} parameters" if total else ""
    weights = human_bytes(p.sizes.checkpoint_bytes)
    local = bool(p.source) and Path(p.source).expanduser().is_dir()
    download = (
        (f"; its files take {weights}" if local else f"; the download is {weights}")
        if p.sizes.checkpoint_bytes
        else ""
    )
    if not p.convertible:
        return f"{p.family}{size} reads {inputs}, but this app cannot run it{download}."
    model = a_or_an(f"{p.family} chat model")
    return f"{model[0].upper()}{model[1:]}{size}: it reads {inputs} and answers in text{download}."


def profile_html(p: Profile, c: Colours, machine: Machine | None = None) -> str:
    """The inspection card: the plain sentence, what fits this machine, the sizes."""
    esc = html.escape
    parts = [f"<h2>{esc(p.family)}</h2><p style='font-size:large'>{esc(plain_sentence(p))}</p>"]
    if not p.convertible:
        # Said as what this app can do with it: not built yet (a runtime pipeline could
        # run it exactly), or cannot convert (the runtime code that rules it out).
        title = "Not converted yet" if p.converts == NOT_YET else "Cannot convert"
        why = p.runtime_reason if not p.runnable else (p.converts_reason or p.runtime_reason)
        parts.append(f"<p style='color:{c.bad}'><b>{title}:</b> {esc(str(why))}</p>")
    if p.converts == CONSENT:
        parts.append(
            f"<p style='color:{c.warn}'><b>Converts with your consent:</b> "
            f"{esc(p.converts_reason)}</p>"
        )
    sizes = p.sizes
    if machine is not None and p.convertible:
        advice = recommendation(sizes, machine)
        if advice:
            parts.append(f"<p><b>On this computer:</b> {esc(advice)}</p>")
    if sizes.package_bytes:
        table = "<table cellspacing='0' cellpadding='3'>"
        rows = "".join(
            f"<tr><td>{d}</td><td align='right'>{human_bytes(sizes.package_bytes[d])}</td>"
            f"<td align='right'>{human_bytes(sizes.memory_bytes.get(d, 0))}</td>"
            f"<td>{esc(MEANING[d])}</td></tr>"
            for d in precisions.DTYPES
            if d in sizes.package_bytes
        )
        parts.append(
            f"{table}<tr><th align='left'>precision</th><th align='right'>package</th>"
            f"<th align='right'>memory to run</th><th align='left'>what it means</th></tr>"
            f"{rows}</table>"
        )
    if p.remote_code:
        parts.append(f"<p style='color:{c.warn}'>Needs remote code.</p>")
    parts += [f"<p style='color:{c.warn}'>⚠ {esc(w)}</p>" for w in p.warnings]
    return "".join(parts)


def details_html(p: Profile, c: Colours) -> str:
    """The technical card: type, pipeline, components, projector, token ids, notes."""
    esc = html.escape
    parts = [f"<p><b>{esc(p.model_type)}</b>, weights in {esc(p.dtype)}</p>"]
    if p.runnable:
        parts.append(f"<p>Runs in ONNX Runtime GenAI as <b>{esc(str(p.pipeline_type))}</b>.</p>")
    boxes = "".join(
        f"<td bgcolor='{c.chip}' style='border:1px solid {c.chip_border};padding:6px 10px'>"
        f"{esc(component)}</td><td>&nbsp;→&nbsp;</td>"
        for component in p.components
    )
    parts.append(f"<table><tr>{boxes[: -len('<td>&nbsp;→&nbsp;</td>')]}</tr></table>")
    proj = p.projector
    parts.append(
        f"<p><b>Projector:</b> {esc(proj.variant)}: {esc(proj.architecture)}"
        f"<br><i>{esc(proj.reason)}</i></p>"
    )
    parts += [f"<p>{esc(line)}</p>" for line in p.architecture]
    rows = "".join(
        f"<tr><td>{esc(k)}</td><td>{esc(str(v))}</td>"
        f"<td>{esc(str(p.token_strings.get(k, '')))}</td></tr>"
        for k, v in p.token_ids.items()
    )
    table = "<table cellspacing='0' cellpadding='3'>"
    parts.append(f"<p><b>Token ids</b></p>{table}{rows}</table>")
    params = p.sizes.parameters
    if params:
        active = p.sizes.active_parameters
        per_token = f", {human_count(active)} active per token" if active is not None else ""
        parts.append(
            f"<p><b>Parameters:</b> {human_count(int(params.get('total', 0)))} "
            f"({', '.join(f'{k} {human_count(int(v))}' for k, v in parts_of(params))})"
            f"{per_token}</p>"
        )
    parts += [f"<p style='color:{c.muted}'>{esc(n)}</p>" for n in p.notes]
    return "".join(parts)


def source_name(source: str) -> str:
    """A model source as a person reads it: a hub id as it is, a folder by its name."""
    from mmforge.backend.tiny.demo import is_demo_source

    if is_demo_source(source):
        return f"{Path(source).name} (built-in)"
    path = Path(source)
    if source.startswith(("/", "~", ".")) or "\\" in source or path.is_absolute():
        return f"{path.name or source} (folder)"
    return source


class ModelView(QWidget):
    """Pick and inspect a model.

    Signals:
        convert_requested(): the user wants to go on to Convert.
    """

    convert_requested = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self._profile: Profile | None = None
        self.runner = JobRunner(self)
        self.source = QLineEdit(
            placeholderText="A model on the Hugging Face hub (Qwen/Qwen2.5-VL-3B-Instruct) "
            "or a folder on this computer"
        )
        self.source.setObjectName("sourceEdit")
        self.source.setAccessibleName("Model: hub id or folder")
        self.source.returnPressed.connect(self.inspect)
        self.source.textEdited.connect(self._source_edited)
        browse = QPushButton("Folder…")
        browse.clicked.connect(self.browse)
        self.find_button = QPushButton("Find a model…")
        self.find_button.setObjectName("findModelButton")
        self.find_button.setToolTip("Search the Hugging Face hub, or pick a known good model")
        self.find_button.clicked.connect(self.find_model)
        self.inspect_button = QPushButton("Inspect")
        self.inspect_button.setObjectName("inspectButton")
        self.inspect_button.clicked.connect(self.inspect)
        self.demo_button = QPushButton("Use the demo model")
        self.demo_button.setToolTip("A tiny random-weight Qwen2.5-VL built offline: pictures")
        self.demo_button.clicked.connect(lambda: self.use_demo("pictures"))
        self.demo_sound_button = QPushButton("Demo with sound")
        self.demo_sound_button.setObjectName("demoSoundButton")
        self.demo_sound_button.setToolTip(
            "A tiny random-weight Gemma 4 built offline: pictures and sound clips"
        )
        self.demo_sound_button.clicked.connect(lambda: self.use_demo("sound"))
        token = QPushButton("Hugging Face account…")
        token.setToolTip("Sign in with a token for gated and private models")
        token.clicked.connect(self.account)
        row = QHBoxLayout()
        for w in (self.source, self.find_button, browse, self.inspect_button):
            row.addWidget(w)
        self.known = QListWidget()
        self.known.setAccessibleName("Recent and cached models")
        self.known.setMaximumWidth(320)
        # Names, not paths cut off under a sideways scroll bar; the path in the tooltip.
        self.known.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.known.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # One click picks, as in any list of choices (a double click did, a click nothing).
        self.known.itemClicked.connect(self._pick_known)
        self.known.itemActivated.connect(self._pick_known)  # Enter
        self.card = SafeBrowser()
        self.card.setAccessibleName("What the model is")
        self.card.setObjectName("profileCard")
        self.card.setHtml(
            "<p>Pick a model: type a hub id, search with <b>Find a model…</b>, choose a "
            "folder, or start with the demo model. "
            "<b>Inspect</b> shows what it is and what conversion will make, before any "
            "download of weights.</p>"
        )
        # The technical card (projector, token ids, runtime notes), one click away.
        self.details_card = SafeBrowser()
        self.details_card.setAccessibleName("Technical details of the model")
        self.details_card.setMinimumHeight(160)
        self.details = Details(self.details_card)
        self.details.setVisible(False)
        self._machine: Machine | None = None
        self._inspecting = ""  # the source being inspected while the card shows another
        self._typed = ""  # another model typed over the card, not yet inspected
        self.status = plain_label()
        self.status.setObjectName("modelStatus")
        self.progress = QProgressBar()
        self.progress.setObjectName("inspectProgress")
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(240)
        self.progress.setVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.next_button = QPushButton("Convert →")
        self.next_button.setEnabled(False)
        self.next_button.clicked.connect(self.convert_requested)
        side = QVBoxLayout()
        side.addWidget(QLabel("Recent and cached models"))
        side.addWidget(self.known)
        side.addWidget(self.demo_button)
        side.addWidget(self.demo_sound_button)
        side.addWidget(token)
        body = QHBoxLayout()
        body.addLayout(side)
        column = QVBoxLayout()
        column.addWidget(self.card, 2)
        column.addWidget(self.details, 1)
        body.addLayout(column, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status, 1)
        bottom.addWidget(self.progress)
        bottom.addWidget(self.cancel_button)
        bottom.addWidget(self.next_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addLayout(body, 1)
        layout.addLayout(bottom)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        self._pending = ""
        self.browser: ModelBrowser | None = None  # the model browser last opened
        # Reading the Hugging Face cache imports huggingface_hub: after the window is up.
        QTimer.singleShot(0, self.refresh_known)
        self.restore_last()

    def refresh_known(self) -> None:
        """Fill the list with recent sources and the models in the HF cache."""
        from mmforge.backend.library import cached_models

        self.known.clear()
        cached = {m.repo_id: m for m in cached_models()}
        seen = set()
        for source in [*self.state.recent_sources(), *cached]:
            if source in seen:
                continue
            seen.add(source)
            item = QListWidgetItem(source_name(source))
            item.setData(Qt.ItemDataRole.UserRole, source)
            item.setToolTip(source)
            model = cached.get(source)
            if model is not None:
                used = time.strftime("%Y-%m-%d", time.localtime(model.last_used))
                item.setToolTip(
                    f"{source}\nDownloaded: {human_bytes(model.size_bytes)}, last used {used}"
                )
            self.known.addItem(item)

    def restore_last(self) -> None:
        """After a restart: the last model read, in the field, one Inspect away."""
        recent = self.state.recent_sources()
        if recent and not self.source.text() and self._profile is None:
            self.source.setText(recent[0])
            self.status.setText(
                f"Last time: {source_name(recent[0])}. Press Inspect to read it again."
            )

    @Slot(QListWidgetItem)
    def _pick_known(self, item: QListWidgetItem) -> None:
        self.source.setText(str(item.data(Qt.ItemDataRole.UserRole) or item.text()))
        self.inspect()

    @Slot()
    def browse(self) -> None:
        """Choose a local checkpoint folder."""
        folder = QFileDialog.getExistingDirectory(self, "Model folder")
        if folder:
            self.source.setText(folder)

    @Slot()
    def find_model(self, not_found: str | None = None) -> ModelBrowser:
        """Open the model browser (search the hub, the known good models).

        Args:
            not_found: A hub id Inspect did not find: the browser offers near names.
        """
        from mmforge.gui.model_browser import ModelBrowser

        browser = ModelBrowser(self, not_found=not_found or None)
        browser.chosen.connect(self._use_found)
        browser.sign_in_requested.connect(self.account)
        browser.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.browser = browser
        browser.open()
        return browser

    @Slot(str)
    def _use_found(self, repo_id: str) -> None:
        """A model picked in the browser: the choice now (Convert waits for it), read at once."""
        self.source.setText(repo_id)
        self._source_edited(repo_id)  # as if typed: the card before it is no longer the choice
        if self.runner.running:  # the demo or another model still being read
            self.status.setText(f"Press Inspect to read {repo_id} when this ends.")
        self.inspect()  # as a click in the list does (nothing while the runner is busy)

    @Slot()
    def account(self) -> None:
        """Sign in to the hub (for gated models), see who is signed in, sign out."""
        from mmforge.gui.account_dialog import AccountDialog

        AccountDialog(self).exec()

    def use_demo(self, kind: str = "pictures") -> None:
        """Build (once) an offline demo checkpoint ("pictures" or "sound"), then inspect it."""
        if self.runner.running:
            return
        self._pending = "demo"
        self.status.setText("Building the demo model (offline, a few seconds)…")
        self._busy(True)
        self.runner.start("demo", {"kind": kind})

    @Slot()
    def inspect(self) -> None:
        """Inspect the source in a worker."""
        source = self.source.text().strip()
        if not source or self.runner.running:
            return
        self._pending = "inspect"
        self.status.setText(f"Inspecting {source}…")
        # The card is the previous model's until this one is read: no Convert → to it.
        self._inspecting, self._typed = source, ""
        self.next_button.setEnabled(False)
        self._draw_card()
        self._busy(True)
        consents = self.state.consents(source)
        self.runner.start(
            "inspect", {"source": source, "trust_remote_code": consents["trust_remote_code"]}
        )

    def _busy(self, busy: bool) -> None:
        self.inspect_button.setEnabled(not busy)
        self.demo_button.setEnabled(not busy)
        self.demo_sound_button.setEnabled(not busy)
        self.cancel_button.setVisible(busy)
        self.progress.setVisible(busy)
        self.progress.setRange(0, 0)  # moving until a step says how far it is

    @Slot(object)
    def _on_progress(self, p: Any) -> None:
        """The step in hand, and how far it is where it knows (metadata downloads)."""
        if p.total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(1.0, p.done / p.total)))
        else:
            self.progress.setRange(0, 0)
        what = {
            "download": "Downloading",
            "inspect": "Reading the model",
            "demo": "Building the demo model",
        }.get(p.stage, p.stage[:1].upper() + p.stage[1:])
        amount = (
            f" {human_bytes(int(p.done))} of {human_bytes(int(p.total))}"
            if (p.unit == "bytes" and p.total)
            else ""
        )
        text = f"{what}{amount}: {p.message}" if p.message else what + amount
        self.status.setText(for_display(text, 500))

    @Slot()
    def _on_cancelled(self) -> None:
        self._pending = ""
        self.status.setText("Cancelled.")
        self._inspecting = ""  # the card is the model that was inspected before
        self.next_button.setEnabled(self._profile is not None and self._profile.convertible)
        self._draw_card()

    @Slot(object)
    def _on_result(self, value: Any) -> None:
        if self._pending == "demo":
            self.source.setText(str(value["folder"]))
            self._pending = "inspect-next"
            return
        profile: Profile = value
        # Only a source that resolved goes into Recent (and on to Convert and Verify).
        self.state.set_source(self.source.text().strip())
        self.state.set_profile(profile)
        # The card is the field's model again: a choice typed or picked over it, and not
        # read, is gone (the same source read again clears nothing in the selection).
        self.state.selection.set_typed("")
        self._profile = profile
        self._inspecting, self._typed = "", ""
        self._machine = this_machine(self.state.packages_folder())
        self._draw_card()
        self.next_button.setEnabled(profile.convertible)
        said = "not converted yet" if profile.converts == NOT_YET else "cannot convert"
        self.status.setText("Inspected." if profile.convertible else f"Inspected: {said}.")
        self.refresh_known()

    @Slot(str)
    def _source_edited(self, text: str) -> None:
        """Another model typed over the card: Convert → must not take the card's model."""
        typed = text.strip()
        stale = self._profile is not None and typed != self.state.source
        self._typed = typed if stale else ""
        self.state.selection.set_typed(self._typed)  # Convert waits for it too
        if self._profile is not None and not self._inspecting:
            self.next_button.setEnabled(not stale and self._profile.convertible)
            self._draw_card()

    def _draw_card(self) -> None:
        profile = self._profile
        if profile is None:
            return
        c = colours(self.palette())
        card = profile_html(profile, c, self._machine)
        self.details_card.setHtml(details_html(profile, c))
        self.details.setVisible(True)
        if is_demo_source(profile.source):
            card = (
                f"<table width='100%' cellpadding='8'><tr><td bgcolor='{c.note}'>"
                "<b>The built-in demo model.</b> "
                f"A tiny {html.escape(profile.family)} with random weights, built offline: "
                "it talks nonsense by design, while its conversion, parity and chat are real "
                "and exact."
                "</td></tr></table>" + card
            )
        if self._typed and not self._inspecting:
            card = (
                f"<table width='100%' cellpadding='8'><tr><td bgcolor='{c.note}'>"
                f"<b>You typed {html.escape(self._typed)}.</b> Press <b>Inspect</b> to read "
                "it. Below is the model inspected before; Convert → waits for the new one."
                "</td></tr></table>" + card
            )
        if self._inspecting:
            card = (
                f"<table width='100%' cellpadding='8'><tr><td bgcolor='{c.note}'>"
                f"<b>Reading {html.escape(self._inspecting)}…</b> Below is the model "
                "inspected before; Convert → waits for this one.</td></tr></table>" + card
            )
        self.card.setHtml(card)

    def changeEvent(self, event: QEvent) -> None:
        """Redraw the card in the new colours when the palette changes."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._draw_card()

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        inspecting = self._pending in ("inspect", "inspect-next")
        message = in_app_words(str(error.get("message") or ""))
        # Said once in full (the card, or the dialog's own words); the status line only
        # says what happened: the same sentence three times read as three errors.
        self.status.setText(
            "Could not read that model." if inspecting else for_display(message, 500)
        )
        if inspecting:
            # The card must not go on showing (and converting) the model before this one.
            self._profile, self._inspecting = None, ""
            self.next_button.setEnabled(False)
            self.details.setVisible(False)
            hint = in_app_words(str(error.get("hint") or "")) or (
                "Check the name or folder and press Inspect again"
            )
            self.card.setHtml(
                f"<p>Could not read that model: {html.escape(for_display(message, 500))}</p>"
                f"<p>{html.escape(for_display(hint, 500))}.</p>"
            )
        kind = error.get("kind")
        if kind == "hub_not_found" and self._pending in ("inspect", "inspect-next"):
            # A typo or a private model: near names from the hub, and the sign-in.
            self.status.setText("Not found on the hub: see the names offered.")
            self.find_model(not_found=self.source.text().strip())
        elif kind == "hub_auth":
            self._offer_sign_in(str(error.get("message") or ""))
        elif kind == REMOTE_CODE and self._pending in ("inspect", "inspect-next"):
            source = self.source.text().strip()
            if consent.ask(self, REMOTE_CODE, str(error.get("message") or "")):
                self.state.consent(REMOTE_CODE, source)
                QTimer.singleShot(0, self.inspect)  # once this job's runner is free
        else:
            show_error(self, error)

    def _offer_sign_in(self, message: str) -> None:
        """A gated model: the app's own sign-in, not a terminal command."""
        box = QMessageBox(self)
        box.setObjectName("signInNeeded")
        box.setIcon(QMessageBox.Icon.Information)
        box.setWindowTitle("Sign in needed")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(for_display(message or "The hub refused access", SHORT, SHORT_LINES))
        box.setInformativeText(
            "Accept the model's terms on its page on huggingface.co, then sign in here with "
            "a token of the same account and press Inspect again."
        )
        sign_in = box.addButton("Sign in…", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Close)
        sign_in.clicked.connect(self.account)
        box.open()

    @Slot()
    def _on_finished(self) -> None:
        self._busy(False)
        if self._pending == "inspect-next":
            self.inspect()
