"""Tiny and release-shaped Pixtral-12B checkpoints (llava with a Pixtral tower)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families.mistral.tiny import MISTRAL3
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT, VISION


def _pixtral_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import LlavaConfig

    text = {
        **TEXT,
        "model_type": "mistral",
        "vocab_size": vocab,
        "sliding_window": None,
        "bos_token_id": s["<s>"],
        "eos_token_id": s["</s>"],
        "tie_word_embeddings": False,
    }
    vision = {
        **VISION,
        "model_type": "pixtral",
        "head_dim": 16,
        "image_size": 128,
        "patch_size": 8,
        "hidden_act": "gelu",  # as in Pixtral-12B (Mistral 3's towers use SiLU)
    }
    return LlavaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=s["[IMG]"],
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        multimodal_projector_bias=True,
        tie_word_embeddings=False,
    )


# Mistral 3's tokens, template and processor settings: Pixtral-12B's processor is
# PixtralProcessor with the same [IMG] / [IMG_BREAK] / [IMG_END] framing.
PIXTRAL = dataclasses.replace(
    MISTRAL3,
    family_key="pixtral",
    hf_class="LlavaForConditionalGeneration",
    make_config=_pixtral_config,
)


def _pixtral_12b_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """mistral-community/pixtral-12b's config.json (transformers 4.47), shrunk.

    The file itself was not found offline. Its values come from the script that wrote it,
    huggingface/transformers src/transformers/models/pixtral/convert_pixtral_weights_to_hf.py
    (read through the stored-code index, commit 069accfaddef5025acc104b4545c0de3b71802be):
    a `mistral` text model (head_dim 128, hidden 5120, 1,024,000 positions, rope_theta
    1e9, no sliding window, untied, 131,072 tokens, is_composition), LlavaConfig with
    vision_feature_layer -1, image_token_index 10, strategy "full", image_seq_length 1;
    the tower from the release's params.json (1024 px, 16 px patches, rope_theta 1e4,
    GELU by PixtralVisionConfig's default). That script dumps `to_dict()`, so the real
    file also lists every default; those are left out here. Widths and depths shrunk;
    vocabulary and token ids ours.
    """
    return {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_seq_length": 1,
        "image_token_index": s["[IMG]"],
        "model_type": "llava",
        "projector_hidden_act": "gelu",
        "text_config": {
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "intermediate_size": 128,
            "is_composition": True,
            "max_position_embeddings": 1024000,
            "model_type": "mistral",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000000.0,
            "sliding_window": None,
            "vocab_size": vocab,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.47.0.dev0",
        "vision_config": {
            "head_dim": 16,
            "hidden_act": "gelu",
            "hidden_size": 32,
            "image_size": 1024,
            "intermediate_size": 64,
            "is_composition": True,
            "model_type": "pixtral",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 16,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
        },
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full",
    }


def _release_names(name: str) -> str:
    """Transformers 5's Llava tensor names as transformers 4.47 wrote them (the release)."""
    for new, old in (
        ("model.language_model.", "language_model.model."),
        ("model.vision_tower.", "vision_tower."),
        ("model.multi_modal_projector.", "multi_modal_projector."),
        ("lm_head.", "language_model.lm_head."),
    ):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


RELEASED_PIXTRAL = (
    ReleaseSpec(
        key="pixtral-12b",
        release="mistral-community/pixtral-12b",
        tiny=PIXTRAL,
        config_json=_pixtral_12b_release,
        rename=_release_names,
        # The release's preprocessor_config.json (PixtralImageProcessor, 16 px patches,
        # longest edge 1024, CLIP statistics, bicubic), as documented for the release.
        preprocessor={
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": CLIP_MEAN,
            "image_processor_type": "PixtralImageProcessor",
            "image_std": CLIP_STD,
            "patch_size": {"height": 16, "width": 16},
            "processor_class": "PixtralProcessor",
            "resample": 3,
            "rescale_factor": 0.00392156862745098,
            "size": {"longest_edge": 1024},
        },
        # The release's chat template text was not found offline: the tiny spec's
        # Mistral [INST] template is used (ReleaseSpec's None).
    ),
)
