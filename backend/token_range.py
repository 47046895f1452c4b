"""A tokenizer.json the runtime can load, every token of which the model can embed.

A tokenizer.json holding a token whose id is past the model's vocabulary (a tokenizer
from another model, an added token put at a wrong id) converted, and then ONNX Runtime
failed inside its embedding Gather ("indices element out of data bounds") with its own
coloured log line on stderr, called a conversion bug. A malformed merge ("array index 1
is out of range") or a pre-tokenizer regex that does not compile ("Invalid regex") failed
the same way, in the runtime's tokenizer. Checked before a conversion (naming the
checkpoint's file and field) and before a chat (naming the package).
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


def check_tokenizer(path: Path, owner: str) -> None:
    """Refuse a tokenizer.json with a malformed merge or a regex that does not compile.

    Args:
        path: The tokenizer.json (nothing is checked when it does not exist).
        owner: What the tokenizer belongs to, for the message.

    Raises:
        MmforgeError: Naming the file, the field and what is wrong with it.
    """
    from mmforge.backend.source import read_json

    if not path.is_file():
        return
    data = read_json(path, "tokenizer")
    model = data.get("model")
    merges = model.get("merges") if isinstance(model, dict) else None
    for i, merge in enumerate(merges if isinstance(merges, list) else []):
        if not _is_merge(merge):
            raise _malformed(path, owner, f"model.merges[{i}] is {_shown(merge)}, not a pair")
    for key, pattern in _regexes(data):
        problem = _regex_problem(pattern)
        if problem is not None:
            raise _malformed(
                path, owner, f"{key} is the regex {_shown(pattern)}, which does not compile "
                f"({problem})"
            )  # fmt: skip


def _is_merge(merge: Any) -> bool:
    """A merge is "left right" (one space) or [left, right]: two non-empty texts."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    return (
        isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) and p for p in parts)
    )


def _regexes(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every {"Regex": pattern} of the normalizer and pre-tokenizer, by dotted key."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any]] = [
        (name, data.get(name)) for name in ("normalizer", "pre_tokenizer", "decoder")
    ]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            if "Regex" in value:
                found.append((f"{key}.Regex", value["Regex"]))
            stack.extend((f"{key}.{k}", v) for k, v in value.items() if k != "Regex")
        elif isinstance(value, list):
            stack.extend((f"{key}[{i}]", v) for i, v in enumerate(value))
    return sorted(found)


def _regex_problem(pattern: Any) -> str | None:
    """Why the tokenizers library (Oniguruma, as HF uses) cannot compile `pattern`."""
    from tokenizers import Regex

    if not isinstance(pattern, str):
        return "not text"
    try:
        Regex(pattern)
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception
        return " ".join(str(e).split())[:120]
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _malformed(path: Path, owner: str, what: str) -> MmforgeError:
    return MmforgeError(
        f"{path.name} of {owner}: {what}",
        f"The tokenizer is malformed: fix or re-download {path}",
    )


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
