"""Idefics2 on videochat_flash_qwen: the package's tokenizer, template, intake and refusals.

The registry-wide tests convert, verify and chat with the tiny Idefics2 (one picture);
these hold the pieces against transformers' own Idefics2Processor and model, with two
pictures, text that needs Idefics2Processor's space, and the cases the package refuses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.attachments import IMAGE, AttachmentError
from mmforge.backend.families.components.towers.navit import _bucket, position_boundaries
from mmforge.backend.families.idefics2.reference import unpack_canvases
from mmforge.backend.families.idefics2.tokenizer import FAKE_TEXT, PIECES
from mmforge.backend.picture_sizing import edge_bounds_size
from tests.images import CONVERSATIONS, noise_picture


def _hf_processor(source: Path):
    from transformers import AutoProcessor, AutoTokenizer

    processor = AutoProcessor.from_pretrained(source)
    return processor, AutoTokenizer.from_pretrained(source)


@pytest.mark.parametrize("messages", CONVERSATIONS, ids=["one picture", "three turns"])
def test_the_runtime_makes_idefics2_processors_ids_and_pixels(tiny, package, tmp_path, messages):
    """Through chat's intake, the runtime's ids and pixels are Idefics2Processor's (its
    fake tokens, one between adjacent pictures, the space after a closing one)."""
    from PIL import Image

    from mmforge.backend.attachments import package_intake, prepare
    from mmforge.backend.runtime import Runtime

    folder = package("idefics2")
    processor, tokenizer = _hf_processor(tiny("idefics2"))
    n = sum(part["type"] == "image" for m in messages for part in m["content"])
    picture = noise_picture(tmp_path, "p.png", 150, 90)  # resized to 70×42 by both sides
    intake = package_intake(folder)
    sent = [prepare(picture, IMAGE, tmp_path / f"in{i}", intake).path for i in range(n)]
    runtime = Runtime(folder)
    arrays = runtime.process(runtime.prompt(messages), sent).arrays
    hf_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = processor(text=hf_prompt, images=[Image.open(picture)] * n)
    ids = arrays["input_ids"].reshape(-1).tolist()
    assert ids == np.asarray(expected["input_ids"]).reshape(-1).tolist()
    hf_pixels = np.asarray(expected["pixel_values"], dtype=np.float32)
    rt_pixels, mask = unpack_canvases(arrays["pixel_values"])  # each picture's canvas
    assert rt_pixels.shape == hf_pixels.shape
    assert np.abs(rt_pixels - hf_pixels).max() < 1e-5
    assert mask.all()  # one size: no padding


def test_every_marker_piece_is_a_fake_or_image_id_of_the_vocabulary(package):
    folder = package("idefics2")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    for piece, reads_as in PIECES:
        expected = added[FAKE_TEXT] if reads_as == FAKE_TEXT else model["image_token_id"]
        assert added[piece] == expected, piece
    assert max(added.values()) < model["vocab_size"]


def _chat_and_transformers(package: Path, source: Path, first: Path, second: Path):
    """Chat's 16 greedy tokens for two pictures and "Compare them.", and transformers'
    `generate` on the same conversation; the processor's inputs too."""
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions
    from mmforge.backend.pictures import load
    from mmforge.backend.verify import hf_reference

    session = ChatSession(package)
    attachments = session.prepare_attachments([(first, IMAGE), (second, IMAGE)])
    answer = session.send("Compare them.", attachments, GenerationOptions(max_new_tokens=16))
    processor, tokenizer = _hf_processor(source)
    content = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare them."}]
    messages = [{"role": "user", "content": content}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=prompt, images=[load(first), load(second)], return_tensors="pt")
    model = hf_reference.load_model(source)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    return answer, out[0, inputs["input_ids"].shape[1] :].tolist(), inputs


def _same_answer(answer, hf_tokens: list[int]) -> None:
    assert len(set(hf_tokens)) >= 4
    assert list(answer.token_ids) == hf_tokens[: len(answer.token_ids)]
    assert len(answer.token_ids) == 16 or answer.stop_reason != "length"


def test_two_pictures_of_one_size_answer_as_transformers(tiny, package, tmp_path):
    """Chat with two pictures (one size after the resize): transformers' greedy tokens."""
    first = noise_picture(tmp_path, "a.png", 200, 120, seed=1)
    second = noise_picture(tmp_path, "b.png", 100, 60, seed=2)  # both become 70×42
    answer, hf_tokens, _ = _chat_and_transformers(
        package("idefics2"), tiny("idefics2"), first, second
    )
    _same_answer(answer, hf_tokens)


