"""The conversion job: source → ONNX Runtime GenAI package, written atomically.

Stages: resolve (download), inspect, build graphs, apply weights, quantize (int4),
write ONNX, package (genai_config, processor JSON, tokenizer), validate in the runtime.
Everything is built in a temporary folder beside OUT and renamed at the end, so a failed
or cancelled conversion leaves no partial package and leaves an existing OUT untouched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend import __version__, families, last_logits, precisions, typed
from mmforge.backend.bounds import vocab_size
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.checkpoint_digest import checkpoint_digest
from mmforge.backend.convert import attention_rule, package
from mmforge.backend.convert.outpath import check_out_path, check_path_lengths, staging_error
from mmforge.backend.convert.policy import refuse_unknown
from mmforge.backend.diskspace import no_space, out_of_space
from mmforge.backend.errors import APPROXIMATE, MmforgeError
from mmforge.backend.inspect import Profile, Sizes, profile_checkpoint
from mmforge.backend.jobs import JobContext
from mmforge.backend.localfiles import files_kept
from mmforge.backend.memory import available_bytes, peak_rss_bytes
from mmforge.backend.package_files import check_tokenizer_model
from mmforge.backend.picture_sizing import Intake
from mmforge.backend.processes import process_alive
from mmforge.backend.source import parse_source, resolve
from mmforge.backend.templates import check_folder_template
from mmforge.backend.token_range import check_tokenizer, check_tokens_fit
from mmforge.backend.units import human_bytes
from mmforge.backend.vocabulary import EPS

if TYPE_CHECKING:
    from mmforge.backend.convert.weights import WeightPlan
    from mmforge.backend.families import BuiltGraphs

log = logging.getLogger(__name__)

MANIFEST = "mmforge_manifest.json"
DTYPES = precisions.DTYPES


@dataclass
class Manifest:
    """What a conversion produced. Written into the package as mmforge_manifest.json."""

    source: str
    family: str
    family_key: str
    pipeline_type: str
    components: list[str]
    dtype: str
    ep: str
    files: dict[str, int] = field(default_factory=dict)
    # What each component is stored in (policy.py): "f16" encoders in an int4 package.
    precisions: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    peak_rss_mb: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Images the package takes per conversation (None: any number). Packages written
    # before this field have no key: chat asks the family (Family.old_package_max_images).
    max_images: int | None = None
    commit: str | None = None
    # Which model the checkpoint held (checkpoint_digest.py): {"config": …, "weights": …}.
    # Packages written before this field have none: Compare asks before comparing them.
    checkpoint_digest: dict[str, str] = field(default_factory=dict)
    # How transformers reads a picture for this model (picture_sizing.Intake): chat and verify
    # hand the runtime pictures as it would. Packages written before this field have no
    # key: their pictures keep their size and the runtime's resize is used.
    pictures: dict[str, Any] = field(default_factory=dict)
    # The approximation the user accepted (Family.approximation: {"what", "overrides"});
    # empty for an exact package. Verify compares with the same overrides and says so.
    approximation: dict[str, Any] = field(default_factory=dict)
    mmforge_version: str = __version__

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """The manifest from its JSON form (`to_dict`)."""
        return typed.from_dict(cls, data)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = round(time.perf_counter() - start, 3)


def check_output(out: Path) -> None:
    """Refuse an OUT that would destroy something that is not an mmforge package.

    Missing parent folders are fine: the conversion creates them, as other converters do.

    Raises:
        MmforgeError: OUT (or a parent) is a file, or OUT is a non-empty folder without an
            mmforge manifest.
    """
    blocking = next((p for p in [out, *out.parents] if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise MmforgeError(f"{blocking} is a file", "Choose a folder for the package")
    if not out.exists():
        return
    if not out.is_dir():
        raise MmforgeError(f"{out} is a file", "Choose a folder for the package")
    if any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise MmforgeError(
            f"{out} is not empty and is not an mmforge package",
            "Choose an empty or new folder; mmforge only replaces its own packages",
        )


def convert(
    spec: str,
    out: Path,
    ctx: JobContext | None = None,
    *,
    dtype: str = "f32",
    ep: str = "cpu",
    token: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    encoders: str = "auto",
    approximate: bool = False,
) -> Manifest:
    """Convert a hub id or local folder into an ONNX Runtime GenAI package at `out`.

    `encoders`: "auto" stores encoders in f16 where a probe run shows it safe (f16, int4
    and int8 packages), "f32" keeps them float32 (policy.py). `approximate`: the user
    accepts the family's approximation (`Family.approximation`); without it such a family
    is refused, naming what would differ.

    Raises:
        MmforgeError: Anything the user can act on (unsupported family, corrupt weights,
            the runtime rejecting the result).
        Cancelled: The job was cancelled; nothing was written.
    """
    ctx = ctx or JobContext()
    _check_choices(dtype, ep)
    refuse_unknown(encoders)
    out = Path(out).expanduser().resolve()
    _recover_interrupted_publish(out)  # puts the user's package back: first, whatever fails
    source = parse_source(spec)
    check_path_lengths(out, source.repo_id)  # Windows with long paths off: before any write
    _remove_stale_staging(out)
    check_output(out)
    check_out_path(out, source.local_path)
    before = _identity(out)
    timings: dict[str, float] = {}

    def vet(folder: Path) -> None:  # before a hub download's weights: refuse early
        _check_convertible(
            Checkpoint.read(folder, trust_remote_code=trust_remote_code, approximate=approximate),
            dtype,
        )

    with _timed(timings, "resolve"):
        resolved = resolve(
            spec, ctx, purpose="convert", token=token, allow_pickle=allow_pickle, vet=vet
        )
    with files_kept(resolved.folder):
        with _timed(timings, "inspect"):
            checkpoint = Checkpoint.read(
                resolved.folder,
                trust_remote_code=trust_remote_code,
                config=resolved.config,
                approximate=approximate,
            )
            profile = profile_checkpoint(checkpoint, resolved, token=token, ctx=ctx)
        _check_convertible(checkpoint, dtype)
        check_tokenizer(checkpoint.folder / "tokenizer.json", str(checkpoint.folder))
        check_tokenizer_model(checkpoint.folder / "tokenizer.json", str(checkpoint.folder))
        check_tokens_fit(
            checkpoint.folder / "tokenizer.json",
            vocab_size(checkpoint.written, checkpoint.folder / "config.json"),
            str(checkpoint.folder),
        )
        check_folder_template(checkpoint.folder, ctx)
        checkpoint.output_tied  # noqa: B018 - raises when transformers' output layer is random
        _check_disk_space(out, profile.sizes.package_bytes.get(dtype, 0))
        _check_memory(profile, dtype)
        created = _make_parents(out)
        try:
            staging = Path(
                tempfile.mkdtemp(prefix=f".{out.name}.mmforge-{os.getpid()}-", dir=out.parent)
            )
        except OSError as e:
            _discard(None, created)
            raise staging_error(out, e) from None
        staging.chmod(0o755)  # mkdtemp makes it private; a package is an ordinary folder
        try:
            manifest = _build_into(
                staging, checkpoint, dtype, ep, ctx, timings, allow_pickle, encoders
            )
            manifest.source = spec
            manifest.commit = resolved.commit
            with _timed(manifest.timings_s, "digest"):
                manifest.checkpoint_digest = checkpoint_digest(
                    checkpoint.folder, checkpoint.written
                )
            package.write_json(staging / MANIFEST, manifest.to_dict())
            ctx.check_cancel()
            _publish(staging, out, before)
        except BaseException as e:
            _discard(staging, created)
            if out_of_space(e):
                raise no_space("the package", out) from None
            raise
    ctx.report("done", 1, 1, message=f"package written to {out}", force=True)
    return manifest


def _check_choices(dtype: str, ep: str) -> None:
    if dtype not in DTYPES:
        raise MmforgeError(f"Unknown dtype '{dtype}'", f"Choose one of {', '.join(DTYPES)}")
    if ep not in EPS:
        raise MmforgeError(f"Unknown target '{ep}'", f"Choose one of {', '.join(EPS)}")


def _check_convertible(checkpoint: Checkpoint, dtype: str) -> None:
    """Refuse, before any heavy work, what this version cannot convert."""
    family = checkpoint.family
    if family.pipeline_type is None and family.exact_host is None:
        raise MmforgeError(
            f"{family.name} cannot be converted for ONNX Runtime GenAI: "
            f"{family.no_pipeline_reason}",
            "`mmforge inspect` still describes it; choose a family the runtime runs",
        )
    # A remote-code checkpoint converts only through a family builder that reads its
    # layout as data (Phi-3.5-Vision's); no code from the repository runs.
    own_builder = family.package is not None and family.package.build is not None
    if checkpoint.remote_code and not own_builder:
        known = family.recognition
        native = [t for t in known.model_types if t not in known.remote_code_types]
        said = family.not_converted or (family.exact_host and family.no_pipeline_reason)
        why = f" ({family.name}: {said})" if said else ""
        raise MmforgeError(
            f"This {family.name} checkpoint is defined by remote code, which mmforge does "
            f"not convert{why}",
            f"Use the model's native transformers version (model_type {', '.join(native)})"
            if native
            else "transformers has no native version of it to convert from",
        )
    if family.package is None:
        said = family.not_converted or family.no_pipeline_reason
        why = f": {said}" if said else ""
        raise MmforgeError(
            f"Converting {family.name} is not supported yet in this version of mmforge{why}",
            "Supported now: " + ", ".join(f.name for f in families.ALL if f.package),
        )
    if family.approximation is not None and checkpoint.approximation is None:
        raise MmforgeError(
            f"{family.name} converts only as an approximation, if you agree. "
            f"{family.approximation.what}",
            "If that is acceptable, rerun with --approximate; verify then reports "
            "APPROXIMATE instead of PASS",
            kind=APPROXIMATE,
        )
    if dtype not in family.package.dtypes:
        raise MmforgeError(
            f"{family.name} converts to {' or '.join(family.package.dtypes)} in this version, "
            f"not {dtype}",
            f"Use --dtype {family.package.dtypes[0]}",
        )
    checkpoint.refuse_unsupported_fields()


def _build_into(
    staging: Path,
    checkpoint: Checkpoint,
    dtype: str,
    ep: str,
    ctx: JobContext,
    timings: dict[str, float],
    allow_pickle: bool = False,
    encoders: str = "auto",
) -> Manifest:
    from mmforge.backend.convert import policy as precision_policy
    from mmforge.backend.convert.tied import share_tied_bytes
    from mmforge.backend.convert.validate import validate_package
    from mmforge.backend.convert.weights import plan_weights
    from mmforge.backend.tensors import checkpoint_refs

    family = checkpoint.family
    spec = family.package
    assert spec is not None and family.pipeline_type is not None
    with _timed(timings, "build"):
        graphs, fixes = _build(checkpoint, dtype, ep, staging, ctx)
        policy = precision_policy.choose(
            checkpoint,
            dtype,
            graphs,
            lambda other: _build(checkpoint, other, ep, staging, ctx)[0],
            encoders,
        )
    with _timed(timings, "plan"):
        refs = checkpoint_refs(checkpoint.folder, allow_pickle=allow_pickle)
        if spec.prepare_weights is not None:
            prepared = spec.prepare_weights(families.WeightsRequest(checkpoint, refs))
            refs = prepared.tensors
            fixes += [prepared.note] if prepared.note else []
        plan = plan_weights(graphs, refs, spec.rename_checkpoint, spec.unused_ok(checkpoint.cfg))
    io_names = {name: package.GraphIO.of(model) for name, model in graphs.models.items()}
    files = _write_components(graphs, plan, dtype, staging, ctx, timings)
    with _timed(timings, "write/shared"):
        for removed in share_tied_bytes(staging).removed:
            files.pop(removed, None)
    with _timed(timings, "package"):
        ctx.report("package", 0, 1, message="genai_config, processor and tokenizer", force=True)
        config = package.write_package(staging, checkpoint, io_names, plan.report, ep)
        _check_written(staging, checkpoint.folder)
        ctx.report("package", 1, 1)
    # The conversion's own peak: the probe run and the runtime check load the package.
    peak = {"before_validation": _peak_rss_mb()}
    with _timed(timings, "probe"):

        def rewrite(component: str, model: Any) -> dict[str, int]:
            graphs.models[component] = model
            return _write_components(graphs, plan, "f32", staging, ctx, timings)

        files.update(precision_policy.probe_and_settle(staging, policy, rewrite, ctx, ep))
    with _timed(timings, "validate"):
        image_token = config["model"].get("image_token_id")
        intake = Intake.from_dict(_picture_intake(checkpoint))
        checked = validate_package(staging, image_token, ctx, ep=ep, intake=intake)
    for path in staging.iterdir():
        files[path.name] = path.stat().st_size
    return Manifest(
        source="",
        family=family.name,
        family_key=family.key,
        pipeline_type=family.pipeline_type,
        components=list(io_names),
        dtype=dtype,
        ep=ep,
        files=dict(sorted(files.items())),
        precisions=policy.precisions,
        timings_s=timings,
        weights=plan.report.summary(),
        validation=asdict(checked),
        peak_rss_mb={**peak, "with_validation": _peak_rss_mb(), **_child_peak(graphs)},
        notes=[*_approximated(checkpoint), *fixes, *policy.notes, *spec.notes],
        pictures=_picture_intake(checkpoint),
        approximation=(
            checkpoint.approximation.to_dict() if checkpoint.approximation is not None else {}
        ),
    )


def _approximated(checkpoint: Checkpoint) -> list[str]:
    """The manifest's note on an approximation the user accepted."""
    if checkpoint.approximation is None:
        return []
    return [f"An approximation, converted with your consent: {checkpoint.approximation.what}"]


