"""Phi-3 / Phi-3.5-Vision: the remote layout read as data, inspect's account, the package.

The release-shaped checkpoint carries Phi-3.5-vision-instruct's config.json text (shrunk)
and weights under the remote code's names, built from transformers' Phi-3 and CLIP parts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families.phi3v import layout
from mmforge.backend.families.phi3v.tiny import write_phi3v
from mmforge.backend.inspect import inspect_source
from mmforge.backend.tensors import local_tensors


@pytest.fixture(scope="module")
def phi3v(tmp_path_factory) -> Path:
    return write_phi3v(tmp_path_factory.mktemp("phi3v") / "Phi-3.5-vision-instruct").folder


def test_the_layout_maps_every_tensor_onto_native_parts(phi3v):
    """Every tensor lands in transformers' Phi3ForCausalLM, CLIPVisionModel (loaded
    strictly, nothing missing or left over) or the HD projector."""
    import torch
    from safetensors.torch import load_file
    from transformers import CLIPVisionConfig, CLIPVisionModel, Phi3Config, Phi3ForCausalLM

    written = json.loads((phi3v / "config.json").read_text())
    shapes = {t.name: list(t.shape) for t in local_tensors(phi3v) or ()}
    parts: dict[str, dict[str, torch.Tensor]] = {"text": {}, "vision": {}, "projector": {}}
    for file in phi3v.glob("*.safetensors"):
        for name, value in load_file(str(file)).items():
            where = layout.tensor_part(name)
            assert where is not None, name
            parts[where[0]][where[1]] = value.float()
    text = Phi3ForCausalLM(Phi3Config.from_dict(layout.text_config(written)))
    assert text.load_state_dict(parts["text"], strict=True)
    tower_config = layout.vision_config(written, shapes)
    assert tower_config["num_hidden_layers"] == 3 and tower_config["hidden_size"] == 32
    tower = CLIPVisionModel(CLIPVisionConfig.from_dict(tower_config))
    assert tower.load_state_dict(parts["vision"], strict=True)
    width = 4 * tower_config["hidden_size"]
    assert parts["projector"]["glb_GN"].shape == (1, 1, width)
    assert parts["projector"]["img_projection.0.weight"].shape == (written["hidden_size"], width)


def test_inspect_names_the_layout_and_the_tokens(phi3v):
    with pytest.raises(MmforgeError) as e:
        inspect_source(str(phi3v))
    assert "--trust-remote-code" in e.value.one_line()
    profile = inspect_source(str(phi3v), trust_remote_code=True)  # no code runs
    assert profile.family_key == "phi3v" and profile.pipeline_type == "phi3v"
    assert profile.components == ("vision_encoder", "embedding", "decoder")
    assert profile.projector.variant == "MLPMultiModalProjector"
    assert "4×image_dim_out" in profile.projector.reason
    # One 336 px crop plus the global view: 313 tokens; num_crops=4 (4 rows of 1): up to 781.
    assert (profile.image_tokens.minimum, profile.image_tokens.maximum) == (313, 781)
    assert profile.refused_fields == () and profile.unlisted_fields == ()
    assert "CLIP ViT-L/14-336" in profile.architecture[0]
    assert not any(w.startswith("Cannot convert yet") for w in profile.warnings)


def test_convert_needs_consent_for_remote_code(phi3v, tmp_path):
    with pytest.raises(MmforgeError) as e:
        convert(str(phi3v), tmp_path / "out")
    assert "--trust-remote-code" in e.value.one_line()
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def package(phi3v, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("phi3v_pkg") / "f32"
    convert(str(phi3v), out, trust_remote_code=True)
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (300, 500, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("phi3v_img") / "wide.png"
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture(scope="module")
def square(tmp_path_factory) -> Path:
    """A second image of another size and crop count: 4×4 crops where `image` has 3×5."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("phi3v_img") / "square.png"
    Image.fromarray(pixels).save(path)
    return path


