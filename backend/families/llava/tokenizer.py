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
no `upper` filter either): the package's names the two roles LLaVA has instead. The
added-token and template helpers every family on this pipeline uses: components/tokens.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import bos_written, read_as

MARKER = "<|vision_start|>"
# The pieces the runtime's marker text is read as, longest first.
ABSORBED = (
    "<|vision_start|><|image_pad|>",
    "<|image_pad|><|vision_end|>",
    "<|image_pad|>",
    MARKER,
)
IMAGE_TEXT = "<image>"


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
    template = spelled_out_roles(template)
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


def spelled_out_roles(template: str) -> str:
    """The template with `message['role'].upper()` written as the roles LLaVA has."""
    return _UPPER_ROLE.sub(_spelled_out, template)


def _spelled_out(match: re.Match[str]) -> str:
    role = match.group(1)
    return (
        f"('USER' if {role} == 'user' else 'ASSISTANT' if {role} == 'assistant' "
        f"else 'SYSTEM' if {role} == 'system' else {role})"
    )
