"""The variable-count host, measured: LLaVA-1.5 on ONNX Runtime GenAI's `qwen2_5_vl` pipeline.

benchmarks/seed_probes/probe_varcount.py derives a `qwen2_5_vl` package from the converted
tiny LLaVA package (merge 1, patch 14, the marker text absorbed as `<image>` ids, a vision
graph that un-patches Qwen's patches) and runs it beside transformers. These tests hold what
it measured on the 0.18 wheel, so they fail when the runtime changes its counts, its calls
of the vision graph, its positions or its reading of absent token ids.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "seed_probes" / "probe_varcount.py"


def _probe() -> Any:
    spec = importlib.util.spec_from_file_location("probe_varcount", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["probe_varcount"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def probe() -> Any:
    return _probe()


@pytest.fixture(scope="module")
def setup(probe, tiny, package, tmp_path_factory) -> Any:
    return probe.Setup.make(tmp_path_factory.mktemp("varcount"), tiny("llava"), package("llava"))


def _same(facts: dict[str, Any], counts: list[int]) -> None:
    assert facts["runtime_counts"] == counts
    assert facts["hf_counts"] == counts
    assert facts["ids_equal"]
    if counts:
        assert facts["pixels_max_diff"] < 1e-6  # the PNG's pixels, normalized
    assert facts["prefill_max_diff"] < 1e-4
    assert facts["tokens_equal"], (facts["runtime_tokens"], facts["hf_tokens"])


@pytest.mark.parametrize("per_call", ["any", "one"])
def test_llava_pictures_at_the_towers_size_are_transformers(probe, setup, per_call):
    one = probe.compare(*setup.case("one", "tower", setup.square[:1]), setup.image_id)
    _same(one, [16])
    assert one["grid"] == [[1, 4, 4]]
    two = setup.case(f"two-{per_call}", "tower", setup.square, per_call=per_call)
    _same(probe.compare(*two, setup.image_id), [16, 16])


def test_text_alone_is_transformers(probe, setup):
    _same(probe.compare(*setup.case("text", "tower", []), setup.image_id), [])


def test_pictures_of_different_sizes_each_get_their_own_count(probe, setup):
    facts = probe.compare(*setup.case("odd", "patches", setup.odd), setup.image_id)
    assert facts["grid"] == [[1, 2, 4], [1, 1, 37], [1, 1, 1]]
    _same(facts, [8, 37, 1])  # 28×56, 14×518, 14×14: a one-patch block is one id too


@pytest.mark.parametrize("vision", ["patches", "tower"])
def test_the_decoder_gets_the_features_in_order_at_1d_positions(probe, setup, vision):
    pictures = setup.odd if vision == "patches" else setup.square
    facts = probe.compare(
        *setup.case(f"echo-{vision}", vision, pictures, echo=True), setup.image_id, setup.hidden
    )
    assert facts["ids_equal"]
    assert facts["embeds_max_diff"] < 1e-4  # transformers' inputs_embeds, row for row
    assert facts["positions_1d"]  # position_ids [3, 1, S]: 0..S-1 in each row
    assert facts["steps_1d"]  # then S, S+1, … with the mask one longer each step
    assert facts["masked"] == []


def test_the_vision_graph_is_called_once_per_picture_unless_they_share_a_grid(probe, setup):
    def calls(pictures, per_call):
        rt, _ = setup.case(f"calls-{per_call}", "echo", pictures, per_call=per_call, echo=True)
        return probe.calls(rt, setup.image_id)

    # (rows the call received, grid rows, features it gave): padding rows never reach it.
    assert calls(setup.odd, "any") == [(8, 1, 8), (37, 1, 37), (1, 1, 1)]
    assert calls(setup.square, "any") == [(32, 2, 32)]
    assert calls(setup.square, "one") == [(16, 1, 16), (16, 1, 16)]


def test_absent_mrope_ids_read_as_zero_for_a_decoder_with_position_ids(probe, setup):
    text = "Wow!!! " + probe.QUESTION  # "!" is id 0 in the tiny vocabulary
    with pytest.raises(RuntimeError, match="grid_thw data"):
        setup.case("bang", "tower", setup.square[:1], echo=True, text=text)
    # LLaVA's decoder takes no position_ids: the ids are never read.
    _same(probe.compare(*setup.case("bang-llava", "tower", setup.square[:1], text=text),
                        setup.image_id), [16])  # fmt: skip
    vocab = probe.model_config(setup.source)["vocab_size"]
    guarded = setup.case("bang-guarded", "tower", setup.square[:1], echo=True, text=text,
                         guard=vocab)  # fmt: skip
    facts = probe.compare(*guarded, setup.image_id, setup.hidden)
    assert facts["positions_1d"]


def test_a_pad_id_in_the_prompt_is_masked_unless_the_pad_id_is_guarded(probe, setup):
    text = "A<pad>B " + probe.QUESTION
    pad = setup.case("pad", "tower", setup.square[:1], echo=True, text=text)
    facts = probe.compare(*pad, setup.image_id, setup.hidden)
    assert facts["ids_equal"]
    assert len(facts["masked"]) == 1
    assert not facts["positions_1d"]
    vocab = probe.model_config(setup.source)["vocab_size"]
    guarded = setup.case("pad-guarded", "tower", setup.square[:1], echo=True, text=text,
                         guard=vocab)  # fmt: skip
    facts = probe.compare(*guarded, setup.image_id, setup.hidden)
    assert facts["masked"] == [] and facts["positions_1d"]
