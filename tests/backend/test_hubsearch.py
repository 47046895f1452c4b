"""Finding a model: the hub search against the local hub, family marks, near names."""

from __future__ import annotations

import pytest

from mmforge.backend.errors import MmforgeError
from mmforge.backend.hubsearch import OFFLINE, mark_for, search_models, suggestions
from mmforge.backend.known_models import known_models


def listed(repo_id: str, model_type: str | None, downloads: int, tag="image-text-to-text"):
    """A search entry as the hub sends it with `expand` (config holds model_type)."""
    entry = {"id": repo_id, "downloads": downloads, "pipeline_tag": tag, "tags": ["safetensors"]}
    if model_type:
        entry["config"] = {"model_type": model_type, "architectures": ["X"]}
    return entry


LISTED = [
    listed("Qwen/Qwen2.5-VL-3B-Instruct", "qwen2_5_vl", 900),
    listed("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", 1200),
    listed("llava-hf/llava-1.5-7b-hf", "llava", 500),
    listed("LanguageBind/Video-LLaVA-7B-hf", "video_llava", 50),
    listed("llava-hf/llava-v1.6-mistral-7b-hf", "llava_next", 40),
    listed("someone/llava-onevision-test", "llava_onevision", 30),
    listed("someone/mystery-vlm", None, 5),
    listed("LiquidAI/LFM2-VL-450M", "lfm2_vl", 300),
    listed("microsoft/Phi-4-multimodal-instruct", "phi4mm", 400, tag="any-to-any"),
]


def test_search_lists_multimodal_models_with_their_family_marks(hub):
    hub.state.listed = list(LISTED)
    result = search_models("qwen")
    assert [f.repo_id for f in result.found] == [
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "Qwen/Qwen2.5-VL-3B-Instruct",
    ]
    assert result.found[0].mark.words() == "Qwen2.5-VL: converts"
    # The query as list_models sends it: one request per pipeline tag, sorted, limited,
    # with the fields the marks need.
    first = hub.state.searches[0]
    assert first["sort"] == ["downloads"] and first["search"] == ["qwen"]
    assert {"config", "tags", "downloads"} <= set(first["expand"])
    assert {s["pipeline_tag"][0] for s in hub.state.searches} == {
        "image-text-to-text",
        "audio-text-to-text",
        "any-to-any",
    }
    every = search_models("")
    marks = {f.repo_id: f.mark for f in every.found}
    assert marks["llava-hf/llava-1.5-7b-hf"].words() == "LLaVA: converts"
    video = marks["LanguageBind/Video-LLaVA-7B-hf"]
    assert video.words() == "Video-LLaVA: converts"  # pictures (videos are refused in chat)
    assert marks["llava-hf/llava-v1.6-mistral-7b-hf"].words() == "LLaVA-NeXT: converts"
    onevision = marks["someone/llava-onevision-test"]
    assert onevision.verdict == "not converted" and onevision.family == "LLaVA-OneVision"
    assert "named but not converted (" in onevision.words()
    assert marks["someone/mystery-vlm"].words() == "unknown until inspected"
    assert marks["microsoft/Phi-4-multimodal-instruct"].verdict == "converts"


def test_marks_from_tags_text_only_and_speech_types():
    assert mark_for(None, ("transformers", "gemma3")).family == "Gemma 3"
    assert mark_for("qwen2").verdict == "not converted"
    assert "text-only" in mark_for("qwen2").reason
    assert mark_for("whisper").verdict == "not converted"
    assert mark_for("lfm2_audio").verdict == "not converted"
    assert mark_for("no_such_type").verdict == "unknown"
    # Remote code converts only with the user's consent, and the mark says so.
    phi3v = mark_for("phi3_v")
    assert phi3v.verdict == "converts with consent" and phi3v.family.startswith("Phi-3")
    assert phi3v.words().startswith(f"{phi3v.family}: converts with your consent (converting")
    assert "trust remote code" in phi3v.reason
    # A release no pipeline runs exactly (SmolVLM splits its pictures) converts only as an
    # approximation; the mark says what it gives up. InternVL's tiles convert exactly.
    mark = mark_for("smolvlm")
    assert mark.verdict == "converts with consent"
    assert mark.reason.startswith("an approximation: each picture seen whole")
    assert mark_for("internvl").verdict == "converts"
    assert mark_for("idefics2").verdict == "converts"  # splitting is off by default
    # The reason is short: its first clause, the details left out.
    assert mark_for("molmo").reason == (
        "ONNX Runtime GenAI 0.18 has no pipeline that gives its layout"
    )
    assert mark_for("llava_next").verdict == "converts"


