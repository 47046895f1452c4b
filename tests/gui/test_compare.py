"""The Compare page: two packages of one model answer one prompt side by side."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat.compare import divergence, first_difference, summary
from mmforge.backend.library import MANIFEST
from tests.gui.chatting import LONG
from tests.hung_worker import alive


def _dialogs(window) -> list[QMessageBox]:
    return [b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"]


def _relabelled(folder: Path, copy: Path, **fields) -> Path:
    """A copy of the package `folder` whose manifest says `fields` instead."""
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest.update(fields)
    (copy / MANIFEST).write_text(json.dumps(manifest))
    return copy


def _another_model(folder: Path, copy: Path) -> Path:
    """A copy of the package that says it was converted from another model."""
    digest = {"config": "config-sha256-v1:other", "weights": "tensors-sampled-sha256-v1:other"}
    return _relabelled(folder, copy, source="someone/another-model", checkpoint_digest=digest)


def _empty_library(window, tmp_path: Path):
    """The Compare page over a packages folder that holds nothing yet; (page, folder)."""
    root = tmp_path / "packages"
    root.mkdir()
    window.state.settings.setValue("packages_folder", str(root))
    view = window.compare_view
    window.go(4)
    view.pair.refresh()
    return view, root


def _f32_and_int4(window, package):
    """The Compare page with the tiny model's f32 package as A and its int4 one as B."""
    f32, int4 = package("qwen2_5_vl"), package("qwen2_5_vl", "int4")
    view = window.compare_view
    window.go(4)
    view.pair.choose_pair(f32, int4)
    return view


def _compare(qtbot, view) -> None:
    """Click Compare and wait until both workers are idle again (the page's `finished`)."""
    with qtbot.waitSignal(view.finished, timeout=LONG):
        view.compare_button.click()


def test_two_precisions_answer_side_by_side_and_where_they_part_is_marked(qtbot, window, package):
    f32, int4 = package("qwen2_5_vl"), package("qwen2_5_vl", "int4")
    view = window.compare_view
    window.compare_action.trigger()  # Chat > Compare two packages of a model…
    assert window.current_page() is view
    view.pair.choose_pair(f32, int4)
    assert [view.pair.chosen(0), view.pair.chosen(1)] == [f32, int4]
    turns: dict[str, object] = {}
    view.bridges[0].turn.connect(lambda t: turns.setdefault("A", t))
    view.bridges[1].turn.connect(lambda t: turns.setdefault("B", t))
    view.max_tokens.setValue(24)
    view.strip.add(resources.probe_image(), IMAGE)
    view.input.setPlainText("What is in this picture?")
    _compare(qtbot, view)

    a, b = view.columns
    assert not _dialogs(window)
    assert set(turns) == {"A", "B"}
    for column, turn in zip(view.columns, (turns["A"], turns["B"]), strict=True):
        assert column.turn is turn and turn.token_ids  # both answered
        assert column.text() == "".join(column.pieces)  # all it streamed is shown
        assert len(column.pieces) == len(turn.token_ids)
        speed = column.speed.text()
        assert "tokens/s" in speed and "first token after" in speed
        assert f"{turn.stats.decode_tokens_per_s:.1f} tokens/s" in speed
        assert column.loaded.text().startswith("Qwen2.5-VL on CPU")  # what loading took
    assert "(f32)" in a.title.text() and "(int4)" in b.title.text()

    # The marker is where the two lists of token ids part.
    ids_a, ids_b = turns["A"].token_ids, turns["B"].token_ids
    index = first_difference(ids_a, ids_b)
    d = divergence(ids_a, ids_b, a.pieces, b.pieces)
    assert view.verdict.text().startswith(summary(d, len(ids_a), len(ids_b), "f32", "int4"))
    assert "as fast as" in view.verdict.text() or "same speed" in view.verdict.text()
    if index is None:
        assert a.marked is None and b.marked is None and a.text() == b.text()
        return
    assert d.agreed == index
    for column, span in ((a, d.a_span), (b, d.b_span)):
        assert column.marked == span
        assert span[0] == len("".join(column.pieces[:index]))
        selections = column.answer.extraSelections()
        if span[0] < len(column.text()):
            mark = selections[0]  # the parting token; then the rest, tinted
            assert mark.cursor.selectionStart() == span[0]
            assert mark.cursor.selectionEnd() >= span[1]
            if len(selections) > 1:
                assert selections[1].cursor.selectionEnd() == len(column.text())
        else:
            assert selections == []  # this answer ended where the other goes on
    # What comes before the mark is the same text in both columns.
    assert a.text()[: d.a_span[0]] == b.text()[: d.b_span[0]]


