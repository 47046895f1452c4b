"""Pictures as transformers sees them: the one intake for chat, Compare and verify.

"What the original model sees" starts at the file: transformers' `load_image` opens it
with PIL, applies the EXIF orientation and converts it to RGB as PIL does (palette with
transparency, CMYK, 16-bit, greyscale). ONNX Runtime GenAI 0.18, handed the same file,
sees another picture (measured on the 0.18 wheel, `tests/backend/test_pictures.py`):

- it decodes JPEG with its own decoder: a quality-90 4:2:0 JPEG differs from PIL's
  pixels by up to 0.9 after normalisation;
- it ignores the EXIF orientation: a phone photo stored sideways is seen sideways;
- its `Resize` rounds a half-way side away from zero (`std::round`) where transformers'
  `smart_resize` rounds it to even (Python's `round`): 70×56 becomes 84×56, not 56×56;
- it decodes PNG exactly, and its `Resize` leaves a picture already at its target size
  as it is (both exact to float rounding).

So the intake decodes the file as `load_image` does, lays a transparent colour on white
where the model's processor does (`convert_to_rgb`), and hands the runtime a lossless PNG
of those pixels. Where the package records how transformers sizes pictures for its model
(`Intake`, written into the manifest at conversion), the picture is resized here, from
the full original, to transformers' target size with the processor's own kernel (PIL's
filter, or torch's for processors transformers implements on torchvision), so the
runtime's resize has nothing left to do: the pixels are transformers', at ties and for
50-megapixel photos alike. No other reduction is made: a picture is decoded at full size
(bounded by `MAX_IMAGE_PIXELS`) and never reduced to a size transformers would not use.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.picture_sizing import (
    ANYRES,
    ASPECT_BUDGET,
    CANVAS_HEADER_ROWS,
    CANVAS_RULES,
    EDGE_THEN_FIXED,
    PHI3V_HD,
    PHI4_HD,
    SHORTEST_EDGE_CROP,
    SPLIT_EDGE_BOUNDS,
    TILED_VIEWS,
    Intake,
    PictureError,
    Sizing,
    canvas_parts,
    canvas_size,
    centre_crop_box,
    edge_bounds_size,
    phi3v_hd_fit,
    quarters,
    rescaled_to_edge,
    same_grid,
    shortest_edge_size,
)

# Beyond this many pixels a file is refused outright: its bitmap alone would take
# gigabytes (a 250-megapixel RGB bitmap is 750 MB).
MAX_IMAGE_PIXELS = 250_000_000

# ImageOps.exif_transpose's orientations that swap width and height.
_TRANSPOSED = {5, 6, 7, 8}
_ORIENTATION_TAG = 0x0112


@contextlib.contextmanager
def pixels_unbounded() -> Iterator[None]:
    """PIL without its own pixel limit (and its warning): ours, MAX_IMAGE_PIXELS, holds."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        limit = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = limit


def header(path: Path) -> tuple[int, int, int]:
    """(width, height, EXIF orientation) as stored, from the header alone.

    Raises:
        PictureError: not a picture PIL reads, or too many pixels to open.
    """
    from PIL import Image

    try:
        with pixels_unbounded(), Image.open(path) as image:
            width, height = image.size
            orientation = _orientation(image)
    except Exception:  # noqa: BLE001 - any failure to parse a stranger's header is the file's
        raise PictureError(
            "it is not an image file", "Attach a PNG, JPEG, WebP, BMP or GIF image"
        ) from None
    _check_pixels(width, height)
    return width, height, orientation


def _orientation(image: Any) -> int:
    try:
        value = image.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block: PIL's exif_transpose skips it too
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _check_pixels(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise PictureError("it holds no pixels")
    if width * height > MAX_IMAGE_PIXELS:
        raise PictureError(
            f"{width}×{height} pixels is too large to open (the limit is "
            f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels)",
            f"Use an image under {MAX_IMAGE_PIXELS // 1_000_000} megapixels",
        )


def upright_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """The size after the EXIF orientation is applied."""
    return (height, width) if orientation in _TRANSPOSED else (width, height)


