"""Small deterministic test inputs (images come from mmforge.resources.probe_image)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def make_tone(
    seconds: float = 1.0, rate: int = 16000, freq: float = 440.0
) -> tuple[np.ndarray, int]:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype("float32"), rate


def _photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB picture: smooth gradients, edges and some grain (uint8 HWC)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 128 + 100 * np.sin(x / max(width, 1) * 6.0 + y / max(height, 1) * 2.0)
    g = 255 * (y / max(height - 1, 1))
    b = np.where((x // 37 + y // 29) % 2 == 0, 200.0, 40.0)
    rgb = np.stack([r, g, b], axis=-1) + rng.normal(0, 6, (height, width, 3))
    return np.clip(rgb, 0, 255).astype(np.uint8)


def user_pictures(folder, big: tuple[int, int] = (6000, 4000)) -> dict[str, object]:
    """The pictures people attach, written into `folder`: name -> path.

    A quality-90 4:2:0 JPEG; a JPEG stored sideways with EXIF Orientation 6 (as phones
    write them); a PNG whose side is a rounding tie for Qwen's smart_resize (70 = 2.5 ×
    28 px); a large JPEG (`big`, 6000×4000 by default, a 24-megapixel camera photo); a
    palette PNG with transparency; a 16-bit greyscale PNG; a CMYK JPEG.
    """
    from pathlib import Path

    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {}
    photo = Image.fromarray(_photo(300, 200))
    out["jpeg"] = folder / "photo.jpg"
    photo.save(out["jpeg"], quality=90, subsampling=2)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    out["exif"] = folder / "phone.jpg"
    Image.fromarray(_photo(120, 64, seed=1)).save(out["exif"], quality=92, exif=exif)
    out["tie"] = folder / "tie.png"
    Image.fromarray(_photo(70, 56, seed=2)).save(out["tie"])
    out["large"] = folder / "camera.jpg"
    small = Image.fromarray(_photo(big[0] // 4, big[1] // 4, seed=3))
    small.resize(big, Image.Resampling.BILINEAR).save(out["large"], quality=85)
    palette = Image.fromarray(_photo(90, 60, seed=4)).quantize(colors=32)
    palette.info["transparency"] = 0
    out["palette"] = folder / "palette.png"
    palette.save(out["palette"], transparency=0)
    grey16 = (np.linspace(0, 65535, 80 * 50).reshape(50, 80)).astype(np.uint16)
    out["png16"] = folder / "grey16.png"
    Image.fromarray(grey16).save(out["png16"])
    out["cmyk"] = folder / "print.jpg"
    Image.fromarray(_photo(100, 80, seed=5)).convert("CMYK").save(out["cmyk"], quality=90)
    return out


# A picture and a question; and three turns whose last puts two pictures side by side,
# then text that starts with `<` (the family tests of the videochat_flash_qwen hosts).
CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
    [
        {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And these?"},
                {"type": "image"},
                {"type": "image"},
                {"type": "text", "text": "<b> and \nmore"},
            ],
        },
    ],
]


def noise_picture(folder: Path, name: str, width: int, height: int, seed: int = 0) -> Path:
    """A random-pixel picture in `folder` (a JPEG at quality 90 when `name` ends in .jpg)."""
    from PIL import Image

    pixels = (np.random.default_rng(seed).random((height, width, 3)) * 255).astype("uint8")
    path = folder / name
    if name.endswith(".jpg"):
        Image.fromarray(pixels).save(path, quality=90)
    else:
        Image.fromarray(pixels).save(path)
    return path