def test_two_models_are_refused_before_anything_loads(qtbot, window, package, tmp_path):
    f32 = package("qwen2_5_vl")
    other = _another_model(f32, tmp_path / "other-model")
    view = window.compare_view
    window.go(4)
    view.pair.choose_pair(f32, other)
    view.input.setPlainText("Hello")
    view.compare_button.click()
    qtbot.waitUntil(lambda: bool(_dialogs(window)))
    [box] = _dialogs(window)
    assert "different models" in box.text()
    assert "someone/another-model" in box.informativeText()
    assert not view.running and all(s is None for s in view.sessions)
    assert all(bridge._thread is None for bridge in view.bridges)  # no worker started


def test_a_package_that_fails_to_load_is_said_and_close_ends_both_workers(
    qtbot, window, package, tmp_path
):
    f32, int4 = package("qwen2_5_vl"), package("qwen2_5_vl", "int4")
    broken = Path(shutil.copytree(int4, tmp_path / "broken-int4"))
    for model in broken.glob("*.onnx"):
        model.write_bytes(b"not a model")
    view = window.compare_view
    window.go(4)
    view.pair.choose_pair(f32, broken)
    view.input.setPlainText("Hello")
    with qtbot.waitSignal(view.finished, timeout=LONG):
        view.compare_button.click()
    qtbot.waitUntil(lambda: bool(_dialogs(window)), timeout=LONG)
    [box] = _dialogs(window)
    assert box.text().startswith("Package B could not be loaded")
    assert view.columns[1].speed.text().startswith("Not loaded")
    assert view.columns[0].turn is None  # A did not answer alone
    box.close()

    # Both load now; closing the window ends both workers.
    view.pair.choose_pair(f32, int4)
    view.max_tokens.setValue(4)
    _compare(qtbot, view)
    assert all(c.turn is not None for c in view.columns)
    pids = [bridge._job.process.pid for bridge in view.bridges]
    assert all(alive(pid) for pid in pids)
    window.close()
    assert not any(alive(pid) for pid in pids)
    assert all(bridge._thread is None for bridge in view.bridges)


def test_the_default_pair_is_the_current_package_and_its_other_precision(
    qtbot, window, package, tmp_path
):
    root = tmp_path / "packages"
    f32 = Path(shutil.copytree(package("qwen2_5_vl"), root / "model-f32"))
    int4 = Path(shutil.copytree(package("qwen2_5_vl", "int4"), root / "model-int4"))
    _another_model(package("qwen2_5_vl"), root / "other-f32")
    window.state.settings.setValue("packages_folder", str(root))
    window.state.set_package(str(f32))
    window.go(4)
    view = window.compare_view
    assert [view.pair.chosen(0), view.pair.chosen(1)] == [f32, int4]
    assert view.pair.refusal() is None
    assert view.pair.pickers[0].count() == 3  # the whole library is offered
    window.state.set_package(str(int4))  # another package: the pair follows it
    assert [view.pair.chosen(0), view.pair.chosen(1)] == [int4, f32]


def test_stop_stops_the_answer_under_way_and_the_other_does_not_start(qtbot, window, package):
    view = _f32_and_int4(window, package)
    view.max_tokens.setValue(1024)
    view.input.setPlainText("Tell me a long story.")
    # Stop as soon as A's first token is drawn: B, waiting its turn, must never start.
    view.bridges[0].token.connect(lambda _: view.stop_button.click())
    asked_b: list[bool] = []
    view.bridges[1].busy.connect(lambda busy: busy and asked_b.append(True))
    _compare(qtbot, view)
    a, b = view.columns
    assert a.turn is not None and a.turn.token_ids
    assert not asked_b and b.turn is None
    assert b.speed.text() == "Not run: stopped."
    assert view.verdict.text() == "" and not view.running
    assert view.compare_button.isEnabled() and not view.stop_button.isEnabled()


def test_both_at_once_answer_both_and_no_speed_ratio_is_claimed(qtbot, window, package):
    view = _f32_and_int4(window, package)
    view.pair.together.setChecked(True)
    assert "at the same time" in view.note.text()
    view.max_tokens.setValue(8)
    view.input.setPlainText("Hello")
    _compare(qtbot, view)
    assert all(c.turn is not None and c.turn.token_ids for c in view.columns)
    assert view.verdict.text() and "as fast as" not in view.verdict.text()


