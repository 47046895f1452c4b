"""Test checkpoints shaped like a family's hub releases, not like `save_pretrained` output.

A released checkpoint differs from what transformers 5 writes in ways our graphs must
survive: its config.json is the text the release shipped (transformers 4 key names such
as `rope_scaling` with `type`, a top-level `rope_theta`; fields left to their defaults
left out), its weights are bfloat16 under the release's tensor names, split into shards
with an index. A `ReleaseSpec` keeps all of that and shrinks only width, depth, the
vocabulary and the image size, keeping the layer patterns (window and full attention,
DeepStack taps, sliding and global layers) at a smaller scale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.tiny.build import (
    TinyCheckpoint,
    TinySpec,
    scale_final_norm,
    scale_init,
    write_atomically,
    write_side_files,
)
from mmforge.backend.tiny.tokenizer import train_tokenizer

# Trained weights have biases and norm weights away from their initial values; so do ours,
# so that a bias or a norm the graphs drop changes the output.
VECTOR_STD = 0.05


@dataclass(frozen=True)
class ReleaseSpec:
    """A release-shaped test checkpoint of a family.

    Attributes:
        key: Its name in tests, e.g. "qwen2_5_vl-3b".
        release: The hub release it follows, e.g. "Qwen/Qwen2.5-VL-3B-Instruct".
        tiny: The family's tiny spec, for the tokenizer, chat template and processor.
        config_json: The release's config.json text, shrunk (special-token ids and the
            vocabulary size in, the JSON dict out, written as is).
        rename: The tensor name transformers 5 writes to the release's, where they differ.
        shards: How many safetensors files the weights are split into.
        preprocessor: The processor settings, when they differ from the tiny spec's.
        seed: The random weights' seed (one whose greedy answer runs the full length).
        own_output_layer: The release stores an lm_head of its own although its config
            leaves tie_word_embeddings to a default that ties (Mistral Small 3.1):
            transformers then uses the lm_head, and so must the package.
    """

    key: str
    release: str
    tiny: TinySpec
    config_json: Callable[[dict[str, int], int], dict[str, Any]]
    rename: Callable[[str], str] = lambda name: name
    shards: int = 2
    preprocessor: dict[str, Any] | None = None
    own_output_layer: bool = False
    seed: int = 0


def write_release(spec: ReleaseSpec, folder: Path, *, seed: int | None = None) -> TinyCheckpoint:
    """Build a release-shaped checkpoint into `folder` (replaced atomically if it exists)."""
    import dataclasses

    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    transformers.utils.logging.disable_progress_bar()
    tiny = spec.tiny
    if spec.preprocessor is not None:
        tiny = dataclasses.replace(tiny, preprocessor=spec.preprocessor)
    tok = train_tokenizer(tiny.specials, pinned=tiny.pinned)
    text = spec.config_json(tok.special_ids, tok.vocab_size)
    # As Checkpoint.read builds it: from the dict, transformers' defaults filling the rest.
    config = CONFIG_MAPPING[text["model_type"]].from_dict(json.loads(json.dumps(text)))
    config.dtype = "float32"
    if spec.own_output_layer:  # weights with a distinct lm_head; the config text unchanged
        config.tie_word_embeddings = False
        if getattr(config, "text_config", None) is not None:
            config.text_config.tie_word_embeddings = False
    seed = spec.seed if seed is None else seed
    torch.manual_seed(seed)
    model = getattr(transformers, tiny.hf_class)(config).eval()
    scale_init(model, seed, tiny.embed_std, VECTOR_STD)
    if tiny.logit_gain is not None:
        scale_final_norm(model, tiny.logit_gain)
    weights = _release_weights(model, spec.rename)

    def fill(staging: Path) -> None:
        _write_shards(staging, weights, spec.shards)
        (staging / "config.json").write_text(json.dumps(text, indent=2) + "\n", encoding="utf-8")
        write_side_files(staging, tiny, tok)

    written = write_atomically(Path(folder), fill)
    return TinyCheckpoint(folder=written, family_key=tiny.family_key, special_ids=tok.special_ids)


def _release_weights(model: Any, rename: Callable[[str], str]) -> dict[str, Any]:
    """The weights in bfloat16 as transformers serialises them, under the release's names.

    Serialised by `save_pretrained` (which writes the older names where transformers maps
    them, and stores a tied tensor once), then renamed where the release differs still.
    """
    import tempfile

    import torch
    from safetensors.torch import load_file

    model = model.to(torch.bfloat16)
    with tempfile.TemporaryDirectory(prefix="mmforge-release-") as scratch:
        model.save_pretrained(scratch, safe_serialization=True)
        out: dict[str, Any] = {}
        for file in sorted(Path(scratch).glob("*.safetensors")):
            out.update({rename(k): v for k, v in load_file(file).items()})
    return out


def _write_shards(folder: Path, weights: dict[str, Any], shards: int) -> None:
    """model-0000i-of-0000n.safetensors files and their index, by running size."""
    from safetensors.torch import save_file

    names = sorted(weights)
    total = sum(weights[n].numel() * weights[n].element_size() for n in names)
    per_shard = total / shards
    groups: list[list[str]] = [[] for _ in range(shards)]
    running = 0
    for name in names:
        groups[min(int(running // per_shard), shards - 1)].append(name)
        running += weights[name].numel() * weights[name].element_size()
    groups = [g for g in groups if g]
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: weights[n] for n in group}, folder / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