def _check_written(staging: Path, source: Path) -> None:
    """Refuse a package the checkpoint's own settings made one that chat would refuse.

    Chat, serve and verify check a package's genai_config.json and processor JSON
    (`runtime.read_genai_config`): a checkpoint asking for a processor beyond their
    bounds (min_pixels of 4·10⁷) is named here, before the runtime is run on it.

    Raises:
        MmforgeError: What would be refused, with the checkpoint to blame.
    """
    from mmforge.backend.runtime import read_genai_config

    try:
        read_genai_config(staging)
    except MmforgeError as e:
        raise MmforgeError(
            f"The settings of {source} make a package mmforge would not run: "
            + e.user_message.replace(f"{staging}{os.sep}", ""),
            f"Fix or re-download the checkpoint's config.json and preprocessor_config.json "
            f"in {source}",
        ) from None


def _picture_intake(checkpoint: Checkpoint) -> dict[str, Any]:
    """The manifest's `pictures`: how transformers reads this model's pictures."""
    spec = checkpoint.family.package
    assert spec is not None
    if not checkpoint.family.profile.has_vision(checkpoint.cfg):
        return {}
    pre = checkpoint.preprocessor
    # The processors' class default is True; a config's null turns it off.
    on_white = bool(pre.data.get("do_convert_rgb", True))
    return Intake(on_white, spec.picture_sizing(checkpoint.cfg, pre)).to_dict()


