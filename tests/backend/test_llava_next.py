"""LLaVA-NeXT's anyres pictures, exact on the qwen2_5_vl pipeline (backend/anyres.py).

The layout's arithmetic against transformers' own functions; the runtime's pixels, ids and
chat's greedy answers against LlavaNextProcessor and LlavaNextForConditionalGeneration on
the pictures people send (a JPEG, an EXIF-rotated phone photo, a camera photo, a wide and
a tall picture, two pictures of different sizes in one message); and what is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmforge.backend import anyres
from tests.images import noise_picture, user_pictures

PINPOINTS = [(336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008)]
TOKENS = 12
QUESTION = "What is in the pictures?"


def _sizes() -> list[tuple[int, int]]:
    """(height, width): photos, rounding ties of the fit and the unpadding, extremes."""
    rng = np.random.default_rng(0)
    out = [(200, 300), (300, 200), (336, 336), (337, 672), (672, 1008), (4000, 6000)]
    out += [(64, 120), (160, 640), (640, 160), (9, 1000), (1000, 60), (1, 49), (3024, 4032)]
    out += [tuple(int(v) for v in rng.integers(20, 5000, 2)) for _ in range(400)]
    return out


def test_the_layout_counts_fits_and_keeps_as_transformers():
    """select_best_resolution, get_patch_output_size, the processor's count and the
    model's unpad_image, on photo sizes, ties and extremes (the function's own code)."""
    import torch
    from transformers.image_processing_utils import select_best_resolution
    from transformers.models.llava_next.modeling_llava_next import unpad_image
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    processor = LlavaNextProcessor.__new__(LlavaNextProcessor)
    processor.image_processor = type("P", (), {"image_grid_pinpoints": PINPOINTS})()
    processor.patch_size, processor.num_additional_image_tokens = 14, 0
    refused = 0
    for h, w in _sizes():
        best = anyres.best_resolution(h, w, PINPOINTS)
        assert best == tuple(select_best_resolution((h, w), PINPOINTS))
        try:
            layout = anyres.Layout.of(h, w, 336, 24, PINPOINTS)
        except anyres.AnyresError:
            refused += 1
            assert max(h, w) / min(h, w) > 20  # only pictures whose tiles keep no row
            continue
        assert layout.ids == processor._get_number_of_features(h, w, 336, 336)
        rows, cols = layout.grid[0] * 24, layout.grid[1] * 24
        plane = torch.arange(rows * cols).reshape(1, rows, cols)
        top, n_rows, left, n_cols = layout.keep
        kept = unpad_image(plane, torch.tensor([h, w]))
        assert torch.equal(kept, plane[:, top : top + n_rows, left : left + n_cols])
        assert anyres.fits(layout)
    assert 0 < refused < 10


def test_a_stacked_picture_splits_into_its_blocks_and_a_forged_one_is_refused(tmp_path):
    layout = anyres.Layout.of(200, 300, 336, 24, PINPOINTS)
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (336, 336, 3), dtype=np.uint8)
    fitted = rng.integers(0, 256, (*layout.fit, 3), dtype=np.uint8)
    pixels, box = anyres.stacked(layout, base, fitted)
    a, b = anyres.split(pixels)
    assert a.shape[:2] == (24 * anyres.PATCH, 24 * anyres.PATCH)
    assert anyres.read_header(a)["block"] == 0 and anyres.read_header(b)["keep_rows"] > 0
    head = anyres.HEADER
    assert (a.reshape(-1, 3)[head : head + 336 * 336] == base.reshape(-1, 3)).all()
    n = fitted.shape[0] * fitted.shape[1]
    assert (b.reshape(-1, 3)[head : head + n] == fitted.reshape(-1, 3)).all()
    left, top, width, height = box
    assert (pixels[top : top + height, left : left + width] == fitted).all()  # what chat draws
    forged = pixels.copy()
    forged[0, 2] = (0, 0, 0)  # the magic's high byte
    with pytest.raises(anyres.AnyresError):
        anyres.split(forged)
    with pytest.raises(anyres.AnyresError):
        anyres.split(pixels[:-1])


@pytest.fixture(scope="module")
def next_package(tiny, package) -> tuple[Path, Path]:
    return tiny("llava_next"), package("llava_next")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("next-pictures")
    people = user_pictures(folder, big=(1600, 1200))
    return {
        "jpeg": Path(str(people["jpeg"])),
        "exif": Path(str(people["exif"])),
        "camera": Path(str(people["large"])),
        "wide": noise_picture(folder, "wide.png", 640, 160, seed=3),
        "tall": noise_picture(folder, "tall.jpg", 150, 500, seed=4),
    }


def _upright(path: Path) -> Any:
    """The picture as transformers' load_image gives it: EXIF orientation applied, RGB."""
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def _transformers(folder: Path, paths: list[Path], n_tokens: int) -> tuple[list[int], list[int]]:
    """LlavaNextProcessor's ids on the checkpoint's template, and greedy generate on them."""
    import torch
    from transformers import AutoImageProcessor, AutoTokenizer, LlavaNextProcessor

    from mmforge.backend.verify import hf_reference

    tokenizer = AutoTokenizer.from_pretrained(folder)
    processor = LlavaNextProcessor(
        image_processor=AutoImageProcessor.from_pretrained(folder),
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    content = [{"type": "image"} for _ in paths] + [{"type": "text", "text": QUESTION}]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=prompt, images=[_upright(p) for p in paths], return_tensors="pt")
    ids = [int(t) for t in inputs["input_ids"][0]]
    model = hf_reference.load_model(folder)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n_tokens, do_sample=False, num_beams=1)
    return ids, [int(t) for t in out[0, len(ids) :]]


