"""What a package's files may hold, checked before mmforge or the runtime reads them.

A package folder may come from anyone. mmforge reads some of genai_config.json itself
(`PackageInfo`: the context, the end-of-answer ids) and ONNX Runtime GenAI 0.18 reads the
rest; the runtime applies the processor JSON to every picture a client sends. Measured
before these checks: a `context_length` of "abc" or an `eos_token_id` object ended `serve`
with exit 70 and chat with "the chat worker stopped"; a processor whose `Resize` has
min_pixels = max_pixels = 4·10⁷ took 4.7 GB and 19 s for an 84×56 picture, and 2·10⁸
ended in std::bad_alloc. Here each field's JSON type is checked, and the pixels each
step may ask for are bounded, so either is one refusal naming the file and the field.
A tokenizer.json of no model the tokenizers library knows converted and then could not
be loaded by chat; it is refused here too, before conversion and before chat.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from mmforge.backend.errors import MmforgeError

# The longest context a package may declare: the cap conversion puts on the
# max_position_embeddings it is copied from (`bounds`), far above any released model's
# (Llama 4 Scout: 10,485,760).
MAX_CONTEXT = 1 << 28
# The most pixels a processor step may scale every picture up to (`min_pixels`). The
# largest minimum a family writes for a released checkpoint is 65,536 (Qwen3-VL's
# size.shortest_edge, LFM2-VL's 64 tokens of 32×32): 64 times that costs the runtime about
# half a GB (118 bytes a pixel measured), where 4·10⁷ cost 4.7 GB for every picture.
MAX_MIN_PIXELS = 1 << 22
# The most pixels a processor step may keep of a picture (`max_pixels`, a fixed Resize's
# width × height, a tiling step's whole budget): twice the largest a family writes for a
# released checkpoint, Qwen3-VL's 16,777,216 (4096²). Others write less: Qwen2.5-VL
# 12,845,056, Phi-4-multimodal 36 crops of 448² (7,225,344), GLM-4.1V 5,880,000,
# Gemma 4 1,120 tokens of 48² (2,580,480), Pixtral 1540², Gemma 3 896².
MAX_PIXELS = 1 << 25
# What tokenizers' `ModelWrapper` deserialises ("data did not match any variant of
# untagged enum ModelUntagged" for any other `model.type`, tokenizers 0.22).
TOKENIZER_MODELS = ("BPE", "Unigram", "WordLevel", "WordPiece")

_HINT = "The package is malformed or hostile: convert the model again with mmforge"
# Whole-number fields and the range each may take (the caps conversion puts on the
# config.json fields they come from, `bounds`).
_MODEL_COUNTS = {"context_length": (1, MAX_CONTEXT), "vocab_size": (1, 1 << 23)}
_SECTION_COUNTS = {
    "head_size": (1, 1 << 14),
    "hidden_size": (1, 1 << 18),
    "num_attention_heads": (1, 1 << 12),
    "num_key_value_heads": (1, 1 << 12),
    "num_hidden_layers": (1, 1024),
    "patch_size": (1, 1 << 12),
    "spatial_merge_size": (1, 64),
}
_SECTIONS = ("decoder", "embedding", "vision", "speech")
_SEARCH_FLAGS = ("do_sample", "early_stopping", "past_present_share_buffer")
_SEARCH_NUMBERS = (
    "temperature", "top_p", "repetition_penalty", "length_penalty", "diversity_penalty",
)  # fmt: skip
_SEARCH_COUNTS = {
    "max_length": (1, MAX_CONTEXT),
    "min_length": (0, MAX_CONTEXT),
    "top_k": (0, 1 << 23),
    "num_beams": (1, 1),  # mmforge's chat streams one answer; more would each hold a cache
    "num_return_sequences": (1, 1),
    "no_repeat_ngram_size": (0, MAX_CONTEXT),
}


def check_genai_config(data: dict[str, Any], path: Path) -> None:
    """Refuse a genai_config.json field of a type (or size) mmforge or the runtime cannot take.

    `model` and `model.decoder` are objects (checked by the caller). Its counts are whole
    numbers in range, its token ids integers (`eos_token_id` one or a list), its sections
    objects naming files in the package, and `search` holds flags, numbers and counts.

    Raises:
        MmforgeError: Naming the file, the field and its value.
    """
    model = data["model"]
    for key, (low, high) in _MODEL_COUNTS.items():
        _count(model, key, low, high, path, "model")
    for key, value in model.items():
        single = key.endswith("_token_id") and key != "eos_token_id"
        if single and value is not None and not _is_int(value):
            raise _refused(path, f"model.{key}", value, "not a token id")
    eos = model.get("eos_token_id")
    if eos is not None and not (
        _is_int(eos) or (isinstance(eos, list) and eos and all(_is_int(t) for t in eos))
    ):
        raise _refused(path, "model.eos_token_id", eos, "not a token id or a list of them")
    for name in _SECTIONS:
        if name in model:
            _section(model[name], f"model.{name}", path)
    search = data.get("search", {})
    if not isinstance(search, dict):
        raise _refused(path, "search", search, "not an object")
    _search(search, path)


def _section(section: Any, where: str, path: Path) -> None:
    if not isinstance(section, dict):
        raise _refused(path, where, section, "not an object")
    for key in ("filename", "config_filename"):
        if key in section and not _file_name(section[key]):
            raise _refused(
                path, f"{where}.{key}", section[key], "not the name of a file in the package"
            )
    for key in ("inputs", "outputs"):
        names = section.get(key, {})
        if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
            raise _refused(path, f"{where}.{key}", names, "not an object of names")
    if not isinstance(section.get("session_options", {}), dict):
        raise _refused(
            path, f"{where}.session_options", section["session_options"], "not an object"
        )
    for key, (low, high) in _SECTION_COUNTS.items():
        _count(section, key, low, high, path, where)


def _search(search: dict[str, Any], path: Path) -> None:
    for key in _SEARCH_FLAGS:
        if key in search and not isinstance(search[key], bool):
            raise _refused(path, f"search.{key}", search[key], "not true or false")
    for key in _SEARCH_NUMBERS:
        value = search.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _refused(path, f"search.{key}", value, "not a number")
    for key, (low, high) in _SEARCH_COUNTS.items():
        _count(search, key, low, high, path, "search")


def _count(data: dict[str, Any], key: str, low: int, high: int, path: Path, where: str) -> None:
    value = data.get(key)
    if value is None:
        return
    if not _is_int(value):
        raise _refused(path, f"{where}.{key}", value, "not a whole number")
    if not low <= value <= high:
        raise _refused(path, f"{where}.{key}", value, f"outside {low:,} to {high:,}")


def _file_name(value: Any) -> bool:
    """A name of a file directly in the package ("" names none), never a path out of it."""
    if not isinstance(value, str):
        return False
    if value == "":
        return True
    parts = {PurePosixPath(value).name, PureWindowsPath(value).name}
    return parts == {value} and value not in (".", "..")


def check_processor(data: Any, path: Path) -> None:
    """Refuse a processor JSON whose steps would scale pictures beyond any family's bounds.

    Every step's pixel budget (`_BUDGETS`) is checked: its numbers are whole and positive,
    a `min_pixels` is at most `MAX_MIN_PIXELS` (every picture is scaled up to it) and at
    most its `max_pixels`, and whatever a step may keep is at most `MAX_PIXELS`. Steps of
    other types are left to the runtime.

    Raises:
        MmforgeError: Naming the file, the field and its value.
    """
    processor = data.get("processor") if isinstance(data, dict) else None
    steps = processor.get("transforms") if isinstance(processor, dict) else None
    if not isinstance(steps, list):
        raise MmforgeError(f"{path} holds no processor.transforms list", _HINT)
    for i, step in enumerate(steps):
        operation = step.get("operation") if isinstance(step, dict) else None
        if not isinstance(operation, dict):
            raise _refused(path, f"processor.transforms[{i}]", step, "not a processor step")
        attrs = operation.get("attrs", {})
        where = f"processor.transforms[{i}].operation.attrs"
        if not isinstance(attrs, dict):
            raise _refused(path, where, attrs, "not an object")
        budget = _BUDGETS.get(str(operation.get("type")))
        if budget is not None:
            budget(attrs, where, path)


def _whole(attrs: dict[str, Any], key: str, where: str, path: Path) -> int | None:
    """`attrs[key]`, a positive whole number (None when absent)."""
    value = attrs.get(key)
    if value is None:
        return None
    if not _is_int(value):
        raise _refused(path, f"{where}.{key}", value, "not a whole number")
    if value < 1:
        raise _refused(path, f"{where}.{key}", value, "not a positive count")
    return int(value)


def _too_many(path: Path, said: str) -> MmforgeError:
    return MmforgeError(
        f"{path}: {said}, above the {MAX_PIXELS:,} pixels mmforge lets the runtime keep of a "
        "picture (twice the most any model mmforge converts asks for)",
        _HINT,
    )


def _resize(attrs: dict[str, Any], where: str, path: Path) -> None:
    """ort-extensions' `Resize`: smart_resize within min/max_pixels, or a fixed size."""
    low = _whole(attrs, "min_pixels", where, path)
    high = _whole(attrs, "max_pixels", where, path)
    if low is not None and low > MAX_MIN_PIXELS:
        raise MmforgeError(
            f"{path}: {where}.min_pixels is {low:,}, above the {MAX_MIN_PIXELS:,} pixels "
            "mmforge lets the runtime scale every picture up to (64 times the most any "
            "model mmforge converts asks for)",
            _HINT,
        )
    if high is not None and high > MAX_PIXELS:
        raise _too_many(path, f"{where}.max_pixels is {high:,}")
    if low is not None and high is not None and low > high:
        raise MmforgeError(
            f"{path}: {where}: min_pixels {low:,} is above max_pixels {high:,}", _HINT
        )
    width = _whole(attrs, "width", where, path)
    height = _whole(attrs, "height", where, path)
    if width is not None and height is not None and width * height > MAX_PIXELS:
        raise _too_many(
            path, f"{where}: a Resize to {width:,}×{height:,} is {width * height:,} pixels"
        )


