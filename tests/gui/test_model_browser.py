"""Issue 25 item 10: finding a model (hub search with family marks, known models, typos)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from mmforge.backend.hubsearch import OFFLINE
from tests.backend.test_hubsearch import LISTED, listed
from tests.gui.chatting import LONG
from tests.hubserver import Repo


def _texts(widget) -> list[str]:
    return [widget.item(i).text() for i in range(widget.count())]


def _search(qtbot, browser, words: str) -> None:
    browser.query.setText(words)
    with qtbot.waitSignal(browser.call.finished, timeout=LONG):
        browser.search_button.click()
        assert browser.cancel_button.isVisibleTo(browser)
        assert "Searching" in browser.status.text()


def test_10_search_lists_models_with_family_marks_and_fills_the_source(qtbot, window, hub):
    hub.state.listed = list(LISTED)
    model = window.model_view
    model.find_button.click()
    browser = model.browser
    assert browser is not None and browser.isVisible()
    _search(qtbot, browser, "qwen")
    texts = _texts(browser.results)
    assert texts[0].startswith("Qwen/Qwen2.5-VL-7B-Instruct\n")
    assert "Qwen2.5-VL: converts" in texts[0]
    assert "2 models found" in browser.status.text()
    _search(qtbot, browser, "llava")
    found = {t.split("\n")[0]: t for t in _texts(browser.results)}
    assert "LLaVA: converts" in found["llava-hf/llava-1.5-7b-hf"]
    assert "Video-LLaVA: converts" in found["LanguageBind/Video-LLaVA-7B-hf"]
    assert "LLaVA-NeXT: converts" in found["llava-hf/llava-v1.6-mistral-7b-hf"]
    # The built-in list is there too, with sizes, and picking a model fills the source field.
    known = _texts(browser.known)
    assert any(t.startswith("Qwen/Qwen2.5-VL-3B-Instruct\n") and "GB download" in t for t in known)
    browser.results.setCurrentRow(list(found).index("llava-hf/llava-1.5-7b-hf"))
    browser.use_button.click()
    assert model.source.text() == "llava-hf/llava-1.5-7b-hf"
    assert not browser.isVisible()


def test_10_hostile_names_are_refused_and_shown_as_text(qtbot, window, hub):
    hub.state.listed = [
        listed("fine/vlm-<b>", "qwen2_5_vl", 9),
        listed("<img src='/dev/zero'>/x", "qwen2_5_vl", 8),
        listed("../../etc/x", "qwen2_5_vl", 7),
        listed("fine/vlm", "qwen2_5_vl", 1),
    ]
    browser = window.model_view.find_model()
    _search(qtbot, browser, "")
    assert [t.split("\n")[0] for t in _texts(browser.results)] == ["fine/vlm"]
    assert browser.status.textFormat() == Qt.TextFormat.PlainText
    assert browser.header.textFormat() == Qt.TextFormat.PlainText
    browser.close()


def test_10_offline_says_so_and_the_known_list_still_works(qtbot, window):
    # The window fixture is offline (HF_HUB_OFFLINE=1): no hub at all.
    browser = window.model_view.find_model()
    _search(qtbot, browser, "qwen")
    assert browser.status.text() == OFFLINE
    assert browser.results.count() == 0 and browser.known.count() >= 8
    browser.known.setCurrentRow(0)
    browser.use_button.click()
    assert window.model_view.source.text() == "LiquidAI/LFM2-VL-450M"


def test_10_cancel_stops_a_search_that_hangs(qtbot, window, hub):
    hub.state.hang_api = True
    browser = window.model_view.find_model()
    browser.query.setText("qwen")
    browser.search_button.click()
    assert browser.call.running
    browser.cancel_button.click()
    assert not browser.call.running and browser.search_button.isEnabled()
    assert browser.status.text() == "Search cancelled."
    browser.close()


def test_10_a_typo_gets_did_you_mean_from_the_search(qtbot, window, hub):
    hub.state.listed = list(LISTED)
    model = window.model_view
    model.source.setText("Qwen/Qwen2.5-VL-3B-Instrcut")
    with qtbot.waitSignal(model.runner.finished, timeout=LONG):
        model.inspect_button.click()
    browser = model.browser
    assert browser is not None and browser.isVisible()
    assert "Qwen/Qwen2.5-VL-3B-Instrcut was not found" in browser.header.text()
    # No terminal command: the app's sign-in is offered instead.
    assert "hf auth login" not in browser.header.text()
    assert browser.sign_in_button.isVisibleTo(browser)
    qtbot.waitUntil(lambda: browser.results.count() > 0, timeout=LONG)
    assert browser.results.item(0).text().startswith("Qwen/Qwen2.5-VL-3B-Instruct\n")
    assert browser.status.text() == "Did you mean one of these?"
    assert not [b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"]
    browser.close()


def test_10_a_gated_model_offers_the_sign_in_dialog(qtbot, window, hub, monkeypatch):
    hub.state.repos["google/gated-vlm"] = Repo(files={"config.json": b"{}"}, gated_token="t")
    opened = []
    monkeypatch.setattr(type(window.model_view), "account", lambda self: opened.append(True))
    model = window.model_view
    model.source.setText("google/gated-vlm")
    with qtbot.waitSignal(model.runner.finished, timeout=LONG):
        model.inspect_button.click()
    [box] = [b for b in window.findChildren(QMessageBox) if b.objectName() == "signInNeeded"]
    assert "hf auth login" not in box.text() + box.informativeText()
    [sign_in] = [b for b in box.buttons() if b.text() == "Sign in…"]
    sign_in.click()
    assert opened


def test_10_other_pages_name_the_apps_sign_in_not_a_command(qtbot, window):
    from mmforge.gui.errors import show_error

    show_error(
        window,
        {
            "message": "x is gated: the hub refused access",
            "hint": "save a token with `hf auth login`",
            "kind": "hub_auth",
        },
    )
    [box] = [b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"]
    assert "Hugging Face account" in box.informativeText()
    assert "hf auth login" not in box.informativeText()
    box.close()


def test_a_remote_code_model_is_asked_about_once_and_converts(qtbot, window, tmp_path, monkeypatch):
    """The app had no way to give the consent the command line gives with
    --trust-remote-code: Phi-3.5-Vision, a family mmforge converts, was a dead end with a
    hint to rerun a command."""
    from mmforge.backend.families.phi3v.tiny import write_phi3v

    folder = write_phi3v(tmp_path / "Phi-3.5-vision-instruct").folder
    asked: list[str] = []

    def answer(parent, title, text, *args):
        asked.append(title)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", answer)
    model = window.model_view
    model.source.setText(str(folder))
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    assert asked == ["Read a model defined by its repository's code?"]
    assert window.state.profile.family_key == "phi3v"
    card = model.card.toPlainText()  # the Model card says what converting it asks
    assert "Converts with your consent: converting asks you to trust remote code" in card
    started: list[dict] = []
    convert = window.convert_view
    monkeypatch.setattr(convert.runner, "start", lambda job, args: started.append(args))
    convert.output.setText(str(tmp_path / "out"))
    convert.convert()
    assert started[0]["trust_remote_code"] is True and started[0]["allow_pickle"] is False
    assert asked == ["Read a model defined by its repository's code?"]  # asked once


def test_pickled_weights_are_asked_about_and_the_conversion_goes_on(
    qtbot, window, tiny, tmp_path, monkeypatch
):
    """--allow-pickle had no counterpart in the app: a model with only .bin weights could
    not be converted there."""
    import shutil

    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    asked: list[str] = []

    def answer(parent, title, text, *args):
        asked.append(title)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", answer)
    window.state.set_source(str(folder))
    convert = window.convert_view
    convert.output.setText(str(tmp_path / "out"))
    with qtbot.waitSignal(convert.runner.succeeded, timeout=LONG):
        convert.convert()
    assert asked == ["Read pickled weights?"]
    assert (tmp_path / "out" / "genai_config.json").is_file()


def test_an_approximation_is_asked_about_and_the_card_says_what_differs(
    qtbot, window, tiny, tmp_path, monkeypatch
):
    """Issue 30: a model no pipeline runs exactly as released (Idefics3 that splits its
    pictures into tiles) converts only as an approximation the user agreed to; the card and the
    Convert page say what differs before anything is converted, the app asks before
    converting, and a No is said as such (not as a failure) with nothing written."""
    import json
    import shutil

    folder = tmp_path / "splitting"
    shutil.copytree(tiny("idefics3"), folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(
        json.dumps({**pre, "do_image_splitting": True})
    )
    asked: list[str] = []
    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]

    def answer(parent, title, text, *args):
        asked.append(title)
        return answers.pop(0)

    monkeypatch.setattr(QMessageBox, "question", answer)
    model = window.model_view
    model.source.setText(str(folder))
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    card = model.card.toPlainText()
    assert "Converts with your consent:" in card and "tiles" in card, card
    assert model.next_button.isEnabled() and asked == []  # nothing asked before converting
    convert = window.convert_view
    assert "It will be an approximation" in convert.lead.text()
    convert.output.setText(str(tmp_path / "out"))
    with qtbot.waitSignal(convert.runner.finished, timeout=LONG):
        convert.convert()
    qtbot.waitUntil(lambda: asked == ["Convert as an approximation?"], timeout=LONG)
    stage = convert.progress.stage.text()
    assert stage.startswith("Not converted: you said no") and "Failed" not in stage
    assert not (tmp_path / "out").exists()
    with qtbot.waitSignal(convert.runner.succeeded, timeout=LONG):
        convert.convert()
    assert asked == ["Convert as an approximation?"] * 2
    manifest = json.loads((tmp_path / "out" / "mmforge_manifest.json").read_text())
    assert manifest["approximation"]["overrides"] == {"do_image_splitting": False}
    # Chatting with it says so too, not only the card that is gone by then.
    from tests.gui.chatting import load

    chat = window.chat_view
    load(qtbot, chat, tmp_path / "out")
    assert "agreed to when converting: each picture seen whole, without its tiles." in (
        chat.info.text()
    )
