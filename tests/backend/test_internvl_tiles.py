"""InternVL's tiled pictures, exact on the qwen2_5_vl pipeline (backend/internvl_tiles.py).

The tile grid against transformers' own function; the runtime's pixels, ids and chat's
greedy answers against InternVLProcessor and InternVLForConditionalGeneration on the
pictures people send (a JPEG, an EXIF-rotated phone photo, a wide and a tall picture,
two pictures of different sizes in one message); the sizing's manifest record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmforge.backend import internvl_tiles
from tests.images import noise_picture, user_pictures

TOKENS = 12
QUESTION = "What is in the pictures?"


def _sizes() -> list[tuple[int, int]]:
    """(height, width): photos, square ties past 1 × 1, extremes, random sizes."""
    rng = np.random.default_rng(0)
    out = [(200, 300), (300, 200), (448, 448), (640, 640), (634, 634), (1, 5000), (5000, 1)]
    out += [(896, 448), (448, 896), (3024, 4032), (64, 120), (9, 1000), (1000, 60)]
    out += [tuple(int(v) for v in rng.integers(1, 6000, 2)) for _ in range(300)]
    return out


def test_the_tile_grid_and_view_count_are_transformers():
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import (
        GotOcr2ImageProcessorPil,
        get_optimal_tiled_canvas,
    )

    for least, most in ((1, 12), (1, 6), (2, 12), (1, 1), (3, 4)):
        processor = GotOcr2ImageProcessorPil(
            size={"height": 448, "width": 448}, min_patches=least, max_patches=most
        )
        for h, w in _sizes():
            if most > 1:
                theirs = get_optimal_tiled_canvas((h, w), (448, 448), least, most)
                assert internvl_tiles.tile_grid(h, w, 448, least, most) == tuple(theirs)
            count = processor.get_number_of_image_patches(h, w, {"crop_to_patches": True})
            assert internvl_tiles.view_count(h, w, 448, least, most) == count


def test_the_sizing_is_recorded_and_read_back_and_a_broken_one_is_refused():
    from mmforge.backend.picture_sizing import TILED_VIEWS, Sizing

    sizing = Sizing(
        TILED_VIEWS, "bicubic", factor=448, width=448, height=448, min_crops=1, max_crops=12
    )
    assert Sizing.from_dict(json.loads(json.dumps(sizing.to_dict()))) == sizing
    assert sizing.runtime_keeps(448, 448 * 13) and sizing.stretches
    assert sizing.target(900, 300) == (448, 448 * 4)  # 3 × 1 tiles and the thumbnail
    assert "12 tiles of 448×448 px" in sizing.describe()
    for broken in ({"min_crops": 0}, {"min_crops": 13}, {"max_crops": 40}, {"height": 224}):
        assert Sizing.from_dict({**sizing.to_dict(), **broken}) is None


@pytest.fixture(scope="module")
def internvl_package(tiny, package) -> tuple[Path, Path]:
    return tiny("internvl"), package("internvl")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("internvl-pictures")
    people = user_pictures(folder, big=(1600, 1200))
    return {
        "jpeg": Path(str(people["jpeg"])),
        "exif": Path(str(people["exif"])),
        "wide": noise_picture(folder, "wide.png", 1200, 260, seed=3),
        "tall": noise_picture(folder, "tall.jpg", 150, 500, seed=4),
    }


def _upright(path: Path) -> Any:
    """The picture as transformers' load_image gives it: EXIF orientation applied, RGB."""
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def internvl_processor(folder: Path) -> Any:
    """transformers' InternVLProcessor, its video processor left out (it needs torchvision)."""
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.internvl.processing_internvl import InternVLProcessor

    class Processor(InternVLProcessor):
        def check_argument_for_proper_class(self, name, argument):
            if name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(name, argument)

    return Processor(
        image_processor=AutoImageProcessor.from_pretrained(folder, backend="pil"),
        tokenizer=AutoTokenizer.from_pretrained(folder),
        video_processor=None,
    )


def _transformers(folder: Path, paths: list[Path], n_tokens: int) -> tuple[list[int], list[int]]:
    """InternVLProcessor's ids on the checkpoint's template, and greedy generate on them."""
    import torch

    from mmforge.backend.verify import hf_reference

    processor = internvl_processor(folder)
    content = [{"type": "image"} for _ in paths] + [{"type": "text", "text": QUESTION}]
    prompt = processor.tokenizer.apply_chat_template(
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
    [["jpeg"], ["exif"], ["wide"], ["tall"], ["wide", "jpeg"]],
    ids=["jpeg", "exif-phone", "wide", "tall", "two-sizes"],
)
def test_chat_json_answers_with_internvl_processors_ids_and_tokens(
    internvl_package, pictures, capsys, names
):
    from mmforge.app.cli import main
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession

    folder, package_folder = internvl_package
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


def test_the_runtimes_pixels_are_the_processors(internvl_package, pictures):
    """Every view (the tiles row by row, then the thumbnail) within float rounding of
    InternVLProcessor's, for a wide picture (5 × 1 tiles), a phone photo and a JPEG (3 × 2)."""
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.verify import hf_reference

    folder, package_folder = internvl_package
    paths = [pictures["wide"], pictures["exif"], pictures["jpeg"]]
    session = ChatSession(package_folder)
    try:
        attachments = session.prepare_attachments([(p, IMAGE) for p in paths])
        prompt = session.runtime.prompt(
            [{"role": "user", "content": [{"type": "image"} for _ in paths]}]
        )
        runtime = session.runtime.process(prompt, [a.path for a in attachments])
    finally:
        session.close()
    ours = hf_reference.from_runtime(folder, runtime.prompt, runtime.arrays).tensors
    processor = internvl_processor(folder)
    theirs = processor.image_processor(
        [_upright(p) for p in paths], crop_to_patches=True, return_tensors="pt"
    )
    assert [int(n) for n in theirs["num_patches"]] == [6, 3, 7]
    assert ours["pixel_values"].shape == theirs["pixel_values"].shape
    assert float((ours["pixel_values"] - theirs["pixel_values"]).abs().max()) < 1e-5
