"""Gemma 3n (pictures and text) on ONNX Runtime GenAI's gemma3 pipeline.

The runtime's ids and pixels are transformers' own Gemma3nProcessor's, chat answers as
transformers' `generate` does with pictures people send, the package's KV cache count is
the layers that own one, and what the family cannot take is refused in words.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.errors import MmforgeError
from tests.images import CONVERSATIONS, make_tone, noise_picture, user_pictures


def _hf_processor(checkpoint: Path):
    from transformers import (
        AutoTokenizer,
        Gemma3nAudioFeatureExtractor,
        Gemma3nProcessor,
        SiglipImageProcessor,
    )

    return Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(),
        image_processor=SiglipImageProcessor.from_pretrained(checkpoint),
        tokenizer=AutoTokenizer.from_pretrained(checkpoint),
    )


def _runtime(package: Path, messages: list, pictures: list[Path]) -> dict[str, np.ndarray]:
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(package)))
    tokenizer = og.Tokenizer(model)
    prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
    named = model.create_multimodal_processor()(
        prompt, images=og.Images.open(*[str(p) for p in pictures])
    )
    return {key: named[key].as_numpy() for key in named.keys()}  # noqa: SIM118 - not a dict


@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
def test_the_runtime_gives_gemma3n_processors_ids_and_pixels(tiny, package, tmp_path, conversation):
    """Pictures at the processor's size (no resize either side): the runtime's ids are
    Gemma3nProcessor's for one picture and for a conversation ending with two, and its
    pixels the image processor's (rescaled, not normalised)."""
    from PIL import Image

    messages = CONVERSATIONS[conversation]
    n = sum(part["type"] == "image" for m in messages for part in m["content"])
    pictures = [noise_picture(tmp_path, f"p{i}.png", 128, 128, seed=i) for i in range(n)]
    arrays = _runtime(package("gemma3n"), messages, pictures)
    processor = _hf_processor(tiny("gemma3n"))
    text = processor.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    hf = processor(text=text, images=[Image.open(p).convert("RGB") for p in pictures])
    ids = arrays["input_ids"].reshape(-1).tolist()
    assert ids == list(hf["input_ids"][0])
    soft = json.loads((tiny("gemma3n") / "config.json").read_text())["image_token_id"]
    assert ids.count(soft) == 256 * n  # <image_soft_token>, 256 a picture
    pixels = np.asarray(hf["pixel_values"], dtype=np.float32)
    assert pixels.min() >= 0.0  # rescaled to [0, 1], not normalised to [-1, 1]
    assert np.abs(arrays["pixel_values"].reshape(pixels.shape) - pixels).max() < 1e-6


def test_the_package_caches_keys_for_the_layers_that_own_them(package):
    """6 layers, the last 2 sharing: 4 caches, and the embedding hands over the per-layer
    inputs whole."""
    config = json.loads((package("gemma3n") / "genai_config.json").read_text())["model"]
    assert config["type"] == "gemma3"
    assert config["decoder"]["num_hidden_layers"] == 4
    assert config["decoder"]["inputs"]["per_layer_inputs"] == "per_layer_inputs"
    assert config["embedding"]["outputs"]["per_layer_inputs"] == "per_layer_inputs"
    import onnx

    decoder = onnx.load(str(package("gemma3n") / "decoder.onnx"), load_external_data=False)
    pasts = [i.name for i in decoder.graph.input if i.name.startswith("past_key_values.")]
    assert sorted(pasts) == sorted(
        f"past_key_values.{i}.{kv}" for i in range(4) for kv in ("key", "value")
    )


def _chat_against_generate(package_folder: Path, source: Path, pictures: list[Path]) -> tuple:
    from transformers.image_utils import load_image

    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions
    from mmforge.backend.verify import hf_reference

    session = ChatSession(package_folder)
    attachments = session.prepare_attachments([(p, IMAGE) for p in pictures])
    answer = session.send("Describe them.", attachments, GenerationOptions(max_new_tokens=16))
    content = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": "Describe them."}]
    processor = _hf_processor(source)
    messages = [{"role": "user", "content": content}]
    text = processor.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    inputs = processor(
        text=text, images=[load_image(str(p)) for p in pictures], return_tensors="pt"
    )
    model = hf_reference.load_model(source)
    out = model.generate(
        input_ids=inputs["input_ids"],
        attention_mask=inputs["attention_mask"],
        pixel_values=inputs["pixel_values"],
        max_new_tokens=16,
        do_sample=False,
    )
    hf_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    return list(answer.token_ids), hf_tokens, answer.stop_reason


def test_chat_with_photos_people_send_answers_as_transformers(tiny, package, tmp_path):
    """A 4:2:0 JPEG, an EXIF-rotated phone JPEG, a palette PNG with transparency and a
    70×56 PNG (a resize tie for Qwen's rounding; here 128 / 70 and 128 / 56 are not whole),
    of four shapes, in one message: transformers' greedy tokens (16) from its own processor
    on load_image's pictures."""
    sent = user_pictures(tmp_path, big=(64, 48))
    pictures = [sent["jpeg"], sent["exif"], sent["palette"], sent["tie"]]
    ours, hf_tokens, stop = _chat_against_generate(package("gemma3n"), tiny("gemma3n"), pictures)
    assert len(set(hf_tokens)) >= 4
    assert ours == hf_tokens[: len(ours)]
    assert len(ours) == 16 or stop != "length"


