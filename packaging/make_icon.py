"""Draw the app icon (resources/mmforge.png, 256×256) with Pillow and the bundled font.

Run it again only to change the icon: `python packaging/make_icon.py`.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Write resources/mmforge.png."""
    size = 256
    icon = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(icon)
    draw.rounded_rectangle((8, 8, size - 8, size - 8), radius=44, fill=(31, 64, 122, 255))
    # Three stacked bars: the components a package is made of, as on the Convert page.
    for i, colour in enumerate(((84, 174, 255), (130, 210, 160), (250, 200, 90))):
        top = 58 + i * 34
        draw.rounded_rectangle((48, top, 208, top + 22), radius=8, fill=(*colour, 255))
    font = ImageFont.truetype(str(ROOT / "resources" / "DejaVuSans.ttf"), 62)
    draw.text((size // 2, 196), "MF", font=font, fill=(255, 255, 255, 255), anchor="mm")
    icon.save(ROOT / "resources" / "mmforge.png", "PNG", optimize=True)


if __name__ == "__main__":
    main()
