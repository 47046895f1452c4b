"""Phi-4-multimodal (native and remote-code configs) and Phi-3-Vision (remote code only)."""

from __future__ import annotations

from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector, as_int, ids

# ORT GenAI 0.18 rewrites <|image_N|> / <|audio_N|> to these fixed ids.
PHI4MM_IMAGE_TOKEN_ID = 200010
PHI4MM_AUDIO_TOKEN_ID = 200011


def _phi4_projector(cfg: Cfg) -> Projector:
    hidden = cfg.first("hidden_size", "text_config.hidden_size")
    return Projector(
        "MLPMultiModalProjector",
        "Linear → GELU → Linear",
        f"Phi-4-multimodal projects image features with a two-layer MLP into hidden_size={hidden} "
        "(audio has its own speech/vision-mode MLPs)",
        {"hidden_size": hidden},
    )


def _phi4_tokens(cfg: Cfg) -> dict[str, int]:
    found = ids(
        cfg,
        image_token_id=("vision_config.image_token_id", "image_token_id"),
        audio_token_id=("audio_config.audio_token_id", "audio_token_id"),
    )
    found.setdefault("image_token_id", PHI4MM_IMAGE_TOKEN_ID)
    found.setdefault("audio_token_id", PHI4MM_AUDIO_TOKEN_ID)
    return found


def _phi4_image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    crop = as_int(cfg.get("vision_config.crop_size", 448))
    crops = int(pre.first("dynamic_hd", default=36))
    per_crop = (crop // 14 // 2) ** 2
    # global view + sub crops, each 16x16 merged patches with a newline token per row,
    # plus one separator.
    rows = crop // 28
    one = per_crop + rows
    return ImageTokens(
        minimum=2 * one + 1,
        maximum=(crops + 1) * one + 1,
        rule=f"HD transform: a global {crop}px view plus up to {crops} {crop}px crops, "
        f"{per_crop} tokens each plus one per row",
    )


PHI4MM = Family(
    key="phi4mm",
    name="Phi-4-multimodal",
    model_types=("phi4_multimodal", "phi4mm"),
    remote_code_types=("phi4mm",),
    pipeline_type="phi4mm",
    hf_class="Phi4MultimodalForCausalLM",
    projector=_phi4_projector,
    token_ids=_phi4_tokens,
    image_tokens=_phi4_image_tokens,
    has_audio=lambda cfg: cfg.has("audio_config") or cfg.has("embd_layer.audio_embd_layer"),
    runtime_token_strings=("<|image|>", "<|audio|>"),
    notes=(
        "The runtime hard-codes image id 200010 and audio id 200011; the vocab is padded so "
        "the tokens land there.",
        "Vision and speech LoRA adapters must be activated explicitly.",
    ),
)


def _phi3v_projector(cfg: Cfg) -> Projector:
    kind = cfg.get("embd_layer.projection_cls", "mlp")
    return Projector(
        "MLPMultiModalProjector",
        "Linear → GELU → Linear",
        f"Phi-3-Vision's embd_layer.projection_cls={kind!r} is a two-layer MLP",
        {"embd_layer.projection_cls": kind},
    )


PHI3V = Family(
    key="phi3v",
    name="Phi-3-Vision",
    model_types=("phi3_v",),
    remote_code_types=("phi3_v",),
    pipeline_type="phi3v",
    projector=_phi3v_projector,
    token_ids=lambda cfg: {},
    image_tokens=lambda cfg, pre: ImageTokens(
        rule="HD transform: 144 tokens per 336px crop plus a global view"
    ),
    notes=(
        "Defined only as remote code; there is no native transformers class.",
        "Its processor turns <|image_N|> into negative placeholder ids, so no image token id "
        "sits in the config.",
    ),
)

FAMILIES = (PHI4MM, PHI3V)
