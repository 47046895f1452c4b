"""Tiny Phi-3.5-Vision checkpoints in the remote-code layout, built from native parts.

transformers has no class for the whole model, so the weights come from its parts: a
random `Phi3ForCausalLM` and `CLIPVisionModel` (336 px crops, as the runtime's
`Phi3ImageTransform` makes them) and random HD-transform separators and projector, saved
under the remote code's names with the release's config.json text (shrunk).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmforge.backend.families.phi3v import layout
from mmforge.backend.tiny.build import (
    TinyCheckpoint,
    TinySpec,
    scale_init,
    write_atomically,
    write_side_files,
)
from mmforge.backend.tiny.tokenizer import train_tokenizer

# Phi-3's chat markers; images are written into the text as <|image_1|>, <|image_2|>, ...
# which the runtime's processor (and the remote processor) turn into negative ids.
_SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<s>"]
_TEMPLATE = (
    "{{ '<s>' }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

PHI3V = TinySpec(
    family_key="phi3v",
    hf_class="Phi3ForCausalLM",  # the text part; the whole model has no native class
    specials=_SPECIALS,
    make_config=lambda s, vocab: None,
    chat_template=_TEMPLATE,
    tokenizer_extra={"bos_token": "<s>", "eos_token": "<|end|>", "pad_token": "<|endoftext|>"},
    preprocessor={
        "image_processor_type": "Phi3VImageProcessor",
        "processor_class": "Phi3VProcessor",
        "auto_map": {"AutoProcessor": "processing_phi3_v.Phi3VProcessor"},
        "do_convert_rgb": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "num_crops": 4,
        "num_img_tokens": 144,
    },
    eos_tokens=["<|end|>", "<|endoftext|>"],
)

# microsoft/Phi-3.5-vision-instruct's sizes and the test checkpoint's.
RELEASED = {"hidden": 3072, "intermediate": 8192, "layers": 32, "heads": 32,
            "tower_hidden": 1024, "tower_intermediate": 4096, "tower_layers": 24}  # fmt: skip
SHRUNK = {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4,
          "tower_hidden": 32, "tower_intermediate": 64, "tower_layers": 3}  # fmt: skip


def phi3_5_vision_config(
    s: dict[str, int], vocab: int, sizes: dict[str, Any] = SHRUNK
) -> dict[str, Any]:
    """microsoft/Phi-3.5-vision-instruct's config.json, shrunk.

    The remote code's layout: Phi-3's text fields at the top level, LongRoPE
    (`rope_scaling` type `su`) over a 4,096-position original context, the HD transform
    under `embd_layer`, the CLIP tower named under `img_processor` (its width as
    `image_dim_out`; the tower itself is fixed in the code).
    """
    half = sizes["hidden"] // sizes["heads"] // 2
    return {
        "_name_or_path": "Phi-3.5-vision-instruct",
        "architectures": ["Phi3VForCausalLM"],
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_phi3_v.Phi3VConfig",
            "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM",
        },
        "bos_token_id": s["<s>"],
        "embd_layer": {
            "embedding_cls": "image",
            "hd_transform_order": "sub_glb",
            "projection_cls": "mlp",
            "use_hd_transform": True,
            "with_learnable_separator": True,
        },
        "embd_pdrop": 0.0,
        "eos_token_id": s["<|endoftext|>"],
        "hidden_act": "silu",
        "hidden_size": sizes["hidden"],
        "img_processor": {
            "image_dim_out": sizes["tower_hidden"],
            "model_name": "openai/clip-vit-large-patch14-336",
            "name": "clip_vision_model",
            "num_img_tokens": 144,
        },
        "initializer_range": 0.02,
        "intermediate_size": sizes["intermediate"],
        "max_position_embeddings": 131072,
        "model_type": "phi3_v",
        "num_attention_heads": sizes["heads"],
        "num_hidden_layers": sizes["layers"],
        "num_key_value_heads": sizes["heads"],
        "original_max_position_embeddings": 4096,
        "pad_token_id": s["<|endoftext|>"],
        "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "long_factor": [1.0 + 0.5 * i for i in range(half)],
            "short_factor": [1.0 + 0.01 * i for i in range(half)],
            "type": "su",
        },
        "rope_theta": 10000.0,
        "sliding_window": 262144,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.38.1",
        "use_cache": True,
        "vocab_size": vocab,
    }


def write_phi3v(folder: Path, *, seed: int = 0, shards: int = 2) -> TinyCheckpoint:
    """Write a release-shaped Phi-3.5-Vision checkpoint (bfloat16 shards) into `folder`."""
    import torch
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel, Phi3Config, Phi3ForCausalLM

    tok = train_tokenizer(PHI3V.specials)
    written = phi3_5_vision_config(tok.special_ids, tok.vocab_size)
    torch.manual_seed(seed)
    text = Phi3ForCausalLM(Phi3Config.from_dict(layout.text_config(written))).eval()
    scale_init(text, seed, vector_std=0.05)
    tower_config = dict(layout.vision_config(written, None))
    tower_config["intermediate_size"] = SHRUNK["tower_intermediate"]
    tower_config["num_hidden_layers"] = SHRUNK["tower_layers"]
    tower = CLIPVisionModel(CLIPVisionConfig.from_dict(tower_config)).eval()
    scale_init(tower, seed + 1, vector_std=0.05)
    width, hidden = 4 * tower_config["hidden_size"], written["hidden_size"]
    gen = torch.Generator().manual_seed(seed + 2)
    projector = {
        "glb_GN": torch.randn(1, 1, width, generator=gen) * 0.1,
        "sub_GN": torch.randn(1, 1, 1, width, generator=gen) * 0.1,
        "img_projection.0.weight": torch.randn(hidden, width, generator=gen) * 0.08,
        "img_projection.0.bias": torch.randn(hidden, generator=gen) * 0.05,
        "img_projection.2.weight": torch.randn(hidden, hidden, generator=gen) * 0.08,
        "img_projection.2.bias": torch.randn(hidden, generator=gen) * 0.05,
    }
    weights: dict[str, Any] = {}
    parts: tuple[tuple[layout.Part, dict[str, Any]], ...] = (
        ("text", text.state_dict()),
        ("vision", tower.state_dict()),
        ("projector", projector),
    )
    for part, state in parts:
        for name, value in state.items():
            weights[layout.remote_name(part, name)] = value.detach().to(torch.bfloat16).clone()

    def fill(staging: Path) -> None:
        names = sorted(weights)
        per = -(-len(names) // shards)
        index: dict[str, str] = {}
        for i in range(shards):
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n].contiguous() for n in names[i * per : (i + 1) * per]}
            save_file(part, str(staging / file), metadata={"format": "pt"})
            index.update(dict.fromkeys(part, file))
        total = sum(v.numel() * 2 for v in weights.values())
        (staging / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=2)
        )
        (staging / "config.json").write_text(json.dumps(written, indent=2) + "\n")
        write_side_files(staging, PHI3V, tok)

    done = write_atomically(Path(folder), fill)
    return TinyCheckpoint(folder=done, family_key="phi3v", special_ids=tok.special_ids)
