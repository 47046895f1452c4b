"""Whether a checkpoint's image processor splits its pictures (`do_image_splitting`).

Idefics2ImageProcessor (false by default) and Idefics3ImageProcessor (true by default)
cut a picture into parts when the flag is set: a checkpoint that splits converts with
other ids a picture than one that does not, so the flag picks the family's entry.
"""

from __future__ import annotations

from typing import Any


def splits_pictures(folder: Any, default: bool = False) -> bool:
    """Whether the checkpoint's image processor splits pictures (do_image_splitting).

    Read from preprocessor_config.json, else processor_config.json's image_processor
    block; absent: `default`, Idefics2ImageProcessor's (false; Idefics3's is true). A
    file that cannot be read is refused (MmforgeError) rather than taken as false: that
    would convert a splitting model without its splitting.
    """
    from mmforge.backend.untrusted import read_json_file

    for name, block in (
        ("preprocessor_config.json", None),
        ("processor_config.json", "image_processor"),
    ):
        path = folder / name
        if not path.is_file():
            continue
        data = read_json_file(path, name)
        if block is not None:
            data = data.get(block) if isinstance(data, dict) else None
        if not isinstance(data, dict):
            return False
        return bool(data.get("do_image_splitting", default) is True)
    return default
