"""The chat engine: every turn equals a fresh prefill of the same ids and transformers."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mmforge import resources
from mmforge.backend.attachments import AUDIO, IMAGE, AttachmentError
from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.chat.conversations import ConversationStore, to_markdown
from mmforge.backend.errors import MmforgeError
from mmforge.backend.verify import hf_reference
from tests.backend.families import AUDIO as AUDIO_FAMILIES
from tests.backend.families import TESTED, lookup_key

ALL = TESTED  # every family, from the registry


# The released Qwen3.5/3.6 template renders an earlier answer without the "<think>\n" the
# generation prompt opened it with, so the new prompt does not extend the old one and the
# session prefills afresh (exactly, as the checks below show).
# LLaVA-1.5's released template (VipLLaVA's and LLaVA-NeXT's tiny use it too) writes an
# earlier answer as "ASSISTANT: " + its text + " " where the generation prompt ended at
# "ASSISTANT:": the same (and Video-LLaVA's, reconstructed from its author's LLaVA-NeXT-Video
# template).
# Idefics2's released template writes an earlier answer as "Assistant: " + its text +
# "<end_of_utterance>\n" where the generation prompt ended at "Assistant:" (Idefics3's and
# SmolVLM's templates likewise).
REWRITES_HISTORY = {
    *("qwen3_5", "qwen3_5_moe", "llava", "vipllava", "video_llava", "llava_next", "idefics2"),
    *("idefics3", "smolvlm"),
}


def _greedy(n: int) -> GenerationOptions:
    return GenerationOptions(max_new_tokens=n)


def _files(family: str) -> list[tuple[Path, str]]:
    files = [(resources.probe_image(), IMAGE)]
    if family in AUDIO_FAMILIES:
        files.append((resources.probe_audio(), AUDIO))
    return files


def _strip_eos(tokens: list[int], eos: tuple[int, ...]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def _fresh(session: ChatSession, messages: int, n: int) -> tuple[list[int], dict]:
    """Greedy tokens of a brand-new generator prefilled with the session's exact ids for
    its first `messages` messages, and the processor arrays holding those ids."""
    rt = session.runtime
    og = rt.og
    ids = session.context_ids(messages)
    assert ids is not None
    prompt = session.prompt_text(messages)
    held = [a for m in session.messages[:messages] for a in m.attachments]
    images = [a.path for a in held if a.kind == IMAGE]
    audios = [a.path for a in held if a.kind == AUDIO]
    params = og.GeneratorParams(rt.model)
    params.set_search_options(max_length=4096, do_sample=False, top_k=1)
    gen = og.Generator(rt.model, params)
    if images or audios:
        inputs = rt.process(prompt, images, audios)
        dtype = inputs.arrays["input_ids"].dtype
        inputs.named["input_ids"] = og.Tensor(np.asarray([ids], dtype=dtype))
        gen.set_inputs(inputs.named)
        arrays = dict(inputs.arrays)
    else:
        gen.append_tokens(np.asarray(ids, dtype=np.int32))
        arrays = {}
    arrays["input_ids"] = np.asarray([ids], dtype=np.int64)
    out: list[int] = []
    while len(out) < n and not gen.is_done():
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return _strip_eos(out, session.info.eos_token_ids), {"prompt": prompt, "arrays": arrays}


def _hf(checkpoint: Path, fresh: dict, n: int, eos: tuple[int, ...]) -> list[int]:
    ref = hf_reference.from_runtime(checkpoint, fresh["prompt"], fresh["arrays"])
    return _strip_eos(
        hf_reference.greedy_generate(hf_reference.load_model(checkpoint), ref, n), eos
    )


# Families whose template takes one user message (PaliGemma): no second turn to continue.
ONE_MESSAGE = {f for f in ALL if lookup_key(f).fixtures.expect.one_message}
TURNS = [f for f in ALL if f not in ONE_MESSAGE]


@pytest.mark.parametrize("family", sorted(ONE_MESSAGE))
def test_one_message_equals_transformers_and_a_second_turn_is_refused(tiny, package, family):
    session = ChatSession(package(family))
    attachments = session.prepare_attachments(_files(family))
    first = session.send("Describe this.", attachments, _greedy(16))
    fresh, inputs = _fresh(session, 1, 16)
    assert first.token_ids == fresh
    hf = _hf(tiny(family), inputs, 16, session.info.eos_token_ids)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    assert first.token_ids == hf
    with pytest.raises(MmforgeError, match="chat template refuses this conversation"):
        session.send("And then?", options=_greedy(4))
    assert len(session.messages) == 2  # the refused message went back to the draft
    session = ChatSession(package(family))
    session.set_system("Answer like a pirate.")
    with pytest.raises(MmforgeError, match="one user message"):
        session.send("Hello.", options=_greedy(4))


@pytest.mark.parametrize("family", TURNS)
def test_a_continued_turn_equals_a_fresh_prefill_and_transformers(tiny, package, family):
    session = ChatSession(package(family))
    attachments = session.prepare_attachments(_files(family))
    first = session.send("Describe this.", attachments, _greedy(8))
    assert first.stop_reason == "length" and len(first.token_ids) == 8
    second = session.send("And then?", options=_greedy(16))
    if family in REWRITES_HISTORY:
        assert second.stats.prefill == "fresh"
    elif session.info.can_rewind:
        assert second.stats.prefill == "continued"
        assert second.stats.prefill_tokens < second.stats.prompt_tokens
    else:  # LFM2: the unprocessed last token cannot be rewound into a conv state
        assert family == "lfm2_vl" and second.stats.prefill == "fresh"

    fresh, inputs = _fresh(session, 3, 16)
    assert second.token_ids == fresh
    hf = _hf(tiny(family), inputs, 16, session.info.eos_token_ids)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    assert second.token_ids == hf


def test_stop_mid_answer_then_continue_equals_a_fresh_prefill(package):
    session = ChatSession(package("gemma3"))
    seen: list[int] = []
    first = session.send(
        "Describe this.",
        session.prepare_attachments(_files("gemma3")),
        _greedy(200),
        on_token=lambda text, token: seen.append(token),
        should_stop=lambda: len(seen) >= 5,
    )
    assert first.stop_reason == "stopped" and first.token_ids == seen and len(seen) == 5
    second = session.send("Go on.", options=_greedy(16))
    assert second.stats.prefill == "continued"
    assert second.token_ids == _fresh(session, 3, 16)[0]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "lfm2_vl"])
def test_continue_after_an_answer_that_ended_on_eos(tiny, package, tmp_path, family):
    """Make a token the model emits at step 4 the EOS, so the first answer ends on it.
    Nothing is left unprocessed then, so even LFM2 (no rewind) continues its state."""
    original = package(family)
    probe = ChatSession(original).send("Describe this.", options=_greedy(8)).token_ids
    step = next(i for i in range(3, 8) if probe[i] not in probe[:i])
    folder = tmp_path / "pkg"
    shutil.copytree(original, folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["eos_token_id"] = [probe[step]]
    (folder / "genai_config.json").write_text(json.dumps(config))

    session = ChatSession(folder)
    first = session.send("Describe this.", options=_greedy(8))
    assert first.stop_reason == "eos" and first.token_ids == probe[:step]
    second = session.send("And then?", options=_greedy(16))
    assert second.stats.prefill == "continued"
    fresh, inputs = _fresh(session, 3, 16)
    assert second.token_ids == fresh
    assert second.token_ids == _hf(tiny(family), inputs, 16, (probe[step],))


@pytest.mark.parametrize("family", ["qwen2_5_vl", "gemma3"])
def test_an_image_in_a_later_turn_prefills_the_whole_history(tiny, package, family):
    session = ChatSession(package(family))
    session.send("Hello there.", options=_greedy(8))
    second = session.send(
        "What is in this picture?", session.prepare_attachments(_files(family)), _greedy(16)
    )
    assert second.stats.prefill == "fresh"
    fresh, inputs = _fresh(session, 3, 16)
    assert second.token_ids == fresh
    assert second.token_ids == _hf(tiny(family), inputs, 16, session.info.eos_token_ids)


def test_regenerate_and_edit_last(package):
    session = ChatSession(package("qwen2_5_vl"))
    session.send("Describe this.", session.prepare_attachments(_files("qwen2_5_vl")), _greedy(8))
    answer = session.send("And then?", options=_greedy(16))
    again = session.regenerate(_greedy(16))
    assert again.token_ids == answer.token_ids
    assert [m.role for m in session.messages] == ["user", "assistant"] * 2

    edited = session.edit_last("What colour is it?", options=_greedy(16))
    assert session.messages[-2].text == "What colour is it?"
    assert session.messages[-2].attachments == []
    reference = ChatSession(package("qwen2_5_vl"))
    reference.send(
        "Describe this.", reference.prepare_attachments(_files("qwen2_5_vl")), _greedy(8)
    )
    assert edited.token_ids == reference.send("What colour is it?", options=_greedy(16)).token_ids


def test_sampling_repeats_with_a_seed_and_changes_without(package):
    session = ChatSession(package("qwen2_5_vl"))

    def sample(seed: int) -> GenerationOptions:
        return GenerationOptions(max_new_tokens=24, do_sample=True, temperature=1.5, seed=seed)

    first = session.send("Tell me a story.", options=sample(7)).token_ids
    assert session.regenerate(sample(7)).token_ids == first
    assert session.regenerate(sample(8)).token_ids != first
    greedy = session.regenerate(_greedy(24)).token_ids
    assert session.regenerate(_greedy(24)).token_ids == greedy


def test_a_repeat_penalty_reaches_the_runtime_and_greedy_answers_repeat_less(package):
    """Issue 31: Repeat penalty, as chat apps have it; it applies to greedy answers too."""
    session = ChatSession(package("qwen2_5_vl"))
    plain = session.send("Say it again and again.", options=_greedy(32)).token_ids
    assert len(set(plain)) < len(plain)  # a random-weight model repeats itself
    penalised = GenerationOptions(max_new_tokens=32, repetition_penalty=2.0)
    again = session.regenerate(penalised).token_ids
    assert again != plain
    assert len(set(again)) > len(set(plain)), (plain, again)
    with pytest.raises(MmforgeError, match=r"repetition_penalty 11\.0 is out of range"):
        GenerationOptions(repetition_penalty=11.0)
    assert GenerationOptions(repetition_penalty=1.3).search_options(9)["repetition_penalty"] == 1.3
    assert "repetition_penalty" not in GenerationOptions().search_options(9)


def test_conversations_persist_with_copies_of_their_attachments(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(package("gemma4"), store=store)
    attachments = session.prepare_attachments(_files("gemma4"))
    answer = session.send("What is this?", attachments, _greedy(8))

    [summary] = store.list()
    assert summary.title == "What is this?" and summary.messages == 2
    saved = store.load(summary.id)
    user, reply = saved.messages
    assert [a.kind for a in user.attachments] == [IMAGE, AUDIO]
    for a in user.attachments:
        assert a.path.is_file() and a.path.is_relative_to(store.folder(summary.id))
    assert reply.token_ids == answer.token_ids and reply.stop_reason == "length"

    # A new session continues it: the history is prefilled afresh, with its attachments.
    resumed = ChatSession(package("gemma4"), store=store, conversation=saved)
    turn = resumed.send("And then?", options=_greedy(8))
    assert turn.stats.prefill == "fresh" and len(store.load(summary.id).messages) == 4

    store.delete(summary.id)
    assert store.list() == [] and not store.folder(summary.id).exists()


def test_a_damaged_conversation_file_is_reported_and_skipped(tmp_path):
    store = ConversationStore(tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "conversation.json").write_text("{not json")
    assert store.list() == []
    with pytest.raises(MmforgeError, match="damaged"):
        store.load("broken")
    with pytest.raises(MmforgeError, match="Not a conversation id"):
        store.load("../elsewhere")


def test_attachments_the_model_cannot_take_are_refused_and_nothing_changes(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(package("qwen2_5_vl"), store=store)
    session.send("Hi.", options=_greedy(4))
    saved = (store.folder(session.conversation.id) / "conversation.json").read_text()
    before = list(session.messages)

    with pytest.raises(AttachmentError, match="cannot hear audio"):
        session.prepare_attachments([(resources.probe_audio(), AUDIO)])
    session.info = dataclasses.replace(session.info, vision=False)
    with pytest.raises(AttachmentError, match="cannot see images"):
        session.prepare_attachments([(resources.probe_image(), IMAGE)])
    assert session.messages == before
    assert (store.folder(session.conversation.id) / "conversation.json").read_text() == saved


def test_phi4mm_takes_a_second_image_in_a_later_turn(tiny, package, tmp_path):
    from PIL import Image

    small = tmp_path / "small.png"
    Image.open(resources.probe_image()).resize((96, 64)).save(small)
    session = ChatSession(package("phi4mm"))
    session.send("Look.", session.prepare_attachments(_files("phi4mm")), _greedy(4))
    second = session.send("And this?", session.prepare_attachments([(small, IMAGE)]), _greedy(16))
    assert second.stats.prefill == "fresh"
    fresh, inputs = _fresh(session, 3, 16)
    assert second.token_ids == fresh
    assert second.token_ids == _hf(tiny("phi4mm"), inputs, 16, session.info.eos_token_ids)


def test_a_phi4mm_package_from_before_the_per_image_graph_takes_one_image(package, tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(package("phi4mm"), folder)
    manifest = json.loads((folder / "mmforge_manifest.json").read_text())
    manifest["notes"] = [n for n in manifest["notes"] if "once per image" not in n]
    manifest.pop("max_images", None)  # (packages of then had no such field)
    (folder / "mmforge_manifest.json").write_text(json.dumps(manifest))
    session = ChatSession(folder)
    session.send("Look.", session.prepare_attachments(_files("phi4mm")), _greedy(4))
    with pytest.raises(AttachmentError, match="1 image per conversation"):
        session.prepare_attachments([(resources.probe_image(), IMAGE)])


def test_a_failed_turn_gives_the_message_back(package, tmp_path):
    """The context limit is checked before anything runs; the message leaves the history."""
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(folder, store=store)
    session.info = dataclasses.replace(session.info, context_length=40)
    session.send("Hi.", options=_greedy(4))
    with pytest.raises(MmforgeError, match="does not fit the model's context"):
        session.send("word " * 60, options=_greedy(4))
    assert [m.text for m in session.messages][:1] == ["Hi."] and len(session.messages) == 2
    assert len(store.load(session.conversation.id).messages) == 2


def test_an_image_the_runtime_cannot_resize_is_a_clear_error_and_nothing_is_lost(package, tmp_path):
    from PIL import Image

    wide = tmp_path / "wide.png"
    Image.new("RGB", (1000, 50), (200, 30, 30)).save(wide)  # ORT GenAI 0.18: resize fails
    session = ChatSession(package("lfm2_vl"))
    session.send("Hi.", options=_greedy(4))
    # transformers' size for it is one the runtime's processor would change: refused when
    # it is attached, before anything reaches the runtime.
    with pytest.raises(AttachmentError, match=r"wide\.png: transformers sizes it to") as e:
        session.send("What is this?", session.prepare_attachments([(wide, IMAGE)]), _greedy(4))
    assert "Crop the image closer to a square" in e.value.one_line()
    assert len(session.messages) == 2
    # The session still answers afterwards.
    assert len(session.send("And now?", options=_greedy(4)).token_ids) == 4


def test_images_the_runtime_cannot_batch_get_a_hint_that_helps(package, tmp_path):
    """ORT GenAI 0.18 pads an LFM2-VL prompt's images into one of their sizes."""
    from PIL import Image

    wide = tmp_path / "wide.png"
    Image.new("RGB", (200, 100), (20, 160, 40)).save(wide)  # 64x160 after resizing
    session = ChatSession(package("lfm2_vl"))
    session.send(
        "Look.", session.prepare_attachments([(resources.probe_image(), IMAGE)]), _greedy(4)
    )
    with pytest.raises(MmforgeError, match="could not prepare the attachments") as e:
        session.send("And this?", session.prepare_attachments([(wide, IMAGE)]), _greedy(4))
    assert "images of one size and shape" in e.value.one_line()
    assert len(session.messages) == 2


