"""The runtime-type table is measured: the installed runtime is asked about every name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import ALL, lookup
from mmforge.backend.runtime_types import MULTIMODAL_CHAT, NOT_IN_RUNTIME, SPEECH_TO_TEXT

UNSUPPORTED = "Unsupported model_type"


def _runtime_says(folder: Path, model_type: str) -> str:
    """What ONNX Runtime GenAI says loading a package of this type with no graphs."""
    import onnxruntime_genai as og

    folder.mkdir()
    io = {
        "inputs": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": "logits",
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }
    decoder = {
        "filename": "decoder.onnx",
        "head_size": 4,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "num_key_value_heads": 2,
        **io,
    }
    config = {
        "model": {
            "type": model_type,
            "vocab_size": 10,
            "context_length": 16,
            "eos_token_id": [0],
            "pad_token_id": 0,
            "bos_token_id": 0,
            "decoder": decoder,
        },
        "search": {"max_length": 16},
    }
    (folder / "genai_config.json").write_text(json.dumps(config))
    try:
        og.Model(og.Config(str(folder)))
    except RuntimeError as e:  # every type fails here: no graph files exist
        return str(e)
    return "loaded"


@pytest.mark.parametrize("model_type", [*MULTIMODAL_CHAT, *SPEECH_TO_TEXT])
def test_the_installed_runtime_knows_every_type_in_the_table(tmp_path, model_type):
    said = _runtime_says(tmp_path / model_type, model_type)
    assert UNSUPPORTED not in said, said


@pytest.mark.parametrize("model_type", [*NOT_IN_RUNTIME, "mmforge_no_such_type"])
def test_the_installed_runtime_refuses_the_names_the_table_says_it_lacks(tmp_path, model_type):
    said = _runtime_says(tmp_path / model_type, model_type)
    assert UNSUPPORTED in said, said


def test_every_family_pipeline_is_a_runtime_chat_type():
    for family in ALL:
        if family.pipeline_type is not None:
            assert family.pipeline_type in MULTIMODAL_CHAT, family.key


@pytest.mark.parametrize("model_type", ["whisper", "moonshine"])
def test_speech_to_text_models_are_named_as_such(model_type):
    with pytest.raises(MmforgeError, match="speech-to-text model, not a chat model"):
        lookup(model_type)


@pytest.mark.parametrize("model_type", ["lfm2_audio", "videochat_flash_qwen"])
def test_runtime_pipelines_not_converted_yet_are_named_with_the_reason(tmp_path, model_type):
    from mmforge.backend.convert import convert
    from mmforge.backend.inspect import inspect_source

    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    profile = inspect_source(str(folder), trust_remote_code=True)
    assert profile.runnable and profile.pipeline_type == model_type
    assert any(
        w.startswith("Cannot convert yet: ONNX Runtime GenAI 0.18 runs it")
        for w in profile.warnings
    )
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out", trust_remote_code=True)
    assert "no native version" in e.value.one_line()
    assert not (tmp_path / "out").exists()


def test_the_runtime_wraps_each_videochat_flash_frame_in_markers_the_model_never_saw(
    package, tmp_path
):
    """ONNX Runtime GenAI's `videochat_flash_qwen` processor turns every frame into
    <|vision_start|>, vision.num_visual_tokens <|image_pad|> tokens and <|vision_end|>, where
    the model's own code puts a video's frame features, with nothing between them, in place
    of one <image> placeholder. A package's tokenizer can absorb the markers
    (tests/backend/test_seed_hosts.py); VideoChat-Flash's entry names them, and a runtime
    that stops adding them fails here, for the entry to be revisited."""
    import onnxruntime_genai as og
    from PIL import Image

    from mmforge.backend.families import lookup

    source = package("qwen2_5_vl")
    folder = tmp_path / "videochat"
    folder.mkdir()
    for path in source.iterdir():  # the Qwen2 tokenizer and graphs, for the sessions to load
        (folder / path.name).symlink_to(path)
    (folder / "genai_config.json").unlink()
    config = json.loads((source / "genai_config.json").read_text())
    config["model"]["type"] = "videochat_flash_qwen"
    config["model"]["vision"] = {
        "filename": "vision.onnx",
        "config_filename": "frames.json",
        "num_visual_tokens": 3,
        "inputs": {"pixel_values": "pixel_values"},
        "outputs": {"image_features": "image_features"},
    }
    (folder / "genai_config.json").write_text(json.dumps(config))
    ops = [
        ("decode_image", "DecodeImage", {"color_space": "RGB"}),
        ("resize", "Resize", {"width": 28, "height": 28, "keep_aspect_ratio": 0}),
        ("rescale", "Rescale", {}),
        ("normalize", "Normalize", {"mean": [0.5] * 3, "std": [0.5] * 3}),
    ]
    transforms = [{"operation": {"name": n, "type": t, "attrs": a}} for n, t, a in ops]
    (folder / "frames.json").write_text(json.dumps({"processor": {"transforms": transforms}}))
    frame = tmp_path / "frame.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(frame)

    model = og.Model(og.Config(str(folder)))
    tokenizer = og.Tokenizer(model)
    start, pad, end = (
        int(tokenizer.encode(t)[0]) for t in ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
    )
    prompt = "<|im_start|>user\n<|vision_start|><|vision_start|>What happens?<|im_end|>\n"
    named = model.create_multimodal_processor()(
        prompt, images=og.Images.open(str(frame), str(frame))
    )
    ids = [int(t) for t in named["input_ids"].as_numpy().reshape(-1)]
    assert ids.count(start) == ids.count(end) == 2 and ids.count(pad) == 6
    first = ids.index(start)
    assert ids[first : first + 10] == [start, pad, pad, pad, end] * 2
    assert named["pixel_values"].as_numpy().shape == (1, 2, 3, 28, 28)  # the frames, stacked
    assert "<|vision_start|>" in (lookup("videochat_flash_qwen").not_converted or "")
