"""The desktop app driven offscreen through its real flow; every job in a worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from tests.gui.chatting import LONG, answered, idle, settled, typed_in


def _pictures(chat):
    """The images drawn in the chat transcript (as the browser loaded them)."""
    from PySide6.QtGui import QTextDocument

    document = chat.transcript.document()
    found = []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                name = fmt.toImageFormat().name()
                found.append(document.resource(QTextDocument.ResourceType.ImageResource, name))
            it += 1
        block = block.next()
    return [image for image in found if image is not None and not image.isNull()]


def _dialogs(win):
    return [w for w in win.findChildren(QMessageBox) if w.objectName() == "errorDialog"]


def test_inspect_convert_cancel_verify_and_chat(qtbot, window, tiny, tmp_path, monkeypatch):
    model, convert, verify, chat = (
        window.model_view,
        window.convert_view,
        window.verify_view,
        window.chat_view,
    )
    # Model: inspect the tiny checkpoint; the card shows the family.
    model.source.setText(str(tiny("qwen2_5_vl")))
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    assert "Qwen2.5-VL" in model.card.toPlainText() and model.next_button.isEnabled()

    # Convert: a package, its manifest and the weight table.
    model.next_button.click()
    out = tmp_path / "pkg"
    convert.output.setText(str(out))
    # (finished comes after the result; the buttons come back with it)
    with qtbot.waitSignals([window.state.package_changed, convert.runner.finished], timeout=LONG):
        convert.convert_button.click()
    assert (out / "genai_config.json").is_file()
    assert "A Qwen2.5-VL package at f32" in convert.summary.text()
    assert convert.weights.rowCount() > 10
    assert convert.open_button.isEnabled() and convert.chat_button.isEnabled()
    convert.filter.setCurrentText("missing")
    assert convert.weights.rowCount() == 0

    # A second conversion cancelled mid-way leaves no package.
    second = tmp_path / "second"
    convert.output.setText(str(second))
    with qtbot.waitSignal(convert.runner.progress, timeout=LONG):
        convert.convert_button.click()
    with qtbot.waitSignals([convert.runner.cancelled, convert.runner.finished], timeout=LONG):
        convert.cancel_button.click()
    assert not second.exists() and "Cancelled" in convert.stage.text()
    assert convert.convert_button.isEnabled()

    # Verify: PASS with a badge for every stage.
    convert.next_button.click()
    assert verify.package.text() == str(out)
    with qtbot.waitSignal(verify.runner.succeeded, timeout=LONG):
        verify.run_button.click()
    assert "PASS" in verify.verdict.text() and verify.table.rowCount() >= 7
    assert {verify.table.item(i, 1).text() for i in range(verify.table.rowCount())} == {"PASS"}

    # Chat: the package is in the library; load, send with an image; text streams in.
    verify.next_button.click()
    library = [chat.library.itemData(i) for i in range(chat.library.count())]
    assert str(out) in library
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.load_button.click()
    chat.strip.add(resources.probe_image(), IMAGE)
    chat.input.setPlainText("What is in this picture?")
    chat.max_tokens.setValue(12)
    with (
        qtbot.waitSignal(chat.bridge.turn, timeout=LONG) as turn,
        qtbot.waitSignal(chat.bridge.token, timeout=LONG),
        qtbot.waitSignal(chat.bridge.busy, timeout=LONG, check_params_cb=idle),
    ):
        chat.send_button.click()
    assert turn.args[0].stats.new_tokens == 12
    assert "tokens/s" in chat.transcript.toPlainText()
    # The sent picture is drawn in the transcript, from a scaled copy.
    [picture] = _pictures(chat)
    assert 0 < max(picture.width(), picture.height()) <= 200
    assert chat.conversations.count() == 1
    # The open conversation is the highlighted one; it exports as Markdown and JSON.
    current = chat.conversations.currentItem()
    assert current is not None and current.data(Qt.ItemDataRole.UserRole) == chat.conversation.id
    chat.export_to(tmp_path / "chat.md", as_json=False)
    markdown = (tmp_path / "chat.md").read_text()
    # The picture is copied beside the Markdown and drawn from there, not named.
    assert "**You:**" in markdown and "**Model:**" in markdown
    assert "![probe.png](chat_files/1-probe.png)" in markdown
    with (
        Image.open(tmp_path / "chat_files" / "1-probe.png") as copied,
        Image.open(resources.probe_image()) as original,
    ):  # the picture sent: transformers' pixels, at the model's size
        assert copied.size == (168, 112) and original.size == (160, 120)
    chat.export_to(tmp_path / "chat.json", as_json=True)
    exported = json.loads((tmp_path / "chat.json").read_text())
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]

    # Stop: a long answer ends early, marked stopped. (A fresh conversation: the greedy
    # answer to this prompt never reaches EOS within 3,000 tokens, so Stop lands first
    # however fast the worker runs; "Tell me everything." ended at 417 and lost the race
    # once.)
    with settled(qtbot, chat):
        chat.bridge.new_conversation()
    chat.max_tokens.setValue(3000)
    chat.input.setPlainText("Describe the world in detail.")
    with answered(qtbot, chat) as turn:
        with qtbot.waitSignal(chat.bridge.token, timeout=LONG):
            chat.send_button.click()
        chat.stop_button.click()
    assert turn.args[0].stop_reason == "stopped" and turn.args[0].stats.new_tokens < 3000

    # Delete: the worker, which writes the store, removes the conversation; the list follows.
    listed = lambda: [  # noqa: E731
        chat.conversations.item(i).data(Qt.ItemDataRole.UserRole)
        for i in range(chat.conversations.count())
    ]
    assert len(listed()) == 2
    # Arrows in the list open the conversation they reach (the worker continues it).
    chat.conversations.setFocus()
    with settled(qtbot, chat, timeout=20_000):
        qtbot.keyClick(chat.conversations, Qt.Key.Key_Down)
    gone = chat.conversations.currentItem().data(Qt.ItemDataRole.UserRole)
    assert chat.conversation.id == gone
    asked = []

    def answer(choice):
        def question(*args, **kwargs):
            asked.append(args[2])
            return choice

        return question

    # Delete asks first: Cancel keeps it, Yes deletes it.
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Cancel))
    chat.conversation_list.delete_button.click()
    assert len(listed()) == 2 and "cannot be undone" in asked[-1]
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Yes))
    with settled(qtbot, chat):
        chat.conversation_list.delete_button.click()
    # The one shown was deleted: a new, empty one is open in its place.
    assert gone not in listed() and len(chat.store.list()) == 1
    assert chat.conversation_list.current_title() == "New conversation"
    assert not _dialogs(window)


def test_convert_offers_only_the_precisions_the_family_converts_to(qtbot, window, tiny):
    model, convert = window.model_view, window.convert_view
    items = lambda: [convert.dtype.itemText(i) for i in range(convert.dtype.count())]  # noqa: E731
    convert.dtype.setCurrentText("f16")
    model.source.setText(str(tiny("lfm2_vl")))
    # (finished comes after the profile; the Inspect button comes back with it)
    with qtbot.waitSignals([window.state.profile_changed, model.runner.finished], timeout=LONG):
        model.inspect_button.click()
    assert "LFM2-VL" in model.card.toPlainText()
    assert items() == ["f32", "int4"] and convert.dtype.currentText() == "f32"
    model.source.setText(str(tiny("qwen2_5_vl")))
    with qtbot.waitSignals([window.state.profile_changed, model.runner.finished], timeout=LONG):
        model.inspect_button.click()
    assert items() == ["f32", "f16", "int4", "int8"]


def test_a_corrupt_image_gets_a_dialog_and_the_draft_is_kept(qtbot, window, package, tmp_path):
    chat = window.chat_view
    chat.package.setText(str(package("qwen2_5_vl")))
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.load_button.click()
    fake = tmp_path / "photo.png"
    fake.write_text("this is not an image")
    chat.strip.add(fake, IMAGE)
    chat.input.setPlainText("Look at this.")
    with qtbot.waitSignal(chat.bridge.failed, timeout=LONG) as failed:
        chat.send_button.click()
    assert "not an image file" in failed.args[0]["message"]
    qtbot.waitUntil(lambda: bool(_dialogs(window)), timeout=5000)
    dialog = _dialogs(window)[0]
    assert "not an image file" in dialog.text() and dialog.informativeText()
    assert chat.input.toPlainText() == "Look at this." and chat.strip.files == [(fake, IMAGE)]
    assert "Look at this" not in chat.transcript.toPlainText()


def test_the_gui_process_imports_no_heavy_library(tmp_path):
    code = (
        "import sys, os\n"
        "os.environ['QT_QPA_PLATFORM'] = 'offscreen'\n"
        "from PySide6.QtCore import QSettings\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from mmforge.gui.main_window import MainWindow\n"
        f"w = MainWindow(QSettings({str(tmp_path / 's.ini')!r}, QSettings.Format.IniFormat))\n"
        "w.show(); app.processEvents()\n"
        "heavy = ['torch', 'transformers', 'onnxruntime_genai', 'onnxruntime', 'mobius']\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "w.close()\n"
    )
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_self_test_drives_the_demo_flow(tmp_path):
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "HF_HUB_OFFLINE": "1",
        "QT_QPA_PLATFORM": "offscreen",
    }
    script = Path(sys.executable).with_name("mmforge")
    proc = subprocess.run(
        [str(script), "gui", "--self-test"], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "verify PASS" in proc.stderr and "all steps passed" in proc.stderr


def test_about_shows_the_version_and_the_licences(qtbot):
    from mmforge.backend import __version__
    from mmforge.gui.about_dialog import AboutDialog

    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    text = dialog.findChild(type(dialog.licences)).toPlainText()
    labels = " ".join(
        w.text() for w in dialog.findChildren(type(dialog.layout().itemAt(0).widget()))
    )
    assert f"Multimodal Forge {__version__}" in labels
    assert "mmforge-gui.log" in labels  # where a windowed app's errors can be read
    assert "LGPL-3.0" in text and "DejaVu" in text


def test_a_pasted_image_is_attached(qtbot, window):
    from PySide6.QtCore import QMimeData
    from PySide6.QtGui import QColor, QImage

    chat = window.chat_view
    image = QImage(32, 24, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    mime = QMimeData()
    mime.setImageData(image)
    chat.input.insertFromMimeData(mime)
    [(path, kind)] = chat.strip.files
    assert kind == IMAGE and path.suffix == ".png" and QImage(str(path)).width() == 32
    assert not _dialogs(window)


def test_attachments_a_model_cannot_take_are_refused_when_dropped(qtbot, window, package):
    chat = window.chat_view
    chat.package.setText(str(package("qwen2_5_vl")))  # images, no audio
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.load_button.click()
    chat.input.setPlainText("Listen to this.")
    chat.input.files_added.emit([str(resources.probe_audio()), str(resources.probe_image())])
    assert chat.strip.files == [(resources.probe_image(), IMAGE)]  # the image only
    [dialog] = _dialogs(window)
    assert "probe.wav was not attached" in dialog.text() and "does not take audio" in dialog.text()
    assert "(Qwen2.5-VL)" in dialog.text()  # the family's name, not the runtime's type
    assert ": Qwen2.5-VL on CPU, loaded in" in chat.info.text()
    assert chat.input.toPlainText() == "Listen to this."  # the draft is kept


def test_a_dropped_video_is_refused_saying_why(window, tmp_path):
    chat = window.chat_view  # no package loaded: a video is refused all the same
    clip = tmp_path / "clip.webm"
    clip.write_bytes(b"\x1aE\xdf\xa3")
    chat.input.files_added.emit([str(clip)])
    assert chat.strip.files == []
    [dialog] = _dialogs(window)
    assert "clip.webm was not attached: ONNX Runtime GenAI 0.18 takes no video" in dialog.text()
    assert dialog.informativeText() == "Attach still frames from it as images"


def test_tab_leaves_the_chat_input(qtbot, window):
    from PySide6.QtCore import Qt

    chat = window.chat_view
    window.go(3)
    chat.input.setFocus()
    qtbot.keyClick(chat.input, Qt.Key.Key_Tab)
    assert "\t" not in chat.input.toPlainText()


def test_a_source_that_fails_to_resolve_is_not_added_to_recent(qtbot, window, tmp_path):
    model = window.model_view
    model.source.setText(str(tmp_path / "no-such-model"))
    with qtbot.waitSignal(model.runner.finished, timeout=LONG):
        model.inspect_button.click()
    assert str(tmp_path / "no-such-model") not in window.state.recent_sources()
    assert len(_dialogs(window)) == 1


def test_no_display_is_one_line_not_a_qt_abort(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "mmforge.app"], env=env, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "no display to open the window on" in lines[0]


def test_chat_with_it_goes_from_a_finished_conversion_to_chat(qtbot, window):
    window.go(1)
    window.convert_view.chat_button.setEnabled(True)
    window.convert_view.chat_button.click()
    assert window.current_page() is window.chat_view


def test_convert_page_shows_the_stage_with_its_rate_and_keeps_its_settings(window, monkeypatch):
    """A download of 4.0 of 12.8 MB reads 31 % on the stage's own bar, with its MB/s and
    time left; the settings stay locked while it runs; Cancel says the download resumes."""
    from mmforge.backend.jobs import Progress
    from mmforge.gui import convert_progress

    view = window.convert_view
    now = [0.0]
    monkeypatch.setattr(convert_progress.time, "monotonic", lambda: now[0])
    view.progress.started, view.progress.stage_name = 0.0, ""
    view._set_running(True)
    assert not view.dtype.isEnabled() and not view.output.isEnabled()
    assert not view.browse_button.isEnabled() and view.cancel_button.isEnabled()
    now[0] = 1.0
    view._on_progress(Progress("download", 0, 12.8e6, "bytes", "model.safetensors"))
    now[0] = 3.0
    view._on_progress(Progress("download", 4.0e6, 12.8e6, "bytes", "model.safetensors"))
    assert view.stage_bar.value() == 312  # 31 % of this stage
    assert view.overall.value() == 39  # the first of eight stages, under a third done
    assert "4.0 of 12.8 MB at 2.0 MB/s, about 4 s left" in view.stage.text()
    view._on_progress(Progress("build", 0, None, "steps", "building graphs"))
    assert view.stage_bar.maximum() == 0  # no count: a busy bar
    view._on_cancelled()
    assert "resumes the download" in view.stage.text()
    view._set_running(False)
    assert view.dtype.isEnabled() and view.output.isEnabled()


def test_the_demo_model_is_offered_every_precision(window):
    """verify now judges a quantized package against its own rounded weights and says what
    the rounding costs, so the demo's flat random weights are no reason to hide int4."""
    from types import SimpleNamespace

    from mmforge.backend.tiny.demo import demo_folder

    view = window.convert_view
    sizes = SimpleNamespace(package_bytes={"f32": 4, "f16": 2, "int4": 1, "int8": 2})
    view._on_profile(SimpleNamespace(sizes=sizes, folder=str(demo_folder())))
    offered = [view.dtype.itemText(i) for i in range(view.dtype.count())]
    assert offered == ["f32", "f16", "int4", "int8"]


