"""The runtime pipelines that could host seed families (docs/seed-families.md), measured.

Two verdicts rest on the installed ONNX Runtime GenAI's processors: LLaVA-1.5's token layout
is reachable on `videochat_flash_qwen` (a constant count per picture, its marker text absorbed
by the package's own tokenizer), and Gemma 3n's picture layout is the `gemma3` processor's
own. Each test builds the ids both ways and fails when the runtime changes what it splices.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.families.components.tokens import added_token

ABSORB = ("<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>")


def _variant(source: Path, folder: Path, tokenizer_json: str, genai) -> Path:
    """A copy of a package with its own tokenizer.json and genai_config.json."""
    folder.mkdir()
    for path in source.iterdir():
        if path.name not in ("tokenizer.json", "genai_config.json", "tokenizer_config.json"):
            (folder / path.name).symlink_to(path)
    (folder / "tokenizer.json").write_text(tokenizer_json)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"add_bos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"})
    )
    config = json.loads((source / "genai_config.json").read_text())
    genai(config["model"])
    (folder / "genai_config.json").write_text(json.dumps(config))
    return folder


def _with_added(tokenizer, contents: tuple[str, ...]) -> tuple[str, dict[str, int]]:
    """The tokenizer's JSON with added tokens on new ids, and those ids."""
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    next_id = max(max(t["id"] for t in data["added_tokens"]), len(data["model"]["vocab"])) + 1
    new = {}
    for content in contents:
        data["added_tokens"].append(added_token(content, next_id))
        new[content] = next_id
        next_id += 1
    return json.dumps(data), new


def _runtime_ids(folder: Path, prompt: str, picture: Path, n: int) -> tuple[list[int], int]:
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(folder)))
    named = model.create_multimodal_processor()(prompt, images=og.Images.open(*[str(picture)] * n))
    ids = [int(t) for t in named["input_ids"].as_numpy().reshape(-1)]
    return ids, int(named["num_image_tokens"].as_numpy().sum())


@pytest.fixture
def picture(tmp_path: Path) -> Path:
    from PIL import Image

    pixels = (np.random.default_rng(0).random((300, 400, 3)) * 255).astype("uint8")
    path = tmp_path / "photo.png"
    Image.fromarray(pixels).save(path)
    return path


@pytest.mark.parametrize("n", [1, 2])
def test_llava_token_layout_is_reachable_on_videochat_flash_qwen(package, tmp_path, picture, n):
    from PIL import Image
    from transformers import CLIPImageProcessor, LlavaProcessor, PreTrainedTokenizerFast

    source = package("qwen2_5_vl")
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(source / "tokenizer.json"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
        ),
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    text = "USER: {}\nWhat is it? ASSISTANT:"
    pil = Image.open(picture).convert("RGB")
    expected = np.asarray(processor(text=text.format("<image>" * n), images=[pil] * n)["input_ids"])

    def videochat(model: dict) -> None:
        model["type"] = "videochat_flash_qwen"
        model["vision"] = {
            "filename": "vision.onnx",
            "config_filename": "frames.json",
            "num_visual_tokens": 576,
            "inputs": {"pixel_values": "pixel_values"},
            "outputs": {"image_features": "image_features"},
        }

    tokenizer_json, new = _with_added(tokenizer, ABSORB)
    folder = _variant(source, tmp_path / "llava", tokenizer_json, videochat)
    ops = [("DecodeImage", {"color_space": "RGB"}), ("Rescale", {})]
    transforms = [{"operation": {"name": t.lower(), "type": t, "attrs": a}} for t, a in ops]
    (folder / "frames.json").write_text(json.dumps({"processor": {"transforms": transforms}}))
    ids, features = _runtime_ids(folder, text.format("<|vision_start|>" * n), picture, n)

    image = tokenizer.convert_tokens_to_ids("<image>")
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    as_model_sees = [image if i in (pad, *new.values()) else i for i in ids]
    assert features == 576 * n
    assert as_model_sees == expected.reshape(-1).tolist()
    # Without the absorbing tokens the runtime's two markers per picture would be extra ids.
    assert len(ids) == expected.size and ids.count(pad) == 574 * n


@pytest.mark.parametrize("n", [1, 2])
def test_gemma3n_picture_layout_is_the_gemma3_processors_own(package, tmp_path, picture, n):
    from PIL import Image
    from transformers import (
        Gemma3nAudioFeatureExtractor,
        Gemma3nProcessor,
        PreTrainedTokenizerFast,
        SiglipImageProcessor,
    )

    source = package("gemma3")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(source / "tokenizer.json"),
        bos_token="<bos>",
        extra_special_tokens={
            "image_token": "<image_soft_token>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "audio_token": "<audio_soft_token>",
            "boa_token": "<start_of_audio>",
            "eoa_token": "<end_of_audio>",
        },
    )
    processor = Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(),
        image_processor=SiglipImageProcessor(size={"height": 768, "width": 768}),
        tokenizer=tokenizer,
    )
    text = "<start_of_turn>user\n{}What is it?<end_of_turn>\n<start_of_turn>model\n"
    pil = Image.open(picture).convert("RGB")
    expected = processor(
        text=text.format("<image_soft_token>" * n), images=[pil] * n, add_special_tokens=False
    )["input_ids"]

    tokenizer_json, _ = _with_added(tokenizer, ())
    folder = _variant(source, tmp_path / "gemma3n", tokenizer_json, lambda model: None)
    ids, features = _runtime_ids(folder, text.format("<start_of_image>" * n), picture, n)

    assert ids == np.asarray(expected).reshape(-1).tolist()  # no id to map: the same text
    assert features == 256  # gemma3 reports 256 per prompt; its features are [N, 256, H]
