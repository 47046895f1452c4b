"""Every token a tokenizer can produce must have a row in the model's embedding.

A tokenizer.json holding a token whose id is past the model's vocabulary (a tokenizer
from another model, an added token put at a wrong id) converted, and then ONNX Runtime
failed inside its embedding Gather ("indices element out of data bounds") with its own
coloured log line on stderr, called a conversion bug. Checked before a conversion (naming
the checkpoint's file) and before a chat (naming the package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError


def highest_token(tokenizer: dict[str, Any]) -> tuple[int, str] | None:
    """The largest token id a parsed tokenizer.json gives, with its text (None: none)."""
    found: list[tuple[int, str]] = []
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: text -> id
        ids = [(v, k) for k, v in vocab.items() if isinstance(v, int) and not isinstance(v, bool)]
        if ids:
            found.append(max(ids))
    elif isinstance(vocab, list) and vocab:  # Unigram: [text, score] in id order
        last = vocab[-1]
        found.append((len(vocab) - 1, str(last[0]) if isinstance(last, list) and last else ""))
    added = tokenizer.get("added_tokens")
    for entry in added if isinstance(added, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), int):
            found.append((int(entry["id"]), str(entry.get("content", ""))))
    return max(found) if found else None


def check_tokens_fit(path: Path, vocab: int | None, owner: str) -> None:
    """Refuse a tokenizer.json whose largest token id is outside a vocabulary of `vocab`.

    Args:
        path: The tokenizer.json (nothing is checked when it does not exist).
        vocab: How many rows the model's token embedding has (None: unknown, unchecked).
        owner: What the tokenizer belongs to, for the message ("the checkpoint /x").

    Raises:
        MmforgeError: Naming the token, its id, the vocabulary and the file.
    """
    from mmforge.backend.source import read_json

    if vocab is None or not path.is_file():
        return
    top = highest_token(read_json(path, "tokenizer"))
    if top is not None and top[0] >= vocab:
        token_id, text = top
        raise MmforgeError(
            f"{path.name} of {owner} gives the token {text[:40]!r} the id {token_id:,}, "
            f"outside the model's vocabulary of {vocab:,} tokens, so the runtime could not "
            "embed it",
            f"The tokenizer does not belong to this model: fix or re-download {path}",
        )
