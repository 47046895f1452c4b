"""Idefics2: HF inputs for verify, as Idefics2Processor makes them."""

from __future__ import annotations

import re
from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import ReferenceInputs, image_processor
from mmforge.backend.families.idefics2.graphs import PARTS, split_tokens, tokens_per_image

FAKE = "<fake_token_around_image>"
IMAGE = "<image>"


def expand(prompt: str, per_image: int, parts: int = 1) -> str:
    """Idefics2Processor's text: each `<image>` framed by fake tokens, `per_image` long.

    A split picture is its `parts` framed so, one after another. Adjacent pictures (and
    parts) share their fake token, and a closing fake token that text follows directly
    (not whitespace, not `<`) gets a space after it (processing_idefics2.py).
    """
    picture = (FAKE + IMAGE * per_image + FAKE) * parts
    text = prompt.replace(IMAGE, picture).replace(FAKE + FAKE, FAKE)
    return re.sub(rf"{re.escape(FAKE)}(?=[^\s<])", FAKE + " ", text)


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Idefics2Processor's inputs: ids, pixels [1, N, 3, H, W] and their pixel mask.

    Pictures of different sizes are padded to one and masked; a splitting processor
    makes five parts a picture.
    """
    import torch

    checkpoint = request.checkpoint
    tensors: dict[str, Any] = {}
    parts = 1
    if request.images:
        processor = image_processor(checkpoint)
        parts = PARTS if getattr(processor, "do_image_splitting", False) else 1
        out = processor(images=[request.images], return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
        tensors["pixel_attention_mask"] = out["pixel_attention_mask"]
    expanded = expand(request.prompt, tokens_per_image(checkpoint.cfg), parts)
    ids = list(request.tokenizer(expanded)["input_ids"])
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's canvases as HF's pictures, padded to the largest and masked."""
    import torch

    canvases = request.arrays.get("pixel_values")
    if canvases is not None:
        pixels, mask = unpack_canvases(canvases)
        request.inputs.tensors["pixel_values"] = torch.from_numpy(pixels)
        request.inputs.tensors["pixel_attention_mask"] = torch.from_numpy(mask)


def from_runtime_split(request: RuntimeArrays) -> None:
    """The runtime's canvases as HF's five parts a picture, and its ids as HF's.

    Pixels: each canvas (picture_sizing.canvas_size) cut into its parts, at the sizes its
    header holds, padded to the largest with zeros and masked, as Idefics2ImageProcessor
    pads them: [1, 5 N, 3, H, W] and the pixel mask. Ids: in each run of 5 K + 4 image
    ids, the four between the parts are Idefics2's fake token (`read_split_ids`).
    """
    import torch

    cfg, result = request.cfg, request.inputs
    ids = read_split_ids(result.input_ids, cfg)
    result.input_ids = ids
    result.tensors["input_ids"] = torch.tensor([ids], dtype=torch.int64)
    canvases = request.arrays.get("pixel_values")
    if canvases is None:
        return
    pixels, mask = unpack_canvases(canvases)
    result.tensors["pixel_values"] = torch.from_numpy(pixels)
    result.tensors["pixel_attention_mask"] = torch.from_numpy(mask)


def read_split_ids(ids: list[int], cfg: Any) -> list[int]:
    """The runtime's ids with the fake token between a split picture's parts.

    Each maximal run of exactly 5 K + 4 image ids (`split_tokens`) after another id is
    one picture, and the id before it its opening fake token (the runtime's marker, read
    as <fake_token_around_image>): ids K, 2 K + 1, 3 K + 2 and 4 K + 3 of the run become
    that id. Preprocessing then compares the result with Idefics2Processor's own ids.
    """
    image = int(cfg.get("image_token_id"))
    per_part, length = tokens_per_image(cfg), split_tokens(cfg)
    out = list(ids)
    start = 0
    while start < len(out):
        if out[start] != image:
            start += 1
            continue
        end = start
        while end < len(out) and out[end] == image:
            end += 1
        if end - start == length and start > 0:
            for part in range(1, PARTS):
                out[start + part * (per_part + 1) - 1] = out[start - 1]
        start = end
    return out


def unpack_canvases(canvases: Any) -> tuple[Any, Any]:
    """Canvases [.., N, 3, L + 1, P L] as HF's padded parts [1, P N, 3, H, W] and mask.

    P parts a canvas (five for a split picture, else one). The header's values are read
    through slot 0's black and white pixels, as the vision graph reads them
    (graphs.canvas_vision_graph).
    """
    import numpy as np

    from mmforge.backend.picture_sizing import CANVAS_HEADER_ROWS

    canvases = np.asarray(canvases, dtype=np.float32)
    canvases = canvases.reshape(-1, *canvases.shape[-3:])
    side = canvases.shape[-2] - CANVAS_HEADER_ROWS
    if side < 4 or canvases.shape[-1] % side:
        raise ValueError(
            f"pixels of {canvases.shape[-2:]} are not this package's picture canvas: it was "
            "converted before mmforge packed Idefics2's pictures; convert the model again"
        )
    header = canvases[:, :, 0, :]
    black, white = header[:, :, 2:3], header[:, :, 3:4]
    levels = np.rint((header - black) / (white - black) * 255).astype(np.int64)
    parts, sizes = [], []
    for n in range(canvases.shape[0]):
        for slot in range(canvases.shape[-1] // side):
            at = slot * side
            h = int(levels[n, 0, at] * 256 + levels[n, 1, at])
            w = int(levels[n, 0, at + 1] * 256 + levels[n, 1, at + 1])
            if not (0 < h <= side and 0 < w <= side):
                raise ValueError(
                    f"picture canvas {n} holds no part in slot {slot} ({h}×{w} px): hand "
                    "this package pictures through mmforge's chat or verify"
                )
            rows = slice(CANVAS_HEADER_ROWS, CANVAS_HEADER_ROWS + h)
            parts.append(canvases[n, :, rows, at : at + w])
            sizes.append((h, w))
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    pixels = np.zeros((1, len(parts), 3, height, width), np.float32)
    mask = np.zeros((1, len(parts), height, width), np.int64)
    for k, (part, (h, w)) in enumerate(zip(parts, sizes, strict=True)):
        pixels[0, k, :, :h, :w] = part
        mask[0, k, :h, :w] = 1
    return pixels, mask