def test_the_package_is_what_the_runtime_calls(package):
    """genai_config names phi3v and the runtime's vision inputs; the vision graph takes
    [images, crops, 3, 336, 336] with image_sizes and returns rows as wide as the decoder."""
    import onnx

    config = json.loads((package / "genai_config.json").read_text())["model"]
    assert config["type"] == "phi3v"
    assert config["vision"]["inputs"] == {
        "pixel_values": "pixel_values",
        "image_sizes": "image_sizes",
    }
    assert config["embedding"]["inputs"] == {
        "input_ids": "input_ids",
        "image_features": "image_features",
    }
    vision = onnx.load(str(package / "vision.onnx"), load_external_data=False).graph
    assert [i.name for i in vision.input] == ["pixel_values", "image_sizes"]
    assert len(vision.input[0].type.tensor_type.shape.dim) == 5
    assert [d.dim_value for d in vision.output[0].type.tensor_type.shape.dim][1:] == [64]
    processor = json.loads((package / "processor_config.json").read_text())
    kinds = [t["operation"]["type"] for t in processor["processor"]["transforms"]]
    assert kinds == ["DecodeImage", "Phi3ImageTransform"]  # no ConvertRGB (swaps R and B)
    report = json.loads((package / "weights_report.json").read_text())
    unused = {u["checkpoint"] for u in report["unused"]}
    # Only the tower's last layer and pooling norm, past the feature layer (-2).
    assert all(".encoder.layers.2." in n or ".post_layernorm." in n for n in unused)
    mapped = {m["checkpoint"] for m in report["mapped"]}
    assert {
        layout.VISION_PREFIX + n for n in ("glb_GN", "sub_GN", "img_projection.0.weight")
    } <= mapped


def _verify(package: Path, phi3v: Path, *images: Path) -> dict:
    from mmforge.backend.verify import verify

    return verify(package, str(phi3v), images=list(images), tokens=32).to_dict()


def test_verify_passes_stage_by_stage_with_one_image(package, phi3v, image):
    report = _verify(package, phi3v, image)
    verdicts = {c["name"]: c["verdict"] for c in report["components"]}
    assert report["verdict"] == "PASS", verdicts
    for stage in ("preprocessing", "vision_encoder", "embedding", "embedding_text_only",
                  "decoder_prefill", "decoder_step", "end_to_end"):  # fmt: skip
        assert verdicts[stage] == "PASS"
    assert report["tokens"]["matched"] == report["tokens"]["total"] == 32


def test_verify_passes_stage_by_stage_with_two_images_of_different_sizes(
    package, phi3v, image, square
):
    """Image 2's placeholders are -2s: verify counted only the -1s (the genai_config's
    image id), so the vision stage saw 4,862 features for 2,353 tokens and the embedding
    indexed past them. The runtime pads the stack to 17 crops for the 16-crop image."""
    report = _verify(package, phi3v, image, square)
    verdicts = {c["name"]: c["verdict"] for c in report["components"]}
    assert report["verdict"] == "PASS", verdicts
    for stage in ("preprocessing", "vision_encoder", "embedding", "decoder_prefill",
                  "decoder_step", "end_to_end"):  # fmt: skip
        assert verdicts[stage] == "PASS"
    reasons = {c["name"]: c["reason"] for c in report["components"]}
    assert "image tokens [2353, 2509]" in reasons["preprocessing"]
    assert "[(1008, 1680), (1344, 1344)]" in reasons["preprocessing"]
    assert report["tokens"]["matched"] == report["tokens"]["total"] == 32


def test_int4_converts_and_verifies(phi3v, image, tmp_path):
    out = tmp_path / "int4"
    convert(str(phi3v), out, dtype="int4", trust_remote_code=True)
    report = _verify(out, phi3v, image)
    assert report["verdict"] == "PASS", [(c["name"], c["verdict"]) for c in report["components"]]


