"""The package's tokenizer for Idefics2 on ONNX Runtime GenAI's `videochat_flash_qwen`.

That pipeline's processor (videochat_flash_processor.cpp, BuildPromptTokens) replaces each
`<|vision_start|>` of the prompt by `<|vision_start|>` + K × `<|image_pad|>` +
`<|vision_end|>` and tokenizes the text with the package's tokenizer. Idefics2Processor
writes `<fake_token_around_image>` + K × `<image>` + `<fake_token_around_image>`, one fake
token between adjacent pictures, and a space after a closing fake token that text follows
directly (unless it starts with whitespace or `<`). So the package's tokenizer.json gains
added tokens on the model's own ids: `<|vision_start|>`, `<|vision_end|>` and
`<|vision_end|><|vision_start|>` (two adjacent pictures) on the fake token's id,
`<|image_pad|>` on `<image>`'s. The runtime's ids are then transformers' ids (the 0.18
wheel reads duplicate-id added tokens as written, measured for LLaVA and PaliGemma).

The chat template writes `<|vision_start|>` where Idefics2's writes `<image>`, the space
Idefics2Processor inserts after a picture, and the BOS transformers' tokenizer adds (ORT
GenAI 0.18 adds none). The released template capitalises the role with
`message['role'].capitalize()`, a method ONNX Runtime GenAI 0.18's template engine does
not have (as it has no `upper`, llava/tokenizer.py): the package's names the roles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import marker_template, read_as
from mmforge.backend.families.components.tokens import token_id as _token_id

MARKER = "<|vision_start|>"
FAKE_TEXT = "<fake_token_around_image>"
IMAGE_TEXT = "<image>"
# The runtime's pieces and the Idefics2 token each one is read as.
PIECES = (
    ("<|vision_end|><|vision_start|>", FAKE_TEXT),
    (MARKER, FAKE_TEXT),
    ("<|vision_end|>", FAKE_TEXT),
    ("<|image_pad|>", IMAGE_TEXT),
)

# The released template's picture, and the package's: the marker, then the space
# Idefics2Processor puts after a closing fake token that text follows directly
# (`<fake_token_around_image>(?=[^\s<])`): the next part is text whose first character is
# neither whitespace nor `<`.
_RELEASED_PICTURE = "{{ '<image>' }}"
_PICTURE = (
    "{{ '" + MARKER + "' }}"
    "{% if not loop.last and message['content'][loop.index]['type'] == 'text' %}"
    # A slice, not an index: ONNX Runtime GenAI 0.18's engine gives '' for text[0].
    "{% set first = message['content'][loop.index]['text'][:1] %}"
    "{% if (first | trim) != '' and first != '<' %}{{ ' ' }}{% endif %}{% endif %}"
)


def token_id(tokenizer: dict[str, Any], content: str) -> int:
    """The id of an added token of tokenizer.json (components.tokens.token_id)."""
    return _token_id(tokenizer, content, "Idefics2", "<fake_token_around_image> and <image>")


def adapt(tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path) -> str:
    """Add the marker pieces on the model's ids and rewrite the template (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed (its chat_template is text).
        cfg: The checkpoint's config.
        folder: The checkpoint folder (its tokenizer tells whether it adds a BOS).

    Returns:
        A line for the manifest.

    Raises:
        MmforgeError: The template writes pictures otherwise than the released one.
    """
    ids = {FAKE_TEXT: token_id(tokenizer, FAKE_TEXT), IMAGE_TEXT: int(cfg.get("image_token_id"))}
    read_as(tokenizer, [(content, ids[reads_as]) for content, reads_as in PIECES])
    bos = marker_template(config, tokenizer, folder, _RELEASED_PICTURE, _PICTURE, "Idefics2")
    return (
        f"Tokenizer: the runtime's {MARKER} / <|vision_end|> text reads as {FAKE_TEXT} "
        f"(id {ids[FAKE_TEXT]}), <|image_pad|> as {IMAGE_TEXT} (id {ids[IMAGE_TEXT]}); the "
        f"chat template writes {MARKER} for each picture"
        + ("" if not bos else " and the BOS transformers' tokenizer adds")
    )
