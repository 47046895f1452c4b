"""Families the seeds name that ONNX Runtime GenAI 0.18 cannot chat with.

`inspect` describes them fully; conversion and per-component parity on plain ONNX Runtime
may come later, but the runtime has no pipeline type for any of them.
"""

from __future__ import annotations

from mmforge.backend.families._base import (
    Cfg,
    DefaultConfig,
    Expectations,
    Family,
    Fixtures,
    ImageTokens,
    Profile,
    Projector,
    Recognition,
    as_int,
    ids,
)
from mmforge.backend.runtime_types import multimodal_list

_NO_TYPE = (
    "ONNX Runtime GenAI 0.18 has no {t} model type (its multimodal chat types are "
    + multimodal_list().replace("{", "{{").replace("}", "}}")
    + ")"
)


def _inspected(config_class: str, projector: str, token_ids: dict[str, int]) -> Fixtures:
    """What inspect must report for transformers' default config of an inspect-only family."""
    return Fixtures(
        expect=Expectations(default_config=DefaultConfig(config_class, projector, token_ids))
    )


def _mlp(cfg: Cfg, who: str) -> Projector:
    act = cfg.get("projector_hidden_act", "gelu")
    bias = cfg.get("multimodal_projector_bias", True)
    return Projector(
        "MLPMultiModalProjector",
        f"Linear → {str(act).upper()} → Linear",
        f"{who} uses a two-layer MLP projector (projector_hidden_act={act}, "
        f"multimodal_projector_bias={bias})",
        {"projector_hidden_act": act, "multimodal_projector_bias": bias},
    )


def _clip_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    image = as_int(cfg.get("vision_config.image_size", 336))
    patch = as_int(cfg.get("vision_config.patch_size", 14))
    count = (image // patch) ** 2
    strategy = cfg.get("vision_feature_select_strategy", "default")
    if strategy == "full":
        count += 1
    return ImageTokens(
        fixed=int(cfg.get("image_seq_length", count)),
        rule=f"({image}/{patch})² patches, vision_feature_select_strategy={strategy}",
    )


def _llava_ids(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id=("image_token_index", "image_token_id"))


_CLIP_NOTE = (
    "CLIP towers need the class token, pre_layrnorm and vision_feature_layer=-2, "
    "which mobius 0.1 does not handle."
)

LLAVA = Family(
    key="llava",
    fixtures=_inspected("LlavaConfig", "MLPMultiModalProjector", {"image_token_id": 32000}),
    name="LLaVA",
    pipeline_type=None,
    recognition=Recognition(model_types=("llava",)),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "LLaVA"),
        token_ids=_llava_ids,
        image_tokens=_clip_tokens,
        hf_class="LlavaForConditionalGeneration",
        notes=(_CLIP_NOTE,),
    ),
    no_pipeline_reason=_NO_TYPE.format(t="llava"),
)


def _next_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    base = _clip_tokens(cfg, pre).fixed or 576
    grids = cfg.get("image_grid_pinpoints") or [[336, 336]]
    image = as_int(cfg.get("vision_config.image_size", 336))
    most = max((h // image) * (w // image) for h, w in grids)
    return ImageTokens(
        minimum=base,
        maximum=base * (most + 1) + image // 14 * most,
        rule="anyres: a base view plus tiles from image_grid_pinpoints, with newline tokens",
    )


LLAVA_NEXT = Family(
    key="llava_next",
    fixtures=_inspected("LlavaNextConfig", "MLPMultiModalProjector", {"image_token_id": 32000}),
    name="LLaVA-NeXT",
    pipeline_type=None,
    recognition=Recognition(model_types=("llava_next", "llava_onevision")),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "LLaVA-NeXT"),
        token_ids=_llava_ids,
        image_tokens=_next_tokens,
        hf_class="LlavaNextForConditionalGeneration",
        notes=(_CLIP_NOTE,),
    ),
    no_pipeline_reason=_NO_TYPE.format(t="llava_next"),
)

