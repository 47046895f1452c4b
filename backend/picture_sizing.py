"""How transformers sizes a picture for each model, and how a package records it.

The rules are transformers' own (tests compare them with transformers' functions):
Qwen2-VL's `smart_resize` (halves rounded to even), LFM2-VL's whole-block variant,
Pixtral's longest edge, Gemma 3's fixed size, Phi-4-multimodal's HD fit and Phi-3.5-Vision's
HD canvas; and what the runtime's `Resize` makes of a size (halves rounded away from
zero), so the intake (`pictures.py`) and verify can tell when the two differ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from mmforge.backend.internvl_tiles import MAX_RUNTIME_SIDE, most_views, view_count

# transformers' smart_resize refuses pictures more elongated than this.
MAX_ASPECT = 200

SMART_RESIZE = "smart_resize"
# GLM-4V's smart_resize: a picture with a side under `factor` is first scaled up (aspect
# kept, sides truncated) until both reach it, then Qwen's rule.
SCALED_UP_SMART_RESIZE = "smart_resize_scaled_up"
# LFM2-VL's smart resize: whole blocks at least, halves to even, then the pixel budget.
WHOLE_BLOCKS = "smart_resize_whole_blocks"
LONGEST_EDGE = "longest_edge"
FIXED = "fixed"
# Phi-4-multimodal's HD transform: a grid of square crops, the picture fitted into it.
PHI4_HD = "phi4_hd"
# Phi-3.5-Vision's HD transform (remote code): the picture scaled, aspect kept, to a width
# of whole `factor` px crops (a portrait picture transposed first), then padded with white,
# centred, to whole crops: the canvas the runtime's Phi3ImageTransform keeps as it is.
PHI3V_HD = "phi3v_hd"
# Gemma 4: the largest size of whole blocks within a patch budget, aspect kept.
ASPECT_BUDGET = "aspect_budget"
# CLIPImageProcessor (LLaVA-1.5): the shortest edge scaled to `shortest_edge`, then a
# centre crop of `width` × `height`.
SHORTEST_EDGE_CROP = "shortest_edge_crop"
# Idefics2ImageProcessor: a side past `longest_edge` scaled down to it (aspect kept, the
# other side truncated), then each side raised to at least `shortest_edge`.
EDGE_BOUNDS = "edge_bounds"
# Idefics3ImageProcessor without splitting: the longest side scaled to `longest_edge`
# (aspect kept, the other side truncated and raised to even), then a second resize to
# `width` × `height` (the tower's square).
EDGE_THEN_FIXED = "longest_edge_then_fixed"
# Idefics2ImageProcessor with do_image_splitting: the picture cut into its four quarters
# and kept whole, each of the five sized as `edge_bounds`; the intake packs the five into
# one canvas (`canvas_size`) that the package's vision graph cuts apart again.
SPLIT_EDGE_BOUNDS = "edge_bounds_split"
# Idefics2ImageProcessor without splitting, packed as one part on a canvas of one size
# for every picture, so that a prompt's pictures need not share a size.
CANVAS_EDGE_BOUNDS = "edge_bounds_canvas"
# LlavaNextImageProcessor: a base view (the picture squashed to `width` × `height`) and
# the picture fitted into the best of `pinpoints`, cut into `factor` px tiles; the intake
# stacks them in the layout backend/anyres.py describes.
ANYRES = "anyres"
# GotOcr2ImageProcessor with crop_to_patches (InternVL): the picture resized to the grid of
# `width` px tiles closest to its aspect (`min_crops` to `max_crops` tiles), cut into them,
# plus a thumbnail when there are several; the intake stacks the views into one canvas
# `width` px wide (backend/internvl_tiles.py).
TILED_VIEWS = "tiled_views"
# The rules whose pictures reach the runtime as a canvas of parts (`canvas_parts`).
CANVAS_RULES = (SPLIT_EDGE_BOUNDS, CANVAS_EDGE_BOUNDS)
RULES = (
    SMART_RESIZE,
    SCALED_UP_SMART_RESIZE,
    WHOLE_BLOCKS,
    LONGEST_EDGE,
    FIXED,
    PHI4_HD,
    ASPECT_BUDGET,
    SHORTEST_EDGE_CROP,
    EDGE_BOUNDS,
    EDGE_THEN_FIXED,
    SPLIT_EDGE_BOUNDS,
    CANVAS_EDGE_BOUNDS,
    PHI3V_HD,
    ANYRES,
    TILED_VIEWS,
)
# Who resizes: PIL (transformers' PIL processors) or torch (its torchvision processors,
# which use torch's interpolation; mmforge's reference restates them with the same).
KERNELS = ("pil", "torch")
# PIL's resampling filters by name; the codes are PIL's (and preprocessor_config's).
FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


_CROP = "Crop the image closer to a square"


class PictureError(ValueError):
    """A picture that cannot be read or sized; attachments turn it into its message.

    Attributes:
        hint: What the user can do about it.
    """

    def __init__(self, reason: str, hint: str = "Save the image again or pick another file"):
        super().__init__(reason)
        self.hint = hint


@dataclass(frozen=True)
class Sizing:
    """How transformers sizes a picture for one model, as a package records it.

    Attributes:
        rule: `smart_resize` (Qwen: multiples of `factor` within a pixel budget, halves
            rounded to even), `smart_resize_whole_blocks` (LFM2-VL: the same with at
            least one block a side), `longest_edge` (Pixtral: at most `longest_edge` a
            side, then up to whole `factor` blocks), `fixed` (`width` × `height`) or
            `phi4_hd` (Phi-4: fitted into a grid of `factor` px crops) or `phi3v_hd`
            (Phi-3.5-Vision: scaled to whole `factor` px crops across, padded to whole
            crops) or
            `shortest_edge_crop` (CLIP: the shortest side scaled to `shortest_edge`, then
            the centre `width` × `height` cut out) or `edge_bounds` (Idefics2: the longest
            side down to `longest_edge`, then each side up to `shortest_edge`) or
            `longest_edge_then_fixed` (Idefics3: the longest side to `longest_edge`, 0 for
            none, then `width` × `height`).
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
        max_crops: `phi4_hd`'s and `phi3v_hd`'s largest number of crops (`factor` px
            square each).
        shortest_edge: The shortest side for `shortest_edge_crop`, before the crop.
        pinpoints: `anyres`' grid resolutions, (height, width) each, multiples of `factor`.
        min_crops: `tiled_views`' fewest tiles (its largest is `max_crops`; the tile side
            is `width`).
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
    shortest_edge: int = 0
    pinpoints: tuple[tuple[int, int], ...] = ()
    min_crops: int = 0

    def target(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) transformers resizes a `width` × `height` picture to.

        Raises:
            PictureError: transformers would refuse the picture (too elongated).
        """
        if self.rule in (FIXED, SHORTEST_EDGE_CROP, EDGE_THEN_FIXED, ANYRES):
            return self.width, self.height
        if self.rule == TILED_VIEWS:  # the canvas the views are stacked in
            views = view_count(height, width, self.width, self.min_crops, self.max_crops)
            return self.width, self.width * views
        if self.rule == LONGEST_EDGE:
            h, w = longest_edge_size(height, width, self.longest_edge, self.factor)
            return w, h
        if self.rule == EDGE_BOUNDS:
            h, w = edge_bounds_size(height, width, self.shortest_edge, self.longest_edge)
            return w, h
        if self.rule in CANVAS_RULES:  # the canvas the parts are packed into
            return canvas_size(self.longest_edge, canvas_parts(self.rule))
        if self.rule == PHI4_HD:
            return phi4_hd_fit(width, height, self.factor, self.max_crops)[0]
        if self.rule == PHI3V_HD:  # the padded canvas
            return phi3v_hd_fit(width, height, self.factor, self.max_crops)[1]
        if self.rule == ASPECT_BUDGET:
            h, w = aspect_budget_size(
                height, width, self.factor, self.max_pixels, self.longest_edge
            )
            return w, h
        if self.rule == SCALED_UP_SMART_RESIZE:
            height, width = scaled_up(height, width, self.factor)
        if max(width, height) / min(width, height) > MAX_ASPECT:
            raise PictureError(
                f"{width}×{height} is more elongated than {MAX_ASPECT}:1, which this model's "
                "processor refuses",
                _CROP,
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

    @property
    def stretches(self) -> bool:
        """Whether this sizing may change a picture's shape (a fixed size; sides raised alone).

        Chat draws such a picture at the shape the user took it again.
        """
        return self.rule in (FIXED, EDGE_BOUNDS, EDGE_THEN_FIXED, TILED_VIEWS, *CANVAS_RULES)

    @property
    def one_size(self) -> bool:
        """Whether a prompt's pictures must share one size after this sizing.

        An Idefics2 package converted before its pictures were packed on a canvas hands
        the runtime pictures at transformers' size with no Resize of its own; the runtime
        stacks a prompt's pictures into one tensor the size of the first, which cuts and
        zero-fills a picture of another size (measured on the 0.18 wheel,
        docs/seed-families.md), where transformers pads each and masks the padding. Its
        canvas (`CANVAS_EDGE_BOUNDS`) has one size for every picture.
        """
        return self.rule == EDGE_BOUNDS

    def runtime_keeps(self, width: int, height: int) -> bool:
        """Whether the package's Resize leaves a `width` × `height` picture as it is.

        A fixed size is kept; a smart_resize keeps multiples of the block within its
        pixel budget (the budget the package's processor JSON was written with).
        """
        if self.rule in (FIXED, SHORTEST_EDGE_CROP, EDGE_THEN_FIXED):
            return (width, height) == (self.width, self.height)
        if self.rule in (EDGE_BOUNDS, ANYRES, TILED_VIEWS, *CANVAS_RULES):  # no Resize
            return True
        if self.rule == ASPECT_BUDGET:  # the transform's own rule, applied again
            return self.target(width, height) == (width, height)
        if self.rule == PHI4_HD:  # the transform fits a fitted picture to itself
            return phi4_hd_fit(width, height, self.factor, self.max_crops)[0] == (width, height)
        if self.rule == PHI3V_HD:  # the transform neither resizes nor pads the canvas
            fit, canvas = phi3v_hd_fit(width, height, self.factor, self.max_crops)
            return fit == canvas == (width, height)
        kept = runtime_smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return kept == (height, width)

    def describe(self) -> str:
        """The sizing in words, for a package's README and `inspect`."""
        if self.rule == FIXED:
            return f"resized to {self.width}×{self.height} px ({self.resample})"
        if self.rule == EDGE_THEN_FIXED:
            first = (
                f"the longest side scaled to {self.longest_edge} px (aspect kept, the other "
                "side truncated and made even), then "
                if self.longest_edge
                else ""
            )
            return f"{first}resized to {self.width}×{self.height} px ({self.resample})"
        if self.rule == ANYRES:
            grids = ", ".join(f"{w}×{h}" for h, w in self.pinpoints)
            return (
                f"a base view resized to {self.width}×{self.height} px, and the picture fitted "
                f"(aspect kept, {self.resample}) into the best of {grids} px, centred on black "
                f"and cut into {self.factor} px tiles; the tiles' features kept where the "
                "picture lies, each row ended with a newline"
            )
        if self.rule == TILED_VIEWS:
            return (
                f"resized ({self.resample}) to the grid of {self.min_crops} to "
                f"{self.max_crops} tiles of {self.width}×{self.width} px closest to its aspect "
                f"ratio and cut into them, plus the whole picture resized to {self.width}×"
                f"{self.width} px when there are several tiles; the views stacked top to "
                f"bottom in one {self.width} px wide PNG"
            )
        if self.rule == SHORTEST_EDGE_CROP:
            return (
                f"the shortest side scaled to {self.shortest_edge} px ({self.resample}), then "
                f"the centre {self.width}×{self.height} px cut out"
            )
        if self.rule == EDGE_BOUNDS:
            return (
                f"a side over {self.longest_edge} px scaled down to it (aspect kept, the "
                f"other side truncated), then each side raised to at least "
                f"{self.shortest_edge} px ({self.resample})"
            )
        if self.rule in CANVAS_RULES:
            parts = canvas_parts(self.rule)
            return (
                (
                    "cut into its four quarters and kept whole; each of the five: "
                    if parts > 1
                    else ""
                )
                + f"a side over {self.longest_edge} px scaled down to it (aspect kept, the "
                f"other side truncated), then each side raised to at least "
                f"{self.shortest_edge} px ({self.resample}); packed into one "
                + canvas_description(self.longest_edge, parts)
            )
        if self.rule == ASPECT_BUDGET:
            return (
                f"scaled, aspect kept, to the largest size of whole {self.factor} px blocks "
                f"within {self.max_pixels:,} pixels ({self.resample})"
            )
        if self.rule == PHI4_HD:
            return (
                f"fitted into a grid of at most {self.max_crops} crops of {self.factor} px "
                f"(aspect kept, the rest padded), {self.resample} with antialiasing"
            )
        if self.rule == PHI3V_HD:
            return (
                f"scaled, aspect kept, to whole {self.factor} px crops across (at most "
                f"{self.max_crops} crops; a portrait picture transposed first, so its vertical "
                f"pass comes first), {self.resample}, then padded with white, centred, to whole "
                "crops"
            )
        if self.rule == LONGEST_EDGE:
            return (
                f"scaled down to at most {self.longest_edge} px a side (sides floored), then "
                f"each side rounded up to a multiple of {self.factor} px ({self.resample})"
            )
        first = (
            f"a side under {self.factor} px scaled up to {self.factor} px (aspect kept), then "
            if self.rule == SCALED_UP_SMART_RESIZE
            else ""
        )
        return (
            f"{first}each side rounded to a multiple of {self.factor} px with halves rounded to "
            f"even (Python's round), the area kept within {self.min_pixels:,}–"
            f"{self.max_pixels:,} pixels ({self.resample}); the runtime's own Resize rounds "
            "halves away from zero"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's `pictures.sizing`)."""
        data = asdict(self)
        data["pinpoints"] = [list(p) for p in self.pinpoints]
        return data

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
        pinpoints = _pinpoints(data.get("pinpoints", []))
        if pinpoints is None:
            return None
        words = {"rule": data["rule"], "resample": data["resample"]}
        sizing = cls(**words, kernel=data.get("kernel", "pil"), pinpoints=pinpoints, **numbers)
        return sizing if sizing._sane() else None

    def _sane(self) -> bool:
        if self.rule in (FIXED, EDGE_THEN_FIXED):
            return self.width > 0 and self.height > 0
        if self.rule == SHORTEST_EDGE_CROP:
            return 0 < self.width <= self.shortest_edge and 0 < self.height <= self.shortest_edge
        if self.rule == LONGEST_EDGE:
            return self.factor > 0 and self.longest_edge >= self.factor
        if self.rule == EDGE_BOUNDS:
            return 0 < self.shortest_edge <= self.longest_edge
        if self.rule in CANVAS_RULES:
            return 4 <= self.shortest_edge <= self.longest_edge <= MAX_CANVAS_SIDE
        if self.rule in (PHI4_HD, PHI3V_HD):
            return self.factor > 0 and self.max_crops > 0
        if self.rule == ASPECT_BUDGET:
            return self.factor > 0 and self.max_pixels > 0 and self.longest_edge > 0
        if self.rule == TILED_VIEWS:
            return (
                0 < self.width == self.height
                and 1 <= self.min_crops <= self.max_crops
                and self.width * most_views(self.max_crops) <= MAX_RUNTIME_SIDE
            )
        if self.rule == ANYRES:
            return (
                0 < self.patch <= self.factor <= MAX_CANVAS_SIDE
                and self.factor % self.patch == 0
                and 0 < self.width == self.height <= MAX_CANVAS_SIDE
                and bool(self.pinpoints)
                and all(h % self.factor == 0 == w % self.factor for h, w in self.pinpoints)
            )
        return self.factor > 0 and 0 < self.min_pixels <= self.max_pixels


_WORDS = ("rule", "resample", "kernel", "pinpoints")
MAX_PINPOINTS = 64


def _pinpoints(data: Any) -> tuple[tuple[int, int], ...] | None:
    """A manifest's anyres pinpoints, or None when they are not a short list of sizes."""
    if not isinstance(data, list) or len(data) > MAX_PINPOINTS:
        return None
    out = []
    for item in data:
        ok = isinstance(item, list) and len(item) == 2
        if not ok or not all(type(v) is int and 0 < v <= MAX_CANVAS_SIDE * 8 for v in item):
            return None
        out.append((item[0], item[1]))
    return tuple(out)


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's `smart_resize` as transformers has it: (height, width), halves rounded to even."""
    return _smart(height, width, factor, min_pixels, max_pixels, least=0)


def scaled_up(height: int, width: int, factor: int) -> tuple[int, int]:
    """GLM-4V's first step (image_processing_glm4v.smart_resize): small sides scaled up.

    (height, width) with a side under `factor` scaled up, aspect kept, until both sides
    reach it (truncated to integers, as transformers does).
    """
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        return int(height * scale), int(width * scale)
    return height, width


def smart_resize_whole_blocks(
    height: int, width: int, block: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """LFM2-VL's smart resize as transformers has it: (height, width), at least one block."""
    return _smart(height, width, block, min_pixels, max_pixels, least=block)


def _smart(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, least: int
) -> tuple[int, int]:
    """Multiples of `factor` (halves to even, at least `least`), then the pixel budget."""
    h_bar = max(least, round(height / factor) * factor)
    w_bar = max(least, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
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


def phi3v_hd_fit(
    width: int, height: int, crop: int, max_crops: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Phi-3.5-Vision's HD transform sizes: ((width, height) scaled, (width, height) padded).

    As the released `HD_transform` has them: a portrait picture is transposed; the scale
    is the most crops across whose rows (`ceil(scale / ratio)`) keep the count within
    `max_crops`; the width becomes that many crops, the height `int(width / ratio)`, then
    is padded to whole crops; a portrait picture's sizes are swapped back. ORT GenAI
    0.18's Phi3ImageTransform computes the same sizes without transposing (it swaps them).
    """
    portrait = width < height
    long, short = (height, width) if portrait else (width, height)
    ratio = long / short
    scale = 1
    while scale * math.ceil(scale / ratio) <= max_crops:
        scale += 1
    scale -= 1
    new_long = scale * crop
    new_short = int(new_long / ratio)
    padded = math.ceil(new_short / crop) * crop
    if portrait:
        return (new_short, new_long), (padded, new_long)
    return (new_long, new_short), (new_long, padded)


def same_grid(sizing: Sizing, original: tuple[int, int], fitted: tuple[int, int]) -> bool:
    """Whether the HD transform fits `fitted` to itself, in the grid it chose for `original`."""
    grid = phi4_hd_fit(*original, sizing.factor, sizing.max_crops)[1]
    return phi4_hd_fit(*fitted, sizing.factor, sizing.max_crops) == (fitted, grid)


def aspect_budget_size(
    height: int, width: int, side: int, budget: int, longest: int
) -> tuple[int, int]:
    """Gemma 4's size as transformers has it: (height, width) in whole `side` blocks.

    Scaled (up or down) to the pixel `budget`, aspect kept, each side floored to whole
    blocks; a side that floors to nothing is one block, the other its ratio in blocks
    (at most `longest`).

    Raises:
        PictureError: both sides floor to nothing (transformers refuses the picture).
    """
    factor = math.sqrt(budget / (height * width))
    h = math.floor(factor * height / side) * side
    w = math.floor(factor * width / side) * side
    if h == 0 and w == 0:
        raise PictureError(f"{width}×{height} resizes to nothing for this model's processor", _CROP)
    if h == 0:
        h, w = side, min(math.floor(width / height) * side, longest)
    elif w == 0:
        h, w = min(math.floor(height / width) * side, longest), side
    return h, w


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


def edge_bounds_size(height: int, width: int, shortest: int, longest: int) -> tuple[int, int]:
    """Idefics2's `get_resize_output_image_size`: (height, width).

    A picture whose longer side passes `longest` is scaled down to it, the other side
    truncated (a tie counts as landscape); then each side is raised to `shortest`,
    without keeping the aspect.
    """
    aspect = width / height
    if width >= height and width > longest:
        width, height = longest, int(longest / aspect)
    elif height > width and height > longest:
        height, width = longest, int(longest * aspect)
    return max(height, shortest), max(width, shortest)


# A picture's canvas: one slot of `longest` × `longest` px for each part, side by side,
# under a header row that holds each part's size (slot i's pixels 0 and 1 of row 0:
# height, then width, as (value // 256, value % 256, 0); pixels 2 and 3 black and white,
# so a graph reads the values back whatever the normalisation); part i at slot i's top
# left. A split picture has five parts (the four quarters, then the whole), another one.
SPLIT_PARTS = 5
CANVAS_HEADER_ROWS = 1
MAX_CANVAS_SIDE = 4096  # sizes up to 65,535 fit the header; this bounds the canvas


def canvas_parts(rule: str) -> int:
    """How many parts a canvas rule packs: five for a split picture, else one."""
    return SPLIT_PARTS if rule == SPLIT_EDGE_BOUNDS else 1


def canvas_size(longest: int, parts: int = SPLIT_PARTS) -> tuple[int, int]:
    """The (width, height) of a canvas of `parts` slots (`CANVAS_RULES`)."""
    return parts * longest, longest + CANVAS_HEADER_ROWS


def canvas_description(longest: int, parts: int = SPLIT_PARTS) -> str:
    """The canvas in words, for a package's README and other programs."""
    width, height = canvas_size(longest, parts)
    slots = (
        f"five {longest} px slots side by side (the four quarters left to right, top row "
        "first, then the whole), each part at its slot's top left"
        if parts > 1
        else f"the picture at the top left of a {longest} px square"
    )
    return (
        f"{width}×{height} px PNG: {slots}, below a header row whose first two pixels of "
        "each slot hold the part's height and width as (value // 256, value % 256, 0), "
        "and whose pixels 2 and 3 are black and white"
    )


def quarters(height: int, width: int) -> list[tuple[int, int, int, int]]:
    """Idefics2's `split_images` boxes, (left, top, right, bottom): the quarters, then the whole.

    The middle is `side // 2`: an odd side leaves the extra row or column to the bottom
    and right quarters.
    """
    mid_h, mid_w = height // 2, width // 2
    return [
        (0, 0, mid_w, mid_h),
        (mid_w, 0, width, mid_h),
        (0, mid_h, mid_w, height),
        (mid_w, mid_h, width, height),
        (0, 0, width, height),
    ]


# Idefics3ImageProcessor's largest side after its first resize (MAX_IMAGE_SIZE).
IDEFICS3_MAX_SIDE = 4096


def rescaled_to_edge(height: int, width: int, edge: int) -> tuple[int, int]:
    """Idefics3's first resize (`get_resize_output_image_size`): (height, width).

    The longest side becomes `edge` (up or down; a tie counts as landscape), the other is
    scaled, truncated and raised to even, at least 1; then a side past 4,096 px is
    scaled down to it, the other truncated.
    """
    aspect = width / height
    if width >= height:
        width, height = edge, int(edge / aspect)
        height += height % 2
    else:
        height, width = edge, int(edge * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height and width > IDEFICS3_MAX_SIDE:
        width, height = IDEFICS3_MAX_SIDE, int(IDEFICS3_MAX_SIDE / aspect)
    elif height > width and height > IDEFICS3_MAX_SIDE:
        height, width = IDEFICS3_MAX_SIDE, int(IDEFICS3_MAX_SIDE * aspect)
    return max(height, 1), max(width, 1)


def longest_edge_size(height: int, width: int, edge: int, block: int) -> tuple[int, int]:
    """Pixtral's size as transformers has it: (height, width) at most `edge`, then whole blocks."""
    ratio = max(height / edge, width / edge)
    if ratio > 1:
        height, width = math.floor(height / ratio), math.floor(width / ratio)
    return ((height - 1) // block + 1) * block, ((width - 1) // block + 1) * block


def shortest_edge_size(height: int, width: int, edge: int) -> tuple[int, int]:
    """CLIP's size before its crop, as transformers has it: (height, width).

    The shortest side becomes `edge`, the other is scaled and truncated
    (`get_resize_output_image_size`).
    """
    if width <= height:
        return int(edge * height / width), edge
    return edge, int(edge * width / height)


def centre_crop_box(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int, int, int]:
    """Transformers' `center_crop` box (left, top, right, bottom) for a crop within the picture."""
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return left, top, left + crop_w, top + crop_h


def resample_name(code: Any, default: str) -> str:
    """A preprocessor_config `resample` code as a filter name (`default` when absent)."""
    if isinstance(code, int) and not isinstance(code, bool) and code in FILTERS:
        return FILTERS[code]
    return default


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


def for_other_programs(intake: Intake | None) -> str:
    """What a program that hands this package raw files must do to match transformers."""
    steps = (
        "Decode each picture as transformers' load_image does (PIL: apply the EXIF "
        "orientation, then convert to RGB) and hand the runtime a lossless PNG of those "
        "pixels, with no transparency chunk: ONNX Runtime GenAI 0.18 decodes JPEG with its "
        "own decoder (other pixels) and ignores the EXIF orientation."
    )
    if intake is not None and intake.on_white:
        steps += (
            " Lay a palette picture's transparent colour on white first, as this model's "
            "processor does (do_convert_rgb)."
        )
    sizing = intake.sizing if intake is not None else None
    if sizing is None:
        return steps
    kernel = "torch's antialiased" if sizing.kernel == "torch" else "PIL's"
    if sizing.rule in CANVAS_RULES:
        return (
            f"{steps} Then cut it (where the model splits pictures) and size its parts as "
            f"this model's processor does, with {kernel} {sizing.resample} filter, and "
            f"hand the runtime the canvas they are packed into ({sizing.describe()}): the "
            "package's vision graph reads its pictures only in that form."
        )
    if sizing.rule == ANYRES:
        return (
            f"{steps} Then make its views as this model's processor does ({sizing.describe()}, "
            f"with {kernel} {sizing.resample} filter) and hand the runtime two pictures for "
            "it, in the block layout of mmforge's backend/anyres.py (a header, then the base "
            "view's pixels; a header, then the fitted picture's), with two <|vision_start|> "
            "in the prompt: the package's vision graph reads its pictures only in that form."
        )
    if sizing.rule == TILED_VIEWS:
        return (
            f"{steps} Then make its views as this model's processor does ({sizing.describe()}, "
            f"with {kernel} {sizing.resample} filter) and hand the runtime that canvas: the "
            "package's processor has no Resize, and its vision graph reads each "
            f"{sizing.width} px square of the canvas as one view."
        )
    if sizing.rule == PHI3V_HD:
        return (
            f"{steps} Then make the model's HD canvas of it ({sizing.describe()}, with "
            f"{kernel} {sizing.resample} filter) and hand the runtime that canvas: its "
            "transform keeps the canvas as it is, and would otherwise resize a portrait "
            "picture without turning it first."
        )
    return (
        f"{steps} Then resize it with {kernel} {sizing.resample} filter to transformers' "
        f"size for this model ({sizing.describe()}) before handing it over: the runtime "
        "leaves a picture at that size as it is, and would otherwise size it otherwise."
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