def test_chat_refuses_a_clip(package, tmp_path):
    """The audio tower is not converted: a clip gets a sentence, not a traceback."""
    import soundfile

    from mmforge.backend.attachments import AUDIO
    from mmforge.backend.chat.session import ChatSession

    clip = tmp_path / "tone.wav"
    soundfile.write(clip, *make_tone())
    session = ChatSession(package("gemma3n"))
    with pytest.raises(MmforgeError, match="cannot hear audio"):
        session.prepare_attachments([(clip, AUDIO)])


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}", "writes no"),
        ("<start_of_image><image_soft_token>", "writes <start_of_image> itself"),
    ],
)
def test_a_template_the_runtime_cannot_host_is_refused(template, message, tmp_path):
    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.tokens import adapt_tokenizer

    with pytest.raises(MmforgeError, match=message):
        adapt_tokenizer({}, {"chat_template": template}, Cfg({}), tmp_path)


def test_the_package_template_writes_the_runtimes_marker(tiny):
    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.tokens import adapt_tokenizer

    config = json.loads((tiny("gemma3n") / "tokenizer_config.json").read_text())
    released = config["chat_template"]
    adapt_tokenizer({}, config, Cfg({}), tiny("gemma3n"))
    assert "<image_soft_token>" in released and "<image_soft_token>" not in config["chat_template"]
    assert config["chat_template"] == released.replace("<image_soft_token>", "<start_of_image>")


def test_without_timm_verify_says_what_to_install(monkeypatch):
    import importlib.util

    from mmforge.backend.families.gemma3n import timm_import

    real = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "timm", raising=False)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a)
    )
    with pytest.raises(MmforgeError, match="timm, which is not installed") as raised:
        timm_import.import_timm()
    assert "pip install timm" in (raised.value.hint or "")
    assert isinstance(raised.value, ImportError)  # inspect then says the count is unknown


def test_a_torchvision_stand_in_raises_if_anything_calls_it():
    """Where torchvision does not load, timm is imported with stand-ins: calling one is an
    error that names it, so nothing can compute through a stand-in unnoticed."""
    from mmforge.backend.families.gemma3n.timm_import import import_timm

    timm = import_timm()
    from timm.layers import create_norm

    if "torchvision" in sys.modules:  # a working torchvision: nothing stands in
        pytest.skip("torchvision loads here")
    assert "torchvision" not in sys.modules  # the stand-ins left once timm was in
    with pytest.raises(RuntimeError, match="torchvision did not load"):
        create_norm.FrozenBatchNorm2d(4)
    assert timm.create_model  # the real timm


@pytest.mark.parametrize(
    ("text", "pre", "message"),
    [
        ({"num_hidden_layers": 3, "num_kv_shared_layers": 3}, {}, "no earlier layer"),
        (
            {"layer_types": ["full_attention", "sliding_attention"], "num_hidden_layers": 2,
             "num_kv_shared_layers": 1},
            {},
            "sliding_attention",
        ),
        ({}, {"size": {"height": 768, "width": 512}}, "square"),
    ],
)  # fmt: skip
def test_a_config_the_graphs_cannot_follow_is_refused_in_words(text, pre, message):
    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.build import picture_size
    from mmforge.backend.families.gemma3n.graphs import Text

    with pytest.raises(MmforgeError, match=message):
        Text(Cfg({"text_config": text}))
        picture_size(Cfg(pre))


def test_verify_passes_with_photos_people_send(package, tiny, tmp_path):
    """Verify with a 4:2:0 JPEG, an EXIF-rotated phone JPEG and a resize-tie PNG in place
    of the probe: every stage PASS, the answer token for token."""
    from mmforge.backend.verify import verify

    sent = user_pictures(tmp_path, big=(64, 48))
    report = verify(
        package("gemma3n"),
        str(tiny("gemma3n")),
        images=[sent["jpeg"], sent["exif"], sent["tie"]],
        tokens=16,
    )
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
    assert {c.name for c in report.components} >= {"vision_encoder", "embedding_per_layer"}


def test_a_tower_mmforge_does_not_build_exits_2_in_words(tiny, tmp_path, capsys):
    """A tower timm builds otherwise (model_args beyond the channel multiplier): the CLI
    says so in one line and exits 2, writing nothing."""
    import shutil

    from mmforge.app.cli import main

    source = tmp_path / "gemma3n"
    shutil.copytree(tiny("gemma3n"), source)
    config = json.loads((source / "config.json").read_text())
    config["vision_config"]["model_args"] = {"pad_type": ""}
    (source / "config.json").write_text(json.dumps(config))
    assert main(["convert", str(source), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'pad_type'" in err[0] and "release's config.json" in err[0]
    assert not (tmp_path / "out").exists()
