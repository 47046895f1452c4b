"""The package's tokenizer for InternVL on ONNX Runtime GenAI's `qwen2_5_vl`.

That pipeline's processor (qwen2_5_vl_image_processor.cpp, ProcessImagePrompt) replaces
each `<|vision_start|>` of the prompt by `<|vision_start|>` + N × `<|image_pad|>` +
`<|vision_end|>` (N = 256 · views, the picture's canvas: backend/internvl_tiles.py) and
tokenizes the text with the package's tokenizer. InternVLProcessor writes `<img>` +
256 · views × `<IMG_CONTEXT>` + `</img>` for each `<IMG_CONTEXT>` of the prompt. So the
package's tokenizer.json reads the runtime's pieces on InternVL's own ids:
`<|vision_start|>` as `<img>`, `<|image_pad|>` as `<IMG_CONTEXT>`, `<|vision_end|>` as
`</img>` (N is at least 256: no one-pad piece is needed). The releases' tokenizer is
Qwen2.5-VL's, which already holds those three pieces on Qwen's ids of their own: their
entries move to InternVL's ids (the 0.18 wheel reads duplicate-id added tokens as written,
measured for LLaVA and Idefics2), and tokenizer_config.json's `added_tokens_decoder` drops
them at their old ids.

The chat template writes `<|vision_start|>` and a newline where the release's writes
`<IMG_CONTEXT>` and a newline; pictures are then never adjacent (a newline after each), so no
`<|vision_end|><|vision_start|>` piece is needed. Qwen's tokenizer adds no BOS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import added_token, marker_template
from mmforge.backend.families.components.tokens import token_id as _token_id

MARKER = "<|vision_start|>"
START, CONTEXT, END = "<img>", "<IMG_CONTEXT>", "</img>"
# The runtime's pieces and the InternVL token each one is read as.
PIECES = ((MARKER, START), ("<|image_pad|>", CONTEXT), ("<|vision_end|>", END))

_RELEASED_PICTURE = "{{ '<IMG_CONTEXT>\\n' }}"
_PICTURE = "{{ '" + MARKER + "\\n' }}"


def token_id(tokenizer: dict[str, Any], content: str) -> int:
    """The id of an added token of tokenizer.json (components.tokens.token_id)."""
    return _token_id(tokenizer, content, "InternVL", "<img>, <IMG_CONTEXT> and </img>")


def adapt(tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path) -> str:
    """Put the marker pieces on the model's ids and rewrite the template (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed (its chat_template is text).
        cfg: The checkpoint's config.
        folder: The checkpoint folder (its tokenizer tells whether it adds a BOS).

    Returns:
        A line for the manifest.

    Raises:
        MmforgeError: The template writes pictures otherwise than the released one, or
            config.json's image_token_id is not <IMG_CONTEXT>'s.
    """
    ids = {name: token_id(tokenizer, name) for name in (START, CONTEXT, END)}
    if cfg.get("image_token_id") != ids[CONTEXT]:
        raise MmforgeError(
            f"config.json's image_token_id {cfg.get('image_token_id')} is not the "
            f"tokenizer's {CONTEXT} ({ids[CONTEXT]})",
            "Use the checkpoint's own tokenizer files with its config.json",
        )
    added = tokenizer.setdefault("added_tokens", [])
    moved: set[str] = set()
    for content, reads_as in PIECES:
        entries = [t for t in added if t.get("content") == content]
        for entry in entries:
            entry["id"] = ids[reads_as]
            moved.add(content)
        if not entries:
            added.append(added_token(content, ids[reads_as]))
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for key in [
            k for k, v in decoder.items() if isinstance(v, dict) and v.get("content") in moved
        ]:
            del decoder[key]
    bos = marker_template(config, tokenizer, folder, _RELEASED_PICTURE, _PICTURE, "InternVL")
    return (
        f"Tokenizer: the runtime's {MARKER}, <|image_pad|> and <|vision_end|> read as "
        f"{START}, {CONTEXT} and {END} (ids {ids[START]}, {ids[CONTEXT]}, {ids[END]}); the "
        f"chat template writes {MARKER} for each picture"
        + ("" if not bos else " and the BOS transformers' tokenizer adds")
    )
