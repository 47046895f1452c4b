"""Saving a conversation survives kill -9: the last good copy stays, no temp file lingers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from mmforge.backend.chat.conversations import FILE, ConversationStore, Message

KILLED_MID_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from mmforge.backend.chat.conversations import ConversationStore, Message

    store = ConversationStore(Path(sys.argv[1]))
    conversation = store.load(sys.argv[2])
    conversation.messages.append(Message(role="user", text="the new turn"))
    # Killed after the new copy is written and before it replaces the old one.
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    store.save(conversation)
    """
)


def test_kill_9_mid_save_keeps_the_last_copy_and_the_next_look_removes_the_temp_file(tmp_path):
    store = ConversationStore(tmp_path / "conversations")
    conversation = store.new("pkg")
    conversation.messages.append(Message(role="user", text="first"))
    store.save(conversation)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_MID_SAVE, str(store.root), conversation.id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr[-2000:]
    folder = store.folder(conversation.id)
    orphans = list(folder.glob(f".{FILE}.*.tmp"))
    assert len(orphans) == 1  # what the killed process left
    assert [m.text for m in store.load(conversation.id).messages] == ["first"]
    assert [s.id for s in store.list()] == [conversation.id]
    assert not list(folder.glob(f".{FILE}.*.tmp"))  # listing the store removed the orphan


def test_a_save_is_on_disk_before_it_replaces_the_last_copy(tmp_path, monkeypatch):
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append("replace") or real_replace(a, b))
    store = ConversationStore(tmp_path / "conversations")
    store.save(store.new("pkg"))
    assert calls[:2] == ["fsync", "replace"]
    assert calls[2:] in ([], ["fsync"])  # the folder too, where the system has it
