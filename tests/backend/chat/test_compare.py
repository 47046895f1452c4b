"""Where two answers part, and which packages are of one model."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmforge.backend.chat.compare import (
    Divergence,
    different_models,
    divergence,
    first_difference,
    model_of,
    parting_words,
    quoted,
    sibling,
    speed_words,
    summary,
)
from mmforge.backend.library import PackageEntry


@pytest.mark.parametrize(
    ("a", "b", "index"),
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([], [], None),
        ([1, 2, 3], [1, 9, 3], 1),
        ([5], [6], 0),
        ([1, 2], [1, 2, 3], 2),
        ([1, 2, 3], [1, 2], 2),
        ([], [4], 0),
    ],
)
def test_first_difference(a, b, index):
    assert first_difference(a, b) == index


def test_the_parting_token_is_placed_in_each_text():
    a_pieces, b_pieces = ["The", " cat", " sat"], ["The", " dog", "s", " ran"]
    d = divergence([1, 2, 3], [1, 7, 8, 9], a_pieces, b_pieces)
    assert d == Divergence(agreed=1, same=False, a_span=(3, 7), b_span=(3, 7))
    assert "".join(a_pieces)[slice(*d.a_span)] == " cat"
    assert "".join(b_pieces)[slice(*d.b_span)] == " dog"


def test_an_answer_that_ends_first_is_marked_at_its_end():
    d = divergence([1, 2], [1, 2, 3], ["a", "b"], ["a", "b", "c"])
    assert d.agreed == 2 and d.a_span == (2, 2) and d.b_span == (2, 3)
    assert (
        summary(d, 2, 3) == "The answers agree for the first 2 tokens, then A ends while B goes on."
    )
    d = divergence([1, 2, 3], [1, 2], ["a", "b", "c"], ["a", "b"])
    assert summary(d, 3, 2, "int4", "f32") == (
        "The answers agree for the first 2 tokens, then f32 ends while int4 goes on."
    )


def test_a_piece_held_back_still_counts_as_its_token():
    # A multi-byte character's first token streams "" until the next one completes it.
    d = divergence([1, 2, 3], [1, 2, 4], ["x", "", "é"], ["x", "", "e"])
    assert d.agreed == 2 and d.a_span == (1, 2) and d.b_span == (1, 2)


def test_summaries():
    same = divergence([1, 2, 3], [1, 2, 3], ["a", "b", "c"], ["a", "b", "c"])
    assert same.same and same.a_span == (3, 3)
    assert summary(same, 3, 3) == "The two answers are the same, token for token (3 tokens)."
    assert summary(divergence([1], [2]), 1, 1) == "The answers part at the very first token."
    d = divergence([*range(37), 1], [*range(37), 2])
    assert summary(d, 38, 38) == "The answers agree for the first 37 tokens, then part."
    assert "first 1 token," in summary(divergence([1, 2], [1, 3]), 2, 2)


def _entry(folder: str, source: str, dtype: str = "f32", family: str = "Qwen2.5-VL"):
    return PackageEntry(Path(folder), 1, 0.0, source, family, dtype)


def test_packages_of_one_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    a = _entry("/p/a", str(model), "f32")
    assert different_models(a, _entry("/p/b", f"{model}/", "int4")) is None
    assert model_of("org/name@abc123") == model_of("org/name") == "org/name"
    reason = different_models(a, _entry("/p/c", "org/other", "int4"))
    assert reason is not None and "org/other" in reason and "a was converted from" in reason
    assert different_models(a, _entry("/p/d", str(model), family="Gemma 3")) is not None


def test_the_sibling_is_another_precision_of_the_same_model():
    f32 = _entry("/p/f32", "org/m", "f32")
    f16 = _entry("/p/f16", "org/m", "f16")
    int4 = _entry("/p/int4", "org/m", "int4")
    stranger = _entry("/p/x", "org/x", "int4")
    entries = [f32, f16, stranger, int4]
    assert sibling(f32, entries) == int4
    assert sibling(int4, entries) == f32
    assert sibling(f16, [f16, stranger]) is None
    copy = _entry("/p/f32-copy", "org/m", "f32")
    assert sibling(f32, [f32, copy]) == copy


def test_what_each_says_where_they_part():
    a, b = ["The", " cat", " sat"], ["The", " dog", " ran"]
    d = divergence([1, 2, 3], [1, 7, 8], a, b)
    assert parting_words(d, a, b, "f32", "int4") == "f32 goes on with “cat”, int4 with “dog”."
    ended = divergence([1], [1, 2], ["x"], ["x", "y"])
    assert parting_words(ended, ["x"], ["x", "y"]) == ""
    assert quoted("\n\n") == "a line break" and quoted(" ") == "a space"
    assert quoted("") == "part of a character" and quoted("x" * 30) == f"“{'x' * 24}…”"


def test_speed_words():
    assert speed_words(100.0, 240.0) == "B decodes 2.4× as fast as A."
    assert speed_words(300.0, 100.0, "f32", "int4") == "f32 decodes 3.0× as fast as int4."
    assert speed_words(100.0, 103.0) == "A and B decode at about the same speed."
    assert speed_words(0.0, 10.0) == ""