def _gemma4(attrs: dict[str, Any], where: str, path: Path) -> None:
    """Gemma 4: up to max_soft_tokens tokens, each (patch · pooling)² pixels."""
    tokens = _whole(attrs, "max_soft_tokens", where, path) or 280
    side = (_whole(attrs, "patch_size", where, path) or 16) * (
        _whole(attrs, "pooling_kernel_size", where, path) or 3
    )
    if tokens * side * side > MAX_PIXELS:
        said = f"{tokens:,} soft tokens of {side}×{side} are {tokens * side * side:,} pixels"
        raise _too_many(path, f"{where}: {said}")


def _phi3(attrs: dict[str, Any], where: str, path: Path) -> None:
    """Phi-3-Vision: up to num_crops crops of 336²."""
    crops = _whole(attrs, "num_crops", where, path) or 16
    if crops * 336 * 336 > MAX_PIXELS:
        said = f"num_crops is {crops:,}: crops of 336×336 make {crops * 336 * 336:,} pixels"
        raise _too_many(path, f"{where}.{said}")


def _phi4(attrs: dict[str, Any], where: str, path: Path) -> None:
    """Phi-4-multimodal: up to dynamic_hd crops of dyhd_base_resolution²."""
    crops = _whole(attrs, "dynamic_hd", where, path) or 36
    side = _whole(attrs, "dyhd_base_resolution", where, path) or 448
    if crops * side * side > MAX_PIXELS:
        said = f"{crops:,} crops of {side:,}×{side:,} make {crops * side * side:,} pixels"
        raise _too_many(path, f"{where}: {said}")


