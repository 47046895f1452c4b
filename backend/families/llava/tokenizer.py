"""The package's tokenizer for LLaVA on ONNX Runtime GenAI's `videochat_flash_qwen`.

That pipeline's processor (videochat_flash_processor.cpp, BuildPromptTokens) replaces
each `<|vision_start|>` of the prompt by `<|vision_start|>` + K × `<|image_pad|>` +
`<|vision_end|>` and tokenizes the text with the package's tokenizer. LlavaProcessor
puts K `<image>` ids, and no markers. So the package's tokenizer.json gains added tokens
for `<|vision_start|><|image_pad|>`, `<|image_pad|>` and `<|image_pad|><|vision_end|>`
(and a lone `<|vision_start|>`), all on `<image>`'s own id: the runtime's K + 2 marker
and pad pieces become exactly K image ids, and its ids are transformers' ids (measured
on the 0.18 wheel, tests/backend/test_llava.py). No id past the vocabulary is added, so
the embedding table needs no rows of its own for them.

The chat template writes `<|vision_start|>` where LLaVA's writes `<image>`, and the BOS
that LLaVA's tokenizer adds (ORT GenAI 0.18 adds none) when transformers' tokenizer
adds one. The released template capitalises the role with `message['role'].upper()`,
which ONNX Runtime GenAI 0.18's template engine refuses ("Unknown method: upper"; it has
no `upper` filter either): the package's names the two roles LLaVA has instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.spm_form import hf_prepend, runtime_prepends

MARKER = "<|vision_start|>"
# The pieces the runtime's marker text is read as, longest first.
ABSORBED = (
    "<|vision_start|><|image_pad|>",
    "<|image_pad|><|vision_end|>",
    "<|image_pad|>",
    MARKER,
)
IMAGE_TEXT = "<image>"


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


def adapt(tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path) -> str:
    """Add the marker pieces on the image id and rewrite the template (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed (its chat_template is text).
        cfg: The checkpoint's config.
        folder: The checkpoint folder (its tokenizer tells whether it adds a BOS).

    Returns:
        A line for the manifest.
    """
    image = int(cfg.first("image_token_index", "image_token_id"))
    read_as(tokenizer, [(content, image) for content in ABSORBED])
    template = str(config.get("chat_template", ""))
    template = template.replace(IMAGE_TEXT, MARKER)
    template = _UPPER_ROLE.sub(_spelled_out, template)
    template, bos = bos_written(template, tokenizer, folder)
    config["chat_template"] = template
    config["add_bos_token"] = False  # the template writes it
    return (
        f"Tokenizer: the runtime's {MARKER} / <|image_pad|> / <|vision_end|> text reads as "
        f"{IMAGE_TEXT} (id {image}); the chat template writes {MARKER} for each picture"
        + ("" if not bos else " and the BOS transformers' tokenizer adds")
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


# `message['role'].upper()` (or message["role"], message.role) in a template.
_UPPER_ROLE = re.compile(r"""(message(?:\[\s*['"]role['"]\s*\]|\.role))\.upper\(\)""")


def _spelled_out(match: re.Match[str]) -> str:
    role = match.group(1)
    return (
        f"('USER' if {role} == 'user' else 'ASSISTANT' if {role} == 'assistant' "
        f"else 'SYSTEM' if {role} == 'system' else {role})"
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
