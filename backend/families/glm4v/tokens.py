"""The package's tokenizer: GLM-4V's picture markers under the text the runtime splices.

ONNX Runtime GenAI 0.18's qwen2_5_vl processor (`qwen2_5_vl_image_processor.cpp`,
`ProcessImagePrompt`) finds each picture by `<|image_pad|>` in the prompt text, repeats it
once per merged patch and tokenizes the text with the package's tokenizer; the positions
(`position_inputs.cpp`, `Qwen2VLPositionInputs::CreateAndInitialize3DPositionIDs`) start a
picture at `vision_start_token_id` followed by `image_token_id`. GLM-4V writes
`<|begin_of_image|><|image|>`×n`<|end_of_image|>` on its own ids. Renaming the three added
tokens' text in the package's tokenizer.json (and tokenizer_config.json) to
`<|vision_start|>`, `<|image_pad|>` and `<|vision_end|>`, their ids kept, and writing that
text in the package's chat template, makes the runtime's ids Glm4vProcessor's (measured on
the 0.18 wheel: tests/backend/test_glm4v_host.py). The checkpoint itself is not changed:
verify's transformers side reads GLM's own tokenizer and template.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg

# GLM-4V's marker text -> the text the runtime's processor splices and looks for.
RENAMES = {
    "<|begin_of_image|>": "<|vision_start|>",
    "<|image|>": "<|image_pad|>",
    "<|end_of_image|>": "<|vision_end|>",
}
# Which config id each marker must carry (the runtime's positions read them from genai_config).
_CONFIG_IDS = {"<|begin_of_image|>": "image_start_token_id", "<|image|>": "image_token_id"}


# transformers renders chat templates with Jinja's trim_blocks and lstrip_blocks on;
# ONNX Runtime GenAI 0.18's renderer keeps the newline after a block tag and the
# indentation before one (measured: GLM-4.1V's released template gives
# "[gMASK]<sop>\n<|user|>\n\n..." there and "[gMASK]<sop><|user|>\n..." in transformers).
# The package's template has both applied to its text, so the two engines agree.
_INDENT_BEFORE_TAG = re.compile(r"^[ \t]+(?=\{[%#](?!\+))", re.MULTILINE)
_NEWLINE_AFTER_TAG = re.compile(r"([%#]\})\r?\n")


def without_block_whitespace(template: str) -> str:
    """The template with Jinja's trim_blocks and lstrip_blocks applied to its text."""
    return _NEWLINE_AFTER_TAG.sub(r"\1", _INDENT_BEFORE_TAG.sub("", template))


# GLM-4.1V's released template takes a list of parts for user messages only: it writes a
# system or assistant message's content as is, so a list (the form mmforge's chat builds
# every message in, content_form.py) would reach the prompt in its Python form. In the
# package's template such a content is written as its text parts, which is what
# transformers renders for the same message given as a string.
_CONTENT = re.compile(r"\{\{\s*(\w+)\.content\s*\}\}")


def _content_as_text(match: re.Match[str]) -> str:
    m = match.group(1)
    return (
        f"{{% if {m}.content is string %}}{{{{ {m}.content }}}}{{% else %}}"
        f"{{% for part in {m}.content %}}{{% if part.type == 'text' %}}{{{{ part.text }}}}"
        "{% endif %}{% endfor %}{% endif %}"
    )


def package_template(template: str) -> str:
    """The checkpoint's chat template as the runtime must render it.

    GLM's picture markers in the text the runtime splices, the whitespace transformers'
    Jinja settings remove removed from the text itself, and a message's content written
    as its text parts where the template would print a list as is.
    """
    for glm, runtime in RENAMES.items():
        template = template.replace(glm, runtime)
    return _CONTENT.sub(_content_as_text, without_block_whitespace(template))


def adapt_tokenizer(
    tokenizer: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path
) -> str:
    """Rename the picture markers (ids kept) and rewrite the chat template (in place).

    Args:
        tokenizer: The package's tokenizer.json, parsed.
        config: The package's tokenizer_config.json, parsed.
        cfg: The checkpoint's config.
        folder: The checkpoint folder (named in errors).

    Returns:
        A line for the manifest.

    Raises:
        MmforgeError: A marker is missing, sits on another id than config.json names, or
            the runtime's text is already taken by another token.
    """
    added = tokenizer.setdefault("added_tokens", [])
    by_text = {t.get("content"): t for t in added}
    taken = [new for new in RENAMES.values() if new in by_text]
    if taken:
        raise MmforgeError(
            f"{folder / 'tokenizer.json'} already has {', '.join(taken)}",
            "GLM-4V's tokenizer does not; the package renames its picture markers to them",
        )
    ids: dict[str, int] = {}
    for glm in RENAMES:
        token = by_text.get(glm)
        if token is None:
            raise MmforgeError(
                f"{folder / 'tokenizer.json'} has no {glm} token",
                "GLM-4V's tokenizer marks pictures with <|begin_of_image|>, <|image|> and "
                "<|end_of_image|>; download the tokenizer with the model",
            )
        ids[glm] = int(token["id"])
    for glm, key in _CONFIG_IDS.items():
        want = cfg.get(key)
        if want is not None and int(want) != ids[glm]:
            raise MmforgeError(
                f"config.json's {key} is {want}, but the tokenizer's {glm} is {ids[glm]}",
                "The tokenizer and config.json come from different models",
            )
    for glm, new in RENAMES.items():
        by_text[glm]["content"] = new
        vocab = tokenizer.get("model", {}).get("vocab")
        if isinstance(vocab, dict) and glm in vocab:
            vocab[new] = vocab.pop(glm)
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for entry in decoder.values():
            if isinstance(entry, dict) and entry.get("content") in RENAMES:
                entry["content"] = RENAMES[entry["content"]]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        listed = config.get(key)
        if isinstance(listed, list):
            config[key] = [RENAMES.get(t, t) if isinstance(t, str) else t for t in listed]
    template = config.get("chat_template")
    if isinstance(template, str):
        config["chat_template"] = package_template(template)
    return (
        "Tokenizer: GLM-4V's picture markers renamed to the text the runtime's qwen2_5_vl "
        "processor splices (" + ", ".join(f"{g} → {n}" for g, n in RENAMES.items()) + "; ids "
        f"{', '.join(str(ids[g]) for g in RENAMES)} kept), in tokenizer.json and the chat "
        "template"
    )
