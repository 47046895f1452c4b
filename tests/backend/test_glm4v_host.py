"""GLM-4.1V's picture path on the runtime's `qwen2_5_vl` pipeline, measured (glm4v/__init__.py).

transformers' GLM-4V processor and rope index against Qwen2-VL's, and against ONNX Runtime
GenAI's qwen2_5_vl processor on a tiny Qwen2.5-VL package whose Resize has GLM's pixel budget
halved and whose tokenizer carries Qwen's marker text on the ids GLM's markers have. Each test
fails when either side changes what it computes.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest

# The GLM-4V releases' preprocessor_config.json "size" (shortest_edge, longest_edge): as stored
# copies of zai-org/GLM-OCR's and tests naming GLM-4.1V give it (found with the code search).
GLM_MIN, GLM_MAX = 112 * 112, 9633792
MARKERS = {
    "<|vision_start|>": "<|begin_of_image|>",
    "<|image_pad|>": "<|image|>",
    "<|vision_end|>": "<|end_of_image|>",
}


def _picture(folder: Path, h: int, w: int) -> Path:
    from PIL import Image

    pixels = (np.random.default_rng(h * 10_000 + w).random((h, w, 3)) * 255).astype("uint8")
    path = folder / f"p{h}x{w}.png"
    Image.fromarray(pixels).save(path)
    return path


def _processors():
    from transformers import Glm4vImageProcessorPil, Qwen2VLImageProcessorPil

    glm = Glm4vImageProcessorPil(size={"shortest_edge": GLM_MIN, "longest_edge": GLM_MAX})
    qwen = Qwen2VLImageProcessorPil(min_pixels=GLM_MIN // 2, max_pixels=GLM_MAX // 2)
    return glm, qwen


@pytest.mark.parametrize("h,w", [(300, 400), (20, 30), (57, 85), (812, 1134), (3000, 4000)])
def test_glm_sizing_is_qwens_with_half_the_pixel_budget(tmp_path, h, w):
    from PIL import Image

    glm, qwen = _processors()
    pic = Image.open(_picture(tmp_path, h, w)).convert("RGB")
    g, q = glm(images=pic, return_tensors="np"), qwen(images=pic, return_tensors="np")
    assert g["image_grid_thw"].tolist() == q["image_grid_thw"].tolist()
    assert np.array_equal(g["pixel_values"], q["pixel_values"])  # the same patch order too


def test_glm_scales_up_a_side_under_28_px_first_and_qwen_does_not(tmp_path):
    from PIL import Image

    glm, qwen = _processors()
    pic = Image.open(_picture(tmp_path, 10, 1000)).convert("RGB")
    assert glm(images=pic)["image_grid_thw"].tolist() == [[1, 2, 200]]
    assert qwen(images=pic)["image_grid_thw"].tolist() == [[1, 2, 58]]


def _rope_index(cls, ids, types_, grids):
    import torch

    vision = types.SimpleNamespace(spatial_merge_size=2, tokens_per_second=2)
    model = types.SimpleNamespace(config=types.SimpleNamespace(vision_config=vision))
    model.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, model)
    return cls.get_rope_index(
        model, torch.tensor([ids]), torch.tensor([types_]), image_grid_thw=torch.tensor(grids)
    )


def test_glm_positions_are_qwen2_5_vls_for_pictures():
    import torch
    from transformers.models.glm4v.modeling_glm4v import Glm4vModel
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    grids = [[1, 6, 8], [1, 4, 10]]
    ids, types_ = [], []
    for part in ([1, 2, 3, 4], 0, [5, 6], 1, [7, 8, 9]):
        n = int(np.prod(grids[part])) // 4 if isinstance(part, int) else len(part)
        ids += [9] * n if isinstance(part, int) else part
        types_ += [1 if isinstance(part, int) else 0] * n
    glm, glm_delta = _rope_index(Glm4vModel, ids, types_, grids)
    qwen, qwen_delta = _rope_index(Qwen2_5_VLModel, ids, types_, grids)
    assert torch.equal(glm, qwen) and torch.equal(glm_delta, qwen_delta)
    assert glm[:, 0, 4].tolist() == [4, 4, 4]  # the first picture token: t = h = w = start
    assert glm[:, 0, -3].tolist() == [15] * 3  # text resumes at start + max(h, w) / merge


def _glm_variant(source: Path, folder: Path) -> Path:
    """The tiny Qwen2.5-VL package with GLM's pixel budget (halved) in its Resize."""
    folder.mkdir()
    for path in source.iterdir():
        if path.name != "processor_config.json":
            (folder / path.name).symlink_to(path)
    proc = json.loads((source / "processor_config.json").read_text())
    for step in proc["processor"]["transforms"]:
        if step["operation"]["type"] == "Resize":
            step["operation"]["attrs"].update(min_pixels=GLM_MIN // 2, max_pixels=GLM_MAX // 2)
    (folder / "processor_config.json").write_text(json.dumps(proc))
    return folder


def _glm_processor(tokenizer_json: Path):
    """Glm4vProcessor over a tokenizer with GLM's marker text on the package's marker ids.

    Built without __init__: its video processor needs torchvision, which mmforge does not
    install; pictures never reach it.
    """
    from transformers import Glm4vProcessor, PreTrainedTokenizerFast

    data = json.loads(tokenizer_json.read_text())
    for token in data["added_tokens"]:
        token["content"] = MARKERS.get(token["content"], token["content"])
    renamed = tokenizer_json.parent.parent / "glm_tokenizer.json"
    renamed.write_text(json.dumps(data))
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(renamed))
    proc = object.__new__(Glm4vProcessor)
    proc.image_processor, _ = _processors()
    proc.tokenizer, proc.video_processor, proc.chat_template = tokenizer, None, None
    proc.image_token, proc.video_token = "<|image|>", "<|video|>"
    proc.image_token_id = tokenizer.convert_tokens_to_ids("<|image|>")
    proc.video_token_id = proc.video_start_id = proc.video_end_id = -1
    return proc