def test_cuda_is_refused_with_the_reason_where_it_is_missing(package):
    import onnxruntime_genai as og

    if og.is_cuda_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(MmforgeError, match=r"Cannot run on CUDA: .*onnxruntime-genai-cuda"):
        ChatSession(package("qwen2_5_vl"), ep="cuda")


def test_empty_messages_and_bad_options_are_refused(package):
    session = ChatSession(package("qwen2_5_vl"))
    with pytest.raises(MmforgeError, match="empty"):
        session.send("   ")
    with pytest.raises(MmforgeError, match="Unknown generation options: beams"):
        GenerationOptions.from_dict({"beams": 2})
    with pytest.raises(MmforgeError, match="temperature > 0"):
        GenerationOptions(do_sample=True, temperature=0)
    assert session.messages == []


def test_cuda_is_offered_only_where_a_gpu_answers(monkeypatch):
    import ctypes

    import onnxruntime_genai as og

    from mmforge.backend.chat import values

    monkeypatch.setattr(og, "is_cuda_available", lambda: False)
    assert "no CUDA support" in values.available_eps()["cuda"]
    # A CUDA build on a machine without a GPU (what onnxruntime-genai-cuda says is
    # "available"): the driver decides.
    monkeypatch.setattr(og, "is_cuda_available", lambda: True)

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    eps = values.available_eps()
    assert eps["cpu"] is None and "No NVIDIA driver" in eps["cuda"]

    class Driver:
        def __init__(self, name: str, devices: int):
            self.devices = devices

        def cuInit(self, flags):
            return 0

        def cuDeviceGetCount(self, count):
            count._obj.value = self.devices
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Driver(name, 0))
    assert "reports no GPU" in values.available_eps()["cuda"]
    monkeypatch.setattr(ctypes, "CDLL", lambda name: Driver(name, 1))
    assert values.available_eps()["cuda"] is None


