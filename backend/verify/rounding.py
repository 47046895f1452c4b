"""Judging a quantized package exactly: the reference gets the package's own rounded weights.

An int4 package differs from the original model in two ways that have nothing to do with
whether the conversion is right: its decoder weights are rounded to 4 bits, and ONNX
Runtime computes MatMulNBits at accuracy level 4 (activations rounded to int8 on the
fly, for speed). verify separates them from conversion faults:

- `exact_arithmetic_copy` makes a view of the package whose MatMulNBits compute in
  float32 (accuracy level 0), the same weights;
- `round_like_package` writes the package's own dequantized 4-bit weights into the
  transformers model, so the reference computes what the original computes with int4
  weights. Against it the exact-arithmetic package must be as exact as an f32 package;
- `rounding_cost` then measures what the rounding itself changes (original against
  rounded transformers: teacher-forced top-1 agreement, mean KL divergence of the
  next-token distributions, the prompt's perplexity, the first greedy token that
  differs), and the runtime's int8 arithmetic is measured as the tokens it changes.

Each package weight is placed in the transformers model by value: its source tensor (from
the weight report) is found among the model's parameters, or their expert slices, by a
digest of its bytes, and the rows it rounds are the ones nearest to its dequantized
values. No name mapping between layouts is assumed.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.untrusted import read_json_object

log = logging.getLogger(__name__)

# Quality gates on the rounding's own cost (teacher-forced over the answer), documented
# in the README: at most 2 % of next-token choices changed and a mean KL under 0.02 nats
# is "good"; at most 10 % and under 0.1 nats is "fair"; more is "poor".
GATES = (("good", 0.98, 0.02), ("fair", 0.90, 0.1))


@dataclass(frozen=True)
class RoundingCost:
    """What a precision's rounding changes, original model against rounded model.

    Attributes:
        dtype: The package's precision ("int4" or "int8").
        weights: Matrices the reference took from the package.
        answer_tokens: Length of the original model's greedy answer the metrics run over.
        top1_agreement: Share of answer positions where both pick the same next token
            (teacher-forced on the original's answer).
        mean_kl: Mean KL(original ‖ rounded) of the next-token distributions, in nats.
        prompt_perplexity: The prompt's perplexity under the original and rounded models.
        first_difference: The first greedy token where the rounded model's answer leaves
            the original's (None: the same answer).
        arithmetic_changed: The first token where the runtime's fast int8 arithmetic
            leaves the exact-arithmetic package (None: the same tokens).
        grade: "good", "fair" or "poor" against `GATES`.
    """

    dtype: str
    weights: int
    answer_tokens: int
    top1_agreement: float
    mean_kl: float
    prompt_perplexity: tuple[float, float]
    first_difference: int | None
    arithmetic_changed: int | None
    grade: str

    def sentence(self) -> str:
        """The cost in words a user can read."""
        changed = 1.0 - self.top1_agreement
        over = f"a {self.answer_tokens}-token answer" if self.answer_tokens else "the prompt"
        text = (
            f"{self.dtype} itself changes {changed:.0%} of next-token choices over "
            f"{over} (mean KL {self.mean_kl:.3g} nats; prompt "
            f"perplexity {self.prompt_perplexity[0]:.3g} → {self.prompt_perplexity[1]:.3g}); "
            f"quality {self.grade}"
        )
        if self.first_difference is not None:
            text += f"; its greedy answer leaves the original's at token {self.first_difference}"
        if self.arithmetic_changed is not None:
            text += (
                "; ONNX Runtime's int8 arithmetic (accuracy level 4) changes the answer from "
                f"token {self.arithmetic_changed}"
            )
        return text


def grade(top1: float, kl: float) -> str:
    """The quality grade of a rounding cost."""
    for name, least_top1, most_kl in GATES:
        if top1 >= least_top1 and kl <= most_kl:
            return name
    return "poor"


def exact_arithmetic_copy(package: Path, into: Path) -> Path:
    """The package with every MatMulNBits computing in float32 (accuracy level 0).

    Every file but decoder.onnx is hard-linked (copied where the scratch folder is on
    another file system: ONNX Runtime refuses external data reached through a symbolic
    link out of the model's folder); the decoder's graph, not its weights, is rewritten.
    """
    import os
    import shutil

    import onnx

    into.mkdir(parents=True, exist_ok=True)
    for path in package.iterdir():
        if path.name == "decoder.onnx" or not path.is_file():
            continue
        try:
            os.link(path, into / path.name)
        except OSError:
            shutil.copyfile(path, into / path.name)
    model = onnx.load(str(package / "decoder.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attribute in node.attribute:
                if attribute.name == "accuracy_level":
                    attribute.i = 0
    onnx.save(model, str(into / "decoder.onnx"))
    return into


def dequantize(packed: Any, scales: Any, k: int, n: int, block: int, bits: int = 4) -> Any:
    """A symmetric MatMulNBits weight as float32 [K, N].

    4-bit: (q - 8) · scale, the low nibble first; 8-bit: (q - 128) · scale.
    """
    blocks = packed.shape[1]
    if bits == 4:
        low, high = packed & 0x0F, packed >> 4
        q = np.stack([low, high], axis=-1).reshape(n, blocks, block).astype(np.float32)
    else:
        q = packed.reshape(n, blocks, block).astype(np.float32)
    middle = float(1 << (bits - 1))
    values = (q - middle) * scales.reshape(n, blocks, 1).astype(np.float32)
    return values.reshape(n, blocks * block)[:, :k].T


def _package_weights(package: Path) -> list[tuple[str, Any, float]]:
    """Each MatMulNBits weight: (its initializer's source name, dequantized [N, K], scale)."""
    import onnx

    model = onnx.load(str(package / "decoder.onnx"), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        bits = attrs.get("bits", 4)
        if bits not in (4, 8) or (len(node.input) > 3 and node.input[3]):
            raise LayoutError(f"{node.name}: only symmetric 4/8-bit MatMulNBits are read back")
        packed = _array(package, inits[node.input[1]])
        scales = _array(package, inits[node.input[2]])
        k, n, block = attrs["K"], attrs["N"], attrs["block_size"]
        weight = dequantize(packed, scales, k, n, block, bits)
        source = node.input[1].removesuffix(f"_Q{bits}").removesuffix("_t")
        out.append((source, np.ascontiguousarray(weight.T), float(np.abs(scales).max())))
    return out


def _embedding_tables(package: Path) -> list[tuple[str, Any]]:
    """Each quantized token table of the embedding graph: (its source name, float32 [V, H]).

    int4 and int8 packages store the table as GatherBlockQuantized with the decoder's
    blocks (policy.py): the same symmetric layout as MatMulNBits, one row per token.
    """
    import onnx

    path = package / "embedding.onnx"
    if not path.is_file():
        return []
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "GatherBlockQuantized":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        bits, block = attrs.get("bits", 4), attrs.get("block_size", 128)
        if len(node.input) > 3 and node.input[3]:
            raise LayoutError(f"{node.name}: only symmetric quantized tables are read back")
        packed = _array(package, inits[node.input[0]])
        scales = _array(package, inits[node.input[2]])
        rows, blocks = scales.shape
        per_byte = 8 // bits
        grouped = packed.reshape(rows, blocks, block // per_byte)
        table = dequantize(grouped, scales, blocks * block, rows, block, bits).T
        out.append((node.input[0].removesuffix(f"_Q{bits}"), np.ascontiguousarray(table)))
    return out


def _array(package: Path, tensor: Any) -> Any:
    """An initializer's values, from the package's external data file or the proto.

    Read by offset here rather than by onnx's loader, which refuses a data file with more
    than one hard link (the exact-arithmetic view links it).
    """
    from onnx import helper, numpy_helper

    if not tensor.external_data:
        return numpy_helper.to_array(tensor)
    where = {e.key: e.value for e in tensor.external_data}
    path = (package / where["location"]).resolve()
    if path.parent != package.resolve():
        raise LayoutError(f"{tensor.name}: external data outside the package")
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    count = int(np.prod(tensor.dims)) if tensor.dims else 1
    array = np.fromfile(path, dtype=dtype, count=count, offset=int(where.get("offset", 0)))
    return array.reshape(tuple(tensor.dims))


def _digest(array: Any) -> str:
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).hexdigest()


def _sources(package: Path, of: str = "decoder") -> dict[str, str]:
    """A component's initializer name -> the checkpoint tensor it was made from.

    An initializer made from several tensors (a builder's fused q/k/v, which the report
    lists under each of them) is also named, once per tensor, as `_FUSED` keys
    "initializer#tensor" (see `_parts`).
    """
    report = read_json_object(package / "weights_report.json", "package")
    out: dict[str, str] = {}
    for entry in report.get("mapped", []):
        for target in entry.get("targets", []):
            component, _, name = str(target).partition("/")
            if component == of:
                out[name] = str(entry["checkpoint"])
                out[f"{name}{_FUSED}{entry['checkpoint']}"] = str(entry["checkpoint"])
    return out


_FUSED = "#"


def round_like_package(
    model: Any, package: Path, checkpoint_folder: Path, merged: dict[str, Any] | None = None
) -> tuple[int, list[str]]:
    """Write the package's dequantized int4/int8 decoder weights into the transformers model.

    A package weight that is not within rounding of the rows it came from is not written
    (the reference keeps the checkpoint's values there, so the stages show the
    difference) and is returned by name: its blocks are wrong, a conversion fault.

    `merged` is the checkpoint's tensors as the conversion read them, where the family
    changes some before mapping (`prepare_weights`: Phi-4's vision LoRA merged into its
    base weights). The package rounds W + ΔW there while the reference keeps W and adds
    ΔW through its adapter, so the reference's W becomes the rounded value less ΔW.

    Returns:
        How many matrices were written, and the package weights that were not.

    Raises:
        LayoutError: A package weight has no place in the model (its source tensor is not
            among the model's parameters).
    """
    import torch

    from mmforge.backend.tensors import checkpoint_refs

    refs = checkpoint_refs(checkpoint_folder)
    sources = _sources(package)
    index: dict[str, tuple[str, Any]] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            data = p.detach().float().numpy()
            if data.ndim == 2:
                index[_digest(data)] = (name, p)
            elif data.ndim == 3:
                # Fused experts [E, rows, K]: each expert, and each half of it (gate and
                # up stacked, as transformers fuses a one-tensor-per-expert checkpoint).
                index[_digest(data)] = (name, p)
                # A checkpoint may store them transposed, [E, K, rows] (Qwen3-VL MoE's
                # releases; transformers transposes them on load).
                index.setdefault(_digest(data.transpose(0, 2, 1)), (name, p))
                half = data.shape[1] // 2
                for e in range(data.shape[0]):
                    index[_digest(data[e])] = (f"{name}[{e}]", p[e])
                    index[_digest(data[e, :half])] = (f"{name}[{e}][:half]", p[e, :half])
                    index[_digest(data[e, half:])] = (f"{name}[{e}][half:]", p[e, half:])
        output = model.get_output_embeddings()
        written, wrong = 0, []
        for source, weight, scale in _package_weights(package):
            start, placed = 0, []
            for part, rows in _parts(source, sources, refs, weight):
                count = weight.shape[0] if rows < 0 else rows
                values = torch.from_numpy(np.ascontiguousarray(weight[start : start + count]))
                start += count
                target = _place(part, sources, refs, index, output, model)
                shape = tuple(values.shape)
                candidates = _row_blocks(target, shape, part)
                delta = _delta(part, sources, refs, merged)
                shifts = (
                    [None] * len(candidates) if delta is None else _row_blocks(delta, shape, part)
                )
                best, shift = min(
                    zip(candidates, shifts, strict=True),
                    key=lambda c: _distance(c[0], c[1], values),
                )
                if _distance(best, shift, values) > scale * 1.01 + 1e-6:
                    break
                placed.append((best, values if shift is None else values - shift))
            else:
                for best, values in placed:
                    best.copy_(values.to(best.dtype))
                written += 1
                continue
            wrong.append(source)
        embedded = _round_tables(package, refs, index, output, model)
        written += embedded[0]
        wrong += embedded[1]
    return written, wrong


def _round_tables(
    package: Path, refs: dict[str, Any], index: dict[str, tuple[str, Any]], output: Any, model: Any
) -> tuple[int, list[str]]:
    """Write the package's quantized token tables into the model's embeddings."""
    import torch

    sources = _sources(package, "embedding")
    written, wrong = 0, []
    for source, table in _embedding_tables(package):
        target = _place(source, sources, refs, index, None, model)
        values = torch.from_numpy(table)
        if tuple(target.shape) != tuple(values.shape):
            raise LayoutError(f"The embedding table {source} has no place of its shape")
        # Within half a block's step (the scale) of the checkpoint's rows, else wrong.
        step = float(values.abs().max()) / 7.0 + 1e-6
        if float((target.float() - values).abs().max()) > step * 1.01:
            wrong.append(source)
            continue
        if output is not None and output.weight.data_ptr() == target.data_ptr():
            # Tied to the output layer: it keeps its own values (rounded by the decoder's
            # blocks, or float32); the embedding takes the table's.
            output.weight = torch.nn.Parameter(output.weight.detach().clone())
        target.copy_(values.to(target.dtype))
        written += 1
    return written, wrong


def _distance(block: Any, shift: Any, values: Any) -> float:
    """The largest difference between a package weight and the rows it was made from."""
    rows = block.float() if shift is None else block.float() + shift
    return float((rows - values).abs().max())


def _delta(
    part: str, sources: dict[str, str], refs: dict[str, Any], merged: dict[str, Any] | None
) -> Any:
    """What the conversion added to a checkpoint tensor before rounding it (None: nothing)."""
    import torch

    name = sources.get(part)
    if merged is None or name is None or merged.get(name) is refs.get(name) or name not in refs:
        return None
    return torch.from_numpy(merged[name].read().float().numpy() - refs[name].read().float().numpy())


def _parts(
    source: str, sources: dict[str, str], refs: dict[str, Any], weight: Any = None
) -> list[tuple[str, int]]:
    """The initializers a package weight stacks, with their rows (-1: all of one).

    The graph builder fuses q/k/v (and gate/up) weights as one initializer named
    "a__b__c__axis_0__concat": the parts' rows, in order. ONNX Runtime GenAI's builder
    (LFM2's decoder) names its fused q/k/v plainly, and the weight report lists it under
    each tensor: their order is the one whose stacked values are nearest the package's
    dequantized `weight`.
    """
    if "__axis_0__concat" not in source:
        fused = [k for k in sources if k.startswith(f"{source}{_FUSED}")]
        if len(fused) < 2 or weight is None:
            return [(source, -1)]
        return _stacking_order(fused, sources, refs, weight)
    names = source.split("__axis_0__concat")[0].split("__")
    out = []
    for name in names:
        checkpoint = sources.get(name)
        if checkpoint is None or checkpoint not in refs:
            raise LayoutError(f"The weight report names no checkpoint tensor for {name}")
        out.append((name, int(refs[checkpoint].shape[0])))
    return out


def _stacking_order(
    keys: list[str], sources: dict[str, str], refs: dict[str, Any], weight: Any
) -> list[tuple[str, int]]:
    """The order in which the tensors behind `keys` are stacked in `weight` (rows first)."""
    import itertools

    tensors = {k: refs[sources[k]].read().float().numpy() for k in keys if sources[k] in refs}
    if len(tensors) != len(keys) or len(keys) > 4:
        raise LayoutError(f"Cannot tell how {len(keys)} checkpoint tensors are stacked")
    rows = sum(t.shape[0] for t in tensors.values())
    if rows != weight.shape[0]:
        raise LayoutError(f"{len(keys)} tensors of {rows} rows make no weight of {weight.shape[0]}")
    best = min(
        itertools.permutations(keys),
        key=lambda order: float(np.abs(np.concatenate([tensors[k] for k in order]) - weight).max()),
    )
    return [(k, int(tensors[k].shape[0])) for k in best]


def _place(
    source: str,
    sources: dict[str, str],
    refs: dict[str, Any],
    index: dict[str, tuple[str, Any]],
    output: Any,
    model: Any,
) -> Any:
    """The model tensor a package weight came from."""
    import torch

    if source.endswith("lm_head.weight") and output is not None:
        head = output.weight
        inputs = model.get_input_embeddings()
        if inputs is not None and head.data_ptr() == inputs.weight.data_ptr():
            # Tied: the package rounds its own copy of the output layer; the embedding
            # stays float32. Untie, so the rounding reaches the output layer only.
            output.weight = torch.nn.Parameter(head.detach().clone())
        return output.weight.data
    name = sources.get(source)
    if name is None or name not in refs:
        raise LayoutError(f"The weight report names no checkpoint tensor for {source}")
    original = refs[name].read().float().numpy()
    found = index.get(_digest(original))
    if found is None:
        raise LayoutError(
            f"The checkpoint tensor {name} is not among the reference model's parameters"
        )
    return found[1].data


_EXPERT = re.compile(r"experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def _row_blocks(target: Any, shape: tuple[int, ...], source: str = "") -> list[Any]:
    """Views of `target` shaped like a package weight [N, K]: rows, or expert slices.

    A package weight named for one expert (`experts.E.gate_proj.weight`) taken from a
    fused tensor [experts, rows, K] gets that expert's gate, up or down rows only: with
    hundreds of experts, trying every slice would cost more than the reference itself.
    """
    n, k = shape
    named = _EXPERT.search(source)
    if named is not None and target.ndim == 3 and int(named.group(1)) < target.shape[0]:
        view = target[int(named.group(1))]
        kind = named.group(2)
        if view.shape[-1] == k and view.shape[0] == 2 * n and kind != "down_proj":
            return [view[:n] if kind == "gate_proj" else view[n:]]
        if view.shape == (n, k):
            return [view]
    views = [target] if target.ndim == 2 else [target[e] for e in range(target.shape[0])]
    out = []
    for view in views:
        rows = view.shape[0]
        if view.shape[-1] != k or rows < n:
            continue
        # Fused parts need not be one size (q, k and v rows differ under grouped-query
        # attention: 64 + 16 + 16), so a part may start at any multiple of the largest
        # step both sizes share, not only at multiples of its own.
        step = math.gcd(n, rows)
        out += [view[i : i + n] for i in range(0, rows - n + 1, step)]
    if not out:
        raise LayoutError(f"No rows of shape {list(shape)} in a tensor of {list(target.shape)}")
    return out


def teacher_forced(original: Any, rounded: Any, prompt_len: int) -> tuple[float, float, Any]:
    """(top-1 agreement, mean KL) over the answer positions, and per-position log-probs.

    Args:
        original: The original model's logits [S, V] over prompt + answer.
        rounded: The rounded model's logits on the same ids.
        prompt_len: Where the answer starts.
    """
    import torch

    a = torch.log_softmax(torch.as_tensor(original, dtype=torch.float64), dim=-1)
    b = torch.log_softmax(torch.as_tensor(rounded, dtype=torch.float64), dim=-1)
    answer = slice(prompt_len - 1, a.shape[0] - 1)
    agree = (a[answer].argmax(-1) == b[answer].argmax(-1)).double().mean()
    kl = (a[answer].exp() * (a[answer] - b[answer])).sum(-1).mean()
    return float(agree), float(kl), (a, b)


def perplexity(log_probs: Any, ids: list[int], end: int) -> float:
    """The perplexity of ids[1:end] under per-position log-probs [S, V]."""
    import torch

    targets = torch.as_tensor(ids[1:end])
    # Placeholders are no tokens (Phi-3.5-Vision's are negative ids): not scored.
    known = targets >= 0
    picked = log_probs[: end - 1][known].gather(-1, targets[known][:, None])[:, 0]
    return math.exp(float(-picked.mean()))
