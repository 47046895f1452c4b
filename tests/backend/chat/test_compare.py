"""Where two answers part, and which packages are of one model."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmforge.backend.chat.compare import (
    ASK,
    DIFFERENT,
    SAME,
    Divergence,
    divergence,
    first_difference,
    kinship,
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


def _entry(
    folder: str,
    source: str,
    dtype: str = "f32",
    family: str = "Qwen2.5-VL",
    config: str = "",
    weights: str = "",
):
    return PackageEntry(Path(folder), 1, 0.0, source, family, dtype, config, weights)


def test_packages_of_one_model_by_their_names_when_no_digest_was_recorded(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    a = _entry("/p/a", str(model), "f32")
    assert kinship(a, _entry("/p/b", f"{model}/", "int4")).kind == SAME
    assert model_of("org/name@abc123") == model_of("org/name") == "org/name"
    hub = _entry("/p/h", "org/name", "f32")
    assert kinship(hub, _entry("/p/h2", "org/name@abc123", "int4")).kind == SAME
    other = kinship(hub, _entry("/p/c", "org/other", "int4"))
    assert (
        other.kind == DIFFERENT
        and "org/other" in other.reason
        and "h was converted" in other.reason
    )
    # A local folder beside a hub name may be a copy of it: ask.
    local = kinship(a, _entry("/p/c", "org/other", "int4"))
    assert local.kind == ASK and "before Multimodal Forge recorded" in local.reason
    gemma = kinship(a, _entry("/p/d", str(model), family="Gemma 3"))
    assert gemma.kind == DIFFERENT and "(Gemma 3)" in gemma.reason


def test_the_recorded_digests_decide_whatever_the_sources_are_called():
    hub = _entry("/p/hub-f32", "org/m", "f32", config="c1", weights="w1")
    local = _entry("/p/local-int4", "/home/u/models/m", "int4", config="c1", weights="w1")
    assert kinship(hub, local) == kinship(local, hub) == kinship(hub, hub)
    assert kinship(hub, local).kind == SAME
    # Another size of the family: other settings and other weights.
    bigger = _entry("/p/big", "org/m", "int4", config="c2", weights="w2")
    assert kinship(hub, bigger).kind == DIFFERENT and "settings" in kinship(hub, bigger).reason
    # A fine-tune, or the same settings re-saved in another dtype: ask.
    tuned = _entry("/p/tuned", "org/m-tuned", "int4", config="c1", weights="w9")
    assert kinship(hub, tuned).kind == ASK and "different weights" in kinship(hub, tuned).reason
    # The same weights under other settings (an edited config): ask.
    edited = _entry("/p/edited", "org/m", "int4", config="c3", weights="w1")
    assert kinship(hub, edited).kind == ASK and "settings" in kinship(hub, edited).reason
    # Weights that could not be digested (pickled): the settings alone cannot tell.
    pickled = _entry("/p/from-bin", "org/m", "int4", config="c1")
    said = kinship(hub, pickled)
    assert said.kind == ASK and "from-bin does not record which weights" in said.reason
    # One package from before the digests: its source decides, as before.
    old = _entry("/p/old", "org/m", "int4")
    assert kinship(hub, old).kind == SAME


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
    # Surely the same model before maybe the same, whatever the precision.
    maybe = _entry("/p/maybe", "/home/u/m", "int4")
    assert sibling(f32, [f32, maybe, copy]) == copy
    assert sibling(f32, [f32, maybe]) == maybe


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


def test_memory_decides_whether_two_packages_stay_loaded_together():
    from mmforge.backend.chat.compare import MEMORY_MARGIN, fit_together

    gb = 10**9
    assert fit_together((4 * gb, 2 * gb), 0, 16 * gb)
    assert not fit_together((12 * gb, 6 * gb), 0, 16 * gb)
    # What the page's own workers hold is freed before they load again.
    assert fit_together((12 * gb, 6 * gb), 6 * gb, 16 * gb)
    assert not fit_together((8 * gb, 8 * gb), 0, int(16 * gb * MEMORY_MARGIN) - 1)
    # Unknown figures change nothing: both stay loaded.
    assert fit_together((None, 6 * gb), 0, 1) and fit_together((gb, gb), 0, None)


def test_a_packages_memory_is_estimated_from_its_files(package, tmp_path):
    import json
    import shutil

    from mmforge.backend.chat.footprint import WORKER_BYTES, package_memory_bytes

    f32 = package("qwen2_5_vl")
    files = sum(p.stat().st_size for p in f32.glob("*.onnx*"))
    estimate = package_memory_bytes(f32)
    assert estimate is not None and files + WORKER_BYTES < estimate < files * 2 + WORKER_BYTES * 2
    assert package_memory_bytes(f32, "cuda") is None  # a GPU holds the weights
    # An f16 component counts twice: the CPU kernels hold it as float32.
    f16 = package("qwen2_5_vl", "f16")
    f16_files = sum(p.stat().st_size for p in f16.glob("*.onnx*"))
    assert package_memory_bytes(f16) > f16_files * 1.5
    broken = tmp_path / "broken"
    shutil.copytree(f32, broken)
    (broken / "genai_config.json").write_text(json.dumps([1, 2]))
    assert package_memory_bytes(broken) is None
    (broken / "genai_config.json").unlink()
    assert package_memory_bytes(broken) is None
