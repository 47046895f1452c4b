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
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families.idefics2.graphs import _bucket, position_boundaries
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
    rt_pixels = arrays["pixel_values"].reshape(hf_pixels.shape)
    assert np.abs(rt_pixels - hf_pixels).max() < 1e-5


def test_every_marker_piece_is_a_fake_or_image_id_of_the_vocabulary(package):
    folder = package("idefics2")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    for piece, reads_as in PIECES:
        expected = added[FAKE_TEXT] if reads_as == FAKE_TEXT else model["image_token_id"]
        assert added[piece] == expected, piece
    assert max(added.values()) < model["vocab_size"]


def test_two_pictures_of_one_size_answer_as_transformers(tiny, package, tmp_path):
    """Chat with two pictures (one size after the resize): transformers' greedy tokens."""
    from PIL import Image

    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions
    from mmforge.backend.verify import hf_reference

    first = noise_picture(tmp_path, "a.png", 200, 120, seed=1)
    second = noise_picture(tmp_path, "b.png", 100, 60, seed=2)  # both become 70×42
    session = ChatSession(package("idefics2"))
    attachments = session.prepare_attachments([(first, IMAGE), (second, IMAGE)])
    answer = session.send("Compare them.", attachments, GenerationOptions(max_new_tokens=16))

    source = tiny("idefics2")
    processor, tokenizer = _hf_processor(source)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "image"},
                {"type": "text", "text": "Compare them."},
            ],
        }
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(
        text=prompt, images=[Image.open(first), Image.open(second)], return_tensors="pt"
    )
    model = hf_reference.load_model(source)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    hf_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    assert len(set(hf_tokens)) >= 4
    assert list(answer.token_ids) == hf_tokens[: len(answer.token_ids)]
    assert len(answer.token_ids) == 16 or answer.stop_reason != "length"


def test_chat_refuses_pictures_of_two_sizes(package, tmp_path):
    """The runtime would stack them into the first one's tensor: refused before it runs."""
    from mmforge.backend.chat.session import ChatSession

    session = ChatSession(package("idefics2"))
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

    from mmforge.backend.families.lfm2.ops import GraphBuilder

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


def test_a_splitting_checkpoint_converts_only_as_an_approximation_with_consent(tiny, tmp_path):
    """do_image_splitting: five sub-pictures per picture, which no package builds yet. It is
    refused until the user accepts reading each picture whole, and then verify compares
    with transformers run that way and says APPROXIMATE, never PASS."""
    from mmforge.app.cli import EXIT_VERDICT
    from mmforge.backend.convert import convert
    from mmforge.backend.errors import APPROXIMATE
    from mmforge.backend.families.catalog import CONSENT
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.verify import verify

    source = tmp_path / "splitting"
    shutil.copytree(tiny("idefics2"), source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    (source / "preprocessor_config.json").write_text(
        json.dumps({**pre, "do_image_splitting": True})
    )
    profile = inspect_source(str(source))
    # In plain words on the card; the setting and the runtime's reason in the notes.
    assert profile.converts == CONSENT and "four crops" in profile.converts_reason
    assert "approximation" in profile.converts_reason
    assert "do_image_splitting" not in profile.converts_reason
    assert any("do_image_splitting" in n and "videochat_flash_qwen" in n for n in profile.notes)
    assert profile.approximation == "each picture read whole, without its four crops"
    assert profile.runnable and profile.convertible  # Convert → on the card; it asks first
    assert profile.image_tokens.fixed == 5 * 64  # the model as released
    with pytest.raises(MmforgeError) as e:
        convert(str(source), tmp_path / "out")
    assert e.value.kind == APPROXIMATE and "read whole" in e.value.one_line()
    assert "--approximate" in e.value.one_line()
    assert not (tmp_path / "out").exists()

    manifest = convert(str(source), tmp_path / "out", approximate=True)
    assert manifest.approximation["overrides"] == {"do_image_splitting": False}
    assert any("approximation" in n for n in manifest.notes)
    written = json.loads((tmp_path / "out" / "mmforge_manifest.json").read_text())
    assert written["approximation"]["what"] == manifest.approximation["what"]
    # The package reads each picture as 64 ids, as transformers does without the cut.
    genai = json.loads((tmp_path / "out" / "genai_config.json").read_text())
    assert genai["model"]["vision"]["num_visual_tokens"] == 64
    picture = noise_picture(tmp_path, "wide.png", 640, 480)
    report = verify(tmp_path / "out", str(source), images=[picture], tokens=8)
    assert all(c.verdict == "PASS" for c in report.components), report.components
    assert report.verdict == "APPROXIMATE" and report.tokens["matched"] == 8
    assert "four crops" in (report.approximation or "")
    assert any("do_image_splitting=False" in n for n in report.notes)  # what a PASS is against
    assert report.summary().startswith("APPROXIMATE") and EXIT_VERDICT[report.verdict] == 4
    assert report.to_dict()["approximation"] == report.approximation
