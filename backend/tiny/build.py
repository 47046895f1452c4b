"""Writing a tiny random-weight checkpoint laid out like a hub repository.

A family's spec (`families/<family>/tiny.py`) gives the config, the special tokens, the
chat template and the preprocessor config; this module trains the tokenizer, builds the
model with scaled random weights, and writes every file a hub repository would have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend.tiny.tokenizer import TinyTokenizer, train_tokenizer

# Matrices drawn from N(0, INIT_STD) give logits with a real spread, so greedy decoding
# of a random model is not one token repeated and a token match means something.
INIT_STD = 0.15


@dataclass(frozen=True)
class TinySpec:
    """What a family's tiny checkpoint is made of.

    Attributes:
        family_key: Registry key of the family.
        hf_class: transformers class name of the full model.
        specials: Special tokens in id order (after the trained vocabulary).
        make_config: Builds the transformers config from the special-token ids and the
            vocabulary size.
        chat_template: Jinja chat template (BOS included where the family uses one);
            None: tokenizer_config.json has none, as PaliGemma's releases.
        tokenizer_extra: Extra `tokenizer_config.json` keys (bos/eos/pad tokens, ...).
        preprocessor: `preprocessor_config.json` contents (None: no file).
        audio_preprocessor: The audio feature extractor settings, written under
            "feature_extractor" in `processor_config.json` as transformers 5 does.
        eos_tokens: Tokens that end generation.
        pinned: Special tokens that must sit at exact ids.
        embed_std: Standard deviation of the token embeddings, when it must differ from
            `INIT_STD`: with tied embeddings and a sqrt(hidden) embedding scale (Gemma),
            large embeddings make every token its own most likely successor.
        logit_gain: Scale of the final text norm. Small tied embeddings make the logits
            nearly flat, so greedy picks hinge on near-ties; a gain spreads them.
        vector_std: Noise added to every vector (biases, norm weights), so that a bias
            or a norm the graphs drop changes the output, as in trained weights.
        adjust_model: Changes the model after the redraw (model, seed): values the redraw
            leaves alone, such as GLM-4.5V's router correction bias (a buffer).
        seed: The draw `build_tiny` uses: one whose greedy answer to the probe picture is
            not a token or two repeated (tests/backend/test_tiny.py).
        model_context: What transformers needs around building the model (Gemma 3n: its
            timm tower, `timm_in_transformers`).
    """

    family_key: str
    hf_class: str
    specials: list[str]
    make_config: Callable[[dict[str, int], int], Any]
    chat_template: str | None
    tokenizer_extra: dict[str, Any]
    preprocessor: dict[str, Any] | None
    eos_tokens: list[str]
    pinned: dict[str, int] = field(default_factory=dict)
    embed_std: float | None = None
    logit_gain: float | None = None
    audio_preprocessor: dict[str, Any] | None = None
    vector_std: float | None = None
    adjust_model: Callable[[Any, int], None] | None = None
    seed: int = 0
    model_context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext


@dataclass(frozen=True)
class TinyCheckpoint:
    """A tiny checkpoint on disk.

    Attributes:
        folder: The checkpoint folder.
        family_key: Its family.
        special_ids: Each special token and its id.
    """

    folder: Path
    family_key: str
    special_ids: dict[str, int]


def with_config(spec: TinySpec, overrides: dict[str, Any], vector_std: float = 0.1) -> TinySpec:
    """The spec with config fields changed and its vectors noised.

    Paths are dotted (attributes, then dict keys). The noise makes a bias the graphs drop
    show, as in trained weights. Used to measure and test which fields the converted
    graphs honour.
    """
    make = spec.make_config

    def make_config(specials: dict[str, int], vocab: int) -> Any:
        config = make(specials, vocab)
        for path, value in overrides.items():
            *parents, last = path.split(".")
            node = config
            for part in parents:
                node = node[part] if isinstance(node, dict) else getattr(node, part)
            if isinstance(node, dict):
                node[last] = value
            else:
                setattr(node, last, value)
        return config

    return dataclasses.replace(spec, make_config=make_config, vector_std=vector_std)


def scale_init(
    model: Any, seed: int, embed_std: float | None = None, vector_std: float | None = None
) -> None:
    """Redraw every matrix (and conv kernel) from N(0, INIT_STD).

    Vectors keep their initial values, plus N(0, vector_std) when that is given.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.ndim >= 2:
                std = INIT_STD
                if embed_std is not None and name.endswith("embed_tokens.weight"):
                    std = embed_std
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
            elif vector_std is not None and p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * vector_std)


