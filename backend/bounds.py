"""Sane bounds on what a config.json says, checked before anything is sized by it.

A config is content written by a stranger. transformers builds lists as long as
`num_hidden_layers` when it fills in `layer_types`, and later stages size arrays and
estimates from `hidden_size` and the like, so `num_hidden_layers: 1e9` grew without
limit and `hidden_size: 2**31` overflowed. The caps are far above any released model
(the largest have 126 layers, a hidden size of 25,600 and a vocabulary of 262,208) and
far below what would exhaust a machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError

MAX_DEPTH = 64  # real configs nest 3 or 4 deep
_LAYERS = 1024
_CAPS = {
    "num_hidden_layers": _LAYERS,
    "num_layers": _LAYERS,
    "depth": _LAYERS,
    "encoder_layers": _LAYERS,
    "decoder_layers": _LAYERS,
    "hidden_size": 1 << 18,
    "out_hidden_size": 1 << 18,
    "intermediate_size": 1 << 20,
    "moe_intermediate_size": 1 << 20,
    "shared_expert_intermediate_size": 1 << 20,
    "head_dim": 1 << 14,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
    "num_heads": 1 << 12,
    "vocab_size": 1 << 23,
    "max_position_embeddings": 1 << 28,
    "image_size": 1 << 16,
    "patch_size": 1 << 12,
    "spatial_merge_size": 64,
    "temporal_patch_size": 64,
    "num_experts": 1 << 14,
    "num_local_experts": 1 << 14,
    "num_experts_per_tok": 1 << 10,
    "mm_tokens_per_image": 1 << 20,
}
_AT_LEAST_ONE = {"hidden_size", "num_attention_heads", "vocab_size", "num_hidden_layers"}


def check_depth(data: Any, path: Path) -> None:
    """Refuse JSON nested deeper than `MAX_DEPTH` (a bomb for every recursive reader).

    Only containers are visited: a tokenizer.json of 300,000 entries takes milliseconds.

    Raises:
        MmforgeError: Naming the file.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise nested_error(path)
        inner = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in inner if isinstance(v, dict | list))


def check_config_sizes(config: dict[str, Any], path: Path) -> None:
    """Refuse a size field (layers, widths, heads, vocabulary) that no model can have.

    Raises:
        MmforgeError: Naming the field, its value and the file.
    """
    for key, value, _ in _walk(config, path):
        name = key.rsplit(".", 1)[-1]
        cap = _CAPS.get(name)
        if cap is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        low = 1 if name in _AT_LEAST_ONE else 0
        if not low <= value <= cap:
            raise MmforgeError(
                f"{path.name} sets {key} to {value}, which no model has "
                f"(mmforge accepts {low} to {cap:,})",
                f"The config is malformed or hostile: fix or re-download {path}",
            )


def check_head_counts(config: dict[str, Any], path: Path) -> None:
    """Refuse attention sizes that contradict each other.

    Where a config (or a part of it: text, vision, audio) gives no head_dim, its width is
    split evenly across its heads, and the query heads across the key/value heads. A
    32-wide vision tower with 3 heads builds in transformers (head_dim 10) and converts,
    and then the runtime cannot load the graph: found as a "conversion bug" that was the
    config's.

    Raises:
        MmforgeError: Naming the fields, their values and the file.
    """
    for key, value, _ in _walk(config, path):
        if not isinstance(value, dict):
            continue
        where = f"{key}." if key else ""
        width = _count(value.get("hidden_size"))
        heads_key = next((k for k in ("num_attention_heads", "num_heads") if k in value), None)
        heads = _count(value.get(heads_key)) if heads_key else None
        if width and heads and value.get("head_dim") is None and width % heads:
            raise _contradiction(
                path,
                f"{where}hidden_size {width} is not a multiple of {where}{heads_key} "
                f"{heads}, so the attention heads cannot split it",
            )
        groups = _count(value.get("num_key_value_heads"))
        if heads and groups and heads % groups:
            raise _contradiction(
                path,
                f"{where}{heads_key} {heads} is not a multiple of "
                f"{where}num_key_value_heads {groups}, so the query heads cannot share them",
            )


def check_token_ids(config: dict[str, Any], path: Path, converted: bool) -> None:
    """Refuse a token id that is not an integer, or one past the vocabulary.

    The vocabulary bounds ids only for a family mmforge converts. An image token id past
    vocab_size converted, and then the runtime's processor put no image tokens in the
    prompt, which read as a template fault. Families that are only inspected are not
    held to it: transformers' own LLaVA defaults put the image token just past the text
    vocabulary (the embedding grows when the tokens are added), and Molmo keeps extra
    embeddings beyond it. Negative ids (Phi-3-Vision marks images with them) and configs
    that give no vocabulary are left alone; with a vocabulary per part, the largest
    bounds every id.

    Raises:
        MmforgeError: Naming the field, its value and the vocabulary size.
    """
    check_token_ids_within(config, path, vocab_size(config, path) if converted else None)