@pytest.mark.parametrize("family", TURNS)
def test_a_system_prompt_reaches_the_model_and_later_turns_continue_exactly(package, family):
    session = ChatSession(package(family))
    session.set_system("Answer like a pirate.")
    session.send("Hello.", options=_greedy(4))
    # (Rendered with its message: released templates refuse a conversation without one.)
    assert session.prompt_text(1).count("Answer like a pirate.") == 1
    second = session.send("And then?", options=_greedy(8))
    fresh, _ = _fresh(session, 3, 8)
    assert second.token_ids == fresh
    # A new system prompt mid-conversation prefills the history afresh under it.
    session.set_system("Answer in French.")
    third = session.send("Again?", options=_greedy(4))
    assert third.stats.prefill == "fresh"
    assert "Answer in French." in session.prompt_text(5)


def test_conversations_keep_their_system_prompt_and_titles(package, tmp_path):
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(package("qwen2_5_vl"), store=store)
    session.set_system("Be brief.")
    session.rename("My  chat\nabout things")
    session.send("Hi.", options=_greedy(2))
    [summary] = store.list()
    saved = store.load(summary.id)
    assert saved.system == "Be brief." and saved.title == "My chat about things"
    before = saved.updated
    assert store.rename(summary.id, "Renamed").title == "Renamed"
    assert store.load(summary.id).updated == before  # a rename does not move it up the list
    with pytest.raises(MmforgeError, match="needs a title"):
        store.rename(summary.id, "  \n ")


