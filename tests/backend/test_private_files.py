"""What holds the user's secrets and files is private to the user from the moment it exists."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mmforge.backend.errors import MmforgeError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def no_chmod(monkeypatch):
    """Path.chmod does nothing: what is private must be made so when it is created."""
    monkeypatch.setattr(Path, "chmod", lambda self, mode, **kw: None)
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_token_file_is_private_from_its_creation(tmp_path, monkeypatch, no_chmod):
    from huggingface_hub import constants

    from mmforge.backend.credentials import save_token

    path = tmp_path / "hf" / "token"
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(path))
    assert save_token("  hf_first  ") == path
    assert path.read_text() == "hf_first" and _mode(path) == 0o600
    os.chmod(path, 0o644)  # a token file some other tool left readable
    save_token("hf_second")
    assert path.read_text() == "hf_second" and _mode(path) == 0o600
    with pytest.raises(MmforgeError, match="not a Hugging Face token"):
        save_token("two words")


def test_saved_conversations_and_their_attachments_are_private(tmp_path, no_chmod):
    from mmforge import resources
    from mmforge.backend.attachments import IMAGE, prepare
    from mmforge.backend.chat.conversations import ConversationStore, Message

    store = ConversationStore(tmp_path / "conversations")
    conversation = store.new("pkg")
    attachment = prepare(resources.probe_image(), IMAGE, store.attachments_folder(conversation.id))
    conversation.messages.append(Message("user", "hello", attachments=[attachment]))
    store.save(conversation)
    folder = store.folder(conversation.id)
    assert _mode(store.root) == 0o700 and _mode(folder) == 0o700
    assert _mode(folder / "conversation.json") == 0o600
    assert _mode(folder / "attachments") == 0o700
    assert attachment.path.parent == folder / "attachments"


def test_attachment_copies_are_private(tmp_path):
    from mmforge import resources
    from mmforge.backend.attachments import AUDIO, IMAGE, prepare

    for path, kind in ((resources.probe_image(), IMAGE), (resources.probe_audio(), AUDIO)):
        assert _mode(prepare(path, kind, tmp_path / "copies").path) == 0o600


def test_a_failed_conversation_save_leaves_no_temp_file(tmp_path, monkeypatch):
    from mmforge.backend.chat.conversations import ConversationStore

    store = ConversationStore(tmp_path / "conversations")
    conversation = store.new("pkg")

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(MmforgeError, match="The disk filled up"):  # exit 2, one line
        store.save(conversation)
    assert not store.root.exists()  # nothing half-written: not even its folders
