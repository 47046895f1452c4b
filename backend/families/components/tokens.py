"""The package's tokenizer files as ONNX Runtime GenAI reads them: added tokens, template.

A runtime processor that writes its own marker text for a picture (videochat_flash_qwen's
`<|vision_start|>` + K × `<|image_pad|>` + `<|vision_end|>`, videochat_flash_processor.cpp,
BuildPromptTokens) is read as the model's own ids when tokenizer.json gains added tokens
for the marker pieces on those ids (`read_as`): the 0.18 wheel reads duplicate-id added
tokens as written (measured for LLaVA and Idefics2). No id past the vocabulary is added,
so the embedding table needs no rows of its own for them.

The chat template is the release's with the picture written as the runtime's marker
(`marker_template`), its capitalised roles named (ONNX Runtime GenAI 0.18's template
engine has no `capitalize`), and the BOS transformers' tokenizer adds written by the
template (`bos_written`: ORT GenAI 0.18 adds none).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.spm_form import hf_prepend, runtime_prepends


def token_id(tokenizer: dict[str, Any], content: str, family: str, names: str) -> int:
    """The id of an added token of tokenizer.json (`names`: the tokens `family`'s defines).

    Raises:
        MmforgeError: The tokenizer has no such token.
    """
    for token in tokenizer.get("added_tokens", []):
        if token.get("content") == content:
            return int(token["id"])
    raise MmforgeError(
        f"The tokenizer has no {content} token",
        f"{family}'s tokenizer defines {names}; use the checkpoint's own tokenizer files",
    )


def added_token(content: str, token: int) -> dict[str, Any]:
    """An added token of tokenizer.json: `content` read whole, as the id `token`."""
    return {
        "id": token,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def read_as(tokenizer: dict[str, Any], pieces: list[tuple[str, int]]) -> None:
    """Add each (text, id) piece to tokenizer.json's added tokens, unless its text is one.

    The runtime's marker text is then read as the model's own ids (the 0.18 wheel reads
    duplicate-id added tokens as written, measured for LLaVA and Idefics2).
    """
    added = tokenizer.setdefault("added_tokens", [])
    have = {t.get("content") for t in added}
    added.extend(added_token(content, token) for content, token in pieces if content not in have)


def marker_template(
    config: dict[str, Any],
    tokenizer: dict[str, Any],
    folder: Path,
    released: str,
    picture: str,
    who: str,
) -> bool:
    """The release's chat template as the package's (in place); whether it writes the BOS.

    Where the release writes a picture as `released`, the package's writes `picture` (the
    runtime's marker); roles the release capitalises are named (ORT GenAI 0.18's engine
    has no `capitalize`); the template writes the BOS transformers' tokenizer adds.

    Raises:
        MmforgeError: The template writes pictures otherwise than `who`'s release.
    """
    template = str(config.get("chat_template", ""))
    if released not in template:
        raise MmforgeError(
            f"The chat template does not write pictures as {who}'s released template does "
            f"({released})",
            "Use the release's chat template: the package's copy writes the runtime's "
            f"picture marker where it writes {released}",
        )
    template = template.replace(released, picture)
    template = CAPITALIZED_ROLE.sub(_named, template)
    template, bos = bos_written(template, tokenizer, folder)
    config["chat_template"] = template
    config["add_bos_token"] = False  # the template writes it where the tokenizer adds one
    return bos


# `message['role'].capitalize()` or `message['role'] | capitalize` (or message.role).
CAPITALIZED_ROLE = re.compile(
    r"""(message(?:\[\s*['"]role['"]\s*\]|\.role))(?:\.capitalize\(\)|\s*\|\s*capitalize\b)"""
)


def _named(match: re.Match[str]) -> str:
    role = match.group(1)
    return (
        f"('User' if {role} == 'user' else 'Assistant' if {role} == 'assistant' "
        f"else 'System' if {role} == 'system' else {role})"
    )


def bos_written(template: str, tokenizer: dict[str, Any], folder: Path) -> tuple[str, bool]:
    """The template writing the BOS transformers' tokenizer adds (ORT GenAI 0.18 adds none).

    Returns:
        The template, and whether the tokenizer adds a BOS. After it, a space where
        transformers puts `▁` before the first text (a SentencePiece tokenizer read with
        prepend_scheme "first") and the package's tokenizer does not (spm_form.py).
    """
    bos = adds_bos(folder)
    if bos and "bos_token" not in template:
        space = hf_prepend(folder) == "first" and not runtime_prepends(tokenizer)
        template = "{{ bos_token }}" + (" " if space else "") + template
    return template, bos


def adds_bos(folder: Path) -> bool:
    """Whether the checkpoint's transformers tokenizer starts its encodings with a BOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    bos = tok.bos_token_id
    ids = tok("a")["input_ids"]
    return bos is not None and bool(ids) and ids[0] == bos