def test_hostile_entries_are_dropped_or_cut(hub):
    hub.state.listed = [
        listed("good/model", "qwen2_5_vl", 10),
        listed("../../etc/passwd", "qwen2_5_vl", 99),
        listed("a/b/c", "qwen2_5_vl", 98),
        listed("<img src=/dev/zero>/x", "qwen2_5_vl", 97),
        {"id": 42},
        "not an object",
        {"id": "bad--name/x", "pipeline_tag": "image-text-to-text"},
        {
            "id": "ok/long-tags",
            "pipeline_tag": "image-text-to-text",
            "downloads": "many",
            "tags": ["x" * 10_000] * 100,
            "config": 5,
        },
    ]
    result = search_models("", tags=("image-text-to-text",))
    assert [f.repo_id for f in result.found] == ["good/model", "ok/long-tags"]
    assert result.found[1].downloads == 0
    assert result.dropped >= 5


def test_results_are_bounded(hub):
    hub.state.listed = [listed(f"org/model-{i}", "qwen2_5_vl", i) for i in range(500)]
    result = search_models("model")
    assert len(result.found) <= 50
    assert all(len(s) for s in hub.state.searches)
    assert {s["limit"][0] for s in hub.state.searches} == {"30"}


def test_the_token_never_goes_where_a_search_redirects(hub):
    from tests.hubserver import HubServer

    with HubServer(host="127.0.0.2") as elsewhere:  # another host
        elsewhere.state.listed = list(LISTED)
        hub.state.redirect_search_to = elsewhere.url
        result = search_models("qwen", token="hf_test_secret")
    assert [f.repo_id for f in result.found][:1] == ["Qwen/Qwen2.5-VL-7B-Instruct"]
    to_hub = {auth for path, auth in hub.state.authorization if path == "/api/models"}
    to_elsewhere = {auth for path, auth in elsewhere.state.authorization}
    assert to_hub == {"Bearer hf_test_secret"} and to_elsewhere == {None}


def test_an_answer_too_large_is_refused_unread(hub):
    hub.state.listed = [listed("org/model", "qwen2_5_vl", 1) | {"tags": ["x" * 9_000_000]}]
    with pytest.raises(MmforgeError, match="too large"):
        search_models("model")


def test_an_error_answer_is_one_sentence(hub):
    hub.state.listed = ["not", "used"]
    hub.state.redirect_search_to = hub.url + "/missing"  # the hub answers 404 there
    with pytest.raises(MmforgeError) as e:
        search_models("model")
    assert e.value.user_message == "The hub answered the search with an error"
    assert "HTTP 404" in (e.value.details or "")


def test_offline_says_one_plain_sentence(monkeypatch, hub):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MmforgeError) as e:
        search_models("qwen")
    assert e.value.user_message == OFFLINE and e.value.kind == "hub_offline"
    assert not hub.state.searches


def test_connection_refused_says_the_same(monkeypatch):
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(MmforgeError) as e:
        search_models("qwen")
    assert e.value.user_message == OFFLINE


def test_a_hub_that_never_answers_times_out(hub, monkeypatch):
    monkeypatch.setenv("MMFORGE_HUB_TIMEOUT", "0.5")
    hub.state.hang_api = True
    with pytest.raises(MmforgeError) as e:
        search_models("qwen")
    assert "did not answer" in e.value.user_message


def test_a_typo_gets_near_names(hub):
    hub.state.listed = list(LISTED)
    near = suggestions("Qwen/Qwen2.5-VL-3B-Instrcut")
    assert near[0].repo_id == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert near[0].mark.words() == "Qwen2.5-VL: converts"
    # Nothing matches the whole name: its first word is searched.
    assert "someone/mystery-vlm" in [f.repo_id for f in suggestions("someone/mystery-vln")]


def test_the_known_list_names_families_that_convert():
    from mmforge.backend.families import ALL
    from mmforge.backend.source import is_hub_id

    converting = {f.name for f in ALL if f.package is not None and not f.not_converted}
    models = known_models()
    assert len(models) >= 8
    for m in models:
        assert is_hub_id(m.repo_id), m.repo_id
        assert m.family in converting, m.family
    assert (
        "approximate"
        in __import__("mmforge.backend.known_models", fromlist=["known_note"]).known_note()
    )
