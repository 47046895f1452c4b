"""Qwen3.5 / Qwen3.6, dense and MoE: the hybrid decoder as the config says, as released.

The tiny checkpoints put full attention on layers 1 and 4 of 5 (irregular); the
release-shaped ones follow Qwen3.5-0.8B and Qwen3.6-35B-A3B (full attention every 4th
layer, the `mtp.*` head, the released chat template, bf16 shards; the MoE one also with
its experts one tensor each).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mmforge import resources
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families import lookup
from mmforge.backend.families.qwen.tiny_qwen3_5 import TINY_LAYERS, released_chat_template
from mmforge.backend.inspect import inspect_source
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import verify
from tests.backend.families import agrees_but_for_decoder_prefill

HYBRID = ["qwen3_5", "qwen3_5_moe"]
RELEASES = {r.key: r for key in HYBRID for r in lookup(key).fixtures.released}
_built: dict[str, Path] = {}
_converted: dict[str, Path] = {}


@pytest.fixture(scope="module")
def release(tiny_root: Path, tmp_path_factory):
    """release(key) -> (checkpoint folder, its f32 package), each built once."""

    def get(key: str) -> tuple[Path, Path]:
        if key not in _built:
            _built[key] = write_release(RELEASES[key], tiny_root / f"hybrid-{key}").folder
            out = tmp_path_factory.mktemp("hybrid") / key
            convert(str(_built[key]), out)
            _converted[key] = out
        return _built[key], _converted[key]

    return get


@pytest.mark.parametrize("family", HYBRID)
def test_state_goes_in_and_out_under_the_names_the_runtime_binds(package, family):
    """KV cache on the full-attention layers only; conv and recurrent state on the others,
    as past_key_values.N.conv_state / recurrent_state and present.N.* (the names ORT
    GenAI derives from past_key_names)."""
    folder = package(family)
    graph = onnx.load(str(folder / "decoder.onnx"), load_external_data=False).graph
    inputs = {v.name for v in graph.input}
    outputs = {v.name for v in graph.output}
    for i, kind in enumerate(TINY_LAYERS):
        kv = {f"past_key_values.{i}.key", f"past_key_values.{i}.value"}
        state = {f"past_key_values.{i}.conv_state", f"past_key_values.{i}.recurrent_state"}
        if kind == "full_attention":
            assert kv <= inputs and not state & inputs
            assert {f"present.{i}.key", f"present.{i}.value"} <= outputs
        else:
            assert state <= inputs and not kv & inputs
            assert {f"present.{i}.conv_state", f"present.{i}.recurrent_state"} <= outputs
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    assert config["type"] == family
    assert config["decoder"]["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert config["decoder"]["num_hidden_layers"] == len(TINY_LAYERS)


@pytest.mark.parametrize("family", HYBRID)
def test_inspect_names_the_pipeline_the_layer_pattern_and_the_experts(tiny, family):
    profile = inspect_source(str(tiny(family)))
    assert profile.runnable and profile.pipeline_type == family
    assert profile.components == ("vision_encoder", "embedding", "decoder")
    assert profile.architecture[0] == (
        "Decoder: 3 linear-attention (Gated DeltaNet) and 2 full-attention layers "
        "(full attention at layers 1, 4)"
    )
    sizes = profile.sizes
    if family == "qwen3_5_moe":
        assert "8 routed experts, 2 active per token" in profile.architecture[1]
        total = sizes.parameters["total"]
        assert sizes.active_parameters is not None and sizes.active_parameters < total
    else:
        assert len(profile.architecture) == 1 and sizes.active_parameters is None


def test_a_config_with_only_the_interval_field_gets_its_pattern_from_it(tmp_path, tiny):
    folder = tmp_path / "interval"
    shutil.copytree(tiny("qwen3_5"), folder)
    config = json.loads((folder / "config.json").read_text())
    del config["text_config"]["layer_types"]
    config["text_config"]["full_attention_interval"] = 5
    (folder / "config.json").write_text(json.dumps(config))
    profile = inspect_source(str(folder))
    assert "4 linear-attention" in profile.architecture[0]
    assert "at layer 4)" in profile.architecture[0]


def test_no_text_in_the_project_says_the_runtime_lacks_these_types():
    root = Path(__file__).resolve().parents[2]
    for path in [root / "README.md", *(root / "backend").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        assert "no qwen3_5" not in text, path
        assert "Qwen3.5-VL and Phi-3" not in text, path


@pytest.mark.parametrize("key", list(RELEASES))
def test_released_fields_and_template_are_all_handled(release, key):
    folder, package = release(key)
    review = Checkpoint.read(folder).field_review
    assert review.unlisted == () and review.refused == ()
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    assert template == released_chat_template()
    kept = json.loads((package / "tokenizer_config.json").read_text())["chat_template"]
    assert kept == template
    report = json.loads((package / "weights_report.json").read_text())
    unused = [t["checkpoint"] for t in report["unused"]]
    assert unused and all(name.startswith("mtp.") for name in unused)


@pytest.mark.parametrize(
    "images",
    [[], ["probe"], ["probe", "wide", "probe"]],
    ids=["text-only", "one-image", "three-images"],
)
@pytest.mark.parametrize("key", ["qwen3_5-0.8b", "qwen3_6-35b-a3b"])
def test_release_shaped_packages_match_transformers_over_32_tokens(release, tmp_path, key, images):
    folder, package = release(key)
    files = []
    for name in images:
        if name == "probe":
            files.append(resources.probe_image())
        else:
            from PIL import Image

            path = tmp_path / "wide.png"
            Image.fromarray(
                (np.random.default_rng(1).random((48, 112, 3)) * 255).astype(np.uint8)
            ).save(path)
            files.append(path)
    report = verify(package, str(folder), images=files, tokens=32)
    stages = [(c.name, c.verdict, c.reason) for c in report.components]
    assert agrees_but_for_decoder_prefill(report), stages
    assert report.tokens["matched"] == report.tokens["total"] == 32
    step = next(c for c in report.components if c.name == "decoder_step")
    assert step.reason.startswith("4 steps")


def _edit_decoder(folder: Path, edit) -> None:
    model = onnx.load(str(folder / "decoder.onnx"))
    edit(model)
    data = folder / "decoder.onnx.data"
    data.unlink()
    onnx.save(model, str(folder / "decoder.onnx"), save_as_external_data=True, location=data.name)


def test_a_linear_layer_state_swapped_with_another_fails_at_the_decoder_step(release, tmp_path):
    """The prefill is right (state starts at zero); the steps carry layer 0's recurrent
    state into layer 1 and back, and the error shows at decoder_step."""
    folder, package = release("qwen3_5-0.8b")
    sabotaged = tmp_path / "swapped"
    shutil.copytree(package, sabotaged)

    def swap(model):
        # Layers 0 and 1 are both linear-attention layers with the same state shape.
        a, b = "present.0.recurrent_state", "present.1.recurrent_state"
        for node in model.graph.node:
            node.output[:] = [b if o == a else a if o == b else o for o in node.output]

    _edit_decoder(sabotaged, swap)
    report = verify(sabotaged, str(folder), tokens=8)
    assert report.verdict == "FAIL"
    assert report.first_divergent_stage == "decoder_step", report.cause
    assert "recurrent state" in report.cause
    stages = {c.name: c.verdict for c in report.components}
    assert stages["decoder_prefill"] == "PASS"


def test_a_shifted_conv_kernel_fails_at_the_decoder_prefill(release, tmp_path):
    folder, package = release("qwen3_5-0.8b")
    sabotaged = tmp_path / "shifted"
    shutil.copytree(package, sabotaged)

    def shift(model):
        target = next(t for t in model.graph.initializer if "layers.0.linear_attn.conv1d" in t.name)
        array = numpy_helper.to_array(target)
        target.CopyFrom(numpy_helper.from_array(np.roll(array, 1, axis=-1), target.name))

    _edit_decoder(sabotaged, shift)
    report = verify(sabotaged, str(folder), tokens=8)
    assert report.verdict == "FAIL"
    assert report.first_divergent_stage == "decoder_prefill", report.cause
    stages = {c.name: c.verdict for c in report.components}
    assert stages["vision_encoder"] == stages["embedding"] == "PASS"
