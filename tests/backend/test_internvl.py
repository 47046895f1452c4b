"""InternVL on qwen2_5_vl: the package's tokenizer, tower, earlier packages and refusals.

The registry-wide tests convert, verify and chat with the tiny InternVL (Qwen2 text, one
picture), and test_internvl_tiles.py holds the tiles against transformers'; these hold
the pieces against transformers' own code: InternVLProcessor's ids and pixels for one
and two pictures in conversations, InternVLModel.get_image_features for the tower's
variants behind the canvas's un-patching, transformers' `generate` with JPEG pictures,
InternVL 3.5's Qwen3 text, and a package of an earlier version (one view a picture).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.attachments import IMAGE
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families.internvl.tokenizer import CONTEXT, END, PIECES, START
from tests.backend.test_internvl_tiles import internvl_processor
from tests.images import CONVERSATIONS, noise_picture


def _hf_inputs(source: Path, messages: list, pictures: list[Path]) -> dict:
    """InternVLProcessor's inputs (it tiles), transformers' own processor."""
    import torch
    from PIL import Image

    processor = internvl_processor(source)
    prompt = processor.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    images = [Image.open(p).convert("RGB") for p in pictures] or None
    out = processor(text=prompt, images=images, return_tensors="pt")
    out["attention_mask"] = torch.ones_like(out["input_ids"])
    return dict(out)


@pytest.mark.parametrize("messages", CONVERSATIONS, ids=["one picture", "three turns"])
def test_the_runtime_makes_internvl_processors_ids_and_pixels(tiny, package, tmp_path, messages):
    """Through chat's intake, the runtime's ids and pixels are InternVLProcessor's: <img>,
    256 <IMG_CONTEXT> a view (7 views: 3 × 2 tiles, a thumbnail), </img> per picture, text
    after a picture included."""
    from mmforge.backend.attachments import package_intake, prepare
    from mmforge.backend.families.internvl.reference import views_from_rows
    from mmforge.backend.runtime import Runtime

    folder = package("internvl")
    n = sum(part["type"] == "image" for m in messages for part in m["content"])
    picture = noise_picture(tmp_path, "p.jpg", 500, 300)
    intake = package_intake(folder)
    sent = [prepare(picture, IMAGE, tmp_path / f"in{i}", intake).path for i in range(n)]
    runtime = Runtime(folder)
    arrays = runtime.process(runtime.prompt(messages), sent).arrays
    expected = _hf_inputs(tiny("internvl"), messages, [picture] * n)
    ids = arrays["input_ids"].reshape(-1).tolist()
    assert ids == expected["input_ids"].reshape(-1).tolist()
    image_id = json.loads((folder / "genai_config.json").read_text())["model"]["image_token_id"]
    assert ids.count(image_id) == 256 * 7 * n
    hf_pixels = expected["pixel_values"].numpy()
    rt_pixels = views_from_rows(arrays["pixel_values"], arrays["image_grid_thw"], 448, 28)
    assert rt_pixels.shape == hf_pixels.shape == (7 * n, 3, 448, 448)
    assert np.abs(rt_pixels - hf_pixels).max() < 1e-5


def test_every_marker_piece_is_an_internvl_id_and_qwens_own_ids_are_gone(tiny, package):
    """The release's tokenizer holds Qwen's <|vision_start|> etc. on ids of their own: the
    package moves them to <img>, <IMG_CONTEXT> and </img>'s ids."""
    folder = package("internvl")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    source = json.loads((tiny("internvl") / "tokenizer.json").read_text())
    before = {t["content"]: t["id"] for t in source["added_tokens"]}
    after = {}
    for t in tokenizer["added_tokens"]:
        assert t["content"] not in after, t["content"]  # one entry per piece
        after[t["content"]] = t["id"]
    for piece, reads_as in PIECES:
        assert after[piece] == before[reads_as] != before[piece], piece
    decoder = json.loads((folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert {v["content"] for v in decoder.values()}.isdisjoint(p for p, _ in PIECES)
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    assert model["image_token_id"] == before[CONTEXT] and {START, END} <= set(before)


def _tower_model(overrides: dict):
    """A tiny InternVL with tower settings changed, its weights drawn as the tiny ones."""
    from mmforge.backend.families.internvl.tiny import INTERNVL
    from mmforge.backend.tiny.build import scale_init, with_config
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    spec = with_config(INTERNVL, overrides)
    tok = train_tokenizer(spec.specials)
    config = spec.make_config(tok.special_ids, tok.vocab_size)
    import transformers

    model = transformers.InternVLForConditionalGeneration(config).eval()
    scale_init(model, 0, vector_std=0.1)
    return model


TOWERS = {
    "release": {},
    "qk norm, rms norms, no biases": {
        "vision_config.use_qk_norm": True,
        "vision_config.norm_type": "rms_norm",
        "vision_config.attention_bias": False,
    },
    "layer -2, tanh gelu": {"vision_feature_layer": -2, "vision_config.hidden_act": "gelu_new"},
    "final layernorm, silu projector": {
        "vision_config.use_mean_pooling": False,
        "projector_hidden_act": "silu",
    },
    # (layer 0, the embeddings, fails inside transformers 5.25: no hidden states recorded)
    "layer 1 of 3": {"vision_config.num_hidden_layers": 3, "vision_feature_layer": 1},
}


@pytest.mark.parametrize("overrides", TOWERS.values(), ids=TOWERS.keys())
def test_the_vision_graph_is_get_image_features(overrides, tmp_path):
    """Our tower, pixel shuffle and projector against InternVLModel.get_image_features on
    two views, handed as the runtime hands one picture's canvas: its 28 px patches row by
    row, two equal frames each, and its grid (1, 32, 16)."""
    import onnx_ir as ir
    import onnxruntime as ort
    import torch

    from mmforge.backend.families._base import Cfg
    from mmforge.backend.families.internvl.graphs import (
        checkpoint_name,
        tokens_per_image,
        vision_graph,
    )

    model = _tower_model(overrides)
    cfg = Cfg(model.config.to_dict())
    graph = vision_graph(cfg)
    state = {checkpoint_name(k): v for k, v in model.state_dict().items()}
    used = 0
    for name, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(state[name].detach().numpy().astype(np.float32))
            used += 1
    assert used >= 9  # patch conv, CLS, positions, the projector's six at least
    path = tmp_path / "vision.onnx"
    ir.save(graph, path)
    pixels = torch.randn(2, 3, 448, 448, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.get_image_features(pixel_values=pixels).pooler_output
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    canvas = pixels.numpy().transpose(1, 0, 2, 3).reshape(3, 2 * 16, 28, 16, 28)
    rows = canvas.transpose(1, 3, 0, 2, 4)[:, :, :, None].repeat(2, axis=3)
    feed = {
        "pixel_values": rows.reshape(32 * 16, 3 * 2 * 28 * 28),
        "image_grid_thw": np.array([[1, 32, 16]], np.int64),
    }
    got = session.run(None, feed)[0]
    assert got.shape == (2 * tokens_per_image(cfg), model.config.text_config.hidden_size)
    reference = expected.reshape(got.shape).numpy()
    assert np.abs(got - reference).max() < 1e-4 * max(1.0, float(np.abs(reference).max()))


def _chat_against_generate(package_folder: Path, source: Path, pictures: list[Path]) -> tuple:
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions
    from mmforge.backend.verify import hf_reference

    session = ChatSession(package_folder)
    attachments = session.prepare_attachments([(p, IMAGE) for p in pictures])
    answer = session.send("Describe them.", attachments, GenerationOptions(max_new_tokens=16))
    content = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": "Describe them."}]
    inputs = _hf_inputs(source, [{"role": "user", "content": content}], pictures)
    model = hf_reference.load_model(source)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    hf_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    return list(answer.token_ids), hf_tokens, answer.stop_reason


def test_two_jpegs_answer_as_transformers(tiny, package, tmp_path):
    """Chat with two JPEG pictures of other sizes: transformers' greedy tokens (16)."""
    first = noise_picture(tmp_path, "a.jpg", 640, 320, seed=1)  # 2 × 1 tiles and a thumbnail
    second = noise_picture(tmp_path, "b.jpg", 300, 500, seed=2)
    ours, hf_tokens, stop = _chat_against_generate(
        package("internvl"), tiny("internvl"), [first, second]
    )
    assert len(set(hf_tokens)) >= 4
    assert ours == hf_tokens[: len(ours)]
    assert len(ours) == 16 or stop != "length"


def test_internvl_3_5s_qwen3_text_converts_and_answers_as_transformers(tmp_path):
    """The InternVL3.5-1B-HF shape (Qwen3 text: q_norm / k_norm, no q/k/v biases; the
    release's names and bf16 shards): verify PASS, tiles and all, and chat equal to
    transformers."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.internvl.tiny import RELEASED_INTERNVL
    from mmforge.backend.tiny.release import write_release
    from mmforge.backend.verify import verify

    release = next(r for r in RELEASED_INTERNVL if r.key == "internvl3_5-1b")
    source = write_release(release, tmp_path / "release").folder
    assert json.loads((source / "config.json").read_text())["text_config"]["model_type"] == "qwen3"
    convert(str(source), tmp_path / "pkg")
    picture = noise_picture(tmp_path, "p.jpg", 500, 300)
    report = verify(tmp_path / "pkg", str(source), images=[picture], tokens=16)
    stages = {c.name: c.verdict for c in report.components}
    assert all(v == "PASS" for v in stages.values()), stages
    assert report.verdict == "PASS" and report.tokens["matched"] == 16
    ours, hf_tokens, stop = _chat_against_generate(tmp_path / "pkg", source, [picture])
    assert ours == hf_tokens[: len(ours)] and (len(ours) == 16 or stop != "length")


@pytest.mark.parametrize(
    ("size", "same"),
    [
        ((448, 448), True),
        ((500, 460), True),
        ((300, 320), True),
        ((600, 540), True),
        ((640, 640), False),  # a square past about 634 px: a 2 × 2 grid
        ((900, 300), False),
    ],
)
def test_tiling_leaves_a_one_by_one_grid_picture_as_one_view(tiny, size, same):
    """GotOcr2ImageProcessor with crop_to_patches=True (InternVLProcessor's default) cuts
    a picture whose closest grid is 1 × 1 into one view, no thumbnail, with the pixels of
    crop_to_patches=False; any other picture into tiles plus a thumbnail."""
    from PIL import Image
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(tiny("internvl"))
    width, height = size
    pixels = (np.random.default_rng(3).random((height, width, 3)) * 255).astype("uint8")
    image = Image.fromarray(pixels)
    tiled = processor(images=[image], crop_to_patches=True, return_tensors="np")
    whole = processor(images=[image], crop_to_patches=False, return_tensors="np")
    assert list(whole["num_patches"]) == [1]
    if same:
        assert list(tiled["num_patches"]) == [1]
        assert np.array_equal(tiled["pixel_values"], whole["pixel_values"])
    else:
        assert tiled["num_patches"][0] > 1


def test_a_remote_code_checkpoint_is_refused_naming_the_hf_release(tiny, tmp_path):
    """InternVL's original layout (internvl_chat) is recognised as InternVL's inspect-only
    variant, whose reason names the -hf release; convert refuses it."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families import VariantRequest
    from mmforge.backend.families.internvl import INTERNVL

    source = tmp_path / "remote"
    shutil.copytree(tiny("internvl"), source)
    config = json.loads((source / "config.json").read_text())
    config["model_type"] = "internvl_chat"
    config["auto_map"] = {"AutoModel": "modeling_internvl_chat.InternVLChatModel"}
    (source / "config.json").write_text(json.dumps(config))
    variant = INTERNVL.recognition.variant(VariantRequest(config, source))
    assert variant is not None and variant.package is None
    assert "-hf" in (variant.no_pipeline_reason or "")
    assert INTERNVL.recognition.variant(VariantRequest({"model_type": "internvl"}, source)) is None
    with pytest.raises(MmforgeError):
        convert(str(source), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_convert_needs_no_consent_and_an_earlier_packages_reference_is_one_view(tiny, tmp_path):
    """The release converts exactly, tiles and all, without --approximate; a package of an
    earlier version (one view a picture, its manifest's approximation) is verified as the
    family converted it then: videochat_flash_qwen, InternVLProcessor without tiling."""
    from PIL import Image
    from transformers import AutoTokenizer

    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.convert import convert
    from mmforge.backend.families import ReferenceRequest
    from mmforge.backend.families.catalog import CONSENT
    from mmforge.backend.families.internvl.reference import prepare
    from mmforge.backend.inspect import inspect_source

    source = tiny("internvl")
    profile = inspect_source(str(source))
    assert profile.converts != CONSENT and not profile.approximation
    manifest = convert(str(source), tmp_path / "out")
    assert not manifest.approximation
    assert Checkpoint.read(source, approximate=True).approximation is None  # nothing to accept
    then = Checkpoint.read(source, approximate=True, earlier=True)
    assert then.family.pipeline_type == "videochat_flash_qwen"
    assert then.approximation is not None and then.preprocessor.get("crop_to_patches") is False
    picture = Image.open(noise_picture(tmp_path, "p.jpg", 900, 300)).convert("RGB")
    tokenizer = AutoTokenizer.from_pretrained(source)
    for checkpoint, views in ((then, 1), (Checkpoint.read(source), 4)):
        inputs = prepare(ReferenceRequest(checkpoint, tokenizer, "<IMG_CONTEXT>\n", [picture], []))
        assert inputs.tensors["pixel_values"].shape[0] == views
        assert inputs.input_ids.count(checkpoint.cfg.get("image_token_id")) == 256 * views


def test_a_processor_size_other_than_the_towers_is_refused(tiny, tmp_path):
    """transformers would interpolate the 448 px position table; the package does not."""
    from mmforge.backend.convert import convert

    source = tmp_path / "other-size"
    shutil.copytree(tiny("internvl"), source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    pre["size"] = {"height": 224, "width": 224}
    (source / "preprocessor_config.json").write_text(json.dumps(pre))
    with pytest.raises(MmforgeError) as e:
        convert(str(source), tmp_path / "out")
    assert "224 × 224" in e.value.one_line() and "interpolate" in e.value.one_line()
    assert not (tmp_path / "out").exists()
