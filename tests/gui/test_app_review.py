"""Issue 31: the review of the real window (each test names its item)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QPushButton


def _wheel(widget, notches: int = -1) -> None:
    """A real wheel turn over the middle of `widget` (negative: down, towards the user)."""
    at = QPointF(widget.rect().center())
    event = QWheelEvent(
        at,
        QPointF(widget.mapToGlobal(at.toPoint())),
        QPoint(),
        QPoint(0, 120 * notches),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def _value(widget):
    return widget.currentIndex() if hasattr(widget, "currentIndex") else widget.value()


def test_1_the_wheel_scrolls_the_settings_and_changes_none_of_them(qtbot, window):
    """At 1024×600 with Settings open, wheeling over "When the conversation gets too long"
    (and the other drop-downs and number boxes) changed the value instead of scrolling."""
    window.resize(1024, 600)
    window.show_page(window.chat_view)
    window.chat_view.settings_button.setChecked(True)
    settings = window.chat_view.settings_box
    settings.sample.setChecked(True)  # the sampling boxes take input only then
    QApplication.processEvents()
    bar = window.pages.currentWidget().verticalScrollBar()
    assert bar.maximum() > 0  # the page is taller than the screen: it must scroll
    window.setFocus()
    for widget in (
        settings.context_full,
        settings.max_tokens,
        settings.temperature,
        settings.top_k,
        settings.seed,
    ):
        before = _value(widget)
        bar.setValue(0)
        _wheel(widget, -1)
        assert _value(widget) == before, widget.accessibleName()
        assert bar.value() > 0, widget.accessibleName()  # the page scrolled instead
    # A field the user clicked into takes the wheel, as everywhere.
    field = settings.max_tokens
    field.setFocus()
    QApplication.processEvents()
    before = field.value()
    _wheel(field, 1)
    assert field.value() == before + 1


def test_5_after_attaching_the_keys_go_to_the_message(qtbot, window, monkeypatch):
    """Focus stayed on Attach… after a file was attached, so the first space typed
    reopened the file dialog."""
    from mmforge import resources
    from mmforge.gui import chat_view

    chat = window.chat_view
    window.show_page(chat)
    opened: list[int] = []

    def pick(parent, start="", *, sound=True):
        opened.append(1)
        return [str(resources.probe_image())]

    monkeypatch.setattr(chat_view, "pick_files", pick)
    button = next(b for b in chat.findChildren(QPushButton) if b.text() == "Attach…")
    button.setFocus()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert opened == [1] and len(chat.strip.files) == 1
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    assert opened == [1]  # the space went into the message, not to Attach…
    assert chat.input.hasFocus() and chat.input.toPlainText() == " "


def test_3_regenerate_gives_another_answer_even_with_varied_answers_off(window, monkeypatch):
    """Regenerate repeated the same answer (898 identical tokens): "Vary the answers" is
    off by default, so it asked for the most likely words again."""
    from mmforge.gui import chat_view

    chat = window.chat_view
    settings = chat.settings_box
    assert not settings.sample.isChecked()  # the default
    assert "do_sample" not in settings.options()  # a plain Send stays greedy
    asked: list[dict] = []
    monkeypatch.setattr(chat, "_ready", lambda: True)
    monkeypatch.setattr(chat, "_begin_turn", lambda *args: None)
    monkeypatch.setattr(chat.bridge, "regenerate", lambda options, system: asked.append(options))
    monkeypatch.setattr(chat_view, "messages_of", lambda conversation: [_Said()])
    chat.regenerate()
    chat.regenerate()
    assert [o["do_sample"] for o in asked] == [True, True]
    assert all(o["seed"] is None for o in asked)  # a new random seed each time
    assert asked[0]["temperature"] == settings.temperature.value()
    assert (
        asked[0]["top_p"] == settings.top_p.value() and asked[0]["top_k"] == settings.top_k.value()
    )


class _Said:
    role = "assistant"


def test_4_the_window_reopens_at_a_usable_size(qtbot, tmp_path, monkeypatch):
    """Geometry saved at 1366×768 came back as 678×373 on a 1024×600 screen, Load and
    Send hidden until the window was maximised."""
    from PySide6.QtCore import QSettings

    from mmforge.gui.main_window import REOPEN_AT_LEAST, MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = str(tmp_path / "settings.ini")
    first = MainWindow(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(first)
    first.show()
    first.resize(678, 373)  # what the restore gave
    first.close()
    again = MainWindow(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    again.show()
    free = again.screen().availableGeometry()
    assert again.width() >= min(REOPEN_AT_LEAST[0], free.width() - 16)
    assert again.height() >= min(REOPEN_AT_LEAST[1], free.height() - 40)
    assert again.width() <= free.width() and again.height() <= free.height()
    again.close()


def test_7_ctrl_o_opens_the_library(qtbot, window, monkeypatch):
    """Ctrl+O opened the working directory, not the library where packages are."""
    from PySide6.QtWidgets import QFileDialog

    window.state.packages_folder().mkdir(parents=True, exist_ok=True)
    asked: list[str] = []

    def dialog(parent, title, where="", *args):
        asked.append(where)
        return ""

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", dialog)
    window.activateWindow()
    window.setFocus()
    qtbot.keyClick(window, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert asked == [str(window.state.packages_folder())]


def test_7_one_click_on_a_recent_model_picks_it(qtbot, window, monkeypatch):
    """A single click on a recent model did nothing (only a double click inspected it)."""
    model = window.model_view
    model.known.clear()
    model.known.addItem("org/some-vlm")
    started: list[tuple] = []
    monkeypatch.setattr(model.runner, "start", lambda job, args: started.append((job, args)))
    item = model.known.item(0)
    rect = model.known.visualItemRect(item)
    qtbot.mouseClick(model.known.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert model.source.text() == "org/some-vlm"
    assert started and started[0][0] == "inspect" and started[0][1]["source"] == "org/some-vlm"


def test_2_a_model_typed_over_the_card_is_not_converted_as_the_card_s(qtbot, window, tiny):
    """Typing Qwen/Qwen2.5-VL-3B-Instruct over the demo's card and pressing Convert →
    converted the demo."""
    model = window.model_view
    model.source.setText(str(tiny("qwen2_5_vl")))
    with qtbot.waitSignal(window.state.profile_changed, timeout=300_000):
        model.inspect_button.click()
    assert model.next_button.isEnabled()
    model.source.selectAll()
    qtbot.keyClicks(model.source, "Qwen/Qwen2.5-VL-3B-Instruct")
    assert not model.next_button.isEnabled()
    assert "You typed Qwen/Qwen2.5-VL-3B-Instruct. Press Inspect" in model.card.toPlainText()
    # Typed back as it was: the card is that model's again.
    model.source.selectAll()
    qtbot.keyClicks(model.source, str(tiny("qwen2_5_vl")))
    assert model.next_button.isEnabled()
    assert "You typed" not in model.card.toPlainText()


def test_2_convert_forgets_its_finished_line_when_the_precision_changes(
    qtbot, window, tiny, tmp_path
):
    """Convert still said "finished … at f32" after int4 was chosen."""
    model, convert = window.model_view, window.convert_view
    model.source.setText(str(tiny("qwen2_5_vl")))
    with qtbot.waitSignal(window.state.profile_changed, timeout=300_000):
        model.inspect_button.click()
    model.next_button.click()
    convert.output.setText(str(tmp_path / "pkg"))
    with qtbot.waitSignals(
        [window.state.package_changed, convert.runner.finished], timeout=300_000
    ):
        convert.convert_button.click()
    assert "at f32" in convert.summary.text() and convert.chat_button.isEnabled()
    convert.dtype.setCurrentText("int4")
    assert "f32" not in convert.summary.text() and not convert.chat_button.isEnabled()
    assert (tmp_path / "pkg" / "genai_config.json").is_file()  # the package stays


def _copy_package(package, folder, source: str):
    import json
    import shutil

    shutil.copytree(package, folder)
    manifest = folder / "mmforge_manifest.json"
    data = json.loads(manifest.read_text())
    data["source"] = source
    manifest.write_text(json.dumps(data))
    return folder


def test_2_verify_pairs_a_package_with_the_model_it_was_converted_from(window, package):
    """After a restart, Verify paired the last-loaded Phi-4 package with the demo just
    picked and failed ("The package is a 'phi4mm' package but the reference is
    Qwen2.5-VL")."""
    library = window.state.packages_folder()
    library.mkdir(parents=True, exist_ok=True)
    phi = _copy_package(package("qwen2_5_vl"), library / "phi-f32", "/models/phi-4")
    verify = window.verify_view
    window.state.set_package(str(phi))
    assert verify.reference.text() == "/models/phi-4"  # the package says what it came from
    window.state.set_source("/models/demo")  # a model nothing was converted from yet
    assert verify.reference.text() == "/models/demo" and verify.package.text() == ""
    demo = _copy_package(package("qwen2_5_vl"), library / "demo-f32", "/models/demo")
    window.state.set_package(str(phi))
    window.state.set_source("/models/demo")
    assert verify.package.text() == str(demo)


def test_the_card_says_not_yet_or_cannot_with_the_runtime_code(qtbot, window, tmp_path):
    """Issue 30: a family a runtime pipeline could run exactly is "not converted yet",
    one the runtime rules out "cannot convert", each with its measured reason. No family
    ships "not converted yet" now (Gemma 3n was the last): its card is drawn from an
    inspection said that way, and the real window inspects one the runtime rules out."""
    import dataclasses

    import transformers

    from mmforge.backend.families.catalog import NOT_YET
    from mmforge.backend.inspect import inspect_source
    from mmforge.gui.model_view import profile_html
    from mmforge.gui.theme import colours

    transformers.LlavaOnevisionConfig().save_pretrained(tmp_path / "llava_onevision")
    said = dataclasses.replace(
        inspect_source(str(tmp_path / "llava_onevision")),
        converts=NOT_YET,
        runtime_reason="ONNX Runtime GenAI 0.18 could run it exactly (gemma_image_processor.cpp)",
    )
    card = profile_html(said, colours())
    assert "Not converted yet:</b>" in card and "gemma_image_processor.cpp" in card

    model = window.model_view
    for config, title, named in ((transformers.Florence2Config(), "Cannot convert:", ".cpp"),):
        folder = tmp_path / type(config).__name__
        config.save_pretrained(folder)
        model.source.setText(str(folder))
        # The worker that read the previous model ends after its result: until then the
        # button is disabled and a click does nothing.
        qtbot.waitUntil(model.inspect_button.isEnabled, timeout=60_000)
        with qtbot.waitSignal(window.state.profile_changed, timeout=300_000):
            model.inspect_button.click()
        card = model.card.toPlainText()
        assert title in card and named in card, card
        assert not model.next_button.isEnabled()
        # The status line says what the card's title says.
        assert model.status.text() == f"Inspected: {title[:-1].lower()}."