def _build(
    checkpoint: Checkpoint, dtype: str, ep: str, staging: Path, ctx: JobContext
) -> tuple[BuiltGraphs, list[str]]:
    """The graphs without weights, with the family's fixes applied; the fixes' notes."""
    from mmforge.backend.convert.graphs import build_graphs

    spec = checkpoint.family.package
    assert spec is not None
    parts = ", ".join(c.replace("_", " ") for c in checkpoint.family.components(checkpoint.cfg))
    ctx.report("build", 0, 1, message=parts, force=True)
    build_ep = ep if spec.fused_attention(checkpoint.cfg) else "default"
    graphs = build_graphs(checkpoint, dtype, build_ep, work=staging / ".build", ctx=ctx)
    # For every family mobius builds: a fused attention the runtime refuses for this head
    # size (attention_rule.py) is built again as the portable one, which the runtime runs.
    # (A family's own builder picks its attention itself.)
    decoder = graphs.models.get("decoder") if spec.build is None else None
    refused = attention_rule.refused(checkpoint.cfg, decoder)
    if refused is not None:
        graphs = build_graphs(checkpoint, dtype, "default", work=staging / ".build", ctx=ctx)
    fixes = [*([refused] if refused is not None else []), *graphs.notes]
    for fix in spec.graph_fixes:
        note = fix(families.FixRequest(graphs.models, checkpoint.cfg, checkpoint.folder))
        if note:
            fixes.append(note)
    # Every family: the runtime samples from the last position alone (last_logits.py).
    if "decoder" in graphs.models and last_logits.prune(graphs.models["decoder"]):
        fixes.append(
            "Decoder: the output layer runs on the last position only (the runtime reads "
            "no other; verify compares every position on an unpruned copy)"
        )
    ctx.report("build", 1, 1, message=", ".join(graphs.models))
    return graphs, fixes