# The pixels each runtime step may make of a picture, by its type (as the families write
# them: `backend/families/*/__init__.py`).
_BUDGETS: dict[str, Callable[[dict[str, Any], str, Path], None]] = {
    "Resize": _resize,
    "Gemma4ImageTransform": _gemma4,
    "Phi3ImageTransform": _phi3,
    "Phi4VisionDynamicPreprocess": _phi4,
}


def check_tokenizer_model(path: Path, owner: str) -> None:
    """Refuse a tokenizer.json whose `model.type` is none of the tokenizers library's models.

    ONNX Runtime GenAI's own tokenizer loaded such a file, so a conversion validated and
    published it; chat, which decodes answers with the tokenizers library, then could not
    load it. A model with no `type` is left to the library, which tells the four apart by
    their fields.

    Args:
        path: The tokenizer.json (nothing is checked when it does not exist).
        owner: What the tokenizer belongs to (a checkpoint's or a package's folder).

    Raises:
        MmforgeError: Naming the file, the field and the models it may name.
    """
    from mmforge.backend.untrusted import TOKENIZER_LIMIT, read_json_file

    if not path.is_file():
        return
    data = read_json_file(path, "tokenizer", limit=TOKENIZER_LIMIT)
    model = data.get("model") if isinstance(data, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind is None or kind in TOKENIZER_MODELS:
        return
    raise MmforgeError(
        f"{path.name} of {owner}: model.type is {_shown(kind)}, not a tokenizer model the "
        f"tokenizers library knows ({', '.join(TOKENIZER_MODELS[:-1])} or "
        f"{TOKENIZER_MODELS[-1]})",
        f"The tokenizer is malformed: fix or re-download {path}",
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """A value from a stranger's file, as a short quoted text."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refused(path: Path, field: str, value: Any, what: str) -> MmforgeError:
    return MmforgeError(f"{path}: {field} is {_shown(value)}, {what}", _HINT)
