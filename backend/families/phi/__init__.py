"""Phi-4-multimodal (native and remote-code configs); Phi-3.5-Vision lives in families/phi3v."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    RemoteLayout,
    as_int,
    ids,
    processor_op,
)
from mmforge.backend.families._embedding import text_embedding_without_features
from mmforge.backend.families.phi import expect, fields, layout, reference, tiny
from mmforge.backend.families.phi.adapters import (
    activate_adapters,
    adapter_limit,
    merge_vision_lora,
)
from mmforge.backend.families.phi.build import remote_style_audio_config
from mmforge.backend.families.phi.global_view import PREPROCESSING_NOTE, phi4mm_hf_global_view
from mmforge.backend.families.phi.graph_fixes import (
    PER_IMAGE_NOTE,
    phi4mm_audio_sizes_input,
    phi4mm_images_one_at_a_time,
    phi4mm_projection_mode,
)
from mmforge.backend.families.phi.layout import remote_tensor_name
from mmforge.backend.families.phi.preprocess import phi4mm_sizing


def _past_the_feature_layer(cfg: Cfg) -> tuple[str, ...]:
    """Tensors transformers holds but the package does not run.

    The SigLIP parts after the feature layer (-2), which transformers never runs.
    """
    tower = r"image_embed\.img_processor\."
    last = int(cfg.get("vision_config.num_hidden_layers", 0)) - 1
    return (
        rf"{tower}encoder\.layers\.{last}\.",
        rf"{tower}post_layernorm\.",
        rf"{tower}head\.",
    )


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


def _phi4mm_processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's Phi-4 HD transform: dynamic crops plus a global view."""
    crop = as_int(pre.first("size.height", default=cfg.get("vision_config.crop_size", 448)))
    return {
        "processor": {
            "name": "phi_4_vision_processor",
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "phi4_vision_dynamic_preprocess",
                    "Phi4VisionDynamicPreprocess",
                    {
                        "dynamic_hd": int(pre.get("dynamic_hd", 36)),
                        "dyhd_base_resolution": crop,
                    },
                ),
                {"operation": {"name": "rescale", "type": "Rescale", "inputs": [":0"]}},
                processor_op(
                    "normalize",
                    "Normalize",
                    {
                        "mean": list(pre.get("image_mean", [0.5, 0.5, 0.5])),
                        "std": list(pre.get("image_std", [0.5, 0.5, 0.5])),
                    },
                ),
                {
                    "operation": {
                        "name": "phi4_vision_processor",
                        "type": "Phi4VisionProcessor",
                        "inputs": [":0", "phi4_vision_dynamic_preprocess:1"],
                        "attrs": {"dyhd_base_resolution": crop, "interpolation": "CUBIC"},
                    }
                },
            ],
            "output_aligner": "phi4-vision-aligner",
        }
    }


def _phi4mm_audio_processor(cfg: Cfg, audio: Cfg) -> dict[str, Any]:
    """The runtime's Phi-4 log-mel front end with the checkpoint's settings."""
    n_fft = int(audio.get("n_fft", 512))
    hop = int(audio.get("hop_length", 160))
    window = int(audio.get("win_length", 400))
    mels = int(audio.get("feature_size", 80))
    return {
        "feature_extraction": {
            "sequence": [
                processor_op(
                    "audio_decoder", "AudioDecoderEx", {"target_sample_rates": [8000, 16000]}
                ),
                processor_op(
                    "phi_4_audio_embed",
                    "Phi4AudioEmbed",
                    {
                        "audio_compression_rate": int(audio.get("audio_compression_rate", 8)),
                        "stft_normal/n_fft": n_fft,
                        "stft_normal/frame_length": window,
                        "stft_normal/hop_length": hop,
                        "stft_normal/win_fn": "hamming",
                        "logmel/chunk_size": 30,
                        "logmel/hop_length": hop,
                        "logmel/n_fft": n_fft,
                        "logmel/n_mel": mels,
                        "logmel/feature_first": 0,
                        "logmel/no_padding": 1,
                        "stft_normal_8k/n_fft": n_fft // 2,
                        "stft_normal_8k/frame_length": window // 2,
                        "stft_normal_8k/hop_length": hop // 2,
                        "stft_normal_8k/win_fn": "hamming",
                        "logmel_8k/chunk_size": 30,
                        "logmel_8k/hop_length": hop // 2,
                        "logmel_8k/n_fft": n_fft,
                        "logmel_8k/n_mel": mels,
                        "logmel_8k/feature_first": 0,
                        "logmel_8k/no_padding": 1,
                    },
                ),
            ],
            "output_aligner": "phi4-audio-aligner",
        }
    }


