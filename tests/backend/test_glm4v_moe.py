"""GLM-4.5V (glm4v_moe): its release's tensors and fields, the router's correction bias, and
next-n layers a checkpoint may carry after the last layer.

The decoder graph itself is held to transformers in test_glm4v_moe_decoder.py; convert,
verify and chat on the tiny checkpoint run in the suites that iterate the registry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families import ALL
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import verify

FAMILY = next(f for f in ALL if f.key == "glm4v_moe")
RELEASE = FAMILY.fixtures.released[0]


@pytest.fixture(scope="module")
def release(tiny_root: Path) -> Path:
    return write_release(RELEASE, tiny_root / "glm45v-release").folder


def _names(folder: Path) -> list[str]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    return sorted(index["weight_map"])


def test_the_release_is_read_field_by_field(release):
    review = Checkpoint.read(release).field_review
    assert review.unlisted == () and review.refused == ()
    text = json.loads((release / "config.json").read_text())["text_config"]
    # transformers 4's layout, as released: no rope_parameters, head_dim apart from
    # hidden / heads
    assert "rope_parameters" not in text and text["rope_scaling"]["mrope_section"]
    assert text["head_dim"] != text["hidden_size"] // text["num_attention_heads"]


def test_the_release_stores_each_expert_as_released(release):
    names = _names(release)
    first = "model.language_model.layers.1.mlp."
    for e in range(8):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            assert f"{first}experts.{e}.{proj}.weight" in names
    assert f"{first}gate.e_score_correction_bias" in names
    assert f"{first}shared_experts.gate_proj.weight" in names
    assert not any(n.endswith(("experts.gate_up_proj", "experts.down_proj")) for n in names)
    # layer 0 is dense (first_k_dense_replace 1)
    assert "model.language_model.layers.0.mlp.gate_proj.weight" in names
    assert not any(n.startswith("model.language_model.layers.0.mlp.experts") for n in names)


def _edited(src: Path, dest: Path, edit) -> Path:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest)
    weights = load_file(dest / "model.safetensors")
    edit(weights)
    save_file(weights, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def test_the_correction_bias_chooses_experts(tiny, package, tmp_path):
    """The tiny's bias is drawn away from zero, and the package follows it: against the
    same checkpoint with the bias zeroed, the package's decoder no longer matches."""

    def zero_bias(weights):
        biases = [n for n in weights if n.endswith("e_score_correction_bias")]
        assert biases and all(float(weights[n].abs().max()) > 0.05 for n in biases)
        for n in biases:
            weights[n] = weights[n] * 0

    folder = _edited(tiny("glm4v_moe"), tmp_path / "zero-bias", zero_bias)
    report = verify(package("glm4v_moe"), str(folder), tokens=8)
    stages = {c.name: c.verdict for c in report.components}
    assert stages["vision_encoder"] == "PASS" and stages["decoder_prefill"] == "FAIL", stages


def test_a_next_n_layer_after_the_last_is_left_out_as_transformers_leaves_it(tiny, tmp_path):
    """GLM-4.5's multi-token-prediction layer sits at index num_hidden_layers; transformers
    never loads it. The package leaves it out and still matches; a stray tensor elsewhere
    still stops the conversion."""
    layers = json.loads((tiny("glm4v_moe") / "config.json").read_text())["text_config"][
        "num_hidden_layers"
    ]

    def add_next_n(weights):
        last = f"model.language_model.layers.{layers - 1}."
        for name in [n for n in weights if n.startswith(last)]:
            weights[name.replace(last, f"model.language_model.layers.{layers}.")] = weights[
                name
            ].clone()
        hidden = weights["model.language_model.norm.weight"]
        for extra in ("enorm", "hnorm", "shared_head.norm"):
            weights[f"model.language_model.layers.{layers}.{extra}.weight"] = hidden.clone()

    folder = _edited(tiny("glm4v_moe"), tmp_path / "next-n", add_next_n)
    convert(str(folder), tmp_path / "pkg")
    report = json.loads((tmp_path / "pkg" / "weights_report.json").read_text())
    unused = [t["checkpoint"] for t in report["unused"]]
    assert unused and all(n.startswith(f"model.language_model.layers.{layers}.") for n in unused)
    assert verify(tmp_path / "pkg", str(folder), tokens=8).verdict == "PASS"

    def add_stray(weights):
        add_next_n(weights)
        weights[f"model.language_model.layers.{layers + 1}.enorm.weight"] = weights[
            "model.language_model.norm.weight"
        ].clone()

    from mmforge.backend.errors import MmforgeError

    stray = _edited(tiny("glm4v_moe"), tmp_path / "stray", add_stray)
    with pytest.raises(MmforgeError, match="has no place in them"):
        convert(str(stray), tmp_path / "pkg-stray")


def test_find_a_model_marks_glm_4_5v_as_converting():
    from mmforge.backend.hubsearch import mark_for

    mark = mark_for("glm4v_moe")
    assert (mark.family, mark.verdict) == ("GLM-4.5V", "converts"), mark
