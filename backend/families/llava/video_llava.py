"""Video-LLaVA for pictures: LLaVA-1.5's package with a 224 px tower (K = 256).

VideoLlavaForConditionalGeneration holds two CLIP towers of one vision_config: an
`image_tower` for pictures and a `video_tower` for clips. A picture goes exactly as in
LLaVA-1.5 (VideoLlavaModel.get_image_features): the image tower's hidden states at
`vision_feature_layer` (-2 as released), the class token dropped under strategy
`default`, the two-layer projector; VideoLlavaProcessor.replace_image_token gives it
(224/14)² + 1 - 1 = 256 `<image>` ids, LlavaProcessor's rule. VideoLlavaImageProcessor
sizes it as CLIPImageProcessor does (shortest edge 224, bicubic, centre crop 224, CLIP
mean and std; transformers' image_transforms.resize and BaseImageProcessor.center_crop,
the functions CLIPImageProcessor calls), so the LLaVA entry's intake and pixel chain
serve it unchanged. The package is LLaVA-1.5's: videochat_flash_qwen with
vision.num_visual_tokens = 256; graphs.py maps `image_tower` onto the graphs' tower
names and leaves the video tower out (`unused_tensors`).

Videos are not part of a package: ONNX Runtime GenAI 0.18 has no video input
(attachments.py, NO_VIDEO: the library exports OgaLoadImages/OgaLoadAudios only, and
MultiModalProcessor reads only `images` and `audios`), so chat refuses a video file
before anything is loaded. Sending a clip's frames as pictures would not be Video-LLaVA's
video path either: a video keeps the class token (257 ids per frame, from the video
tower), and VideoChatFlashProcessor's BuildPromptTokens (videochat_flash_processor.cpp)
gives every picture of a package one count, vision.num_visual_tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    Projector,
    Recognition,
    ids,
)
from mmforge.backend.families.llava import expect, fields
from mmforge.backend.families.llava.graphs import feature_layers, keeps_class_token
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT

# LanguageBind/Video-LLaVA-7B-hf's chat_template.json (669 bytes, "Add chat template
# support", July 2024) was not found offline. Reconstructed from the template its author
# wrote the same month for llava-hf/LLaVA-NeXT-Video-7B-hf (its chat_template.json at
# 04a83e0, "Fix system message", found by the docs search), the same "USER: <video>\n...
# ASSISTANT:" prompt the Video-LLaVA model card and transformers' docs give: the role in
# capitals (none for a system message), the pictures as "<image>\n", the videos as
# "<video>\n", the texts each followed by a space, "ASSISTANT:" to prompt.
RELEASE_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

NOTE = (
    "Pictures only: ONNX Runtime GenAI 0.18 has no video input (its processor takes "
    "images and audio), so a video is refused; the video tower is not converted."
)


def _projector(cfg: Cfg) -> Projector:
    act = cfg.get("projector_hidden_act", "gelu")
    bias = bool(cfg.get("multimodal_projector_bias", True))
    return Projector(
        "MLPMultiModalProjector",
        f"Linear → {str(act).upper()} → Linear",
        f"Video-LLaVA reads its image tower's hidden states {feature_layers(cfg)} "
        f"({'with' if keeps_class_token(cfg) else 'without'} the class token), then a "
        f"two-layer MLP (projector_hidden_act={act}, multimodal_projector_bias={bias}); "
        "its video tower is not converted",
        {"projector_hidden_act": act, "multimodal_projector_bias": bias},
    )


def _token_ids(cfg: Cfg) -> dict[str, int]:
    return ids(
        cfg,
        image_token_id=("image_token_index", "image_token_id"),
        video_token_id=("video_token_index", "video_token_id"),
    )


def _vision(layers: int) -> dict[str, Any]:
    from mmforge.backend.tiny.sizes import VISION

    return {
        **VISION,
        "model_type": "clip_vision_model",
        "image_size": 56,
        "patch_size": 14,
        "projection_dim": 32,
        "hidden_act": "quick_gelu",  # CLIP's, as the release's tower leaves it
        "layer_norm_eps": 1e-5,
        "num_hidden_layers": layers,
    }


def _config(s: dict[str, int], vocab: int) -> Any:
    from transformers import VideoLlavaConfig

    return VideoLlavaConfig(
        text_config={
            **TEXT,
            "model_type": "llama",
            "vocab_size": vocab,
            "bos_token_id": s["<s>"],
            "eos_token_id": s["</s>"],
            "pad_token_id": s["<pad>"],
            "tie_word_embeddings": False,
        },
        # 3 layers, so that layer -2 is neither the first nor the last.
        vision_config=_vision(3),
        image_token_index=s["<image>"],
        video_token_index=s["<video>"],
        projector_hidden_act="gelu",
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=16,
        video_seq_length=8 * 17,
        tie_word_embeddings=False,
    )


def _preprocessor(side: int) -> dict[str, Any]:
    """VideoLlavaImageProcessor's settings as the release writes them, at `side` px.

    Reconstructed (the release's preprocessor_config.json, 890 bytes, was not found
    offline): VideoLlavaImageProcessor's defaults, which are CLIP's.
    """
    return {
        "crop_size": {"height": side, "width": side},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_processor_type": "VideoLlavaImageProcessor",
        "image_std": CLIP_STD,
        "processor_class": "VideoLlavaProcessor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": side},
    }


TINY = TinySpec(
    family_key="video_llava",
    hf_class="VideoLlavaForConditionalGeneration",
    specials=["<unk>", "<s>", "</s>", "<pad>", "<image>", "<video>"],
    make_config=_config,
    chat_template="{{ bos_token }}" + RELEASE_TEMPLATE,
    tokenizer_extra={
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": False,
    },
    preprocessor=_preprocessor(56),
    eos_tokens=["</s>"],
)


def _release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """LanguageBind/Video-LLaVA-7B-hf's config.json (transformers 4.39), shrunk.

    The text is the one the docs search found for RaushanTurganbay/video-llava-7b-hf
    (960 bytes, "Upload VideoLlavaForConditionalGeneration", transformers 4.39.0.dev0:
    the transformers conversion's own upload, by the author of the release's files) and,
    field for field, for TIGER-Lab/VISTA-VideoLLaVA (a fine-tune whose _name_or_path is
    LanguageBind/Video-LLaVA-7B-hf, transformers 4.44). The release's own config.json is
    998 bytes and was not found; the 38 bytes it has beyond these are not known. As
    released: a partial `llama` text_config (Vicuna-7B's sizes are LlamaConfig's
    defaults, its pad_token_id 0), a partial CLIP vision_config with no image_size
    (CLIPVisionConfig's 224) and no hidden_act (quick_gelu), image 32000, video 32001,
    pad 32002, a deprecated top-level vocab_size, `vision_feature_layer` -2, strategy
    `default`. Widths and depths added shrunk; the 14 px patches kept, so K = 256;
    vocabulary and token ids ours.
    """
    return {
        "architectures": ["VideoLlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": s["<image>"],
        "model_type": "video_llava",
        "pad_token_id": s["<pad>"],
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 4,
            "pad_token_id": 0,
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": vocab,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.39.0.dev0",
        "video_token_index": s["<video>"],
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "model_type": "clip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 3,
            "patch_size": 14,
            "projection_dim": 32,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab,
    }


def _release_names(name: str) -> str:
    """Transformers 5's tensor names as the release has them (transformers 4.39)."""
    for new, old in (
        ("model.language_model.", "language_model.model."),
        ("model.image_tower.", "image_tower."),
        ("model.video_tower.", "video_tower."),
        ("model.multi_modal_projector.", "multi_modal_projector."),
        ("lm_head.", "language_model.lm_head."),
    ):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


RELEASED = (
    ReleaseSpec(
        key="video_llava-7b",
        release="LanguageBind/Video-LLaVA-7B-hf",
        tiny=dataclasses.replace(
            TINY,
            # The release's LlamaTokenizer adds the BOS itself (add_bos_token).
            tokenizer_extra={**TINY.tokenizer_extra, "add_bos_token": True},
        ),
        config_json=_release,
        rename=_release_names,
        preprocessor=_preprocessor(224),
        chat_template=RELEASE_TEMPLATE,
    ),
)


def make(llava: Family) -> Family:
    """The Video-LLaVA entry: LLaVA-1.5's package and reference, pictures only."""
    assert llava.package is not None  # LLaVA-1.5 converts
    return dataclasses.replace(
        llava,
        key="video_llava",
        name="Video-LLaVA",
        recognition=Recognition(model_types=("video_llava",)),
        profile=dataclasses.replace(
            llava.profile,
            projector=_projector,
            token_ids=_token_ids,
            hf_class="VideoLlavaForConditionalGeneration",
            fields=fields.VIDEO_LLAVA,
            notes=(*llava.profile.notes, NOTE),
        ),
        package=dataclasses.replace(llava.package, notes=(*llava.package.notes, NOTE)),
        fixtures=Fixtures(tiny=TINY, released=RELEASED, expect=expect.VIDEO_LLAVA),
    )
