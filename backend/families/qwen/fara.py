"""Fara (microsoft/Fara-7B): a Qwen2.5-VL fine-tune that ONNX Runtime GenAI names `fara`.

What the runtime does with `fara` (read in its source, onnxruntime-genai at a0c04eb, and
confirmed against the 0.18 wheel by converting, verifying and chatting with a `fara`
package): exactly what it does with `qwen2_5_vl`.
- `model_type.h`: `fara` is in the VLM list and in `IsQwenVLFamily`, next to `qwen2_5_vl`;
- `model.cpp`: the processor table maps it to the same `QwenImageProcessor`, and the
  decoder-pipeline branch tests the two names together;
- `multi_modal.cpp` and `position_inputs.cpp` key the 3-D M-RoPE positions on
  `IsQwenVLFamily`, so both get the same positions;
- nothing else in `src/` names `fara`.

What the release declares: its config.json says `model_type: qwen2_5_vl` and
`Qwen2_5_VLForConditionalGeneration` (transformers 4.52.4, the text fields both flat and
under `text_config`, `rope_scaling` of type `default` with the M-RoPE sections, untied
embeddings); no field names Fara. So a Fara checkpoint is recognised by its name: the hub
repository (`microsoft/Fara-7B`, which the Hugging Face cache keeps in the snapshot's
path), a folder called so, or the config's `_name_or_path`. The package is the
Qwen2.5-VL package with `model.type: fara`; a wrong guess either way changes nothing the
runtime computes.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template

_FARA = re.compile(r"(?:^|[^a-z])fara(?:[^a-z]|$)", re.IGNORECASE)


def names_fara(config: dict[str, Any], folder: Path) -> bool:
    """Whether a Qwen2.5-VL checkpoint is a Fara release, by the names it carries.

    Args:
        config: config.json as written.
        folder: The checkpoint folder (a hub cache snapshot's path names its repository:
            `models--microsoft--Fara-7B/snapshots/<commit>`).
    """
    names = [folder.name]
    if folder.parent.name == "snapshots":
        names.append(folder.parent.parent.name)
    written = config.get("_name_or_path")
    if isinstance(written, str):
        names.append(written)
    return any(_FARA.search(name) for name in names)


def fara_tiny(qwen2_5_vl: TinySpec) -> TinySpec:
    """The tiny Qwen2.5-VL spec under Fara's key.

    The same template and processor, and the `<|vision_pad|>` token the release's config
    names as vision_token_id.
    """
    return dataclasses.replace(
        qwen2_5_vl, family_key="fara", specials=[*qwen2_5_vl.specials, "<|vision_pad|>"]
    )


# microsoft/Fara-7B's sizes (Qwen2.5-VL-7B's) and the test checkpoint's: width, depth and
# heads shrunk; the window/full-attention pattern kept (full every 8th block there, every
# 2nd here).
RELEASED_7B = {
    "hidden": 3584, "intermediate": 18944, "layers": 28, "heads": 28, "kv_heads": 4,
    "vision_depth": 32, "vision_hidden": 1280, "vision_intermediate": 3420,
    "vision_heads": 16, "full_blocks": [7, 15, 23, 31], "mrope": [16, 24, 24],
}  # fmt: skip
SHRUNK_7B = {
    "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2,
    "vision_depth": 4, "vision_hidden": 32, "vision_intermediate": 64,
    "vision_heads": 2, "full_blocks": [1, 3], "mrope": [2, 3, 3],
}  # fmt: skip


def fara_7b_release(
    s: dict[str, int], vocab: int, sizes: dict[str, Any] = SHRUNK_7B
) -> dict[str, Any]:
    """microsoft/Fara-7B's config.json, shrunk.

    transformers 4.52's layout: the text fields at the top level and again under
    `text_config` (there with null image/video token ids), `rope_scaling` with both
    `rope_type` and `type` set to `default` beside the M-RoPE sections, a top-level
    `rope_theta` of 1e6, untied embeddings, `vision_token_id` beside the other token ids.
    """
    rope = {"mrope_section": sizes["mrope"], "rope_type": "default", "type": "default"}
    text = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "hidden_act": "silu",
        "hidden_size": sizes["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": sizes["intermediate"],
        "max_position_embeddings": 128000,
        "max_window_layers": 28,
        "num_attention_heads": sizes["heads"],
        "num_hidden_layers": sizes["layers"],
        "num_key_value_heads": sizes["kv_heads"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(rope),
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_cache": True,
        "use_sliding_window": False,
        "vision_end_token_id": s["<|vision_end|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vocab_size": vocab,
    }
    nested = {
        **text,
        "image_token_id": None,
        "model_type": "qwen2_5_vl_text",
        "torch_dtype": "bfloat16",
        "video_token_id": None,
        "vision_token_id": s["<|vision_pad|>"],
    }
    return {
        **{k: v for k, v in text.items() if k not in ("vision_end_token_id",)},
        "image_token_id": s["<|image_pad|>"],
        "model_type": "qwen2_5_vl",
        "text_config": dict(sorted(nested.items())),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.52.4",
        "video_token_id": s["<|video_pad|>"],
        "vision_config": {
            "depth": sizes["vision_depth"],
            "fullatt_block_indexes": sizes["full_blocks"],
            "hidden_act": "silu",
            "hidden_size": sizes["vision_hidden"],
            "in_channels": 3,
            "in_chans": 3,
            "initializer_range": 0.02,
            "intermediate_size": sizes["vision_intermediate"],
            "model_type": "qwen2_5_vl",
            "num_heads": sizes["vision_heads"],
            "out_hidden_size": sizes["hidden"],
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
            "tokens_per_second": 2,
            "window_size": 112,
        },
        "vision_end_token_id": s["<|vision_end|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vision_token_id": s["<|vision_pad|>"],
    }


def fara_released(tiny: TinySpec) -> tuple[ReleaseSpec, ...]:
    """The release-shaped Fara checkpoint (its folder's name says Fara, as a download's does)."""
    return (
        ReleaseSpec(
            key="fara-7b",
            release="microsoft/Fara-7B",
            tiny=tiny,
            config_json=fara_7b_release,
            # Fara-7B's chat_template.jinja is byte for byte Qwen2.5-VL's released text:
            # microsoft/fara, model_checkpoints/fara-7b/chat_template.jinja at
            # de45c0296aaaae1fa8aa738fa1aab498f950e906 (the release's files, later removed
            # from that repository), md5 813a6e754a0b11a830fa2091e6ca34a9.
            chat_template=released_template("qwen2_5_vl"),
        ),
    )
