"""Issue 25 items 5, 11 and 12: no stale screens, "will it fit", plain words first."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from mmforge.backend.inspect import Sizes
from tests.gui.chatting import LONG, load

GB = 10**9


@pytest.fixture
def asked(monkeypatch):
    """QMessageBox.question answered Cancel; the texts it was asked, in order."""
    texts: list[str] = []

    def question(*args, **kwargs):
        texts.append(str(args[2]))
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", question)
    return texts


def _close_errors(win) -> None:
    for box in win.findChildren(QMessageBox):
        box.close()


def _inspect(qtbot, window, folder: Path):
    model = window.model_view
    model.source.setText(str(folder))
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    return window.state.profile


BIG = Sizes(
    source="safetensors",
    parameters={"total": 7 * GB},
    checkpoint_bytes=15 * GB,
    package_bytes={"f32": 30 * GB, "f16": 15 * GB, "int8": 8 * GB, "int4": int(3.1 * GB)},
    memory_bytes={"f32": 31 * GB, "f16": 16 * GB, "int8": 9 * GB, "int4": int(3.1 * GB)},
    convert_peak_bytes=12 * GB,
    convert_peak_by_dtype={"f32": 12 * GB, "f16": 12 * GB, "int8": 12 * GB, "int4": 12 * GB},
)


# -- item 5: stale screens ---------------------------------------------------------------


def test_5_a_new_inspection_takes_convert_away_from_the_old_card(qtbot, window, tiny, tmp_path):
    model = window.model_view
    _inspect(qtbot, window, tiny("qwen2_5_vl"))
    assert model.next_button.isEnabled()
    # (the profile comes before the job's end; Inspect is offered again at the end)
    qtbot.waitUntil(model.inspect_button.isEnabled, timeout=LONG)
    model.source.setText(str(tmp_path / "no-such-model"))
    with qtbot.waitSignal(model.runner.failed, timeout=LONG):
        model.inspect_button.click()
        # While it reads, the card says it is the previous model's; no Convert → to it.
        assert not model.next_button.isEnabled()
        assert "Reading" in model.card.toPlainText()
    # It failed: the old model is not offered under the new name.
    qtbot.waitUntil(lambda: not model.runner.running)
    assert not model.next_button.isEnabled()
    assert "Could not read that model" in model.card.toPlainText()
    assert "Qwen2.5-VL" not in model.card.toPlainText()
    _close_errors(window)


def test_5_the_convert_page_forgets_the_previous_run_for_a_new_model(window, tmp_path):
    convert = window.convert_view
    # What a finished conversion left on the page.
    convert.stage_bar.setFormat("finished")
    convert.stage_bar.setValue(1000)
    convert.overall.setValue(1000)
    convert.summary.setText("<b>Qwen2.5-VL</b> → package in /old")
    convert.stage.setText("Done: ONNX Runtime GenAI loads the package and generates.")
    for button in (convert.next_button, convert.open_button, convert.chat_button):
        button.setEnabled(True)
    window.state.set_source(str(tmp_path / "another-model"))
    assert convert.stage_bar.format() != "finished" and convert.stage_bar.value() == 0
    assert convert.overall.value() == 0 and not convert.summary.text()
    assert not convert.stage.text()
    for button in (convert.next_button, convert.open_button, convert.chat_button):
        assert not button.isEnabled()
    assert convert.output.text().endswith(f"another-model-{convert.dtype.currentText()}")


def test_5_a_deleted_package_leaves_the_list_and_picking_it_keeps_the_model(
    qtbot, window, package, tmp_path, monkeypatch
):
    from mmforge.gui.library_dialog import LibraryDialog

    chat = window.chat_view
    root = window.state.packages_folder()
    working, doomed, other = root / "working", root / "doomed", root / "other"
    for folder in (working, doomed, other):
        shutil.copytree(package("qwen2_5_vl"), folder)
    load(qtbot, chat, working)
    chat.refresh_library()
    listed = [chat.library.itemData(i) for i in range(chat.library.count())]
    assert str(doomed) in listed
    # Deleted behind the list's back (another program): picking it says so, the model stays.
    shutil.rmtree(doomed)
    with qtbot.assertNotEmitted(chat.bridge.closed, wait=300):
        chat.library.activated.emit(listed.index(str(doomed)))
    assert chat._loaded and chat.session_info.package == str(working)
    assert "no longer there" in chat.info.text()
    assert str(doomed) not in [chat.library.itemData(i) for i in range(chat.library.count())]
    # Deleted in File > Library: the drop-down follows at once.
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    dialog = LibraryDialog(window.state, window)
    row = [e.folder for e in dialog._packages].index(other)
    dialog.package_table.selectRow(row)
    dialog.delete_package_button.click()
    dialog.close()
    assert str(other) not in [chat.library.itemData(i) for i in range(chat.library.count())]
    assert chat._loaded


def test_5_converting_over_an_existing_package_asks_first_naming_a_loaded_one(
    qtbot, window, package, tiny, tmp_path, asked
):
    chat, convert = window.chat_view, window.convert_view
    existing = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), existing)
    load(qtbot, chat, existing)
    window.state.set_source(str(tiny("qwen2_5_vl")))
    convert.output.setText(str(existing))
    convert.convert_button.click()
    assert len(asked) == 1 and "already holds a package" in asked[0]
    assert "loaded in Chat" in asked[0]
    assert not convert.runner.running  # Cancel: nothing started, nothing replaced
    # A new folder is not asked about.
    convert.output.setText(str(tmp_path / "fresh"))
    assert convert._confirm_replace()
    assert len(asked) == 1


def test_5_chat_with_it_reloads_a_package_converted_again_since_it_was_loaded(
    qtbot, window, package, tmp_path
):
    chat = window.chat_view
    pkg = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), pkg)
    load(qtbot, chat, pkg)
    with qtbot.assertNotEmitted(chat.bridge.ready, wait=300):
        chat.chat_with(str(pkg))  # the same package, unchanged: kept
    config = pkg / "genai_config.json"
    later = config.stat().st_mtime_ns + 5 * 10**9
    os.utime(config, ns=(later, later))  # what converting over it does
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.chat_with(str(pkg))


# -- item 11: will it fit ----------------------------------------------------------------


def test_11_recommend_the_best_precision_this_memory_runs(monkeypatch):
    from mmforge.gui import fit

    laptop = fit.Machine(16 * GB, 10 * GB, 500 * GB, has_gpu=False)
    assert fit.recommendation(BIG, laptop) == (
        "int8 fits: 9.0 GB of your 16.0 GB memory (f16 would need 16.0 GB)."
    )
    small = dataclasses.replace(laptop, memory_bytes=8 * GB)
    assert fit.recommendation(BIG, small).startswith("int4 fits: 3.1 GB of your 8.0 GB")
    tiny_machine = dataclasses.replace(laptop, memory_bytes=2 * GB)
    assert fit.recommendation(BIG, tiny_machine).startswith("Too big for this computer")
    full_disk = dataclasses.replace(laptop, disk_free_bytes=5 * GB)
    assert "more than the free disk" in fit.recommendation(BIG, full_disk)
    # The machine's own figures, as the card reads them.
    monkeypatch.setattr(fit, "total_memory_bytes", lambda: 8 * GB)
    assert fit.this_machine(Path.cwd()).memory_bytes == 8 * GB


def test_11_the_card_says_what_fits_and_convert_warns_before_it_would_not(
    qtbot, window, tiny, monkeypatch, asked
):
    from mmforge.gui import fit

    monkeypatch.setattr(fit, "total_memory_bytes", lambda: 8 * GB)
    monkeypatch.setattr(fit, "disk_free_bytes", lambda folder: 20 * GB)
    profile = _inspect(qtbot, window, tiny("qwen2_5_vl"))
    big = dataclasses.replace(profile, sizes=BIG)
    window.model_view._on_result(big)
    card = window.model_view.card.toPlainText()
    assert "int4 fits: 3.1 GB of your 8.0 GB memory" in card
    # Convert f32: more memory than the machine has and more disk than is free.
    convert = window.convert_view
    window.model_view.next_button.click()
    convert.dtype.setCurrentText("f32")
    convert.convert_button.click()
    assert len(asked) == 1 and "Convert anyway?" in asked[0]
    assert "12.0 GB of memory" in asked[0] and "30.0 GB of disk" in asked[0]
    assert not convert.runner.running


def test_11_a_cuda_target_without_a_gpu_says_the_package_is_for_another_machine(window):
    convert = window.convert_view
    convert._has_gpu = False
    convert.target.setCurrentText("cuda")
    assert "no GPU: the package is for another machine" in convert.target_words.text()
    assert "NVIDIA graphics card" in convert.target_words.text()
    convert.target.setCurrentText("cpu")
    assert "any computer's processor" in convert.target_words.text()
    assert "no GPU" not in convert.target_words.text()
    convert._has_gpu = True
    convert.target.setCurrentText("cuda")
    assert "no GPU" not in convert.target_words.text()


# -- item 12: plain words first, details one click away -----------------------------------


def test_12_each_page_leads_with_a_plain_sentence_and_keeps_details_collapsed(qtbot, window, tiny):
    model, convert, verify = window.model_view, window.convert_view, window.verify_view
    _inspect(qtbot, window, tiny("qwen2_5_vl"))
    card = model.card.toPlainText()
    assert "A Qwen2.5-VL chat model" in card and "reads text and pictures" in card
    for word in ("Projector", "Token ids"):
        assert word not in card and word in model.details_card.toPlainText()
    assert not model.details.expanded() and not model.details_card.isVisible()
    model.details.toggle.click()
    assert model.details_card.isVisible()

    model.next_button.click()
    assert convert.lead.text().startswith("Converting makes a Qwen2.5-VL package of about")
    assert not convert.details.expanded() and not convert.weights.isVisible()
    convert.dtype.setCurrentText("int4")
    assert "about an eighth of its f32 size, slightly different answers" in (
        convert.dtype_words.text()
    )
    convert.dtype.setCurrentText("f32")
    assert "the original model exactly" in convert.dtype_words.text()

    window.show_page(verify)
    assert "answers like the original model" in verify.lead.text()
    assert not verify.details.expanded() and not verify.table.isVisible()
    assert "max abs diff" in [
        verify.table.horizontalHeaderItem(i).text() for i in range(verify.table.columnCount())
    ]


# -- item 12 (settings) and item 3 (a full context's other choices) ----------------------


def test_12_the_answer_settings_use_the_chat_apps_names_and_say_what_each_does(window):
    """Issue 31 item 9: every chat app says Temperature, Top P, Top K and Seed; the plain
    names ("Adventurousness", ...) made the settings unrecognisable."""
    from PySide6.QtWidgets import QLabel

    box = window.chat_view.settings_box
    named = {
        box.temperature: ("Temperature", "adventurous"),
        box.top_p: ("Top P", "share of the chances"),
        box.top_k: ("Top K", "most likely next words"),
        box.seed: ("Seed", "same answer again"),
    }
    shown = {label.buddy(): label.text() for label in box.findChildren(QLabel) if label.buddy()}
    for widget, (name, plain) in named.items():
        assert widget.accessibleName() == shown[widget] == name
        assert plain in widget.toolTip()


def test_3_a_full_context_can_go_on_in_a_new_conversation_said_plainly(window):
    box = window.chat_view.settings_box
    # Short in the box (issue 31: a long one was cut), said whole in each choice's tooltip.
    tips = {
        box.context_full.itemData(i): box.context_full.itemData(i, Qt.ItemDataRole.ToolTipRole)
        for i in range(4)
    }
    assert tips["carry"] == "Go on in a new conversation that starts with the latest turns."
    assert tips["summary"] == (
        "Go on in a new conversation that starts with a summary the model writes."
    )
    box.context_full.setCurrentIndex(box.context_full.findData("summary"))
    assert box.options()["context_full"] == "summary"
    assert "context" not in box.context_full.accessibleName()


def test_3_a_continued_conversation_shows_its_summary_and_opens_the_earlier_one(window):
    from PySide6.QtCore import QUrl

    from mmforge.backend.chat.conversations import Conversation, Message

    chat = window.chat_view
    earlier = Conversation(
        id="20260101-000000-aaaaaaaa",
        package="p",
        title="Trip plans",
        messages=[Message("user", "Where to?"), Message("assistant", "Lisbon.")],
    )
    chat.store.save(earlier, touch=False)
    later = Conversation(
        id="20260101-000001-bbbbbbbb",
        package="p",
        title="Continued: Trip plans",
        continues=earlier.id,
        summary="We chose Lisbon.",
        messages=[Message("user", "And when?"), Message("assistant", "May.")],
    )
    chat.store.save(later, touch=False)
    chat.refresh_conversations()
    chat.open_conversation(later.id)
    text = chat.transcript.toPlainText()
    assert "goes on from an earlier one" in text
    assert (
        text.index("Summary of the earlier conversation, written by the model")
        < text.index("We chose Lisbon.")
        < text.index("And when?")
    )
    chat._on_anchor(QUrl("continues:"))
    assert chat.conversation.id == earlier.id and "Lisbon." in chat.transcript.toPlainText()


def test_3_the_status_line_says_why_an_answer_waits_for_a_summary(window):
    from mmforge.backend.chat.carry import SUMMARISING

    chat = window.chat_view
    chat.bridge.note.emit(SUMMARISING)
    assert chat.status.text() == SUMMARISING and "summarising" in SUMMARISING


def test_verify_card_says_what_f16_and_int4_each_prove(qapp):
    """An f16 PASS is within float16's bounds, not exact: the card must not say exact."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.backend.verify.rounding import RoundingCost
    from mmforge.gui.theme import colours
    from mmforge.gui.verify_view import summary_html

    def report(dtype: str) -> VerifyReport:
        cost = RoundingCost(dtype, 12, 32, 0.97, 0.001, (10.0, 10.1), None, None, "fair")
        tokens = {"matched": 32, "total": 32}
        return VerifyReport(
            "PASS", None, None, [], tokens, "Qwen2.5-VL", dtype, "p", "r", rounding=cost
        )

    f16 = summary_html(report("f16"), colours())
    assert "within float16" in f16 and "exactly" not in f16
    assert "on this prompt f16 changes 3% of the next words the model picks" in f16
    assert "all 32 word pieces of the answer are the same" in f16
    assert report("f16").summary().startswith("PASS: the f16 package matches the original within")
    int4 = summary_html(report("int4"), colours())
    assert "computes exactly what the original computes with int4 weights" in int4


