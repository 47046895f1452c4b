"""Two packages of one model answering the same prompt: where their answers part.

Pure functions over what two chat turns return (token ids, streamed pieces) and what two
manifests say (the model each package was converted from). The Compare page draws them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mmforge.backend.library import PackageEntry
from mmforge.backend.source import is_hub_id


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The index of the first token where `a` and `b` differ; None when they are equal.

    When one is a prefix of the other, they differ where the shorter one ends.
    """
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Divergence:
    """Where two answers part, in tokens and in each answer's text.

    Attributes:
        agreed: Tokens the answers share from the start.
        same: Whether the answers are the same token for token.
        a_span: Characters of answer A's text, [start, end), of its first token past
            the shared ones ((n, n) at its end when A stopped there).
        b_span: The same for answer B.
    """

    agreed: int
    same: bool
    a_span: tuple[int, int]
    b_span: tuple[int, int]


def _span(pieces: Sequence[str], index: int) -> tuple[int, int]:
    start = sum(len(p) for p in pieces[:index])
    end = start + (len(pieces[index]) if index < len(pieces) else 0)
    return start, end


def divergence(
    a_ids: Sequence[int],
    b_ids: Sequence[int],
    a_pieces: Sequence[str] = (),
    b_pieces: Sequence[str] = (),
) -> Divergence:
    """Where answers A and B part.

    Args:
        a_ids: Answer A's token ids.
        b_ids: Answer B's token ids (the same tokenizer: packages of one model).
        a_pieces: The text each of A's tokens added, as streamed (one per id), which
            places the parting token in A's text.
        b_pieces: The same for B.
    """
    index = first_difference(a_ids, b_ids)
    if index is None:
        end_a, end_b = sum(map(len, a_pieces)), sum(map(len, b_pieces))
        return Divergence(len(a_ids), True, (end_a, end_a), (end_b, end_b))
    return Divergence(index, False, _span(a_pieces, index), _span(b_pieces, index))


def _tokens(n: int) -> str:
    return "1 token" if n == 1 else f"{n} tokens"


def summary(d: Divergence, a_tokens: int, b_tokens: int, a: str = "A", b: str = "B") -> str:
    """The divergence in one sentence, e.g. "The answers agree for the first 37 tokens…"."""
    if d.same:
        return f"The two answers are the same, token for token ({_tokens(d.agreed)})."
    if d.agreed == 0:
        return "The answers part at the very first token."
    start = f"The answers agree for the first {_tokens(d.agreed)}, then"
    if d.agreed == a_tokens:
        return f"{start} {a} ends while {b} goes on."
    if d.agreed == b_tokens:
        return f"{start} {b} ends while {a} goes on."
    return f"{start} part."


def quoted(piece: str, limit: int = 24) -> str:
    """A token's text for a sentence: quoted, or named when it shows nothing."""
    if not piece:
        return "part of a character"
    if not piece.strip():
        return "a line break" if "\n" in piece else "a space"
    text = piece.strip()
    return f"“{text[:limit]}…”" if len(text) > limit else f"“{text}”"


def parting_words(
    d: Divergence, a_pieces: Sequence[str], b_pieces: Sequence[str], a: str = "A", b: str = "B"
) -> str:
    """What each answer says where they part, e.g. 'A goes on with “cat”, B with “dog”.'.

    "" when they do not part, or one of them ends there.
    """
    if d.same or d.agreed >= len(a_pieces) or d.agreed >= len(b_pieces):
        return ""
    return f"{a} goes on with {quoted(a_pieces[d.agreed])}, {b} with {quoted(b_pieces[d.agreed])}."


def speed_words(a_rate: float, b_rate: float, a: str = "A", b: str = "B") -> str:
    """How much faster one answer decoded, e.g. "B decodes 2.4× as fast as A."."""
    if a_rate <= 0 or b_rate <= 0:
        return ""
    fast, slow, ratio = (b, a, b_rate / a_rate) if b_rate >= a_rate else (a, b, a_rate / b_rate)
    if ratio < 1.05:
        return f"{a} and {b} decode at about the same speed."
    return f"{fast} decodes {ratio:.1f}× as fast as {slow}."


def model_of(source: str) -> str:
    """A manifest's source as a model name to compare: no revision, no trailing slash.

    A local folder that still exists is named by its full path.
    """
    text = source.strip().rstrip("/\\")
    folder = Path(text)
    if text and folder.is_dir():
        return os.path.normcase(str(folder.resolve()))
    return text.split("@", 1)[0]


SAME, ASK, DIFFERENT = "same", "ask", "different"