def test_a_conversation_past_the_context_drops_its_oldest_turns_and_keeps_answering(
    package, tmp_path
):
    """30 turns through a 160-token context: every send answers; the oldest exchanges leave
    the model's view (never the system prompt), stay saved, and `forgotten` says how many."""
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(folder, store=store)
    session.info = dataclasses.replace(session.info, context_length=160)
    session.set_system("Be brief.")
    for turn in range(30):
        result = session.send(f"Question number {turn}, please.", options=_greedy(8))
        assert result.stats.prompt_tokens < 160
    forgotten = session.conversation.forgotten
    assert 0 < forgotten < len(session.messages) - 1 and forgotten % 2 == 0
    prompt = session.prompt_text()
    assert "Be brief." in prompt and "Question number 29" in prompt
    assert "Question number 0," not in prompt
    saved = store.load(session.conversation.id)
    assert len(saved.messages) == 60 and saved.forgotten == forgotten
    # A later turn that continues the generator still equals a fresh prefill of its ids.
    session.send("One more.", options=_greedy(4))
    ids, _ = _fresh(session, len(session.messages) - 1, 4)
    assert ids[: len(session.messages[-1].token_ids)] == session.messages[-1].token_ids


def test_context_full_stop_refuses_instead_of_dropping(package, tmp_path):
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    session = ChatSession(folder)
    session.info = dataclasses.replace(session.info, context_length=60)
    stop = GenerationOptions(max_new_tokens=4, context_full="stop")
    with pytest.raises(MmforgeError, match="does not fit the model's context"):
        for turn in range(20):
            session.send(f"Question number {turn}, please.", options=stop)
    assert session.conversation.forgotten == 0
    with pytest.raises(MmforgeError, match="context_full"):
        GenerationOptions(context_full="later")