def test_an_answer_saved_without_its_stop_reason_shows_no_internal_word(qapp):
    from mmforge.backend.chat.conversations import Message
    from mmforge.gui.theme import colours
    from mmforge.gui.transcript import message_html as _message_html

    stats = {"new_tokens": 5, "time_to_first_token_s": 0.1, "decode_tokens_per_s": 40.0}
    old = Message("assistant", "Hi.", stats={**stats, "prefill": "fresh"})
    text = _message_html(old, 0, colours())
    assert "fresh" not in text and "40.0 tokens/s</p>" in text
    ended = Message("assistant", "Hi.", stats=stats, stop_reason="length")
    assert "tokens/s · token limit</p>" in _message_html(ended, 0, colours())


def _palette(dark: bool):
    from PySide6.QtGui import QColor, QPalette

    palette = QPalette()
    window, text, base = ("#1e1e1e", "#e6e6e6", "#252526") if dark else ("#f0f0f0", "#000", "#fff")
    for role, colour in (
        (QPalette.ColorRole.Window, window),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Highlight, "#2f81f7"),
    ):
        palette.setColor(role, QColor(colour))
    return palette


def test_html_colours_follow_the_palette(qapp):
    from PySide6.QtGui import QColor

    from mmforge.gui.markdown import to_html
    from mmforge.gui.theme import colours

    light, dark = colours(_palette(False)), colours(_palette(True))
    assert not light.dark and dark.dark
    # Every background is on the palette's side, and text stands out on it.
    for c in (light, dark):
        for background in (c.user_bubble, c.model_bubble, c.chip, c.note, c.code):
            contrast = abs(QColor(c.text).lightness() - QColor(background).lightness())
            assert contrast > 150, (c.dark, background)
    assert QColor(dark.model_bubble).lightness() < 80 < 200 < QColor(light.model_bubble).lightness()
    # Code blocks take a Pygments style made for the background.
    code = "```python\nprint('x')\n```"
    assert to_html(code, style=dark.pygments) != to_html(code, style=light.pygments)


