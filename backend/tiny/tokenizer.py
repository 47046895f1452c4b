"""An offline byte-level BPE tokenizer that ORT GenAI tokenizes exactly like HF.

Trained with `tokenizers` on a small built-in corpus. Special tokens are appended after
the trained vocabulary, so their ids follow from the order given; where a runtime
hard-codes ids (Phi-4-MM: 200010/200011) filler entries pad the vocabulary first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CORPUS = (
    "The quick brown fox jumps over the lazy dog. A picture is worth a thousand words.",
    "Describe this image in detail. What is in the picture? Transcribe the audio clip.",
    "User: hello there! Assistant: Hi, how can I help you today? The sky is blue and the "
    "grass is green; the cat sat on the mat while 12 birds sang 345 songs.",
    "Multimodal models read images, audio and text, then answer questions about them.",
    "ONNX Runtime GenAI runs converted packages on the CPU or on CUDA devices quickly.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000, punctuation: ; , . ! ? ( ) [ ] { } - _ + = * /",
    "She said: 'It was red, and green, and a little bit of yellow near the top corner.'",
)


@dataclass(frozen=True)
class TinyTokenizer:
    """A trained tokenizer and where its special tokens landed.

    Attributes:
        json_text: The `tokenizer.json` contents.
        special_ids: Each special token string mapped to its id.
        vocab_size: Number of ids in use (the config's vocab_size must be at least this).
    """

    json_text: str
    special_ids: dict[str, int]
    vocab_size: int


def train_tokenizer(
    specials: list[str],
    *,
    vocab_size: int = 384,
    pinned: dict[str, int] | None = None,
) -> TinyTokenizer:
    """Train a byte-level BPE and append special tokens.

    Args:
        specials: Special tokens in id order, after the trained vocabulary.
        vocab_size: Size of the trained (non-special) vocabulary.
        pinned: Special tokens that must sit at exact ids (ascending). Filler vocabulary
            entries pad the vocabulary up to each pinned id; such entries are never
            produced by the merges, so they change no tokenization.

    Returns:
        The tokenizer JSON and the ids of every special token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS) * 4, trainer=trainer)

    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    added: list[dict[str, object]] = []
    special_ids: dict[str, int] = {}
    next_id = len(vocab)
    pins = sorted((pinned or {}).items(), key=lambda kv: kv[1])
    for token, target in pins:
        if target < next_id:
            raise ValueError(f"cannot pin {token} at {target}: ids up to {next_id} are taken")
        for i in range(next_id, target):
            vocab[f"<|filler_{i}|>"] = i
        added.append(_added(token, target))
        special_ids[token] = target
        next_id = target + 1
    for token in specials:
        if token in special_ids:
            continue
        added.append(_added(token, next_id))
        special_ids[token] = next_id
        next_id += 1
    data["added_tokens"] = added
    text = json.dumps(data, ensure_ascii=False)
    # Round-trip through the library so a malformed file fails here, not in a test.
    Tokenizer.from_str(text)
    return TinyTokenizer(json_text=text, special_ids=special_ids, vocab_size=next_id)


def _added(token: str, token_id: int) -> dict[str, object]:
    """An added-token entry as `AddedToken(special=True, normalized=False)` writes it."""
    return {
        "id": token_id,
        "content": token,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }
