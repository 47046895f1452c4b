"""`mmforge verify`: which stage of a package diverges from Hugging Face, and why.

The debugging seed's method: gather the evidence once (evidence.py: the runtime's
processor output and tokens, then HF's forward passes on the same ids and pixels), then
compare each stage (preprocessing.py, stages.py) and name the first that diverges, with
its likely cause.

Memory: the runtime, the HF model and each ONNX session are loaded one after the other
and released when their part is done, so the peak is about one copy of the model plus
the captured activations.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmforge.backend import families, precisions
from mmforge.backend.attachments import package_intake
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.library import read_manifest
from mmforge.backend.memory import peak_rss_bytes
from mmforge.backend.picture_sizing import Intake, Sizing
from mmforge.backend.runtime import read_genai_config
from mmforge.backend.verify import hf_reference, intake, precision
from mmforge.backend.verify.evidence import (
    PROMPT,
    ReferenceEvidence,
    RuntimeEvidence,
    first_difference,
    gather_reference,
    gather_runtime,
)
from mmforge.backend.verify.parity import (
    APPROXIMATE,
    FAIL,
    PASS,
    Comparison,
    overall,
    tolerance,
)
from mmforge.backend.verify.preprocessing import check as check_preprocessing
from mmforge.backend.verify.report import VerifyReport
from mmforge.backend.verify.rounding import RoundingCost
from mmforge.backend.verify.stages import Setup, graph_stages

log = logging.getLogger(__name__)

CAUSES = {
    "preprocessing": "The runtime's processor prepares the inputs differently from HF",
    "vision_encoder": (
        "The vision encoder computes something else than HF: a vision weight not applied or "
        "wrong, a different projector, or encoder inputs cast away from float32"
    ),
    "audio_encoder": (
        "The audio encoder computes something else than HF: an audio weight not applied or "
        "wrong, or different audio sizes"
    ),
    "embedding": (
        "The embedding graph does not place the features at the placeholder tokens as HF "
        "does, or its text embedding (or scale) differs"
    ),
    "embedding_per_layer": "The per-layer inputs (Gemma 4) differ from HF's",
    "embedding_text_only": "A prompt without attachments does not embed as in HF",
    "decoder_prefill": (
        "The decoder computes different logits from the same embeddings: a decoder weight "
        "not applied or wrong, the wrong attention over image tokens (Gemma's bidirectional "
        "image attention), or the position ids (3-D M-RoPE for Qwen)"
    ),
    "decoder_step": "The decode steps through the cache differ while the prefill matches: the "
    "state carried between steps (the KV cache's layout, the positions, or a linear-attention "
    "layer's convolution or recurrent state wired to the wrong layer)",
    "runtime_config": "genai_config.json lacks or mis-states a field the runtime needs",
    "end_to_end": (
        "Every graph matches on HF's inputs, but the runtime feeds them differently: "
        "compare the runtime's token ids and positions with HF's"
    ),
}


def verify(
    package: Path,
    reference: str,
    ctx: JobContext | None = None,
    *,
    images: Sequence[Path] = (),
    audios: Sequence[Path] = (),
    tokens: int = 32,
    text_only: bool = False,
) -> VerifyReport:
    """Compare a package with its HF reference, stage by stage.

    Args:
        package: The package folder.
        reference: The HF checkpoint: a local folder or a hub id.
        ctx: Progress and cancel.
        images: Images for the prompt (default: the probe image, unless audio is given).
        audios: Audio clips (default: the probe clip, for packages with audio).
        tokens: Greedy tokens for the end-to-end check.
        text_only: A prompt without attachments (no images or audio may be given).

    Raises:
        MmforgeError: A bad package, a reference of another family, unreadable inputs.
    """
    from mmforge.backend.source import check_model_folder, resolve

    ctx = ctx or JobContext()
    if tokens < 1:
        raise MmforgeError("--tokens must be at least 1", "Pass a positive number")
    if text_only and (images or audios):
        raise MmforgeError(
            "--text-only takes no --image or --audio", "Drop the attachments or --text-only"
        )
    genai = read_genai_config(package)
    resolved = resolve(reference, ctx, purpose="convert")
    # A reference assembled from native parts (Family.reference.load) reads a remote-code
    # layout as data and runs none of its code, so it needs no consent.
    # A hub reference comes back without its config (only a local folder's is read while
    # checking it): read it from the fetched folder, or the family is unknown.
    config = resolved.config if resolved.config is not None else check_model_folder(resolved.folder)
    family = families.lookup(config.get("model_type"))
    as_data = family.reference is not None and family.reference.load is not None
    # A package built as an approximation (convert --approximate) is compared with
    # transformers run the same way: the reference takes the same processor settings.
    approximated = bool(read_manifest(package).get("approximation"))
    checkpoint = Checkpoint.read(
        resolved.folder,
        config=config,
        trust_remote_code=as_data,
        approximate=approximated,
        earlier=approximated,
    )
    if checkpoint.tensors is None:  # checked before anything runs: a corrupt file is named
        raise MmforgeError(
            f"{checkpoint.folder} has no safetensors weights to compare against",
            "Pass the checkpoint folder the package was converted from",
        )
    family = checkpoint.family
    model = genai["model"]
    if family.pipeline_type != model.get("type"):
        made_from = str(read_manifest(package).get("family") or "another kind of model")
        raise MmforgeError(
            f"The package was converted from {made_from[:80]}, but the model to compare it "
            f"with is {family.name}",
            "Verify a package against the model it was converted from",
            details=f"package type '{model.get('type')}', reference type '{family.pipeline_type}'",
        )
    with tempfile.TemporaryDirectory(prefix="mmforge-verify-") as scratch:
        recorded = package_intake(package)
        files = ([], []) if text_only else _inputs(model, images, audios, Path(scratch), recorded)
        originals = [] if text_only else _pictures(images, audios)
        return _verify(
            package,
            reference,
            model,
            checkpoint,
            files,
            tokens,
            ctx,
            Path(scratch),
            (tuple(originals), recorded.sizing if recorded is not None else None),
            approximated,
        )


def _verify(
    package: Path,
    reference: str,
    model: dict[str, Any],
    checkpoint: Checkpoint,
    files: tuple[list[Path], list[Path]],
    tokens: int,
    ctx: JobContext,
    scratch: Path,
    given: tuple[tuple[Path, ...], Sizing | None] = ((), None),
    approximated: bool = False,
) -> VerifyReport:
    images, audios = files
    dtype = _package_dtype(package)
    tol = tolerance(dtype, int(model["decoder"].get("num_hidden_layers", 0)))
    setup = Setup(
        package=package,
        model=model,
        checkpoint=checkpoint,
        tol=tol,
        # int4 and int8 quantize the decoder and the token table: the encoders stay f32,
        # or f16 where the probe run found it safe (the manifest says which).
        tol_encoders=precision.encoder_tolerance(package, tolerance("f32"))
        if not tol.elementwise
        else tol,
        n_images=len(images),
        n_audios=len(audios),
        pictures=given[0],
        sizing=given[1],
    )
    quantized = precisions.is_quantized(dtype)
    rounded = precision.prepare(setup, scratch, dtype) if quantized else None
    verification = _Verification(setup, reference, dtype, tokens, ctx, rounded, approximated)
    return verification.run(images, audios)


def _pictures(images: Sequence[Path], audios: Sequence[Path]) -> list[Path]:
    """The picture files as the user gave them (else the probe image), for the reference."""
    from mmforge import resources

    # Audio without an image is an audio-only prompt (Phi-4 runs its speech LoRA then).
    return [Path(p) for p in images] or ([] if audios else [resources.probe_image()])


def _inputs(
    model: dict[str, Any],
    images: Sequence[Path],
    audios: Sequence[Path],
    scratch: Path,
    recorded: Intake | None,
) -> tuple[list[Path], list[Path]]:
    """The prompt's files, checked and prepared as chat prepares them, before any model loads.

    The user's files (else the probe image, and the probe clip for a package with audio)
    are prepared as chat prepares them, copies in `scratch`: a file that is not an image,
    a truncated one, an empty or too short clip is refused here with one clear message,
    where it could otherwise end the process inside the runtime. The runtime gets these
    copies, as in chat; the reference reads the user's own files.
    """
    from mmforge import resources
    from mmforge.backend.attachments import AUDIO, IMAGE, prepare

    has_audio = "filename" in model.get("speech", {})  # a package without audio clears speech
    chosen = _pictures(images, audios)
    clips = list(audios) if audios else ([resources.probe_audio()] if has_audio else [])
    if clips and not has_audio:
        raise MmforgeError(
            "This package's model takes no audio",
            "Verify it without the audio file (on the command line, without --audio)",
        )
    prepared = [prepare(Path(p), IMAGE, scratch / "images", recorded).path for p in chosen]
    return prepared, [prepare(Path(p), AUDIO, scratch / "audio").path for p in clips]


class _Verification:
    """One verification: the phases in order, each timed, and the report."""

    def __init__(
        self,
        setup: Setup,
        reference: str,
        dtype: str,
        tokens: int,
        ctx: JobContext,
        rounded: precision.Rounded | None = None,
        approximated: bool = False,
    ):
        self.setup = setup
        self.rounded = rounded
        self.cost: RoundingCost | None = None
        self.reference = reference
        self.dtype = dtype
        self.n_tokens = tokens
        self.ctx = ctx
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self.approximated = approximated  # the package's manifest records an approximation

    def _phase(self, name: str, step: int, message: str) -> Any:
        self.ctx.report("verify", step, 4, message=message, force=True)
        return _Timer(self.timings, name)

    def run(self, images: list[Path], audios: list[Path]) -> VerifyReport:
        setup, n_tokens, rounded = self.setup, self.n_tokens, self.rounded
        messages = hf_reference.messages_for(PROMPT, len(images), len(audios))
        real: RuntimeEvidence | None = None
        with self._phase("runtime", 0, "running the package in ONNX Runtime GenAI"):
            if rounded is not None:
                # The package as the user runs it, for the tokens its arithmetic gives.
                real = gather_runtime(setup.package, messages, images, audios, n_tokens, self.ctx)
                setup = rounded.exact
            rt = gather_runtime(setup.package, messages, images, audios, n_tokens, self.ctx)
        tokenizer = hf_reference.load_tokenizer(setup.checkpoint)
        if rt.processor_error is not None:
            self.notes.append("No later stage ran: they all need the runtime's processor output.")
            stage, cause = _processor_failed(setup, rt, messages, tokenizer)
            return self._report([stage], rt, None, cause)
        with self._phase("reference", 1, "running the Hugging Face reference"):
            files = (list(setup.pictures) or images, audios)
            adjust = rounded.adjust if rounded is not None else None
            ref = gather_reference(
                setup.checkpoint, rt, messages, files, tokenizer, n_tokens, self.ctx, adjust
            )
        if rounded is not None and real is not None:
            if rounded.wrong:
                self.notes.append(
                    f"{self.dtype}: {len(rounded.wrong)} package weight(s) are not the rounding "
                    f"of the checkpoint tensor they were made from: {', '.join(rounded.wrong[:5])}"
                )
            if rounded.error is None:
                self.notes.append(
                    f"{self.dtype}: the reference holds the package's own rounded weights "
                    f"({rounded.weights} matrices) and the package ran with exact float32 "
                    "arithmetic, so any difference is the conversion's"
                )
            else:  # judged as the user runs it, with the quantized bounds
                self.notes.append(f"{self.dtype}: no rounded reference ({rounded.error})")
                setup, rt, self.rounded = self.setup, real, None
                ref = gather_reference(
                    setup.checkpoint, rt, messages, files, tokenizer, n_tokens, self.ctx
                )
        self.setup = setup
        if ref.error is not None:
            self.notes.append("The graph stages did not run: they need HF's view of the inputs.")
            return self._report(self._reference_failed(rt, ref, tokenizer), rt, ref)
        with self._phase("stages", 2, "running each ONNX graph on the reference's inputs"):
            preprocessing, note = check_preprocessing(setup, rt, ref, tokenizer)
            for line in (note, intake.raw_file_note(setup)):
                if line:
                    self.notes.append(line)
            self.ctx.check_cancel()
            components = [preprocessing, *graph_stages(setup, rt, ref, self.ctx)]
        if self.rounded is not None and real is not None:
            message = f"measuring what {self.dtype} rounding itself changes"
            with self._phase("rounding", 3, message):
                rounded = self.rounded
                self.cost = precision.cost(
                    rounded.dtype,
                    lambda model: rounded.round_into(model)[0],
                    setup.checkpoint,
                    rt,
                    ref,
                    real.tokens,
                    n_tokens,
                )
        elif self.dtype == "f16":
            # f16 arithmetic cannot be held by the reference (the stages use f16's bounds),
            # but what rounding the weights to f16 changes can be measured.
            with self._phase("rounding", 3, "measuring what f16 weights themselves change"):
                self.cost = precision.cost(
                    "f16", precision.round_to_f16, setup.checkpoint, rt, ref, rt.tokens, n_tokens
                )
        self.ctx.report("verify", 4, 4, message="done", force=True)
        return self._report(components, rt, ref)

    def _reference_failed(
        self, rt: RuntimeEvidence, ref: ReferenceEvidence, tokenizer: Any
    ) -> list[Comparison]:
        """HF cannot run on the runtime's processor output: preprocessing, and why no more."""
        reason = f"HF cannot run on the runtime's processor output ({ref.error})"
        if rt.generation_error is not None:
            reason += f"; the runtime itself fails too: {rt.generation_error}"
        preprocessing, note = check_preprocessing(self.setup, rt, ref, tokenizer)
        if note:
            self.notes.append(note)
        return [preprocessing, Comparison("end_to_end", FAIL, None, 0.0, False, reason, [], [])]

    def _report(
        self,
        components: list[Comparison],
        rt: RuntimeEvidence,
        ref: ReferenceEvidence | None,
        cause: str | None = None,
    ) -> VerifyReport:
        """The report from the stages that ran; the cause of the first divergence unless given."""
        verdict, first = overall(components)
        if first is not None and cause is None:
            # With a rounded reference a difference is the conversion's, as for f32.
            judged = self.dtype if self.rounded is None else "f32"
            cause = diagnose(next(c for c in components if c.name == first), judged)
            if self.rounded is not None and self.rounded.wrong and first.startswith("decoder"):
                cause = (
                    f"The {self.dtype} package's weight {self.rounded.wrong[0]} is not the "
                    "rounding of the checkpoint tensor it was made from: the quantization "
                    f"wrote wrong blocks or scales, a conversion fault ({cause})"
                )
        limit = _known_limit(self.setup)
        if limit is not None and verdict != PASS:
            cause = f"{limit}. {cause}" if cause else limit
        checkpoint = self.setup.checkpoint
        approximation = self._approximation()
        if approximation is not None and verdict == PASS:
            verdict = APPROXIMATE
        if approximation is not None:
            overrides = checkpoint.image_processor_overrides.items()
            settings = ", ".join(f"{k}={v}" for k, v in overrides)
            self.notes.append(
                "Every stage compares with transformers run as the package was built "
                f"({settings or 'the reference as it is'}): a stage's PASS is against that, "
                "not the model as released"
            )
        weights = sum(p.stat().st_size for p in checkpoint.folder.glob("*.safetensors"))
        return VerifyReport(
            verdict=verdict,
            first_divergent_stage=first,
            cause=cause,
            components=components,
            tokens=_token_summary(rt, ref, self.n_tokens),
            family=checkpoint.family.name,
            dtype=self.dtype,
            package=str(self.setup.package),
            reference=self.reference,
            peak_rss_bytes=peak_rss_bytes(),
            checkpoint_bytes=weights,
            timings_s=self.timings,
            notes=self.notes,
            rounding=self.cost,
            approximation=approximation,
        )

    def _approximation(self) -> str | None:
        """What the package's approximation changes, in words (None: an exact package).

        The reference family's own words; a package whose manifest records an
        approximation its reference family does not have is still never a PASS.
        """
        accepted = self.setup.checkpoint.approximation
        if accepted is not None:
            return accepted.what
        if self.approximated:
            return (
                "the package's manifest records an approximation, which this reference's "
                "family does not have; the comparison used the reference as it is"
            )
        return None