def vocab_size(config: dict[str, Any], path: Path) -> int | None:
    """The largest vocab_size a config gives anywhere (None: it gives none)."""
    sizes = [v for k, v, _ in _walk(config, path) if k.rsplit(".", 1)[-1] == "vocab_size"]
    return max((n for v in sizes if (n := _count(v))), default=None)


def check_token_ids_within(data: dict[str, Any], path: Path, vocab: int | None) -> None:
    """Refuse a token id that is not an integer, or, with a vocabulary known, outside it.

    Every *_token_id / *_token_index in `data` may be an integer, a list of them or null.

    Raises:
        MmforgeError: Naming the field and its value.
    """
    for key, value, _ in _walk(data, path):
        name = key.rsplit(".", 1)[-1]
        if not name.endswith(("_token_id", "_token_index")) or value is None:
            continue
        for one in value if isinstance(value, list) else [value]:
            if not isinstance(one, int) or isinstance(one, bool):
                raise _contradiction(path, f"{key} is {_shown(one)}, which is not a token id")
            if vocab is not None and one >= vocab:
                raise _contradiction(
                    path, f"{key} is {one}, outside its vocabulary of {vocab:,} tokens"
                )


# Settings of an image processor that count something (pixels, patches, tiles, tokens).
_IMAGE_COUNTS = frozenset(
    {
        "patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels",
        "shortest_edge", "longest_edge", "height", "width", "num_crops", "max_image_tiles",
        "tile_size", "encoder_patch_size", "downsample_factor", "min_image_tokens",
        "max_image_tokens", "max_num_tiles", "min_num_tiles", "crop_size", "image_size",
        "pooling_kernel_size", "max_soft_tokens", "num_img_tokens",
    }
)  # fmt: skip


def check_image_settings(settings: dict[str, Any], path: Path) -> None:
    """Refuse image-processor settings no image can be prepared with.

    They become the runtime's processor JSON: a two-value mean, a zero std or a minimum
    above the maximum were written, and then the runtime could not load the package
    ("mean must have at least 3 values", a failed resample), called a conversion bug; a
    zero patch size divided by zero.

    Raises:
        MmforgeError: Naming the setting, its value and the file.
    """
    for key, value, _ in _walk(settings, path):
        name = key.rsplit(".", 1)[-1]
        if name in _IMAGE_COUNTS and value is not None and not isinstance(value, dict):
            counts = value if isinstance(value, list) else [value]  # [height, width] too
            if not counts or any(_count(c) is None for c in counts):
                raise _contradiction(path, f"{key} is {_shown(value)}, not a positive count")
        elif name in ("image_mean", "image_std"):
            values = value if isinstance(value, list) else [value]
            numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            if len(numbers) != len(values) or len(values) not in (1, 3):
                raise _contradiction(
                    path, f"{key} is {_shown(value)}, not one number or three (R, G, B)"
                )
            if name == "image_std" and not all(v > 0 for v in numbers):
                raise _contradiction(
                    path, f"{key} is {_shown(value)}; pixels are divided by it, so above 0"
                )
        elif name == "rescale_factor" and value is not None and not _positive(value):
            raise _contradiction(path, f"{key} is {_shown(value)}, not a positive number")
    # Qwen's processors read their pixel limits from size.shortest_edge (the minimum) and
    # size.longest_edge (the maximum) as well as from min_pixels / max_pixels; in any
    # processor a shortest edge above the longest is a contradiction.
    size = settings.get("size")
    edges = size if isinstance(size, dict) else {}
    pairs = (
        ("min_pixels", settings.get("min_pixels"), "max_pixels", settings.get("max_pixels")),
        ("min_image_tokens", settings.get("min_image_tokens"), "max_image_tokens",
         settings.get("max_image_tokens")),
        ("size.shortest_edge", edges.get("shortest_edge"), "size.longest_edge",
         edges.get("longest_edge")),
    )  # fmt: skip
    for low, low_value, high, high_value in pairs:
        a, b = _count(low_value), _count(high_value)
        if a and b and a > b:
            raise _contradiction(path, f"{low} {a:,} is above {high} {b:,}")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _shown(value: Any) -> str:
    """A value from a stranger's file, as a short quoted text."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _contradiction(path: Path, what: str) -> MmforgeError:
    return MmforgeError(
        f"{path.name}: {what}",
        f"The file is malformed: fix it or download the model again ({path})",
    )


def _walk(data: Any, path: Path) -> Iterator[tuple[str, Any, int]]:
    """(dotted key, value, depth) for everything in a parsed JSON value, without recursion."""
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise nested_error(path)
        yield key, value, depth
        if isinstance(value, dict):
            items = [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend((k, v, depth + 1) for k, v in items)


def nested_error(path: Path) -> MmforgeError:
    """The one-line error for a JSON file nested too deeply."""
    return MmforgeError(
        f"{path} is nested more than {MAX_DEPTH} levels deep, which no model file is",
        "The file is malformed or hostile: fix or re-download it",
    )