VIDEO_LLAVA = Family(
    key="video_llava",
    fixtures=_inspected(
        "VideoLlavaConfig",
        "MLPMultiModalProjector",
        {"image_token_id": 32000, "video_token_id": 32001},
    ),
    name="Video-LLaVA",
    pipeline_type=None,
    recognition=Recognition(model_types=("video_llava",)),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "Video-LLaVA"),
        token_ids=lambda cfg: ids(
            cfg,
            image_token_id=("image_token_index", "image_token_id"),
            video_token_id=("video_token_index", "video_token_id"),
        ),
        image_tokens=_clip_tokens,
        hf_class="VideoLlavaForConditionalGeneration",
        notes=(_CLIP_NOTE,),
    ),
    no_pipeline_reason=_NO_TYPE.format(t="video_llava"),
)

VIPLLAVA = Family(
    key="vipllava",
    fixtures=_inspected("VipLlavaConfig", "MLPMultiModalProjector", {"image_token_id": 32000}),
    name="VipLLaVA",
    pipeline_type=None,
    recognition=Recognition(model_types=("vipllava",)),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "VipLLaVA"),
        token_ids=_llava_ids,
        image_tokens=_clip_tokens,
        hf_class="VipLlavaForConditionalGeneration",
    ),
    no_pipeline_reason=_NO_TYPE.format(t="vipllava"),
)


def _linear(cfg: Cfg, who: str, field: str, value: object) -> Projector:
    return Projector(
        "LinearMultiModalProjector",
        "Linear",
        f"{who} maps vision features to the text width with a single Linear ({field}={value})",
        {field: value},
    )


PALIGEMMA = Family(
    key="paligemma",
    fixtures=_inspected("PaliGemmaConfig", "LinearMultiModalProjector", {"image_token_id": 256000}),
    name="PaliGemma",
    pipeline_type=None,
    recognition=Recognition(model_types=("paligemma",)),
    profile=Profile(
        projector=lambda cfg: _linear(
            cfg,
            "PaliGemma",
            "vision_config.projection_dim",
            cfg.get("vision_config.projection_dim"),
        ),
        token_ids=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=int(
                cfg.first(
                    "text_config.num_image_tokens",
                    default=(
                        as_int(cfg.get("vision_config.image_size", 224))
                        // as_int(cfg.get("vision_config.patch_size", 14))
                    )
                    ** 2,
                )
            ),
            rule="(image_size/patch_size)², all prefix tokens",
        ),
        hf_class="PaliGemmaForConditionalGeneration",
        notes=("The image prefix attends bidirectionally (prefix-LM mask).",),
    ),
    no_pipeline_reason=_NO_TYPE.format(t="paligemma"),
)


def _internvl_projector(cfg: Cfg) -> Projector:
    ratio = cfg.get("downsample_ratio", 0.5)
    return Projector(
        "MLPMultiModalProjector",
        "pixel shuffle → LayerNorm → Linear → GELU → Linear",
        f"InternVL shuffles pixels by downsample_ratio={ratio}, then a LayerNorm + two-layer MLP",
        {"downsample_ratio": ratio},
    )


