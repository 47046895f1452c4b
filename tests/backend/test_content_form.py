"""Chat templates take content as a list of parts or as text: found by rendering them."""

from __future__ import annotations

import pytest

from mmforge.backend.content_form import LIST, TEXT, conform
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import ALL
from mmforge.backend.templates import check_template
from mmforge.backend.tiny.release import released_template

PHI = next(f for f in ALL if f.key == "phi4mm")


def test_the_released_phi4_template_takes_text_and_qwen36_a_list():
    assert check_template(released_template("phi4_multimodal"), "phi") == TEXT
    assert check_template(released_template("qwen3_6"), "qwen") == LIST


def test_a_template_that_prints_the_content_as_is_takes_text():
    """Given a list, it writes Python's form of it into the prompt: not a list template."""
    printing = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert check_template(printing + "{# a #}", "printing") == TEXT
    assert check_template("{{ raise_exception('no') }}", "raising") is None


def test_text_form_numbers_attachments_across_the_conversation():
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "audio"}, {"type": "text", "text": "And?"}],
        },
    ]
    out = conform(messages, TEXT, PHI.profile.text_placeholder, PHI.name)
    assert [m["content"] for m in out] == [
        "Be brief.",
        "<|image_1|>What?",
        "A cat.",
        "<|image_2|><|audio_1|>And?",
    ]
    assert messages[1]["content"][0] == {"type": "image"}  # the input is kept
    # A list template gets parts, plain text included.
    assert conform([{"role": "user", "content": "Hi"}], LIST, None) == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
    ]


def test_a_text_only_template_without_the_familys_placeholder_is_refused():
    with pytest.raises(MmforgeError, match="takes text only"):
        conform([{"role": "user", "content": [{"type": "image"}]}], TEXT, None, "Qwen")


@pytest.mark.parametrize("family", [f for f in ALL if f.package is not None], ids=lambda f: f.key)
def test_every_converted_familys_templates_take_a_form_mmforge_handles(family):
    """The tiny spec's template and each release's: a form, and placeholders if text."""
    templates = {family.fixtures.tiny.chat_template} if family.fixtures.tiny else set()
    templates |= {r.chat_template or r.tiny.chat_template for r in family.fixtures.released}
    if family.package is not None and family.package.chat_template is not None:
        templates.add(family.package.chat_template)  # the family's own (PaliGemma's)
    for template in templates - {None}:  # a release that ships none (PaliGemma's)
        form = check_template(template, family.key)
        assert form in (LIST, TEXT), family.key
        if form == TEXT:
            assert family.profile.text_placeholder is not None, family.key


def test_qwen_writes_its_vision_markers_into_text():
    """A Qwen template taking text only (a fine-tune's) gets the markers the runtime's
    processor expands, as the list form writes them."""
    from mmforge.backend.families import lookup

    qwen = lookup("qwen2_5_vl")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    out = conform(messages, TEXT, qwen.profile.text_placeholder, qwen.name)
    assert out[0]["content"] == "<|vision_start|><|image_pad|><|vision_end|>Hi"
    converted = [f for f in ALL if f.key.startswith("qwen") and f.package is not None]
    assert all(f.profile.text_placeholder is not None for f in converted)
