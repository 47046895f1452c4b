"""Issue 31, the chat page's items (each test names its item and what it did before)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QMessageBox

from mmforge.backend.chat.conversations import Conversation, ConversationStore, Message


def _held(chat, messages: list[Message]) -> Conversation:
    """The chat page as if a loaded model held this conversation (no worker needed)."""
    conversation = Conversation(id="c1", package="pkg", messages=messages)
    chat.conversation, chat.local, chat._loaded = conversation, False, True
    chat._render()
    chat._update_buttons()
    return conversation


def test_7_edit_last_takes_the_old_turn_away_and_leaves_the_cursor_at_the_end(qtbot, window):
    """Edit last left the old turn visible and put the cursor at the start."""
    chat = window.chat_view
    window.show_page(chat)
    _held(
        chat,
        [
            Message("user", "First question"),
            Message("assistant", "First answer"),
            Message("user", "Second question"),
            Message("assistant", "Second answer"),
        ],
    )
    assert "Second answer" in chat.transcript.toPlainText()
    chat.edit_button.click()
    shown = chat.transcript.toPlainText()
    assert "Second question" not in shown and "Second answer" not in shown, shown
    assert "First answer" in shown  # only the turn being edited leaves
    assert chat.input.toPlainText() == "Second question"
    assert chat.input.textCursor().position() == len("Second question")
    assert "Esc" in chat.status.text()
    # Esc puts the turn back and empties the input.
    qtbot.keyClick(chat.input, Qt.Key.Key_Escape)
    assert "Second answer" in chat.transcript.toPlainText()
    assert chat.input.toPlainText() == "" and not chat._editing


def test_7_an_edit_does_not_follow_the_user_into_another_conversation(qtbot, window, tmp_path):
    """Opening another conversation while editing kept the edit armed: the next message
    sent there would have replaced that conversation's last turn."""
    chat = window.chat_view
    other = Conversation(id="c2", package="pkg", messages=[Message("user", "Other")])
    chat.store.save(other)
    _held(chat, [Message("user", "Mine"), Message("assistant", "Answer")])
    chat.edit_button.click()
    assert chat._editing
    chat.open_conversation("c2")
    assert not chat._editing and chat.input.toPlainText() == ""


def test_7_search_looks_in_the_messages_and_says_when_nothing_matches(qtbot, window):
    """Conversation search matched titles only and said nothing when nothing matched."""
    chat = window.chat_view
    store: ConversationStore = chat.store
    for cid, title, words in (
        ("a", "Holiday", "Where should we go in April?"),
        ("b", "Recipes", "How long do I bake sourdough bread?"),
    ):
        conversation = Conversation(id=cid, package="pkg", title=title)
        conversation.messages = [Message("user", words), Message("assistant", "Let me see.")]
        store.save(conversation)
    chat.refresh_conversations()
    lst = chat.conversation_list

    def shown() -> list[str]:
        items = [lst.items.item(i) for i in range(lst.items.count())]
        return sorted(str(i.data(Qt.ItemDataRole.UserRole)) for i in items if not i.isHidden())

    lst.search.setText("sourdough")
    assert shown() == ["b"]
    assert lst.nothing.isHidden()
    lst.search.setText("april bake")  # every word must be found in one conversation
    assert shown() == []
    assert not lst.nothing.isHidden() and "april bake" in lst.nothing.text()
    lst.search.clear()
    assert shown() == ["a", "b"] and lst.nothing.isHidden()


def test_9_the_rename_dialog_is_wide_enough_for_its_title(qtbot, window):
    """The rename dialog's title was clipped to "Renam… ation"."""
    from mmforge.gui.chat_conversations import RENAME_TITLE, title_dialog

    dialog = title_dialog(window, "A conversation about a rather long subject indeed")
    qtbot.addWidget(dialog)
    dialog.show()
    QApplication.processEvents()
    title = dialog.fontMetrics().horizontalAdvance(RENAME_TITLE)
    assert dialog.windowTitle() == RENAME_TITLE
    assert dialog.width() >= title + 200, (dialog.width(), title)
    dialog.reject()


def test_7_the_input_cursor_can_move_after_an_edit(qtbot, window):
    """The cursor is a normal one after Edit last: Home still goes to the start."""
    chat = window.chat_view
    _held(chat, [Message("user", "Typed"), Message("assistant", "Answer")])
    chat.edit_button.click()
    chat.input.moveCursor(QTextCursor.MoveOperation.Start)
    assert chat.input.textCursor().position() == 0