def test_chat_bubbles_copy_links_settings_and_the_conversation_list(
    qtbot, window, package, monkeypatch
):
    from PySide6.QtCore import QUrl
    from PySide6.QtWidgets import QApplication, QInputDialog

    from mmforge.backend.chat.conversations import Message

    chat = window.chat_view
    window.go(3)
    # An empty transcript says what to do next: first load, then ask.
    assert "Choose a package to chat with" in chat.transcript.toPlainText()
    chat.package.setText(str(package("qwen2_5_vl")))
    # With a package named (as after a restart), it says Load loads that one.
    assert "Press Load to chat with qwen2_5_vl-f32" in chat.transcript.toPlainText()
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.load_button.click()
    assert "Ask something below" in chat.transcript.toPlainText()
    # A new conversation is listed (and selected) before its first answer.
    assert chat.conversations.count() == 1
    assert chat.conversation_list.current_title() == "New conversation"

    # Settings: a system prompt and seeded sampling reach the worker; the system prompt is
    # saved with the conversation, the sampling settings for the next run.
    chat.settings_button.click()
    assert chat.settings_box.isVisible() and not chat.settings_box.temperature.isEnabled()
    chat.system.setPlainText("Answer like a pirate.")
    chat.settings_box.sample.setChecked(True)
    chat.settings_box.temperature.setValue(0.8)
    chat.settings_box.seed.setValue(7)
    chat.max_tokens.setValue(6)
    answers = []
    for _ in range(2):
        chat.input.setPlainText("Hello there.")
        with answered(qtbot, chat):
            chat.send_button.click()
            assert chat.conversation_list.current_title() == "Hello there."
        answers.append(chat.conversation.messages[-1].token_ids)
        with settled(qtbot, chat):
            chat.conversation_list.new_button.click()
    assert answers[0] == answers[1]  # the same seed samples the same answer
    [saved] = [chat.store.load(s.id) for s in chat.store.list()][:1]
    assert saved.system == "Answer like a pirate."
    assert window.state.settings.value("chat/seed") in (7, "7")

    # Bubbles, and Copy links for a message and for a code block.
    with settled(qtbot, chat):
        chat.bridge.open_conversation(saved.id)
    chat.conversation.messages[-1] = Message("assistant", "Look:\n\n```python\nprint(1)\n```\n")
    chat._render()
    html = chat.transcript.toHtml()
    assert html.count("bgcolor") >= 2, "each message is drawn as a bubble"
    chat.transcript.anchorClicked.emit(QUrl("code:1:0"))
    assert QApplication.clipboard().text() == "print(1)\n"
    chat.transcript.anchorClicked.emit(QUrl("copy:0"))
    assert QApplication.clipboard().text() == "Hello there."
    assert "Copied" in chat.status.text()

    # Rename: the title is the user's, and the worker saves it.
    monkeypatch.setattr(QInputDialog, "exec", typed_in("Pirate talk"))
    with settled(qtbot, chat):
        chat.conversation_list.rename_button.click()
    assert chat.conversation_list.current_title() == "Pirate talk"
    assert chat.store.load(saved.id).title == "Pirate talk"

    # A dark palette redraws the transcript in dark bubbles.
    chat.setPalette(_palette(True))
    from mmforge.gui.theme import colours

    assert colours(_palette(True)).model_bubble in chat.transcript.toHtml()
    assert not _dialogs(window)