def test_two_pictures_of_different_sizes_answer_as_transformers(tiny, package, tmp_path):
    """Each picture reaches the runtime on a canvas of one size, so a wide and a tall one
    may share a prompt: transformers pads them into one tensor and masks the padding."""
    wide = noise_picture(tmp_path, "wide.jpg", 200, 100, seed=3)  # 70×35
    tall = noise_picture(tmp_path, "tall.jpg", 100, 200, seed=4)  # 35×70
    answer, hf_tokens, inputs = _chat_and_transformers(
        package("idefics2"), tiny("idefics2"), wide, tall
    )
    assert not bool(inputs["pixel_attention_mask"].all())
    _same_answer(answer, hf_tokens)


def test_a_package_from_before_the_canvas_refuses_pictures_of_two_sizes(package, tmp_path):
    """A package that records the bare sizing (converted before pictures were packed on a
    canvas) hands the runtime pictures as they are, which it would stack into the first
    one's tensor: chat refuses two sizes before the runtime runs."""
    from mmforge.backend.chat.session import ChatSession

    old = tmp_path / "old"
    shutil.copytree(package("idefics2"), old)
    manifest = json.loads((old / "mmforge_manifest.json").read_text())
    manifest["pictures"]["sizing"]["rule"] = "edge_bounds"
    (old / "mmforge_manifest.json").write_text(json.dumps(manifest))
    session = ChatSession(old)
    wide = noise_picture(tmp_path, "wide.png", 200, 100)
    tall = noise_picture(tmp_path, "tall.png", 100, 200)
    with pytest.raises(AttachmentError) as e:
        session.prepare_attachments([(wide, IMAGE), (tall, IMAGE)])
    assert "70×35" in str(e.value) and "35×70" in str(e.value)
    assert session.prepare_attachments([(wide, IMAGE)])  # one alone is taken


@pytest.mark.parametrize(
    "size", [(640, 480), (2000, 1000), (1000, 2000), (980, 980), (100, 4000), (300, 200), (1, 1)]
)
def test_edge_bounds_are_idefics2_image_processors(size):
    """The intake's rule against transformers' own function."""
    from transformers.image_utils import SizeDict
    from transformers.models.idefics2.image_processing_pil_idefics2 import (
        get_resize_output_image_size,
    )

    width, height = size
    image = np.zeros((3, height, width), dtype=np.uint8)
    bounds = SizeDict(shortest_edge=378, longest_edge=980)
    assert edge_bounds_size(height, width, 378, 980) == tuple(
        get_resize_output_image_size(image, bounds)
    )


@pytest.mark.parametrize("side", [4, 27, 70])
def test_position_boundaries_are_torchs(side):
    import torch

    expected = torch.arange(1 / side, 1.0, 1 / side).numpy()
    assert np.array_equal(position_boundaries(side), expected)


@pytest.mark.parametrize("side", [27, 70])
def test_the_graphs_position_buckets_are_transformers_under_onnx_runtime(side, tmp_path):
    """Every patch count up to 120 along a side, through ONNX Runtime's own optimisations
    (its DivMulFusion once turned 1 / n · i into i / n: 7 of 49 rows landed a bucket up)."""
    import onnx_ir as ir
    import onnxruntime as ort
    import torch

    from mmforge.backend.families.components.graph_builder import GraphBuilder

    g = GraphBuilder("buckets")
    patches = g.input("patches", ir.DataType.FLOAT, ["count"])
    boundaries = g.const(position_boundaries(side))
    g.output(_bucket(g, g.op("Shape", patches), boundaries), "buckets")
    path = tmp_path / "buckets.onnx"
    ir.save(g.model(), path)
    session = ort.InferenceSession(str(path))
    grid = torch.arange(1 / side, 1.0, 1 / side)
    for count in range(1, 121):
        got = session.run(None, {"patches": np.zeros(count, np.float32)})[0]
        step = 1.0 / torch.tensor([count])  # Idefics2VisionEmbeddings' arithmetic
        coords = torch.arange(count, dtype=torch.float32)[None, :] * step[:, None]
        expected = torch.bucketize(coords.clamp(max=1.0 - 1e-6), grid, right=True)[0]
        assert got.tolist() == expected.tolist(), count