class _Timer:
    """Times a block into a timings dict."""

    def __init__(self, timings: dict[str, float], name: str):
        self.timings, self.name = timings, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = round(time.perf_counter() - self.start, 3)


def _known_limit(setup: Setup) -> str | None:
    """The family's named difference from the released model for this prompt, if any."""
    reference = setup.checkpoint.family.reference
    if reference is None or reference.known_limit is None:
        return None
    return reference.known_limit(
        families.LimitRequest(setup.checkpoint, setup.n_images, setup.n_audios)
    )


def _processor_failed(
    setup: Setup, rt: RuntimeEvidence, messages: list[dict[str, Any]], tokenizer: Any
) -> tuple[Comparison, str]:
    """The runtime's processor rejected the prompt: the one stage, and why.

    The checkpoint's template gets the messages in the content form it takes: a released
    template that takes text only (Phi-4-multimodal's) fails in transformers on a list.
    """
    # A checkpoint without a template (its processor writes the prompt) has no markers to miss.
    hf_prompt = hf_reference.template_prompt(setup.checkpoint, messages, tokenizer) or ""
    strings = setup.checkpoint.family.profile.runtime_token_strings
    missing = [s for s in strings if s in hf_prompt and s not in rt.prompt]
    reason = f"the runtime's processor rejects the prompt: {rt.processor_error}"
    cause = reason
    if missing:
        cause = (
            f"boundary markers missing from the package's chat template: {', '.join(missing)} "
            "(the checkpoint's template writes them and the runtime's processor looks for "
            f"them). Runtime message: {rt.processor_error}"
        )
    return Comparison("preprocessing", FAIL, None, 0.0, None, reason, [], []), cause


