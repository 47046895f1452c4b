"""Issue 25 item 13: Help > User guide opens the guide shipped with the app."""

from __future__ import annotations

from mmforge.gui.user_guide import UserGuideDialog


def test_13_help_user_guide_opens_and_shows_the_guide(qtbot, window):
    window.guide_action.trigger()
    [dialog] = [d for d in window.findChildren(UserGuideDialog) if d.isVisible()]
    text = dialog.text.toPlainText()
    for words in ("User guide", "Install", "What the computer needs", "A first model to try"):
        assert words in text
    assert "Find a model" in text and "Compare" in text
    # The README's screenshots are left out (the browser loads no file a document names).
    assert "docs/screenshots" not in dialog.text.toMarkdown()
    dialog.close()


def test_the_guide_in_the_app_starts_with_using_it_not_installing_it():
    from mmforge.gui.user_guide import guide_text

    text = guide_text()
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings[0] != "### Install" and headings[-1] == "### Install"
    assert text.index("### A first model to try") < text.index("### Install")
