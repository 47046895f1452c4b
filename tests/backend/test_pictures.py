"""Pictures as transformers sees them: the intake against transformers' own code.

`load` against transformers' `load_image`, the size rules against transformers' own
functions, and, for every family whose package records its sizing, the runtime's
pixels from chat's intake against the HF processor's from the user's file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmforge.backend import picture_sizing, pictures
from mmforge.backend.attachments import IMAGE, AttachmentError, first_look, package_intake, prepare
from mmforge.backend.families import PixelsRequest
from mmforge.backend.picture_sizing import Intake, Sizing
from tests.backend.families import TESTED
from tests.images import user_pictures

KINDS = ["jpeg", "exif", "tie", "large", "palette", "png16", "cmyk"]


@pytest.fixture(scope="module")
def sent(tmp_path_factory):
    """The pictures people attach (a 6000×4000 camera JPEG among them), made once."""
    return user_pictures(tmp_path_factory.mktemp("pictures"))


@pytest.mark.parametrize("kind", KINDS)
def test_load_gives_transformers_load_image_pixels(sent, kind):
    from transformers.image_utils import load_image

    ours = pictures.load(sent[kind])
    theirs = load_image(str(sent[kind]))
    assert ours.mode == theirs.mode == "RGB"
    assert ours.size == theirs.size
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))


def test_the_exif_orientation_is_applied(sent):
    stored = Image.open(sent["exif"]).size
    assert pictures.load(sent["exif"]).size == (stored[1], stored[0])
    assert "upright" in prepare(sent["exif"], IMAGE, sent["exif"].parent / "out").note


def _sizes():
    # Ties at 28 and 32 px (k + 1/2 blocks, k even and odd), their neighbours, extreme
    # aspect ratios, pictures past either end of the pixel budget.
    sides = [14, 16, 27, 28, 29, 42, 48, 70, 80, 126, 144, 812, 1134, 1136, 2000, 4000, 6000]
    return [(h, w) for h in sides for w in sides if max(h, w) / min(h, w) <= 200]


@pytest.mark.parametrize("factor", [28, 32])
def test_smart_resize_is_transformers_own(factor):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    for low, high in ((56 * 56, 28 * 28 * 1280), (factor * factor, 16384), (4096, 12845056)):
        for h, w in _sizes():
            assert picture_sizing.smart_resize(h, w, factor, low, high) == smart_resize(
                h, w, factor=factor, min_pixels=low, max_pixels=high
            ), (h, w, low, high)


def test_the_runtime_rounds_ties_away_from_zero_and_transformers_to_even():
    assert picture_sizing.smart_resize(56, 70, 28, 3136, 50176) == (56, 56)
    assert picture_sizing.runtime_smart_resize(56, 70, 28, 3136, 50176) == (56, 84)
    assert (
        picture_sizing.is_tie(70, 28)
        and picture_sizing.is_tie(1134, 28)
        and not picture_sizing.is_tie(84, 28)
    )


def test_longest_edge_is_transformers_pixtral_size():
    from transformers.models.pixtral.image_processing_pil_pixtral import (
        get_resize_output_image_size,
    )

    for edge, block in ((1540, 28), (1024, 32), (128, 16)):
        for h, w in _sizes():
            image = np.zeros((h, w, 3), np.uint8)
            theirs = get_resize_output_image_size(image, edge, block)
            assert picture_sizing.longest_edge_size(h, w, edge, block) == tuple(theirs), (
                h,
                w,
                edge,
            )


def test_a_sizing_record_round_trips_and_a_broken_one_reads_as_none():
    sizing = Sizing("smart_resize", "bicubic", factor=28, min_pixels=3136, max_pixels=50176)
    assert Sizing.from_dict(json.loads(json.dumps(sizing.to_dict()))) == sizing
    broken = [
        None,
        [],
        {"rule": "smart_resize"},
        {**sizing.to_dict(), "resample": "sinc"},
        {**sizing.to_dict(), "factor": 0},
        {**sizing.to_dict(), "min_pixels": 10**9},
        {**sizing.to_dict(), "max_pixels": 1.5},
        {**sizing.to_dict(), "factor": True},
        {"rule": "fixed", "resample": "bilinear", "width": -1, "height": 8},
    ]
    assert all(Sizing.from_dict(b) is None for b in broken)
    intake = Intake(on_white=False, sizing=sizing)
    assert Intake.from_dict(json.loads(json.dumps(intake.to_dict()))) == intake
    assert Intake.from_dict({"on_white": True, "sizing": None}) == Intake(True, None)
    assert Intake.from_dict({"on_white": True, "sizing": {"rule": "x"}}) is None
    assert Intake.from_dict({"on_white": "yes", "sizing": None}) is None
    assert Intake.from_dict({}) is None


def test_a_transparent_colour_is_laid_on_white_only_where_the_processor_does(sent, tmp_path):
    from transformers.image_transforms import convert_to_rgb
    from transformers.image_utils import load_image

    theirs = np.asarray(convert_to_rgb(load_image(str(sent["palette"]))))
    white = prepare(sent["palette"], IMAGE, tmp_path / "w", Intake(True, None))
    kept = prepare(sent["palette"], IMAGE, tmp_path / "k", Intake(False, None))
    with Image.open(white.path) as a, Image.open(kept.path) as b:
        assert "transparency" not in a.info and "transparency" not in b.info
        assert np.array_equal(np.asarray(a), theirs)
        assert np.array_equal(np.asarray(b), np.asarray(load_image(str(sent["palette"]))))
        assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_a_large_photo_is_resized_once_from_the_original_as_transformers_does(sent, tmp_path):
    from transformers.image_utils import load_image

    sizing = Sizing("smart_resize", "bicubic", factor=28, min_pixels=3136, max_pixels=12845056)
    prepared = prepare(sent["large"], IMAGE, tmp_path, Intake(True, sizing))
    h, w = picture_sizing.smart_resize(4000, 6000, 28, 3136, 12845056)
    assert (prepared.width, prepared.height) == (w, h) == (4368, 2912)
    expected = load_image(str(sent["large"])).resize((w, h), Image.Resampling.BICUBIC)
    with Image.open(prepared.path) as image:
        assert np.array_equal(np.asarray(image), np.asarray(expected))


def test_transformers_refusal_of_an_elongated_picture_is_the_files_fault(tmp_path):
    path = tmp_path / "strip.png"
    Image.new("RGB", (4020, 20)).save(path)
    sizing = Sizing("smart_resize", "bicubic", factor=28, min_pixels=3136, max_pixels=50176)
    with pytest.raises(AttachmentError, match=r"strip\.png: 4020×20 is more elongated"):
        prepare(path, IMAGE, tmp_path / "out", Intake(True, sizing))


FORMATS = ["BMP", "PCX", "PPM", "SGI", "DDS", "ICO", "WEBP", "JPEG2000", "PNG", "JPEG", "TIFF"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_damaged_picture_is_named_as_the_files_fault(tmp_path, fmt):
    import io

    whole = io.BytesIO()
    Image.effect_noise((64, 48), 60).convert("RGB").save(whole, format=fmt)
    path = tmp_path / f"broken.{fmt.lower()}"
    path.write_bytes(whole.getvalue()[: len(whole.getvalue()) * 6 // 10])  # cut short
    for check in (lambda: first_look(path, IMAGE), lambda: prepare(path, IMAGE, tmp_path)):
        try:
            check()
        except AttachmentError as e:
            assert e.one_line().startswith(f"Cannot attach broken.{fmt.lower()}: ")
            assert "Internal" not in e.one_line()
            break
    else:
        raise AssertionError(f"a {fmt} file cut short was accepted")


# The families whose pictures mmforge sizes itself to the last pixel.
EXACT = {
    *("qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe", "gemma3", "gemma4", "gemma4_unified"),
    *("mistral3", "lfm2_vl", "qwen3_vl_moe", "qwen2_vl", "pixtral", "llava", "vipllava"),
    *("paligemma", "glm4v", "glm4v_moe", "video_llava", "idefics2", "internvl", "idefics3"),
    *("smolvlm", "gemma3n", "phi4mm", "llava_next"),
}


@pytest.mark.slow
@pytest.mark.parametrize("family", TESTED)
def test_the_runtime_gets_transformers_pixels_for_every_picture(family, package, sent, tmp_path):
    """Each picture kind, through chat's intake, gives the HF processor's pixels.

    HF reads the user's file with load_image; the runtime gets chat's intake copy. Where
    mmforge sizes the picture, to float rounding; elsewhere within verify's bounds.
    """
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference
    from mmforge.backend.verify.preprocessing import _pixel_verdict

    folder = package(family)
    intake = package_intake(folder)
    assert intake is not None, "the package records how transformers reads its pictures"
    assert (intake.sizing is not None) == (family in EXACT)
    manifest = json.loads((folder / "mmforge_manifest.json").read_text())
    # As verify reads it: an approximated package's reference takes its overrides.
    checkpoint = Checkpoint.read(
        Path(manifest["source"]), approximate=bool(manifest.get("approximation"))
    )
    reference = checkpoint.family.reference
    image_token = json.loads((folder / "genai_config.json").read_text())["model"]["image_token_id"]
    runtime = Runtime(folder)
    messages = hf_reference.messages_for("Describe.", 1, 0)
    prompt = runtime.prompt(messages)
    for kind in KINDS:
        ref = hf_reference.prepare(checkpoint, messages, [pictures.load(sent[kind])], [])
        attachment = prepare(sent[kind], IMAGE, tmp_path / kind, intake)
        arrays = runtime.process(prompt, [attachment.path]).arrays
        made = int((arrays["input_ids"] == image_token).sum())
        assert made == ref.input_ids.count(image_token), kind
        rt_all = hf_reference.from_runtime(checkpoint, prompt, arrays).tensors
        rt = rt_all[reference.pixel_key].float().numpy()
        hf = ref.tensors[reference.pixel_key].float().numpy()
        if reference.hf_pixels is not None:  # as verify compares them
            loaded = [pictures.load(sent[kind])]
            hf = reference.hf_pixels(PixelsRequest(checkpoint, loaded, arrays, hf, rt))
        assert rt.shape == hf.shape, (kind, rt.shape, hf.shape)
        rt_c, hf_c = reference.channels_first(rt), reference.channels_first(hf)
        largest = float(np.abs(rt_c - hf_c).max())
        if family in EXACT:
            assert math.isfinite(largest) and largest < 1e-5, (kind, largest)
        else:
            verdict, why, _, _ = _pixel_verdict(rt_c, hf_c, reference.pixel_outliers or 0.01)
            assert verdict == "PASS", (kind, why)
