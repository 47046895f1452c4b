"""Qwen2-VL (`qwen2_vl`): Qwen2.5-VL's runtime pipeline with a full-attention vision tower.

ONNX Runtime GenAI 0.18 has no `qwen2_vl` type, but its `qwen2_5_vl` pipeline is what
Qwen2-VL needs: the same Qwen2VLImageProcessor (smart_resize, CLIP mean/std, PatchImage
in `qwen2_5_vl_image_processor.cpp`), the same `<|vision_start|><|image_pad|>…<|vision_end|>`
framing, and the same 3-D M-RoPE positions (`position_inputs.cpp`, `IsQwenVLFamily` in
`model_type.h`). The runtime never passes window-attention inputs to the vision graph on
this path: `vision.window_size` is read only by `QwenVisionPipeline::CalculateWindowIndex`
(`qwen_vl_vision.cpp`, the QNN pipeline), so leaving it out of genai_config is the form
that runs full attention.

What differs from Qwen2.5-VL lives in the graphs, which mobius builds for `qwen2_vl`:
every vision block attends to the whole image; LayerNorm, not RMSNorm; an fc1 → QuickGELU
→ fc2 MLP of embed_dim·mlp_ratio; the merger's `ln_q` is a LayerNorm and its output width
is `vision_config.hidden_size` (the text width: Qwen2-VL has no `out_hidden_size`); the
decoder is Qwen2's with sectioned M-RoPE.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import Cfg, Projector
from mmforge.backend.families._fields import (
    COMMON_INERT,
    Rule,
    check,
    honoured,
    inert,
    only,
    shapes,
    token_ids,
)
from mmforge.backend.families.qwen.fields import QWEN_TEXT_DECODER
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template
from mmforge.backend.tiny.sizes import TEXT


def merger(cfg: Cfg) -> Projector:
    """Qwen2-VL's PatchMerger: LayerNorm → 2×2 merge → Linear → GELU → Linear."""
    merge = cfg.get("vision_config.spatial_merge_size", 2)
    out = cfg.first("vision_config.hidden_size", "text_config.hidden_size")
    return Projector(
        "PatchMerger",
        "LayerNorm → spatial merge → Linear → GELU → Linear",
        f"Qwen2-VL's vision tower ends in a patch merger: spatial_merge_size={merge} groups "
        f"{merge}×{merge} patches, then an MLP maps them to the text width "
        f"(vision_config.hidden_size={out})",
        {"vision_config.spatial_merge_size": merge, "vision_config.hidden_size": out},
    )


def architecture(cfg: Cfg) -> tuple[str, ...]:
    """What inspect says about the tower beyond the registry's facts."""
    depth = cfg.get("vision_config.depth")
    return (
        f"Vision tower: {depth} blocks, full attention in every one (no windows), "
        "LayerNorm and a QuickGELU MLP; the runtime runs it under its qwen2_5_vl pipeline",
    )


# --- config fields ----------------------------------------------------------------------
# The text model is Qwen2's (transformers' Qwen2VLTextConfig); the tower's norms (LayerNorm,
# eps 1e-6) and merger GELU are fixed in transformers' code, not fields.
FIELDS: tuple[Rule, ...] = (
    *COMMON_INERT,
    *QWEN_TEXT_DECODER,
    inert("text_config.use_sliding_window", "transformers acts on it through layer_types"),
    inert("text_config.sliding_window", "transformers acts on it through layer_types"),
    inert("text_config.max_window_layers", "transformers acts on it through layer_types"),
    check(
        "text_config.layer_types",
        lambda v, cfg: v is None or all(t == "full_attention" for t in v),
        "full_attention on every layer",
        "the decoder builds no sliding-window layers",
    ),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *token_ids("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
    inert("vision_token_id", "transformers 4's id of <|vision_pad|>; nothing reads it"),
    *shapes(
        "vision_config.",
        "depth",
        "embed_dim",
        "hidden_size",
        "num_heads",
        "in_channels",
        "patch_size",
        "spatial_merge_size",
        "temporal_patch_size",
    ),
    honoured("vision_config.mlp_ratio", "the vision MLP is embed_dim·mlp_ratio wide (measured)"),
    only(
        "vision_config.hidden_act",
        "quick_gelu",
        note="the vision MLP is built with QuickGELU, as released",
    ),
    only(
        "vision_config.rope_parameters.rope_theta",
        10000.0,
        note="the vision tower's 2-D rotary table is built with theta 10000",
    ),
    inert("vision_config.rope_parameters.rope_type", "the vision tower's RoPE is always 2-D"),
    inert("vision_config.in_chans", "transformers 4's duplicate of in_channels; not read"),
    inert("vision_config.spatial_patch_size", "transformers 4's duplicate of patch_size"),
)


# --- test checkpoints -------------------------------------------------------------------
def _tiny_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen2VLConfig

    from mmforge.backend.families.qwen.tiny import qwen_ids

    text = {
        **TEXT,
        "vocab_size": vocab,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
        },
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "tie_word_embeddings": False,
    }
    text.pop("head_dim")  # Qwen2 derives it: 64 / 4 heads = 16
    vision = {
        "depth": 2,
        "embed_dim": 32,
        "hidden_size": TEXT["hidden_size"],  # the merger's output: the text width
        "mlp_ratio": 2,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    return Qwen2VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **qwen_ids(s)
    )


