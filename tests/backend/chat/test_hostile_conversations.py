"""Issue 47: a saved conversation is a file anyone can edit.

Its numbers and fields are read through the one reader for strangers' JSON, typed field by
field; a broken file is skipped, named in the log and left as it is; the attachment copies
it names go through the intake new attachments go through before the runtime reads them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from mmforge import resources
from mmforge.backend.attachments import AUDIO, IMAGE, AttachmentError, prepare
from mmforge.backend.chat.conversations import FILE, ConversationStore, Message
from mmforge.backend.chat.transcript import Transcript
from mmforge.backend.errors import MmforgeError


def _conversation(name: str) -> dict:
    return {
        "format": 1,
        "id": name,
        "package": "/pkg",
        "title": name,
        "created": 1_760_000_000.0,
        "updated": 1_760_000_000.0,
        "system": "",
        "forgotten": 0,
        "messages": [
            {"role": "user", "text": "Hi.", "attachments": []},
            {"role": "assistant", "text": "Hello.", "token_ids": [9, 8], "stats": {}},
        ],
    }


def _write(
    store: ConversationStore, name: str, data: dict, raw: dict[str, str] | None = None
) -> Path:
    """Write `data` as `name`'s conversation.json; each `raw` marker becomes its JSON text."""
    text = json.dumps(data, indent=1)
    for marker, value in (raw or {}).items():
        text = text.replace(json.dumps(marker), value)
    folder = store.root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FILE).write_text(text, encoding="utf-8")
    return folder / FILE


def _kept(store: ConversationStore) -> str:
    good = store.new("/pkg")
    good.messages += [Message("user", "kept"), Message("assistant", "yes")]
    store.save(good)
    return good.id


@pytest.mark.parametrize(
    "where,value,field",
    [
        (("updated",), "NaN", "updated"),
        (("updated",), "Infinity", "updated"),
        (("updated",), "1e400", "updated"),
        (("created",), "-Infinity", "created"),
        (("forgotten",), "Infinity", "forgotten"),
        (("forgotten",), "1e400", "forgotten"),
        (("messages", 1, "token_ids", 1), "1e400", "messages[1].token_ids[1]"),
        (("messages", 1, "token_ids", 0), "NaN", "messages[1].token_ids[0]"),
    ],
)
def test_hostile_numbers_in_a_saved_conversation_are_refused_naming_the_field(
    tmp_path, caplog, where, value, field
):
    """NaN, Infinity and 1e400 stopped the app at every start (exit 70) until found."""
    store = ConversationStore(tmp_path / "conversations")
    kept = _kept(store)
    data = _conversation("hostile")
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = "@HOSTILE@"
    path = _write(store, "hostile", data, {"@HOSTILE@": value})
    before = path.read_bytes()

    with pytest.raises(MmforgeError) as refused:
        store.load("hostile")
    assert "damaged" in refused.value.user_message
    assert field in refused.value.user_message, refused.value.user_message
    caplog.set_level(logging.WARNING)
    assert [s.id for s in store.list()] == [kept]
    assert str(store.root / "hostile") in caplog.text and field in caplog.text
    assert path.read_bytes() == before  # skipped, never rewritten or deleted


def _set(data: dict, path: tuple, value: object) -> dict:
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


_ATTACHMENT = {"kind": "image", "path": "attachments/a.png", "name": "a.png"}


@pytest.mark.parametrize(
    "where,value,field",
    [
        (("messages", 0, "role"), 3, "messages[0].role"),
        (("messages", 0, "role"), "system", "messages[0].role"),
        (("messages", 0, "text"), ["Hi."], "messages[0].text"),
        (("messages", 1, "token_ids"), ["9"], "messages[1].token_ids[0]"),
        (("messages", 1, "token_ids"), [True], "messages[1].token_ids[0]"),
        (("messages", 1, "token_ids"), [-1], "messages[1].token_ids[0]"),
        (("messages", 1, "token_ids"), {"a": 1}, "messages[1].token_ids"),
        (("messages", 1, "stats"), {"new_tokens": "<img src=x onerror=alert(1)>"}, "new_tokens"),
        (("messages", 1, "stats"), {"time_to_first_token_s": "soon"}, "time_to_first_token_s"),
        (("messages", 1, "stats"), [1, 2], "messages[1].stats"),
        (("messages", 1, "stop_reason"), 7, "messages[1].stop_reason"),
        (("messages",), {"a": 1}, "messages"),
        (("messages", 0), ["user"], "messages[0]"),
        (("forgotten",), "3", "forgotten"),
        (("forgotten",), 2.5, "forgotten"),
        (("updated",), 1e300, "updated"),  # finite, and past any date a clock shows
        (("created",), -5, "created"),
        (("title",), {"a": 1}, "title"),
        (("package",), None, "package"),
        (("system",), 12, "system"),
        (("messages", 0, "attachments"), [{**_ATTACHMENT, "kind": "video"}], "kind"),
        (("messages", 0, "attachments"), [{**_ATTACHMENT, "path": 5}], "path"),
        (("messages", 0, "attachments"), [{**_ATTACHMENT, "width": 1.5}], "width"),
        (("messages", 0, "attachments"), [{**_ATTACHMENT, "seconds": "long"}], "seconds"),
        (("messages", 0, "attachments"), ["a.png"], "messages[0].attachments[0]"),
    ],
)
def test_fields_of_the_wrong_type_are_refused_naming_the_field(tmp_path, where, value, field):
    """Before, str() and int() made something of anything, or a TypeError said nothing."""
    store = ConversationStore(tmp_path / "conversations")
    path = _write(store, "odd", _set(_conversation("odd"), where, value))
    before = path.read_bytes()
    with pytest.raises(MmforgeError) as refused:
        store.load("odd")
    assert "damaged" in refused.value.user_message
    assert field in refused.value.user_message, refused.value.user_message
    assert store.list() == [] and path.read_bytes() == before