@dataclass(frozen=True)
class Kinship:
    """Whether two packages are of one model, by what their manifests record.

    Attributes:
        kind: SAME (compare them), ASK (they may not be: ask the user first) or
            DIFFERENT (refuse: their answers cannot be compared token by token).
        reason: Why, in a sentence's words ("" for SAME).
    """

    kind: str
    reason: str = ""


def kinship(a: PackageEntry, b: PackageEntry) -> Kinship:
    """Whether packages `a` and `b` are two packages of one model.

    The digests of the checkpoint each was converted from decide (`checkpoint_digest`),
    whatever the sources are called (a hub id and a local copy of it are one model):
    the same weights and settings are one model; another family or other settings
    (another size) are another; the same settings with other or unknown weights (a
    fine-tune? a copy in another dtype?) may be either. A package written before the
    digests were recorded is taken for its source's model: the same name is one model,
    two hub names are two, and a local folder beside anything else may be either.
    """
    names = [p.folder.name for p in (a, b)]
    sources = [p.source or "an unknown model" for p in (a, b)]
    if a.family != b.family:
        families = [p.family or "unknown family" for p in (a, b)]
        return Kinship(
            DIFFERENT,
            f"{names[0]} was converted from {sources[0]} ({families[0]}), "
            f"{names[1]} from {sources[1]} ({families[1]})",
        )
    same_weights = bool(a.weights_digest) and a.weights_digest == b.weights_digest
    configs = a.config_digest and b.config_digest
    if configs and a.config_digest != b.config_digest:
        if same_weights:
            return Kinship(
                ASK,
                f"{names[0]} and {names[1]} hold the same weights, but their models' "
                "settings (config.json) differ",
            )
        return Kinship(
            DIFFERENT,
            f"{names[0]} was converted from {sources[0]}, {names[1]} from {sources[1]}, "
            "and their models' settings (config.json) differ",
        )
    if same_weights and configs:
        return Kinship(SAME)
    if configs:
        if a.weights_digest and b.weights_digest:
            why = "the same settings but different weights (a fine-tune, or another dtype)"
        else:
            unknown = names[0] if not a.weights_digest else names[1]
            why = f"the same settings, but {unknown} does not record which weights it holds"
        return Kinship(ASK, f"{names[0]} and {names[1]} were converted from models with {why}")
    if model_of(a.source) == model_of(b.source):
        return Kinship(SAME)
    if all(is_hub_id(model_of(p.source)) for p in (a, b)):
        # Two hub names: two models (a renamed repository is the rare exception).
        return Kinship(
            DIFFERENT, f"{names[0]} was converted from {sources[0]}, {names[1]} from {sources[1]}"
        )
    older = [n for n, p in zip(names, (a, b), strict=True) if not p.config_digest]
    return Kinship(
        ASK,
        f"{' and '.join(older)} {'were' if len(older) > 1 else 'was'} converted before "
        f"Multimodal Forge recorded which model a package holds; {names[0]} was converted "
        f"from {sources[0]}, {names[1]} from {sources[1]}",
    )


# Which sibling to compare a package with first: the smallest against the largest.
_PREFERRED = {"f32": ("int4", "int8", "f16"), "f16": ("int4", "int8", "f32")}
_FALLBACK = ("f32", "f16", "int8", "int4")


def sibling(package: PackageEntry, entries: Sequence[PackageEntry]) -> PackageEntry | None:
    """Another package of `package`'s model to compare it with (None: there is none).

    Surely the same model first, then maybe the same (`kinship`); among those another
    precision first (f32 against int4, int4 against f32), then another package of the
    same precision.
    """
    order = _PREFERRED.get(package.dtype, _FALLBACK)
    for kind in (SAME, ASK):
        others = [
            e for e in entries if e.folder != package.folder and kinship(package, e).kind == kind
        ]
        for dtype in order:
            for e in others:
                if e.dtype == dtype:
                    return e
        if others:
            return others[0]
    return None


# Memory kept free beyond the two estimates (their error, an image's activations).
MEMORY_MARGIN = 1.15


def fit_together(needs: tuple[int | None, int | None], held: int, available: int | None) -> bool:
    """Whether packages A and B fit in memory loaded at once.

    Args:
        needs: What each takes loaded (`footprint.package_memory_bytes`); None: unknown.
        held: What the Compare page's workers hold now, freed before they load again.
        available: What this machine has available now (`memory.available_bytes`).

    Unknown figures say yes: both stay loaded, as they did before this check.
    """
    a, b = needs
    if available is None or a is None or b is None:
        return True
    return (a + b) * MEMORY_MARGIN <= available + held
