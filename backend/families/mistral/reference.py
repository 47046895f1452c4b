"""Mistral 3: HF inputs for verify, and its placeholder and pixel checks."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import Cfg
from mmforge.backend.families._hooks import (
    LayoutCheck,
    LayoutRequest,
    PixelsRequest,
    ReferenceRequest,
    RuntimeArrays,
)
from mmforge.backend.families._reference import (
    ReferenceInputs,
    finish,
    image_processor,
    replace_each,
)


def merge_size(cfg: Cfg) -> int:
    """The projector's patch merge: Mistral 3's `spatial_merge_size`, or 1 (none).

    Pixtral-12B's LLaVA projector has no merge and its config no such field.
    """
    if cfg.get("model_type") == "llava":
        return 1
    return int(cfg.get("spatial_merge_size", 2))


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """PixtralProcessor's inputs: rows of [IMG] closed by [IMG_BREAK], then [IMG_END]."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    cfg = checkpoint.cfg
    tensors: dict[str, Any] = {}
    reps: list[str] = []
    if images:
        block = int(cfg.get("vision_config.patch_size", 14)) * merge_size(cfg)
        out = image_processor(checkpoint)(
            images=images, patch_size={"height": block, "width": block}, return_tensors="pt"
        )
        tensors = {"pixel_values": out["pixel_values"], "image_sizes": out["image_sizes"]}
        for height, width in out["image_sizes"].tolist():
            rows = ["[IMG]" * (width // block) + "[IMG_BREAK]"] * (height // block)
            reps.append("".join(rows)[: -len("[IMG_BREAK]")] + "[IMG_END]")
    expanded = replace_each(prompt, "[IMG]", reps)
    return finish(tokenizer, prompt, expanded, tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels and image sizes."""
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        pixels = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["pixel_values"] = pixels
        given = arrays.get("image_sizes")
        sizes = [list(pixels.shape[-2:])] * pixels.shape[0] if given is None else given
        result.tensors["image_sizes"] = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1, 2)


def placeholder_layout(request: LayoutRequest) -> LayoutCheck:
    """Whether the runtime's [IMG] layout follows its own image sizes, and what was found.

    The runtime sizes images by a pixel budget where HF uses the longest edge, so its
    placeholders are checked against the sizes it chose rather than against HF's ids.
    """
    cfg = request.cfg
    ids = request.ids
    arrays = request.arrays
    image_token = request.image_token
    tokenizer = request.tokenizer
    block = int(cfg.get("vision_config.patch_size", 14)) * merge_size(cfg)
    sizes = [(int(h), int(w)) for h, w in arrays.get("image_sizes", [])]
    want_img = sum((h // block) * (w // block) for h, w in sizes)
    want_break = sum(h // block - 1 for h, _ in sizes)
    img_break = tokenizer.convert_tokens_to_ids("[IMG_BREAK]")
    img_end = tokenizer.convert_tokens_to_ids("[IMG_END]")
    got = (sum(t == image_token for t in ids), ids.count(img_break), ids.count(img_end))
    want = (want_img, want_break, len(sizes))
    if got[0] != want[0]:
        return LayoutCheck(
            False,
            f"image token count mismatch: {got[0]} [IMG] tokens for image sizes {sizes} "
            f"(expected {want[0]})",
        )
    if got != want:
        return LayoutCheck(
            False, f"boundary markers differ: [IMG_BREAK]/[IMG_END] {got[1:]} for {want[1:]}"
        )
    return LayoutCheck(True, f"{want_img} image tokens laid out for the runtime's {sizes}")


def pixels_at_runtime_size(request: PixelsRequest) -> Any:
    """HF's pixels for the images resized to the runtime's sizes (its resize differs).

    mmforge hands the runtime pictures already at HF's size (pictures.py): then HF's own
    pixels are the comparison. Otherwise (a package converted before it recorded the
    rule) HF's steps are repeated at the runtime's size: transparency laid on white first,
    as the processor's convert_to_rgb does before it resizes.
    """
    checkpoint = request.checkpoint
    images = request.images
    arrays = request.arrays
    hf = request.hf
    runtime = request.runtime
    from PIL import Image

    from mmforge.backend.pictures import on_white

    if tuple(hf.shape) == tuple(runtime.shape):
        return hf
    processor = image_processor(checkpoint)
    sizes = [(int(h), int(w)) for h, w in arrays["image_sizes"]]
    resized = [
        on_white(img).resize((w, h), Image.Resampling.BICUBIC)
        for img, (h, w) in zip(images, sizes, strict=True)
    ]
    out = processor(images=resized, do_resize=False, return_tensors="pt")["pixel_values"]
    return out.float().numpy()