def load(path: Path) -> Any:
    """The picture as transformers' `load_image` gives it: EXIF applied, RGB.

    The same PIL calls in the same order (`ImageOps.exif_transpose`, then
    `convert("RGB")`), so a palette with transparency, CMYK, 16-bit and greyscale
    pictures become the RGB pixels transformers passes to the processor.

    Raises:
        PictureError: the file is not a picture, is damaged or truncated, or too large.
    """
    from PIL import Image, ImageOps

    header(path)
    try:
        with pixels_unbounded(), Image.open(path) as image:
            image.load()
            upright = ImageOps.exif_transpose(image)  # a copy, kept after the file closes
            # convert("RGB") of an RGB picture is a plain copy: skip it (one bitmap less)
            rgb = upright if upright.mode == "RGB" else upright.convert("RGB")
            rgb.load()
    except Exception as e:  # noqa: BLE001 - PIL raises many kinds for damaged data
        raise PictureError(f"the image is damaged or truncated ({_short(e)})") from None
    return rgb


def on_white(image: Any) -> Any:
    """The RGB picture the processors' `convert_to_rgb` makes of what load_image gives.

    load_image's RGB conversion of a palette picture with a transparent colour keeps that
    colour as `info["transparency"]`; transformers' processors (`do_convert_rgb`) then
    lay the picture on white, so pixels of that colour reach the model white.
    """
    from PIL import Image

    if image.info.get("transparency") is None:
        return image
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, image.convert("RGBA")).convert("RGB")


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:120]


@dataclass(frozen=True)
class Taken:
    """A picture ready for the runtime.

    Attributes:
        image: The RGB pixels the runtime gets (PIL image).
        width: The upright width transformers sees, before any resize.
        height: The upright height transformers sees, before any resize.
        resized: Whether it was resized here to transformers' target size.
        note: What was done, in words ("" when nothing changed).
        shown_box: Where in `image` the picture itself lies, (left, top, width,
            height), when `image` is more than the picture (a split picture's canvas: its
            whole part); all 0: the whole `image`.
    """

    image: Any
    width: int
    height: int
    resized: bool
    note: str
    shown_box: tuple[int, int, int, int] = (0, 0, 0, 0)


def take(path: Path, intake: Intake | None) -> Taken:
    """Read `path` as transformers does and size it as it would for the package's model.

    `intake` is what the package records (None for a package converted before it did:
    transparency is laid on white, as every processor mmforge converts does by default,
    and the picture keeps its size).

    Raises:
        PictureError: the file cannot be read, or transformers would refuse it.
    """
    intake = intake or Intake(on_white=True, sizing=None)
    _, _, orientation = header(path)
    image = load(path)
    if intake.on_white:
        image = on_white(image)
    sizing = intake.sizing
    width, height = image.size
    changes = []
    if orientation != 1:
        changes.append("turned upright as its EXIF orientation says")
    resized = False
    if sizing is not None and sizing.rule in CANVAS_RULES:
        canvas, whole = split_canvas(image, sizing)
        return Taken(canvas, width, height, True, "; ".join(changes), shown_box=whole)
    if sizing is not None and sizing.rule == PHI3V_HD:
        canvas, box = hd_canvas(image, sizing.factor, sizing.max_crops)
        return Taken(canvas, width, height, True, "; ".join(changes), shown_box=box)
    if sizing is not None and sizing.rule == ANYRES:
        canvas, box = anyres_canvas(image, sizing)
        return Taken(canvas, width, height, True, "; ".join(changes), shown_box=box)
    if sizing is not None and sizing.rule == TILED_VIEWS:
        canvas, box = tiled_canvas(image, sizing)
        return Taken(canvas, width, height, True, "; ".join(changes), shown_box=box)
    if sizing is not None:
        target = sizing.target(width, height)
        if sizing.tiles(width, height):
            raise PictureError(
                f"at {width}×{height} this model's processor splits it into tiles, which "
                "ONNX Runtime GenAI 0.18 cannot do (its lfm2_vl pipeline has no tiling)",
                "Send a smaller picture (or a crop of it), which it takes whole",
            )
        if sizing.rule == PHI4_HD and not same_grid(sizing, (width, height), target):
            # The transform would choose another grid for the fitted picture: it is left
            # to fit the picture itself (its resize kernel, not transformers').
            target = (width, height)
        elif sizing.rule == ASPECT_BUDGET and not sizing.runtime_keeps(*target):
            target = (width, height)  # likewise: the transform would grow it a block
        elif not sizing.runtime_keeps(*target):
            raise PictureError(
                f"transformers sizes it to {target[0]}×{target[1]} for this model, which the "
                "package's processor would resize again",
                "Crop the image closer to a square",
            )
        if sizing.rule == EDGE_THEN_FIXED and sizing.longest_edge:
            # Idefics3: a first resize to the longest edge, then the square (below).
            h, w = rescaled_to_edge(height, width, sizing.longest_edge)
            if (w, h) != (width, height):
                image = _resize(image, (w, h), sizing)
                resized = True
        if sizing.rule == SHORTEST_EDGE_CROP:
            image = _shortest_edge_crop(image, sizing)
            resized = (width, height) != target or min(width, height) != sizing.shortest_edge
        elif target != image.size:  # what the model's processor does anyway: no note
            image = _resize(image, target, sizing)
            resized = True
    return Taken(image, width, height, resized, "; ".join(changes))