def _same_answer(ours: list[int], theirs: list[int], eos: list[int]) -> bool:
    """Ours is theirs, or theirs cut where ours stopped at an end token."""
    return ours == theirs or (bool(ours) and ours == theirs[: len(ours)] and ours[-1] in eos)


@pytest.mark.parametrize(
    "names",
    [["jpeg"], ["exif"], ["camera"], ["wide"], ["tall"], ["jpeg", "wide"]],
    ids=["jpeg", "exif-phone", "camera", "wide", "tall", "two-sizes"],
)
def test_chat_json_answers_with_llava_next_processors_ids_and_tokens(
    next_package, pictures, capsys, names
):
    from mmforge.app.cli import main
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession

    folder, package_folder = next_package
    paths = [pictures[n] for n in names]
    ids, greedy = _transformers(folder, paths, TOKENS)
    session = ChatSession(package_folder)
    try:
        attachments = session.prepare_attachments([(p, IMAGE) for p in paths])
        prompt = session.runtime.prompt(
            [{"role": "user", "content": [{"type": "image"} for _ in paths]
              + [{"type": "text", "text": QUESTION}]}]
        )  # fmt: skip
        runtime = session.runtime.process(prompt, [a.path for a in attachments])
        assert runtime.arrays["input_ids"].reshape(-1).tolist() == ids
    finally:
        session.close()
    argv = ["chat", str(package_folder), "--prompt", QUESTION, "--json"]
    for p in paths:
        argv += ["--image", str(p)]
    assert main([*argv, "--max-new-tokens", str(TOKENS)]) == 0
    chat = json.loads(capsys.readouterr().out)
    assert len(set(greedy)) >= 3, "a degenerate reference would prove nothing"
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert _same_answer(chat["token_ids"], greedy, eos if isinstance(eos, list) else [eos])


def test_the_runtimes_pixels_are_the_processors(next_package, pictures):
    """Every view (the base view and each tile, black where transformers pads) within
    float rounding of LlavaNextImageProcessor's, with its image_sizes."""
    from transformers import AutoImageProcessor

    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.verify import hf_reference

    folder, package_folder = next_package
    paths = [pictures["camera"], pictures["tall"]]
    session = ChatSession(package_folder)
    try:
        attachments = session.prepare_attachments([(p, IMAGE) for p in paths])
        prompt = session.runtime.prompt(
            [{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}]
        )
        runtime = session.runtime.process(prompt, [a.path for a in attachments])
    finally:
        session.close()
    ours = hf_reference.from_runtime(folder, runtime.prompt, runtime.arrays).tensors
    theirs = AutoImageProcessor.from_pretrained(folder)(
        [_upright(p) for p in paths], return_tensors="pt"
    )
    assert ours["image_sizes"].tolist() == theirs["image_sizes"].tolist()
    assert ours["pixel_values"].shape == theirs["pixel_values"].shape
    assert float((ours["pixel_values"] - theirs["pixel_values"]).abs().max()) < 1e-5


def test_a_picture_the_layout_cannot_carry_and_a_raw_file_are_refused_in_words(
    next_package, tmp_path
):
    from mmforge.backend.attachments import IMAGE, AttachmentError
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.errors import MmforgeError

    _, package_folder = next_package
    sliver = noise_picture(tmp_path, "sliver.png", 2000, 3)
    raw = noise_picture(tmp_path, "raw.png", 120, 90)
    session = ChatSession(package_folder)
    try:
        with pytest.raises(AttachmentError, match="keeps nothing of it"):
            session.prepare_attachments([(sliver, IMAGE)])
        prompt = session.runtime.prompt(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
        )
        with pytest.raises(MmforgeError, match="not a picture prepared for this package"):
            session.runtime.process(prompt, [raw])
    finally:
        session.close()