def scale_final_norm(model: Any, gain: float) -> None:
    """Multiply the output of the text model's final norm by `gain`."""
    import torch

    finals = [
        p
        for n, p in model.named_parameters()
        if n.endswith(("language_model.norm.weight", "model.norm.weight"))
        and "vision" not in n
        and "audio" not in n
    ]
    if len(finals) != 1:
        raise ValueError(f"expected one final text norm, found {len(finals)}")
    with torch.no_grad():
        weight = finals[0]
        if bool((weight == 0).all()):  # Gemma-style norms scale by (1 + weight)
            weight.fill_(gain - 1.0)
        else:
            weight.mul_(gain)


def write_tiny(spec: TinySpec, folder: Path, *, seed: int = 0) -> TinyCheckpoint:
    """Build a family's tiny checkpoint into `folder` (replaced atomically if it exists)."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tok = train_tokenizer(spec.specials, pinned=spec.pinned)
    config = spec.make_config(tok.special_ids, tok.vocab_size)
    config.dtype = "float32"
    torch.manual_seed(seed)
    with spec.model_context():
        model = getattr(transformers, spec.hf_class)(config).eval()
    scale_init(model, seed, spec.embed_std, spec.vector_std)
    if spec.adjust_model is not None:
        spec.adjust_model(model, seed)
    if spec.logit_gain is not None:
        scale_final_norm(model, spec.logit_gain)

    def fill(staging: Path) -> None:
        model.save_pretrained(staging, safe_serialization=True)
        write_side_files(staging, spec, tok)

    folder = write_atomically(Path(folder), fill)
    return TinyCheckpoint(folder=folder, family_key=spec.family_key, special_ids=tok.special_ids)


def write_atomically(folder: Path, fill: Callable[[Path], None]) -> Path:
    """Fill a staging folder beside `folder`, then put it in `folder`'s place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        fill(staging)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def write_side_files(folder: Path, spec: TinySpec, tok: TinyTokenizer) -> None:
    """Everything but the weights and config.json: tokenizer, processor and generation."""
    _write_tokenizer(folder, spec, tok)
    if spec.preprocessor is not None:
        _write_json(folder / "preprocessor_config.json", spec.preprocessor)
    if spec.audio_preprocessor is not None:
        _write_json(
            folder / "processor_config.json", {"feature_extractor": spec.audio_preprocessor}
        )
    eos = [tok.special_ids[t] for t in spec.eos_tokens]
    generation = {
        "eos_token_id": eos if len(eos) > 1 else eos[0],
        "do_sample": False,
        "max_new_tokens": 32,
    }
    for key in ("bos_token", "pad_token"):
        name = spec.tokenizer_extra.get(key)
        if name in tok.special_ids:
            generation[key.replace("_token", "_token_id")] = tok.special_ids[name]
    _write_json(folder / "generation_config.json", generation)


def _write_tokenizer(folder: Path, spec: TinySpec, tok: TinyTokenizer) -> None:
    (folder / "tokenizer.json").write_text(tok.json_text, encoding="utf-8")
    config = {
        # PreTrainedTokenizerFast is read identically by HF and ORT GenAI for byte-level
        # BPE; LlamaTokenizer would make ORT GenAI produce wrong ids.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t, i in sorted(tok.special_ids.items(), key=lambda kv: kv[1])
        },
        **spec.tokenizer_extra,
    }
    if spec.chat_template is not None:
        config["chat_template"] = spec.chat_template
    _write_json(folder / "tokenizer_config.json", config)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
