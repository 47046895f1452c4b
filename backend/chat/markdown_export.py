r"""A conversation as a Markdown document to read or share, with nothing in it live.

An export is opened where Markdown becomes HTML and links are followed (a browser, an
editor's preview, a hosting site), and all it holds came from a model or from a file
anyone can edit. So it is written inert:

- Messages, the system prompt and the summary keep their Markdown but hold no HTML: a
  `<` that could open a tag, a comment or an autolink is written `&lt;`, which every
  renderer shows as `<`. Fenced code blocks keep their text exactly (HTML in them is
  shown as code): their fences are written in the form every renderer reads alike (at
  the start of the line, closed by the very same fence, a blank line before), and one
  left open is closed at the message's end, so that it cannot swallow what follows.
- No link but to the export's own files: `](` and `]:` in text are written `]\(` and
  `]\:`, so no inline link, image or reference definition forms (`[x](javascript:…)`,
  a tracking pixel); the links to the copied attachments are written here, each part
  percent-encoded, so no name makes `javascript:` or any other scheme.
- Names (the title, the package, attachment names) are one line, Markdown's characters
  escaped.

Inline code pays a little for it: a `<` before a letter, `](` and `]:` inside backticks
read `&lt;`, `]\(` and `]\:` there.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from mmforge.backend.attachments import Attachment
    from mmforge.backend.chat.conversations import Conversation

# CommonMark's opening fence: up to three spaces, then three or more backticks (whose
# info string holds no backtick) or tildes.
_OPENING = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)")
# A `<` that may open a tag, a comment, a processing instruction or an autolink.
_TAG = re.compile(r"<(?![\s\d=<>-]|$)")
_LINK = re.compile(r"\](?=[(:])")
_NAME = re.compile(r"([\\`*_\[\]])")
_LANGUAGE = re.compile(r"[^A-Za-z0-9_#.+-]")


def to_markdown(
    conversation: Conversation,
    links: Mapping[Path, str] | None = None,
    left_out: Mapping[Path, str] | None = None,
) -> str:
    """The conversation as a Markdown document a person reads or shares.

    Args:
        conversation: The conversation.
        links: For each attachment copied beside the document (by its path), the copy's
            path relative to the document ("chat_files/1-cat.png"): pictures are drawn,
            recordings linked. Other attachments are named.
        left_out: Why an attachment was not copied (by its path), said beside its name.
    """
    title = plain(conversation.title) or "Conversation"
    package = conversation.package
    made = f"With {plain(Path(package).name)} ({plain(package)})"
    started = _date(conversation.created)
    lines = [f"# {title}", "", made + (f", started {started}." if started else ".")]
    if conversation.system:
        lines += ["", "**System prompt:**", "", inert(conversation.system)]
    if conversation.summary:
        lines += ["", "**Summary of the earlier conversation (written by the model):**", ""]
        lines.append(inert(conversation.summary))
    for m in conversation.messages:
        lines += ["", "**You:**" if m.role == "user" else "**Model:**", ""]
        lines += [_attachment(a, links or {}, left_out or {}) for a in m.attachments]
        if m.attachments:
            lines.append("")
        lines.append(inert(m.text))
        speed = m.stats.get("decode_tokens_per_s") if m.role == "assistant" else None
        if isinstance(speed, int | float) and math.isfinite(speed) and speed > 0:
            lines += ["", f"*{speed:.1f} tokens/s*"]
    return "\n".join(lines) + "\n"


def inert(text: str) -> str:
    """Markdown from a model or a file, with no HTML and no link; code blocks kept exact."""
    out: list[str] = []
    fence = ""
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if fence:
            if _closes(line, fence):
                out.append(fence)
                fence = ""
            else:
                out.append(line)
            continue
        opening = _OPENING.fullmatch(line)
        if opening and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            fence = opening["fence"]
            if out and out[-1].strip():
                out.append("")
            out.append(fence + _language(opening["info"]))
        else:
            out.append(_LINK.sub(r"]\\", _TAG.sub("&lt;", line)))
    if fence:
        out.append(fence)  # left open: closed here, not at the end of the document
    return "\n".join(out)


def plain(text: str) -> str:
    """A name as text on one line: Markdown's characters escaped, no HTML."""
    line = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;")
    return _NAME.sub(r"\\\1", line)


def href(relative: str) -> str:
    """A link to a file beside the document: each part percent-encoded (no scheme forms)."""
    return "/".join(quote(part, safe="") for part in relative.split("/"))


def _closes(line: str, fence: str) -> bool:
    """Whether `line` may close `fence` in some renderer.

    More eagerly than CommonMark (any indent): the fence written in its place then
    closes the block in every renderer alike.
    """
    stripped = line.strip(" \t")
    return len(stripped) >= len(fence) and stripped == fence[0] * len(stripped)


def _language(info: str) -> str:
    """The info string's first word as a language name (nothing else of it is kept)."""
    words = info.split()
    return _LANGUAGE.sub("", words[0])[:40] if words else ""


def _attachment(a: Attachment, links: Mapping[Path, str], left_out: Mapping[Path, str]) -> str:
    name = plain(a.name or a.path.name)
    link = links.get(a.path)
    if link is not None:
        return f"![{name}]({href(link)})" if a.kind == "image" else f"[{name}]({href(link)})"
    why = left_out.get(a.path)
    return f"*[{plain(a.kind)}: {name}" + (f", not copied: {plain(why)}]*" if why else "]*")


def _date(seconds: float) -> str:
    """The local date and time, "" for a time no clock shows (NaN, 1e300)."""
    try:
        return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, ValueError, OSError):
        return ""
