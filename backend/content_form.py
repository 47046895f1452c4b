"""Messages in the content form a chat template takes: a list of parts, or text.

Released chat templates take a message's content in one of two forms:
- a list of parts (`{"type": "image"}`, `{"type": "text", "text": ...}`), the template
  writing each attachment's placeholder itself (Qwen, Gemma, Mistral, LFM2);
- text only: the template concatenates `message['content']` as a string, and users write
  the placeholders into the text themselves (Phi-4-multimodal's released template:
  `<|user|><|image_1|>Describe this.<|end|>`). A list given to such a template fails in
  transformers (`can only concatenate str (not "list") to str`), and ONNX Runtime GenAI's
  renderer writes the Python form of the list into the prompt.

mmforge builds every conversation as parts; `conform` writes it in the form the template
takes, with the family's own placeholders (`Family.text_placeholder`) where it takes
text. Which form a template takes is found by rendering it (templates.py, under limits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmforge.backend.errors import MmforgeError

LIST = "list"
TEXT = "text"
# (kind, n) -> the placeholder a user writes for the n-th attachment of that kind (from 1).
Placeholder = Callable[[str, int], str]


def conform(
    messages: list[dict[str, Any]],
    form: str | None,
    placeholder: Placeholder | None,
    family: str = "this family",
) -> list[dict[str, Any]]:
    """`messages` in the content form a template takes (new dicts; the input is kept).

    Args:
        messages: Chat messages; content a list of parts or a string.
        form: `LIST`, `TEXT`, or None when the form is unknown (messages unchanged).
        placeholder: The family's text placeholder for an attachment, for `TEXT`.
        family: The family's name, for the error.

    Raises:
        MmforgeError: The template takes text only, a message has an attachment, and the
            family has no way to write one in text.
    """
    if form == LIST:
        return [_as_parts(m) for m in messages]
    if form != TEXT:
        return messages
    counts: dict[str, int] = {}
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            message = {**message, "content": _as_text(content, counts, placeholder, family)}
        out.append(message)
    return out


def _as_parts(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    return message


def _as_text(
    parts: list[dict[str, Any]],
    counts: dict[str, int],
    placeholder: Placeholder | None,
    family: str,
) -> str:
    """One message's parts as text, attachments numbered across the conversation."""
    pieces = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            pieces.append(str(part.get("text", "")))
            continue
        if placeholder is None:
            raise MmforgeError(
                f"The chat template takes text only, and mmforge does not know how "
                f"{family} writes an {kind} into text",
                "Use the model's released chat template, which places attachments itself",
            )
        counts[str(kind)] = counts.get(str(kind), 0) + 1
        pieces.append(placeholder(str(kind), counts[str(kind)]))
    return "".join(pieces)
