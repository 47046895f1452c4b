"""The package's tokenizer for Idefics3 / SmolVLM on ONNX Runtime GenAI's `videochat_flash_qwen`.

That pipeline's processor (videochat_flash_processor.cpp, BuildPromptTokens) replaces each
`<|vision_start|>` of the prompt by `<|vision_start|>` + K × `<|image_pad|>` +
`<|vision_end|>` and tokenizes the text with the package's tokenizer. Without splitting,
Idefics3Processor and SmolVLMProcessor write `<fake_token_around_image>` + `<global-img>`
+ K × `<image>` + `<fake_token_around_image>` for each picture (K = image_seq_len; two
adjacent pictures keep both fake tokens, and no space is added after one).

So the package's chat template writes `<fake_token_around_image><global-img>` and then the
runtime's marker where the release's template writes `<image>`, with K the model's
image_seq_len; its tokenizer.json reads the marker and the first pad together,
`<|vision_start|><|image_pad|>`, as `<image>` (one added token, matched before the
shorter `<|image_pad|>` as the 0.18 wheel matches Idefics2's junction piece), each other
`<|image_pad|>` as `<image>`, and `<|vision_end|>` as `<fake_token_around_image>`: the
runtime's ids are then transformers' ids, with the model's own ids (the 0.18 wheel reads
duplicate-id added tokens as written, measured for LLaVA and Idefics2).

The releases' templates capitalise the role (`.capitalize()` in Idefics3's, the
`capitalize` filter in SmolVLM's), which ONNX Runtime GenAI 0.18's template engine does
not have (as it has no `upper`, llava/tokenizer.py): the package's names the roles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import marker_template, read_as, token_id

MARKER = "<|vision_start|>"
FAKE_TEXT = "<fake_token_around_image>"
GLOBAL_TEXT = "<global-img>"
IMAGE_TEXT = "<image>"
# The runtime's pieces and the Idefics3 token each one is read as.
PIECES = (
    (MARKER + "<|image_pad|>", IMAGE_TEXT),
    ("<|image_pad|>", IMAGE_TEXT),
    ("<|vision_end|>", FAKE_TEXT),
)

_RELEASED_PICTURE = "{{ '<image>' }}"
_PICTURE = "{{ '" + FAKE_TEXT + GLOBAL_TEXT + MARKER + "' }}"


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
        MmforgeError: The tokenizer lacks a marker token, config.json's image_token_id is
            not `<image>`'s, or the template writes pictures otherwise than the releases'.
    """
    names = f"{FAKE_TEXT}, {GLOBAL_TEXT} and {IMAGE_TEXT}"
    markers = (FAKE_TEXT, GLOBAL_TEXT, IMAGE_TEXT)
    ids = {t: token_id(tokenizer, t, "Idefics3", names) for t in markers}
    if cfg.get("image_token_id") != ids[IMAGE_TEXT]:
        raise MmforgeError(
            f"config.json's image_token_id {cfg.get('image_token_id')} is not the "
            f"tokenizer's {IMAGE_TEXT} ({ids[IMAGE_TEXT]})",
            "Use the checkpoint's own tokenizer files with its config.json",
        )
    read_as(tokenizer, [(content, ids[reads_as]) for content, reads_as in PIECES])
    who = "Idefics3 / SmolVLM"
    bos = marker_template(config, tokenizer, folder, _RELEASED_PICTURE, _PICTURE, who)
    return (
        f"Tokenizer: the chat template writes {FAKE_TEXT}{GLOBAL_TEXT}{MARKER} for each "
        f"picture; the runtime's {MARKER}<|image_pad|> and <|image_pad|> read as "
        f"{IMAGE_TEXT} (id {ids[IMAGE_TEXT]}), <|vision_end|> as {FAKE_TEXT} "
        f"(id {ids[FAKE_TEXT]})" + ("" if not bos else "; it writes the BOS transformers adds")
    )
