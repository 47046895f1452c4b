"""Issue 47: a Markdown export holds nothing live (no HTML, no link but to its own files).

The export is opened in viewers that render HTML and follow links (a browser, an editor's
preview, a hosting site), and what it holds came from a model or from a file anyone can
edit. Each test renders it as such a viewer would: raw HTML on, and links unfiltered
(markdown-it's own filter of `javascript:` is switched off, as many viewers have none).
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt

from mmforge.backend.attachments import AUDIO, IMAGE, Attachment
from mmforge.backend.chat.conversations import Conversation, Message, to_markdown

SCRIPT = "<script>alert(1)</script>"
ONERROR = '<img src=x onerror="alert(2)">'


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _rendered(markdown: str) -> list[tuple[str, dict[str, str | None]]]:
    """The elements a viewer that renders HTML and follows any link makes of `markdown`."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.validateLink = lambda url: True
    parser = _Elements()
    parser.feed(md.render(markdown))
    return parser.tags


def _urls(tags) -> list[str]:
    return [v or "" for _, attrs in tags for k, v in attrs.items() if k in ("href", "src")]


def _assert_inert(tags, files: str = "") -> None:
    """Only the tags Markdown makes, no handler, and links only into `files`."""
    allowed = {"h1", "p", "strong", "em", "code", "pre", "a", "img", "br", "hr"}
    allowed |= {"ul", "ol", "li", "blockquote", "h2", "h3", "table", "thead", "tbody", "tr"}
    assert {t for t, _ in tags} <= allowed | {"th", "td"}, tags
    assert not [a for _, attrs in tags for a in attrs if a.startswith("on")], tags
    for url in _urls(tags):
        assert files and url.startswith(f"{files}/"), url
        assert not urlsplit(url).scheme, url


def test_html_in_answers_prompts_titles_and_the_system_prompt_is_inert():
    """Before, an answer's <script> and <img onerror> were written as they came."""
    hostile = "\n".join(
        [
            f"Here: {SCRIPT} and {ONERROR}",
            "",
            "<iframe src='https://evil.example'></iframe>",
            "<!-- a comment hiding <script> -->",
            "<javascript:alert(3)> and <https://evil.example/track>",
            "[click](javascript:alert(4)) ![pixel](https://evil.example/pixel.png)",
            "[ref]: javascript:alert(5)",
            "[click too][ref] and ![also][ref]",
            "  ```",
            "```",
            ONERROR,
            "```",
        ]
    )
    conversation = Conversation(
        id="c",
        package=f"/pkg/{SCRIPT}",
        title=f"Title {SCRIPT}\n{ONERROR}",
        system=f"Be {ONERROR}",
        summary=f"Summary {SCRIPT}",
        messages=[Message("user", hostile), Message("assistant", hostile)],
    )
    markdown = to_markdown(conversation)
    tags = _rendered(markdown)
    _assert_inert(tags)
    assert "alert(1)" in markdown and "onerror" in markdown  # shown as text, not dropped


def test_code_blocks_keep_their_text_exactly():
    """Inert does not mean mangled: a fenced block of HTML is still that HTML, as code."""
    answer = 'Use this:\n\n```html\n<div class="a">[x](y)</div>\n```\n\nDone.'
    markdown = to_markdown(Conversation(id="c", package="/p", messages=[Message("user", answer)]))
    assert '```html\n<div class="a">[x](y)</div>\n```' in markdown
    md = MarkdownIt("commonmark", {"html": True})
    assert "&lt;div class=&quot;a&quot;&gt;[x](y)&lt;/div&gt;" in md.render(markdown)


def test_an_unclosed_fence_in_one_message_does_not_swallow_the_next():
    messages = [Message("user", "```\nopen"), Message("assistant", SCRIPT)]
    markdown = to_markdown(Conversation(id="c", package="/p", messages=messages))
    _assert_inert(_rendered(markdown))
    assert "<strong>Model:</strong>" in MarkdownIt("commonmark").render(markdown)


def test_attachment_names_and_links_cannot_make_another_scheme(tmp_path):
    """An attachment name could rewrite its link to `javascript:`."""
    name = 'x](javascript:alert(1)) <img src=x onerror="alert(2)"> [y'
    picture = Attachment(IMAGE, tmp_path / "javascript:alert(3).png", name)
    clip = Attachment(AUDIO, tmp_path / "clip).wav", "a)(b.wav")
    unlinked = Attachment(IMAGE, tmp_path / "x](javascript:alert(4)).png", name)
    files = "javascript:alert(5)_files"  # an export saved as "javascript:alert(5).md"
    links = {
        picture.path: f"{files}/1-{picture.path.name}",
        clip.path: f"{files}/2-{clip.path.name}",
    }
    conversation = Conversation(
        id="c", package="/p", messages=[Message("user", "Look.", [picture, clip, unlinked])]
    )
    markdown = to_markdown(conversation, links)
    tags = _rendered(markdown)
    for url in _urls(tags):
        assert not urlsplit(url).scheme, url
    assert {unquote(u) for u in _urls(tags)} == set(links.values())
    assert [t for t, _ in tags].count("img") == 1 and [t for t, _ in tags].count("a") == 1
    assert not [a for _, attrs in tags for a in attrs if a.startswith("on")], tags


def test_a_time_no_clock_shows_is_no_date_not_a_crash():
    """A NaN or 1e300 `created` made Markdown export raise."""
    for created in (float("nan"), float("inf"), 1e300, -1e300):
        conversation = Conversation(id="c", package="/p", created=created)
        assert to_markdown(conversation).startswith("# Conversation")


def test_an_export_names_its_package_and_messages(tmp_path):
    picture = Attachment(IMAGE, Path(tmp_path / "probe.png"), "probe.png")
    conversation = Conversation(
        id="c",
        package="/models/qwen-int4",
        title="Cats",
        messages=[Message("user", "What is this?", [picture]), Message("assistant", "A cat.")],
    )
    markdown = to_markdown(conversation, {picture.path: "chat_files/1-probe.png"})
    assert markdown.startswith("# Cats\n") and "qwen-int4" in markdown
    assert "![probe.png](chat_files/1-probe.png)" in markdown and "A cat." in markdown
