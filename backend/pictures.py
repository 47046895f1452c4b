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

So the intake decodes the file as `load_image` does and hands the runtime a lossless PNG
of those pixels. Where the package records how transformers sizes pictures for its
model (`Sizing`, written into the manifest at conversion), the picture is resized here,
from the full original, with PIL's filter and transformers' target size, so the runtime's
own resize has nothing left to do: the pixels are transformers' to the last bit, at ties
and for 50-megapixel photos alike. No other reduction is made: a picture is decoded at
full size (bounded by `MAX_IMAGE_PIXELS`) and never reduced to a size transformers would
not use.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Beyond this many pixels a file is refused outright: its bitmap alone would take
# gigabytes (a 250-megapixel RGB bitmap is 750 MB).
MAX_IMAGE_PIXELS = 250_000_000
# transformers' smart_resize refuses pictures more elongated than this.
MAX_ASPECT = 200

SMART_RESIZE = "smart_resize"
# LFM2-VL's smart resize: whole blocks at least, halves to even, then the pixel budget.
WHOLE_BLOCKS = "smart_resize_whole_blocks"
LONGEST_EDGE = "longest_edge"
FIXED = "fixed"
# Phi-4-multimodal's HD transform: a grid of square crops, the picture fitted into it.
PHI4_HD = "phi4_hd"
RULES = (SMART_RESIZE, WHOLE_BLOCKS, LONGEST_EDGE, FIXED, PHI4_HD)
# Who resizes: PIL (transformers' PIL processors) or torch (its torchvision processors,
# which use torch's interpolation; mmforge's reference restates them with the same).
KERNELS = ("pil", "torch")
# PIL's resampling filters by name; the codes are PIL's (and preprocessor_config's).
FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# ImageOps.exif_transpose's orientations that swap width and height.
_TRANSPOSED = {5, 6, 7, 8}
_ORIENTATION_TAG = 0x0112


class PictureError(ValueError):
    """A picture that cannot be read or sized; attachments turn it into its message."""


