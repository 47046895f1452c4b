"""Why the runtime's pictures differ from transformers', in words verify can show.

Chat and verify hand the runtime a lossless copy of the picture as transformers' load_image
reads it (EXIF applied), at transformers' size where the package records it
(`pictures.py`). What can still differ is the package: one converted before it recorded
its sizing leaves the resize to the runtime, whose `Resize` rounds half-way sides away
from zero; one whose processor JSON was edited sizes pictures otherwise. Programs that
hand the package the file itself meet the runtime's JPEG decoder and its blindness to
EXIF orientation as well: `raw_file_note` says which of those this picture would meet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmforge.backend import picture_sizing, pictures
from mmforge.backend.errors import MmforgeError
from mmforge.backend.untrusted import read_json_file

if TYPE_CHECKING:
    from mmforge.backend.verify.stages import Setup


def _runtime_resize(setup: Setup) -> picture_sizing.Sizing | None:
    vision = setup.model.get("vision") or {}
    name = vision.get("config_filename", "processor_config.json")
    try:
        data = read_json_file(setup.package / str(name), "package")
    except MmforgeError:
        return None
    return picture_sizing.package_resize(data)


def _truth(setup: Setup) -> picture_sizing.Sizing | None:
    spec = setup.checkpoint.family.package
    if spec is None:
        return None
    return spec.picture_sizing(setup.checkpoint.cfg, setup.checkpoint.preprocessor)


def cause(setup: Setup) -> str | None:
    """The real cause of a picture size mismatch between the runtime and HF, if found."""
    truth, recorded, resize = _truth(setup), setup.sizing, _runtime_resize(setup)
    if truth is None or resize is None:
        return None
    if recorded is not None and recorded != truth:
        return (
            "picture sizing: the package records another size rule than the checkpoint's "
            f"preprocessor settings ({recorded.describe()}; the checkpoint: "
            f"{truth.describe()}); convert the model again"
        )
    for path in setup.pictures:
        try:
            stored_w, stored_h, orientation = pictures.header(path)
        except picture_sizing.PictureError:
            continue
        width, height = pictures.upright_size(stored_w, stored_h, orientation)
        hf = truth.target(width, height)
        sent = hf if recorded is not None else (width, height)
        made = picture_sizing.runtime_size(resize, *sent)
        if made == hf:
            continue
        if recorded is not None:
            return (
                f"picture sizing: the package's processor JSON resizes {hf[0]}×{hf[1]} "
                f"(transformers' size for this {width}×{height} picture) to "
                f"{made[0]}×{made[1]}; its Resize step was changed after conversion "
                "(convert the model again)"
            )
        if resize.rule == picture_sizing.SMART_RESIZE and any(
            picture_sizing.is_tie(side, resize.factor) for side in (width, height)
        ):
            return (
                f"resize rounding: this {width}×{height} picture has a side half-way "
                f"between two multiples of {resize.factor} px; transformers rounds halves to "
                f"even ({hf[0]}×{hf[1]}), the runtime's Resize away from zero "
                f"({made[0]}×{made[1]}). The package was converted before mmforge recorded "
                "its picture sizing: convert the model again"
            )
        return (
            f"picture sizing: the runtime resizes this {width}×{height} picture to "
            f"{made[0]}×{made[1]} where transformers makes {hf[0]}×{hf[1]} (the package's "
            "resize settings differ from the checkpoint's); convert the model again"
        )
    return None


def other_pixels(setup: Setup) -> str:
    """Where pixels that differ beyond the bounds (and not by mean/std) can come from."""
    sizing = setup.sizing
    if sizing is None:
        return (
            "the package's processor resizes the picture itself (mmforge hands it the "
            "picture as transformers decodes it, at its own size), and its resize kernel "
            "differs from transformers' on this picture"
        )
    if sizing.rule == picture_sizing.PHI4_HD:
        return (
            "mmforge hands the runtime the picture fitted to transformers' HD grid, which "
            "the runtime crops without resizing it, and the global view (crop 0) is "
            "compared as made again from those crops (the runtime's own kernel is not "
            "transformers'); other pixels reached it all the same (the processor JSON's "
            "steps after the fit, or its decoder)"
        )
    return (
        "the runtime got other pixels than transformers' for a picture mmforge had "
        "already sized (the processor JSON's steps after Resize, or its decoder)"
    )


def raw_file_note(setup: Setup) -> str | None:
    """What a program handing this package the picture files themselves would get wrong."""
    resize = _runtime_resize(setup)
    found = []
    for path in setup.pictures:
        try:
            width, height, orientation = pictures.header(path)
        except picture_sizing.PictureError:
            continue
        reasons = []
        with path.open("rb") as file:
            jpeg = file.read(3) == b"\xff\xd8\xff"
        if jpeg:
            reasons.append("ONNX Runtime GenAI decodes JPEG with its own decoder")
        if orientation != 1:
            reasons.append(f"it ignores the EXIF orientation ({orientation})")
        upright = pictures.upright_size(width, height, orientation)
        if (
            setup.sizing is not None
            and resize is not None
            and picture_sizing.runtime_size(resize, *upright) != setup.sizing.target(*upright)
        ):
            reasons.append("its Resize would size it otherwise than transformers")
        if reasons:
            found.append(f"{path.name}: {', '.join(reasons)}")
    if not found:
        return None
    return (
        "mmforge hands the runtime these pictures as transformers sees them; a program "
        "that hands this package the files themselves would not see what transformers "
        f"sees ({'; '.join(found)}): `mmforge inspect` on the package says what to do"
    )
