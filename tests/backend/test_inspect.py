"""`inspect` on full-size default configs of every family and on the tiny checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmforge.backend.errors import MmforgeError
from mmforge.backend.inspect import inspect_source

V, A, E, D = "vision_encoder", "audio_encoder", "embedding", "decoder"


def _save(tmp_path: Path, name: str, config) -> Path:
    folder = tmp_path / name
    config.save_pretrained(folder)
    return folder


def _gemma4(vision: bool, audio: bool):
    import transformers as T

    return T.Gemma4Config(
        vision_config=T.Gemma4VisionConfig() if vision else None,
        audio_config=T.Gemma4AudioConfig() if audio else None,
    )


# config factory, family key, pipeline type, components, projector variant, token ids
CASES = [
    (
        "Qwen2_5_VLConfig",
        "qwen2_5_vl",
        "qwen2_5_vl",
        (V, E, D),
        "PatchMerger",
        {"image_token_id": 151655, "vision_start_token_id": 151652, "video_token_id": 151656},
    ),
    (
        "Qwen3VLConfig",
        "qwen3_vl",
        "qwen3_vl",
        (V, E, D),
        "PatchMerger",
        {"image_token_id": 151655, "vision_start_token_id": 151652},
    ),
    (
        "Qwen3VLMoeConfig",
        "qwen3_vl_moe",
        "qwen3_vl",
        (V, E, D),
        "PatchMerger",
        {"image_token_id": 151655, "vision_start_token_id": 151652},
    ),
    (
        "Gemma3Config",
        "gemma3",
        "gemma3",
        (V, E, D),
        "Gemma3MultiModalProjector",
        {"image_token_id": 262144, "boi_token_id": 255999, "eoi_token_id": 256000},
    ),
    (
        "Mistral3Config",
        "mistral3",
        "mistral3",
        (V, E, D),
        "Mistral3MultiModalProjector",
        {"image_token_id": 10},
    ),
    (
        "Phi4MultimodalConfig",
        "phi4mm",
        "phi4mm",
        (V, A, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 200010, "audio_token_id": 200011},
    ),
    (
        "Lfm2VlConfig",
        "lfm2_vl",
        "lfm2_vl",
        (V, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 396},
    ),
    ("LlavaConfig", "llava", None, (V, E, D), "MLPMultiModalProjector", {"image_token_id": 32000}),
    (
        "LlavaNextConfig",
        "llava_next",
        None,
        (V, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 32000},
    ),
    (
        "VideoLlavaConfig",
        "video_llava",
        None,
        (V, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 32000, "video_token_id": 32001},
    ),
    (
        "PaliGemmaConfig",
        "paligemma",
        None,
        (V, E, D),
        "LinearMultiModalProjector",
        {"image_token_id": 256000},
    ),
    (
        "InternVLConfig",
        "internvl",
        None,
        (V, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 151667},
    ),
    (
        "Idefics2Config",
        "idefics2",
        None,
        (V, E, D),
        "LinearMultiModalProjector",
        {"image_token_id": 32001},
    ),
    (
        "Idefics3Config",
        "idefics3",
        None,
        (V, E, D),
        "LinearMultiModalProjector",
        {"image_token_id": 128257},
    ),
    (
        "Florence2Config",
        "florence2",
        None,
        (V, E, D),
        "LinearMultiModalProjector",
        {"image_token_id": 51289},
    ),
    (
        "Molmo2Config",
        "molmo",
        None,
        (V, E, D),
        "MLPMultiModalProjector",
        {"image_token_id": 151938},
    ),
    ("Qwen3_5Config", "qwen3_5", "qwen3_5", (V, E, D), "PatchMerger", {"image_token_id": 248056}),
    (
        "Qwen3_5MoeConfig",
        "qwen3_5_moe",
        "qwen3_5_moe",
        (V, E, D),
        "PatchMerger",
        {"image_token_id": 248056},
    ),
]


@pytest.mark.parametrize(
    "cls,key,pipeline,components,projector,token_ids", CASES, ids=[c[0] for c in CASES]
)
def test_inspect_full_size_default_configs(
    tmp_path, cls, key, pipeline, components, projector, token_ids
):
    import transformers

    folder = _save(tmp_path, cls, getattr(transformers, cls)())
    p = inspect_source(str(folder))
    assert p.family_key == key
    assert p.pipeline_type == pipeline
    assert p.runnable is (pipeline is not None)
    if pipeline is None:
        assert (
            p.runtime_reason and "has no" in p.runtime_reason
        ) or "encoder-decoder" in p.runtime_reason
    assert p.components == components
    assert p.projector.variant == projector
    assert p.projector.reason and p.projector.fields
    for name, value in token_ids.items():
        assert p.token_ids[name] == value, name
    # No weights in the folder: the parameter count comes from the config on the meta device.
    assert p.sizes.source == "config (meta device)"
    assert p.sizes.parameters["total"] > 100_000_000
    sizes = p.sizes.package_bytes
    if key == "lfm2_vl":  # no f16 path; its decoder builder holds the whole model
        assert list(sizes) == ["f32", "int4"] and sizes["int4"] < sizes["f32"]
        assert p.sizes.convert_peak_bytes > 4 * p.sizes.parameters["total"]
    else:
        assert sizes["f16"] * 2 == sizes["f32"] or key in ("phi4mm",)
        assert sizes["int4"] < sizes["f16"] < sizes["f32"]
    json.dumps(p.to_dict())  # the --json output is serialisable


@pytest.mark.parametrize(
    "vision,audio,components",
    [
        (True, True, (V, A, E, D)),
        (True, False, (V, E, D)),
    ],
)
def test_gemma4_audio_encoder_only_when_the_config_has_audio(tmp_path, vision, audio, components):
    p = inspect_source(str(_save(tmp_path, "g4", _gemma4(vision, audio))))
    assert p.family_key == "gemma4" and p.pipeline_type == "gemma4"
    assert p.components == components
    assert p.projector.variant == "Gemma4MultimodalEmbedder"
    assert p.token_ids["image_token_id"] == 258880 and p.token_ids["audio_token_id"] == 258881
    assert p.token_ids["boi_token_id"] == 255999 and p.token_ids["eoa_token_id"] == 258883


def test_gemma3_projector_reason_names_the_pool_kernel(tmp_path):
    import transformers as T

    cfg = T.Gemma3Config(vision_config={"image_size": 896, "patch_size": 14})
    p = inspect_source(str(_save(tmp_path, "g3", cfg)))
    assert "4×4 AvgPool2d" in p.projector.reason
    assert p.projector.fields["mm_tokens_per_image"] == 256
    assert p.image_tokens.fixed == 256


EXPECTED_TINY = {
    "qwen2_5_vl": (
        "qwen2_5_vl",
        (V, E, D),
        {"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>"},
    ),
    "qwen3_vl": ("qwen3_vl", (V, E, D), {"image_token_id": "<|image_pad|>"}),
    "qwen3_vl_moe": ("qwen3_vl", (V, E, D), {"image_token_id": "<|image_pad|>"}),
    "gemma3": (
        "gemma3",
        (V, E, D),
        {"image_token_id": "<image_soft_token>", "boi_token_id": "<start_of_image>"},
    ),
    "gemma4": (
        "gemma4",
        (V, A, E, D),
        {
            "image_token_id": "<|image|>",
            "boi_token_id": "<|image>",
            "audio_token_id": "<|audio|>",
            "eoa_token_id": "<audio|>",
        },
    ),
    "mistral3": ("mistral3", (V, E, D), {"image_token_id": "[IMG]"}),
    "phi4mm": (
        "phi4mm",
        (V, A, E, D),
        {"image_token_id": "<|endoftext10|>", "audio_token_id": "<|endoftext11|>"},
    ),
    "lfm2_vl": ("lfm2_vl", (V, E, D), {"image_token_id": "<image>"}),
}


@pytest.mark.parametrize("family", sorted(EXPECTED_TINY))
def test_inspect_tiny_checkpoints(tiny, family):
    pipeline, components, strings = EXPECTED_TINY[family]
    p = inspect_source(str(tiny(family)))
    assert p.pipeline_type == pipeline
    assert p.components == components
    for name, text in strings.items():
        assert p.token_strings[name] == text
    assert p.sizes.source == "safetensors"
    assert p.sizes.checkpoint_bytes == sum(
        f.stat().st_size for f in tiny(family).glob("*.safetensors")
    ) - _header_bytes(tiny(family))
    assert not [w for w in p.warnings if "lacks tokens" in w], p.warnings
    if family == "phi4mm":
        assert p.token_ids == {"image_token_id": 200010, "audio_token_id": 200011}


def _header_bytes(folder: Path) -> int:
    import struct

    total = 0
    for f in folder.glob("*.safetensors"):
        with f.open("rb") as fh:
            total += 8 + struct.unpack("<Q", fh.read(8))[0]
    return total


def test_missing_runtime_tokens_are_warned(tiny, tmp_path):
    import shutil

    folder = tmp_path / "q"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    for added in data["added_tokens"]:
        if added["content"] == "<|vision_start|>":
            added["content"] = "<|vstart|>"
    (folder / "tokenizer.json").write_text(json.dumps(data))
    p = inspect_source(str(folder))
    assert any("<|vision_start|>" in w for w in p.warnings)


def test_remote_code_needs_consent(tmp_path):
    folder = tmp_path / "phi3v"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "phi3_v",
                "auto_map": {"AutoConfig": "configuration_phi3_v.Phi3VConfig"},
                "hidden_size": 3072,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "embd_layer": {"embedding_cls": "image", "projection_cls": "mlp"},
            }
        )
    )
    with pytest.raises(MmforgeError) as e:
        inspect_source(str(folder))
    assert "--trust-remote-code" in e.value.one_line()
    p = inspect_source(str(folder), trust_remote_code=True)
    assert p.family_key == "phi3v" and p.pipeline_type == "phi3v" and p.remote_code
    assert p.sizes.source == "unknown"
    assert any("Remote code" in w for w in p.warnings)


def test_text_only_model_is_refused_with_a_pointer(tmp_path):
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(MmforgeError, match="text-only"):
        inspect_source(str(folder))


def test_unknown_model_type_suggests_close_matches(tmp_path):
    folder = tmp_path / "typo"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5vl"}))
    with pytest.raises(MmforgeError) as e:
        inspect_source(str(folder))
    assert "Did you mean qwen2_5_vl" in e.value.one_line()
    assert e.value.one_line().endswith("?")  # the question ends the line, no "?." after it


def test_a_shard_index_cannot_name_a_file_outside_the_model_folder(tiny, tmp_path):
    import json
    import shutil

    from mmforge.backend.convert import convert
    from mmforge.backend.tensors import local_tensors

    folder = tmp_path / "model"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    names = [t.name for t in local_tensors(tmp_path) or []]
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "../elsewhere.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for job in (
        lambda: inspect_source(str(folder)),
        lambda: convert(str(folder), tmp_path / "pkg"),
    ):
        with pytest.raises(MmforgeError, match="names a shard outside the model folder"):
            job()
    assert not (tmp_path / "pkg").exists()


def test_contradicting_attention_sizes_are_the_configs_fault_not_a_conversion_bug(tiny, tmp_path):
    """A 32-wide vision tower with 3 heads built in transformers and converted, then the
    runtime could not load the graph and convert called it a conversion bug."""
    import shutil

    from mmforge.backend.convert import convert

    folder = tmp_path / "model"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["vision_config"]["hidden_size"] % 3  # (not vacuous)
    config["vision_config"]["num_heads"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    for run in (lambda: inspect_source(str(folder)), lambda: convert(str(folder), tmp_path / "o")):
        with pytest.raises(MmforgeError) as e:
            run()
        said = e.value.one_line()
        assert "vision_config.hidden_size" in said and "conversion bug" not in said
    assert not (tmp_path / "o").exists()


def test_a_config_transformers_cannot_build_is_named_not_a_crash(tmp_path, monkeypatch):
    """With no weights, inspect counts parameters by building the model on the meta device;
    a config transformers refused there was an internal error (exit 70)."""
    from mmforge.backend import tensors

    def refuse(config: object, hf_class: str) -> None:
        raise ValueError("embed_dim must be divisible by num_heads (got `embed_dim`: 1152)")

    monkeypatch.setattr(tensors, "meta_tensors", refuse)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3"}))
    profile = inspect_source(str(folder))
    assert not profile.sizes.parameters
    said = [w for w in profile.warnings if "transformers cannot build a model" in w]
    assert said and "embed_dim must be divisible" in said[0]
