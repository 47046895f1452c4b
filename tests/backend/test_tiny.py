"""Tiny checkpoints: tokenizer ids, and each family loads in transformers and generates."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from tokenizers import Tokenizer

from mmforge import resources
from mmforge.backend.tiny import FAMILIES
from mmforge.backend.tiny.tokenizer import train_tokenizer
from mmforge.backend.verify import hf_reference
from tests.images import make_tone

AUDIO_FAMILIES = {"gemma4", "phi4mm"}


def test_tokenizer_places_specials_after_the_vocabulary_and_at_pinned_ids():
    tok = train_tokenizer(["<a>", "<b>"], vocab_size=300, pinned={"<img>": 1000})
    assert tok.special_ids == {"<img>": 1000, "<a>": 1001, "<b>": 1002}
    t = Tokenizer.from_str(tok.json_text)
    assert t.encode("x<img>y<b>").ids.count(1000) == 1
    assert 1002 in t.encode("x<img>y<b>").ids
    # Filler entries never come out of ordinary text.
    ids = t.encode("The quick brown fox, 123 birds!").ids
    assert all(i < 300 for i in ids)


def test_tokenizer_refuses_a_pin_below_the_vocabulary():
    with pytest.raises(ValueError, match="cannot pin"):
        train_tokenizer(["<a>"], vocab_size=300, pinned={"<img>": 10})


def test_hf_and_tokenizers_agree_on_ids(tiny):
    from transformers import AutoTokenizer

    folder = tiny("qwen2_5_vl")
    text = "Hello <|vision_start|><|image_pad|><|vision_end|> world 12345!"
    hf = AutoTokenizer.from_pretrained(folder)(text, add_special_tokens=False)["input_ids"]
    raw = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids
    assert hf == raw


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_checkpoint_generates_with_attachments(tiny, family):
    folder = tiny(family)
    config = json.loads((folder / "config.json").read_text())
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"]
    assert (folder / "preprocessor_config.json").is_file()

    # Every special token the config names sits at that id in the tokenizer.
    from mmforge.backend import families

    family_entry = families.lookup(config["model_type"])
    token_ids = family_entry.profile.token_ids(families.Cfg(config))
    vocab = {int(k): v["content"] for k, v in tok_config["added_tokens_decoder"].items()}
    assert token_ids, "the family names no token ids"
    for name, token_id in token_ids.items():
        assert token_id in vocab, f"{name}={token_id} is not a special token"

    n_audio = 1 if family in AUDIO_FAMILIES else 0
    model = hf_reference.load_model(folder)
    inputs = hf_reference.prepare(
        folder,
        hf_reference.messages_for("Describe this image.", n_images=1, n_audios=n_audio),
        images=[Image.open(resources.probe_image()).convert("RGB")],
        audios=[make_tone()] * n_audio,
    )
    image_id = token_ids["image_token_id"]
    assert inputs.input_ids.count(image_id) > 1, "image placeholder was not expanded"
    if n_audio:
        assert inputs.input_ids.count(token_ids["audio_token_id"]) > 1
    new = hf_reference.greedy_generate(model, inputs, 32)
    assert len(new) == 32 or new[-1] in _eos(config)
    # Scaled init: greedy decoding of the random model is not one token repeated.
    assert len(set(new)) >= 4, new


def _eos(config: dict) -> set[int]:
    text = config.get("text_config", config)
    eos = text.get("eos_token_id")
    return set(eos if isinstance(eos, list) else [eos])


def test_build_is_deterministic(tmp_path):
    from mmforge.backend.tiny import build_tiny

    a = build_tiny("mistral3", tmp_path / "a").folder
    b = build_tiny("mistral3", tmp_path / "b").folder
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