def _write_components(
    graphs: BuiltGraphs,
    plan: WeightPlan,
    dtype: str,
    staging: Path,
    ctx: JobContext,
    timings: dict[str, float],
) -> dict[str, int]:
    """Fill, (quantize,) and write each component in turn; the files written and sizes.

    One component at a time: read its tensors, write it, let it go. Peak memory follows
    the largest component, not the checkpoint.
    """
    from mmforge.backend.convert.weights import apply_component, check_baked

    files: dict[str, int] = {}
    for component in list(graphs.models):
        with _timed(timings, f"weights/{component}"):
            if component in graphs.baked:
                check_baked(graphs, component, plan, ctx)
            else:
                apply_component(graphs, component, plan, ctx)
        if dtype == "f16" and component == "decoder" and component not in graphs.baked:
            from mmforge.backend.convert.graphs import float32_islands, float32_recurrent_state

            float32_islands(graphs.models[component])
            float32_recurrent_state(graphs.models[component])
        if precisions.is_quantized(dtype) and component in ("decoder", "embedding"):
            with _timed(timings, f"quantize/{component}"):
                from mmforge.backend.convert.policy import compact_embedding
                from mmforge.backend.convert.quantize import quantize_decoder

                bits = precisions.QUANTIZED_BITS[dtype]
                model = graphs.models[component]
                graphs.models[component] = (
                    quantize_decoder(model, ctx, bits)
                    if component == "decoder"
                    else compact_embedding(model, bits)
                )
        if component == "decoder":  # quantization writes the output shapes afresh
            last_logits.declare(graphs.models[component])
        with _timed(timings, f"write/{component}"):
            files.update(package.save_component(graphs.models[component], component, staging, ctx))
        del graphs.models[component]  # written: let its tensors go
    if graphs.work is not None:
        shutil.rmtree(graphs.work, ignore_errors=True)
    return files


