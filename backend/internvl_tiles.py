"""InternVL's tiled views of a picture, carried exactly through ONNX Runtime GenAI's Qwen pipeline.

GotOcr2ImageProcessor with `crop_to_patches` (InternVLProcessor's own default) resizes a
picture to the grid of `side` px tiles whose aspect ratio is closest to the picture's
(between `min_patches` and `max_patches` tiles), cuts it into those tiles (row by row),
and adds the whole picture resized to one tile (the thumbnail) when there is more than
one tile. Each view gives K ids (256 in the releases), so a picture is K · views ids.

The runtime's `qwen2_5_vl` processor gives a picture (H/p) · (W/p) ids with merge 1
(docs/seed-families.md, "The variable-count host"). With p = side / √K (the tower's patch
times the pixel shuffle's scale: 28 in the releases), a canvas `side` px wide holding
the views stacked top to bottom, each exactly a tile, is K · views ids: the count
InternVLProcessor writes. The package's vision graph un-patches the canvas back into the
views, [views, 3, side, side], in transformers' order; no header is needed. The intake
(pictures.py) makes the canvas with PIL's filter, as transformers' PIL processor does.
"""

from __future__ import annotations

from typing import Any

# The runtime's PNG decoder refuses a side over this (measured on the 0.18 wheel).
MAX_RUNTIME_SIDE = 16_384


def grids(least: int, most: int) -> list[tuple[int, int]]:
    """Every (columns, rows) with `least` to `most` tiles, fewest tiles first.

    The order transformers tries them in (`get_all_supported_aspect_ratios`): by tile
    count, and within a count by columns then rows (a stable sort of that enumeration).
    """
    found = [
        (cols, rows)
        for cols in range(1, most + 1)
        for rows in range(1, most + 1)
        if least <= cols * rows <= most
    ]
    return sorted(found, key=lambda grid: grid[0] * grid[1])


def tile_grid(height: int, width: int, side: int, least: int, most: int) -> tuple[int, int]:
    """The (columns, rows) GotOcr2ImageProcessor cuts a `width` × `height` picture into.

    The grid whose aspect ratio is closest to the picture's; on a tie, the later (more
    tiles) one while the picture covers more than half of its area in `side` px tiles.
    """
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids(least, most):
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and area > 0.5 * side * side * cols * rows:
            best = (cols, rows)
    return best


def view_count(height: int, width: int, side: int, least: int, most: int) -> int:
    """The views InternVLProcessor makes of a picture: the tiles, plus a thumbnail if several."""
    if most <= 1:  # transformers then resizes the picture to one view
        return 1
    cols, rows = tile_grid(height, width, side, least, most)
    return cols * rows + (1 if cols * rows > 1 else 0)


def most_views(most: int) -> int:
    """The largest view count a picture can reach (`most` tiles and a thumbnail)."""
    return most + 1 if most > 1 else 1


def canvas(image: Any, side: int, least: int, most: int, resample: str) -> Any:
    """The views of an RGB PIL picture stacked into one `side` px wide canvas.

    Resized with PIL's `resample` filter from the uint8 picture, as transformers' PIL
    GotOcr2ImageProcessor does: the whole picture to the grid (the tiles cut from it,
    row by row), then the whole picture to one tile for the thumbnail.
    """
    from PIL import Image

    flt = getattr(Image.Resampling, resample.upper())
    if most <= 1:
        return image.resize((side, side), flt)
    cols, rows = tile_grid(image.height, image.width, side, least, most)
    grid = image.resize((cols * side, rows * side), flt)
    views = [
        grid.crop((c * side, r * side, (c + 1) * side, (r + 1) * side))
        for r in range(rows)
        for c in range(cols)
    ]
    if len(views) > 1:
        views.append(image.resize((side, side), flt))
    out = Image.new("RGB", (side, side * len(views)))
    for i, view in enumerate(views):
        out.paste(view, (0, i * side))
    return out