def test_menus_shortcuts_appearance_and_accessible_names(qtbot, window):
    from PySide6.QtGui import QKeySequence
    from PySide6.QtWidgets import (
        QAbstractItemView,
        QAbstractSpinBox,
        QApplication,
        QComboBox,
        QLabel,
        QLineEdit,
        QMenu,
        QPlainTextEdit,
        QTextEdit,
    )

    from mmforge.gui.theme import is_dark

    portable = QKeySequence.SequenceFormat.PortableText
    shortcuts = {
        a.text().replace("&", ""): a.shortcut().toString(portable)
        for menu in window.menuBar().findChildren(QMenu)
        for a in menu.actions()
    }
    assert shortcuts["Open package…"] == "Ctrl+O" and shortcuts["New conversation"] == "Ctrl+N"
    assert shortcuts["Copy last answer"] == "Ctrl+Shift+C"
    assert [a.shortcut().toString(portable) for a in window.page_actions][3] == "Ctrl+4"
    qtbot.keyClick(window, "3", Qt.KeyboardModifier.ControlModifier)
    assert window.current_page() is window.verify_view

    # Appearance: dark is dark everywhere (the chat redraws), remembered, and undone.
    window.scheme_actions["dark"].trigger()
    assert is_dark(QApplication.palette()) and window.state.settings.value("appearance") == "dark"
    window.scheme_actions["light"].trigger()
    assert not is_dark(QApplication.palette())

    # Every field a screen reader reaches, on every page, has a name: its own or its label's.
    named = {id(label.buddy()) for label in window.findChildren(QLabel) if label.buddy()}
    nameless = []
    for page in range(4):
        window.go(page)
        nameless += [
            (page, type(w).__name__, w.placeholderText() if hasattr(w, "placeholderText") else "")
            for kind in (QLineEdit, QPlainTextEdit, QTextEdit, QAbstractItemView)
            for w in window.findChildren(kind)
            if w.isVisibleTo(window)
            and not isinstance(w.parent(), (QAbstractItemView, QAbstractSpinBox, QComboBox))
            and not w.accessibleName()
            and id(w) not in named
        ]
    assert not nameless


