"""Issue 47 in the transcript: a saved attachment is drawn or played only once checked.

A saved conversation is a file anyone can edit: its attachments may name a FIFO (which
blocks the GUI thread that opens it), a text file posing as a picture, a sparse file of
gigabytes, or a file outside the conversation's folder (absolute, `../`, a link out).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices

from mmforge import resources
from mmforge.backend.attachments import AUDIO, IMAGE, Attachment, prepare
from mmforge.backend.chat.conversations import FILE, ConversationStore, Message
from mmforge.gui.chat_turns import Pending


def _saved(store: ConversationStore, kind: str) -> tuple[str, Attachment]:
    """A saved conversation whose first message holds a good copy of `kind`."""
    conversation = store.new("/pkg")
    copies = store.attachments_folder(conversation.id)
    probe = resources.probe_image() if kind == IMAGE else resources.probe_audio()
    own = prepare(probe, kind, copies)
    conversation.messages += [Message("user", "Look.", [own]), Message("assistant", "Seen.")]
    store.save(conversation)
    return conversation.id, own


def _name_in_file(store: ConversationStore, conversation_id: str, kind: str, files: dict) -> None:
    """Add to the saved first message an attachment of `kind` for each name: path."""
    path = store.folder(conversation_id) / FILE
    data = json.loads(path.read_text())
    data["messages"][0]["attachments"] += [
        {"kind": kind, "path": p, "name": n} for n, p in files.items()
    ]
    path.write_text(json.dumps(data))


def _open(chat, conversation_id: str) -> None:
    chat.refresh_conversations()
    chat.conversations.itemClicked.emit(chat.conversation_list.item_for(conversation_id))
    assert chat.conversation.id == conversation_id


def _hostile_files(copies: Path, secret: Path, suffix: str) -> dict[str, str]:
    """Hostile copies in `copies`: each name's path as the conversation file writes it."""
    os.mkfifo(copies / f"fifo{suffix}")
    (copies / f"text{suffix}").write_text("hello, I am text")
    (copies / f"link_out{suffix}").symlink_to(secret)
    return {
        f"fifo{suffix}": f"attachments/fifo{suffix}",
        f"text{suffix}": f"attachments/text{suffix}",
        f"outside{suffix}": str(secret),
        f"climbs{suffix}": f"attachments/../../../{secret.name}",
        f"link_out{suffix}": f"attachments/link_out{suffix}",
    }


def test_a_saved_picture_is_drawn_only_from_a_checked_copy(qtbot, window, tmp_path):
    """The transcript decoded whatever a saved attachment named: a file outside the
    conversation was read, and a FIFO would block the GUI thread."""
    chat = window.chat_view
    window.show_page(chat)
    store = ConversationStore(chat.store.root)
    conversation_id, own = _saved(store, IMAGE)
    secret = store.root.parent / "secret.png"
    shutil.copyfile(resources.probe_image(), secret)
    copies = own.path.parent
    files = _hostile_files(copies, secret, ".png")
    shutil.copyfile(resources.probe_image(), copies / "sparse.png")
    os.truncate(copies / "sparse.png", 1_500_000_000)
    files["sparse.png"] = "attachments/sparse.png"
    _name_in_file(store, conversation_id, "image", files)

    start = time.monotonic()
    _open(chat, conversation_id)
    assert time.monotonic() - start < 5  # nothing was waited on or read whole
    shown = chat.transcript.toHtml()
    assert shown.count("<img") == 1  # the conversation's own copy only
    text = chat.transcript.toPlainText()
    said = {
        "fifo.png": "not a regular file",
        "text.png": "not an image file",
        "sparse.png": "more than",
        "outside.png": "outside this conversation's folder",
        "climbs.png": "outside this conversation's folder",
        "link_out.png": "outside this conversation's folder",
    }
    for name, reason in said.items():
        line = next((t for t in text.splitlines() if name in t), "")
        assert "not shown" in line and reason in line, (name, line)


def test_a_saved_clip_plays_only_from_a_checked_copy(qtbot, window, tmp_path, monkeypatch):
    """The Play link opened whatever a saved audio attachment named with the program its
    type names: a clip outside the conversation's folder, a link out of it."""
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()))
    chat = window.chat_view
    window.show_page(chat)
    store = ConversationStore(chat.store.root)
    conversation_id, own = _saved(store, AUDIO)
    secret = store.root.parent / "secret.wav"
    shutil.copyfile(resources.probe_audio(), secret)  # a real clip, of the form copies have
    copies = own.path.parent
    files = _hostile_files(copies, secret, ".wav")
    sf.write(copies / "stereo.wav", np.zeros((48_000, 2), np.float32), 48_000)
    files["stereo.wav"] = "attachments/stereo.wav"
    _name_in_file(store, conversation_id, "audio", files)

    start = time.monotonic()
    _open(chat, conversation_id)
    assert time.monotonic() - start < 5
    shown = chat.transcript.toHtml()
    assert "play:0:0" in shown
    text = chat.transcript.toPlainText()
    for k, name in enumerate(files, start=1):
        assert f"play:0:{k}" not in shown, name  # no working link for it
        line = next((t for t in text.splitlines() if name in t), "")
        assert "cannot play" in line, (name, line)
        chat.transcript.anchorClicked.emit(QUrl(f"play:0:{k}"))  # a link written by hand
    assert opened == []
    chat.transcript.anchorClicked.emit(QUrl("play:0:0"))
    assert opened == [str(own.path)]


def test_the_transcript_checks_against_the_store_the_page_uses_now(qtbot, window, tmp_path):
    """The self-test gives the chat page another store after it is made."""
    chat = window.chat_view
    window.show_page(chat)
    chat.store = ConversationStore(tmp_path / "elsewhere")
    conversation_id, _ = _saved(chat.store, IMAGE)
    _open(chat, conversation_id)
    assert chat.transcript.toHtml().count("<img") == 1
    assert "not shown" not in chat.transcript.toPlainText()


def test_the_files_the_user_just_sent_are_drawn_and_play_while_the_answer_streams(
    qtbot, window, tmp_path, monkeypatch
):
    """The turn in flight shows the user's own files (a phone's photo, a stereo clip at
    48 kHz): they are not saved copies, and the worker's intake checks them."""
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()))
    chat = window.chat_view
    window.show_page(chat)
    photo = tmp_path / "photo.png"
    shutil.copyfile(resources.probe_image(), photo)
    clip = tmp_path / "song.wav"
    sf.write(clip, np.zeros((48_000, 2), np.float32), 48_000)
    sent = [
        Attachment(kind=IMAGE, path=photo, name=photo.name),
        Attachment(kind=AUDIO, path=clip, name=clip.name),
    ]
    chat.pending = Pending(user=Message("user", "Look and listen.", sent))
    chat._render(streaming=True)
    shown = chat.transcript.toHtml()
    assert shown.count("<img") == 1 and "play:0:1" in shown
    assert "not shown" not in chat.transcript.toPlainText()
    chat.transcript.anchorClicked.emit(QUrl("play:0:1"))
    assert opened == [str(clip)]
    chat.pending = None