def _internvl_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    image = as_int(cfg.first("vision_config.image_size", "force_image_size", default=448))
    patch = as_int(cfg.get("vision_config.patch_size", 14))
    ratio = float(cfg.get("downsample_ratio", 0.5))
    per_tile = int(cfg.get("image_seq_length", int((image // patch) ** 2 * ratio * ratio)))
    tiles = int(pre.first("max_patches", default=12))
    return ImageTokens(
        minimum=per_tile,
        maximum=per_tile * (tiles + 1),
        rule=f"{per_tile} tokens per {image}px tile, up to {tiles} tiles plus a thumbnail",
    )


INTERNVL = Family(
    key="internvl",
    fixtures=_inspected("InternVLConfig", "MLPMultiModalProjector", {"image_token_id": 151667}),
    name="InternVL",
    pipeline_type=None,
    recognition=Recognition(
        model_types=("internvl", "internvl_chat"), remote_code_types=("internvl_chat",)
    ),
    profile=Profile(
        projector=_internvl_projector,
        token_ids=lambda cfg: ids(cfg, image_token_id=("image_token_id", "img_context_token_id")),
        image_tokens=_internvl_tokens,
        hf_class="InternVLForConditionalGeneration",
    ),
    no_pipeline_reason=_NO_TYPE.format(t="internvl"),
)

IDEFICS2 = Family(
    key="idefics2",
    fixtures=_inspected("Idefics2Config", "LinearMultiModalProjector", {"image_token_id": 32001}),
    name="Idefics2",
    pipeline_type=None,
    recognition=Recognition(model_types=("idefics2",)),
    profile=Profile(
        projector=lambda cfg: Projector(
            "LinearMultiModalProjector",
            "MLP modality projection → perceiver resampler",
            "Idefics2 projects with its modality projection, then a perceiver resampler to "
            f"resampler_n_latents={cfg.get('perceiver_config.resampler_n_latents', 64)}",
            {
                "perceiver_config.resampler_n_latents": cfg.get(
                    "perceiver_config.resampler_n_latents", 64
                )
            },
        ),
        token_ids=lambda cfg: ids(cfg, image_token_id="image_token_id"),
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=int(cfg.get("perceiver_config.resampler_n_latents", 64)),
            rule="resampler_n_latents per image (per split when do_image_splitting)",
        ),
        hf_class="Idefics2ForConditionalGeneration",
    ),
    no_pipeline_reason=_NO_TYPE.format(t="idefics2"),
)


def _idefics3_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    image = as_int(cfg.get("vision_config.image_size", 224))
    patch = as_int(cfg.get("vision_config.patch_size", 32))
    scale = int(cfg.get("scale_factor", 2))
    per = (image // patch) ** 2 // (scale * scale)
    return ImageTokens(
        minimum=per,
        rule=f"{per} tokens per {image}px tile (pixel shuffle ×{scale}), tiles by longest edge",
    )


IDEFICS3 = Family(
    key="idefics3",
    fixtures=_inspected("Idefics3Config", "LinearMultiModalProjector", {"image_token_id": 128257}),
    name="Idefics3 / SmolVLM",
    pipeline_type=None,
    recognition=Recognition(model_types=("idefics3", "smolvlm")),
    profile=Profile(
        projector=lambda cfg: _linear(cfg, "Idefics3", "scale_factor", cfg.get("scale_factor", 2)),
        token_ids=lambda cfg: ids(cfg, image_token_id="image_token_id"),
        image_tokens=_idefics3_tokens,
        hf_class="Idefics3ForConditionalGeneration",
    ),
    no_pipeline_reason=_NO_TYPE.format(t="idefics3"),
)

MOLMO = Family(
    key="molmo",
    fixtures=_inspected("Molmo2Config", "MLPMultiModalProjector", {"image_token_id": 151938}),
    name="Molmo",
    pipeline_type=None,
    recognition=Recognition(model_types=("molmo", "molmo2"), remote_code_types=("molmo",)),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "Molmo"),
        token_ids=lambda cfg: ids(
            cfg,
            image_token_id=("image_patch_id", "image_token_id"),
            image_start_token_id="image_start_token_id",
            image_end_token_id="image_end_token_id",
        ),
        image_tokens=lambda cfg, pre: ImageTokens(rule="multi-crop with pooled patches (dynamic)"),
        hf_class="Molmo2ForConditionalGeneration",
    ),
    no_pipeline_reason=_NO_TYPE.format(t="molmo"),
)

FLORENCE2 = Family(
    key="florence2",
    fixtures=_inspected("Florence2Config", "LinearMultiModalProjector", {"image_token_id": 51289}),
    name="Florence-2",
    pipeline_type=None,
    recognition=Recognition(model_types=("florence2",)),
    profile=Profile(
        projector=lambda cfg: _linear(
            cfg,
            "Florence-2",
            "vision_config.projection_dim",
            cfg.get("vision_config.projection_dim"),
        ),
        token_ids=lambda cfg: ids(cfg, image_token_id="image_token_id"),
        image_tokens=lambda cfg, pre: ImageTokens(
            rule="DaViT features of the 768px image plus a pooled token"
        ),
        hf_class="Florence2ForConditionalGeneration",
    ),
    no_pipeline_reason=(
        "Florence-2 is an encoder-decoder (BART) model; ONNX Runtime GenAI 0.18 runs "
        "decoder-only multimodal pipelines"
    ),
)

# Runtime pipelines mmforge names but does not convert yet (measured against the 0.18
# wheel's own strings and the runtime's source; neither has a transformers class).
LFM2_AUDIO = Family(
    key="lfm2_audio",
    name="LFM2-Audio",
    pipeline_type="lfm2_audio",
    recognition=Recognition(model_types=("lfm2_audio",), remote_code_types=("lfm2_audio",)),
    profile=Profile(
        projector=lambda cfg: Projector(
            "MLP", "audio encoder → MLP → LFM2", "LFM2-Audio projects its audio encoder into LFM2"
        ),
        token_ids=lambda cfg: {},
        image_tokens=lambda cfg, pre: ImageTokens(rule="audio only: no images"),
        hf_class=None,
        has_vision=lambda cfg: False,
        has_audio=lambda cfg: True,
    ),
    # The pipeline is in the 0.18 wheel's compiled code (its messages name an
    # Lfm2AudioProcessor, a speech state, a depthformer and an audio-output model) but not
    # in the runtime's public source (microsoft/onnxruntime-genai a0c04eb1, 2026-08-22,
    # has no lfm2_audio): what it expects of each graph is known only from its messages.
    not_converted=(
        "ONNX Runtime GenAI 0.18 runs it as 'lfm2_audio' (audio in, text and speech out, "
        "with its own audio state, depthformer and processor), but that pipeline is only "
        "in the wheel's compiled code, not in the runtime's public source, so what it "
        "expects of each graph is known only from its error messages; transformers has "
        "no LFM2-Audio class to build or check it against, and its own package "
        "(liquid-audio, the only reference) needs Python 3.12 or newer where mmforge "
        "runs on 3.11 (every release on PyPI, measured); use liquid-audio itself until "
        "mmforge converts it"
    ),
)

VIDEOCHAT_FLASH = Family(
    key="videochat_flash_qwen",
    name="VideoChat-Flash",
    pipeline_type="videochat_flash_qwen",
    recognition=Recognition(
        model_types=("videochat_flash_qwen",), remote_code_types=("videochat_flash_qwen",)
    ),
    profile=Profile(
        projector=lambda cfg: Projector(
            "MLP", "vision tower → token compression → MLP → Qwen2", "VideoChat-Flash's connector"
        ),
        token_ids=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
        image_tokens=lambda cfg, pre: ImageTokens(
            rule="video frames compressed to few tokens each"
        ),
        hf_class=None,
    ),
    # The runtime's input, read in VideoChatFlashProcessor (src/models/
    # videochat_flash_processor.cpp, microsoft/onnxruntime-genai a0c04eb1) and measured on
    # the 0.18 wheel (tests/backend/test_runtime_types.py): no video type, a clip is its
    # frames given as og.Images, each wrapped in <|vision_start|> … <|vision_end|>. The
    # model's own code (OpenGVLab/VideoChat-Flash 2f8e2f57, llava/mm_utils.py
    # tokenizer_image_token and llava/model/llava_arch.py with mm_newline_position
    # "nothing"; OpenVINO GenAI does the same) puts a video's frame features, with nothing
    # between them, where one <image> placeholder stood.
    not_converted=(
        "ONNX Runtime GenAI 0.18 runs it as 'videochat_flash_qwen', but not as the model "
        "was trained: the runtime wraps every video frame in <|vision_start|> … "
        "<|vision_end|> (measured on the 0.18 wheel: a frame becomes <|vision_start|>, "
        "vision.num_visual_tokens <|image_pad|> tokens, <|vision_end|>), while "
        "VideoChat-Flash's own code puts a video's frame features, with nothing between "
        "them, where one <image> placeholder stood. A package would feed the model two "
        "tokens per frame it never saw, so no conversion could match the original token "
        "for token, and mmforge does not make packages it cannot verify. The model is "
        "also remote code only (a UMT or InternVideo2 video tower and a token-merging "
        "projector, no transformers class); run it with its own code until the runtime "
        "feeds it as trained"
    ),
)

FAMILIES = (
    LLAVA,
    LLAVA_NEXT,
    VIDEO_LLAVA,
    VIPLLAVA,
    PALIGEMMA,
    INTERNVL,
    IDEFICS2,
    IDEFICS3,
    MOLMO,
    FLORENCE2,
    LFM2_AUDIO,
    VIDEOCHAT_FLASH,
)