def _tiny() -> TinySpec:
    import dataclasses

    from mmforge.backend.families.qwen import tiny

    return dataclasses.replace(
        tiny.QWEN2_5_VL,
        family_key="qwen2_vl",
        hf_class="Qwen2VLForConditionalGeneration",
        make_config=_tiny_config,
    )


TINY = _tiny()

# Qwen2-VL-2B-Instruct's sizes; the test checkpoint's keep the tower's and the decoder's
# proportions (mlp_ratio 4, merger into the text width) at a smaller scale.
RELEASED_2B = {
    "hidden": 1536, "intermediate": 8960, "layers": 28, "heads": 12, "kv_heads": 2,
    "vision_depth": 32, "vision_embed": 1280, "vision_heads": 16, "mrope": [16, 24, 24],
}  # fmt: skip
SHRUNK_2B = {
    "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2,
    "vision_depth": 4, "vision_embed": 32, "vision_heads": 2, "mrope": [2, 3, 3],
}  # fmt: skip


def qwen2_vl_2b_release(
    s: dict[str, int], vocab: int, sizes: dict[str, Any] = SHRUNK_2B
) -> dict[str, Any]:
    """Qwen/Qwen2-VL-2B-Instruct's config.json, shrunk.

    Source: the text is not stored offline for the 2B; this follows Qwen2-VL-7B-Instruct's
    config.json as copied into a public repository (found with find_string
    `"vision_token_id": 151654`: a `cfg` dict in a VARGPT Qwen2-VL script, keys in the
    release's order, model_type renamed there), with the 2B's documented sizes (hidden
    1536, 12 heads, 2 KV heads, intermediate 8960, tied embeddings, vision hidden_size =
    1536; mllm's configuration_qwen2vl.hpp has the same). The flat transformers 4.41
    layout: text fields at the top, `rope_scaling` with `type: mrope`, a top-level
    `rope_theta`, `vision_token_id`, and a vision_config with embed_dim/mlp_ratio and the
    duplicates in_chans / spatial_patch_size.
    """
    return {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vision_end_token_id": s["<|vision_end|>"],
        "vision_token_id": s["<|vision_pad|>"],
        "image_token_id": s["<|image_pad|>"],
        "video_token_id": s["<|video_pad|>"],
        "hidden_act": "silu",
        "hidden_size": sizes["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": sizes["intermediate"],
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "model_type": "qwen2_vl",
        "num_attention_heads": sizes["heads"],
        "num_hidden_layers": sizes["layers"],
        "num_key_value_heads": sizes["kv_heads"],
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.41.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": sizes["vision_depth"],
            "embed_dim": sizes["vision_embed"],
            "mlp_ratio": 4,
            "num_heads": sizes["vision_heads"],
            "in_chans": 3,
            "hidden_size": sizes["hidden"],
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": sizes["mrope"]},
        "vocab_size": vocab,
    }


def _release_tiny() -> TinySpec:
    import dataclasses

    from mmforge.backend.families.qwen.tiny import QWEN_SPECIALS

    # The release's tokenizer also holds <|vision_pad|>, which its config names.
    return dataclasses.replace(TINY, specials=[*QWEN_SPECIALS, "<|vision_pad|>"])


RELEASED = (
    ReleaseSpec(
        key="qwen2_vl-2b",
        release="Qwen/Qwen2-VL-2B-Instruct",
        tiny=_release_tiny(),
        config_json=qwen2_vl_2b_release,
        # Qwen2-VL-Instruct's chat_template.json text, as quoted from the release's
        # chat_template.json in a Qwen2-VL model card stored in public GitHub code (found
        # with find_string on its `add_vision_id` branch); byte for byte the text
        # Qwen2.5-VL ships (resources/qwen2_vl_chat_template.jinja holds it under this
        # family's name).
        chat_template=released_template("qwen2_vl"),
    ),
)
