"""Chat replies as HTML: markdown-it-py for the structure, pygments for code blocks."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

CODE = ("fence", "code_block")


def _parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _highlight(code: str, lang: str, style: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    # Pygments puts its own background on the <div>; the code colour comes from ours.
    formatter = HtmlFormatter(noclasses=True, nobackground=True, style=style)
    # A long line wraps inside its block instead of widening the whole transcript (and
    # pushing "Copy code" out of view); Copy code copies the line whole.
    out = str(highlight(code, lexer, formatter))
    return (
        out.replace("<pre", "<pre style='white-space:pre-wrap'", 1)
        if "<pre>" in out
        else (out.replace('<pre style="', '<pre style="white-space: pre-wrap; ', 1))
    )


def to_html(
    text: str,
    *,
    style: str = "default",
    border: str = "#d0d7de",
    code_link: Callable[[int], str] | None = None,
) -> str:
    """Render Markdown (tables and fenced code included); raw HTML in the text is escaped.

    Args:
        text: The Markdown.
        style: The Pygments style of code blocks.
        border: The colour of table rules.
        code_link: Given a code block's index in the text, the href of its Copy link
            (None: no links).
    """
    md = _parser()
    blocks = iter(range(1 << 30))

    def code(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        lang = token.info.split()[0] if token.info else ""
        out = _highlight(token.content, lang, style)
        if code_link is not None:
            out += f"<p align='right'><a href='{code_link(next(blocks))}'>Copy code</a></p>"
        return out

    for rule in CODE:
        md.add_render_rule(rule, code)
    cell = f"border: 1px solid {border}; padding: 4px 8px"
    out = str(md.render(text))
    for tag in ("td", "th"):
        out = out.replace(f"<{tag}>", f"<{tag} style='{cell}'>")
        out = out.replace(f'<{tag} style="', f'<{tag} style="{cell}; ')
    return out.replace("<table>", "<table cellspacing='0'>")


def code_blocks(text: str) -> list[str]:
    """The code blocks of a Markdown text, in order (what their Copy links copy)."""
    return [t.content for t in _parser().parse(text) if t.type in CODE]


def plain(text: str) -> str:
    """Text shown as is (for user messages)."""
    return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"
