"""Exporting a conversation: Markdown to read (its pictures copied beside it) or JSON.

The Markdown holds nothing live (`backend.chat.markdown_export`), and what is copied
beside it is only the conversation's own attachment copies, each checked as the intake
checks a new one (`attachments.check_saved`): a saved conversation is a file anyone can
edit, and could name any file on the disk, a FIFO or a link out of its folder.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from mmforge.backend.chat.conversations import Conversation
from mmforge.gui.errors import show_error

log = logging.getLogger(__name__)


def ask_and_export(
    parent: QWidget, conversation: Conversation | None, copies: Sequence[Path] | None = None
) -> None:
    """Ask where, then save the conversation as Markdown (to read) or JSON (everything).

    `copies` are the folders the conversation's attachment copies lie in (`export_to`).
    """
    if conversation is None or not conversation.messages:
        show_error(parent, {"message": "No conversation to export", "hint": "Chat first"})
        return
    name = "".join(c if c.isalnum() else "-" for c in conversation.title)[:40] or "chat"
    path, chosen = QFileDialog.getSaveFileName(
        parent, "Export conversation", name, "Markdown (*.md);;JSON (*.json)"
    )
    if path:
        as_json = "JSON" in chosen or path.endswith(".json")
        export_to(parent, conversation, Path(path), as_json=as_json, copies=copies)


def export_to(
    parent: QWidget,
    conversation: Conversation,
    path: Path,
    *,
    as_json: bool,
    copies: Sequence[Path] | None = None,
) -> None:
    """Write the conversation to `path`; a failure is one dialog.

    Markdown links its pictures and recordings, copied into `<name>_files` beside it:
    only those lying in `copies` (the conversation's own folders of copies; None: anywhere)
    that pass the intake's checks. Any other is named in the document with why it was not
    copied.
    """
    from mmforge.backend.chat.markdown_export import to_markdown

    try:
        if as_json:
            text = json.dumps(conversation.to_dict(), indent=2, ensure_ascii=False)
        else:
            links, left_out = _export_files(conversation, path, copies)
            text = to_markdown(conversation, links, left_out)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        show_error(parent, {"message": f"Could not write {path}", "hint": str(e)})


def _export_files(
    conversation: Conversation, path: Path, copies: Sequence[Path] | None
) -> tuple[dict[Path, str], dict[Path, str]]:
    """Copy the attachments beside the Markdown file: their links, and why any was not."""
    from mmforge.backend.attachments import SavedCopyError, check_saved

    folder = path.parent / f"{path.stem}_files"
    links: dict[Path, str] = {}
    left_out: dict[Path, str] = {}
    for m in conversation.messages:
        for a in m.attachments:
            if a.path in links or a.path in left_out:
                continue
            try:
                checked = check_saved(a, copies)
            except SavedCopyError as e:
                log.warning("export: not copying %s: %s", a.path, e.reason)
                left_out[a.path] = e.reason
                continue
            folder.mkdir(exist_ok=True)
            target = folder / f"{len(links) + 1}-{_file_name(checked.name)}"
            shutil.copyfile(checked, target)
            links[a.path] = f"{folder.name}/{target.name}"
    return links, left_out


def _file_name(name: str) -> str:
    """A copy's name made of letters, digits, '-', '_' and '.' only."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[-80:]
