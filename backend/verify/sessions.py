"""Running one package graph on given inputs, in a plain onnxruntime session.

A graph that refuses its inputs raises `GraphError`, which the stages turn into that
stage's FAIL rather than a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError

_NUMPY_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}


class GraphError(Exception):
    """An ONNX session refused its inputs."""


def open_session(package: Path, model_cfg: dict[str, Any], section: str) -> Any:
    """A CPU session on the graph a genai_config section names."""
    import onnxruntime as ort

    from mmforge.backend.last_logits import unpruned

    options = ort.SessionOptions()
    options.log_severity_level = 4  # failures come back as stage verdicts
    path = package / model_cfg[section]["filename"]
    whole = unpruned(path) if section == "decoder" else None
    if whole is None:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    # The decoder computes the last position's logits alone; verify compares them all.
    folder = "session.model_external_initializers_file_folder_path"
    options.add_session_config_entry(folder, str(path.parent))
    return ort.InferenceSession(
        whole.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run(session: Any, names: list[str] | None, feeds: dict[str, Any]) -> list[Any]:
    """session.run, with a refusal as GraphError."""
    try:
        return list(session.run(names, feeds))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        raise GraphError(str(e).splitlines()[0][:300]) from None


def run_named(session: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """Every output of a run, by name."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, run(session, None, feeds), strict=True))


def run_per_item(session: Any, feeds: dict[str, Any]) -> list[Any]:
    """Run an encoder graph on its inputs.

    Where the batch fails and every input has the same leading count, run one item at a
    time and stack the rows, as the runtime does for such graphs.
    """
    import numpy as np

    try:
        return list(session.run(None, feeds))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        first = str(e)
    counts = {v.shape[0] for v in feeds.values() if getattr(v, "ndim", 0) > 0}
    per_grid = _per_grid(feeds)
    if per_grid:
        parts = [run(session, None, item) for item in per_grid]
    elif len(counts) != 1 or (n := counts.pop()) < 2:
        raise GraphError(first.splitlines()[0][:300])
    else:
        parts = [run(session, None, {k: v[i : i + 1] for k, v in feeds.items()}) for i in range(n)]
    out = []
    for j in range(len(parts[0])):
        pieces = [p[j] for p in parts]
        width = pieces[0].shape[-1]
        out.append(np.concatenate([p.reshape(-1, width) for p in pieces]))
    return out


def _per_grid(feeds: dict[str, Any]) -> list[dict[str, Any]]:
    """One picture's feeds at a time, as the Qwen pipeline calls a graph whose grid is [1, 3].

    The processor hands `image_grid_thw` [n, 3] and every picture's patch rows padded to
    the largest's; the runtime (QwenVisionState::Run) gives such a graph each picture's
    own rows, t·h·w of them, with its grid row. [] when the feeds are not of that kind.
    """
    grid = feeds.get("image_grid_thw")
    pixels = feeds.get("pixel_values")
    if grid is None or pixels is None or grid.ndim != 2 or grid.shape[1] != 3:
        return []
    n = grid.shape[0]
    if n < 1 or pixels.ndim != 2 or pixels.shape[0] % n:
        return []
    longest = pixels.shape[0] // n
    out = []
    for i in range(n):
        rows = int(grid[i].prod())
        if rows > longest:
            return []
        item = dict(feeds)
        item["pixel_values"] = pixels[i * longest : i * longest + rows]
        item["image_grid_thw"] = grid[i : i + 1]
        out.append(item)
    return out


def cast(session: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """Each feed in the dtype its graph input declares; feeds the graph lacks are dropped."""
    import numpy as np

    out = {}
    for spec in session.get_inputs():
        if spec.name in feeds:
            out[spec.name] = np.asarray(feeds[spec.name]).astype(
                _NUMPY_TYPES.get(spec.type, "float32")
            )
    return out


def encoder_feeds(
    session: Any, mapping: dict[str, str], arrays: dict[str, Any], prefix: str
) -> dict[str, Any]:
    """The runtime processor's arrays under the encoder graph's input names.

    genai_config maps a role (its key) to a graph input (its value); the processor names
    its output after the role, the graph input, or `<prefix>_<role>` (the masks).
    """
    feeds: dict[str, Any] = {}
    for key, name in mapping.items():
        for candidate in (key, name, f"{prefix}_{key}"):
            if candidate in arrays:
                feeds[name] = arrays[candidate]
                break
    for spec in session.get_inputs():
        if spec.name not in feeds and spec.name in arrays:
            feeds[spec.name] = arrays[spec.name]
    missing = [s.name for s in session.get_inputs() if s.name not in feeds]
    if missing:
        raise MmforgeError(
            f"The runtime's processor gives nothing for the graph inputs {missing}",
            "The package's processor and graph disagree; convert again",
        )
    return cast(session, feeds)


def fill_empty(session: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """Zero-row features for feature inputs not given (a text-only prompt)."""
    import numpy as np

    out = dict(feeds)
    for spec in session.get_inputs():
        if spec.name in out or spec.name == "input_ids":
            continue
        dims = [d if isinstance(d, int) else 0 for d in spec.shape]
        if not dims:  # rank unknown (Gemma 3 image features are [images, 256, hidden])
            dims = [0, 256, int(session.get_outputs()[0].shape[-1])]
        dims[0] = 0
        out[spec.name] = np.zeros(dims, dtype=np.float32)
    return out


def empty_past(inputs: dict[str, Any], head_size: int) -> dict[str, Any]:
    """The decoder's state before the first token.

    An empty KV cache; zeros for LFM2's short-convolution state and for the Gated
    DeltaNet layers' convolution and recurrent state (fixed shapes but the batch).
    """
    import numpy as np

    feeds = {}
    for name, spec in inputs.items():
        if name.endswith((".conv_state", ".recurrent_state")) or (
            name.startswith("past.") and name.endswith(".conv")
        ):
            dims = [1, *(int(d) for d in spec.shape[1:])]
            feeds[name] = np.zeros(dims, dtype=np.float32)
        elif name.startswith("past_key_values."):
            _, heads, _, size = spec.shape
            size = size if isinstance(size, int) else head_size  # builder: "kv_cache_dim"
            feeds[name] = np.zeros((1, int(heads), 0, int(size)), dtype=np.float32)
    return feeds


def carried_state(inputs: dict[str, Any], outs: dict[str, Any]) -> dict[str, Any]:
    """The state one decoder run hands to the next: each past input's present output."""
    feeds = {}
    for name in inputs:
        if name.startswith("past_key_values."):
            feeds[name] = outs["present." + name[len("past_key_values.") :]]
        elif name.startswith("past.") and name.endswith(".conv"):
            feeds[name] = outs["present." + name[len("past.") :]]
    return feeds


def positions(hf: Any | None, start: int, end: int, spec: Any) -> Any:
    """Position ids for [start, end): HF's where it made them (3-D M-RoPE), else a range."""
    import numpy as np

    if hf is not None:
        if len(spec.shape) == 3 and hf.ndim == 3 and hf.shape[0] == 4:
            hf = hf[1:]  # transformers may prepend the text positions
        return hf[..., start:end]
    ids = np.arange(start, end, dtype=np.int64)[None]
    if len(spec.shape) == 3:
        return np.broadcast_to(ids, (3, 1, end - start)).copy()
    return ids
