"""Chat through a worker process: streaming, Stop, errors that keep the session, crashes."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
from PIL import Image

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.chat.client import ChatClient
from mmforge.backend.chat.conversations import ConversationStore
from mmforge.backend.errors import MmforgeError


def _env(tmp_path):
    return {"HF_HUB_OFFLINE": "1", "XDG_DATA_HOME": str(tmp_path / "data")}


def test_streamed_tokens_make_the_answer_and_match_the_in_process_session(package, tmp_path):
    image = [(resources.probe_image(), IMAGE)]
    with ChatClient(package("qwen2_5_vl"), save=False, env=_env(tmp_path)) as client:
        assert client.info["vision"] and not client.info["audio"]
        events = list(client.send("Describe this.", image, {"max_new_tokens": 12}))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "attachments" and kinds[-1] == "turn"
    tokens = [e for e in events if e["event"] == "token"]
    turn = events[-1]["value"]
    assert [e["id"] for e in tokens] == turn["token_ids"]
    assert "".join(e["text"] for e in tokens) == turn["text"]

    session = ChatSession(package("qwen2_5_vl"))
    local = session.send(
        "Describe this.", session.prepare_attachments(image), GenerationOptions(max_new_tokens=12)
    )
    assert turn["token_ids"] == local.token_ids


def _never_ending(folder, tmp_path):
    """A copy of the package whose answers never end on their own.

    A random model may emit its end token a few tokens in (on CI's CPU it did, greedy),
    before a Stop sent after the first token arrives: the runtime's `min_length` keeps
    it from ending before the context is full.
    """
    copy = tmp_path / "never-ending"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "genai_config.json").read_text())
    config["search"]["min_length"] = config["model"]["context_length"]
    (copy / "genai_config.json").write_text(json.dumps(config))
    return copy


def test_stop_ends_the_answer_between_tokens_and_the_session_goes_on(package, tmp_path):
    folder = _never_ending(package("qwen2_5_vl"), tmp_path)
    with ChatClient(folder, save=False, env=_env(tmp_path)) as client:
        stream = client.send("Tell me everything.", options={"max_new_tokens": 3000})
        for event in stream:
            if event["event"] == "token":
                client.stop()
                break
        turn = next(e for e in stream if e["event"] == "turn")["value"]
        assert turn["stop_reason"] == "stopped" and 1 <= turn["stats"]["new_tokens"] < 3000
        after = list(client.send("Shorter, please.", options={"max_new_tokens": 4}))
        assert after[-1]["value"]["stats"]["prefill"] == "continued"


def test_a_bad_attachment_is_an_error_event_and_the_next_message_works(package, tmp_path):
    fake = tmp_path / "photo.png"
    fake.write_text("text, not pixels")
    huge = tmp_path / "huge.jpg"
    Image.new("RGB", (10000, 10000), (20, 120, 220)).save(huge, quality=80)
    with ChatClient(package("qwen2_5_vl"), save=False, env=_env(tmp_path)) as client:
        [error] = list(client.send("Look.", [(fake, IMAGE)]))
        assert error["event"] == "error" and "not an image file" in error["message"]
        events = list(client.send("Look.", [(huge, IMAGE)], {"max_new_tokens": 4}))
        # resized once from the full picture to the model's size, as transformers does
        sent = events[0]["value"][0]
        assert sent["note"] == "" and sent["width"] * sent["height"] <= 50176
        assert events[-1]["event"] == "turn" and events[-1]["value"]["stats"]["new_tokens"] == 4


def test_a_worker_killed_mid_answer_keeps_the_saved_conversation(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    folder = _never_ending(package("qwen2_5_vl"), tmp_path)
    client = ChatClient(folder, store_root=store.root, env=_env(tmp_path))
    try:
        list(client.send("First question.", options={"max_new_tokens": 4}))
        stream = client.send("Second question.", options={"max_new_tokens": 3000})
        next(e for e in stream if e["event"] == "token")
        os.kill(client._job.process.pid, signal.SIGKILL)
        with pytest.raises(MmforgeError, match="stopped unexpectedly"):
            list(stream)
    finally:
        client.close()
    [summary] = store.list()
    texts = [m.text for m in store.load(summary.id).messages]
    assert texts[0] == "First question." and texts[2] == "Second question."


def test_conversations_can_be_started_and_reopened(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    with ChatClient(package("qwen2_5_vl"), store_root=store.root, env=_env(tmp_path)) as client:
        first = client.info["conversation"]["id"]
        list(client.send("One.", options={"max_new_tokens": 3}))
        second = client.new_conversation()
        assert second["id"] != first and second["messages"] == []
        reopened = client.open_conversation(first)
        assert reopened["messages"][0]["text"] == "One."
        events = list(client.send("Two.", options={"max_new_tokens": 3}))
        assert events[-1]["event"] == "turn"
    assert len(store.load(first).messages) == 4


def test_the_worker_deletes_conversations_and_reports_them_with_each_turn(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    with ChatClient(package("qwen2_5_vl"), store_root=store.root, env=_env(tmp_path)) as client:
        first = client.info["conversation"]["id"]
        turn = list(client.send("One.", options={"max_new_tokens": 3}))[-1]
        # The turn carries the conversation it made: the message and its answer.
        assert turn["conversation"]["id"] == first
        assert [m["role"] for m in turn["conversation"]["messages"]] == ["user", "assistant"]
        assert turn["conversation"]["messages"][1]["token_ids"] == turn["value"]["token_ids"]
        second = client.new_conversation()["id"]
        list(client.send("Two.", options={"max_new_tokens": 3}))
        assert {s.id for s in store.list()} == {first, second}
        after = client.delete_conversation(first)
        assert after["id"] == second and {s.id for s in store.list()} == {second}
        # Deleting the open one moves the session to a new, empty conversation.
        after = client.delete_conversation(second)
        assert after["id"] not in (first, second) and after["messages"] == []
        assert store.list() == []
        with pytest.raises(MmforgeError, match="Not a conversation id"):
            client.delete_conversation("../elsewhere")


def test_a_folder_that_is_not_a_package_fails_before_the_session(tmp_path):
    with pytest.raises(MmforgeError, match="not an ONNX Runtime GenAI package"):
        ChatClient(tmp_path, save=False, env=_env(tmp_path))


def test_the_worker_renames_conversations_and_sets_the_system_prompt(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    with ChatClient(package("qwen2_5_vl"), store_root=store.root, env=_env(tmp_path)) as client:
        first = client.info["conversation"]["id"]
        assert client.set_system("Be brief.")["system"] == "Be brief."
        list(client.send("One.", options={"max_new_tokens": 3}))
        assert client.rename_conversation(first, "Open one")["title"] == "Open one"
        second = client.new_conversation()["id"]
        # Renaming a saved conversation that is not open leaves the open one as it is.
        held = client.rename_conversation(first, "Saved one")
        assert held["id"] == second
        with pytest.raises(MmforgeError, match="needs a title"):
            client.rename_conversation(first, " ")
    saved = store.load(first)
    assert saved.title == "Saved one" and saved.system == "Be brief."


@pytest.mark.parametrize("mode", ["carry", "summary"])
def test_the_worker_reports_the_new_conversation_a_full_one_goes_on_in(package, tmp_path, mode):
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["context_length"] = 160  # a context the conversation soon fills
    (folder / "genai_config.json").write_text(json.dumps(config))
    store = ConversationStore(tmp_path / "store")
    options = {"max_new_tokens": 8, "context_full": mode}
    with ChatClient(folder, store_root=store.root, env=_env(tmp_path)) as client:
        first = client.info["conversation"]["id"]
        for turn in range(30):
            events = list(client.send(f"Question number {turn}, please.", options=options))
            event = events[-1]
            assert event["event"] == "turn"
            held = event["conversation"]
            if held["id"] != first:
                break
        # While the model summarises, the user is told why the answer is slow to come.
        kinds = [e["event"] for e in events]
        assert ("note" in kinds) == (mode == "summary")
        if mode == "summary":
            assert kinds.index("note") < kinds.index("token")
            assert "summarising" in events[kinds.index("note")]["text"]
        assert held["title"].startswith("Continued: Question number 0")
        assert held["continues"] == first and bool(held["summary"]) == (mode == "summary")
        assert held["messages"][-1]["token_ids"] == event["value"]["token_ids"]
    assert {s.id for s in store.list()} == {first, held["id"]}