PHI4MM_PACKAGE = PackageSpec(
    unused_ok=_past_the_feature_layer,
    model_fields=_phi4_tokens,
    vision_fields=lambda cfg, pre: {},
    vision_inputs={
        "pixel_values": "pixel_values",
        "attention_mask": "image_attention_mask",
        "image_sizes": "image_sizes",
    },
    processor_json=_phi4mm_processor,
    picture_sizing=lambda cfg, pre: phi4mm_sizing(pre),
    speech_inputs={
        "audio_embeds": "audio_embeds",
        "audio_sizes": "audio_sizes",
        "audio_projection_mode": "audio_projection_mode",
    },
    graph_fixes=(
        phi4mm_audio_sizes_input,
        phi4mm_hf_global_view,  # on the one-image graph, before it runs in a Loop
        phi4mm_images_one_at_a_time,
        phi4mm_projection_mode,
        text_embedding_without_features,
    ),
    audio_processor_json=_phi4mm_audio_processor,
    config_patch=remote_style_audio_config,
    rename_checkpoint=remote_tensor_name,
    prepare_weights=merge_vision_lora,
    fused_attention=lambda cfg: False,
    notes=(
        "Native transformers checkpoint names are mapped to the remote-code layout mobius "
        "builds; the audio encoder sizes come from audio_config.",
    ),
)

PHI4MM = Family(
    key="phi4mm",
    name="Phi-4-multimodal",
    pipeline_type="phi4mm",
    recognition=Recognition(
        model_types=("phi4_multimodal", "phi4mm"),
        remote_code_types=("phi4mm",),
        remote_layout=RemoteLayout(
            config=layout.native_config,
            tensor_name=layout.native_tensor_name,
            processor_classes=layout.PROCESSOR_CLASSES,
        ),
    ),
    profile=Profile(
        projector=_phi4_projector,
        token_ids=_phi4_tokens,
        image_tokens=_phi4_image_tokens,
        hf_class="Phi4MultimodalForCausalLM",
        has_audio=lambda cfg: cfg.has("audio_config") or cfg.has("embd_layer.audio_embd_layer"),
        runtime_token_strings=("<|endoftext10|>", "<|endoftext11|>"),
        fields=fields.PHI4MM,
        # The released template takes text only: attachments are written <|image_1|>, ...
        text_placeholder=lambda kind, n: f"<|{kind}_{n}|>",
        # Packages made before mmforge ran the vision graph once per image take one image
        # in a whole conversation; those after it say so in their manifest notes (and
        # newer ones carry the manifest's max_images field).
        old_package_max_images=lambda notes: None if any(PER_IMAGE_NOTE in n for n in notes) else 1,
        notes=(
            "The runtime rewrites <|image_N|> and <|audio_N|> in the prompt to the tokens at "
            "ids 200010 and 200011 (<|endoftext10|>, <|endoftext11|>).",
            "mobius 0.1 builds the HD transform for one image; mmforge runs that graph once per "
            "image in a Loop, so a prompt can hold several.",
            "ONNX Runtime GenAI 0.18 makes a picture's global view from its crops with PIL's "
            "antialiased bicubic, transformers with torch's bicubic: the vision graph makes "
            "the view again from the crops as transformers does (measured: to float rounding).",
            "The released model is a mixture of LoRAs (vision-lora/ and speech-lora/ beside "
            "native weights, inline in the remote-code layout): the vision adapter is merged "
            "into the decoder; ONNX Runtime GenAI 0.18 cannot switch adapters, so audio-only "
            "turns run with the vision one where the release runs the speech adapter, and "
            "text-only turns with it where the release runs none (verify names each "
            "difference; verify --text-only checks a text-only prompt).",
        ),
    ),
    package=PHI4MM_PACKAGE,
    reference=Reference(
        adapt=activate_adapters,
        known_limit=adapter_limit,
        prepare=reference.prepare,
        from_runtime=reference.from_runtime,
        pixel_key="image_pixel_values",
        audio_key="audio_input_features",
        preprocessing_note=PREPROCESSING_NOTE,
        audio_extractor="Phi4MultimodalFeatureExtractor",
    ),
    fixtures=Fixtures(tiny=tiny.PHI4MM, released=tiny.RELEASED_PHI4MM, expect=expect.PHI4MM),
)


FAMILIES = (PHI4MM,)
