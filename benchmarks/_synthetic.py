"""Synthetic Qwen2.5-VL and LFM2-VL checkpoints of a chosen size, built offline with
random weights.

Shared by the benchmarks (run them as `python benchmarks/<name>.py`, which puts this
folder on the import path).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

SIZES = {
    "100M": (768, 10, 2048, 384, 4),
    # name: (hidden, layers, intermediate, vision hidden, vision depth)
    "50M": (512, 8, 1408, 256, 4),
    "200M": (1024, 12, 2816, 512, 4),
    "800M": (1536, 24, 4096, 768, 8),
}
VOCAB = 32000


def build_checkpoint(name: str, folder: Path) -> int:
    """Write a synthetic Qwen2.5-VL checkpoint; returns its parameter count."""
    from mmforge.backend.families import qwen

    hidden, layers, inter, v_hidden, v_depth = SIZES[name]
    base = qwen.tiny.QWEN2_5_VL

    def make_config(special: dict[str, int], vocab: int):
        config = base.make_config(special, vocab)
        t = config.text_config
        t.hidden_size, t.num_hidden_layers, t.intermediate_size = hidden, layers, inter
        t.num_attention_heads, t.num_key_value_heads = hidden // 64, max(1, hidden // 256)
        t.vocab_size = VOCAB
        t.rope_parameters["mrope_section"] = [8, 12, 12]
        t.layer_types = ["full_attention"] * layers
        t.max_window_layers = layers
        v = config.vision_config
        v.hidden_size, v.depth, v.intermediate_size = v_hidden, v_depth, v_hidden * 2
        v.num_heads, v.out_hidden_size = v_hidden // 64, hidden
        v.fullatt_block_indexes = [v_depth - 1]
        return config

    return _write(dataclasses.replace(base, make_config=make_config), folder)


# name: (text hidden, text layers, text intermediate, vision hidden, vision layers)
LFM2_SIZES = {
    "50M": (512, 8, 1536, 384, 4),
    "200M": (1024, 12, 3072, 512, 8),
    "400M": (1024, 16, 4096, 768, 12),
}


def build_lfm2_checkpoint(name: str, folder: Path) -> int:
    """Write a synthetic LFM2-VL checkpoint (a conv layer, then attention every third);
    returns its parameter count."""
    from mmforge.backend.families import lfm2

    hidden, layers, inter, v_hidden, v_layers = LFM2_SIZES[name]
    base = lfm2.tiny.LFM2_VL

    def make_config(special: dict[str, int], vocab: int):
        config = base.make_config(special, vocab)
        t = config.text_config
        t.hidden_size, t.num_hidden_layers, t.intermediate_size = hidden, layers, inter
        t.num_attention_heads, t.num_key_value_heads = hidden // 64, max(1, hidden // 128)
        t.layer_types = ["full_attention" if i % 3 == 2 else "conv" for i in range(layers)]
        t.vocab_size = VOCAB
        v = config.vision_config
        v.hidden_size, v.num_hidden_layers, v.intermediate_size = v_hidden, v_layers, v_hidden * 4
        v.num_attention_heads, v.num_patches = v_hidden // 64, 256
        config.projector_hidden_size = hidden * 2
        return config

    return _write(dataclasses.replace(base, make_config=make_config), folder)


def _write(spec: Any, folder: Path) -> int:
    """Write a checkpoint from a resized tiny spec; returns its parameter count."""
    from mmforge.backend.tensors import local_tensors
    from mmforge.backend.tiny.build import write_tiny

    write_tiny(spec, folder)
    return sum(t.numel for t in local_tensors(folder) or [])
