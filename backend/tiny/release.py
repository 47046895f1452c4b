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
import re
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
class LoraSpec:
    """A LoRA adapter the release ships (Phi-4-multimodal's vision and speech).

    Attributes:
        name: The adapter's name ("vision").
        rank: r.
        alpha: lora_alpha.
        targets: Regular expression the wrapped modules' names match in full.
    """

    name: str
    rank: int
    alpha: float
    targets: str


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
        processor_files: The processor files as released (file name to JSON), in place of
            the tiny spec's preprocessor and audio settings.
        seed: The random weights' seed (one whose greedy answer runs the full length).
        lora: Adapters written as PEFT folders (`<name>-lora/`), as released.
        lora_inline: The adapters are also in the main weights, beside their base weight
            (`<module>.base_layer.weight`, `<module>.lora_A.<name>.weight`), as in
            Phi-4-multimodal's remote-code layout.
        model_config: The config the weights are built from, when transformers cannot read
            the written one (a remote-code layout: its mapping to the native config).
        adjust_weights: Changes the weights as the release lays them out (tensors
            transformers skips on load, such as Qwen3.5's `mtp.*` head; experts one
            tensor each), after `rename`.
        own_output_layer: The release stores an lm_head of its own although its config
            leaves tie_word_embeddings to a default that ties (Mistral Small 3.1):
            transformers then uses the lm_head, and so must the package.
        chat_template: The chat template text the release ships, in place of the tiny
            spec's (None: the release's could not be found; the tiny spec's is used).
    """

    key: str
    release: str
    tiny: TinySpec
    config_json: Callable[[dict[str, int], int], dict[str, Any]]
    rename: Callable[[str], str] = lambda name: name
    shards: int = 2
    preprocessor: dict[str, Any] | None = None
    processor_files: dict[str, dict[str, Any]] | None = None
    own_output_layer: bool = False
    adjust_weights: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    seed: int = 0
    lora: tuple[LoraSpec, ...] = ()
    lora_inline: bool = False
    model_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    chat_template: str | None = None


def released_template(name: str) -> str:
    """A released chat template stored in mmforge.resources (`<name>_chat_template.jinja`)."""
    from importlib import resources

    file = resources.files("mmforge.resources").joinpath(f"{name}_chat_template.jinja")
    return file.read_text(encoding="utf-8")


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
    if spec.processor_files is not None:
        tiny = dataclasses.replace(tiny, preprocessor=None, audio_preprocessor=None)
    if spec.chat_template is not None:
        tiny = dataclasses.replace(tiny, chat_template=spec.chat_template)
    tok = train_tokenizer(tiny.specials, pinned=tiny.pinned)
    text = spec.config_json(tok.special_ids, tok.vocab_size)
    built = spec.model_config(text) if spec.model_config is not None else text
    # As Checkpoint.read builds it: from the dict, transformers' defaults filling the rest.
    with tiny.model_context():
        config = CONFIG_MAPPING[built["model_type"]].from_dict(json.loads(json.dumps(built)))
    config.dtype = "float32"
    if spec.own_output_layer:  # weights with a distinct lm_head; the config text unchanged
        config.tie_word_embeddings = False
        if getattr(config, "text_config", None) is not None:
            config.text_config.tie_word_embeddings = False
    seed = spec.seed if seed is None else seed
    torch.manual_seed(seed)
    with tiny.model_context():
        model = getattr(transformers, tiny.hf_class)(config).eval()
    scale_init(model, seed, tiny.embed_std, VECTOR_STD)
    if tiny.adjust_model is not None:
        tiny.adjust_model(model, seed)
    if tiny.logit_gain is not None:
        scale_final_norm(model, tiny.logit_gain)
    weights = _release_weights(model, spec.rename)
    if spec.adjust_weights is not None:
        weights = spec.adjust_weights(weights)
    adapters = {lora.name: _random_lora(lora, weights, seed) for lora in spec.lora}
    if spec.lora_inline:
        weights = _inline(weights, adapters)

    def fill(staging: Path) -> None:
        _write_shards(staging, weights, spec.shards)
        for lora in spec.lora:
            _write_peft_folder(staging / f"{lora.name}-lora", lora, adapters[lora.name])
        (staging / "config.json").write_text(json.dumps(text, indent=2) + "\n", encoding="utf-8")
        write_side_files(staging, tiny, tok)
        for name, data in (spec.processor_files or {}).items():
            (staging / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

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


def _random_lora(lora: LoraSpec, weights: dict[str, Any], seed: int) -> dict[str, Any]:
    """A (r x in) and B (out x r) for every targeted module, large enough to matter."""
    import torch

    from mmforge.backend.tiny.build import INIT_STD

    gen = torch.Generator().manual_seed(seed + sum(map(ord, lora.name)))
    out: dict[str, Any] = {}
    for name in sorted(weights):
        module = name.removesuffix(".weight")
        if not name.endswith(".weight") or not re.fullmatch(lora.targets, module):
            continue
        rows, cols = weights[name].shape
        a = torch.randn((lora.rank, cols), generator=gen) * INIT_STD
        b = torch.randn((rows, lora.rank), generator=gen) * INIT_STD
        out[module] = (a.to(torch.bfloat16), b.to(torch.bfloat16))
    if not out:
        raise ValueError(f"the {lora.name} LoRA targets no module: {lora.targets}")
    return out


def _inline(weights: dict[str, Any], adapters: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The remote-code layout: each wrapped weight as base_layer, its adapters beside it."""
    wrapped = {module for pairs in adapters.values() for module in pairs}
    out: dict[str, Any] = {}
    for name, tensor in weights.items():
        module = name.removesuffix(".weight")
        out[f"{module}.base_layer.weight" if module in wrapped else name] = tensor
    for adapter, pairs in adapters.items():
        for module, (a, b) in pairs.items():
            out[f"{module}.lora_A.{adapter}.weight"] = a
            out[f"{module}.lora_B.{adapter}.weight"] = b
    return out


def _write_peft_folder(folder: Path, lora: LoraSpec, pairs: dict[str, Any]) -> None:
    """A PEFT adapter folder as transformers' load_adapter reads it."""
    from safetensors.torch import save_file

    folder.mkdir()
    tensors = {}
    for module, (a, b) in pairs.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = a.contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = b.contiguous()
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": lora.targets,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


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