def _error_boxes(window):
    from PySide6.QtWidgets import QMessageBox

    return [b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"]


def test_9_a_mistyped_model_is_answered_in_the_apps_words_under_the_pages_title(qtbot, window):
    """A mistyped model said "Pass an existing model folder or a hub id like
    org/name[@revision]" in a dialog titled "mmforge", like every other dialog."""
    model = window.model_view
    assert "org/name" not in model.source.placeholderText()
    model.source.setText("./no/such/folder")
    model.inspect_button.click()
    qtbot.waitUntil(lambda: bool(_error_boxes(window)), timeout=60_000)
    [box] = _error_boxes(window)
    said = f"{box.text()} {box.informativeText()}"
    assert "org/name" not in said and "Pass " not in said, said
    assert "Find a model" in said
    assert box.windowTitle() == "Model – Multimodal Forge"
    box.close()


def test_9_network_hints_leave_the_proxy_variables_to_the_command_line(window):
    from mmforge.gui.errors import in_app_words, title_for

    hint = in_app_words(
        "Check the network connection (or HF_ENDPOINT / a proxy) and run the same command "
        "again: the download resumes where it stopped"
    )
    assert hint == (
        "Check the network connection and start it again: the download resumes where it stopped"
    )
    assert title_for(window.chat_view.send_button) == "Chat – Multimodal Forge"
    assert title_for(None) == "Multimodal Forge"


def test_9_a_pass_of_poor_quality_gets_its_own_red_headline(qapp):
    """A green PASS stood beside "(quality: poor)" in the sentence: it read as all well."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.backend.verify.rounding import RoundingCost
    from mmforge.gui.theme import colours
    from mmforge.gui.verify_view import summary_html

    c = colours()
    for grade, shade in (("poor", c.bad), ("fair", c.warn), ("good", c.ok)):
        cost = RoundingCost("int4", 12, 32, 0.6, 0.5, (10.0, 10.1), None, None, grade)
        report = VerifyReport(
            "PASS", None, None, [], {"matched": 32, "total": 32}, "Qwen2.5-VL", "int4",
            "p", "r", rounding=cost,
        )  # fmt: skip
        card = summary_html(report, c)
        assert f"color:{shade}'>Quality at int4: {grade}</span>" in card, card
        assert "(quality:" not in card


def test_10_repeat_penalty_is_a_setting_and_model_default_sends_none(window):
    """Chat apps all have Repeat penalty; mmforge had none."""
    settings = window.chat_view.settings_box
    assert settings.repeat_penalty.text() == "model's default"
    assert "repetition_penalty" not in settings.options()
    settings.repeat_penalty.setValue(1.1)
    assert settings.options()["repetition_penalty"] == 1.1
    assert settings.another_answer()["repetition_penalty"] == 1.1  # Regenerate keeps it
    settings.repeat_penalty.setValue(1.0)  # 1.00 turns a model's own penalty off
    assert settings.options()["repetition_penalty"] == 1.0
    assert window.state.number("chat/repeat_penalty", 0.0) == 1.0  # remembered


def test_9_each_context_choice_reads_whole_in_the_closed_box_at_1024(window):
    """The drop-down read "(marked in the conversation" with no closing bracket."""
    window.resize(1024, 600)
    window.show_page(window.chat_view)
    window.chat_view.settings_button.setChecked(True)
    QApplication.processEvents()
    box = window.chat_view.settings_box.context_full
    room = box.width() - 40  # the arrow and the frame
    for i in range(box.count()):
        assert box.fontMetrics().horizontalAdvance(box.itemText(i)) <= room, box.itemText(i)
        assert box.itemData(i, Qt.ItemDataRole.ToolTipRole)  # the rest is in its tooltip


def test_9_the_message_box_names_what_this_model_can_take():
    """An audio model's message box spoke only of pictures."""
    from mmforge.gui.chat_column import input_hint

    assert "a picture or a sound clip" in input_hint(vision=True, audio=True)
    assert "sound clip" in input_hint(vision=False, audio=True)
    assert "picture" not in input_hint(vision=False, audio=True)
    assert "attach" not in input_hint(vision=False, audio=False)


def test_10_unload_lets_the_model_go_and_keeps_the_conversation(qtbot, window, package):
    """LM Studio and Jan unload a model; mmforge kept it until another was loaded."""
    from tests.gui.chatting import LONG, load, send

    chat = window.chat_view
    assert not chat.package_bar.unload_button.isEnabled()  # nothing loaded yet
    load(qtbot, chat, package("qwen2_5_vl"))
    chat.max_tokens.setValue(3)
    send(qtbot, chat, "Hello there.")
    assert chat.package_bar.unload_button.isEnabled()
    with qtbot.waitSignal(chat.bridge.closed, timeout=LONG):
        chat.package_bar.unload_button.click()
    assert not chat._loaded and chat.state.loaded_package == ""
    assert not chat.send_button.isEnabled() and chat.load_button.isEnabled()
    assert not chat.package_bar.unload_button.isEnabled()
    assert "Hello there." in chat.transcript.toPlainText()  # the saved copy, shown
    assert "unloaded" in chat.package_bar.info.text()
    assert chat.bridge._client is None  # the worker is gone


def test_10_an_attached_clip_plays_from_its_chip_and_nothing_else_opens(
    qtbot, window, tmp_path, monkeypatch
):
    """LM Studio and Jan play an attached clip; mmforge showed its name only."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices

    from mmforge import resources
    from mmforge.backend.attachments import AUDIO, Attachment, prepare

    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()))
    chat = window.chat_view
    clip = prepare(resources.probe_audio(), AUDIO, chat.store.attachments_folder("c1")).path
    script = clip.parent / "run-me.sh"
    script.write_text("echo hi\n")
    said = [
        Attachment(kind="audio", path=clip, name="hello.wav"),
        # A hand-edited conversation file naming a program as a clip.
        Attachment(kind="audio", path=script, name="run-me.sh"),
    ]
    _held(chat, [Message("user", "Listen", attachments=said), Message("assistant", "Heard.")])
    assert "play:0:0" in chat.transcript.toHtml()
    assert "play:0:1" not in chat.transcript.toHtml()  # it says why it cannot play
    chat.transcript.anchorClicked.emit(QUrl("play:0:0"))
    assert opened == [str(clip)]
    chat.transcript.anchorClicked.emit(QUrl("play:0:1"))  # a link written by hand
    assert opened == [str(clip)] and "not a sound file" in chat.status.text()
    clip.unlink()
    chat.transcript.anchorClicked.emit(QUrl("play:0:0"))
    assert opened == [str(clip)]


def test_setup_the_offline_demo_with_sound_inspects_a_model_that_takes_clips(qtbot, window):
    """The offline demo took pictures only: sound could not be tried without a network."""
    model = window.model_view
    with qtbot.waitSignal(window.state.profile_changed, timeout=300_000):
        model.demo_sound_button.click()
    profile = window.state.profile
    assert profile.family_key == "gemma4" and "audio_encoder" in profile.components
    assert model.next_button.isEnabled()
    assert "A tiny Gemma 4 with random weights" in model.card.toPlainText()


_WORDS = " ".join(f"word{i:04d}" for i in range(400))  # 3,599 characters, no line break


def test_6_long_lines_break_between_words_streamed_and_finished():
    """Streamed text broke words across paragraphs that the finished answer did not have."""
    from mmforge.gui.safe_text import (
        LINE_BREAK,
        LONG_LINE,
        WORD_SLACK,
        StreamBreaker,
        break_long_lines,
    )

    finished = break_long_lines(_WORDS)
    assert finished.replace("\n", " ") == _WORDS  # only spaces became breaks
    assert all(len(line) <= LONG_LINE for line in finished.split("\n"))
    breaker = StreamBreaker()
    pieces = [_WORDS[:8]] + [f" {w}" for w in _WORDS.split(" ")[1:]]  # token by token
    streamed = "".join(breaker.feed(p) for p in pieces)
    assert "\n" not in streamed  # no new paragraph in mid-sentence
    assert streamed.replace(LINE_BREAK, " ") == _WORDS
    assert streamed.count(LINE_BREAK) >= len(_WORDS) // (LONG_LINE + WORD_SLACK)
    assert all(len(line) <= LONG_LINE for line in streamed.split(LINE_BREAK))
    # A word with no space in reach is still broken, within the slack.
    long_word = StreamBreaker().feed("x" * 2000)
    assert all(len(line) <= LONG_LINE + WORD_SLACK for line in long_word.split(LINE_BREAK))


def test_6_a_fast_answer_reaches_the_window_in_batches_and_the_count_keeps_up(
    qtbot, window, monkeypatch
):
    """An answer streamed under load stalled at "Generating… 164 tokens" for 6 s and then
    jumped to 3,936: every token was its own insertion into the transcript."""
    from mmforge.gui.chat_turns import Pending

    chat = window.chat_view
    _held(chat, [Message("user", "Go")])
    chat.pending = Pending(replaces=0, user=None)
    chat._render(streaming=True)
    inserted: list[str] = []
    real = chat.writer.stream
    monkeypatch.setattr(chat.writer, "stream", lambda text: (inserted.append(text), real(text))[1])
    pieces = [_WORDS[:8]] + [f" {w}" for w in _WORDS.split(" ")[1:]]
    for piece in pieces:
        chat._on_token(piece)
    qtbot.waitUntil(lambda: "".join(inserted) == _WORDS)
    assert len(inserted) < len(pieces) // 10, len(inserted)  # batches, not 400 insertions
    assert chat.status.text().startswith(f"Generating… {len(pieces)} tokens")
    shown = chat.transcript.toPlainText()
    assert "word0000" in shown and "word0399" in shown


def test_1_the_wheel_leaves_settings_alone_in_an_active_window(qtbot, window):
    """Under a real X server (the window active) the wheel still changed the drop-downs:
    Qt focuses a WheelFocus widget on a wheel turn before any event filter runs."""
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QAbstractSpinBox, QComboBox

    window.resize(1024, 600)
    window.show_page(window.chat_view)
    window.chat_view.settings_button.setChecked(True)
    settings = window.chat_view.settings_box
    settings.sample.setChecked(True)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    boxes = [*settings.findChildren(QComboBox), *settings.findChildren(QAbstractSpinBox)]
    assert settings.repeat_penalty in boxes and settings.context_full in boxes
    for box in boxes:
        assert box.focusPolicy() == Qt.FocusPolicy.StrongFocus, box.accessibleName()
        before = box.currentIndex() if isinstance(box, QComboBox) else box.text()
        at = QPointF(box.rect().center())
        QApplication.sendEvent(
            box,
            QWheelEvent(
                at, QPointF(box.mapToGlobal(at.toPoint())), QPoint(), QPoint(0, -120),
                Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                Qt.ScrollPhase.NoScrollPhase, False,
            ),
        )  # fmt: skip
        after = box.currentIndex() if isinstance(box, QComboBox) else box.text()
        assert after == before and not box.hasFocus(), box.accessibleName()


def test_9_only_a_pass_is_said_to_be_fine(qapp):
    """Verifying the sound demo (Gemma 4) once ended in AMBIGUOUS at preprocessing with
    "fine to use" beside it: a headline that contradicts its text. A prompt that differs
    is now a FAIL (issue 46), and no verdict but PASS is called fine."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.backend.verify.parity import Comparison
    from mmforge.gui.theme import colours
    from mmforge.gui.verify_view import summary_html

    def stage(name: str, verdict: str) -> Comparison:
        return Comparison(name, verdict, 0.0, 1.0, None, "", [], [])

    def report(verdict: str, first: str) -> VerifyReport:
        stages = [stage("preprocessing", first), stage("decoder_prefill", "PASS")]
        return VerifyReport(
            verdict, None if verdict == "PASS" else "preprocessing",
            "the model is asked another prompt than transformers asks it", stages,
            {"matched": 32, "total": 32}, "Gemma 4", "f32", "p", "r",
        )  # fmt: skip

    assert "computes what the original computes" in summary_html(report("PASS", "PASS"), colours())
    for verdict in ("AMBIGUOUS", "FAIL"):
        shown = summary_html(report(verdict, verdict), colours())
        assert "fine" not in shown and "computes what the original computes" not in shown
        assert "another prompt" in shown and "preprocessing" in shown, shown


def test_13_picking_from_the_library_loads_that_package_and_names_it(qtbot, window, package):
    """Picking f32 from Chat's Library drop-down put its path in the field while int4
    stayed loaded: the next message went to int4. The list showed full paths."""
    import shutil

    from tests.gui.chatting import LONG, load

    chat = window.chat_view
    root = window.state.packages_folder()
    first, second = root / "first-f32", root / "second-f32"
    for folder in (first, second):
        shutil.copytree(package("qwen2_5_vl"), folder)
    load(qtbot, chat, first)
    chat.refresh_library()
    labels = [chat.library.itemText(i) for i in range(1, chat.library.count())]
    assert labels == ["first-f32: Qwen2.5-VL, f32", "second-f32: Qwen2.5-VL, f32"]
    assert not any(str(root) in label for label in labels)
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.library.activated.emit(2)
    assert chat.session_info.package == str(second)


def test_16_edit_last_shows_its_picture_to_keep_or_remove(qtbot, window, tmp_path, monkeypatch):
    """While editing, the last message's picture was hidden and could not be removed, yet
    it was sent again."""
    from mmforge import resources
    from mmforge.backend.attachments import Attachment

    chat = window.chat_view
    picture = resources.probe_image()
    said = [Attachment(kind="image", path=picture, name="probe.png")]
    asked: list[object] = []
    monkeypatch.setattr(
        chat.bridge, "edit_last", lambda text, options, system, files: asked.append(files)
    )
    for remove in (False, True):
        _held(chat, [Message("user", "What is it?", attachments=said), Message("assistant", "A")])
        chat.edit_button.click()
        assert chat.strip.files == [(picture, "image")]
        if remove:
            chat.strip.set_files([])
        chat.input.setPlainText("And now?")
        chat.send_button.click()
        chat.pending = None
    assert asked == [None, []]  # kept as it was; then sent without the picture


def test_15_the_account_dialog_shows_its_whole_sentence(qtbot, window, tmp_path, monkeypatch):
    """The account dialog's explanation was cut: "…and accept the model'"."""
    from huggingface_hub import constants
    from PySide6.QtWidgets import QLabel

    from mmforge.gui.account_dialog import AccountDialog

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    dialog = AccountDialog(window)
    qtbot.addWidget(dialog)
    dialog.show()
    QApplication.processEvents()
    about = dialog.findChild(QLabel, "accountAbout")
    assert about.wordWrap()
    needed = about.heightForWidth(about.width())
    assert about.height() >= needed, (about.height(), needed)


def test_20_attach_opens_at_home_then_where_the_user_last_attached_from(window, monkeypatch):
    """Attach… opened in the folder the app was started from (a source tree)."""
    from pathlib import Path

    from PySide6.QtWidgets import QFileDialog

    from mmforge import resources

    starts: list[str] = []

    def dialog(parent, caption, start, types):
        starts.append(start)
        return [str(resources.probe_image())], types

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", dialog)
    chat = window.chat_view
    chat._pick()
    chat.strip.set_files([])
    chat._pick()
    assert starts == [str(Path.home()), str(resources.probe_image().parent)]


def test_10_offline_words_point_to_what_works_offline(window):
    """Offline, Inspect said "Offline mode is on (HF_HUB_OFFLINE is set)… unset
    HF_HUB_OFFLINE to download it" three times and never named the demo."""
    from mmforge.gui.errors import in_app_words

    message = in_app_words(
        "Offline mode is on (HF_HUB_OFFLINE is set) and Qwen/Qwen2.5-VL-3B-Instruct is not "
        "in the local cache"
    )
    assert message.startswith("Qwen/Qwen2.5-VL-3B-Instruct is not on this computer")
    hint = in_app_words(
        "Check the name's spelling, unset HF_HUB_OFFLINE to download it, or use a local folder"
    )
    assert "unset" not in hint and "Use the demo model" in hint
    network = in_app_words(
        "Check the network connection (or HF_ENDPOINT / a proxy), or use a local folder"
    )
    assert network.endswith("or try Use the demo model (it needs no network)")


def test_19_open_folder_without_a_file_manager_says_so(qtbot, window, package, monkeypatch):
    """Library > Open folder did nothing and said nothing where no file manager answered."""
    import shutil

    from PySide6.QtGui import QDesktopServices
    from PySide6.QtWidgets import QMessageBox

    from mmforge.gui.library_dialog import LibraryDialog

    folder = window.state.packages_folder() / "one"
    shutil.copytree(package("qwen2_5_vl"), folder)
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: False)
    dialog = LibraryDialog(window.state, window)
    qtbot.addWidget(dialog)
    dialog.package_table.selectRow(0)
    dialog.open_button.click()
    [box] = [b for b in dialog.findChildren(QMessageBox) if b.objectName() == "errorDialog"]
    assert "No file manager" in box.text() and str(folder) in box.informativeText()
    assert QApplication.clipboard().text() == str(folder)
    assert box.windowTitle() == "Library – Multimodal Forge"


