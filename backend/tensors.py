"""Tensor names, shapes and dtypes of a checkpoint, read without loading the weights.

Three sources, best first: safetensors headers on disk; safetensors headers on the hub
(HTTP range requests, no download); a model built from the config on the meta device.
`TensorRef` stands for one tensor until it is read (`checkpoint_refs` gives them all),
below the families, which adapt them (Phi-4's LoRA merge) before the weight plan maps them.
"""

from __future__ import annotations

import functools
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.errors import PICKLE, Cancelled, MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.untrusted import parse_json, read_json_object

log = logging.getLogger(__name__)

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint.

    Attributes:
        name: The checkpoint key.
        shape: Its shape.
        dtype: safetensors dtype name ("F32", "BF16", ...).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes in the checkpoint."""
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


def read_header(path: Path) -> dict[str, dict[str, object]]:
    """Parse the JSON header of one safetensors file.

    Raises:
        MmforgeError: The file is truncated or not safetensors.
    """
    return _parsed(path)[1]


def _parsed(path: Path) -> tuple[int, dict[str, dict[str, object]]]:
    """Where the data of a safetensors file starts, and its header.

    Parsed once per file version: inspection, the weight plan and every tensor read
    share it.
    """
    try:
        stat = path.stat()
    except OSError as e:
        raise MmforgeError(
            f"{path.name} could not be read ({e})",
            "The download may be incomplete: download the model again",
        ) from e
    return _parse_header(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _parse_header(path: Path, size: int, mtime_ns: int) -> tuple[int, dict[str, dict[str, object]]]:
    try:
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise ValueError("shorter than its 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(_MAX_HEADER, size - 8):
                raise ValueError(f"header length {length} does not fit in {size} bytes")
            header = parse_json(f.read(length), f"{path.name}'s header", limit=_MAX_HEADER)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        end = max((_check_entry(k, v) for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + length + end > size:
            raise ValueError(f"data ends at byte {8 + length + end} but the file has {size}")
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise MmforgeError(
            f"{path.name} is not a valid safetensors file ({e})",
            "The download may be incomplete or corrupt: delete it and download again",
        ) from e
    except MmforgeError as e:  # the header's JSON: too deep, a number out of bounds
        raise MmforgeError(
            f"{path.name} is not a valid safetensors file ({e.user_message})",
            "The file is corrupt or hostile: delete it and download it again",
        ) from None
    return 8 + int(length), header


def _check_entry(name: str, meta: Any) -> int:
    """Check one tensor's header entry; where its data ends.

    Raises:
        ValueError: The shape, dtype or byte range is malformed, or the range does not
            hold exactly the bytes the shape and dtype make.
    """
    shape, offsets = meta["shape"], meta["data_offsets"]
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"{name} has the shape {shape}")
    start, end = (int(x) for x in offsets)
    if not 0 <= start <= end:
        raise ValueError(f"{name} has the byte range {offsets}")
    width = DTYPE_BYTES.get(str(meta["dtype"]))
    if width is not None and end - start != math.prod(shape) * width:
        raise ValueError(
            f"{name} holds {end - start} bytes where its shape {shape} in {meta['dtype']} "
            f"needs {math.prod(shape) * width}"
        )
    return end


def _from_header(header: dict[str, dict[str, object]]) -> list[TensorInfo]:
    out = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        shape = tuple(int(d) for d in meta["shape"])  # type: ignore[attr-defined]
        out.append(TensorInfo(name, shape, str(meta["dtype"])))
    return out


def safetensors_headers(folder: Path) -> dict[Path, dict[str, dict[str, object]]] | None:
    """The header of every safetensors file of the checkpoint in `folder`, or None if none.

    With an index, the files are the shards it names; otherwise every *.safetensors file.

    Raises:
        MmforgeError: A shard named by the index is missing, or a file is corrupt.
    """
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json_object(index, "model").get("weight_map")
        if not isinstance(weight_map, dict):
            raise MmforgeError(f"{index.name} has no weight_map object", "Download it again")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            # A shard is a file beside the index: a name that leaves the folder is refused.
            if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", ".."):
                raise MmforgeError(
                    f"{index.name} names a shard outside the model folder: {shard!r}",
                    "The checkpoint is malformed or hostile; download it again from its source",
                )
        present = [s for s in shards if (folder / s).is_file()]
        if not present:
            return None  # metadata-only folder (hub inspect): no shard fetched yet
        missing = [s for s in shards if s not in present]
        if missing:
            raise MmforgeError(
                f"Shard {missing[0]} named in {index.name} is missing",
                "Download the model again; the copy is incomplete",
            )
        files = [folder / s for s in shards]
    else:
        files = sorted(folder.glob("*.safetensors"))
    return {f: read_header(f) for f in files} or None


def local_tensors(folder: Path) -> list[TensorInfo] | None:
    """Tensors from the safetensors files in `folder`, or None if it has none.

    Raises:
        MmforgeError: A shard named by the index is missing, or a file is corrupt.
    """
    headers = safetensors_headers(folder)
    if headers is None:
        return None
    return [t for header in headers.values() for t in _from_header(header)]


def hub_tensors(
    repo_id: str, revision: str | None, token: str | None, ctx: JobContext | None = None
) -> list[TensorInfo] | None:
    """Tensors from the safetensors headers on the hub, fetched by range requests.

    Raises:
        Cancelled: The job was cancelled while the hub was asked.
    """
    from huggingface_hub import HfApi

    from mmforge.backend.hubcall import hub_call, hub_timeout_s
    from mmforge.backend.source import hub_endpoint

    api = HfApi(endpoint=hub_endpoint(), token=token)
    try:
        meta = hub_call(
            "safetensors headers",
            lambda: api.get_safetensors_metadata(
                repo_id, revision=revision, timeout=hub_timeout_s() + 5
            ),
            ctx,
        )
    except Cancelled:
        raise
    except Exception:  # noqa: BLE001 - no headers from the hub (none, or no answer): unknown
        return None
    out: list[TensorInfo] = []
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            shape = tuple(info.shape)
            # huggingface_hub parses the header itself: a shape of Infinity or 1e400
            # (a float) would overflow every size computed from it.
            if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                log.warning("the hub's header of %s gives %s the shape %r", repo_id, name, shape)
                return None
            out.append(TensorInfo(name, shape, str(info.dtype)))
    return out


def meta_tensors(config: object, hf_class: str) -> list[TensorInfo]:
    """Tensors of the model built from a transformers config on the meta device.

    Nothing is allocated. Tied parameters are counted once, as a checkpoint stores them.
    """
    import torch
    import transformers

    cls = getattr(transformers, hf_class)
    with torch.device("meta"):
        model = cls._from_config(config)
    dtype = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    return [
        TensorInfo(name, tuple(p.shape), dtype.get(p.dtype, "F32"))
        for name, p in model.named_parameters()
    ]


# safetensors dtype -> torch dtype name; numpy reads the same names, except bfloat16,
# which numpy lacks: its bits are read as uint16 and viewed as bfloat16 in torch.
TORCH_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
_NUMPY = {**TORCH_DTYPES, "BF16": "uint16"}


def check_readable(name: str, dtype: str) -> None:
    """Refuse a tensor whose dtype mmforge cannot read (FP8 and other quantized forms).

    Raises:
        MmforgeError: The dtype, named, with what to use instead.
    """
    if dtype not in TORCH_DTYPES:
        raise MmforgeError(
            f"{name} is stored as {dtype}, which mmforge cannot convert yet",
            "Use the model's bfloat16, float16 or float32 release (quantized checkpoints "
            "are not supported)",
        )


def read_tensor(path: Path, name: str, index: int | None = None) -> Any:
    """Read one tensor from a safetensors file with a plain read (no mmap) as torch.

    Reading instead of mapping keeps the checkpoint out of the process's resident set:
    only the tensor being converted occupies memory.

    Args:
        path: The safetensors file.
        name: The tensor.
        index: Read only `tensor[index]` (its bytes are contiguous): one expert of a fused
            expert tensor, without reading the others.
    """
    import numpy as np
    import torch

    base, header = _parsed(path)
    meta: dict[str, Any] = header[name]
    dtype = str(meta["dtype"])
    shape = [int(d) for d in meta["shape"]]
    start, end = (int(x) for x in meta["data_offsets"])
    itemsize = np.dtype(_NUMPY[dtype]).itemsize
    count = (end - start) // itemsize
    if index is not None:
        if not shape or not -shape[0] <= index < shape[0]:
            raise IndexError(f"{name}: index {index} outside {shape}")
        shape = shape[1:]
        count = math.prod(shape)
        start += (index % int(meta["shape"][0])) * count * itemsize
    array = np.fromfile(path, dtype=_NUMPY[dtype], count=count, offset=base + start)
    tensor = torch.from_numpy(array)
    if dtype == "BF16":
        tensor = tensor.view(torch.bfloat16)
    return tensor.reshape(shape)


class TensorRef:
    """A checkpoint tensor known by its header: name, shape and dtype, no data.

    It stands in for the tensor while the graph builder renames the state dict, so the
    renames cost nothing. Shape-only operations the builder applies (slicing a fused
    QKV weight, squeezing a batch axis) are recorded and replayed when the tensor is
    read, one tensor at a time, as its component is written. A `loader` stands in for the
    file when the tensor is computed from others (a LoRA merged into its base weight).
    """

    _LAZY_OPS = ("squeeze", "unsqueeze", "reshape", "view", "t", "transpose", "contiguous", "chunk")

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: str | Any,
        file: Path,
        ops: tuple[tuple[str, tuple[Any, ...]], ...] = (),
        loader: Callable[[], Any] | None = None,
    ):
        import torch

        self.name = name
        self.shape = torch.Size(shape)
        if isinstance(dtype, str):
            dtype = getattr(torch, TORCH_DTYPES.get(dtype, "float32"))
        self.dtype = dtype
        self.file = file
        self.ops = ops
        self.loader = loader

    def __repr__(self) -> str:
        return f"TensorRef({self.name}, {list(self.shape)})"

    def dim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    def size(self, axis: int | None = None) -> Any:
        """The shape, or one of its sizes."""
        return self.shape if axis is None else self.shape[axis]

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    def _derive(self, op: str, args: tuple[Any, ...]) -> Any:
        import torch

        meta = torch.empty(self.shape, device="meta", dtype=self.dtype)
        out = meta[args[0]] if op == "__getitem__" else getattr(meta, op)(*args)
        if isinstance(out, tuple):  # chunk
            return tuple(
                TensorRef(
                    self.name,
                    tuple(o.shape),
                    self.dtype,
                    self.file,
                    (*self.ops, (op, args), ("__pick__", (i,))),
                    self.loader,
                )
                for i, o in enumerate(out)
            )
        return TensorRef(
            self.name,
            tuple(out.shape),
            self.dtype,
            self.file,
            (*self.ops, (op, args)),
            self.loader,
        )

    def __getitem__(self, key: Any) -> Any:
        return self._derive("__getitem__", (key,))

    def __getattr__(self, op: str) -> Any:
        if op in TensorRef._LAZY_OPS:
            return lambda *args: self._derive(op, args)
        raise AttributeError(op)

    def read(self) -> Any:
        """The tensor's data, read from its file, with the recorded operations applied.

        A first operation that picks one entry of the leading axis (an expert of a fused
        expert tensor: `t[e]`, `t[e, :rows]`) reads only that entry from the file, so
        splitting E experts reads the tensor once in all, not E times.
        """
        ops = self.ops
        if self.loader:
            tensor: Any = self.loader()
        else:
            leading, ops = _leading_index(ops)
            tensor = read_tensor(self.file, self.name, leading)
        for op, args in ops:
            if op in ("__getitem__", "__pick__"):
                tensor = tensor[args[0]]
            else:
                tensor = getattr(tensor, op)(*args)
        return tensor


def _leading_index(
    ops: tuple[tuple[str, tuple[Any, ...]], ...],
) -> tuple[int | None, tuple[tuple[str, tuple[Any, ...]], ...]]:
    """An integer pick on the leading axis at the head of `ops`, and the ops left after it."""
    if not ops or ops[0][0] != "__getitem__":
        return None, ops
    key = ops[0][1][0]
    if isinstance(key, int) and not isinstance(key, bool):
        return key, ops[1:]
    if isinstance(key, tuple) and key and isinstance(key[0], int) and not isinstance(key[0], bool):
        if any(k is Ellipsis or k is None for k in key[1:]):
            return None, ops
        rest = key[1:]
        return key[0], ((("__getitem__", (rest,)),) if rest else ()) + ops[1:]
    return None, ops


def checkpoint_refs(folder: Path, *, allow_pickle: bool = False) -> dict[str, TensorRef]:
    """References to every safetensors tensor of a checkpoint, from the headers.

    Args:
        folder: The checkpoint folder.
        allow_pickle: Read pytorch_model*.bin when there is no safetensors file (with
            torch.load(weights_only=True), which refuses anything but tensors).

    Raises:
        MmforgeError: No safetensors, a missing shard or a corrupt header.
    """
    headers = safetensors_headers(folder)  # validates headers and shards
    if headers is None:
        pickled = sorted(folder.glob("pytorch_model*.bin"))
        if pickled and allow_pickle:
            return _pickled_refs(pickled)
        raise MmforgeError(
            f"{folder} has no safetensors weights",
            "Pickled .bin weights are read only with --allow-pickle"
            if pickled
            else "Download the model's *.safetensors files",
            kind=PICKLE if pickled else None,
        )
    refs: dict[str, TensorRef] = {}
    for path, header in headers.items():
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            check_readable(name, str(meta["dtype"]))
            refs[name] = TensorRef(name, tuple(meta["shape"]), str(meta["dtype"]), path)  # type: ignore[arg-type]
    return refs


def _pickled_refs(files: list[Path]) -> dict[str, TensorRef]:
    import pickle

    import torch

    refs: dict[str, TensorRef] = {}
    for path in files:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (pickle.UnpicklingError, RuntimeError, OSError, ValueError) as e:
            raise MmforgeError(
                f"{path.name} could not be loaded safely ({e})",
                "It holds more than tensors, or it is corrupt; use a safetensors checkpoint",
            ) from e
        for name, tensor in state.items():
            refs[name] = TensorRef(
                name,
                tuple(tensor.shape),
                tensor.dtype,
                path,
                loader=functools.partial(_same, tensor),
            )
    return refs


def _same(tensor: Any) -> Any:
    return tensor
