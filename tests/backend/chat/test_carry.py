"""Issue 47: a continued conversation adopts only the old one's checked attachment copies."""

from __future__ import annotations

import logging
import os
import shutil
import time

import numpy as np
import soundfile as sf

from mmforge import resources
from mmforge.backend.attachments import AUDIO, IMAGE, Attachment, prepare
from mmforge.backend.chat import carry
from mmforge.backend.chat.conversations import ConversationStore, Message


def test_adopting_copies_only_what_passes_the_intake_and_names_the_rest(tmp_path, caplog):
    """A FIFO, a text file posing as a picture, a 1.5 GB sparse file or a file outside the
    old conversation's folder was copied into the new one (or blocked the copy)."""
    store = ConversationStore(tmp_path / "conversations")
    old = store.new("/pkg")
    folder = store.attachments_folder(old.id)
    own = prepare(resources.probe_image(), IMAGE, folder)
    clip = prepare(resources.probe_audio(), AUDIO, folder)
    secret = tmp_path / "secret.png"
    shutil.copyfile(resources.probe_image(), secret)
    os.mkfifo(folder / "fifo.png")
    (folder / "text.png").write_text("hello, I am text")
    shutil.copyfile(resources.probe_image(), folder / "sparse.png")
    os.truncate(folder / "sparse.png", 1_500_000_000)
    (folder / "link_out.png").symlink_to(secret)
    sf.write(folder / "stereo.wav", np.zeros((48_000, 2), np.float32), 48_000)
    hostile = {
        "fifo.png": (folder / "fifo.png", "not a regular file"),
        "text.png": (folder / "text.png", "not an image file"),
        "sparse.png": (folder / "sparse.png", "more than"),
        "outside.png": (secret, "outside this conversation's folder"),
        "climbs.png": (folder / ".." / ".." / ".." / "secret.png", "outside"),
        "link_out.png": (folder / "link_out.png", "outside"),
        "stereo.wav": (folder / "stereo.wav", "not a copy"),
    }
    said = [
        Attachment(kind=AUDIO if name.endswith(".wav") else IMAGE, path=path, name=name)
        for name, (path, _) in hostile.items()
    ]
    gone = Attachment(kind=IMAGE, path=folder / "gone.png", name="gone.png")
    messages = carry.copies([Message("user", "Look", [own, *said, clip, gone])])
    new = carry.begin_continuation(old, store.new("/pkg"))
    dest = store.attachments_folder(new.id)

    caplog.set_level(logging.WARNING)
    start = time.monotonic()
    words = carry.adopt_attachments(messages, dest, store.copy_folders(old))
    assert time.monotonic() - start < 5  # nothing was waited on or read whole

    kept = messages[0].attachments
    assert [a.name for a in kept] == [own.name, clip.name, "gone.png"]
    assert [a.path.parent for a in kept[:2]] == [dest, dest]
    assert kept[2].path == gone.path  # a copy already gone stays named by its old path
    assert sorted(p.name for p in dest.iterdir()) == sorted([own.path.name, clip.path.name])
    assert len(words) == len(hostile)
    for (name, (_, reason)), word in zip(hostile.items(), words, strict=True):
        assert name in word and reason in word, word
        assert name in caplog.text
    assert secret.read_bytes() == resources.probe_image().read_bytes()  # read by nobody


def test_adopting_leaves_the_old_conversation_as_it_was(tmp_path):
    store = ConversationStore(tmp_path / "conversations")
    old = store.new("/pkg")
    own = prepare(resources.probe_image(), IMAGE, store.attachments_folder(old.id))
    old.messages = [Message("user", "Look", [own]), Message("assistant", "A probe.")]
    new = carry.begin_continuation(old, store.new("/pkg"))
    new.messages = carry.copies(old.messages)
    dest = store.attachments_folder(new.id)
    assert carry.adopt_attachments(new.messages, dest, store.copy_folders(old)) == []
    assert new.messages[0].attachments[0].path.parent == dest
    assert old.messages[0].attachments[0].path == own.path and own.path.is_file()
