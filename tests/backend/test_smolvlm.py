"""Idefics3 and SmolVLM on videochat_flash_qwen: ids, pixels, tower, answers, and splitting.

The registry-wide tests convert, verify and chat with both tiny checkpoints (one
picture); these hold the pieces against transformers' own Idefics3Processor (SmolVLM's
cannot be built here: it needs num2words and torchvision) and models, with two pictures,
text after a picture, a JPEG, and the splitting checkpoints that convert only with consent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.attachments import IMAGE
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families.idefics3.graphs import tokens_per_image
from mmforge.backend.families.idefics3.reference import expand
from mmforge.backend.families.idefics3.tokenizer import FAKE_TEXT, IMAGE_TEXT, PIECES
from mmforge.backend.picture_sizing import rescaled_to_edge
from tests.images import CONVERSATIONS, noise_picture

FAMILIES = ["idefics3", "smolvlm"]


def _hf_processor(source: Path):
    """transformers' Idefics3Processor on the checkpoint's tokenizer and image processor."""
    from transformers import AutoImageProcessor, AutoTokenizer, Idefics3Processor

    from mmforge.backend.checkpoint import Checkpoint

    tokenizer = AutoTokenizer.from_pretrained(source)
    per_image = tokens_per_image(Checkpoint.read(source).cfg)
    processor = Idefics3Processor(
        image_processor=AutoImageProcessor.from_pretrained(source),
        tokenizer=tokenizer,
        image_seq_len=per_image,
    )
    return processor, tokenizer


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("messages", CONVERSATIONS, ids=["one picture", "three turns"])
def test_the_runtime_makes_the_processors_ids_and_pixels(tiny, package, tmp_path, family, messages):
    """Through chat's intake, the runtime's ids and pixels are Idefics3Processor's: the fake
    token and <global-img> before each picture's <image> run, both fake tokens between
    adjacent pictures, no space after one; a JPEG of an odd size."""
    from PIL import Image

    from mmforge.backend.attachments import package_intake, prepare
    from mmforge.backend.runtime import Runtime

    folder = package(family)
    processor, tokenizer = _hf_processor(tiny(family))
    n = sum(part["type"] == "image" for m in messages for part in m["content"])
    picture = noise_picture(tmp_path, "p.jpg", 151, 89)
    intake = package_intake(folder)
    sent = [prepare(picture, IMAGE, tmp_path / f"in{i}", intake).path for i in range(n)]
    runtime = Runtime(folder)
    arrays = runtime.process(runtime.prompt(messages), sent).arrays
    hf_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = processor(text=hf_prompt, images=[[Image.open(picture)] * n])
    ids = arrays["input_ids"].reshape(-1).tolist()
    assert ids == np.asarray(expected["input_ids"]).reshape(-1).tolist()
    assert ids.count(tokenizer.convert_tokens_to_ids("<global-img>")) == n
    hf_pixels = np.asarray(expected["pixel_values"], dtype=np.float32)
    rt_pixels = arrays["pixel_values"].reshape(hf_pixels.shape)
    assert np.abs(rt_pixels - hf_pixels).max() < 1e-5


def test_every_marker_piece_is_an_image_or_fake_id_of_the_vocabulary(package):
    folder = package("smolvlm")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    for piece, reads_as in PIECES:
        expected = added[FAKE_TEXT] if reads_as == FAKE_TEXT else model["image_token_id"]
        assert added[piece] == expected, piece
    assert added[IMAGE_TEXT] == model["image_token_id"]
    assert max(added.values()) < model["vocab_size"]
    assert model["vision"]["num_visual_tokens"] == 4  # the tiny's (128 / 16 / 4)²


@pytest.mark.parametrize("pictures", [0, 1, 3])
def test_the_references_expansion_is_both_processors(tiny, pictures):
    """reference.expand against SmolVLM's helper and Idefics3Processor's own replacement."""
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

    processor, _ = _hf_processor(tiny("idefics3"))
    prompt = "User:" + "<image>" * pictures + "Hi<end_of_utterance>\nAssistant:"
    per = processor.image_seq_len
    smol = get_image_prompt_string(0, 0, per, FAKE_TEXT, IMAGE_TEXT, "<global-img>")
    idefics3 = processor.replace_image_token({"rows": [[0]], "cols": [[0]]}, 0)
    assert smol == idefics3
    assert expand(prompt, pictures, per) == prompt.replace("<image>", smol)


def test_the_tower_is_transformers_get_image_features(tiny, package, tmp_path):
    """The package's vision graph on transformers' pixels against
    SmolVLMModel.get_image_features (tower, pixel shuffle, projection)."""
    import onnxruntime as ort
    import torch
    from PIL import Image

    from mmforge.backend.verify import hf_reference

    source = tiny("smolvlm")
    processor, _ = _hf_processor(source)
    pictures = [Image.open(noise_picture(tmp_path, f"{i}.png", 200 + 31 * i, 97)) for i in range(2)]
    pixels = processor.image_processor(images=[pictures], return_tensors="pt")["pixel_values"]
    model = hf_reference.load_model(source)
    with torch.no_grad():
        expected = model.get_image_features(pixel_values=pixels).pooler_output
    expected = torch.cat(list(expected)).numpy()
    vision = next(p for p in package("smolvlm").glob("*.onnx") if "vision" in p.name)
    session = ort.InferenceSession(str(vision))
    got = session.run(None, {"pixel_values": pixels.numpy()})[0]
    assert got.shape == expected.shape == (2 * 4, 64)
    assert np.abs(got - expected).max() < 1e-4


def test_chat_answers_as_transformers_generate_with_a_jpeg(tiny, package, tmp_path):
    """Chat with a JPEG: transformers' greedy tokens over 16 and more."""
    from PIL import Image

    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions
    from mmforge.backend.verify import hf_reference

    photo = noise_picture(tmp_path, "photo.jpg", 333, 217, seed=3)
    session = ChatSession(package("smolvlm"))
    attachments = session.prepare_attachments([(photo, IMAGE)])
    answer = session.send("Describe it.", attachments, GenerationOptions(max_new_tokens=20))

    source = tiny("smolvlm")
    processor, tokenizer = _hf_processor(source)
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=prompt, images=[[Image.open(photo)]], return_tensors="pt")
    model = hf_reference.load_model(source)
    out = model.generate(**inputs, max_new_tokens=20, do_sample=False)
    hf_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    assert len(set(hf_tokens)) >= 4
    assert len(answer.token_ids) >= 16
    assert list(answer.token_ids) == hf_tokens[: len(answer.token_ids)]


