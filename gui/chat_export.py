"""Exporting a conversation: Markdown to read (its pictures copied beside it) or JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from mmforge.backend.chat.conversations import Conversation
from mmforge.gui.errors import show_error


def ask_and_export(parent: QWidget, conversation: Conversation | None) -> None:
    """Ask where, then save the conversation as Markdown (to read) or JSON (everything)."""
    if conversation is None or not conversation.messages:
        show_error(parent, {"message": "No conversation to export", "hint": "Chat first"})
        return
    name = "".join(c if c.isalnum() else "-" for c in conversation.title)[:40] or "chat"
    path, chosen = QFileDialog.getSaveFileName(
        parent, "Export conversation", name, "Markdown (*.md);;JSON (*.json)"
    )
    if path:
        export_to(
            parent, conversation, Path(path), as_json="JSON" in chosen or path.endswith(".json")
        )


def export_to(parent: QWidget, conversation: Conversation, path: Path, *, as_json: bool) -> None:
    """Write the conversation to `path`; a failure is one dialog.

    Markdown links its pictures and recordings, copied into `<name>_files` beside it.
    """
    from mmforge.backend.chat.conversations import to_markdown

    try:
        if as_json:
            text = json.dumps(conversation.to_dict(), indent=2, ensure_ascii=False)
        else:
            text = to_markdown(conversation, _export_files(conversation, path))
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        show_error(parent, {"message": f"Could not write {path}", "hint": str(e)})


def _export_files(conversation: Conversation, path: Path) -> dict[Path, str]:
    """Copy the attachments beside the Markdown file; their relative links."""
    from mmforge.gui.safe_text import is_regular_file

    folder = path.parent / f"{path.stem}_files"
    links: dict[Path, str] = {}
    for m in conversation.messages:
        for a in m.attachments:
            if a.path in links or not is_regular_file(a.path):
                continue
            folder.mkdir(exist_ok=True)
            target = folder / f"{len(links) + 1}-{a.path.name}"
            shutil.copyfile(a.path, target)
            links[a.path] = f"{folder.name}/{target.name}"
    return links