def test_a_conversation_is_known_by_its_folder_not_the_id_it_claims(tmp_path):
    """A file claiming another conversation's id made Delete remove that other one."""
    store = ConversationStore(tmp_path / "conversations")
    kept = _kept(store)
    _write(store, "impostor", _conversation(kept))
    impostor = store.load("impostor")
    assert impostor.id == "impostor"
    store.delete(impostor.id)
    assert store.load(kept).messages[0].text == "kept"


# -- the attachment copies a saved conversation names ------------------------------------


def _with_attachment(
    store: ConversationStore, name: str, path: str, kind: str = IMAGE
) -> Transcript:
    """A saved conversation whose first message names `path` (as written in the file)."""
    good = prepare(resources.probe_image(), IMAGE, store.root / name / "attachments")
    data = _conversation(name)
    data["messages"][0]["attachments"] = [
        {"kind": "image", "path": f"attachments/{good.path.name}", "name": "probe.png"},
        {"kind": kind, "path": path, "name": "holiday.png"},
    ]
    _write(store, name, data)
    return Transcript(store.load(name), store)


def _sparse_picture(path: Path, size: int) -> None:
    """A real PNG header and picture, then zeros up to `size` bytes (taking no disk)."""
    shutil.copyfile(resources.probe_image(), path)
    os.truncate(path, size)


@pytest.mark.parametrize(
    "case,said",
    [
        ("fifo", "not a regular file"),
        ("text", "not an image file"),
        ("sparse", "more than"),
        ("outside", "outside this conversation's folder"),
        ("climbs", "outside this conversation's folder"),
        ("link_out", "outside this conversation's folder"),
        ("stereo", "not a copy"),
        ("missing", "not a regular file"),
    ],
)
def test_a_saved_attachment_reaches_the_runtime_only_through_the_intake(tmp_path, case, said):
    """A FIFO blocked the worker 30 s+, a text file killed it (libjpeg calls exit()), a
    1.5 GB sparse file was read whole, and a file outside the conversation was read."""
    store = ConversationStore(tmp_path / "conversations")
    folder = store.root / case / "attachments"
    folder.mkdir(parents=True)
    secret = tmp_path / "secret.png"
    shutil.copyfile(resources.probe_image(), secret)
    named = f"attachments/{case}.png"
    if case == "fifo":
        os.mkfifo(folder / "fifo.png")
    elif case == "text":
        (folder / "text.png").write_text("hello, I am text")
    elif case == "sparse":
        _sparse_picture(folder / "sparse.png", 1_500_000_000)
    elif case == "outside":
        named = str(secret)
    elif case == "climbs":
        named = "attachments/../../../secret.png"
    elif case == "link_out":
        (folder / "link_out.png").symlink_to(secret)
    elif case == "stereo":
        named = "attachments/stereo.wav"
        sf.write(folder / "stereo.wav", np.zeros((48_000, 2), np.float32), 48_000)
    transcript = _with_attachment(store, case, named, AUDIO if case == "stereo" else IMAGE)

    start = time.monotonic()
    with pytest.raises(AttachmentError) as refused:
        transcript.attachments()
    assert time.monotonic() - start < 5  # nothing was waited on or read whole
    assert said in refused.value.user_message, refused.value.user_message


def test_the_conversations_own_copies_pass_the_intake(tmp_path):
    store = ConversationStore(tmp_path / "conversations")
    conversation = store.new("/pkg")
    copies = store.attachments_folder(conversation.id)
    picture = prepare(resources.probe_image(), IMAGE, copies)
    clip = prepare(resources.probe_audio(), AUDIO, copies)
    conversation.messages.append(Message("user", "What is this?", [picture, clip]))
    store.save(conversation)
    transcript = Transcript(store.load(conversation.id), store)
    assert [a.path for a in transcript.attachments()] == [picture.path, clip.path]


def test_a_changed_copy_never_reaches_the_runtime(package, tmp_path):
    """End to end with a model: the copy replaced by a text file (which killed the worker:
    libjpeg calls exit()) or by a FIFO (which blocked it 30 s and more) is one message,
    and the saved conversation keeps what it had."""
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions

    store = ConversationStore(tmp_path / "store")
    session = ChatSession(package("qwen2_5_vl"), store=store)
    pictures = session.prepare_attachments([(resources.probe_image(), IMAGE)])
    session.send("What is this?", pictures, GenerationOptions(max_new_tokens=2))
    conversation_id, copy = session.conversation.id, pictures[0].path
    for case, said in (("text", "not an image file"), ("fifo", "not a regular file")):
        copy.unlink()
        if case == "text":
            copy.write_text("hello, I am text")
        else:
            os.mkfifo(copy)
        session.open_conversation(store.load(conversation_id))
        start = time.monotonic()
        with pytest.raises(AttachmentError, match=said):
            session.send("And then?", options=GenerationOptions(max_new_tokens=2))
        assert time.monotonic() - start < 5
        kept = store.load(conversation_id).messages
        assert [m.role for m in kept] == ["user", "assistant"]
        assert kept[0].text == "What is this?"
