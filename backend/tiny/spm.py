"""Offline SentencePiece-style tokenizers in the shape the released checkpoints ship.

Several converted families are released with a SentencePiece BPE converted to
tokenizer.json: `▁` for spaces, byte fallback (`<0x00>`..`<0xFF>`), no byte-level
pre-tokenizer. The hub is out of reach, so the structures below are written from what
transformers' `convert_slow_tokenizer.py` (LlamaConverter, GemmaConverter, SpmConverter)
writes for those releases, and from the releases' tokenizer_config.json keys as their
model cards and transformers' tests describe them. The vocabulary is a small BPE trained
here with `tokenizers`, so ids are not the releases' ids; the pipeline around it is.

Forms:
- `llama_legacy`: Llama-2 / Vicuna as LLaVA-1.5, VipLLaVA, Video-LLaVA, Mistral-7B v0.1
  (Idefics2) and Phi-3.5-Vision ship it: normalizer `Prepend("▁")` + `Replace(" ", "▁")`,
  no pre-tokenizer (LlamaConverter with `legacy` true when the file was converted), a
  TemplateProcessing post-processor that puts `<s>` first, tokenizer_config
  `LlamaTokenizer`, `legacy: false`, `add_bos_token: true`.
- `llama_metaspace`: the same tokenizer converted with `legacy: false`: no normalizer, a
  `Metaspace(prepend_scheme="first", split=False)` pre-tokenizer (LlamaConverter's
  non-legacy branch).
- `gemma`: Gemma / PaliGemma / Gemma 3: normalizer `Replace(" ", "▁")`, no pre-tokenizer,
  `<pad>` `<eos>` `<bos>` `<unk>` at ids 0..3 (GemmaConverter), `GemmaTokenizer`,
  `add_bos_token: true`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.tiny.tokenizer import CORPUS

SPACE = "▁"
FORMS = ("llama_legacy", "llama_metaspace", "gemma")

# Extra text with leading spaces, newlines, digits and non-ASCII, so that the trained
# vocabulary has pieces for some of it (the rest falls back to bytes).
_MORE = (
    "Ein Bild sagt mehr als tausend Worte. Voilà, c'est déjà l'été à Zürich.\n",
    "  Two spaces, then\nnew lines\n\nand 2024 or 3.14 and 007.",
    "日本語のテキスト と 中文 文本.",
)


@dataclass(frozen=True)
class SpmTokenizer:
    """Release-shaped tokenizer files.

    Attributes:
        tokenizer: The tokenizer.json contents.
        config: The tokenizer_config.json contents (no chat template).
        ids: Each special / added token mapped to its id.
        vocab_size: Number of ids in use.
    """

    tokenizer: dict[str, Any]
    config: dict[str, Any]
    ids: dict[str, int]
    vocab_size: int

    def write(self, folder: Path, chat_template: str | None = None) -> None:
        """Write tokenizer.json and tokenizer_config.json into `folder`."""
        config = dict(self.config)
        if chat_template is not None:
            config["chat_template"] = chat_template
        (folder / "tokenizer.json").write_text(
            json.dumps(self.tokenizer, indent=2, ensure_ascii=False), encoding="utf-8"
        )
        (folder / "tokenizer_config.json").write_text(
            json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8"
        )


def _trained(size: int) -> tuple[list[str], list[list[str]]]:
    """Pieces (in id order) and merges of a `▁`-convention BPE trained on the corpus."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # SentencePiece's pieces: a word with the space before it as `▁`.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=size, show_progress=False, limit_alphabet=120)
    tok.train_from_iterator((list(CORPUS) + list(_MORE)) * 4, trainer=trainer)
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    pieces = sorted(vocab, key=vocab.__getitem__)
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in data["model"]["merges"]]
    return pieces, merges


