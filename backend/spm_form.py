"""SentencePiece-style tokenizers in a package: the form ONNX Runtime GenAI reads like HF.

Llama-2 / Vicuna / Mistral-7B v0.1 / Phi-3.5 (LLaVA-1.5, VipLLaVA, Video-LLaVA, Idefics2,
Phi-3.5-Vision) ship a SentencePiece BPE converted to tokenizer.json with class
LlamaTokenizer; Gemma's (PaliGemma, Gemma 3/4) with class GemmaTokenizer. ONNX Runtime
GenAI 0.18 reads the Gemma form as transformers does, not the Llama one (measured, the
prompts of tests/backend/test_spm_tokenizers.py; docs/chat-engine.md): conversion
rewrites the package's copy (convert/package.py), and templates that start with the BOS
and then text write the space transformers prepends (families/components/tokens.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPACE = "\u2581"  # SentencePiece's space
# A package file (mmforge's, the runtime reads none of it): how chat decodes an answer
# where the package's tokenizer.json no longer decodes as transformers does.
DECODING_FILE = "mmforge_decoding.json"
_LLAMA_CLASSES = {"LlamaTokenizer", "LlamaTokenizerFast"}


def is_sentencepiece(tokenizer: dict[str, Any]) -> bool:
    """Whether tokenizer.json is a converted SentencePiece BPE (`▁` spaces, byte fallback)."""
    model = tokenizer.get("model")
    steps = json.dumps(
        [tokenizer.get("normalizer"), tokenizer.get("pre_tokenizer")], ensure_ascii=False
    )
    return (
        isinstance(model, dict)
        and model.get("type", "BPE") == "BPE"
        and bool(model.get("byte_fallback"))
        and SPACE in steps
    )


def hf_prepend(src: Path) -> str:
    """Where transformers' tokenizer of the checkpoint puts a `▁` before text.

    transformers 5 does not always read tokenizer.json as written: for some model types
    (Idefics2's, Video-LLaVA's: `LlamaTokenizer`) it builds the pipeline itself, a
    `Metaspace` that prepends to the first text of the input only (`legacy` false); for
    others (llava, vipllava, phi3_v: MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS) it reads
    the file as it is, whose legacy normalizer `Prepend("▁")` prepends to the text after
    every special token. So this asks transformers (the config beside it decides).

    Returns:
        "segment" (before every text between special tokens), "first" (before the
        input's first text only) or "never".
    """
    from transformers import AutoTokenizer

    # No code from the repository runs (Phi-3.5-Vision's config is remote code): transformers
    # then reads the tokenizer as verify's reference does when that code is declined.
    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=False)
    special = next(iter(tok.all_special_tokens), None)

    def first_piece(text: str, skip: int) -> str:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return str(tok.convert_ids_to_tokens(ids[skip])) if len(ids) > skip else ""

    if not first_piece("a", 0).startswith(SPACE):
        return "never"
    if special is not None and first_piece(f"{special}a", 1).startswith(SPACE):
        return "segment"
    return "first"


def spm_runtime_form(tokenizer: dict[str, Any], config: dict[str, Any], src: Path) -> str | None:
    """Rewrite a SentencePiece LlamaTokenizer so the runtime's ids are HF's (in place).

    ONNX Runtime GenAI 0.18 (onnxruntime-extensions' BPE kernel) reads a LlamaTokenizer's
    file with a regex pre-tokenizer that splits digits and punctuation off before the
    merges, and puts a `▁` before the text after every special token when the decoder
    strips a leading space (`Strip`, which every Llama release's has), a second one
    where that text starts with a space. With class GemmaTokenizer it encodes
    character by character with the merges and byte fallback, nothing split; the
    `▁` per text as the decoder says (measured, docs/chat-engine.md). So the package's
    class is GemmaTokenizer, and:

    - transformers prepends to every text ("segment", a legacy `Prepend` normalizer it
      reads as written): the file is kept, the runtime's prefix is HF's;
    - "first" or "never": `Replace(" ", "▁")`, no pre-tokenizer and no `Strip` decoder,
      so the runtime prepends nothing: HF's ids for text after a special token, the
      chat prompts' case (a template that starts with the BOS and then text writes the
      space itself, families/components/tokens.py).

    Returns:
        How transformers prepends, where the tokenizer was rewritten; None if not.
    """
    if config.get("tokenizer_class") not in _LLAMA_CLASSES or not is_sentencepiece(tokenizer):
        return None
    scheme = hf_prepend(src)
    config["tokenizer_class"] = "GemmaTokenizer"
    if scheme == "segment":
        return scheme
    tokenizer["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    tokenizer["pre_tokenizer"] = None
    decoder = tokenizer.get("decoder")
    if isinstance(decoder, dict) and decoder.get("type") == "Sequence":
        # The runtime's decoding of the ids is the same without it (measured).
        decoder["decoders"] = [d for d in decoder.get("decoders", []) if d.get("type") != "Strip"]
    return scheme


def runtime_prepends(tokenizer: dict[str, Any]) -> bool:
    """Whether the runtime puts `▁` before each text of a SentencePiece tokenizer.json.

    It does when the decoder strips a leading space (`Strip`, or a `Metaspace` that adds
    a prefix).
    """
    steps = tokenizer.get("decoder") or {}
    steps = steps.get("decoders", [steps]) if isinstance(steps, dict) else []
    return any(
        (d.get("type") == "Strip" and d.get("content") == " ")
        or (d.get("type") == "Metaspace" and d.get("add_prefix_space"))
        for d in steps
        if isinstance(d, dict)
    )


def hf_strips_answer_space(src: Path, tokenizer: dict[str, Any]) -> bool:
    """Whether transformers' decode drops a leading space the package's tokenizer keeps.

    The form the runtime reads has no `Strip` decoder (it would make the runtime prepend
    `▁` to every text), so the `tokenizers` decode chat streams an answer with keeps the
    space of an answer's first `▁` piece, where transformers' decode of the checkpoint's
    tokenizer drops it (measured: " The cat sat" against "The cat sat"). Asked of both.
    """
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(src, trust_remote_code=False)
    ids = hf("The cat sat", add_special_tokens=False)["input_ids"]
    ours = Tokenizer.from_str(json.dumps(tokenizer)).decode(ids, skip_special_tokens=True)
    theirs = hf.decode(ids, skip_special_tokens=True)
    return bool(ours != theirs and ours == " " + str(theirs))
