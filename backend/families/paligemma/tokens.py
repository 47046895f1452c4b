"""The package's tokenizer: PaliGemma's prompt layout on the runtime's videochat_flash_qwen.

ONNX Runtime GenAI 0.18's VideoChatFlashProcessor (videochat_flash_processor.cpp,
BuildPromptTokens) replaces each `<|vision_start|>` of the prompt by `<|vision_start|>`,
`vision.num_visual_tokens` × `<|image_pad|>` and `<|vision_end|>`, then tokenizes the
text with the package's tokenizer. Three added tokens make that text exactly K ids:
`<|vision_start|><|image_pad|>`, `<|image_pad|>` and `<|image_pad|><|vision_end|>`
(an added token spanning a marker and its neighbour is matched first, measured on the
0.18 wheel: tests/backend/test_seed_hosts.py). The embedding graph reads all three as
PaliGemma's `<image>`, and verify maps them back to it for transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKERS = ("<|vision_start|><|image_pad|>", "<|image_pad|>", "<|image_pad|><|vision_end|>")

# What chat sends the runtime: PaliGemmaProcessor's layout (processing_paligemma.py,
# prepare_inputs_layout) for one user message: a picture marker per picture, <bos>, the
# prefix, "\n". PaliGemma is not a chat model: a second turn, a system prompt or an
# earlier answer cannot be written in its layout, so the template refuses them.
PACKAGE_TEMPLATE = (
    "{% if messages | length != 1 or messages[0]['role'] != 'user' %}"
    "{{ raise_exception('PaliGemma takes one user message: pictures and a prefix') }}"
    "{% endif %}"
    "{% set content = messages[0]['content'] %}"
    "{% if content is string %}{{ bos_token }}{{ content }}"
    "{% else %}{% for part in content %}{% if part['type'] == 'image' %}<|vision_start|>"
    "{% endif %}{% endfor %}{{ bos_token }}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "\n"
)


def _tokenizer_json(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return data


def marker_ids(folder: Path) -> dict[str, int]:
    """The ids the markers get in the package: the next free ids after the checkpoint's."""
    data = _tokenizer_json(folder)
    taken = [int(t["id"]) for t in data.get("added_tokens", [])]
    vocab = data.get("model", {}).get("vocab", {})
    size = len(vocab) if isinstance(vocab, dict | list) else 0
    first = max([size - 1, *taken]) + 1
    return {content: first + i for i, content in enumerate(MARKERS)}


def write_package_tokenizer(checkpoint_folder: Path, out: Path) -> str:
    """Add the marker tokens and PaliGemma's template to the package's tokenizer files."""
    ids = marker_ids(checkpoint_folder)
    data = _tokenizer_json(out)
    for content, token_id in ids.items():
        data["added_tokens"].append(
            {
                "id": token_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = PACKAGE_TEMPLATE
    # The template writes <bos>; ORT GenAI 0.18 adds none, transformers must not either.
    config["add_bos_token"] = False
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    return (
        "Tokenizer: PaliGemma's prompt layout as the chat template (one user message), and "
        f"{len(ids)} added tokens that absorb the runtime's picture markers into K ids"
    )