def _token_summary(
    rt: RuntimeEvidence, ref: ReferenceEvidence | None, n_tokens: int
) -> dict[str, Any]:
    """Matched-prefix length and both token lists."""
    if ref is None or not ref.tokens:  # the end-to-end check did not run
        return {"matched": 0, "total": n_tokens, "runtime": [], "reference": []}
    k = first_difference(ref.tokens, rt.tokens)
    return {
        "matched": len(ref.tokens) if k is None else k,
        "total": len(ref.tokens),
        "runtime": rt.tokens,
        "reference": ref.tokens,
    }


def diagnose(stage: Comparison, dtype: str = "f32") -> str:
    """The likely cause of a stage's divergence, in words a user can act on."""
    if precisions.is_quantized(dtype) and stage.name in (
        "decoder_prefill",
        "decoder_step",
        "end_to_end",
    ):
        # Only the decoder is quantized: its 4-bit weights move the logits, most of all on
        # small or random models, so the first suspect is the quantization, not a bug.
        return (
            f"{dtype} quantization of the decoder's weights changes its logits beyond what "
            "rounding explains; convert in f32 and verify that package to tell a "
            f"quantization loss from a conversion fault ({stage.reason})"
        )
    if stage.name == "preprocessing" or stage.name == "runtime_config":
        detail = stage.reason
        if "vision_start_token_id" in detail:
            return (
                f"{detail}. Without it the runtime silently uses 1-D positions instead of "
                "3-D M-RoPE; add the field to genai_config.json (or convert again)"
            )
        return detail
    cause = CAUSES.get(stage.name, "")
    if stage.name == "vision_encoder" and "token count" in stage.reason:
        return stage.reason
    return f"{cause} ({stage.reason})"


def _package_dtype(package: Path) -> str:
    return str(read_manifest(package).get("dtype", "f32"))
