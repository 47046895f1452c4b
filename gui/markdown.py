"""Chat replies as HTML: markdown-it-py for the structure, pygments for code blocks."""

from __future__ import annotations

import html
from typing import Any

STYLE = """
pre { background: #f6f8fa; padding: 8px; border-radius: 6px; }
code { font-family: 'DejaVu Sans Mono', monospace; }
table { border-collapse: collapse; } td, th { border: 1px solid #d0d7de; padding: 4px 8px; }
"""


def _highlight(code: str, lang: str, attrs: Any) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    return str(highlight(code, lexer, HtmlFormatter(noclasses=True, nowrap=False)))


def to_html(text: str) -> str:
    """Render Markdown (tables and fenced code included); raw HTML in the text is escaped."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable("table")
    return str(md.render(text))


def plain(text: str) -> str:
    """Text shown as is (for user messages)."""
    return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"