def test_4_the_page_list_does_not_get_past_a_model_typed_over_the_card(qtbot, window, tiny):
    """Typed Qwen/Qwen2.5-VL-3B-Instruct over the demo's card, then "2 Convert" in the page
    list: Convert offered to convert the demo."""
    model, convert = window.model_view, window.convert_view
    model.source.setText(str(tiny("qwen2_5_vl")))
    with qtbot.waitSignal(window.state.profile_changed, timeout=300_000):
        model.inspect_button.click()
    model.source.setFocus()
    model.source.selectAll()
    qtbot.keyClicks(model.source, "Qwen/Qwen2.5-VL-3B-Instruct")
    window.nav.setCurrentRow(1)  # the page list, not Convert →
    started: list[str] = []
    convert.runner.start = lambda job, args: started.append(job)  # type: ignore[method-assign]
    convert.convert_button.click()
    assert started == []
    boxes = [b for b in convert.findChildren(QMessageBox) if b.objectName() == "errorDialog"]
    assert boxes and "You typed Qwen/Qwen2.5-VL-3B-Instruct" in boxes[-1].text()
    # Putting the card's model back lets it convert.
    model.source.setText(str(tiny("qwen2_5_vl")))
    model._source_edited(model.source.text())
    assert not window.state.selection.typed