def test_inspect_shows_its_progress_and_can_be_cancelled(qtbot, window, hub, tiny):
    model = window.model_view
    repo = hub.state.add_folder("org/tiny", tiny("qwen2_5_vl"))
    seen = []
    model.runner.progress.connect(
        lambda p: seen.append((model.progress.isVisible(), model.status.text()))
    )
    model.source.setText("org/tiny")
    with qtbot.waitSignal(model.runner.finished, timeout=LONG):
        model.inspect_button.click()
        assert model.cancel_button.isVisible()
    assert any(shown and "Downloading" in text and " of " in text for shown, text in seen)
    assert not model.progress.isVisible() and not model.cancel_button.isVisible()
    assert "Qwen2.5-VL" in model.card.toPlainText()

    # A slow metadata download: Cancel stops it, says so, and the page is usable again.
    hub.state.bytes_per_second = 2_000
    repo.files["tokenizer.json"] = repo.files["tokenizer.json"] + b" " * 200_000
    repo.sha = "1" * 40
    with qtbot.waitSignal(model.runner.progress, timeout=LONG):
        model.inspect_button.click()
    with qtbot.waitSignal(model.runner.finished, timeout=LONG):
        model.cancel_button.click()
    assert model.status.text() == "Cancelled." and model.inspect_button.isEnabled()


