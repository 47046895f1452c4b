"""Phi-3 / Phi-3.5-Vision: the remote layout read as data, inspect's account, the refusal.

The release-shaped checkpoint carries Phi-3.5-vision-instruct's config.json text (shrunk)
and weights under the remote code's names, built from transformers' Phi-3 and CLIP parts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families.phi3v import layout
from mmforge.backend.families.phi3v.tiny import write_phi3v
from mmforge.backend.inspect import inspect_source
from mmforge.backend.tensors import local_tensors


@pytest.fixture(scope="module")
def phi3v(tmp_path_factory) -> Path:
    return write_phi3v(tmp_path_factory.mktemp("phi3v") / "Phi-3.5-vision-instruct").folder


def test_the_layout_maps_every_tensor_onto_native_parts(phi3v):
    """Every tensor lands in transformers' Phi3ForCausalLM, CLIPVisionModel (loaded
    strictly, nothing missing or left over) or the HD projector."""
    import torch
    from safetensors.torch import load_file
    from transformers import CLIPVisionConfig, CLIPVisionModel, Phi3Config, Phi3ForCausalLM

    written = json.loads((phi3v / "config.json").read_text())
    shapes = {t.name: list(t.shape) for t in local_tensors(phi3v) or ()}
    parts: dict[str, dict[str, torch.Tensor]] = {"text": {}, "vision": {}, "projector": {}}
    for file in phi3v.glob("*.safetensors"):
        for name, value in load_file(str(file)).items():
            where = layout.tensor_part(name)
            assert where is not None, name
            parts[where[0]][where[1]] = value.float()
    text = Phi3ForCausalLM(Phi3Config.from_dict(layout.text_config(written)))
    assert text.load_state_dict(parts["text"], strict=True)
    tower_config = layout.vision_config(written, shapes)
    assert tower_config["num_hidden_layers"] == 3 and tower_config["hidden_size"] == 32
    tower = CLIPVisionModel(CLIPVisionConfig.from_dict(tower_config))
    assert tower.load_state_dict(parts["vision"], strict=True)
    width = 4 * tower_config["hidden_size"]
    assert parts["projector"]["glb_GN"].shape == (1, 1, width)
    assert parts["projector"]["img_projection.0.weight"].shape == (written["hidden_size"], width)


def test_inspect_names_the_layout_the_tokens_and_why_it_does_not_convert(phi3v):
    with pytest.raises(MmforgeError) as e:
        inspect_source(str(phi3v))
    assert "--trust-remote-code" in e.value.one_line()
    profile = inspect_source(str(phi3v), trust_remote_code=True)  # no code runs
    assert profile.family_key == "phi3v" and profile.pipeline_type == "phi3v"
    assert profile.components == ("vision_encoder", "embedding", "decoder")
    assert profile.projector.variant == "MLPMultiModalProjector"
    assert "4×image_dim_out" in profile.projector.reason
    # One 336 px crop plus the global view: 313 tokens; num_crops=4 (4 rows of 1): up to 781.
    assert (profile.image_tokens.minimum, profile.image_tokens.maximum) == (313, 781)
    assert profile.refused_fields == () and profile.unlisted_fields == ()
    assert "CLIP ViT-L/14-336" in profile.architecture[0]
    cannot = next(w for w in profile.warnings if w.startswith("Cannot convert yet"))
    assert "[crops, 576, image_dim_out]" in cannot and "image_sizes" in cannot


def test_convert_refuses_with_the_measured_reason(phi3v, tmp_path):
    with pytest.raises(MmforgeError) as e:
        convert(str(phi3v), tmp_path / "out", trust_remote_code=True)
    line = e.value.one_line()
    assert "defined by remote code" in line and "HD transform" in line
    assert not (tmp_path / "out").exists()


def test_a_hd_transform_variant_other_than_the_release_is_refused_by_name(phi3v, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(phi3v, folder)
    config = json.loads((folder / "config.json").read_text())
    config["embd_layer"]["hd_transform_order"] = "glb_sub"
    (folder / "config.json").write_text(json.dumps(config))
    checkpoint = Checkpoint.read(folder, trust_remote_code=True)
    (refused,) = checkpoint.field_review.refused
    assert "embd_layer.hd_transform_order = 'glb_sub'" in refused.sentence()


def test_mobius_builds_the_bare_tower_the_runtime_cannot_use(phi3v):
    """The measured reason: mobius's vision graph takes [crops, 3, 336, 336] and returns
    raw CLIP features, with no image_sizes input; the runtime's phi3v pipeline binds
    image_sizes and expects features as wide as the decoder."""
    import contextlib
    import io

    from mobius._builder import build_from_module
    from mobius._config_resolver import _config_from_hf, _default_task_for_model
    from mobius._registry import registry
    from transformers import PretrainedConfig

    written = json.loads((phi3v / "config.json").read_text())
    hf = PretrainedConfig(**written)
    module_class = registry.get("phi3_v")
    with contextlib.redirect_stdout(io.StringIO()):
        config = _config_from_hf(hf, parent_config=hf, module_class=module_class)
        package = build_from_module(module_class(config), config, _default_task_for_model("phi3_v"))
    vision = package["vision_encoder"].graph
    assert [v.name for v in vision.inputs] == ["pixel_values"]  # no image_sizes
    (features,) = vision.outputs
    assert features.shape[-1] == written["img_processor"]["image_dim_out"]
    embedding = {v.name: v for v in package["embedding"].graph.inputs}
    assert embedding["image_features"].shape[-1] == written["hidden_size"] != 32
