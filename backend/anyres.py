"""LLaVA-NeXT's anyres pictures, carried exactly through ONNX Runtime GenAI's Qwen pipeline.

LlavaNextImageProcessor cuts a picture into a base view (the whole picture squashed to
the tower's square) and tiles (the picture fitted into the best of `image_grid_pinpoints`,
centred on black, cut into tower-sized squares); LlavaNextModel keeps, of the tiles'
features, the rows or columns the picture covers (`unpad_image`) and ends each row with
`image_newline`. A picture is N = g² + rows·(cols + 1) ids (g the tower's patches a side).

The runtime's `qwen2_5_vl` processor gives a picture (H/p)·(W/p) ids with merge 1
(docs/seed-families.md, "The variable-count host"), and its file decoder takes sides up
to 16,384 px, so a prime N past 16,384/p cannot be one picture. So each picture reaches
the runtime as two (the chat template writes two `<|vision_start|>`): block A, g × g
patches, holding the base view; block B, rows × (cols + 1) patches, holding the fitted
picture. Each block is a canvas of p × p patches read as one stream of RGB pixels in
raster order: a header (a black and a white pixel, then 16-bit fields), then the view's
pixels. The package's vision graph reads the header from the normalized values (the two
reference pixels give each channel's scale), rebuilds the tiles (black where
transformers pads), runs the tower and keeps the features the header names: exactly
g² and rows·(cols + 1) rows, the block's ids.

Capacity: a block holds p² pixels per id. Block A needs 1 + S² + header ≤ g²p² with
S = 14g; block B needs the fitted picture, at most (14·rows + 15)·14·cols pixels, which
p = 24 holds for every rows, cols ≥ 1 (`fits` checks each picture all the same).

The intake (pictures.py) writes both blocks stacked in one PNG, A above B, with the
fitted picture below them for chat to draw; the runtime layer (`runtime_files`) hands
the blocks to the runtime as two files.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Pixels a side of one runtime patch (genai_config's vision.patch_size) for anyres packages.
PATCH = 24
# The header's 16-bit fields, in order, after its black and white pixels.
FIELDS = (
    "magic",
    "block",  # 0: the base view (A), 1: the tiles (B)
    "patch",  # PATCH, as the intake wrote it
    "rows",  # the block's patches down and across: its ids are rows · cols
    "cols",
    "grid_h",  # tiles down and across (1 × 1 for the base view)
    "grid_w",
    "fit_h",  # the view's pixels: the base view, or the fitted picture
    "fit_w",
    "paste_y",  # where the fitted picture lies on the black tiles
    "paste_x",
    "keep_top",  # the tiles' feature rows and columns kept
    "keep_rows",
    "keep_left",
    "keep_cols",
    "newline",  # 1: each kept row ends with image_newline
    "orig_h",  # the picture's size, for transformers' image_sizes (verify)
    "orig_w",
)
MAGIC = 0x4D46  # "MF"
HEADER = 2 + len(FIELDS)  # pixels: black, white, the fields
MAX_SIDE = 65535


class AnyresError(ValueError):
    """A picture the anyres layout cannot carry, or a file that is not such a layout."""


def best_resolution(height: int, width: int, pinpoints: list[tuple[int, int]]) -> tuple[int, int]:
    """The (height, width) a picture is fitted to: transformers' `select_best_resolution`.

    The most of the picture kept (its downscaled area, at most its own), then the least
    area wasted; the first such pinpoint wins.
    """
    best = pinpoints[0]
    most, waste = 0, math.inf
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - kept
        if kept > most or (kept == most and wasted < waste):
            best, most, waste = (h, w), kept, wasted
    return best


def fitted_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """The picture's (height, width) inside `target`: transformers' `get_patch_output_size`."""
    th, tw = target
    scale_w, scale_h = tw / width, th / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), th), tw
    return th, min(math.ceil(width * scale_h), tw)


def kept_features(height: int, width: int, rows: int, cols: int) -> tuple[int, int, int, int]:
    """LlavaNextModel's `unpad_image` on a rows × cols feature map: (top, rows, left, cols).

    The same arithmetic as transformers (its float division and `int(round(x, 7))`), so
    the kept block is the one the processor counts.
    """
    if width / height > cols / rows:
        new = int(round(height * (cols / width), 7))
        pad = (rows - new) // 2
        return pad, rows - 2 * pad, 0, cols
    new = int(round(width * (rows / height), 7))
    pad = (cols - new) // 2
    return 0, rows, pad, cols - 2 * pad


@dataclass(frozen=True)
class Layout:
    """What LlavaNextImageProcessor and LlavaNextModel make of one picture.

    Attributes:
        height: The picture's height (upright).
        width: Its width.
        side: The tower's picture side (the tiles' and the base view's).
        features: The tower's patches a side (g).
        grid: Tiles (down, across).
        fit: The fitted picture's (height, width).
        paste: Its (top, left) on the black tiles.
        keep: The kept features (top, rows, left, cols).
    """

    height: int
    width: int
    side: int
    features: int
    grid: tuple[int, int]
    fit: tuple[int, int]
    paste: tuple[int, int]
    keep: tuple[int, int, int, int]

    @classmethod
    def of(
        cls, height: int, width: int, side: int, features: int, pinpoints: list[tuple[int, int]]
    ) -> Layout:
        """The layout of a `width` × `height` picture.

        Raises:
            AnyresError: No tile feature is kept (a picture more elongated than the
                widest grid's features), or a side past 65,535 px.
        """
        if max(height, width) > MAX_SIDE:
            raise AnyresError(f"a side over {MAX_SIDE} px")
        target = best_resolution(height, width, pinpoints)
        fit = fitted_size(height, width, target)
        grid = (target[0] // side, target[1] // side)
        paste = ((target[0] - fit[0]) // 2, (target[1] - fit[1]) // 2)
        keep = kept_features(height, width, grid[0] * features, grid[1] * features)
        if keep[1] < 1 or keep[3] < 1:
            raise AnyresError(f"at {width}×{height} no row of its tiles' features is kept")
        return cls(height, width, side, features, grid, fit, paste, keep)

    @property
    def base_ids(self) -> int:
        """Block A's ids: the base view's features."""
        return self.features**2

    @property
    def tile_ids(self) -> int:
        """Block B's ids: the kept features, each row with its newline."""
        return self.keep[1] * (self.keep[3] + 1)

    @property
    def ids(self) -> int:
        """The picture's ids, as LlavaNextProcessor counts them."""
        return self.base_ids + self.tile_ids

    def header(self, block: int) -> list[int]:
        """Block `block`'s header fields (FIELDS' order)."""
        g, s = self.features, self.side
        if block == 0:
            shape = (g, g, 1, 1, s, s, 0, 0, 0, g, 0, g, 0)
        else:
            _, rows, _, cols = self.keep
            shape = (rows, cols + 1, *self.grid, *self.fit, *self.paste, *self.keep, 1)
        return [MAGIC, block, PATCH, *shape, self.height, self.width]


def fits(layout: Layout) -> bool:
    """Whether both blocks hold their header and view (see the module's capacity note)."""
    per_id = PATCH * PATCH
    base = HEADER + layout.side**2 <= layout.base_ids * per_id
    tiles = HEADER + layout.fit[0] * layout.fit[1] <= layout.tile_ids * per_id
    return base and tiles


def block_image(header: list[int], view: Any) -> Any:
    """One block's canvas (uint8 [rows·p, cols·p, 3]): the header, then the view's pixels."""
    rows, cols = header[FIELDS.index("rows")], header[FIELDS.index("cols")]
    stream = np.zeros((rows * PATCH * cols * PATCH, 3), np.uint8)
    stream[1] = 255
    for i, value in enumerate(header):
        stream[2 + i] = (value >> 8, value & 0xFF, 0)
    pixels = np.asarray(view, dtype=np.uint8).reshape(-1, 3)
    stream[HEADER : HEADER + len(pixels)] = pixels
    return stream.reshape(rows * PATCH, cols * PATCH, 3)


def stacked(layout: Layout, base: Any, fitted: Any) -> tuple[Any, tuple[int, int, int, int]]:
    """Both blocks and a preview in one RGB array; and the preview's box in it.

    Block A on top, block B below it, then the fitted picture itself (what chat draws:
    the blocks' streams are no picture to look at), all left-aligned, black elsewhere.

    Raises:
        AnyresError: A block cannot hold its view (never for PATCH 24; checked).
    """
    if not fits(layout):
        raise AnyresError(f"at {layout.width}×{layout.height} its views do not fit the layout")
    a = block_image(layout.header(0), base)
    b = block_image(layout.header(1), fitted)
    preview = np.asarray(fitted, dtype=np.uint8)
    top = a.shape[0] + b.shape[0]
    width = max(a.shape[1], b.shape[1], preview.shape[1])
    out = np.zeros((top + preview.shape[0], width, 3), np.uint8)
    out[: a.shape[0], : a.shape[1]] = a
    out[a.shape[0] : top, : b.shape[1]] = b
    out[top:, : preview.shape[1]] = preview
    return out, (0, top, preview.shape[1], preview.shape[0])


def read_header(block: Any) -> dict[str, int]:
    """The fields of a block's header, from its uint8 pixels [H, W, 3].

    Raises:
        AnyresError: Not a block this module wrote.
    """
    stream = np.asarray(block).reshape(-1, 3)
    if stream.shape[0] < HEADER or stream[0].any() or (stream[1] != 255).any():
        raise AnyresError("no anyres header")
    pixels = stream[2:HEADER].astype(np.int64)
    values = dict(zip(FIELDS, (pixels[:, 0] << 8) | pixels[:, 1], strict=True))
    out = {k: int(v) for k, v in values.items()}
    if out["magic"] != MAGIC or out["patch"] != PATCH or out["block"] not in (0, 1):
        raise AnyresError("not an anyres block")
    return out


def split(stacked_pixels: Any) -> tuple[Any, Any]:
    """Blocks A and B out of the stacked array (uint8 [H, W, 3]).

    Raises:
        AnyresError: The array is not a stacked layout (its headers and sizes disagree).
    """
    image = np.asarray(stacked_pixels)
    first = read_header(image[:1, :])  # block A's header lies in its first pixel row
    a_h, a_w = first["rows"] * PATCH, first["cols"] * PATCH
    if first["block"] != 0 or a_h >= image.shape[0] or a_w > image.shape[1]:
        raise AnyresError("not a stacked anyres picture")
    second = read_header(image[a_h : a_h + 1, :])
    b_h, b_w = second["rows"] * PATCH, second["cols"] * PATCH
    shown = a_h + b_h + second["fit_h"]
    if second["block"] != 1 or shown != image.shape[0] or b_w > image.shape[1]:
        raise AnyresError("not a stacked anyres picture")
    return image[:a_h, :a_w].copy(), image[a_h : a_h + b_h, :b_w].copy()


def runtime_files(picture: Path, folder: Path) -> list[Path]:
    """The two block files the runtime gets for one stacked picture (written in `folder`).

    Raises:
        AnyresError: `picture` is not a stacked layout.
    """
    from PIL import Image

    with Image.open(picture) as image:
        pixels = np.asarray(image.convert("RGB"))
    out = []
    for i, block in enumerate(split(pixels)):
        target = folder / f"{picture.stem}.block{i}.png"
        Image.fromarray(block).save(target, compress_level=1)
        out.append(target)
    return out


def views_from_runtime(blocks: list[Any], side: int) -> tuple[list[Any], list[tuple[int, int]]]:
    """The pixel_values and image_sizes transformers takes, from the runtime's blocks.

    Args:
        blocks: Per runtime picture, its normalized pixels [3, H, W] (frame 0 of its
            patches), in order: each picture's A then B.
        side: The tower's picture side.

    Returns:
        Per picture, its views [1 + tiles, 3, side, side] (the base view, then the tiles
        with black, normalized, where transformers pads), and its (height, width).
    """
    views, sizes = [], []
    for a, b in zip(blocks[::2], blocks[1::2], strict=True):
        base, _ = _read(a, side)
        fitted, head = _read(b, side)
        gh, gw = head["grid_h"], head["grid_w"]
        canvas = np.broadcast_to(_black(b), (3, gh * side, gw * side)).copy()
        top, left = head["paste_y"], head["paste_x"]
        canvas[:, top : top + fitted.shape[1], left : left + fitted.shape[2]] = fitted
        tiles = canvas.reshape(3, gh, side, gw, side).transpose(1, 3, 0, 2, 4)
        views.append(np.concatenate([base[None], tiles.reshape(-1, 3, side, side)]))
        sizes.append((head["orig_h"], head["orig_w"]))
    return views, sizes


def _black(block: Any) -> Any:
    """The header's black pixel as the runtime normalized it, [3, 1, 1]."""
    return np.asarray(block).reshape(3, -1)[:, 0].reshape(3, 1, 1)


def _read(block: Any, side: int) -> tuple[Any, dict[str, int]]:
    """A normalized block's view [3, h, w] and header fields."""
    stream = np.asarray(block, dtype=np.float64).reshape(3, -1).T  # raster RGB
    black, white = stream[0], stream[1]
    levels = np.rint((stream[2:HEADER] - black) / (white - black) * 255).astype(np.int64)
    head = dict(zip(FIELDS, (levels[:, 0] << 8) | levels[:, 1], strict=True))
    fields = {k: int(v) for k, v in head.items()}
    if fields["magic"] != MAGIC:
        raise AnyresError("the runtime's pixels hold no anyres header")
    h, w = fields["fit_h"], fields["fit_w"]
    view = np.asarray(block).reshape(3, -1)[:, HEADER : HEADER + h * w].reshape(3, h, w)
    return view, fields


_LOCK = threading.Lock()
# Pictures whose block files are kept (a conversation sends its pictures every turn).
KEPT = 64
_SCRATCH: list[Path] = []
_SPLIT: dict[tuple[str, int, int], list[Path]] = {}


def uses_anyres(package: Path) -> bool:
    """Whether a package's manifest records the anyres intake (its pictures are stacked)."""
    from mmforge.backend.library import read_manifest
    from mmforge.backend.picture_sizing import ANYRES, Intake

    intake = Intake.from_dict(read_manifest(package).get("pictures"))
    return intake is not None and intake.sizing is not None and intake.sizing.rule == ANYRES


def runtime_images(package: Path, images: list[Path]) -> list[Path]:
    """The files the runtime opens for `images`: each stacked picture's two blocks.

    Other packages' pictures pass as they are. The blocks are written once per picture
    file (its path, size and time) into a private folder removed when the process ends.

    Raises:
        MmforgeError: A picture of an anyres package is not a stacked layout (a file
            mmforge did not prepare for this package).
    """
    if not images or not uses_anyres(package):
        return list(images)
    from mmforge.backend.errors import MmforgeError

    out: list[Path] = []
    for picture in images:
        with _LOCK:
            try:
                stat = picture.stat()
                key = (str(picture.resolve()), stat.st_size, stat.st_mtime_ns)
                if key not in _SPLIT:
                    _SPLIT[key] = _split_into_scratch(picture)
            except (AnyresError, OSError, ValueError) as e:
                raise MmforgeError(
                    f"{picture.name} is not a picture prepared for this package ({e})",
                    "Attach the picture again in mmforge chat, which prepares it",
                ) from None
            _SPLIT[key] = _SPLIT.pop(key)  # the most recently used last
            out += _SPLIT[key]
    return out


def _split_into_scratch(picture: Path) -> list[Path]:
    """`runtime_files` into a folder of its own; the oldest past `KEPT` are removed."""
    import shutil
    import tempfile

    while len(_SPLIT) >= KEPT:  # a server sees new pictures for ever: keep the recent
        oldest = next(iter(_SPLIT))
        for path in _SPLIT.pop(oldest)[:1]:
            shutil.rmtree(path.parent, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(dir=_scratch()))
    try:
        return runtime_files(picture, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _scratch() -> Path:
    """A private folder for block files, removed at exit."""
    if not _SCRATCH:
        import atexit
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="mmforge-anyres-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _SCRATCH.append(folder)
    return _SCRATCH[0]