def test_account_dialog_checks_the_token_with_the_hub_and_signs_out(
    qtbot, window, hub, tmp_path, monkeypatch
):
    from huggingface_hub import constants

    from mmforge.gui.account_dialog import AccountDialog

    store = tmp_path / "hf" / "token"
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(store))
    hub.state.users["hf_good"] = "alice"
    dialog = AccountDialog(window)
    qtbot.addWidget(dialog)
    assert dialog.who.text() == "Not signed in." and not dialog.sign_out_button.isEnabled()

    dialog.token.setText("hf_bad")
    with qtbot.waitSignal(dialog._call.done, timeout=LONG):
        dialog.sign_in_button.click()
    assert "refused this token" in dialog.who.text() and not store.exists()
    assert dialog.token.text() == "hf_bad"  # issue 31: kept to correct, not cleared

    dialog.token.setText("hf_good")
    with qtbot.waitSignal(dialog._call.done, timeout=LONG):
        dialog.sign_in_button.click()
    assert dialog.who.text().startswith("Signed in as alice.") and store.read_text() == "hf_good"
    assert "hf_good" not in dialog.who.text() and dialog.token.text() == ""
    assert (store.stat().st_mode & 0o777) == 0o600
    assert ("/api/whoami-v2", "Bearer hf_good") in hub.state.authorization

    # Opened again, it says who is signed in; Sign out removes the stored token.
    again = AccountDialog(window)
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again.who.text().startswith("Signed in as alice"), timeout=LONG)
    again.sign_out_button.click()
    assert not store.exists() and again.who.text().startswith("Signed out")