def _full_conversation(package, tmp_path, mode: str):
    """A saved conversation with a 160-token context, sent to until it is carried on."""
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(folder, store=store)
    session.info = dataclasses.replace(session.info, context_length=160)
    session.set_system("Be brief.")
    session.rename("Trip plans")
    options = GenerationOptions(max_new_tokens=8, context_full=mode)
    first = session.conversation.id
    for turn in range(30):
        result = session.send(f"Question number {turn}, please.", options=options)
        assert result.stats.prompt_tokens < 160
        if session.conversation.id != first:
            return session, store, first, turn
    raise AssertionError("the conversation was never carried on")


def test_a_full_conversation_goes_on_in_a_new_one_carrying_the_last_turns(package, tmp_path):
    session, store, first, turn = _full_conversation(package, tmp_path, "carry")
    new = session.conversation
    old = store.load(first)
    # The old one is kept as it was before the message that did not fit.
    assert old.messages[-1].role == "assistant" and len(old.messages) == 2 * turn
    assert old.title == "Trip plans" and not old.continues
    # The new one is listed, linked, and opens with the last exchanges that fit.
    saved = store.load(new.id)
    assert saved.title == "Continued: Trip plans" and saved.continues == first
    assert saved.system == "Be brief." and saved.forgotten == 0 and not saved.summary
    texts = [m.text for m in saved.messages]
    assert texts[-2] == f"Question number {turn}, please."
    assert saved.messages[-1].role == "assistant"
    carried = texts[:-2]
    assert carried and carried == [m.text for m in old.messages[-len(carried) :]]
    assert saved.messages[0].role == "user" and "Question number 0," not in texts
    assert {s.id for s in store.list()} == {first, new.id}
    prompt = session.prompt_text()
    assert "Be brief." in prompt and carried[0] in prompt
    # It keeps answering, continuing its own generator.
    after = session.send("One more.", options=GenerationOptions(max_new_tokens=4))
    assert session.conversation.id == new.id and after.stats.prompt_tokens < 160


