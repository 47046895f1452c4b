"""The architecture profile of a model, produced before any heavy work.

`inspect_source` resolves a source (fetching metadata only), finds the family entry, and
reports: the runtime pipeline type (or why there is none), the components to build, the
projector variant with the fields that decided it, token ids, parameter counts, and size
and memory estimates per dtype.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend import precisions, tensors, typed
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.families import Cfg, Family, ImageTokens, Projector
from mmforge.backend.families.catalog import CANNOT, Standing, standing
from mmforge.backend.jobs import JobContext
from mmforge.backend.source import ResolvedSource, read_json, resolve
from mmforge.backend.tensors import TensorInfo

log = logging.getLogger(__name__)

COMPONENTS = ("vision_encoder", "audio_encoder", "embedding", "decoder")
DTYPES = precisions.DTYPES
KV_CONTEXT = 4096  # tokens of KV cache assumed by the memory estimate
# torch, transformers, onnx, mobius and the built graphs (benchmarks/scale.py, 3B).
TOOLS_FOOTPRINT = 450_000_000
# Bytes per parameter the writer holds beside the checkpoint tensor it reads, for the
# largest tensor, when it casts it (nothing when the checkpoint already has the dtype):
# the cast copy, and for f32 a transient second float32 copy's worth (the transposed
# tied output layer). Measured by benchmarks/scale.py on a 3B bfloat16 checkpoint whose
# largest tensor has 311M parameters: conversion peaks of 1.70 GB (f16) and 2.92 GB
# (f32). int4/int8 quantize a transposed weight in column blocks, never copying it
# whole: one float32 copy (Qwen3.5-2B shapes, largest tensor 509M parameters: 3.49 GB).
_CAST_BYTES = {"f32": 6, "f16": 2, "int4": 4, "int8": 4}
_SAFETENSORS_DTYPE = {"f32": "F32", "f16": "F16"}
# What a package holds besides its weights (measured on the tiny packages of every tested
# family by benchmarks/package_sizes.py, where it is most of the package): each graph's
# own structure (nodes, names, shapes), weights_report.json's line per tensor, and the
# tokenizer and template files copied from the checkpoint (counted from the folder).
GRAPH_BYTES = {"vision_encoder": 170_000, "audio_encoder": 130_000, "embedding": 12_000}
DECODER_GRAPH_BYTES = 20_000  # plus this much a layer
REPORT_BYTES_PER_TENSOR = 160
# The checkpoint's files a package copies as they are (convert/package.py).
COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
)
# ONNX Runtime's CPU kernels run f16 weights as float32: loading an f16 package holds
# both (measured: 16.7 GB for an 8.17 GB package).
CPU_LOAD_FACTOR = {"f16": 2.0}

_AUDIO_MARKS = ("audio", "speech")
_VISION_MARKS = (
    "visual",
    "vision",
    "multi_modal_projector",
    "mm_projector",
    "image_newline",
    "img_",
    "image_embed",
    "image_projection",
    "connector.",
    "mlp1.",
    "patch_embed",
    "embed_vision",
)


@dataclass(frozen=True)
class Sizes:
    """Parameter counts and size estimates.

    Attributes:
        source: Where the tensor list came from: "safetensors", "hub safetensors headers",
            "config (meta device)" or "unknown".
        parameters: Parameters per component and "total".
        checkpoint_bytes: Bytes of the checkpoint weights.
        package_bytes: Expected package size per dtype (f32, f16, int4 decoder).
        memory_bytes: Expected runtime memory per dtype on the CPU: weights (one copy:
            the runtime loads a package once) plus a KV cache of `KV_CONTEXT` tokens.
        convert_peak_bytes: Expected peak memory of the conversion (the largest over the
            dtypes): the tools' own footprint plus the largest tensor as read and as
            cast (weights stream one tensor at a time).
        convert_peak_by_dtype: That peak per dtype. The runtime check at the end then
            loads the package: `memory_bytes`.
        active_parameters: For a mixture of experts, the parameters one token runs
            through (the routed experts counted top-k of n); None otherwise.
    """

    source: str
    parameters: dict[str, int] = field(default_factory=dict)
    checkpoint_bytes: int = 0
    package_bytes: dict[str, int] = field(default_factory=dict)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    convert_peak_bytes: int = 0
    convert_peak_by_dtype: dict[str, int] = field(default_factory=dict)
    active_parameters: int | None = None


@dataclass(frozen=True)
class Profile:
    """Everything `inspect` reports. Serialises to the `--json` output as is."""

    source: str
    folder: str
    model_type: str
    family: str
    family_key: str
    pipeline_type: str | None
    runnable: bool
    runtime_reason: str | None
    components: tuple[str, ...]
    projector: Projector
    token_ids: dict[str, int]
    token_strings: dict[str, str]
    image_tokens: ImageTokens
    dtype: str
    remote_code: bool
    sizes: Sizes
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    commit: str | None = None
    refused_fields: tuple[str, ...] = ()
    unlisted_fields: tuple[str, ...] = ()
    architecture: tuple[str, ...] = ()
    converts: str = ""
    converts_reason: str = ""
    # A family that converts only as an approximation: what differs, in a few words
    # (Family.approximation.short); empty otherwise.
    approximation: str = ""

    @property
    def convertible(self) -> bool:
        """Whether this version converts the model.

        The runtime runs it, and mmforge builds it (exactly, or with the user's consent).
        A runtime pipeline alone is not enough: Gemma 3n's pictures run on one, but are not
        built yet.
        """
        from mmforge.backend.families.catalog import CANNOT, NOT_YET

        return self.runnable and self.converts not in (NOT_YET, CANNOT)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        """The profile from its JSON form (`to_dict`)."""
        return typed.from_dict(cls, data)


def component_of(name: str) -> str:
    """Which ONNX component a checkpoint tensor ends up in (by its name)."""
    low = name.lower()
    if any(m in low for m in _AUDIO_MARKS):
        return "audio_encoder"
    if any(m in low for m in _VISION_MARKS):
        return "vision_encoder"
    if low.endswith("embed_tokens.weight") or "embed_tokens_per_layer" in low:
        return "embedding"
    return "decoder"


def _tensors(
    checkpoint: Checkpoint, resolved: ResolvedSource, token: str | None, ctx: JobContext | None
) -> tuple[list[TensorInfo] | None, str, str | None]:
    """The checkpoint's tensors, where they were read from, and why they are unknown."""
    found = checkpoint.tensors
    if found is not None:
        return found, "safetensors", None
    src = resolved.source
    if src.repo_id is not None and not resolved.offline:
        found = tensors.hub_tensors(src.repo_id, resolved.commit or src.revision, token, ctx)
        if found is not None:
            return found, "hub safetensors headers", None
    family = checkpoint.family
    if not checkpoint.remote_code and family.profile.hf_class:
        building = family.reference.model_context if family.reference else contextlib.nullcontext
        try:
            with building():
                meta = tensors.meta_tensors(
                    checkpoint.transformers_config(), family.profile.hf_class
                )
        except ImportError as e:
            # A class built on an optional library (Gemma 3n's vision tower needs timm).
            said = " ".join(str(e).split())[:200] or type(e).__name__
            return (
                None,
                "unknown",
                f"transformers needs a library this environment lacks to build "
                f"{family.profile.hf_class} ({said})",
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError) as e:
            # transformers refuses configs whose values contradict each other (a hidden
            # size no head count divides); its words, bounded, say which.
            said = " ".join(str(e).split())[:300] or type(e).__name__
            return (
                None,
                "unknown",
                (
                    f"transformers cannot build a model from this config.json ({said}); its "
                    "values contradict each other, so it cannot be converted or verified as it is"
                ),
            )
        return meta, "config (meta device)", None
    return None, "unknown", "no safetensors weights and no config class"


def _active_parameters(by_comp: dict[str, list[TensorInfo]], text: Cfg) -> int | None:
    """Parameters one token runs through in a mixture of experts (None: not one)."""
    experts = text.first("num_experts", "num_local_experts")
    top_k = text.get("num_experts_per_tok")
    if not isinstance(experts, int) or not isinstance(top_k, int) or experts <= 0:
        return None
    converted = [t for ts in by_comp.values() for t in ts]
    routed = sum(t.numel for t in converted if ".mlp.experts." in t.name + ".")
    total = sum(t.numel for t in converted)
    return total - routed + routed * min(top_k, experts) // experts


def _rope_cache_elements(text: Cfg) -> int:
    """Elements of the decoder's RoPE cos and sin tables: context × rotary half-width, twice.

    At the released contexts they are real weight: Qwen3.5-2B's 262,144 positions make
    67 MB of float32.
    """
    heads = int(text.get("num_attention_heads", 1))
    head_dim = int(text.get("head_dim", 0) or int(text.get("hidden_size", 0)) // max(heads, 1))
    context = int(text.get("max_position_embeddings", 0))
    by_type = text.get("rope_parameters")
    kinds = text.get("layer_types")
    if isinstance(by_type, dict) and isinstance(kinds, list) and set(kinds) <= set(by_type):
        # One table per attention kind (Gemma 4: sliding and full layers, each with its own
        # rope and, through per_layer_config, its own head size).
        overrides = text.get("per_layer_config")
        overrides = overrides if isinstance(overrides, dict) else {}
        total = 0
        for kind in sorted(set(kinds)):
            params = by_type[kind] if isinstance(by_type[kind], dict) else {}
            layer = str(kinds.index(kind))
            own = overrides.get(layer, overrides.get(int(layer), {}))
            dim = int(own.get("head_dim", head_dim)) if isinstance(own, dict) else head_dim
            # "proportional" rope keeps full-width tables and zeroes the unrotated part.
            partial = (
                1.0
                if params.get("rope_type") == "proportional"
                else float(params.get("partial_rotary_factor", 1.0))
            )
            total += 2 * context * (int(dim * partial) // 2)
        return total
    partial = float(
        text.first("rope_parameters.partial_rotary_factor", "partial_rotary_factor", default=1.0)
    )
    return 2 * context * (int(head_dim * partial) // 2)


def _stored_bytes(dtype: str, component: str, t: TensorInfo, f16_encoders: bool) -> float:
    """Bytes per parameter of a checkpoint tensor in a package of `dtype` (policy.py)."""
    if dtype == "f16":
        return 2.0
    if not precisions.is_quantized(dtype):
        return 4.0
    if component == "decoder" and _quantized(t):
        # the blocks, and one float32 scale per block of 32
        return precisions.WEIGHT_BYTES[dtype]
    if component == "embedding" and len(t.shape) == 2 and t.shape[-1] % precisions.BLOCK_SIZE == 0:
        return precisions.WEIGHT_BYTES[dtype]  # the token table, GatherBlockQuantized
    if component in ("vision_encoder", "audio_encoder") and f16_encoders:
        return 2.0
    return 4.0


def _stored_once(dtype: str, t: TensorInfo) -> bool:
    """Whether a tensor is the tied output layer that int4/int8 packages do not store again.

    Its blocks and scales are the quantized token table's bytes, which the embedding reads
    from the decoder's data file (convert/tied.py). Each session still loads them: memory
    counts them twice.
    """
    return (
        precisions.is_quantized(dtype)
        and "tied copy" in t.name
        and len(t.shape) == 2
        and t.shape[-1] % precisions.BLOCK_SIZE == 0
    )


def _quantized(t: TensorInfo) -> bool:
    """Whether int4 quantizes a decoder tensor: matrices, and fused experts [E, out, in]."""
    return len(t.shape) == 2 or (len(t.shape) == 3 and "conv" not in t.name)


def _state_elements(text: Cfg) -> int:
    """Elements of the decoder's state for `KV_CONTEXT` tokens.

    A KV cache on every layer that attends (full or sliding attention); hybrid decoders'
    other layers (LFM2's convolutions, Qwen3.5's Gated DeltaNet) hold a fixed-size state
    instead: the convolution's last kernel-1 inputs and, for DeltaNet, a dk×dv matrix per
    value head.
    """
    layers = int(text.get("num_hidden_layers", 0))
    heads = int(text.get("num_attention_heads", 1))
    kv_heads = int(text.get("num_key_value_heads", heads))
    head_dim = int(text.get("head_dim", 0) or int(text.get("hidden_size", 0)) // max(heads, 1))
    kinds = text.get("layer_types")
    kinds = kinds if isinstance(kinds, list) else ["full_attention"] * layers
    stateful = sum(1 for k in kinds if k in ("conv", "linear_attention"))
    attending = len(kinds) - stateful
    elements = 2 * attending * kv_heads * head_dim * KV_CONTEXT
    if "linear_attention" in kinds:
        key_heads = int(text.get("linear_num_key_heads", 0))
        value_heads = int(text.get("linear_num_value_heads", 0))
        dk = int(text.get("linear_key_head_dim", 0))
        dv = int(text.get("linear_value_head_dim", 0))
        channels = 2 * key_heads * dk + value_heads * dv
        per_layer = channels * (int(text.get("linear_conv_kernel_dim", 4)) - 1)
        per_layer += value_heads * dk * dv
        elements += kinds.count("linear_attention") * per_layer
    return elements


def copied_bytes(folder: Path) -> int:
    """Bytes of the checkpoint's files a package copies as they are (tokenizer, template)."""
    return sum((folder / n).stat().st_size for n in COPIED_FILES if (folder / n).is_file())


def _structure_bytes(by_comp: dict[str, list[TensorInfo]], text: Cfg) -> int:
    """A package's bytes besides weights and copied files: graphs and the weights report."""
    layers = int(text.get("num_hidden_layers", 0) or 0)
    graphs = sum(GRAPH_BYTES.get(c, 0) for c, ts in by_comp.items() if ts)
    graphs += DECODER_GRAPH_BYTES * (1 + layers)
    return graphs + REPORT_BYTES_PER_TENSOR * sum(len(ts) for ts in by_comp.values())


def estimate_sizes(
    tensors: list[TensorInfo] | None,
    source: str,
    cfg: Cfg,
    family: Family | None = None,
    copied: int = 0,
) -> Sizes:
    """Parameter counts per component and package/memory estimates per dtype.

    `copied`: bytes of the files the package copies from the checkpoint (`copied_bytes`).

    Only the dtypes the family converts to are estimated. Where the decoder comes from
    ONNX Runtime GenAI's builder (LFM2-VL), which loads the whole model in torch, the
    conversion peak is that model in f32 rather than the streaming path's largest tensor
    (measured on a 358M-parameter LFM2-VL: 1.49 GB in the builder, 1.43 GB of f32 weights).
    """
    if not tensors:
        return Sizes(source=source)
    spec = family.package if family is not None else None
    # Tensors the release ships that generation never runs (Qwen3.5's mtp.* head) are in
    # the checkpoint, not in the package.
    unused = spec.unused_ok(cfg) if spec is not None else ()
    by_comp: dict[str, list[TensorInfo]] = {c: [] for c in COMPONENTS}
    for t in tensors:
        if not any(re.search(p, t.name) for p in unused):
            by_comp[component_of(t.name)].append(t)
    if not any(t.name.endswith("lm_head.weight") for t in tensors):
        # Tied embeddings: the decoder still needs its own copy of the output projection.
        by_comp["decoder"] += [
            TensorInfo("lm_head.weight (tied copy)", t.shape, t.dtype)
            for t in by_comp["embedding"]
            if t.name.endswith("embed_tokens.weight")
        ][:1]
    params = {c: sum(t.numel for t in ts) for c, ts in by_comp.items() if ts}
    params["total"] = sum(
        t.numel for ts in by_comp.values() for t in ts if "tied copy" not in t.name
    )
    active = _active_parameters(by_comp, cfg.text)

    # int4/int8 store the encoders in f16 where mobius builds them in f16 (and the probe
    # run finds it safe: the estimate assumes it does).
    f16_encoders = spec is not None and spec.build is None and "f16" in spec.dtypes

    def package(dtype: str, loaded: bool = False) -> int:
        return sum(
            int(t.numel * _stored_bytes(dtype, comp, t, f16_encoders and not loaded))
            for comp, ts in by_comp.items()
            for t in ts
            if loaded or not _stored_once(dtype, t)
        )

    kv_elems = _state_elements(cfg.text)
    rope = _rope_cache_elements(cfg.text)
    dtypes = spec.dtypes if spec is not None else DTYPES
    # The decoder's cos/sin tables cover the whole context (f16 in f16 packages).
    other = copied + _structure_bytes(by_comp, cfg.text)
    pkg = {d: package(d) + rope * (2 if d == "f16" else 4) + other for d in dtypes}
    # ONNX Runtime's CPU kernels run f16 weights as float32 (an int4 package's f16
    # encoders too); quantized blocks stay as they are.
    loaded = {
        d: package(d, loaded=True) + rope * 4 if precisions.is_quantized(d) else pkg[d]
        for d in dtypes
    }
    mem = {
        d: int(loaded[d] * CPU_LOAD_FACTOR.get(d, 1.0)) + kv_elems * (2 if d == "f16" else 4)
        for d in dtypes
    }
    largest = max(tensors, key=lambda t: t.numel)
    read = largest.nbytes // max(largest.numel, 1)
    peaks = {
        d: TOOLS_FOOTPRINT
        + largest.numel
        * (read + (0 if _SAFETENSORS_DTYPE.get(d) == largest.dtype else _CAST_BYTES[d]))
        for d in dtypes
    }
    if spec is not None and spec.builder_holds_model:
        # The builder holds the whole model in float32.
        peaks = {d: TOOLS_FOOTPRINT + params["total"] * 4 for d in dtypes}
    return Sizes(
        source=source,
        parameters=params,
        checkpoint_bytes=sum(t.nbytes for t in tensors if "tied copy" not in t.name),
        package_bytes=pkg,
        memory_bytes=mem,
        convert_peak_bytes=max(peaks.values()),
        convert_peak_by_dtype=peaks,
        active_parameters=active,
    )


def _token_strings(folder: Path, token_ids: dict[str, int]) -> dict[str, str]:
    """Map the named token ids to their strings using the tokenizer files, when present."""
    vocab: dict[int, str] = {}
    tok_json = folder / "tokenizer.json"
    if tok_json.is_file():
        data = read_json(tok_json, "tokenizer")
        for added in data.get("added_tokens", []):
            vocab[int(added["id"])] = str(added["content"])
        model_vocab = data.get("model", {}).get("vocab")
        if isinstance(model_vocab, dict):
            wanted = set(token_ids.values())
            vocab.update({i: s for s, i in model_vocab.items() if i in wanted and i not in vocab})
    tok_cfg = folder / "tokenizer_config.json"
    if tok_cfg.is_file():
        for i, added in read_json(tok_cfg, "tokenizer").get("added_tokens_decoder", {}).items():
            vocab.setdefault(int(i), str(added.get("content")))
    return {name: vocab[i] for name, i in token_ids.items() if i in vocab}


def _dtype(cfg: Cfg) -> str:
    value = cfg.first("dtype", "torch_dtype", "text_config.dtype", "text_config.torch_dtype")
    return str(value).replace("torch.", "") if value else "float32"


def profile_folder(
    resolved: ResolvedSource,
    *,
    trust_remote_code: bool = False,
    token: str | None = None,
    ctx: JobContext | None = None,
) -> Profile:
    """Build the profile of a resolved source (its folder holds at least config.json)."""
    checkpoint = Checkpoint.read(
        resolved.folder, trust_remote_code=trust_remote_code, config=resolved.config
    )
    return profile_checkpoint(checkpoint, resolved, token=token, ctx=ctx)


def profile_checkpoint(
    checkpoint: Checkpoint,
    resolved: ResolvedSource,
    *,
    token: str | None = None,
    ctx: JobContext | None = None,
) -> Profile:
    """The profile of a checkpoint that has been read."""
    folder = checkpoint.folder
    cfg = checkpoint.cfg
    remote = checkpoint.remote_code
    model_type = checkpoint.model_type
    family = checkpoint.family
    tensors_found, tensor_source, why_unknown = _tensors(checkpoint, resolved, token, ctx)
    token_ids = family.profile.token_ids(cfg)
    token_strings = _token_strings(folder, token_ids)
    warnings: list[str] = []
    fields = checkpoint.field_review
    refused = tuple(r.sentence() for r in fields.refused)
    if refused:
        warnings.append(
            "Cannot convert: config.json sets "
            + ("a field" if len(refused) == 1 else f"{len(refused)} fields")
            + " that mmforge's graphs do not implement (see 'refused fields')."
        )
    if family.pipeline_type is None:
        warnings.append(f"Not runnable in ONNX Runtime GenAI: {family.no_pipeline_reason}.")
    if family.not_converted:
        warnings.append(f"Cannot convert yet: {family.not_converted}.")
    if remote:
        warnings.append("Remote code: this model's classes come from its repository.")
    if checkpoint.remote_layout:
        warnings.append(
            f"Remote-code layout (model_type {checkpoint.written.get('model_type')}) read as "
            f"data and mapped to transformers' native {family.name}; no code from the "
            "repository runs."
        )
    if (folder / "tokenizer.json").is_file() and family.profile.runtime_token_strings:
        vocab = _all_token_strings(folder)
        absent = [s for s in family.profile.runtime_token_strings if s not in vocab]
        if absent:
            warnings.append(
                "The tokenizer lacks tokens the runtime looks for: " + ", ".join(absent)
            )
    components = family.components(cfg)
    said = standing(family)
    if refused:
        said = Standing(CANNOT, "config.json sets fields the converted graphs would not follow")
    if not {"vision_encoder", "audio_encoder"} & set(components):
        warnings.append("This config has no vision or audio encoder: it is a text-only model.")
    if why_unknown is not None:
        warnings.append(f"Parameter count unknown: {why_unknown}.")
    if resolved.offline:
        warnings.append("The hub was unreachable; the cached copy was used.")
    return Profile(
        source=resolved.source.spec,
        folder=str(folder),
        model_type=model_type,
        family=family.name,
        family_key=family.key,
        pipeline_type=family.pipeline_type,
        runnable=family.pipeline_type is not None,
        runtime_reason=family.no_pipeline_reason,
        components=components,
        projector=family.profile.projector(cfg),
        token_ids=token_ids,
        token_strings=token_strings,
        image_tokens=family.profile.image_tokens(cfg, checkpoint.preprocessor),
        dtype=_dtype(cfg),
        remote_code=remote,
        sizes=estimate_sizes(tensors_found, tensor_source, cfg, family, copied_bytes(folder)),
        notes=(*family.profile.notes, *_approximation_why(family)),
        warnings=tuple(warnings),
        commit=resolved.commit,
        refused_fields=refused,
        unlisted_fields=fields.unlisted if family.profile.fields else (),
        architecture=family.profile.architecture(cfg),
        converts=said.kind,
        converts_reason=said.why,
        approximation=family.approximation.short if family.approximation and not refused else "",
    )


def _approximation_why(family: Family) -> tuple[str, ...]:
    """Why a family converts only as an approximation, naming the runtime code."""
    if family.approximation is None or not family.approximation.why:
        return ()
    return (f"Why only an approximation: {family.approximation.why}",)


def _all_token_strings(folder: Path) -> set[str]:
    data = read_json(folder / "tokenizer.json", "tokenizer")
    strings = {str(a.get("content")) for a in data.get("added_tokens", [])}
    model_vocab = data.get("model", {}).get("vocab")
    if isinstance(model_vocab, dict):
        strings.update(model_vocab)
    return strings


def inspect_source(
    spec: str,
    ctx: JobContext | None = None,
    *,
    token: str | None = None,
    trust_remote_code: bool = False,
) -> Profile:
    """Resolve a source (metadata only) and profile it. This is the `inspect` job."""
    ctx = ctx or JobContext()
    resolved = resolve(spec, ctx, purpose="inspect", token=token)
    ctx.report("inspect", 0, 1, message="reading config", force=True)
    profile = profile_folder(resolved, trust_remote_code=trust_remote_code, token=token, ctx=ctx)
    ctx.report("inspect", 1, 1, message="done")
    return profile