def test_library_lists_deletes_and_moves_packages_and_prunes_the_cache(
    qtbot, window, hub, package, tiny, tmp_path, monkeypatch
):
    import shutil

    from mmforge.backend.source import resolve
    from mmforge.gui.library_dialog import LibraryDialog

    root = window.state.packages_folder()
    for name in ("one", "two"):
        shutil.copytree(package("qwen2_5_vl"), root / name)
    hub.state.add_folder("org/tiny", tiny("qwen2_5_vl"))
    resolve("org/tiny", purpose="inspect")
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    dialog = LibraryDialog(window.state, window)
    qtbot.addWidget(dialog)
    table = dialog.package_table
    assert table.rowCount() == 2 and table.item(0, 3).text().endswith("B")
    assert "2 packages" in dialog.folder_label.text()
    assert [dialog.model_table.item(0, 0).text()] == ["org/tiny"]

    dialog.package_table.selectRow(0)
    gone = dialog._packages[0].folder
    dialog.delete_package_button.click()
    assert not gone.exists() and table.rowCount() == 1

    new = tmp_path / "elsewhere"
    dialog.move_to(new)
    assert window.state.packages_folder() == new and table.rowCount() == 1
    assert [p.name for p in new.iterdir()] == [next(p for p in ("one", "two") if p != gone.name)]

    dialog.tabs.setCurrentIndex(1)
    dialog.delete_model_button.click()
    assert dialog.model_table.rowCount() == 0

    with qtbot.waitSignal(dialog.chat_requested) as chat:
        dialog.chat_button.click()
    assert chat.args == [str(next(new.iterdir()))]
    assert not _dialogs(window)


