"""Issue 31, item 2: one truth about what the user picked, across pages and restarts.

Each test here failed on main before gui/selection.py (see the report of the `state`
branch): pages kept the previous model's package, report and pair.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtCore import QSettings, Qt

LONG = 300_000


def _copy_package(package: Path, folder: Path, source: str) -> Path:
    """A copy of a converted package whose manifest says it came from `source`."""
    shutil.copytree(package, folder)
    manifest = folder / "mmforge_manifest.json"
    data = json.loads(manifest.read_text())
    data["source"] = source
    manifest.write_text(json.dumps(data))
    return folder


def _inspect(qtbot, window, source: Path) -> None:
    model = window.model_view
    model.source.setText(str(source))
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    # The profile comes before the job's end: a second Inspect while the runner still
    # runs is ignored (as a double click is), so wait for the end too, until the page
    # has taken it (Inspect enabled again: `running` turns false before `finished` is
    # handled).
    qtbot.waitUntil(
        lambda: not model.runner.running and model.inspect_button.isEnabled(), timeout=LONG
    )


def _chats_with(window, monkeypatch) -> list[str]:
    """What Chat is asked to load (recorded, not loaded)."""
    asked: list[str] = []
    monkeypatch.setattr(window.chat_view, "chat_with", asked.append)
    return asked


def test_pick_a_convert_verify_pick_b_no_page_shows_or_uses_a(
    qtbot, window, tiny, tmp_path, monkeypatch
):
    """Model A converted and verified, then model B picked: Convert, Verify and Compare
    show none of A's results, and none of their buttons goes on with A's package."""
    convert, verify, compare = window.convert_view, window.verify_view, window.compare_view
    model_a = tiny("qwen2_5_vl")
    model_b = tmp_path / "model-b"
    shutil.copytree(model_a, model_b)  # another model (another source), quick to inspect
    _inspect(qtbot, window, model_a)
    window.model_view.next_button.click()
    with qtbot.waitSignals([window.state.package_changed, convert.runner.finished], timeout=LONG):
        convert.convert_button.click()
    package_a = convert.output.text()
    assert (Path(package_a) / "genai_config.json").is_file()
    assert convert.chat_button.isEnabled() and Path(package_a).parent == (
        window.state.packages_folder()
    )
    convert.next_button.click()
    assert verify.package.text() == package_a and verify.reference.text() == str(model_a)
    with qtbot.waitSignal(verify.runner.finished, timeout=LONG):
        verify.run_button.click()
    assert "PASS" in verify.verdict.text() and verify.table.rowCount() >= 7
    assert compare.pair.chosen(0) == Path(package_a)  # A's package is Compare's A

    _inspect(qtbot, window, model_b)
    # Convert: B's, with no finished line or button left from A.
    assert convert.source.text() == str(model_b) and convert.summary.text() == ""
    assert not convert.chat_button.isEnabled() and "model-b" in convert.output.text()
    # Verify: no package of B yet, B as reference, A's report put away.
    assert verify.package.text() == "" and verify.reference.text() == str(model_b)
    assert verify.table.rowCount() == 0 and "PASS" not in verify.verdict.text()
    assert not verify.export_json.isEnabled() and verify.report is None
    # Compare: no pair of A's packages.
    assert compare.pair.chosen(0) is None and compare.pair.chosen(1) is None
    assert "No package of model-b yet" in compare.pair.advice.text()
    # The pages' buttons go on with B's package (none), never A's.
    assert window.state.package == ""
    asked = _chats_with(window, monkeypatch)
    verify.next_button.click()
    convert.chat_button.setEnabled(True)  # even if it were offered
    convert.chat_button.click()
    assert package_a not in asked
    started: list[dict] = []
    monkeypatch.setattr(verify.runner, "start", lambda job, args: started.append(args))
    monkeypatch.setattr("mmforge.gui.verify_view.show_error", lambda *a, **k: None)
    verify.run_button.click()
    assert not any(args.get("package") == package_a for args in started)


def test_a_package_from_before_a_restart_is_not_paired_with_the_model_picked_after(
    qtbot, qapp, tiny, package, tmp_path, monkeypatch
):
    """The issue's case: Phi-4's package loaded before a restart, the demo picked after it:
    Verify paired them ("The package is a 'phi4mm' package but the reference is
    Qwen2.5-VL"), and Compare and Chat → kept Phi-4's package."""
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ini = str(tmp_path / "settings.ini")

    first = MainWindow(QSettings(ini, QSettings.Format.IniFormat))
    qtbot.addWidget(first)
    library = first.state.packages_folder()
    library.mkdir(parents=True)
    phi = _copy_package(package("qwen2_5_vl"), library / "phi-4-f32", "microsoft/Phi-4-mm")
    first.state.set_package(str(phi))  # picked (and loaded) in Chat
    first.close()
    first.state.settings.sync()

    window = MainWindow(QSettings(ini, QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    window.show()
    verify, compare = window.verify_view, window.compare_view
    # After the restart the package is paired with its own model, not with nothing.
    assert verify.package.text() == str(phi)
    assert verify.reference.text() == "microsoft/Phi-4-mm"
    demo = tmp_path / "demo"
    shutil.copytree(tiny("qwen2_5_vl"), demo)
    _inspect(qtbot, window, demo)
    assert verify.package.text() == "" and verify.reference.text() == str(demo)
    assert window.state.package == "" and compare.pair.chosen(0) is None
    asked = _chats_with(window, monkeypatch)
    verify.next_button.click()
    assert str(phi) not in asked
    # The demo converted later is the one paired with it; Phi-4's stays in the library.
    demo_package = _copy_package(package("qwen2_5_vl"), library / "demo-f32", str(demo))
    _inspect(qtbot, window, demo)
    assert verify.package.text() == str(demo_package)
    assert compare.pair.chosen(0) == demo_package
    window.close()


def test_verify_picks_its_package_from_the_library_with_its_reference(
    qtbot, window, package, monkeypatch
):
    """Verify had no way to pick a package but typing a path."""
    library = window.state.packages_folder()
    library.mkdir(parents=True)
    phi = _copy_package(package("qwen2_5_vl"), library / "phi-4-f32", "microsoft/Phi-4-mm")
    demo = _copy_package(package("qwen2_5_vl"), library / "demo-f32", "/models/demo")
    window.state.packages_removed()  # the lists read the folder again
    verify = window.verify_view
    names = [verify.library.itemText(i) for i in range(verify.library.count())]
    assert names[0] == "Library (2)"
    # Named as Chat's library names them (family and precision); the model in the tooltip.
    assert "phi-4-f32: Qwen2.5-VL, f32" in names and "demo-f32: Qwen2.5-VL, f32" in names
    tip = verify.library.itemData(
        names.index("phi-4-f32: Qwen2.5-VL, f32"), Qt.ItemDataRole.ToolTipRole
    )
    assert "converted from microsoft/Phi-4-mm" in tip
    verify.library.activated.emit(names.index("phi-4-f32: Qwen2.5-VL, f32"))
    assert verify.package.text() == str(phi) and verify.reference.text() == "microsoft/Phi-4-mm"
    verify.library.activated.emit(names.index("demo-f32: Qwen2.5-VL, f32"))
    assert verify.package.text() == str(demo) and verify.reference.text() == "/models/demo"
    assert window.state.package == str(demo)  # one truth: Chat → and Compare follow it
    assert window.compare_view.pair.chosen(0) == demo
    # Choose… opens in the library.
    asked: list[str] = []
    monkeypatch.setattr(
        "mmforge.gui.verify_view.QFileDialog.getExistingDirectory",
        lambda parent, title, where="": asked.append(where) or str(phi),
    )
    verify.choose_package_button.click()
    assert asked == [str(library)] and verify.reference.text() == "microsoft/Phi-4-mm"


def test_verify_names_its_stage_from_the_start(window, package, monkeypatch):
    """Verify sat at "0%" with no stage named until the checker's first report."""
    from mmforge.backend.jobs import Progress

    verify = window.verify_view
    window.state.set_package(str(package("qwen2_5_vl")))
    monkeypatch.setattr(verify.runner, "start", lambda job, args: None)  # no worker
    verify.run_button.click()
    assert verify.progress.text().startswith("Step 1 of 5: starting the checker")
    assert "Starting the checker" in verify.verdict.text()
    verify._on_progress(Progress("verify", 1, 4, message="running the Hugging Face reference"))
    assert verify.progress.text().startswith("Step 3 of 5: running the Hugging Face reference")


def test_verify_s_chart_text_is_drawn_at_the_chart_s_size_at_1024x600(qtbot, window):
    """At 1024×600 the chart's text was tiny and stretched: a 720×240 drawing squeezed
    into a short, wide box."""
    from mmforge.backend.verify import VerifyReport
    from mmforge.backend.verify.parity import Comparison

    window.resize(1024, 600)
    window.go(2)
    verify = window.verify_view
    components = [
        Comparison(name, "PASS", 1e-6, 1.0, True, "", [], [])
        for name in ("vision_encoder", "decoder_prefill", "end_to_end")
    ]
    components[1].per_position_excess.extend([0.01 * (i + 1) for i in range(40)])
    report = VerifyReport(
        verdict="PASS",
        first_divergent_stage=None,
        cause=None,
        components=components,
        tokens={"matched": 8, "total": 8},
        family="Qwen2.5-VL",
        dtype="f32",
        package="p",
        reference="r",
    )
    verify._on_result(report)
    verify.details.set_expanded(True)
    qtbot.wait(100)
    plot = verify.plot
    assert plot.isVisible() and plot.height() >= 140
    drawn = plot.renderer().defaultSize()
    # One unit of the drawing is one pixel: 11-12 px text, neither squeezed nor stretched.
    assert abs(drawn.width() - plot.width()) <= 1 and abs(drawn.height() - plot.height()) <= 1


def test_the_selection_s_precision_is_the_one_convert_shows(qtbot, tmp_path, monkeypatch):
    """A precision the page does not offer, saved by hand, gives way to the one shown."""
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("dtype", "int3")
    settings.setValue("target", "cuda")
    window = MainWindow(settings)
    qtbot.addWidget(window)
    convert, selection = window.convert_view, window.state.selection
    assert (selection.dtype, selection.target) == (convert.dtype.currentText(), "cuda")
    assert selection.dtype != "int3" and settings.value("dtype") == selection.dtype
    convert.dtype.setCurrentText("int4")
    assert selection.dtype == "int4" and settings.value("dtype") == "int4"
    window.close()
