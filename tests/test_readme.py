"""The README: every relative link resolves, and the app's copy of its user guide is equal."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = "<!-- user guide: start"
END = "<!-- user guide: end -->"


def _links(markdown: str) -> list[str]:
    """Link and image targets, outside code blocks and code spans."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in _links(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # web addresses and anchors
            if not (page.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= set(_links(readme))


def test_the_apps_user_guide_is_the_readmes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n", readme.index(START)) + 1
    section = readme[start : readme.index(END)].strip("\n") + "\n"
    shipped = (ROOT / "resources" / "user_guide.md").read_text(encoding="utf-8")
    assert shipped == section, (
        "resources/user_guide.md must be a copy of README.md's user guide section "
        "(between the 'user guide' markers): copy it over"
    )
