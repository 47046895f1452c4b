"""A tiny Phi-4-multimodal checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families.phi.layout import native_config, remote_tensor_name
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import LoraSpec, ReleaseSpec, released_template
from mmforge.backend.tiny.sizes import TEXT, VISION


def _phi4mm_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Phi4MultimodalConfig

    text = {k: v for k, v in TEXT.items() if k != "head_dim"}
    vision = {
        **VISION,
        "image_size": 448,
        "patch_size": 14,
        "crop_size": 448,
        "image_token_id": s["<|endoftext10|>"],
        "feature_layer": -2,
    }
    audio = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_blocks": 2,
        "num_attention_heads": 2,
        "ext_pw_out_channel": 32,
        "depthwise_separable_out_channel": 32,
        "nemo_conv_channels": 32,
        "input_size": 80,
        "time_reduction": 8,
        "audio_token_id": s["<|endoftext11|>"],
    }
    return Phi4MultimodalConfig(
        **text,
        vocab_size=vocab,
        vision_config=vision,
        audio_config=audio,
        bos_token_id=s["<|endoftext|>"],
        eos_token_id=[s["<|endoftext|>"], s["<|end|>"]],
        pad_token_id=s["<|endoftext|>"],
        tie_word_embeddings=True,
    )


PHI4MM = TinySpec(
    family_key="phi4mm",
    hf_class="Phi4MultimodalForCausalLM",
    specials=["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
    # The runtime hard-codes these two ids and token strings (as in the released
    # tokenizer): filler vocabulary pads up to them.
    pinned={"<|endoftext10|>": 200010, "<|endoftext11|>": 200011},
    make_config=_phi4mm_config,
    # Attachments are numbered <|image_1|>, <|audio_1|>, ... as Phi-4-multimodal's prompt
    # format has them; the runtime rewrites those to the two special tokens.
    chat_template=(
        "{% set counts = namespace(image=0, audio=0) %}"
        "{% for message in messages %}<|{{ message['role'] }}|>"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}{% set counts.image = counts.image + 1 %}"
        "<|image_{{ counts.image }}|>"
        "{% elif part['type'] == 'audio' %}{% set counts.audio = counts.audio + 1 %}"
        "<|audio_{{ counts.audio }}|>"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    ),
    tokenizer_extra={
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "image_token": "<|endoftext10|>",
        "audio_token": "<|endoftext11|>",
    },
    preprocessor={
        "image_processor_type": "Phi4MultimodalImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "dynamic_hd": 4,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": 14,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"height": 448, "width": 448},
    },
    audio_preprocessor={
        "feature_extractor_type": "Phi4MultimodalFeatureExtractor",
        "feature_size": 80,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "hop_length": 160,
        "n_fft": 512,
        "win_length": 400,
        "preemphasis": 0.97,
        "audio_compression_rate": 8,
        "audio_downsample_rate": 1,
        "audio_feat_stride": 1,
    },
    eos_tokens=["<|end|>", "<|endoftext|>"],
    embed_std=0.02,
)


# Phi-4-multimodal's decoder projections both adapters wrap, every layer.
_LORA_TARGETS = r"model\.layers\.\d+\.(self_attn\.(qkv_proj|o_proj)|mlp\.(gate_up_proj|down_proj))"
# The released ranks and alphas (vision r=256, alpha=512; speech r=320, alpha=640),
# shrunk with the width; the scale alpha / r stays 2.
PHI4MM_LORA = (
    LoraSpec("vision", rank=4, alpha=8.0, targets=_LORA_TARGETS),
    LoraSpec("speech", rank=6, alpha=12.0, targets=_LORA_TARGETS),
)
# LongRoPE factors for 6 rotary frequency pairs (16-wide heads, 75 % rotated): the
# released 48 of each, shrunk, rising from 1 as theirs do.
_SHORT_FACTOR = [1.0, 1.02, 1.08, 1.2, 1.45, 1.9]
_LONG_FACTOR = [1.0, 1.25, 2.2, 4.5, 9.0, 16.0]


def _phi4mm_native_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """microsoft/Phi-4-multimodal-instruct in transformers' native layout, shrunk.

    The text fields at the top level with a transformers 4 `rope_scaling` of type
    longrope (short and long factors over 4,096 original positions of 131,072), a
    top-level `partial_rotary_factor` of 0.75 and `rope_theta`, a sliding window wider
    than the context, tied embeddings; the adapters ship as `vision-lora/` and
    `speech-lora/` PEFT folders beside the base weights.
    """
    return {
        "architectures": ["Phi4MultimodalForCausalLM"],
        "attention_dropout": 0.0,
        "audio_config": {
            "depthwise_separable_out_channel": 32,
            "ext_pw_out_channel": 32,
            "hidden_size": 32,
            "input_size": 80,
            "intermediate_size": 64,
            "model_type": "phi4_multimodal_audio",
            "nemo_conv_channels": 32,
            "num_attention_heads": 2,
            "num_blocks": 2,
            "time_reduction": 8,
        },
        "bos_token_id": s["<|endoftext|>"],
        "embd_pdrop": 0.0,
        "eos_token_id": [s["<|endoftext|>"], s["<|end|>"]],
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": 131072,
        "model_type": "phi4_multimodal",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "original_max_position_embeddings": 4096,
        "pad_token_id": s["<|endoftext|>"],
        "partial_rotary_factor": 0.75,
        "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "long_factor": _LONG_FACTOR,
            "short_factor": _SHORT_FACTOR,
            "type": "longrope",
        },
        "rope_theta": 10000.0,
        "sliding_window": 262144,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "use_cache": True,
        "vision_config": {
            "crop_size": 448,
            "feature_layer": -2,
            "hidden_size": 32,
            "image_size": 448,
            "intermediate_size": 64,
            "model_type": "phi4_multimodal_vision",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 14,
        },
        "vocab_size": vocab,
    }


_NATIVE = (
    ReleaseSpec(
        key="phi4mm-native",
        release="microsoft/Phi-4-multimodal-instruct (transformers-native layout)",
        tiny=PHI4MM,
        config_json=_phi4mm_native_release,
        lora=PHI4MM_LORA,
        chat_template=released_template("phi4_multimodal"),
    ),
)


def _phi4mm_remote_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """microsoft/Phi-4-multimodal-instruct's main revision: the remote-code layout.

    `model_type: phi4mm`; the audio encoder under `audio_processor.config` in its own
    project's names; the image encoder under `embd_layer` (its SigLIP sizes are fixed in
    the remote code, so they are read from the weights); the adapters' ranks under
    `vision_lora` / `speech_lora`; LongRoPE as in the native layout. Shrunk.
    """
    native = _phi4mm_native_release(s, vocab)
    text = {k: v for k, v in native.items() if k not in ("audio_config", "vision_config")}
    return {
        **text,
        "architectures": ["Phi4MMForCausalLM"],
        "attention_bias": False,
        "audio_processor": {
            "config": {
                "activation": "swish",
                "activation_checkpointing": {
                    "interval": 1,
                    "module": "transformer",
                    "offload": False,
                },
                "attention_dim": 32,
                "attention_heads": 2,
                "batch_norm": False,
                "bias_in_glu": True,
                "causal": True,
                "chunk_size": -1,
                "cnn_layer_norm": True,
                "conv_activation": "swish",
                "conv_glu_type": "swish",
                "depthwise_multiplier": 1,
                "depthwise_seperable_out_channel": 32,
                "dropout_rate": 0.0,
                "encoder_embedding_config": {"input_size": 80},
                "ext_pw_kernel_size": 1,
                "ext_pw_out_channel": 32,
                "input_layer": "nemo_conv",
                "input_size": 80,
                "kernel_size": 3,
                "left_chunk": 18,
                "linear_units": 64,
                "nemo_conv_settings": {"conv_channels": 32},
                "num_blocks": 2,
                "relative_attention_bias_args": {"t5_bias_max_distance": 500, "type": "t5"},
                "time_reduction": 8,
            },
            "name": "cascades",
        },
        "auto_map": {
            "AutoConfig": "configuration_phi4mm.Phi4MMConfig",
            "AutoModelForCausalLM": "modeling_phi4mm.Phi4MMForCausalLM",
            "AutoTokenizer": "Xenova/gpt-4o",
        },
        "embd_layer": {
            "audio_embd_layer": {
                "compression_rate": 8,
                "downsample_rate": 1,
                "embedding_cls": "audio",
                "enable_gradient_checkpointing": True,
                "projection_cls": "mlp",
                "use_conv_downsample": False,
                "use_qformer": False,
            },
            "embedding_cls": "image_audio",
            "image_embd_layer": {
                "crop_size": 448,
                "embedding_cls": "tune_image",
                "enable_gradient_checkpointing": True,
                "hd_transform_order": "sub_glb",
                "image_token_compression_cls": "avg_pool_2d",
                "projection_cls": "mlp",
                "use_hd_transform": True,
                "with_learnable_separator": True,
            },
        },
        "full_attn_mod": 1,
        "img_processor": None,
        "interpolate_factor": 1,
        "lm_head_bias": False,
        "mlp_bias": False,
        "model_type": "phi4mm",
        "speech_lora": {
            "dp": 0.01,
            "layer": "((layers.*self_attn\\.(qkv|o)_proj)|(layers.*mlp\\.(gate_up|down)_proj))",
            "lora_alpha": PHI4MM_LORA[1].alpha,
            "r": PHI4MM_LORA[1].rank,
        },
        "transformers_version": "4.46.1",
        "vision_lora": {
            "dp": 0.0,
            "layer": "layers.*((self_attn\\.(qkv_proj|o_proj))|(mlp\\.(gate_up|down)_proj))",
            "lora_alpha": PHI4MM_LORA[0].alpha,
            "r": PHI4MM_LORA[0].rank,
        },
    }


# The main revision's one processor file: image and audio settings under the remote
# code's class names (dynamic_hd as released).
_REMOTE_PREPROCESSOR = {
    "auto_map": {
        "AutoProcessor": "processing_phi4mm.Phi4MMProcessor",
        "AutoImageProcessor": "processing_phi4mm.Phi4MMImageProcessor",
        "AutoFeatureExtractor": "processing_phi4mm.Phi4MMAudioFeatureExtractor",
    },
    "image_processor_type": "Phi4MMImageProcessor",
    "processor_class": "Phi4MMProcessor",
    "feature_extractor_type": "Phi4MMAudioFeatureExtractor",
    "audio_compression_rate": 8,
    "audio_downsample_rate": 1,
    "audio_feat_stride": 1,
    "dynamic_hd": 36,
}

# The test tower's sizes, as the remote layout's weights state them (2 layers, 32 wide).
_TOWER = "model.embed_tokens_extend.image_embed.img_processor."
_TEST_TOWER_SHAPES = {
    _TOWER + "embeddings.patch_embedding.weight": [32, 3, 14, 14],
    _TOWER + "embeddings.position_embedding.weight": [1024, 32],
    _TOWER + "encoder.layers.0.mlp.fc1.weight": [64, 32],
    _TOWER + "encoder.layers.1.mlp.fc1.weight": [64, 32],
}


def _remote_model_config(written: dict[str, Any]) -> dict[str, Any]:
    return native_config(written, _TEST_TOWER_SHAPES)


RELEASED_PHI4MM: tuple[ReleaseSpec, ...] = (
    *_NATIVE,
    ReleaseSpec(
        key="phi4mm-remote",
        release="microsoft/Phi-4-multimodal-instruct (main: the remote-code layout)",
        tiny=PHI4MM,
        config_json=_phi4mm_remote_release,
        lora=PHI4MM_LORA,
        lora_inline=True,
        model_config=_remote_model_config,
        rename=remote_tensor_name,
        processor_files={"preprocessor_config.json": _REMOTE_PREPROCESSOR},
        chat_template=released_template("phi4_multimodal"),
    ),
)