def test_a_release_shaped_tower_matches_on_a_tallnoise_picture(tmp_path):
    """idefics2-8b's shape (a 70 × 70 grid, 378-980 px) on 50 × 70 patches: verify PASS."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.idefics2.tiny import RELEASED_IDEFICS2
    from mmforge.backend.tiny.release import write_release
    from mmforge.backend.verify import verify

    source = write_release(RELEASED_IDEFICS2[0], tmp_path / "release").folder
    convert(str(source), tmp_path / "pkg")
    picture = noise_picture(tmp_path, "tall.png", 980, 700)  # kept at 980×700: 50 × 70 patches
    report = verify(tmp_path / "pkg", str(source), images=[picture], tokens=16)
    stages = {c.name: c for c in report.components}
    assert stages["vision_encoder"].verdict == "PASS", stages["vision_encoder"].reason
    assert report.verdict == "PASS" and report.tokens["matched"] == 16


@pytest.fixture(scope="module")
def splitting(tiny, tmp_path_factory):
    """The tiny Idefics2 with do_image_splitting, and its f32 package (built once)."""
    from mmforge.backend.convert import convert

    root = tmp_path_factory.mktemp("splitting")
    source = root / "splitting"
    shutil.copytree(tiny("idefics2"), source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    (source / "preprocessor_config.json").write_text(
        json.dumps({**pre, "do_image_splitting": True})
    )
    convert(str(source), root / "f32")
    return source, root / "f32"


def test_a_splitting_checkpoint_converts_exactly_with_its_five_parts(splitting, tmp_path):
    """do_image_splitting: the four quarters and the whole, 5 × 64 image ids a picture.
    It converts without asking, its package takes 5 × 64 + 4 runtime ids a picture (the
    fake tokens between the parts written by the embedding graph), and verify PASSes on
    a JPEG photo, at f32 and at int4 (against the rounded weights)."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.catalog import EXACT
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.verify import verify
    from tests.images import user_pictures

    source, f32 = splitting
    profile = inspect_source(str(source))
    assert profile.converts == EXACT and not profile.approximation
    assert profile.image_tokens.fixed == 5 * 64  # the model as released
    assert any("five parts" in n for n in profile.notes)
    genai = json.loads((f32 / "genai_config.json").read_text())
    assert genai["model"]["vision"]["num_visual_tokens"] == 5 * 64 + 4
    manifest = json.loads((f32 / "mmforge_manifest.json").read_text())
    assert manifest["pictures"]["sizing"]["rule"] == "edge_bounds_split"
    assert not manifest.get("approximation")
    photo = user_pictures(tmp_path, big=(1200, 900))["jpeg"]
    report = verify(f32, str(source), images=[photo], tokens=16)
    assert report.verdict == "PASS", report.components
    assert report.tokens["matched"] == 16 and not report.approximation
    preprocessing = next(c for c in report.components if c.name == "preprocessing")
    assert preprocessing.reason.startswith("the same ")  # Idefics2Processor's own ids
    # A phone photo stored sideways and a picture at a resize tie, in one prompt.
    pictures = user_pictures(tmp_path / "more", big=(60, 40))
    report = verify(f32, str(source), images=[pictures["exif"], pictures["tie"]], tokens=16)
    assert report.verdict == "PASS", report.components
    int4 = tmp_path / "int4"
    convert(str(source), int4, dtype="int4")
    report = verify(int4, str(source), images=[photo], tokens=16)
    assert report.verdict == "PASS", report.components