def _chat(package: Path, prompt: str, images: list[Path]) -> list[int]:
    import subprocess
    import sys

    cmd = [str(Path(sys.executable).parent / "mmforge"), "chat", str(package), "--prompt", prompt,
           "--max-new-tokens", "32", "--json"]  # fmt: skip
    for path in images:
        cmd += ["--image", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    return list(json.loads(out.stdout)["token_ids"])


@pytest.mark.parametrize("n_images", [1, 0, 2])
def test_chat_answers_token_for_token_like_the_reference(package, phi3v, image, square, n_images):
    """The runtime's answer equals the reference's greedy answer on the same prompt: image
    N's placeholders as -N ids, the HD crops, the global view made as HF makes it; with
    two images of different crop counts too."""
    import torch

    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference

    images = [image, square][:n_images]
    prompt = ["Hello there, how are you?", "Describe this.", "Compare these."][n_images]
    answer = _chat(package, prompt, images)
    rt = Runtime(package)
    checkpoint = Checkpoint.read(phi3v, trust_remote_code=True)
    messages = hf_reference.messages_for(prompt, len(images))
    templated = rt.prompt(hf_reference.template_messages(checkpoint, messages))
    inputs = rt.process(templated, images, [])
    arrays = {k: v.copy() for k, v in inputs.arrays.items()}
    del rt
    ref = hf_reference.from_runtime(checkpoint, "", arrays)
    model = hf_reference.load_model(checkpoint)
    with torch.no_grad():
        expected = hf_reference.greedy_generate(model, ref, 32)
    assert answer == expected


def test_a_hd_transform_variant_other_than_the_release_is_refused_by_name(phi3v, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(phi3v, folder)
    config = json.loads((folder / "config.json").read_text())
    config["embd_layer"]["hd_transform_order"] = "glb_sub"
    (folder / "config.json").write_text(json.dumps(config))
    checkpoint = Checkpoint.read(folder, trust_remote_code=True)
    (refused,) = checkpoint.field_review.refused
    assert "embd_layer.hd_transform_order = 'glb_sub'" in refused.sentence()


def test_mobius_builds_the_bare_tower_the_runtime_cannot_use(phi3v):
    """The measured reason: mobius's vision graph takes [crops, 3, 336, 336] and returns
    raw CLIP features, with no image_sizes input; the runtime's phi3v pipeline binds
    image_sizes and expects features as wide as the decoder."""
    import contextlib
    import io

    from mobius._builder import build_from_module
    from mobius._config_resolver import _config_from_hf, _default_task_for_model
    from mobius._registry import registry
    from transformers import PretrainedConfig

    written = json.loads((phi3v / "config.json").read_text())
    hf = PretrainedConfig(**written)
    module_class = registry.get("phi3_v")
    with contextlib.redirect_stdout(io.StringIO()):
        config = _config_from_hf(hf, parent_config=hf, module_class=module_class)
        package = build_from_module(module_class(config), config, _default_task_for_model("phi3_v"))
    vision = package["vision_encoder"].graph
    assert [v.name for v in vision.inputs] == ["pixel_values"]  # no image_sizes
    (features,) = vision.outputs
    assert features.shape[-1] == written["img_processor"]["image_dim_out"]
    embedding = {v.name: v for v in package["embedding"].graph.inputs}
    assert embedding["image_features"].shape[-1] == written["hidden_size"] != 32


# The released processor's sizes (`calc_hd_transform_size`), restated apart from
# picture_sizing.py: transposed when portrait, the widest scale whose rows fit, padded.
def _released_canvas(width: int, height: int, crops: int = 16) -> tuple[int, int]:
    import numpy as np

    swap = width < height
    if swap:
        width, height = height, width
    ratio = width / height
    scale = 1
    while scale * np.ceil(scale / ratio) <= crops:
        scale += 1
    scale -= 1
    new_w = int(scale * 336)
    padded_h = int(np.ceil(int(new_w / ratio) / 336) * 336)
    return (padded_h, new_w) if swap else (new_w, padded_h)


def test_the_hd_canvas_is_the_released_size_and_the_runtime_keeps_every_one():
    """`phi3v_hd`'s target is the released HD_transform's padded size; handed that canvas,
    the runtime's Phi3ImageTransform (16 crops) resizes and pads nothing, for every size.
    The unpadded size would not do: for 4.5% of sizes the runtime makes it a pixel
    shorter (int(new_w / (new_w / new_h)) truncates), e.g. 946×1344 → 945×1344."""
    from mmforge.backend.families.phi3v.preprocess import phi3v_sizing
    from mmforge.backend.picture_sizing import Sizing, phi3v_hd_fit

    sizing = phi3v_sizing()
    assert Sizing.from_dict(sizing.to_dict()) == sizing
    canvases = set()
    for width in range(1, 2400, 7):
        for height in range(1, 2400, 11):
            canvas = sizing.target(width, height)
            assert canvas == _released_canvas(width, height), (width, height)
            canvases.add(canvas)
    assert len(canvases) == 31  # 16 landscape shapes (one square), and the 15 transposed
    assert all(sizing.runtime_keeps(*c) for c in canvases)
    fit = phi3v_hd_fit(100, 142, 336, 16)[0]
    assert fit == (946, 1344) and phi3v_hd_fit(*fit, 336, 16)[0] == (945, 1344)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    """The pictures people send (a JPEG, an EXIF phone photo stored sideways, a palette PNG
    with transparency, a 6000×4000 camera JPEG, ...) and a wide, a tall and a large tall one."""
    from tests.images import noise_picture, user_pictures

    folder = tmp_path_factory.mktemp("phi3v_photos")
    sent = {k: Path(v) for k, v in user_pictures(folder).items()}
    sent["wide"] = noise_picture(folder, "wide.png", 500, 300, seed=2)
    sent["tall"] = noise_picture(folder, "tall.png", 300, 500, seed=3)
    sent["large_tall"] = noise_picture(folder, "large_tall.jpg", 2000, 3000, seed=4)
    return sent


def _direct_canvas(image, crops: int = 16):
    """The HD canvas resized without transposing (both passes in PIL's order) and padded."""
    from PIL import Image

    from mmforge.backend.picture_sizing import phi3v_hd_fit

    (new_w, new_h), (pad_w, pad_h) = phi3v_hd_fit(image.width, image.height, 336, crops)
    canvas = Image.new("RGB", (pad_w, pad_h), (255, 255, 255))
    canvas.paste(image.resize((new_w, new_h), Image.Resampling.BILINEAR),
                 ((pad_w - new_w) // 2, (pad_h - new_h) // 2))  # fmt: skip
    return canvas


def _runtime_and_reference(package: Path, phi3v: Path):
    """(the runtime, its prompt for one image, the checkpoint)."""
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference

    checkpoint = Checkpoint.read(phi3v, trust_remote_code=True)
    runtime = Runtime(package)
    messages = hf_reference.template_messages(checkpoint, hf_reference.messages_for("Hi.", 1))
    return runtime, runtime.prompt(messages), checkpoint


@pytest.mark.slow
def test_the_runtimes_own_hd_transform_rounds_a_portrait_picture_otherwise(
    package, phi3v, photos, tmp_path
):
    """What makes the intake hand the HD canvas (ONNX Runtime GenAI 0.18, measured): handed
    a picture at its own size (a package converted before it recorded its sizing), the
    runtime's Phi3ImageTransform gives a landscape picture's crops to float rounding (a
    palette picture's too, laid on white on both sides); a portrait picture's differ by
    one 8-bit level (0.0150 after normalisation) in 13-19% of values: the runtime resizes
    it as it stands, where the released processor transposes it first, so PIL's two
    bilinear passes run in the other order and round elsewhere."""
    import numpy as np

    from mmforge.backend import pictures
    from mmforge.backend.attachments import IMAGE, prepare
    from mmforge.backend.families._hf_image import normalize, to_uint8_chw
    from mmforge.backend.families.phi3v.preprocess import RUNTIME_CROPS, phi3v_images

    runtime, prompt, checkpoint = _runtime_and_reference(package, phi3v)
    settings = dict(checkpoint.preprocessor.data)
    level = max(1 / 255 / s for s in settings["image_std"])
    for kind in ("jpeg", "exif", "palette", "wide", "tall", "large_tall"):
        loaded = pictures.load(photos[kind])
        hf = phi3v_images([loaded], settings, num_crops=RUNTIME_CROPS)["pixel_values"][0, 1:]
        own_size = prepare(photos[kind], IMAGE, tmp_path / kind, None)
        arrays = runtime.process(prompt, [own_size.path]).arrays
        rt = arrays["pixel_values"][0, 1:]
        apart = float(np.abs(rt - hf.numpy()).max())
        if loaded.width >= loaded.height:
            assert apart < 1e-5, (kind, apart)
            continue
        assert abs(apart - level) < 1e-4, (kind, apart)
        direct = normalize(to_uint8_chw(_direct_canvas(pictures.on_white(loaded))), 1 / 255,
                           settings["image_mean"], settings["image_std"])  # fmt: skip
        rows, cols = (int(v) // 336 for v in arrays["image_sizes"][0])
        tiles = direct.reshape(3, rows, 336, cols, 336).permute(1, 3, 0, 2, 4)
        tiles = tiles.reshape(-1, 3, 336, 336).numpy()
        assert np.abs(rt[: rows * cols] - tiles).max() < 1e-5, kind


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["jpeg", "exif", "tall", "palette", "large", "large_tall", "wide", "png16", "cmyk"]
)
def test_the_runtime_gets_the_reference_pixels_through_the_intake(
    package, phi3v, photos, tmp_path, kind
):
    """The package records the HD canvas (`phi3v_hd`), which the intake hands the runtime:
    its Phi3ImageTransform resizes and pads nothing, so every crop, the image sizes and the
    placeholder count are the reference's, and the global view the vision graph makes from
    the crops (`from_runtime`) is the reference's: every pixel to float rounding, portrait
    pictures included."""

    from mmforge.backend import pictures
    from mmforge.backend.attachments import IMAGE, package_intake, prepare
    from mmforge.backend.families.phi3v.preprocess import RUNTIME_CROPS, phi3v_images, phi3v_sizing
    from mmforge.backend.verify import hf_reference

    intake = package_intake(package)
    assert intake is not None and intake.sizing == phi3v_sizing()
    runtime, prompt, checkpoint = _runtime_and_reference(package, phi3v)
    settings = dict(checkpoint.preprocessor.data)
    ref = phi3v_images([pictures.load(photos[kind])], settings, num_crops=RUNTIME_CROPS)
    sent = prepare(photos[kind], IMAGE, tmp_path, intake)
    arrays = runtime.process(prompt, [sent.path]).arrays
    assert arrays["image_sizes"].tolist() == ref["image_sizes"].tolist()
    assert int((arrays["input_ids"] == -1).sum()) == ref["num_img_tokens"][0]
    rt = hf_reference.from_runtime(checkpoint, prompt, arrays).tensors["pixel_values"]
    assert rt.shape == ref["pixel_values"].shape
    assert float((rt - ref["pixel_values"]).abs().max()) < 1e-5


def test_the_transcript_draws_the_picture_within_the_hd_canvas(photos, tmp_path):
    """The runtime's copy is the white-padded canvas; `shown_box` is the picture in it, at
    the shape the user took it (the HD transform keeps the aspect), so chat draws that
    part alone."""
    import numpy as np
    from PIL import Image

    from mmforge.backend.attachments import IMAGE, prepare
    from mmforge.backend.families.phi3v.preprocess import phi3v_sizing
    from mmforge.backend.picture_sizing import Intake

    intake = Intake(on_white=True, sizing=phi3v_sizing())
    for kind, (width, height) in {"wide": (500, 300), "tall": (300, 500)}.items():
        sent = prepare(photos[kind], IMAGE, tmp_path / kind, intake)
        left, top, w, h = sent.shown_box
        assert (sent.shown_width, sent.shown_height) == (0, 0)  # nothing stretched
        assert abs(w / h - width / height) < 0.01
        with Image.open(sent.path) as canvas:
            assert canvas.size == phi3v_sizing().target(width, height)
            pixels = np.asarray(canvas.convert("RGB"))
        inside = np.zeros(pixels.shape[:2], dtype=bool)
        inside[top : top + h, left : left + w] = True
        assert (pixels[~inside] == 255).all(), kind  # the padding is white
        assert (left, top) == ((0, (pixels.shape[0] - h) // 2) if kind == "wide" else
                               ((pixels.shape[1] - w) // 2, 0))  # fmt: skip


@pytest.mark.slow
def test_a_package_converted_before_it_recorded_its_sizing_still_chats_and_verifies(
    package, phi3v, photos, tmp_path
):
    """No sizing in the manifest's `pictures` (as every Phi-3.5-Vision package converted
    before it was recorded): the picture reaches the runtime at its own size (its own
    transform makes the canvas) and verify still passes a landscape picture."""
    from mmforge.backend.attachments import package_intake

    old = tmp_path / "old"
    shutil.copytree(package, old)
    manifest = json.loads((old / "mmforge_manifest.json").read_text())
    manifest["pictures"]["sizing"] = None
    (old / "mmforge_manifest.json").write_text(json.dumps(manifest))
    intake = package_intake(old)
    assert intake is not None and intake.sizing is None
    report = _verify(old, phi3v, photos["jpeg"])
    assert report["verdict"] == "PASS", [(c["name"], c["reason"]) for c in report["components"]]
    assert len(_chat(old, "Describe this.", [photos["tall"]])) == 32
