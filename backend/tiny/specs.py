"""Tiny checkpoint specs, one per runtime family.

Sizes are the smallest that keep every mechanism alive: 2 text layers of width 64,
2-layer vision towers, the real special tokens at the ids the config names, and the
family's real preprocessor settings at small pixel budgets.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec

TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
}
# Tiny vision towers whose configs use the standard key names (Qwen names them otherwise).
VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Chat templates are our own, written to match each family's conventions: the role
# markers, the BOS the runtime never adds by itself, and the exact placeholder strings the
# runtime's processor expands.
_QWEN_TOKENIZER = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
_QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def _qwen_ids(s: dict[str, int]) -> dict[str, int]:
    return {
        "image_token_id": s["<|image_pad|>"],
        "video_token_id": s["<|video_pad|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vision_end_token_id": s["<|vision_end|>"],
    }


def _qwen2_5_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen2_5_VLConfig

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
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "out_hidden_size": TEXT["hidden_size"],
        "fullatt_block_indexes": [1],
        "tokens_per_second": 2,
    }
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(s)
    )


QWEN2_5_VL = TinySpec(
    family_key="qwen2_5_vl",
    hf_class="Qwen2_5_VLForConditionalGeneration",
    specials=_QWEN_SPECIALS,
    make_config=_qwen2_5_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=_QWEN_TOKENIZER,
    preprocessor={
        "image_processor_type": "Qwen2VLImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "merge_size": 2,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "min_pixels": 28 * 28 * 4,
        "max_pixels": 28 * 28 * 64,
        "size": {"shortest_edge": 28 * 28 * 4, "longest_edge": 28 * 28 * 64},
    },
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)


def _qwen3_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen3VLConfig

    text = {
        **TEXT,
        "vocab_size": vocab,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
        },
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "tie_word_embeddings": False,
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": TEXT["hidden_size"],
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [0, 1],
    }
    return Qwen3VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(s)
    )


QWEN3_VL = TinySpec(
    family_key="qwen3_vl",
    hf_class="Qwen3VLForConditionalGeneration",
    specials=_QWEN_SPECIALS,
    make_config=_qwen3_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=_QWEN_TOKENIZER,
    preprocessor={
        **QWEN2_5_VL.preprocessor,  # type: ignore[dict-item]
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": 16,
        "min_pixels": 32 * 32 * 4,
        "max_pixels": 32 * 32 * 64,
        "size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 64},
    },
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)

_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
_GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% elif part['type'] == 'audio' %}{{ AUDIO }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _gemma3_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma3Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "query_pre_attn_scalar": 16,
        # Shorter than an image prompt (256 soft tokens), so tests cross the window.
        "sliding_window": 32,
        "layer_types": ["sliding_attention", "full_attention"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }
    vision = {
        **VISION,
        "image_size": 64,
        "patch_size": 4,
    }
    return Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=256,
        boi_token_index=s["<start_of_image>"],
        eoi_token_index=s["<end_of_image>"],
        image_token_index=s["<image_soft_token>"],
    )


GEMMA3 = TinySpec(
    family_key="gemma3",
    hf_class="Gemma3ForConditionalGeneration",
    specials=[
        *_GEMMA_SPECIALS,
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ],
    make_config=_gemma3_config,
    chat_template=_GEMMA_TEMPLATE.replace("{{ IMAGE }}", "<start_of_image>").replace(
        "{{ AUDIO }}", ""
    ),
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
    preprocessor={
        "image_processor_type": "Gemma3ImageProcessor",
        "do_convert_rgb": None,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "do_pan_and_scan": None,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 2,
        "rescale_factor": 1 / 255,
        "size": {"height": 64, "width": 64},
    },
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.005,
    logit_gain=10.0,
)


def _mistral3_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Mistral3Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "sliding_window": None,
        "bos_token_id": s["<s>"],
        "eos_token_id": s["</s>"],
        "tie_word_embeddings": False,
    }
    vision = {
        **VISION,
        "head_dim": 16,
        "image_size": 128,
        "patch_size": 8,
        "hidden_act": "silu",  # as in released Mistral 3 checkpoints
    }
    return Mistral3Config(
        text_config=text,
        vision_config=vision,
        image_token_index=s["[IMG]"],
        spatial_merge_size=2,
        multimodal_projector_bias=False,
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )


MISTRAL3 = TinySpec(
    family_key="mistral3",
    hf_class="Mistral3ForConditionalGeneration",
    specials=[
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "[INST]",
        "[/INST]",
        "[IMG]",
        "[IMG_BREAK]",
        "[IMG_END]",
    ],
    make_config=_mistral3_config,
    chat_template=(
        "{{ bos_token }}{% for message in messages %}"
        "{% if message['role'] == 'user' %}[INST]"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}[IMG]"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}[/INST]"
        "{% else %}{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    tokenizer_extra={
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
    },
    preprocessor={
        "image_processor_type": "PixtralImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "patch_size": 8,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 128},
    },
    eos_tokens=["</s>"],
)


def _gemma4_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma4Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "vocab_size_per_layer_input": vocab,
        "hidden_size_per_layer_input": 16,
        "global_head_dim": 32,
        "sliding_window": 64,
        "layer_types": ["sliding_attention", "full_attention"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }
    vision = {
        **VISION,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "position_embedding_size": 1024,
    }
    audio = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,  # as released Gemma 4 (mobius 0.1 assumes 8)
        "subsampling_conv_channels": [128, 8],  # HF ties channel 0 to the 128 mel bins
        "conv_kernel_size": 5,
        "attention_chunk_size": 12,
        "attention_context_left": 13,
        "attention_context_right": 0,
        "output_proj_dims": 48,
        "use_clipped_linears": True,
    }
    return Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        boi_token_id=s["<|image>"],
        eoi_token_id=s["<image|>"],
        image_token_id=s["<|image|>"],
        boa_token_id=s["<|audio>"],
        eoa_token_index=s["<audio|>"],
        audio_token_id=s["<|audio|>"],
        video_token_id=s["<|video|>"],
    )


GEMMA4 = TinySpec(
    family_key="gemma4",
    hf_class="Gemma4ForConditionalGeneration",
    specials=[
        *_GEMMA_SPECIALS,
        "<|image>",
        "<|image|>",
        "<image|>",
        "<|audio>",
        "<|audio|>",
        "<audio|>",
        "<|video|>",
    ],
    make_config=_gemma4_config,
    chat_template=_GEMMA_TEMPLATE.replace("{{ IMAGE }}", "<|image|>").replace(
        "{{ AUDIO }}", "<|audio|>"
    ),
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "boi_token": "<|image>",
        "eoi_token": "<image|>",
        "image_token": "<|image|>",
        "boa_token": "<|audio>",
        "eoa_token": "<audio|>",
        "audio_token": "<|audio|>",
    },
    preprocessor={
        "image_processor_type": "Gemma4ImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": False,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0],
        "image_std": [1.0, 1.0, 1.0],
        "max_soft_tokens": 70,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "resample": 3,
        "rescale_factor": 1 / 255,
    },
    audio_preprocessor={
        "feature_extractor_type": "Gemma4AudioFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "frame_length": 320,
        "hop_length": 160,
        "fft_length": 512,
        "min_frequency": 0.0,
        "max_frequency": 8000.0,
        "mel_floor": 0.001,
    },
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.02,
    logit_gain=10.0,
)


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


def _lfm2_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Lfm2VlConfig

    text = {
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "layer_types": ["conv", "full_attention"],
        "block_auto_adjust_ff_dim": False,
        "bos_token_id": s["<|startoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "pad_token_id": s["<|pad|>"],
        "tie_word_embeddings": True,
    }
    vision = {
        **VISION,
        "patch_size": 16,
        "num_patches": 64,
        "vision_use_head": False,
    }
    return Lfm2VlConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=s["<image>"],
        projector_hidden_size=64,
        downsample_factor=2,
        tie_word_embeddings=True,
    )


LFM2_VL = TinySpec(
    family_key="lfm2_vl",
    hf_class="Lfm2VlForConditionalGeneration",
    specials=[
        "<|pad|>",
        "<|startoftext|>",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<image>",
        "<|image_start|>",
        "<|image_end|>",
        "<|img_thumbnail|>",
    ],
    make_config=_lfm2_vl_config,
    chat_template=(
        "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
        "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    tokenizer_extra={
        "bos_token": "<|startoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "image_token": "<image>",
    },
    preprocessor={
        "image_processor_type": "Lfm2VlImageProcessor",
        "do_image_splitting": False,
        "downsample_factor": 2,
        "encoder_patch_size": 16,
        "min_image_tokens": 4,
        "max_image_tokens": 16,
        "max_pixels_tolerance": 2.0,
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_pad": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 2,
        "rescale_factor": 1 / 255,
        "min_tiles": 2,
        "max_tiles": 10,
        "tile_size": 512,
        "use_thumbnail": True,
    },
    eos_tokens=["<|im_end|>"],
    embed_std=0.02,
)

SPECS: dict[str, TinySpec] = {
    s.family_key: s for s in (QWEN2_5_VL, QWEN3_VL, GEMMA3, MISTRAL3, GEMMA4, PHI4MM, LFM2_VL)
}
