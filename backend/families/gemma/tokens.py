r"""The package's tokenizer for Gemma 4: the runtime's blank lines read as the markers.

ONNX Runtime GenAI 0.18's gemma4 processor (gemma4_multimodal_processor.cpp,
ProcessGemma4Prompt) replaces each picture's `<|image>` by "\n\n<|image>", n × `<|image|>`
and "<image|>\n\n", and the clip's `<|audio|>` by "\n\n<|audio>", m × `<|audio|>` and
"<audio|>\n\n", then tokenizes the text with the package's tokenizer. Gemma4Processor
writes the same blocks without the blank lines. Two added tokens per block,
"\n\n<|image>" on `<|image>`'s id and "<image|>\n\n" on `<image|>`'s (and the same for
audio), are matched before the text around them is read (leftmost first: in
"…\n\n\n\n<|image>" the match starts at the runtime's own two newlines), so the runtime's
ids are Gemma4Processor's (measured on the 0.18 wheel, tests/backend/test_gemma4_prompt.py).
No id past the vocabulary is added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.tokens import read_as

BLANK = "\n\n"
# (opening marker, closing marker) of each block the runtime writes.
BLOCKS = (("<|image>", "<image|>"), ("<|audio>", "<audio|>"))


def adapt_tokenizer(
    tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path
) -> str:
    """Add the blank-line pieces on the markers' own ids (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed (unchanged).
        cfg: The checkpoint's config (which blocks the model takes).
        folder: The checkpoint folder (named in the error).

    Returns:
        A line for the manifest.

    Raises:
        MmforgeError: The tokenizer lacks a marker of a block the model takes.
    """
    ids = {t.get("content"): t.get("id") for t in tokenizer.get("added_tokens", [])}
    wanted = [BLOCKS[0]] if cfg.has("vision_config") else []
    wanted += [BLOCKS[1]] if cfg.has("audio_config") else []
    pieces: list[tuple[str, int]] = []
    for opening, closing in wanted:
        for marker in (opening, closing):
            token = ids.get(marker)
            if not isinstance(token, int) or isinstance(token, bool):
                raise MmforgeError(
                    f"{folder / 'tokenizer.json'} has no {marker} token",
                    "Gemma 4's tokenizer adds <|image>, <image|>, <|audio> and <audio|>; use "
                    "the checkpoint's own tokenizer files",
                )
        pieces += [(BLANK + opening, int(ids[opening])), (closing + BLANK, int(ids[closing]))]
    read_as(tokenizer, pieces)
    shown = ", ".join(repr(text) for text, _ in pieces)
    return (
        f"Tokenizer: the blank lines the runtime writes around each block are read with its "
        f"markers ({shown}), so its ids are Gemma4Processor's"
    )
