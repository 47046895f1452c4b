"""Gemma 4's larger forms, tiny: K = V on the global layers (31B) and expert blocks (26B-A4B).

They are variants of the registry's `gemma4` entry (one model type, one entry), so the
registry-driven convert / verify / chat tests do not reach them: this file runs the same
checks on `tiny_large.TINY_LARGE`. Their release shapes are in test_released.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families.gemma.tiny_large import TINY_LARGE as GEMMA4_LARGE
from mmforge.backend.families.gemma.unified.tiny import TINY_K_EQ_V
from mmforge.backend.tiny.build import write_tiny
from mmforge.backend.verify import verify
from tests.backend.chat.test_chat import _files, _fresh, _hf
from tests.backend.families import verdict

TINY_LARGE = {**GEMMA4_LARGE, "gemma4_unified-k-eq-v": TINY_K_EQ_V}
KEYS = list(TINY_LARGE)
_built: dict[tuple[str, str], Path] = {}


@pytest.fixture(scope="module")
def large(tiny_root: Path, tmp_path_factory: pytest.TempPathFactory):
    """large(key, dtype=None) -> the tiny checkpoint, or its package at that dtype."""

    def get(key: str, dtype: str | None = None) -> Path:
        if (key, "") not in _built:
            _built[key, ""] = write_tiny(TINY_LARGE[key], tiny_root / key).folder
        if dtype is None:
            return _built[key, ""]
        if (key, dtype) not in _built:
            out = tmp_path_factory.mktemp("pkg") / f"{key}-{dtype}"
            # int4 with f32 encoders: f16 encoders' rounding moves the embeddings enough
            # to flip near-tied tokens of a random decoder (measured: end_to_end AMBIGUOUS
            # at step 19 with every graph stage PASS); the decoder is the int4 part.
            encoders = "f32" if dtype == "int4" else "auto"
            convert(str(_built[key, ""]), out, dtype=dtype, encoders=encoders)
            _built[key, dtype] = out
        return _built[key, dtype]

    return get


def test_the_forms_are_what_they_say():
    import json

    from mmforge.backend.tiny.tokenizer import train_tokenizer

    for key, spec in TINY_LARGE.items():
        tok = train_tokenizer(spec.specials, pinned=spec.pinned)
        text = json.loads(spec.make_config(tok.special_ids, tok.vocab_size).to_json_string())
        text = text["text_config"]
        assert text["attention_k_eq_v"] is True
        # The global layer has fewer KV heads than the sliding ones, as released.
        assert text["per_layer_config"]["1"]["num_key_value_heads"] == 1
        assert text["num_key_value_heads"] == 2
        assert text.get("enable_moe_block", False) is (key == "gemma4-moe")


@pytest.mark.parametrize("key", KEYS)
def test_f32_package_matches_transformers_at_every_stage(large, key):
    assert Checkpoint.read(large(key)).field_review.refused == ()
    report = verify(large(key, "f32"), str(large(key)), tokens=32)
    stages = [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.verdict == verdict(TINY_LARGE[key].family_key), stages
    assert all(c.verdict == "PASS" for c in report.components if c.name != "preprocessing")
    assert report.tokens["matched"] == report.tokens["total"] == 32


@pytest.mark.parametrize("key", KEYS)
def test_int4_package_is_exact_against_its_own_rounded_weights(large, key):
    report = verify(large(key, "int4"), str(large(key)), tokens=32)
    stages = {c.name: c for c in report.components}
    assert report.verdict == verdict(TINY_LARGE[key].family_key), [
        (c.name, c.verdict, c.reason) for c in stages.values()
    ]
    assert all(c.verdict == "PASS" for n, c in stages.items() if n != "preprocessing"), [
        (c.name, c.verdict, c.reason) for c in stages.values()
    ]
    assert "rtol 0.02" in stages["decoder_prefill"].reason  # the f32 bound
    assert report.rounding is not None and report.rounding.weights > 0
    assert not any("no rounded reference" in n or "not the rounding" in n for n in report.notes)
    # The whole answer: 32 tokens, or fewer where it ends at EOS (the tiny unified one
    # ends after 1 once rounded).
    assert report.tokens["matched"] == report.tokens["total"] > 0


@pytest.mark.parametrize("key", KEYS)
def test_chat_with_an_image_answers_as_transformers_does(large, key):
    session = ChatSession(large(key, "f32"))
    first = session.send(
        "Describe this.",
        session.prepare_attachments(_files(TINY_LARGE[key].family_key)),
        GenerationOptions(max_new_tokens=8),
    )
    assert first.stop_reason == "length"
    second = session.send("And then?", options=GenerationOptions(max_new_tokens=16))
    fresh, inputs = _fresh(session, 3, 16)
    assert second.token_ids == fresh
    hf = _hf(large(key), inputs, 16, session.info.eos_token_ids)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    assert second.token_ids == hf


def test_inspect_names_the_experts_and_k_eq_v(large):
    from mmforge.backend.inspect import inspect_source

    moe = inspect_source(str(large("gemma4-moe"))).architecture
    assert moe[0].startswith("Attention: K = V on the 1 global layer (")
    assert "1 KV heads there, 2 on sliding layers" in moe[0]
    assert moe[1].startswith("Mixture of experts: 4 experts beside each layer's MLP, 2 active")
    dense = inspect_source(str(large("gemma4-k-eq-v"))).architecture
    assert dense == moe[:1]


def test_the_26b_a4b_release_shape_at_int4_is_exact_against_its_rounded_weights(
    tiny_root, tmp_path
):
    from mmforge.backend.families.gemma.tiny_large import RELEASED_LARGE
    from mmforge.backend.tiny.release import write_release

    spec = next(r for r in RELEASED_LARGE if r.key == "gemma4-26b-a4b")
    folder = write_release(spec, tiny_root / "released-gemma4-26b-a4b-int4").folder
    convert(str(folder), tmp_path / "pkg", dtype="int4", encoders="f32")
    report = verify(tmp_path / "pkg", str(folder), tokens=32)
    stages = {c.name: c for c in report.components}
    assert report.verdict == verdict("gemma4"), [
        (c.name, c.verdict, c.reason) for c in stages.values()
    ]
    assert all(c.verdict == "PASS" for n, c in stages.items() if n != "preprocessing")
    assert "rtol 0.02" in stages["decoder_prefill"].reason
    assert report.rounding is not None and report.rounding.weights > 0
    assert report.tokens["matched"] == report.tokens["total"] == 32