def _peak_rss_mb() -> int:
    """This process's peak resident memory so far, in MB (0 where unknown)."""
    return peak_rss_bytes() // 2**20


def _child_peak(graphs: Any) -> dict[str, int]:
    """The decoder builder's own peak, for families whose decoder is built in a child."""
    if not graphs.baked:
        return {}
    return {"decoder_builder_process": peak_rss_bytes(children=True) // 2**20}


def _remove_stale_staging(out: Path) -> None:
    """Delete staging folders beside OUT left by conversions whose process was killed."""
    from mmforge.backend.library import remove_stale_staging

    remove_stale_staging(out.parent)


def _discard(staging: Path | None, created: list[Path]) -> None:
    """Remove the staging folder and the parents this run made (if still empty)."""
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


# Room kept free beyond the estimate: the runtime check's cache files, the estimate's error.
DISK_MARGIN = 1.15
DISK_SLACK_BYTES = 64 * 2**20
# inspect's memory estimates are checked within 15% by benchmarks/scale.py.
MEMORY_MARGIN = 1.15


def _memory_needed(sizes: Sizes, dtype: str) -> int:
    """Inspect's estimate of the most memory a conversion holds at once.

    The larger of its own peak and the runtime check's, which loads the whole package
    (with a KV cache).
    """
    peak = sizes.convert_peak_by_dtype.get(dtype, sizes.convert_peak_bytes)
    return max(peak, sizes.memory_bytes.get(dtype, 0))


def _check_memory(profile: Profile, dtype: str) -> None:
    """Refuse before any work a conversion that would not fit in memory.

    By inspect's estimate, instead of being killed by the system half way; the message
    names a dtype that fits.
    """
    available = available_bytes()
    sizes = profile.sizes
    need = _memory_needed(sizes, dtype)
    if available is None or not need or need * MEMORY_MARGIN <= available:
        return
    fitting = [
        d for d in sizes.memory_bytes if _memory_needed(sizes, d) * MEMORY_MARGIN <= available
    ]
    smallest = min(fitting, key=lambda d: sizes.memory_bytes[d]) if fitting else None
    raise MmforgeError(
        f"Converting to {dtype} needs about {human_bytes(need)} of memory and "
        f"{human_bytes(available)} is available",
        f"Use --dtype {smallest}, which needs about {human_bytes(_memory_needed(sizes, smallest))}"
        if smallest
        else "No dtype fits: close other programs or use a machine with more memory",
    )


def _check_disk_space(out: Path, estimate: int) -> None:
    """Refuse before any work when the package cannot fit on OUT's disk (inspect's estimate)."""
    existing = next(p for p in [out, *out.parents] if p.exists())
    free = shutil.disk_usage(existing).free
    need = int(estimate * DISK_MARGIN) + DISK_SLACK_BYTES
    if estimate and free < need:
        raise MmforgeError(
            f"Not enough free disk space for the package: it needs about {human_bytes(need)} "
            f"and {human_bytes(free)} is free at {existing}",
            "Free some space, choose a folder on another disk, or a smaller --dtype (int4)",
        )


def _make_parents(out: Path) -> list[Path]:
    """Create OUT's missing parent folders; the ones created, outermost first."""
    missing = [p for p in reversed(out.parents) if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MmforgeError(
            f"Cannot create the folder {out.parent}: {e.strerror or e}",
            "Choose a folder you can write to",
        ) from None
    return missing


def _identity(out: Path) -> tuple[int, int] | None:
    """What is at OUT (device and inode), or None when nothing is."""
    try:
        st = out.lstat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _changed(out: Path) -> MmforgeError:
    return MmforgeError(
        f"{out} changed while the conversion ran (something else created or replaced it)",
        "Nothing there was overwritten; convert again into a new folder",
    )


def _publish(staging: Path, out: Path, before: tuple[int, int] | None) -> None:
    """Move the finished package into place; an old package is replaced only at the end.

    OUT is checked again here: what the conversion was allowed to replace when it began
    (nothing, an empty folder, or the same mmforge package) must still be what is there.
    A publish interrupted between its two renames is repaired by the next conversion to
    the same OUT (`_recover_interrupted_publish`).
    """
    if _identity(out) != before:
        raise _changed(out)
    check_output(out)
    if before is None:
        try:
            os.rename(staging, out)  # fails if a non-empty folder appeared just now
        except OSError:
            raise _changed(out) from None
        return
    backup = out.parent / f".{out.name}.mmforge-old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.rename(out, backup)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(backup, out)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _recover_interrupted_publish(out: Path) -> None:
    """Repair what a publish killed between its two renames left: the old package aside.

    If OUT is missing, the old package goes back; if the new one made it into place, the
    old one, which was going to be deleted, is.
    """
    for backup in sorted(out.parent.glob(f".{out.name}.mmforge-old-*")):
        parts = backup.name.rsplit(".mmforge-old-", 1)[-1].split("-")
        pid = int(parts[0]) if parts[0].isdigit() else None
        if pid is not None and _alive(pid):
            continue  # a conversion publishing right now
        if not out.exists() and (backup / MANIFEST).is_file():
            os.rename(backup, out)
            log.warning("restored %s, left aside by an interrupted conversion", out)
        else:
            shutil.rmtree(backup, ignore_errors=True)


def _alive(pid: int) -> bool:
    return process_alive(pid)  # os.kill(pid, 0) is Ctrl+C on Windows
