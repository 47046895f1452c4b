r"""The package's chat template: Gemma 3n's, with the runtime's picture marker.

Gemma 3n's template writes `<image_soft_token>` for a picture, and Gemma3nProcessor
replaces it by "\n\n<start_of_image>", 256 `<image_soft_token>` and
"<end_of_image>\n\n". ONNX Runtime GenAI 0.18's gemma3 processor
(gemma_image_processor.cpp, ProcessImagePrompt) replaces each `<start_of_image>` by that
very text (measured on the 0.18 wheel: the same ids as Gemma3nProcessor,
tests/backend/test_seed_hosts.py). So the package's template writes `<start_of_image>`
where the release's writes `<image_soft_token>`; the tokenizer is the release's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg

SOFT = "<image_soft_token>"
MARKER = "<start_of_image>"


def adapt_tokenizer(
    tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path
) -> str:
    """Rewrite the chat template's picture item for the runtime (in place).

    Returns:
        A line for the manifest.
    """
    template = config.get("chat_template")
    if not isinstance(template, str) or SOFT not in template:
        raise MmforgeError(
            f"The chat template in {folder} writes no {SOFT} for a picture",
            "Gemma 3n's template writes <image_soft_token> where a picture goes; use the "
            "release's tokenizer_config.json or chat_template.jinja",
        )
    if MARKER in template:
        raise MmforgeError(
            f"The chat template in {folder} writes {MARKER} itself",
            "The runtime expands every <start_of_image> in the prompt into a picture's "
            "block, so a template that writes it cannot be hosted; use the release's template",
        )
    config["chat_template"] = template.replace(SOFT, MARKER)
    return (
        f"Chat template: {MARKER} where the release writes {SOFT} (the runtime's gemma3 "
        "processor expands it into Gemma3nProcessor's picture block)"
    )
