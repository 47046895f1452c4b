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
    added = tokenizer.setdefault("added_tokens", [])
    have = {t.get("content") for t in added}
    for content in ABSORBED:
        if content in have:
            continue
        added.append(
            {
                "id": image,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
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