def _added(content: str, token_id: int, special: bool = True) -> dict[str, Any]:
    """An added-token entry as the releases write them (never normalized)."""
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _bos_first(bos: str, bos_id: int) -> dict[str, Any]:
    """The TemplateProcessing post-processor the releases carry: BOS before each sequence."""
    first = {"SpecialToken": {"id": bos, "type_id": 0}}
    return {
        "type": "TemplateProcessing",
        "single": [first, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            first,
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": bos, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
    }


def _decoder(strip_first: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if strip_first:  # LlamaConverter with add_prefix_space
        steps.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": steps}


def build_spm(
    form: str, added: list[str], *, trained: int = 600, first_added: int | None = None
) -> SpmTokenizer:
    """A release-shaped SentencePiece tokenizer.

    Args:
        form: One of FORMS.
        added: Added tokens after the vocabulary, in id order (`<image>`, `<pad>`, ...).
        trained: Size of the trained vocabulary (before specials and bytes).
        first_added: The id of the first added token: filler pieces, which no merge
            makes, pad the vocabulary up to it (to fit a tiny checkpoint's ids).

    Returns:
        The files' contents and the ids of the special and added tokens.

    Raises:
        ValueError: An unknown form, or a first_added id already taken.
    """
    if form not in FORMS:
        raise ValueError(f"unknown SentencePiece form {form!r}; known: {', '.join(FORMS)}")
    gemma = form == "gemma"
    # Gemma's first ids are <pad> <eos> <bos> <unk>; Llama's <unk> <s> </s>.
    front = ["<pad>", "<eos>", "<bos>", "<unk>"] if gemma else ["<unk>", "<s>", "</s>"]
    bos, eos = ("<bos>", "<eos>") if gemma else ("<s>", "</s>")
    pieces, merges = _trained(trained)
    vocab: dict[str, int] = {}
    for token in front + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[token] = len(vocab)
    for piece in pieces:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    if first_added is not None:
        if first_added < len(vocab):
            raise ValueError(f"ids up to {len(vocab)} are taken; train a smaller vocabulary")
        for i in range(len(vocab), first_added):
            vocab[f"<filler_{i}>"] = i
    ids = {token: vocab[token] for token in front}
    extra = [t for t in added if t not in vocab]
    for token in extra:
        ids[token] = len(vocab) + extra.index(token)
    vocab_size = len(vocab) + len(extra)

    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": "<unk>",
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
    }
    normalizer: dict[str, Any] | None
    pre_tokenizer: dict[str, Any] | None = None
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    if form == "llama_legacy":
        normalizer = {
            "type": "Sequence",
            "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace],
        }
    elif form == "llama_metaspace":
        normalizer = None
        pre_tokenizer = {
            "type": "Metaspace",
            "replacement": SPACE,
            "prepend_scheme": "first",
            "split": False,
        }
    else:
        normalizer = replace
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(t, ids[t]) for t in front + extra],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _bos_first(bos, ids[bos]),
        "decoder": _decoder(strip_first=not gemma),
        "model": model,
    }
    decoder_entries = {
        str(ids[t]): {k: v for k, v in _added(t, ids[t]).items() if k != "id"}
        for t in front + extra
    }
    config: dict[str, Any] = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": decoder_entries,
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": "<unk>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "spaces_between_special_tokens": False,
        "sp_model_kwargs": {},
    }
    if gemma:
        # google/gemma-3-4b-it, google/paligemma-3b-mix-224: GemmaTokenizer, <pad> padding.
        config.update(tokenizer_class="GemmaTokenizer", pad_token="<pad>")
    else:
        # llava-hf/llava-1.5-7b-hf (and Vicuna, Mistral-7B v0.1, Phi-3.5-Vision):
        # LlamaTokenizer with legacy false; the pad token, where there is one, is added.
        config.update(tokenizer_class="LlamaTokenizer", legacy=False, padding_side="left")
        config["pad_token"] = "<pad>" if "<pad>" in ids else "<unk>"
        config["use_default_system_prompt"] = False
    # Round-trip through the library so a malformed file fails here, not in a test.
    from tokenizers import Tokenizer

    Tokenizer.from_str(json.dumps(tokenizer))
    return SpmTokenizer(tokenizer=tokenizer, config=config, ids=ids, vocab_size=vocab_size)