def test_verify_card_never_calls_an_approximation_a_pass(qapp):
    """Issue 30: an approximated package that matches transformers run the same way is
    APPROXIMATE, in the warning colour, with what differs from the model as released."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.gui.theme import colours
    from mmforge.gui.verify_view import summary_html, verdict_colour

    what = "each picture is seen whole, where the release also cuts it into tiles"
    report = VerifyReport(
        "APPROXIMATE",
        None,
        None,
        [],
        {"matched": 8, "total": 8},
        "Idefics3",
        "f32",
        "p",
        "r",
        approximation=what,
    )
    card = summary_html(report, colours())
    assert "APPROXIMATE" in card and "PASS" not in card
    assert "not the model as released. " + what in card
    assert verdict_colour("APPROXIMATE", colours()) == colours().warn
    assert report.summary().startswith("APPROXIMATE: every stage matches transformers run")


def test_a_second_precision_gets_its_own_folder_by_default(window, tmp_path):
    """The default folder was one per model: converting at int4 after f16 asked to replace
    the f16 package, and Compare then had only one package of the model."""
    convert = window.convert_view
    window.state.set_source(str(tmp_path / "my-model"))
    convert.dtype.setCurrentText("f16")
    f16 = convert.output.text()
    assert f16.endswith("my-model-f16")
    convert.dtype.setCurrentText("int4")
    assert convert.output.text().endswith("my-model-int4") and convert.output.text() != f16
    convert.target.setCurrentText("cuda")
    assert convert.output.text().endswith("my-model-int4-cuda")
    convert.target.setCurrentText("cpu")
    # A folder the user chose stays when the precision changes.
    convert.output.setText(str(tmp_path / "mine"))
    convert.dtype.setCurrentText("f16")
    assert convert.output.text() == str(tmp_path / "mine")


def test_5_a_new_run_does_not_show_the_last_ones_finished(window):
    """For the first seconds of a second conversion the bar still read "finished" and the
    line "Done: …"; after Cancel the bar still read "finished"."""
    progress = window.convert_view.progress
    progress.finished()
    progress.start()
    assert progress.stage_bar.format() == "starting" and progress.stage_bar.maximum() == 0
    assert progress.stage.text().startswith("Starting")
    progress.cancelled()
    assert progress.stage_bar.format() == "cancelled"
    progress.start()
    progress.failed("no room")
    assert progress.stage_bar.format().startswith("failed") and progress.stage_bar.maximum()


def test_a_picture_stretched_for_the_model_is_drawn_at_the_shape_it_was_taken(qapp, tmp_path):
    """The GUI review: a 900×600 photo sent to InternVL (448 × 448 for the model) showed
    as a squashed square in the transcript."""
    from PIL import Image

    from mmforge.gui.transcript import THUMB, _thumbnail

    copy = tmp_path / "photo.png"
    Image.new("RGB", (448, 448), (90, 140, 200)).save(copy)
    drawn = _thumbnail(copy, (900, 600))
    assert (drawn.width(), drawn.height()) == (THUMB, THUMB * 600 // 900)
    assert (_thumbnail(copy).width(), _thumbnail(copy).height()) == (THUMB, THUMB)
    small = _thumbnail(copy, (150, 100))  # smaller than THUMB: its own size
    assert (small.width(), small.height()) == (150, 100)


def test_a_phone_photo_is_drawn_upright_while_its_answer_streams(qapp, tmp_path):
    """The GUI review (Gemma 3n): while the answer streamed, the message drew the user's
    own EXIF-rotated phone JPEG sideways; once answered, chat's upright copy was drawn."""
    from PIL import Image

    from mmforge.gui.transcript import THUMB, _thumbnail

    exif = Image.Exif()
    exif[0x0112] = 6  # stored 120×64, shown 64×120
    phone = tmp_path / "phone.jpg"
    Image.new("RGB", (120, 64), (200, 30, 30)).save(phone, quality=92, exif=exif)
    drawn = _thumbnail(phone)
    assert (drawn.width(), drawn.height()) == (64, 120)
    big = tmp_path / "big.jpg"
    Image.new("RGB", (1200, 640), (20, 30, 200)).save(big, quality=90, exif=exif)
    drawn = _thumbnail(big)
    assert drawn.height() == THUMB and drawn.width() < THUMB // 2 + 8