def test_a_full_conversation_goes_on_in_a_new_one_opening_with_the_models_summary(
    package, tmp_path
):
    session, store, first, turn = _full_conversation(package, tmp_path, "summary")
    saved = store.load(session.conversation.id)
    assert saved.title == "Continued: Trip plans" and saved.continues == first
    # The summary is the model's own answer to a bounded request, not a message.
    assert saved.summary and len(session.runtime.tokenizer.encode(saved.summary)) <= 40
    assert [m.role for m in saved.messages] == ["user", "assistant"]
    assert saved.messages[0].text == f"Question number {turn}, please."
    prompt = session.prompt_text()
    assert "Be brief." in prompt and "Summary of the earlier part" in prompt
    assert saved.summary in prompt and "Question number 0," not in prompt
    assert len(store.load(first).messages) == 2 * turn
    assert "Summary of the earlier conversation" in to_markdown(saved)


def test_carrying_on_keeps_the_attachments_in_the_new_conversation(package, tmp_path):
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    store = ConversationStore(tmp_path / "store")
    session = ChatSession(folder, store=store)
    options = GenerationOptions(max_new_tokens=4, context_full="carry")
    session.send("Look.", session.prepare_attachments(_files("qwen2_5_vl")), options)
    first = session.conversation.id
    used = session.prompt_text()
    limit = len(session.runtime.tokenizer.encode(used)) + 40
    session.info = dataclasses.replace(session.info, context_length=limit)
    for turn in range(10):
        session.send(f"And now {turn}?", options=options)
        if session.conversation.id != first:
            break
    new = session.conversation
    assert new.id != first
    held = [a for m in new.messages for a in m.attachments]
    for a in held:  # a carried picture is the new conversation's own copy
        assert a.path.is_relative_to(store.folder(new.id)) and a.path.is_file()