def test_14_ctrl_4_and_ctrl_5_put_the_keys_where_the_page_is_typed_into(qtbot, window):
    """After Ctrl+4 (or Ctrl+5) the words typed went nowhere."""
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    for keys, page, field in (
        ("4", window.chat_view, window.chat_view.input),
        ("5", window.compare_view, window.compare_view.input),
        ("1", window.model_view, window.model_view.source),
    ):
        qtbot.keyClick(window, keys, Qt.KeyboardModifier.ControlModifier)
        assert window.current_page() is page
        qtbot.waitUntil(field.hasFocus)


def test_18_a_restart_brings_back_the_last_model_one_inspect_away(qtbot, window, tmp_path):
    """After a restart the Model page came back empty; the recent list showed paths cut
    off under a sideways scroll bar."""
    from PySide6.QtCore import QSettings

    from mmforge.gui.main_window import MainWindow

    folder = tmp_path / "my-vlm"
    window.state.set_source(str(folder))
    window.state.set_source("Qwen/Qwen2.5-VL-3B-Instruct")
    window.state.settings.sync()
    again = MainWindow(QSettings(window.state.settings.fileName(), QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    model = again.model_view
    assert model.source.text() == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert "Press Inspect to read it again" in model.status.text()
    model.refresh_known()
    shown = [model.known.item(i).text() for i in range(model.known.count())]
    assert shown[:2] == ["Qwen/Qwen2.5-VL-3B-Instruct", "my-vlm (folder)"]
    assert model.known.item(1).data(Qt.ItemDataRole.UserRole) == str(folder)
    assert model.known.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff


def test_21_progress_and_parts_are_said_in_words(window):
    """Convert said "done: package written to … (1 of 1 steps)" and "Parts: decoder +
    vision_encoder + audio_encoder + embedding"; the Model page "demo: building the demo
    checkpoint"."""
    from mmforge.backend.jobs import Progress
    from mmforge.gui.convert_result import part_words

    progress = window.convert_view.progress
    progress.start()
    progress.show_progress(Progress("done", 1, 1, "steps", "package written to /tmp/x"))
    assert progress.stage.text() == "Done: package written to /tmp/x"
    progress.show_progress(Progress("weights", 3, 12, "tensors", "q_proj"))
    assert progress.stage.text() == "Placing the weights: q_proj (3 of 12 tensors)"
    assert progress.stage_bar.format() == "Placing the weights: %p%"
    assert part_words(["decoder", "vision_encoder", "audio_encoder", "embedding"]) == (
        "language model, image encoder, audio encoder and embedding"
    )
    model = window.model_view
    model._on_progress(Progress("demo", 0, 1, "", "offline, a few seconds"))
    assert model.status.text() == "Building the demo model: offline, a few seconds"