@dataclass(frozen=True)
class Sizing:
    """How transformers sizes a picture for one model, as a package records it.

    Attributes:
        rule: `smart_resize` (Qwen: multiples of `factor` within a pixel budget, halves
            rounded to even), `longest_edge` (Pixtral: at most `longest_edge` a side,
            then up to whole `factor` blocks) or `fixed` (`width` × `height`).
        resample: PIL's filter transformers resizes with (`bicubic`, `bilinear`, ...).
        factor: The block both sides are multiples of (patch size × merge size).
        min_pixels: smart_resize's smallest area.
        max_pixels: smart_resize's largest area.
        longest_edge: The longest side for `longest_edge`.
        width: The width for `fixed`.
        height: The height for `fixed`.
        kernel: `pil`, or `torch` for processors transformers implements on torchvision
            (their pixels are torch's interpolation, antialiased).
        tile_above: The processor splits a picture into tiles past this many pixels
            (after rounding sides to `factor`, at least `patch`); ONNX Runtime GenAI 0.18
            does not tile, so such a picture is refused. 0: never.
        patch: The patch size, for `tile_above`'s rounding.
        max_crops: `phi4_hd`'s largest number of crops (`factor` px square each).
    """

    rule: str
    resample: str
    factor: int = 0
    min_pixels: int = 0
    max_pixels: int = 0
    longest_edge: int = 0
    width: int = 0
    height: int = 0
    kernel: str = "pil"
    tile_above: int = 0
    patch: int = 0
    max_crops: int = 0

    def target(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) transformers resizes a `width` × `height` picture to.

        Raises:
            PictureError: transformers would refuse the picture (too elongated).
        """
        if self.rule == FIXED:
            return self.width, self.height
        if self.rule == LONGEST_EDGE:
            h, w = longest_edge_size(height, width, self.longest_edge, self.factor)
            return w, h
        if self.rule == PHI4_HD:
            return phi4_hd_fit(width, height, self.factor, self.max_crops)[0]
        if max(width, height) / min(width, height) > MAX_ASPECT:
            raise PictureError(
                f"{width}×{height} is more elongated than {MAX_ASPECT}:1, which this model's "
                "processor refuses"
            )
        if self.rule == WHOLE_BLOCKS:
            h, w = smart_resize_whole_blocks(
                height, width, self.factor, self.min_pixels, self.max_pixels
            )
            return w, h
        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return w, h

    def tiles(self, width: int, height: int) -> bool:
        """Whether transformers splits this picture into tiles (the runtime cannot)."""
        if not self.tile_above:
            return False
        block = self.factor
        h_bar = max(self.patch, round(height / block) * block)
        w_bar = max(self.patch, round(width / block) * block)
        return h_bar * w_bar > self.tile_above

    def runtime_keeps(self, width: int, height: int) -> bool:
        """Whether the package's Resize leaves a `width` × `height` picture as it is.

        A fixed size is kept; a smart_resize keeps multiples of the block within its
        pixel budget (the budget the package's processor JSON was written with).
        """
        if self.rule == FIXED:
            return (width, height) == (self.width, self.height)
        if self.rule == PHI4_HD:  # the transform fits a fitted picture to itself
            return phi4_hd_fit(width, height, self.factor, self.max_crops)[0] == (width, height)
        kept = runtime_smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return kept == (height, width)

    def describe(self) -> str:
        """The sizing in words, for a package's README and `inspect`."""
        if self.rule == FIXED:
            return f"resized to {self.width}×{self.height} px ({self.resample})"
        if self.rule == PHI4_HD:
            return (
                f"fitted into a grid of at most {self.max_crops} crops of {self.factor} px "
                f"(aspect kept, the rest padded), {self.resample} with antialiasing"
            )
        if self.rule == LONGEST_EDGE:
            return (
                f"scaled down to at most {self.longest_edge} px a side (sides floored), then "
                f"each side rounded up to a multiple of {self.factor} px ({self.resample})"
            )
        return (
            f"each side rounded to a multiple of {self.factor} px with halves rounded to "
            f"even (Python's round), the area kept within {self.min_pixels:,}–"
            f"{self.max_pixels:,} pixels ({self.resample}); the runtime's own Resize rounds "
            "halves away from zero"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's `pictures.sizing`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Sizing | None:
        """The sizing a manifest records, or None when it records none or a broken one."""
        if not isinstance(data, dict) or data.get("rule") not in RULES:
            return None
        if data.get("resample") not in FILTERS.values():
            return None
        if data.get("kernel", "pil") not in KERNELS:
            return None
        numbers = {k: data.get(k, 0) for k in cls.__dataclass_fields__ if k not in _WORDS}
        if not all(type(v) is int and 0 <= v <= 1 << 31 for v in numbers.values()):
            return None
        words = {"rule": data["rule"], "resample": data["resample"]}
        sizing = cls(**words, kernel=data.get("kernel", "pil"), **numbers)
        return sizing if sizing._sane() else None

    def _sane(self) -> bool:
        if self.rule == FIXED:
            return self.width > 0 and self.height > 0
        if self.rule == LONGEST_EDGE:
            return self.factor > 0 and self.longest_edge >= self.factor
        if self.rule == PHI4_HD:
            return self.factor > 0 and self.max_crops > 0
        return self.factor > 0 and 0 < self.min_pixels <= self.max_pixels


_WORDS = ("rule", "resample", "kernel")


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's `smart_resize` as transformers has it: (height, width), halves rounded to even."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_whole_blocks(
    height: int, width: int, block: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """LFM2-VL's smart resize as transformers has it: (height, width), at least one block."""
    h_bar = max(block, round(height / block) * block)
    w_bar = max(block, round(width / block) * block)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(block, math.floor(height / beta / block) * block)
        w_bar = max(block, math.floor(width / beta / block) * block)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / block) * block
        w_bar = math.ceil(width * beta / block) * block
    return h_bar, w_bar


def phi4_hd_fit(
    width: int, height: int, crop: int, max_crops: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Phi-4-multimodal's HD fit as transformers has it: ((width, height), (cols, rows)).

    The grid is the picture's size in whole crops, or, past `max_crops`, the grid whose
    aspect is nearest the picture's (ties to the larger grid when the picture fills more
    than half of it); the picture is scaled to fit the grid, the rest is padding.
    """
    cols, rows = math.ceil(width / crop), math.ceil(height / crop)
    if cols * rows > max_crops:
        grids = sorted(
            {
                (i, j)
                for n in range(1, max_crops + 1)
                for i in range(1, n + 1)
                for j in range(1, n + 1)
                if 1 <= i * j <= max_crops
            },
            key=lambda r: r[0] * r[1],
        )
        aspect = width / height
        best, best_diff = (1, 1), float("inf")
        for grid in grids:
            diff = abs(aspect - grid[0] / grid[1])
            if diff < best_diff:
                best, best_diff = grid, diff
            elif diff == best_diff and width * height > 0.5 * crop * crop * grid[0] * grid[1]:
                best = grid
        cols, rows = best
    target_w, target_h = crop * cols, crop * rows
    if target_w / width < target_h / height:
        return (target_w, int(height * target_w / width)), (cols, rows)
    return (int(width * target_h / height), target_h), (cols, rows)


def _same_grid(sizing: Sizing, original: tuple[int, int], fitted: tuple[int, int]) -> bool:
    """Whether the HD transform fits `fitted` to itself, in the grid it chose for `original`."""
    grid = phi4_hd_fit(*original, sizing.factor, sizing.max_crops)[1]
    return phi4_hd_fit(*fitted, sizing.factor, sizing.max_crops) == (fitted, grid)


def runtime_round(value: float) -> int:
    """`std::round`: halves away from zero (ORT GenAI's Resize)."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def runtime_smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The runtime's smart_resize: transformers' rule with halves rounded away from zero."""
    h_bar = runtime_round(height / factor) * factor
    w_bar = runtime_round(width / factor) * factor
    if h_bar * w_bar > max_pixels or h_bar * w_bar < min_pixels:
        return smart_resize(height, width, factor, min_pixels, max_pixels)
    return h_bar, w_bar


def longest_edge_size(height: int, width: int, edge: int, block: int) -> tuple[int, int]:
    """Pixtral's size as transformers has it: (height, width) at most `edge`, then whole blocks."""
    ratio = max(height / edge, width / edge)
    if ratio > 1:
        height, width = math.floor(height / ratio), math.floor(width / ratio)
    return ((height - 1) // block + 1) * block, ((width - 1) // block + 1) * block


def resample_name(code: Any, default: str) -> str:
    """A preprocessor_config `resample` code as a filter name (`default` when absent)."""
    if isinstance(code, int) and not isinstance(code, bool) and code in FILTERS:
        return FILTERS[code]
    return default


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
        raise PictureError("it is not an image file") from None
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
            f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels)"
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
            upright = ImageOps.exif_transpose(image)
            rgb = upright.convert("RGB")
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
    """

    image: Any
    width: int
    height: int
    resized: bool
    note: str


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
    if sizing is not None:
        target = sizing.target(width, height)
        if sizing.tiles(width, height):
            raise PictureError(
                f"at {width}×{height} this model's processor splits it into tiles, which "
                "ONNX Runtime GenAI 0.18 cannot do (its lfm2_vl pipeline has no tiling)"
            )
        if sizing.rule == PHI4_HD and not _same_grid(sizing, (width, height), target):
            # The transform would choose another grid for the fitted picture: it is left
            # to fit the picture itself (its resize kernel, not transformers').
            target = (width, height)
        elif not sizing.runtime_keeps(*target):
            raise PictureError(
                f"transformers sizes it to {target[0]}×{target[1]} for this model, which the "
                "package's processor would resize again"
            )
        if target != (width, height):
            image = _resize(image, target, sizing)
            resized = True
            changes.append(
                f"resized from {width}×{height} to {target[0]}×{target[1]} as transformers "
                "does for this model"
            )
    return Taken(image, width, height, resized, "; ".join(changes))


def _resize(image: Any, target: tuple[int, int], sizing: Sizing) -> Any:
    """Resize as the model's processor does: PIL's filter, or torch's antialiased one."""
    from PIL import Image

    if sizing.kernel == "pil":
        return image.resize(target, getattr(Image.Resampling, sizing.resample.upper()))
    # The kernel mmforge's reference restates torchvision's processors with.
    from mmforge.backend.families._hf_image import resize, to_uint8_chw

    out = resize(to_uint8_chw(image, on_white=False), target[1], target[0], sizing.resample)
    return Image.fromarray(out.permute(1, 2, 0).contiguous().numpy())


def save_lossless(image: Any, target: Path) -> None:
    """A PNG the runtime decodes to exactly these pixels (measured on 0.18).

    Level 1 compression: an encode of a 12-megapixel picture takes a third of the time
    of PIL's default level, and the file is read once. No transparent colour is written
    (PIL would write one it kept from a palette as a tRNS chunk, which the runtime's
    decoder applies): `on_white` has already laid such a picture on white.
    """
    image.info.pop("transparency", None)
    image.save(target, format="PNG", compress_level=1)


@dataclass(frozen=True)
class Intake:
    """What a package records of how transformers reads pictures for its model.

    Attributes:
        on_white: Whether the processor lays a transparent colour on white (its
            `do_convert_rgb`, as the checkpoint's preprocessor config sets it).
        sizing: How it sizes pictures (None: the package's own transform sizes them).
    """

    on_white: bool
    sizing: Sizing | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's `pictures`)."""
        sizing = self.sizing.to_dict() if self.sizing is not None else None
        return {"on_white": self.on_white, "sizing": sizing}

    @classmethod
    def from_dict(cls, data: Any) -> Intake | None:
        """The record a manifest holds; None when it holds none or a broken one."""
        if not isinstance(data, dict) or not isinstance(data.get("on_white"), bool):
            return None
        sizing = Sizing.from_dict(data.get("sizing"))
        if sizing is None and data.get("sizing") is not None:
            return None
        return cls(on_white=data["on_white"], sizing=sizing)


def for_other_programs(sizing: Sizing | None) -> str:
    """What a program that hands this package raw files must do to match transformers."""
    steps = (
        "Decode each picture as transformers' load_image does (PIL: apply the EXIF "
        "orientation, then convert to RGB) and hand the runtime a lossless PNG of those "
        "pixels: ONNX Runtime GenAI 0.18 decodes JPEG with its own decoder (other pixels) "
        "and ignores the EXIF orientation."
    )
    if sizing is None:
        return steps
    return (
        f"{steps} Then resize it with PIL's {sizing.resample} filter to transformers' size "
        f"for this model ({sizing.describe()}) before handing it over: the runtime's "
        "Resize leaves a picture at its target size as it is, and would otherwise round "
        "some sizes differently."
    )


def package_resize(processor: Any) -> Sizing | None:
    """The runtime's own sizing, read from a package's processor JSON (its `Resize` step).

    A smart_resize step as `smart_resize` (the runtime rounds its halves away from zero:
    `runtime_smart_resize`), a fixed one as `fixed`; None when there is no `Resize` (the
    family's own transform sizes the picture) or it cannot be read.
    """
    try:
        steps = processor["processor"]["transforms"]
        attrs = next(
            s["operation"].get("attrs", {}) for s in steps if s["operation"]["type"] == "Resize"
        )
        if attrs.get("smart_resize"):
            factor = int(attrs.get("patch_size", 14)) * int(attrs.get("merge_size", 2))
            low, high = int(attrs["min_pixels"]), int(attrs["max_pixels"])
            return Sizing(SMART_RESIZE, "bicubic", factor=factor, min_pixels=low, max_pixels=high)
        return Sizing(FIXED, "bicubic", width=int(attrs["width"]), height=int(attrs["height"]))
    except (KeyError, TypeError, ValueError, AttributeError, StopIteration):
        return None


def runtime_size(resize: Sizing, width: int, height: int) -> tuple[int, int]:
    """The (width, height) the runtime's `Resize` makes of a picture it is handed."""
    if resize.rule == FIXED:
        return resize.width, resize.height
    h, w = runtime_smart_resize(height, width, resize.factor, resize.min_pixels, resize.max_pixels)
    return w, h


def is_tie(side: int, factor: int) -> bool:
    """Whether `side` is half-way between two multiples of `factor` (rounding decides)."""
    return (2 * side) % (2 * factor) == factor