def test_a_damaged_processor_file_is_named_not_the_attachment(package, tmp_path):
    """The runtime's "failed to parse processor json" read as a bad attachment, with advice
    to crop the image. The package's processor JSON is read (and its pixel bounds checked)
    when the package loads, before the runtime sees it (issue 47)."""
    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    (folder / "processor_config.json").write_text("{damaged")
    with pytest.raises(MmforgeError) as e:
        ChatSession(folder)
    said = e.value.one_line()
    assert f"{folder / 'processor_config.json'} is not valid JSON" in said
    assert "crop" not in said


def test_a_nul_in_the_history_does_not_cut_the_next_prompt(package):
    """The runtime renders and tokenizes text only up to a NUL: an answer holding one (the
    demo's random model wrote byte 0 after 1,680 tokens) cut every later prompt there,
    and a picture sent next failed with "Prompt contained 0 vision_start tokens"."""
    session = ChatSession(package("qwen2_5_vl"))
    session.send("Hello\x00 there, what can you do?", options=_greedy(4))
    prompt = session.runtime.prompt(session._template_messages())
    assert "there, what can you do?" in prompt
    answer = session.send(
        "Describe this.", session.prepare_attachments(_files("qwen2_5_vl")), _greedy(4)
    )
    assert answer.token_ids


def test_runtime_refusals_name_whose_fault_they_are():
    from mmforge.backend.chat.session import _attachment_failure

    lost = _attachment_failure("Prompt contained 0 vision_start tokens but received 1 images.")
    assert "new conversation" in lost.one_line() and "crop" not in lost.one_line()
    wide = _attachment_failure("[Resize]: ImagingResample failed")
    assert "crop such an image closer to square" in wide.one_line()