def split_canvas(image: Any, sizing: Sizing) -> tuple[Any, tuple[int, int, int, int]]:
    """Idefics2's parts of a picture packed into one canvas; and where its whole lies.

    Cut as Idefics2ImageProcessor's `split_images` cuts where it splits (the quarters,
    then the whole; else the whole alone), each part sized as its `resize` sizes it, with
    PIL's filter, from the exact crop; then laid out as `picture_sizing.canvas_size`
    says, each part's size in the header row.

    Raises:
        PictureError: A side under 2 px where the picture is split (its quarters would
            hold no pixels).
    """
    from PIL import Image

    width, height = image.size
    split = sizing.rule == SPLIT_EDGE_BOUNDS
    if split and min(width, height) < 2:
        raise PictureError(
            f"at {width}×{height} it cannot be cut into quarters, as this model's processor "
            "cuts every picture",
            "Send a picture at least 2 pixels wide and high",
        )
    side = sizing.longest_edge
    parts = canvas_parts(sizing.rule)
    canvas = Image.new("RGB", canvas_size(side, parts), (0, 0, 0))
    canvas.putpixel((3, 0), (255, 255, 255))  # with pixel 2's black: the header's scale
    boxes = quarters(height, width) if split else [(0, 0, width, height)]
    h = w = 0
    for slot, box in enumerate(boxes):
        part = image.crop(box)
        h, w = edge_bounds_size(part.height, part.width, sizing.shortest_edge, side)
        if (w, h) != part.size:
            part = _resize(part, (w, h), sizing)
        canvas.paste(part, (slot * side, CANVAS_HEADER_ROWS))
        canvas.putpixel((slot * side, 0), (h // 256, h % 256, 0))
        canvas.putpixel((slot * side + 1, 0), (w // 256, w % 256, 0))
    # The last part is the whole picture.
    return canvas, ((parts - 1) * side, CANVAS_HEADER_ROWS, w, h)


def anyres_canvas(image: Any, sizing: Sizing) -> tuple[Any, tuple[int, int, int, int]]:
    """LLaVA-NeXT's views of an RGB picture in the stacked layout (backend/anyres.py).

    As LlavaNextImageProcessor makes them from the uint8 picture: the base view resized
    to the tower's square, and the picture fitted into its best grid with PIL's filter
    (the black padding and the tiles are the package's vision graph's to make again).

    Raises:
        PictureError: A picture the layout cannot carry (no tile feature kept).
    """
    from PIL import Image

    from mmforge.backend import anyres

    width, height = image.size
    try:
        layout = anyres.Layout.of(
            height, width, sizing.factor, sizing.factor // sizing.patch, list(sizing.pinpoints)
        )
    except anyres.AnyresError as e:
        raise PictureError(
            f"{e}: this model's processor keeps nothing of it but a {sizing.width} px view",
            "Crop the image closer to a square",
        ) from None
    base = _resize(image, (sizing.width, sizing.height), sizing)
    fit_h, fit_w = layout.fit
    fitted = image if (fit_w, fit_h) == image.size else _resize(image, (fit_w, fit_h), sizing)
    pixels, box = anyres.stacked(layout, base, fitted)
    return Image.fromarray(pixels), box


def tiled_canvas(image: Any, sizing: Sizing) -> tuple[Any, tuple[int, int, int, int]]:
    """InternVL's views of an RGB picture stacked in one canvas (backend/internvl_tiles.py).

    As GotOcr2ImageProcessor with crop_to_patches makes them, with PIL's filter: the tiles
    of the closest grid, row by row, then the thumbnail when there are several tiles.

    Returns:
        The canvas and the box chat draws, the last view (the whole picture, squashed to
        one tile: chat draws it at the picture's shape again).
    """
    from mmforge.backend import internvl_tiles

    side = sizing.width
    canvas = internvl_tiles.canvas(image, side, sizing.min_crops, sizing.max_crops, sizing.resample)
    return canvas, (0, canvas.height - side, side, side)


def hd_canvas(image: Any, crop: int, max_crops: int) -> tuple[Any, tuple[int, int, int, int]]:
    """Phi-3.5-Vision's released `HD_transform` of an RGB picture; and where it lies in it.

    As the remote code's processor does it: a portrait picture is transposed, resized
    with PIL's bilinear filter to whole `crop` px crops across (`phi3v_hd_fit`), padded
    with white, centred, to whole crops, and transposed back. ONNX Runtime GenAI 0.18's
    Phi3ImageTransform resizes a portrait picture without transposing it, so its two
    bilinear passes round elsewhere (one 8-bit level); it keeps this canvas as it is.

    Returns:
        The canvas and the picture's box in it, (left, top, width, height).
    """
    from PIL import Image

    (new_w, new_h), (pad_w, pad_h) = phi3v_hd_fit(image.width, image.height, crop, max_crops)
    portrait = image.width < image.height
    if portrait:
        image = image.transpose(Image.Transpose.TRANSPOSE)
        new_w, new_h, pad_w, pad_h = new_h, new_w, pad_h, pad_w
    resized = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    top = (pad_h - new_h) // 2
    canvas = Image.new("RGB", (pad_w, pad_h), (255, 255, 255))
    canvas.paste(resized, (0, top))
    if portrait:
        return canvas.transpose(Image.Transpose.TRANSPOSE), (top, 0, new_h, new_w)
    return canvas, (0, top, new_w, new_h)


def _shortest_edge_crop(image: Any, sizing: Sizing) -> Any:
    """CLIPImageProcessor's resize then centre crop, with PIL's filter (a crop is exact)."""
    width, height = image.size
    h, w = shortest_edge_size(height, width, sizing.shortest_edge)
    if (w, h) != (width, height):
        image = _resize(image, (w, h), sizing)
    return image.crop(centre_crop_box(h, w, sizing.height, sizing.width))


def _resize(image: Any, target: tuple[int, int], sizing: Sizing) -> Any:
    """Resize as the model's processor does: PIL's filter, or torch's antialiased one."""
    from PIL import Image

    if sizing.kernel == "pil":
        return image.resize(target, getattr(Image.Resampling, sizing.resample.upper()))
    import numpy as np
    import torch

    chw = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1)
    out = torch_resize(chw, target[1], target[0], sizing.resample)
    return Image.fromarray(out.permute(1, 2, 0).contiguous().numpy())


def torch_resize(image: Any, height: int, width: int, mode: str, antialias: bool = True) -> Any:
    """Resize a [C, H, W] tensor the way torchvision's tensor `resize` does.

    uint8 input stays uint8: bilinear runs natively on uint8 on the CPU; other modes run in
    float and are rounded and clamped back, as torchvision does.
    """
    import torch
    from torch.nn import functional as F

    batch = image.unsqueeze(0)
    if image.dtype == torch.uint8 and mode != "bilinear":
        out = F.interpolate(
            batch.float(), size=(height, width), mode=mode, antialias=antialias, align_corners=False
        )
        return out.clamp_(0, 255).round_().to(torch.uint8)[0]
    align = None if mode in ("nearest",) else False
    return F.interpolate(
        batch, size=(height, width), mode=mode, antialias=antialias, align_corners=align
    )[0]


def save_lossless(image: Any, target: Path) -> None:
    """A PNG the runtime decodes to exactly these pixels (measured on 0.18).

    Level 1 compression: an encode of a 12-megapixel picture takes a third of the time
    of PIL's default level, and the file is read once. No transparent colour is written
    (PIL would write one it kept from a palette as a tRNS chunk, which the runtime's
    decoder applies): `on_white` has already laid such a picture on white.
    """
    image.info.pop("transparency", None)
    image.save(target, format="PNG", compress_level=1)
