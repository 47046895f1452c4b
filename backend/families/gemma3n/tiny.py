"""Tiny Gemma 3n checkpoints: the family's real tokens, template, id ranges and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families.gemma3n.timm_import import timm_in_transformers
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import TEXT

# Gemma 3n's ids come in three ranges, as released: text below
# vocab_size_per_layer_input (262144), then 128 vision ids (<end_of_image> first, then
# <image_soft_token>), then 128 audio ids (<end_of_audio>, <audio_soft_token>). Shrunk:
# the special tokens follow the trained vocabulary in this order, so the text range ends
# at <end_of_image> and each multimodal range holds its two tokens.
SPECIALS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<start_of_audio>",
    "<end_of_image>",
    "<image_soft_token>",
    "<end_of_audio>",
    "<audio_soft_token>",
]
MULTIMODAL_IDS = 2
# The template transformers' Gemma 3n converter writes (convert_gemma3n_weights.py,
# `_CHAT_TEMPLATE`, found in its source): Gemma 3's, with <image_soft_token> for a picture
# and an audio branch. Not a copy of a release's own file, which was not found here.
CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate '
    'user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n"
    '\' + (first_user_prefix if loop.first else "") }}\n'
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'audio' -%}\n"
    "                {{ '<audio_soft_token>' }}\n"
    "            {%- elif item['type'] == 'image' -%}\n"
    "                {{ '<image_soft_token>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n"
    "' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n"
    "'}}\n"
    "{%- endif -%}\n"
)

PICTURE = 128  # the processor's square size (768 as released)
# Sliding, sliding, full, twice: the last two layers reuse the KV of the last owning layer
# of their kind; the first two thin their MLP's gate (activation sparsity), as the first
# 10 of 30 do in E2B.
KINDS = ["sliding_attention", "sliding_attention", "full_attention"] * 2


def _text(s: dict[str, int]) -> dict[str, Any]:
    return {
        **TEXT,
        "vocab_size": s["<audio_soft_token>"] + 1,
        "vocab_size_per_layer_input": s["<end_of_image>"],
        "hidden_size_per_layer_input": 16,
        "intermediate_size": 128,
        "num_hidden_layers": 6,
        "layer_types": KINDS,
        "num_kv_shared_layers": 2,
        "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0, 0.0, 0.0],
        "laurel_rank": 8,
        # Shorter than a picture (256 soft tokens), so tests cross the window.
        "sliding_window": 32,
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }


def _vision(s: dict[str, int]) -> dict[str, Any]:
    return {
        "vocab_offset": s["<end_of_image>"],
        "vocab_size": MULTIMODAL_IDS,
        # timm's MobileNetV5-300M at an eighth of its channels (its depth as released)
        "model_args": {"channel_multiplier": 0.125},
    }


def _audio(s: dict[str, int]) -> dict[str, Any]:
    return {
        "vocab_offset": s["<end_of_audio>"],
        "vocab_size": MULTIMODAL_IDS,
        "hidden_size": 32,
        "conf_num_hidden_layers": 1,
        "conf_num_attention_heads": 2,
    }


def _ids(s: dict[str, int]) -> dict[str, int]:
    return {
        "image_token_id": s["<image_soft_token>"],
        "boi_token_id": s["<start_of_image>"],
        "eoi_token_id": s["<end_of_image>"],
        "audio_token_id": s["<audio_soft_token>"],
        "boa_token_id": s["<start_of_audio>"],
        "eoa_token_id": s["<end_of_audio>"],
    }


def _gemma3n_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma3nConfig

    return Gemma3nConfig(
        text_config=_text(s), vision_config=_vision(s), audio_config=_audio(s), **_ids(s)
    )


# transformers' Gemma 3n converter writes one preprocessor_config.json for the image
# processor and the audio feature extractor together (convert_gemma3n_weights.py): a
# SiglipImageProcessorFast at 768 px, bilinear, rescaled and not normalised.
_PREPROCESSOR: dict[str, Any] = {
    "image_processor_type": "SiglipImageProcessorFast",
    "processor_class": "Gemma3nProcessor",
    "feature_extractor_type": "Gemma3nAudioFeatureExtractor",
    "image_seq_length": 256,
    "do_convert_rgb": None,
    "do_normalize": False,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "resample": 2,
    "rescale_factor": 1 / 255,
    "size": {"height": PICTURE, "width": PICTURE},
    "feature_size": 128,
    "sampling_rate": 16000,
    "padding_value": 0.0,
    "return_attention_mask": True,
}

GEMMA3N = TinySpec(
    family_key="gemma3n",
    hf_class="Gemma3nForConditionalGeneration",
    specials=SPECIALS,
    make_config=_gemma3n_config,
    chat_template=CHAT_TEMPLATE,
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
    },
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.005,
    logit_gain=10.0,
    # Seed 0 answers the probe picture with one token and <eos>; 9 gives 30 distinct
    # tokens in 32, none of them a special token (7 is benchmarks/heldout.py's).
    seed=9,
    model_context=timm_in_transformers,
)


def _e2b_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """google/gemma-3n-E2B-it's config.json (transformers 4.53), shrunk.

    The released text was not at hand here. The layout follows what transformers 4.53's
    Gemma3nConfig writes for the E2B variant of its converter (convert_gemma3n_weights.py:
    30 layers, the first 10 sparse, the last 10 sharing KV, MLP width 8192) with the
    release's old key names (`rope_theta`, `rope_local_base_freq`, `torch_dtype`) and the
    vision config's timm bookkeeping (`label_names`, `num_classes`). Shrunk: width, depth
    (6 layers, 2 sharing KV, 2 sparse, the 4-local-to-1-global pattern cut to 2 to 1), the
    id ranges (two ids each, `SPECIALS`), the audio tower, and the vision tower's channels through
    `model_args` (the release leaves it null: the full 300M tower).
    """
    ids = _ids(s)
    return {
        "architectures": ["Gemma3nForConditionalGeneration"],
        "audio_config": {
            "conf_attention_chunk_size": 12,
            "conf_attention_context_left": 13,
            "conf_attention_context_right": 0,
            "conf_attention_logit_cap": 50.0,
            "conf_conv_kernel_size": 5,
            "conf_num_attention_heads": 2,
            "conf_num_hidden_layers": 1,
            "conf_reduction_factor": 4,
            "conf_residual_weight": 0.5,
            "gradient_clipping": 10000000000.0,
            "hidden_size": 32,
            "input_feat_size": 128,
            "model_type": "gemma3n_audio",
            "rms_norm_eps": 1e-06,
            "sscp_conv_channel_size": [128, 32],
            "sscp_conv_group_norm_eps": 0.001,
            "sscp_conv_kernel_size": [[3, 3], [3, 3]],
            "sscp_conv_stride_size": [[2, 2], [2, 2]],
            "torch_dtype": "bfloat16",
            "vocab_offset": s["<end_of_audio>"],
            "vocab_size": MULTIMODAL_IDS,
        },
        "audio_soft_tokens_per_image": 188,
        **ids,
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "initializer_range": 0.02,
        "model_type": "gemma3n",
        "text_config": {
            "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0, 0.0, 0.0],
            "altup_active_idx": 0,
            "altup_coef_clip": 120.0,
            "altup_correct_scale": True,
            "altup_num_inputs": 4,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "final_logit_softcapping": 30.0,
            "head_dim": 16,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 64,
            "hidden_size_per_layer_input": 16,
            "initializer_range": 0.02,
            "intermediate_size": [128] * 6,
            "laurel_rank": 8,
            "layer_types": KINDS,
            "max_position_embeddings": 32768,
            "model_type": "gemma3n_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "num_kv_shared_layers": 2,
            "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": None,
            "rope_theta": 1000000.0,
            "sliding_window": 32,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "vocab_size": s["<audio_soft_token>"] + 1,
            "vocab_size_per_layer_input": s["<end_of_image>"],
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.53.0.dev0",
        "vision_config": {
            "architecture": "mobilenetv5_300m_enc",
            "do_pooling": False,
            "hidden_size": 2048,
            "initializer_range": 0.02,
            "label_names": ["LABEL_0", "LABEL_1"],
            "model_args": {"channel_multiplier": 0.125},
            "model_type": "gemma3n_vision",
            "num_classes": 2,
            "rms_norm_eps": 1e-06,
            "torch_dtype": "bfloat16",
            "vocab_offset": s["<end_of_image>"],
            "vocab_size": MULTIMODAL_IDS,
        },
        "vision_soft_tokens_per_image": 256,
    }


RELEASED_GEMMA3N = (
    ReleaseSpec(
        key="gemma3n-e2b",
        release="google/gemma-3n-E2B-it",
        tiny=GEMMA3N,
        config_json=_e2b_release,
        # The release's own template was not found; the tiny spec's is transformers'
        # converter's (CHAT_TEMPLATE).
    ),
)