def test_a_local_copy_of_the_model_is_one_model_and_a_doubtful_pair_is_asked_once(
    qtbot, window, package, tmp_path, monkeypatch
):
    f32, int4 = package("qwen2_5_vl"), package("qwen2_5_vl", "int4")
    # Converted from a local copy of the same checkpoint: the digests say it is one model.
    local = _relabelled(int4, tmp_path / "from-a-copy", source=str(tmp_path / "copy-of-it"))
    view = window.compare_view
    window.go(4)
    view.pair.choose_pair(f32, local)
    assert view.pair.refusal() is None and view.pair.doubt() is None
    # A fine-tune (the same settings, other weights): asked before anything loads.
    weights = {"weights": "tensors-sampled-sha256-v1:tuned"}
    digest = {**json.loads((f32 / MANIFEST).read_text())["checkpoint_digest"], **weights}
    tuned = _relabelled(int4, tmp_path / "tuned", source="me/tuned", checkpoint_digest=digest)
    view.pair.choose_pair(f32, tuned)
    assert view.pair.refusal() is None and "different weights" in view.pair.doubt()
    asked: list[str] = []

    def answer(reply):
        def question(parent, title, text, *args):
            asked.append(text)
            return reply

        return question

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Cancel))
    view.max_tokens.setValue(4)
    view.input.setPlainText("Hello")
    view.compare_button.click()
    assert len(asked) == 1 and "may not be of one model" in asked[0]
    assert not view.running and all(bridge._thread is None for bridge in view.bridges)
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Yes))
    _compare(qtbot, view)
    assert len(asked) == 2 and all(c.turn is not None for c in view.columns)
    _compare(qtbot, view)  # the same pair again: not asked again
    assert len(asked) == 2


def test_the_page_says_what_to_convert_when_there_is_nothing_to_compare(window, package, tmp_path):
    view, root = _empty_library(window, tmp_path)
    assert view.pair.advice.isVisibleTo(view) and "No packages yet" in view.pair.advice.text()
    only = Path(shutil.copytree(package("qwen2_5_vl"), root / "only-f32"))
    view.pair.refresh()
    assert f"No other package of {only.name}'s model" in view.pair.advice.text()
    shutil.copytree(package("qwen2_5_vl", "int4"), root / "only-int4")
    view.pair.refresh()
    assert view.pair.advice.text() == "" and not view.pair.advice.isVisibleTo(view)


def test_two_packages_that_do_not_fit_together_answer_one_by_one(
    qtbot, window, package, monkeypatch
):
    import mmforge.backend.memory as memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 10**6)  # neither pair fits
    view = _f32_and_int4(window, package)
    view.max_tokens.setValue(6)
    view.input.setPlainText("Hello")
    # Both at once cannot run: refused in a dialog, nothing loads.
    view.pair.together.setChecked(True)
    view.compare_button.click()
    qtbot.waitUntil(lambda: bool(_dialogs(window)))
    [box] = _dialogs(window)
    assert "do not fit" in box.text() and "Untick Both at once" in box.informativeText()
    assert all(bridge._thread is None for bridge in view.bridges)
    box.close()
    view.pair.together.setChecked(False)

    # One by one: A's worker is gone before B's loads; both answer, compared as usual.
    a_alive_when_b_ready: list[bool] = []

    def b_ready(info):
        job = view.bridges[0]._job
        a_alive_when_b_ready.append(job is not None and alive(job.process.pid))

    view.bridges[1].ready.connect(b_ready)
    for _ in range(2):  # again: B's worker from the first run is closed before A loads
        _compare(qtbot, view)
        assert all(c.turn is not None for c in view.columns)
        assert view.verdict.text()
    assert a_alive_when_b_ready == [False, False]
    assert view.sessions[0] is None and view.sessions[1] is not None
    assert not [b for b in _dialogs(window) if b.isVisible()]  # no error on the way


def test_compare_with_nothing_to_compare_says_so(window, package, tmp_path):
    """Compare with no packages, or with no prompt, did nothing and said nothing."""
    view, root = _empty_library(window, tmp_path)
    view.compare_button.click()
    before = _dialogs(window)
    assert [d.text() for d in before] == ["Pick two packages to compare"]
    shutil.copytree(package("qwen2_5_vl"), root / "m-f32")
    shutil.copytree(package("qwen2_5_vl", "int4"), root / "m-int4")
    view.pair.refresh()
    view.input.clear()
    view.compare_button.click()
    assert [d.text() for d in _dialogs(window) if d not in before] == ["Nothing to compare yet"]
