"""Families the seeds name that mmforge inspects but does not convert.

Each entry says, measured, whether one of ONNX Runtime GenAI 0.18's pipelines could feed the
model exactly what transformers feeds it (then `pipeline_type` is that pipeline and
`not_converted` says what is missing), or which runtime code rules it out
(`no_pipeline_reason`). The long form, with the source lines (microsoft/onnxruntime-genai
a0c04eb1) and the measurements on the 0.18 wheel, is docs/seed-families.md; the two verdicts
that rest on the runtime's processors are held by tests/backend/test_seed_hosts.py.
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

_SEE = "; docs/seed-families.md has the details"

# The host for families with a constant number of ids per picture:
# VideoChatFlashProcessor (src/models/videochat_flash_processor.cpp, BuildPromptTokens)
# gives every picture vision.num_visual_tokens ids, a number the package chooses, framed by
# <|vision_start|> … <|vision_end|> text that the package's own tokenizer absorbs into the
# first and last ids (measured on the 0.18 wheel).
_VIDEOCHAT = (
    "ONNX Runtime GenAI 0.18 could run it exactly through its 'videochat_flash_qwen' "
    "pipeline: VideoChatFlashProcessor (videochat_flash_processor.cpp, BuildPromptTokens) "
    "gives every picture a constant number of ids, vision.num_visual_tokens = {k}, and the "
    "package's own tokenizer absorbs the <|vision_start|>/<|vision_end|> text it splices in"
)


def _inspected(
    config_class: str,
    projector: str,
    token_ids: dict[str, int],
    components: tuple[str, ...] = ("vision_encoder", "embedding", "decoder"),
) -> Fixtures:
    """What inspect must report for transformers' default config of an inspect-only family."""
    return Fixtures(
        expect=Expectations(
            default_config=DefaultConfig(config_class, projector, token_ids, components)
        )
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


def _onevision_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    base = _clip_tokens(cfg, pre).fixed or 729
    grids = cfg.get("image_grid_pinpoints") or [[384, 384]]
    image = as_int(cfg.get("vision_config.image_size", 384))
    most = max((h // image) * (w // image) for h, w in grids)
    return ImageTokens(
        minimum=base,
        maximum=base * (most + 1) + image // 14 * most,
        rule=(
            "anyres_max: a base view plus tiles from image_grid_pinpoints, downsampled "
            "past a feature budget, with newline tokens"
        ),
    )


LLAVA_ONEVISION = Family(
    key="llava_onevision",
    fixtures=_inspected(
        "LlavaOnevisionConfig", "MLPMultiModalProjector", {"image_token_id": 151646}
    ),
    name="LLaVA-OneVision",
    pipeline_type=None,
    exact_host="qwen2_5_vl",
    recognition=Recognition(model_types=("llava_onevision",)),
    profile=Profile(
        projector=lambda cfg: _mlp(cfg, "LLaVA-OneVision"),
        token_ids=_llava_ids,
        image_tokens=_onevision_tokens,
        hf_class="LlavaOnevisionForConditionalGeneration",
    ),
    no_pipeline_reason=(
        "ONNX Runtime GenAI 0.18's qwen2_5_vl pipeline could run it exactly: its Qwen "
        "processor (qwen2_5_vl_image_processor.cpp, ProcessImagePrompt) counts each picture "
        "it is handed, which is how LLaVA-NeXT's anyres pictures convert; this version does "
        "not build OneVision's anyres_max downsampling or its SigLIP tower on it yet" + _SEE
    ),
)


def _linear(cfg: Cfg, who: str, field: str, value: object) -> Projector:
    return Projector(
        "LinearMultiModalProjector",
        "Linear",
        f"{who} maps vision features to the text width with a single Linear ({field}={value})",
        {field: value},
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
    no_pipeline_reason=(
        "ONNX Runtime GenAI 0.18 has no pipeline that gives its layout: a low-resolution "
        "grid and high-resolution crops chosen by select_tiling from the picture's size, each "
        "row ended by <im_col>, where the 0.18 processors give a constant count (gemma3, "
        "videochat_flash_qwen) or a single Pixtral grid with one id per cell "
        "(mistral3_image_processor.cpp, BuildImageTokenSequence); only a processor pinned to "
        "one crop, not the released one, would fit" + _SEE
    ),
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
        "Florence-2 is an encoder-decoder (a BART encoder over the picture's features and the "
        "prompt, a decoder with cross-attention); ONNX Runtime GenAI 0.18's multimodal "
        "pipeline (multi_modal.cpp, MultiModalPipelineState::Run) runs vision, embedding and a "
        "decoder with self-attention caches only, and its one encoder-decoder pipeline, "
        "whisper, takes audio only" + _SEE
    ),
)


QWEN2_AUDIO = Family(
    key="qwen2_audio",
    fixtures=_inspected(
        "Qwen2AudioConfig",
        "LinearMultiModalProjector",
        {"audio_token_id": 151646},
        components=("audio_encoder", "embedding", "decoder"),
    ),
    name="Qwen2-Audio",
    pipeline_type=None,
    recognition=Recognition(model_types=("qwen2_audio",)),
    profile=Profile(
        projector=lambda cfg: _linear(
            cfg, "Qwen2-Audio", "audio_config.d_model", cfg.get("audio_config.d_model", 1280)
        ),
        token_ids=lambda cfg: ids(cfg, audio_token_id=("audio_token_id", "audio_token_index")),
        image_tokens=lambda cfg, pre: ImageTokens(rule="audio only: no images"),
        hf_class="Qwen2AudioForConditionalGeneration",
        has_vision=lambda cfg: False,
        has_audio=lambda cfg: True,
        notes=(
            "A clip is Whisper features (128 mel bins) padded to 30 s; it becomes "
            "<|audio_bos|>, ⌊⌈L/2⌉/2⌋ <|AUDIO|> for L real frames, <|audio_eos|>.",
        ),
    ),
    # Measured with the gemma4 tiny package's Gemma4LogMel chain
    # (benchmarks/seed_probes/probe_audio.py): 1.02 s gives 26 ids in the runtime and 25 in
    # transformers, 2.5 s 63 and 62.
    no_pipeline_reason=(
        "ONNX Runtime GenAI 0.18 has no audio pipeline that gives its count, ⌊⌈L/2⌉/2⌋ "
        "<|AUDIO|> ids for L mel frames: gemma4 (gemma4_multimodal_processor.cpp, "
        "Gemma4MultiModalProcessor::Process) computes ⌈⌈T/2⌉/2⌉ from the features it hands "
        "over (measured on the 0.18 wheel: one id off for 2 of 10 clip lengths), and phi4mm "
        "counts with Phi-4's audio_sizes and its hard-coded id 200011" + _SEE
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
    # "nothing") puts a video's frame features, with nothing between them, where one
    # <image> placeholder stood. A package's own tokenizer can absorb the markers (added
    # tokens "<|vision_start|><|image_pad|>" and "<|image_pad|><|vision_end|>", measured in
    # tests/backend/test_seed_hosts.py), so they no longer rule it out.
    not_converted=(
        "ONNX Runtime GenAI 0.18 runs it as 'videochat_flash_qwen'. The <|vision_start|> … "
        "<|vision_end|> it wraps every frame in need not reach the model (a package's own "
        "tokenizer can absorb them, measured on the 0.18 wheel), but the model is remote code "
        "only (a UMT or InternVideo2 video tower and a token-merging projector, no "
        "transformers class), so mmforge has nothing to verify a conversion against; run it "
        "with its own code" + _SEE
    ),
)

FAMILIES = (
    LLAVA_ONEVISION,
    MOLMO,
    FLORENCE2,
    QWEN2_AUDIO,
    LFM2_AUDIO,
    VIDEOCHAT_FLASH,
)