def test_a_split_picture_is_drawn_as_its_whole_part(qapp, tmp_path):
    """Idefics2 with image splitting: the runtime's copy is a canvas of five parts under a
    header row; the transcript draws only the whole part (Attachment.shown_box), at the
    shape the picture was taken."""
    from PIL import Image

    from mmforge.gui.transcript import _thumbnail

    canvas = Image.new("RGB", (5 * 70, 71), (0, 0, 0))
    canvas.paste(Image.new("RGB", (70, 28), (250, 20, 20)), (4 * 70, 1))
    copy = tmp_path / "canvas.png"
    canvas.save(copy)
    drawn = _thumbnail(copy, (300, 120), (280, 1, 70, 28))
    assert (drawn.width(), drawn.height()) == (200, 80)  # 300×120 fitted into THUMB
    centre = drawn.pixelColor(drawn.width() // 2, drawn.height() // 2)
    assert (centre.red(), centre.green()) == (250, 20)  # the whole part, not the header
    whole = _thumbnail(copy)  # no box: the canvas itself
    assert (whole.width(), whole.height()) == (200, 40)


def test_verify_and_attach_offer_sound_only_for_a_package_that_hears(
    qtbot, window, package, monkeypatch
):
    """The GUI review: an image-only package's Verify page offered "the built-in probe
    image and audio clip" and an audio field, and Attach… listed audio files."""
    from PySide6.QtWidgets import QFileDialog

    verify = window.verify_view
    window.state.set_package(str(package("qwen2_5_vl")))
    assert verify.probe.text() == "Use the built-in probe image"
    assert not verify.audio.isVisibleTo(verify)
    offered: list[str] = []

    def dialog(parent, title, where, types):
        offered.append(types)
        return [], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", dialog)
    verify.pick_files()
    window.state.set_package(str(package("gemma4")))
    assert verify.probe.text() == "Use the built-in probe image and audio clip"
    assert verify.audio.isVisibleTo(verify)
    verify.pick_files()
    assert offered[0].startswith("Images (") and offered[1].startswith("Images and audio (")
    from tests.gui.chatting import load

    chat = window.chat_view
    load(qtbot, chat, package("qwen2_5_vl"))
    chat._pick()  # Attach…
    assert offered[2].startswith("Images (")


def test_a_drafts_picture_is_shown_upright_and_small(qapp, tmp_path):
    """The GUI review: a phone photo stored sideways (EXIF Orientation 6) showed sideways
    in the draft's chip, though the model and the transcript see it upright."""
    from PIL import Image

    from mmforge.gui.chat_input import CHIP, _chip_picture

    stored = Image.new("RGB", (90, 60), (200, 30, 30))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display: a 60 × 90 portrait
    phone = tmp_path / "phone.jpg"
    stored.save(phone, exif=exif)
    chip = _chip_picture(phone)
    assert (chip.width(), chip.height()) == (CHIP * 60 // 90, CHIP)
    assert _chip_picture(tmp_path / "missing.png").isNull()


def test_the_librarys_first_column_is_not_squeezed_by_a_long_model_name(qapp):
    """The screenshots: a model named by a long cache path left the Package column three
    letters wide ("cka"); the other columns stop at MAX_COLUMN and every cell's tooltip
    holds its whole text."""
    from PySide6.QtWidgets import QTableWidget

    from mmforge.gui.library_dialog import MAX_COLUMN, _fill

    table = QTableWidget(0, 3)
    table.resize(900, 300)
    long_name = "Qwen2.5-VL (" + "/tmp/cache/" * 20 + "Qwen2.5-VL-demo)"
    _fill(table, [("/home/me/packages/demo-int4", long_name, "int4")])
    assert table.columnWidth(1) == MAX_COLUMN
    assert "Qwen2.5-VL-demo" in table.item(0, 1).toolTip()