@pytest.mark.parametrize(
    "size", [(640, 480), (2000, 1000), (1000, 2000), (512, 512), (100, 9000), (7, 3), (1, 1)]
)
@pytest.mark.parametrize("edge", [2048, 1456, 128])
def test_the_first_resize_is_idefics3_image_processors(size, edge):
    """The intake's first step against transformers' own function."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        get_resize_output_image_size,
    )

    width, height = size
    image = np.zeros((3, height, width), dtype=np.uint8)
    assert rescaled_to_edge(height, width, edge) == tuple(get_resize_output_image_size(image, edge))


def _with_settings(tiny, tmp_path: Path, name: str, **settings) -> Path:
    source = tmp_path / name
    shutil.copytree(tiny("smolvlm"), source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    (source / "preprocessor_config.json").write_text(json.dumps({**pre, **settings}))
    return source


def test_a_splitting_checkpoint_converts_only_as_an_approximation_with_consent(tiny, tmp_path):
    """do_image_splitting (the releases'): tiles plus the whole picture, which no package
    builds. Refused until the user accepts reading each picture whole; verify then compares
    with transformers run that way and says APPROXIMATE, never PASS."""
    from mmforge.app.cli import EXIT_VERDICT
    from mmforge.backend.convert import convert
    from mmforge.backend.errors import APPROXIMATE
    from mmforge.backend.families.catalog import CONSENT
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.verify import verify

    source = _with_settings(tiny, tmp_path, "splitting", do_image_splitting=True)
    profile = inspect_source(str(source))
    # In plain words on the card; the setting and the runtime's reason in the notes.
    assert profile.converts == CONSENT and "grid of tiles" in profile.converts_reason
    assert "approximation" in profile.converts_reason
    assert "do_image_splitting" not in profile.converts_reason
    assert any("do_image_splitting" in n and "ONNX Runtime GenAI" in n for n in profile.notes)
    assert profile.approximation == "each picture seen whole, without its tiles"
    assert profile.runnable and profile.convertible
    with pytest.raises(MmforgeError) as e:
        convert(str(source), tmp_path / "out")
    assert e.value.kind == APPROXIMATE and "seen whole" in e.value.one_line()
    assert "--approximate" in e.value.one_line()
    assert not (tmp_path / "out").exists()

    manifest = convert(str(source), tmp_path / "out", approximate=True)
    assert manifest.approximation["overrides"] == {"do_image_splitting": False}
    genai = json.loads((tmp_path / "out" / "genai_config.json").read_text())
    assert genai["model"]["vision"]["num_visual_tokens"] == 4
    picture = noise_picture(tmp_path, "wide.jpg", 640, 480)
    report = verify(tmp_path / "out", str(source), images=[picture], tokens=8)
    assert all(c.verdict == "PASS" for c in report.components), report.components
    assert report.verdict == "APPROXIMATE" and report.tokens["matched"] == 8
    assert "grid of tiles" in (report.approximation or "")
    assert any("do_image_splitting=False" in n for n in report.notes)  # what a PASS is against
    assert EXIT_VERDICT[report.verdict] == 4


def test_splitting_unset_splits_as_the_image_processors_default(tiny, tmp_path):
    """Idefics3ImageProcessor splits unless told not to: a checkpoint without the key is
    an approximation too."""
    from mmforge.backend.families.catalog import CONSENT
    from mmforge.backend.inspect import inspect_source

    source = tmp_path / "unset"
    shutil.copytree(tiny("smolvlm"), source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    del pre["do_image_splitting"]
    (source / "preprocessor_config.json").write_text(json.dumps(pre))
    assert inspect_source(str(source)).converts == CONSENT


def test_splitting_into_one_tile_is_exact_and_converts_without_consent(tiny, tmp_path):
    """With size.longest_edge at most the tile, every picture is one tile: transformers'
    pixels and ids with splitting are those without it, and the checkpoint converts (and
    verifies) exactly."""
    from PIL import Image

    from mmforge.backend.convert import convert
    from mmforge.backend.verify import verify

    source = _with_settings(
        tiny, tmp_path, "one-tile", do_image_splitting=True, size={"longest_edge": 128}
    )
    processor, _ = _hf_processor(source)
    picture = noise_picture(tmp_path, "tall.jpg", 90, 300)
    prompt = "User:<image>Hi<end_of_utterance>\nAssistant:"
    split = processor(text=prompt, images=[[Image.open(picture)]])
    processor.image_processor.do_image_splitting = False
    whole = processor(text=prompt, images=[[Image.open(picture)]])
    assert split["input_ids"] == whole["input_ids"]
    assert np.array_equal(np.asarray(split["pixel_values"]), np.asarray(whole["pixel_values"]))

    manifest = convert(str(source), tmp_path / "out")
    assert not manifest.approximation
    report = verify(tmp_path / "out", str(source), images=[picture], tokens=8)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]


def test_a_processor_square_other_than_the_towers_is_refused(tiny, tmp_path):
    from mmforge.backend.convert import convert

    source = _with_settings(tiny, tmp_path, "other-square", max_image_size={"longest_edge": 96})
    with pytest.raises(MmforgeError) as e:
        convert(str(source), tmp_path / "out")
    assert "96 px" in e.value.one_line() and "128 px" in e.value.one_line()
    assert not (tmp_path / "out").exists()
