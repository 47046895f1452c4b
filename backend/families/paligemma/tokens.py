"""The package's tokenizer: PaliGemma's prompt layout on the runtime's videochat_flash_qwen.

ONNX Runtime GenAI 0.18's VideoChatFlashProcessor (videochat_flash_processor.cpp,
BuildPromptTokens) replaces each `<|vision_start|>` of the prompt by `<|vision_start|>`,
`vision.num_visual_tokens` × `<|image_pad|>` and `<|vision_end|>`, then tokenizes the
text with the package's tokenizer. Three added tokens make that text exactly K ids:
`<|vision_start|><|image_pad|>`, `<|image_pad|>` and `<|image_pad|><|vision_end|>`
(an added token spanning a marker and its neighbour is matched first, measured on the
0.18 wheel: tests/backend/test_seed_hosts.py). All three take the id of PaliGemma's own
`<image>`: the runtime's tokenizer (ort-extensions) encodes each added token's text to
the id written beside it, also where several share one (measured on the 0.18 wheel,
tests/backend/test_paligemma.py), so the runtime's prompt ids are transformers' own and
nothing maps them back. (The ids must stay inside the model's vocabulary anyway: the
runtime embeds every id, and mmforge refuses a tokenizer that reaches past it.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import read_as

IMAGE = "<image>"
MARKERS = ("<|vision_start|><|image_pad|>", "<|image_pad|>", "<|image_pad|><|vision_end|>")

# The package's chat template (PackageSpec.chat_template). PaliGemma's releases ship none:
# transformers' PaliGemmaProcessor writes the prompt itself (processing_paligemma.py,
# prepare_inputs_layout): `<image>` per picture, <bos>, the prefix, "\n". This is that
# layout for one user message, with the runtime's picture marker for `<image>`. PaliGemma
# is not a chat model: a second turn, a system prompt or an earlier answer cannot be
# written in its layout, so the template refuses them in words.
PACKAGE_TEMPLATE = (
    "{% if messages | length != 1 or messages[0]['role'] != 'user' %}"
    "{{ raise_exception('PaliGemma takes one user message: pictures and a prefix') }}"
    "{% endif %}"
    "{% set content = messages[0]['content'] %}"
    "{% if content is string %}{{ bos_token }}{{ content }}"
    "{% else %}{% for part in content %}{% if part['type'] == 'image' %}<|vision_start|>"
    "{% endif %}{% endfor %}{{ bos_token }}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    # An expression, not a literal: Jinja drops a template's final newline
    # (keep_trailing_newline is off in transformers and in ORT GenAI).
    "{{ '\\n' }}"
)


def adapt_tokenizer(
    tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path
) -> str:
    """Add the marker tokens on `<image>`'s id, and leave the BOS to the template (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed.
        cfg: The checkpoint's config.
        folder: The checkpoint folder (named in the error).

    Returns:
        A line for the manifest.
    """
    added = tokenizer.setdefault("added_tokens", [])
    image = next((t["id"] for t in added if t.get("content") == IMAGE), None)
    if image is None:
        raise MmforgeError(
            f"{folder / 'tokenizer.json'} has no {IMAGE} token",
            "PaliGemma's tokenizer adds <image> (PaliGemmaProcessor); re-download it",
        )
    read_as(tokenizer, [(content, int(image)) for content in MARKERS])
    # The template writes <bos>; ORT GenAI 0.18 adds none, transformers must not either
    # (PaliGemmaProcessor turns its tokenizer's add_bos_token off too).
    config["add_bos_token"] = False
    return (
        f"Tokenizer: {len(MARKERS)} added tokens that absorb the runtime's picture markers "
        f"into K {IMAGE} ids (id {image})"
    )