@pytest.mark.parametrize("names", [("jpeg",), ("exif", "palette"), ("large", "tie", "cmyk")])
def test_the_runtime_reads_split_pictures_as_idefics2_processor(splitting, tmp_path, names):
    """Through chat's intake, pictures of different sizes (a JPEG, an EXIF-rotated phone
    photo, a palette PNG, a 6000×4000 photo...): the runtime's ids, with the fake ids
    between the parts as transformers reads them, are Idefics2Processor's, and the
    canvases unpacked are its padded parts and pixel mask."""
    from mmforge.backend.attachments import package_intake, prepare
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families.idefics2.reference import read_split_ids
    from mmforge.backend.pictures import load
    from mmforge.backend.runtime import Runtime
    from tests.images import user_pictures

    source, f32 = splitting
    pictures = user_pictures(tmp_path / "files")
    files = [pictures[n] for n in names]
    messages = [
        {
            "role": "user",
            "content": [*({"type": "image"} for _ in files), {"type": "text", "text": "Which?"}],
        }
    ]
    intake = package_intake(f32)
    sent = [prepare(p, IMAGE, tmp_path / f"in{i}", intake).path for i, p in enumerate(files)]
    runtime = Runtime(f32)
    arrays = runtime.process(runtime.prompt(messages), sent).arrays
    processor, tokenizer = _hf_processor(source)
    hf_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = processor(text=hf_prompt, images=[load(p) for p in files])
    cfg = Checkpoint.read(source).cfg
    ids = read_split_ids(arrays["input_ids"].reshape(-1).tolist(), cfg)
    assert ids == np.asarray(expected["input_ids"]).reshape(-1).tolist()
    assert ids.count(cfg.get("image_token_id")) == len(files) * 5 * 64
    pixels, mask = unpack_canvases(arrays["pixel_values"])
    hf_pixels = np.asarray(expected["pixel_values"], dtype=np.float32)
    assert pixels.shape == hf_pixels.shape
    assert np.abs(pixels - hf_pixels).max() < 1e-5
    assert (mask == np.asarray(expected["pixel_attention_mask"])).all()


@pytest.mark.parametrize("pair", ["two JPEGs", "phone photo and tie"])
def test_chat_with_split_pictures_of_two_sizes_answers_as_transformers(splitting, tmp_path, pair):
    """Two pictures of different shapes (padded into one tensor by transformers, each part
    masked): random JPEGs, or an EXIF-rotated phone JPEG and a PNG at a resize tie; chat's
    greedy tokens are transformers' `generate` tokens."""
    from tests.images import user_pictures

    source, f32 = splitting
    if pair == "two JPEGs":
        first = noise_picture(tmp_path, "a.jpg", 500, 300, seed=1)
        second = noise_picture(tmp_path, "b.jpg", 90, 200, seed=2)
    else:
        files = user_pictures(tmp_path / "files", big=(60, 40))
        first, second = files["exif"], files["tie"]
    answer, hf_tokens, inputs = _chat_and_transformers(f32, source, first, second)
    assert not bool(inputs["pixel_attention_mask"].all())  # the parts were padded
    _same_answer(answer, hf_tokens)


def test_a_split_picture_is_drawn_as_the_picture(splitting, tmp_path):
    """The runtime's copy is the canvas; the transcript draws its whole part, at the
    shape the user took the picture."""
    from PIL import Image

    from mmforge.backend.attachments import package_intake, prepare

    _, f32 = splitting
    photo = noise_picture(tmp_path, "wide.png", 300, 120)
    sent = prepare(photo, IMAGE, tmp_path / "in", package_intake(f32))
    left, top, width, height = sent.shown_box
    assert (width, height) == (70, 28) and top == 1 and left == 4 * 70
    assert (sent.shown_width, sent.shown_height) == (300, 120)
    with Image.open(sent.path) as canvas:
        assert canvas.size == (5 * 70, 71)
    # A saved conversation keeps the box; a broken one is no box (the whole copy drawn).
    from mmforge.backend.attachments import Attachment

    stored = json.loads(json.dumps(sent.to_dict()))
    assert Attachment.from_dict(stored) == sent
    for broken in ([1, 2, 3], ["a", 0, 0, 0], [0, 0, -1, 5], None):
        assert Attachment.from_dict({**stored, "shown_box": broken}).shown_box == (0, 0, 0, 0)
    assert Attachment.from_dict(
        {k: v for k, v in stored.items() if k != "shown_box"}
    ).shown_box == (
        0,
        0,
        0,
        0,
    )


def test_a_picture_too_thin_to_cut_is_refused_with_its_reason(splitting, tmp_path):
    """A 1-pixel-wide picture has no quarters (transformers' processor fails on it)."""
    from mmforge.backend.attachments import package_intake, prepare

    _, f32 = splitting
    line = noise_picture(tmp_path, "line.png", 1, 50)
    with pytest.raises(AttachmentError) as e:
        prepare(line, IMAGE, tmp_path / "in", package_intake(f32))
    assert "cannot be cut into quarters" in str(e.value)
    assert not any((tmp_path / "in").iterdir())  # nothing half-written