def test_a_fresh_profile_goes_demo_convert_verify_and_chat_with_a_pasted_image(
    qtbot, tmp_path, monkeypatch
):
    """A new user: empty data, config and cache folders; every step by its buttons."""
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QApplication

    from mmforge.gui.main_window import MainWindow

    for name in ("DATA", "CONFIG", "CACHE"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / name.lower()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = tmp_path / "config" / "mmforge" / "mmforge.ini"
    window = MainWindow(QSettings(str(config), QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    window.show()
    model, convert, verify, chat = (
        window.model_view,
        window.convert_view,
        window.verify_view,
        window.chat_view,
    )
    # Model: the demo model, built offline into the empty cache, then inspected.
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.demo_button.click()
    assert "built-in demo model" in model.card.toPlainText()
    qtbot.waitUntil(model.next_button.isEnabled, timeout=LONG)
    model.next_button.click()
    assert window.current_page() is convert

    # Convert into the default folder, whose parents do not exist yet.
    default = tmp_path / "data" / "mmforge" / "packages"
    assert Path(convert.output.text()).parent == default and not default.exists()
    with qtbot.waitSignal(convert.runner.finished, timeout=LONG):
        convert.convert_button.click()
    package = Path(convert.output.text())
    assert (package / "genai_config.json").is_file() and window.state.package == str(package)

    # Verify, from the Convert page's button.
    convert.next_button.click()
    assert window.current_page() is verify
    with qtbot.waitSignal(verify.runner.finished, timeout=LONG):
        verify.run_button.click()
    assert verify.report is not None and verify.report.verdict == "PASS"

    # Chat: load, paste an image with Ctrl+V, send; the answer and the picture are shown.
    # "Chat →" loads the package it names, and says so while it loads.
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        verify.next_button.click()
        assert window.current_page() is chat and chat.package.text() == str(package)
        assert "Loading" in chat.info.text()
    assert chat.session_info.package == str(package)
    QApplication.clipboard().setImage(QImage(str(resources.probe_image())))
    chat.input.setFocus()
    qtbot.keyClick(chat.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    [(pasted, kind)] = chat.strip.files
    assert kind == IMAGE and pasted.suffix == ".png"
    qtbot.keyClicks(chat.input, "What is in this picture?")
    with answered(qtbot, chat) as turn:
        qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    assert turn.args[0].stats.new_tokens > 0 and len(_pictures(chat)) == 1
    [saved] = chat.store.list()
    assert chat.store.root == tmp_path / "data" / "mmforge" / "conversations"
    assert saved.messages == 2 and not _dialogs(window)
    window.close()


def test_a_failing_report_fits_the_verify_page_at_the_default_size(qtbot, window):
    """Every stage row and the summary are on screen at 1180×780 when a stage fails."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.backend.verify.parity import Comparison

    # The reasons and the cause of a real int4 FAIL (the demo model in 4 bits).
    long = "the top token differs at 9 position(s), first at 5 (cosine 0.9646)"
    stages = [
        "preprocessing",
        "vision_encoder",
        "embedding",
        "embedding_text_only",
        "decoder_prefill",
        "decoder_step",
        "runtime_config",
        "end_to_end",
    ]
    components = [
        Comparison(name, "FAIL" if i >= 4 else "PASS", 1.0, 0.9, False, long, [], [])
        for i, name in enumerate(stages)
    ]
    components[4].per_position_excess.extend([20.0, 50.0, 80.0])
    report = VerifyReport(
        verdict="FAIL",
        first_divergent_stage="decoder_prefill",
        cause=(
            "int4 quantization of the decoder's weights changes its logits beyond what "
            "rounding explains; convert in f32 and verify that package to tell a "
            f"quantization loss from a conversion fault ({long})"
        ),
        components=components,
        tokens={"matched": 0, "total": 32},
        family="Qwen2.5-VL",
        dtype="int4",
        package="p",
        reference="r",
    )
    window.resize(1180, 780)
    window.go(2)
    verify = window.verify_view
    verify._on_result(report)
    qtbot.wait(50)
    table = verify.table
    last = table.rowCount() - 1
    bottom = table.rowViewportPosition(last) + table.rowHeight(last)
    assert table.rowCount() == 8 and bottom <= table.viewport().height()
    # The "why" column wraps within the table instead of running off its right edge.
    assert table.horizontalScrollBar().maximum() == 0
    card = verify.verdict.text()
    assert "FAIL" in card and "the language model reading the prompt" in card
    assert "0 of the 32 word pieces" in card


def test_account_dialog_says_when_the_hub_cannot_be_reached(qtbot, window, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from mmforge.gui.account_dialog import AccountDialog

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # refused at once
    dialog = AccountDialog(window)
    qtbot.addWidget(dialog)
    dialog.token.setText("hf_any")
    with qtbot.waitSignal(dialog._call.done, timeout=LONG):
        dialog.sign_in_button.click()
    assert dialog.who.text().startswith("Cannot reach the hub to check the token")
    assert dialog.sign_in_button.isEnabled() and not (tmp_path / "token").exists()
    assert dialog.token.text() == "hf_any"  # issue 31: kept for the retry


def test_a_slow_download_shows_its_rate_in_kb_per_s(window, monkeypatch):
    from mmforge.backend.jobs import Progress
    from mmforge.gui import convert_progress

    view = window.convert_view
    now = [1.0]
    monkeypatch.setattr(convert_progress.time, "monotonic", lambda: now[0])
    view.progress.started, view.progress.stage_name = 0.0, ""
    view._on_progress(Progress("download", 0, 837_480, "bytes", "model.safetensors"))
    now[0] = 3.0
    view._on_progress(Progress("download", 110_000, 837_480, "bytes", "model.safetensors"))
    assert "at 55.0 KB/s, about 13 s left" in view.stage.text()  # not "0.1 MB/s"


def test_a_file_that_cannot_be_attached_is_refused_when_added(window, tmp_path):
    """A text file named .png, or an empty .wav, sat in the draft as a chip until Send."""
    fake = tmp_path / "notes.png"
    fake.write_text("this is not an image")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    for add, strip in (
        (window.chat_view._add_files, window.chat_view.strip),
        (window.compare_view.add_files, window.compare_view.strip),
    ):
        before = _dialogs(window)
        add([str(fake), str(empty)])
        said = [d.text() for d in _dialogs(window) if d not in before]
        assert any("notes.png: it is not an image file" in t for t in said), said
        assert any("empty.wav: the file is empty (0 bytes)" in t for t in said), said
        assert strip.files == []