@pytest.mark.parametrize("n", [1, 2])
def test_runtime_qwen2_5_vl_gives_glms_ids_grid_and_pixels(package, tmp_path, n):
    import onnxruntime_genai as og
    from PIL import Image

    folder = _glm_variant(package("qwen2_5_vl"), tmp_path / "glm")
    path = _picture(tmp_path, 300, 400)
    text = "<|user|>\n{}What is it?<|assistant|>"
    expected = _glm_processor(folder / "tokenizer.json")(
        text=text.format("<|begin_of_image|><|image|><|end_of_image|>" * n),
        images=[Image.open(path).convert("RGB")] * n,
        return_tensors="np",
    )
    model = og.Model(og.Config(str(folder)))
    named = model.create_multimodal_processor()(
        text.format("<|vision_start|><|image_pad|><|vision_end|>" * n),
        images=og.Images.open(*[str(path)] * n),
    )
    assert named["input_ids"].as_numpy().reshape(-1).tolist() == expected["input_ids"][0].tolist()
    assert named["image_grid_thw"].as_numpy().tolist() == expected["image_grid_thw"].tolist()
    pixels = named["pixel_values"].as_numpy().reshape(expected["pixel_values"].shape)
    assert np.abs(pixels - expected["pixel_values"]).max() < 1e-5
    assert int(named["num_image_tokens"].as_numpy().sum()) == 154 * n  # 22·28 / 2²


def test_inspect_names_glm_4_1v_and_glm_4_5v_converted_on_qwen2_5_vl(tmp_path):
    import transformers

    from mmforge.backend.inspect import inspect_source

    for config, key, pipeline in (
        (transformers.Glm4vConfig(), "glm4v", "qwen2_5_vl"),
        (transformers.Glm4vMoeConfig(text_config={"head_dim": 128}), "glm4v_moe", "qwen2_5_vl"),
    ):
        folder = tmp_path / key
        config.save_pretrained(folder)
        p = inspect_source(str(folder))
        assert p.family_key == key and p.pipeline_type == pipeline
        assert p.converts == "converts exactly", p.converts
        if key == "glm4v_moe":  # GLM-4.5V's experts, as the release has them (one group)
            assert "128 routed experts of width 1408, 8 active per token" in p.architecture[0]
            assert "45 of 46 layers (dense MLP on the first 1)" in p.architecture[0]
        assert p.projector.variant == "Glm4vVisionPatchMerger"
        assert p.token_ids["image_start_token_id"] == 151339
