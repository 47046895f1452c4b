"""`mmforge verify`: which stage of a package diverges from Hugging Face, and why.

The debugging seed's method, stage by stage, each stage fed the *reference's* inputs so
that an error upstream cannot be blamed on a stage downstream:

1. preprocessing: the runtime's processor against the HF processor (placeholder and
   boundary tokens, pixels with their channel order, audio features);
2. vision encoder: the package's vision graph on the runtime's pixels against the HF
   features that land at the image token positions;
3. audio encoder: the same for audio;
4. embedding: the package's embedding graph on the HF features and ids against HF's
   merged embeddings; and on a text-only prompt with no features;
5. decoder: prefill logits on HF's embeddings, attention mask and position ids (3-D for
   Qwen), then one decode step through the KV cache;
6. runtime config: the genai_config fields the runtime needs to wire the graphs together;
7. end to end: the runtime's N greedy tokens against HF generate from the same ids and
   pixels.

Memory: the runtime, the HF model and each ONNX session are loaded one after the other
and released when their part is done, so the peak is about one copy of the model plus
the captured activations.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend import families, hf_reference
from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.memory import peak_rss_bytes
from mmforge.backend.parity import (
    AMBIGUOUS,
    FAIL,
    PASS,
    Comparison,
    Tolerance,
    compare,
    compare_ids,
    overall,
    tolerance,
)
from mmforge.backend.runtime import read_genai_config
from mmforge.backend.source import read_json

log = logging.getLogger(__name__)

PROMPT = "Describe this."
TEXT_PROMPT = "Hello there, how are you?"

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
    "decoder_step": "The decode step through the KV cache differs (cache layout or positions)",
    "runtime_config": "genai_config.json lacks or mis-states a field the runtime needs",
    "end_to_end": (
        "Every graph matches on HF's inputs, but the runtime feeds them differently: "
        "compare the runtime's token ids and positions with HF's"
    ),
}


@dataclass
class VerifyReport:
    """The result of `verify`.

    Attributes:
        verdict: PASS, AMBIGUOUS or FAIL.
        first_divergent_stage: The first FAIL stage (else the first AMBIGUOUS one).
        cause: The likely cause of that stage's divergence, in plain words.
        components: Each stage's comparison, in check order.
        tokens: {"matched", "total", "runtime", "reference"} for the end-to-end check.
        family: The family name.
        dtype: The package's dtype.
        package: The package folder.
        reference: The reference source.
        peak_rss_bytes: Peak resident memory of the process.
        checkpoint_bytes: Size of the reference's weights on disk.
        timings_s: Seconds per phase.
        notes: Documented differences that apply here.
    """

    verdict: str
    first_divergent_stage: str | None
    cause: str | None
    components: list[Comparison]
    tokens: dict[str, Any]
    family: str
    dtype: str
    package: str
    reference: str
    peak_rss_bytes: int = 0
    checkpoint_bytes: int = 0
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the contract's keys first)."""
        return {
            "verdict": self.verdict,
            "first_divergent_stage": self.first_divergent_stage,
            "cause": self.cause,
            "components": [c.to_dict() for c in self.components],
            "tokens": self.tokens,
            "family": self.family,
            "dtype": self.dtype,
            "package": self.package,
            "reference": self.reference,
            "peak_rss_bytes": self.peak_rss_bytes,
            "checkpoint_bytes": self.checkpoint_bytes,
            "timings_s": self.timings_s,
            "notes": self.notes,
        }


def verify(
    package: Path,
    reference: str,
    ctx: JobContext | None = None,
    *,
    images: Sequence[Path] = (),
    audios: Sequence[Path] = (),
    tokens: int = 32,
) -> VerifyReport:
    """Compare a package with its HF reference, stage by stage.

    Args:
        package: The package folder.
        reference: The HF checkpoint: a local folder or a hub id.
        ctx: Progress and cancel.
        images: Images for the prompt (default: the probe image).
        audios: Audio clips (default: the probe clip, for packages with audio).
        tokens: Greedy tokens for the end-to-end check.

    Raises:
        MmforgeError: A bad package, a reference of another family, unreadable inputs.
    """
    from mmforge import resources
    from mmforge.backend.source import resolve

    ctx = ctx or JobContext()
    if tokens < 1:
        raise MmforgeError("--tokens must be at least 1", "Pass a positive number")
    genai = read_genai_config(package)
    resolved = resolve(reference, ctx, purpose="convert")
    ref_config = read_json(resolved.folder / "config.json", "reference model")
    family = families.lookup(ref_config.get("model_type"))
    if family.pipeline_type != genai["model"].get("type"):
        raise MmforgeError(
            f"The package is a '{genai['model'].get('type')}' package but the reference is "
            f"{family.name} ('{family.pipeline_type}')",
            "Verify a package against the checkpoint it was converted from",
        )
    model_cfg = genai["model"]
    has_audio = "speech" in model_cfg
    images = list(images) or [resources.probe_image()]
    audios = list(audios) if audios else ([resources.probe_audio()] if has_audio else [])
    if audios and not has_audio:
        raise MmforgeError(
            "This package has no audio encoder", "Verify it with images only (drop --audio)"
        )
    for path in [*images, *audios]:
        if not Path(path).is_file():
            raise MmforgeError(f"No such file: {path}", "Check the path")
    dtype = _package_dtype(package)
    layers = int(model_cfg["decoder"].get("num_hidden_layers", 0))
    tol = tolerance(dtype, layers)
    run = _Run(package, resolved.folder, genai, family, tol, images, audios, tokens, ctx)
    timings: dict[str, float] = {}

    def phase(name: str, step: int, message: str, work: Any) -> None:
        start = time.perf_counter()
        ctx.report("verify", step, 4, message=message, force=True)
        work()
        timings[name] = round(time.perf_counter() - start, 3)

    phase("runtime", 0, "running the package in ONNX Runtime GenAI", run.runtime_pass)
    if run.processor_error is not None:
        components, cause = _processor_failed(run)
        run.notes.append("No later stage ran: they all need the runtime's processor output.")
        return _report(run, reference, dtype, components, timings, cause)
    phase("reference", 1, "running the Hugging Face reference", run.reference_pass)
    if run.reference_error is not None:
        run.notes.append("The graph stages did not run: they need HF's view of the inputs.")
        return _report(run, reference, dtype, _reference_failed(run), timings)
    phase("stages", 2, "running each ONNX graph on the reference's inputs", run.stages_pass)
    ctx.report("verify", 4, 4, message="done", force=True)
    return _report(run, reference, dtype, run.components, timings)


def _report(
    run: _Run,
    reference: str,
    dtype: str,
    components: list[Comparison],
    timings: dict[str, float],
    cause: str | None = None,
) -> VerifyReport:
    """The report from the stages that ran; the cause of the first divergence unless given."""
    verdict, first = overall(components)
    if first is not None and cause is None:
        cause = run.diagnose(next(c for c in components if c.name == first))
    weights = sum(p.stat().st_size for p in run.ref_folder.glob("*.safetensors"))
    return VerifyReport(
        verdict=verdict,
        first_divergent_stage=first,
        cause=cause,
        components=components,
        tokens=run.token_summary(),
        family=run.family.name,
        dtype=dtype,
        package=str(run.package),
        reference=reference,
        peak_rss_bytes=peak_rss_bytes(),
        checkpoint_bytes=weights,
        timings_s=timings,
        notes=run.notes,
    )


def _processor_failed(run: _Run) -> tuple[list[Comparison], str]:
    """The runtime's processor rejected the prompt: the one stage, and why."""
    tokenizer = hf_reference.load_tokenizer(run.ref_folder)
    hf_prompt = tokenizer.apply_chat_template(
        run.messages, add_generation_prompt=True, tokenize=False
    )
    missing = [
        s for s in run.family.runtime_token_strings if s in hf_prompt and s not in run.prompt
    ]
    reason = f"the runtime's processor rejects the prompt: {run.processor_error}"
    cause = reason
    if missing:
        cause = (
            f"boundary markers missing from the package's chat template: {', '.join(missing)} "
            "(the checkpoint's template writes them and the runtime's processor looks for "
            f"them). Runtime message: {run.processor_error}"
        )
    return [Comparison("preprocessing", FAIL, None, 0.0, None, reason, [], [])], cause


def _reference_failed(run: _Run) -> list[Comparison]:
    """HF cannot run on the runtime's processor output: preprocessing, and why no more."""
    from mmforge.backend import preprocess_parity

    reason = f"HF cannot run on the runtime's processor output ({run.reference_error})"
    if run.runtime_error is not None:
        reason += f"; the runtime itself fails too: {run.runtime_error}"
    return [
        preprocess_parity.check(run),
        Comparison("end_to_end", FAIL, None, 0.0, False, reason, [], []),
    ]


def _package_dtype(package: Path) -> str:
    try:
        manifest = json.loads((package / "mmforge_manifest.json").read_text(encoding="utf-8"))
        return str(manifest.get("dtype", "f32"))
    except (OSError, ValueError):
        return "f32"


class _Capture:
    """Hooks on the HF text model: its merged input embeddings, position ids and extras."""

    def __init__(self, model: Any):
        text = next(
            (
                m
                for _, m in model.named_modules()
                if hasattr(m, "embed_tokens") and hasattr(m, "layers")
            ),
            None,
        )
        if text is None:
            raise MmforgeError(
                "Cannot find the text model inside the reference", "Please report the model id"
            )
        self.kwargs: dict[str, Any] = {}
        self.hidden: Any = None
        self.per_layer: list[Any] = []
        self._handles = [
            text.register_forward_pre_hook(self._on_text, with_kwargs=True),
            text.layers[0].register_forward_pre_hook(self._on_layer0, with_kwargs=True),
        ]
        self._handles += [
            layer.register_forward_pre_hook(self._on_layer, with_kwargs=True)
            for layer in text.layers
        ]

    def _on_text(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self.per_layer = []

    def _on_layer0(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        self.hidden = hidden.detach().float().numpy().copy()

    def _on_layer(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        # Gemma 4 hands each layer its slice of the (projected) per-layer inputs.
        value = kwargs.get("per_layer_input", args[1] if len(args) > 1 else None)
        if value is not None and hasattr(value, "detach"):
            self.per_layer.append(value.detach().float().numpy())

    def close(self) -> None:
        for h in self._handles:
            h.remove()


@dataclass
class _Forward:
    """One HF forward pass, as the stages need it (numpy arrays)."""

    logits: Any
    hidden: Any
    position_ids: Any | None
    deepstack: list[Any]
    per_layer: Any | None


class _Run:
    """The state shared by the stages of one verification."""

    def __init__(
        self,
        package: Path,
        ref_folder: Path,
        genai: dict[str, Any],
        family: families.Family,
        tol: Tolerance,
        images: list[Path],
        audios: list[Path],
        n_tokens: int,
        ctx: JobContext,
    ):
        self.package = package
        self.ref_folder = ref_folder
        self.genai = genai
        self.cfg = genai["model"]
        self.family = family
        self.tol = tol
        # int4 quantizes the decoder only: encoders and embedding stay float32.
        self.tol_encoders = tolerance("f32") if not tol.elementwise else tol
        self.images = images
        self.audios = audios
        self.n_tokens = n_tokens
        self.ctx = ctx
        self.notes: list[str] = []
        self.messages = hf_reference.messages_for(PROMPT, len(images), len(audios))
        self.image_token = self.cfg.get("image_token_id")
        self.runtime_error: str | None = None
        self.reference_error: str | None = None
        self.runtime_tokens: list[int] = []
        self.hf_tokens: list[int] = []
        self.components: list[Comparison] = []
        self.audio_token = self.cfg.get("audio_token_id")

    # -- the runtime ---------------------------------------------------------------------

    def runtime_pass(self) -> None:
        from mmforge.backend.runtime import Runtime

        try:
            rt = Runtime(self.package)
        except RuntimeError as e:
            raise MmforgeError(
                f"ONNX Runtime GenAI could not load {self.package}",
                "Convert the model again",
                details=str(e),
            ) from None
        self.processor_error: str | None = None
        try:
            self.prompt = rt.prompt(self.messages)
            try:
                inputs = rt.process(self.prompt, self.images, self.audios)
            except RuntimeError as e:
                self.processor_error = str(e)
                return
            self.arrays = {k: v.copy() for k, v in inputs.arrays.items()}
            self.ids = inputs.input_ids
            try:
                self.runtime_tokens = rt.greedy(inputs, self.n_tokens)
            except RuntimeError as e:  # the stages can still run on the processor output
                self.runtime_error = str(e)
                self.runtime_tokens = []
            text = rt.process(rt.prompt([{"role": "user", "content": TEXT_PROMPT}]))
            self.text_ids = text.input_ids
        except RuntimeError as e:
            raise MmforgeError(
                "ONNX Runtime GenAI failed on the verification prompt",
                "The package is broken; convert it again",
                details=str(e),
            ) from None
        finally:
            del rt
            gc.collect()
        self.ctx.check_cancel()

    # -- the reference -------------------------------------------------------------------

    def reference_pass(self) -> None:
        import numpy as np
        import soundfile as sf
        import torch
        from PIL import Image

        model = hf_reference.load_model(self.ref_folder)
        pil = [Image.open(p).convert("RGB") for p in self.images]
        clips = [sf.read(str(p), dtype="float32") for p in self.audios]
        self.hf_pre = hf_reference.prepare(self.ref_folder, self.messages, pil, clips)
        self.pil = pil
        capture = _Capture(model)
        try:
            try:
                ref = hf_reference.from_runtime(self.ref_folder, self.prompt, self.arrays)
                self.main = self._forward(model, capture, ref.tensors)
            except (RuntimeError, ValueError, IndexError) as e:
                # The runtime's processor output is not even self-consistent (e.g. image
                # sizes that do not match the pixels): nothing later can be compared.
                self.reference_error = f"{type(e).__name__}: {e}"
                return
            self.next_token = int(np.argmax(self.main.logits[-1]))
            longer = dict(self.arrays)
            longer["input_ids"] = np.asarray([[*self.ids, self.next_token]], dtype=np.int64)
            ref2 = hf_reference.from_runtime(self.ref_folder, self.prompt, longer)
            self.step = self._forward(model, capture, ref2.tensors)
            ids = torch.tensor([self.text_ids])
            self.text = self._forward(
                model, capture, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            )
            self.ctx.check_cancel()
            self.hf_tokens = hf_reference.greedy_generate(model, ref, self.n_tokens)
            self.near_tie: tuple[int, float, float] | None = None
            k = _first_difference(self.hf_tokens, self.runtime_tokens)
            if k is not None and k < len(self.runtime_tokens) and k < len(self.hf_tokens):
                prefix = dict(self.arrays)
                prefix["input_ids"] = np.asarray([[*self.ids, *self.hf_tokens[:k]]], np.int64)
                ref3 = hf_reference.from_runtime(self.ref_folder, self.prompt, prefix)
                row = self._forward(model, capture, ref3.tensors).logits[-1]
                self.near_tie = (
                    k,
                    float(row[self.hf_tokens[k]]),
                    float(row[self.runtime_tokens[k]]),
                )
        finally:
            capture.close()
            del model
            gc.collect()
        self.ctx.check_cancel()

    def _forward(self, model: Any, capture: _Capture, tensors: dict[str, Any]) -> _Forward:
        import numpy as np
        import torch

        with torch.no_grad():
            out = model(**tensors)
        kw = capture.kwargs
        pos = kw.get("position_ids")
        deepstack = [d.detach().float().numpy() for d in (kw.get("deepstack_visual_embeds") or [])]
        per_layer = None
        if capture.per_layer:  # [1, S, layers, size], as the decoder graph takes it
            per_layer = np.stack(capture.per_layer, axis=2)
        return _Forward(
            logits=out.logits[0].float().numpy(),
            hidden=capture.hidden,
            position_ids=None if pos is None else pos.detach().numpy(),
            deepstack=deepstack,
            per_layer=per_layer,
        )

    # -- the stages ----------------------------------------------------------------------

    def stages_pass(self) -> None:
        """Every stage, in check order, into `components`."""
        self.components = self._stages()

    def _stages(self) -> list[Comparison]:
        from mmforge.backend import preprocess_parity

        out = [preprocess_parity.check(self)]
        self.ctx.check_cancel()
        self.vision_features = None
        if self.images and "vision" in self.cfg:
            out.extend(_guarded(["vision_encoder"], self._encoder, "vision", self.image_token))
        self.audio_features = None
        if self.audios and "speech" in self.cfg:
            out.extend(_guarded(["audio_encoder"], self._encoder, "speech", self.audio_token))
        self.ctx.report("verify", 2.5, 4, message="embedding and decoder graphs")
        out.extend(_guarded(["embedding"], self._embedding))
        out.extend(_guarded(["decoder_prefill", "decoder_step"], self._decoder))
        out.append(self._runtime_config())
        out.append(self._end_to_end())
        return out

    def _session(self, section: str) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4  # failures come back as stage verdicts
        path = self.package / self.cfg[section]["filename"]
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _hf_rows(self, token: int | None) -> Any:
        import numpy as np

        mask = np.asarray(self.ids) == token
        rows = self.main.hidden[0][mask]
        if token == self.image_token and self.main.deepstack:
            rows = np.concatenate([rows, *self.main.deepstack], axis=-1)
        return rows

    def _encoder(self, section: str, token: int | None) -> Comparison:
        stage = "vision_encoder" if section == "vision" else "audio_encoder"
        session = self._session(section)
        try:
            prefix = "image" if section == "vision" else "audio"
            feeds = _feeds(session, self.cfg[section].get("inputs", {}), self.arrays, prefix)
            outputs = _run_per_item(session, feeds)
        finally:
            del session
        features = outputs[0]
        rows = features.reshape(-1, features.shape[-1])
        reference = self._hf_rows(token)
        if section == "vision":
            self.vision_features = features
        else:
            self.audio_features = features
        if rows.shape[0] != reference.shape[0]:
            what = "image" if section == "vision" else "audio"
            return Comparison(
                stage,
                FAIL,
                None,
                0.0,
                None,
                f"{rows.shape[0]} {what} features for {reference.shape[0]} {what} tokens in "
                "the prompt (image token count mismatch)",
                [],
                [],
            )
        return compare(stage, reference, rows, self.tol_encoders)

    def _features_like(self, spec: Any, onnx_features: Any, token: int | None) -> Any:
        """HF's features at the placeholder positions, shaped for the embedding input.

        Rows where the input is 2-D; the encoder output's layout where its rank is open.
        """
        reference = self._hf_rows(token)
        if len(spec.shape) == 2 or onnx_features is None:
            return reference
        if reference.size == onnx_features.size:
            return reference.reshape(onnx_features.shape)
        return reference

    def _embedding(self) -> list[Comparison]:
        import numpy as np

        session = self._session("embedding")
        try:
            specs = {i.name: i for i in session.get_inputs()}
            feeds: dict[str, Any] = {"input_ids": np.asarray([self.ids], dtype=np.int64)}
            if "image_features" in specs and self.vision_features is not None:
                feeds["image_features"] = self._features_like(
                    specs["image_features"], self.vision_features, self.image_token
                )
            if "audio_features" in specs and self.audio_features is not None:
                feeds["audio_features"] = self._features_like(
                    specs["audio_features"], self.audio_features, self.audio_token
                )
            feeds = _cast(session, _fill_empty(session, feeds))
            outs = dict(
                zip(
                    [o.name for o in session.get_outputs()], _run(session, None, feeds), strict=True
                )
            )
            expected = self._merged(self.main, np.asarray(self.ids))
            tol = self.tol_encoders
            result = [compare("embedding", expected, outs["inputs_embeds"][0], tol)]
            if "per_layer_inputs" in outs and self.main.per_layer is not None:
                result.append(
                    compare(
                        "embedding_per_layer",
                        self.main.per_layer.reshape(outs["per_layer_inputs"].shape),
                        outs["per_layer_inputs"],
                        tol,
                    )
                )
            text_feeds = _cast(
                session,
                _fill_empty(session, {"input_ids": np.asarray([self.text_ids], dtype=np.int64)}),
            )
            text_out = _run(session, ["inputs_embeds"], text_feeds)[0]
            result.append(
                compare(
                    "embedding_text_only",
                    self._merged(self.text, np.asarray(self.text_ids)),
                    text_out[0],
                    tol,
                )
            )
        finally:
            del session
        self.embedding_outputs = outs
        return result

    def _merged(self, forward: _Forward, ids: Any) -> Any:
        """HF's decoder input embeddings (with Qwen3-VL's DeepStack columns)."""
        import numpy as np

        hidden = forward.hidden[0]
        if not forward.deepstack:
            width = self._embedding_width()
            if width > hidden.shape[-1]:  # DeepStack columns are zero at text positions
                pad = np.zeros((hidden.shape[0], width - hidden.shape[-1]), hidden.dtype)
                return np.concatenate([hidden, pad], axis=-1)
            return hidden
        extra = np.zeros(
            (hidden.shape[0], sum(d.shape[-1] for d in forward.deepstack)), hidden.dtype
        )
        extra[ids[: hidden.shape[0]] == self.image_token] = np.concatenate(
            forward.deepstack, axis=-1
        )
        return np.concatenate([hidden, extra], axis=-1)

    def _embedding_width(self) -> int:
        return int(self.cfg["decoder"].get("hidden_size", 0))

    def _decoder(self) -> list[Comparison]:
        import numpy as np

        session = self._session("decoder")
        try:
            inputs = {i.name: i for i in session.get_inputs()}
            seq = len(self.ids)
            feeds: dict[str, Any] = {
                "inputs_embeds": self._merged(self.main, np.asarray(self.ids))[None],
                "attention_mask": np.ones((1, seq), dtype=np.int64),
            }
            if "position_ids" in inputs:
                feeds["position_ids"] = _positions(
                    self.main.position_ids, 0, seq, inputs["position_ids"]
                )
            if "input_ids" in inputs:
                feeds["input_ids"] = np.asarray([self.ids], dtype=np.int64)
            if "per_layer_inputs" in inputs and self.main.per_layer is not None:
                feeds["per_layer_inputs"] = self.main.per_layer.reshape(1, seq, -1)
            feeds.update(_empty_past(inputs, int(self.cfg["decoder"].get("head_size", 0))))
            names = [o.name for o in session.get_outputs()]
            outs = dict(zip(names, _run(session, None, _cast(session, feeds)), strict=True))
            prefill = compare(
                "decoder_prefill", self.main.logits, outs["logits"][0], self.tol, logits=True
            )
            # One decode step through the cache, on the token HF picks next.
            step_hidden = self._merged(self.step, np.asarray([*self.ids, self.next_token]))
            feeds = {
                "inputs_embeds": step_hidden[None, -1:],
                "attention_mask": np.ones((1, seq + 1), dtype=np.int64),
            }
            if "position_ids" in inputs:
                feeds["position_ids"] = _positions(
                    self.step.position_ids, seq, seq + 1, inputs["position_ids"]
                )
            if "input_ids" in inputs:
                feeds["input_ids"] = np.asarray([[self.next_token]], dtype=np.int64)
            if "per_layer_inputs" in inputs and self.step.per_layer is not None:
                feeds["per_layer_inputs"] = self.step.per_layer.reshape(1, seq + 1, -1)[:, -1:]
            for name in inputs:
                if name.startswith("past_key_values."):
                    feeds[name] = outs[name.replace("past_key_values.", "present.")]
                elif name.startswith("past.") and name.endswith(".conv"):
                    feeds[name] = outs["present." + name[len("past.") :]]
            logits = _run(session, ["logits"], _cast(session, feeds))[0]
            step = compare(
                "decoder_step", self.step.logits[-1:], logits[0, -1:], self.tol, logits=True
            )
        finally:
            del session
        # The decoder's measured error: what rounding alone can move a logit by.
        self.decoder_error = max(prefill.max_abs_diff or 0.0, step.max_abs_diff or 0.0)
        return [prefill, step]

    def _runtime_config(self) -> Comparison:
        ref = families.Cfg(read_json(self.ref_folder / "config.json", "reference model"))
        problems = []
        wanted = {"image_token_id": ref.first("image_token_id", "image_token_index")}
        if self.family.key in ("qwen2_5_vl", "qwen3_vl"):
            wanted["vision_start_token_id"] = ref.get("vision_start_token_id")
            wanted["video_token_id"] = ref.get("video_token_id")
        if self.audios:
            wanted["audio_token_id"] = ref.first("audio_token_id", "audio_token_index")
        for name, value in wanted.items():
            have = self.cfg.get(name)
            if value is None:
                continue
            if have is None:
                problems.append(f"{name} is missing")
            elif int(have) != int(value):
                problems.append(f"{name} is {have}, the checkpoint says {value}")
        if problems:
            reason = "genai_config.json: " + "; ".join(problems)
            return Comparison("runtime_config", FAIL, None, 0.0, None, reason, [], [])
        return Comparison(
            "runtime_config", PASS, 0.0, 1.0, None, "token ids the runtime needs are set", [], []
        )

    def _end_to_end(self) -> Comparison:
        if self.runtime_error is not None:
            return Comparison(
                "end_to_end",
                FAIL,
                None,
                0.0,
                False,
                f"the runtime failed while generating: {self.runtime_error}",
                [],
                [],
            )
        result = compare_ids("end_to_end", self.hf_tokens, self.runtime_tokens)
        if result.verdict == PASS or self.near_tie is None:
            return result
        k, hf_logit, rt_logit = self.near_tie
        # A tie is two logits closer than the decoder's measured error on either side.
        margin = 2 * getattr(self, "decoder_error", 0.0) + 1e-6
        if hf_logit - rt_logit <= margin:
            return Comparison(
                "end_to_end",
                AMBIGUOUS,
                result.max_abs_diff,
                result.cosine,
                False,
                f"tokens differ from step {k}, where HF's logits for the two tokens are "
                f"{hf_logit - rt_logit:.2g} apart, within twice the decoder's measured error "
                "(a near-tie)",
                [],
                [k],
            )
        return result

    def token_summary(self) -> dict[str, Any]:
        """Matched-prefix length and both token lists."""
        if not self.hf_tokens:  # the end-to-end check did not run
            return {"matched": 0, "total": self.n_tokens, "runtime": [], "reference": []}
        k = _first_difference(self.hf_tokens, self.runtime_tokens)
        matched = len(self.hf_tokens) if k is None else k
        return {
            "matched": matched,
            "total": len(self.hf_tokens),
            "runtime": self.runtime_tokens,
            "reference": self.hf_tokens,
        }

    def diagnose(self, stage: Comparison) -> str:
        """The likely cause of a stage's divergence, in words a user can act on."""
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


def _guarded(names: list[str], stage: Any, *args: Any) -> list[Comparison]:
    """Run a stage; a graph that fails on the inputs is that stage's FAIL, not a crash."""
    try:
        result = stage(*args)
    except _GraphError as e:
        reason = f"the graph fails on these inputs: {e}"
        return [Comparison(n, FAIL, None, 0.0, None, reason, [], []) for n in names]
    return list(result) if isinstance(result, list) else [result]


class _GraphError(Exception):
    """An ONNX session refused its inputs."""


def _run_per_item(session: Any, feeds: dict[str, Any]) -> list[Any]:
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
    if len(counts) != 1 or (n := counts.pop()) < 2:
        raise _GraphError(first.splitlines()[0][:300])
    parts = []
    for i in range(n):
        try:
            parts.append(session.run(None, {k: v[i : i + 1] for k, v in feeds.items()}))
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            raise _GraphError(str(e).splitlines()[0][:300]) from None
    out = []
    for j in range(len(parts[0])):
        pieces = [p[j] for p in parts]
        width = pieces[0].shape[-1]
        out.append(np.concatenate([p.reshape(-1, width) for p in pieces]))
    return out


def _run(session: Any, names: list[str] | None, feeds: dict[str, Any]) -> list[Any]:
    try:
        return list(session.run(names, feeds))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        raise _GraphError(str(e).splitlines()[0][:300]) from None


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


_NUMPY_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}


def _cast(session: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """Each feed in the dtype its graph input declares; feeds the graph lacks are dropped."""
    import numpy as np

    out = {}
    for spec in session.get_inputs():
        if spec.name in feeds:
            out[spec.name] = np.asarray(feeds[spec.name]).astype(
                _NUMPY_TYPES.get(spec.type, "float32")
            )
    return out


def _feeds(
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
    return _cast(session, feeds)


def _fill_empty(session: Any, feeds: dict[str, Any]) -> dict[str, Any]:
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


def _empty_past(inputs: dict[str, Any], head_size: int) -> dict[str, Any]:
    """The decoder's state before the first token: an empty KV cache, zero conv state."""
    import numpy as np

    feeds = {}
    for name, spec in inputs.items():
        if name.startswith("past_key_values."):
            _, heads, _, size = spec.shape
            size = size if isinstance(size, int) else head_size  # builder: "kv_cache_dim"
            feeds[name] = np.zeros((1, int(heads), 0, int(size)), dtype=np.float32)
        elif name.startswith("past.") and name.endswith(".conv"):  # LFM2 short convolution
            _, channels, width = spec.shape
            feeds[name] = np.zeros((1, int(channels), int(width)), dtype=np.float32)
    return feeds


def _positions(hf: Any | None, start: int, end: int, spec: Any) -> Any:
    """Position ids for [start, end): HF's where it made them (3-D M-RoPE), else a range."""
    import numpy as np

    if hf is not None:
        if len(spec.shape) == 3 and hf.ndim == 3 and hf.shape[0] == 4:
            hf = hf[1:]  # transformers may prepend the text positions
        return hf[..., start:end]
    positions = np.arange(start, end, dtype=np.int64)[None]
    if len(spec.shape) == 3:
        return np.broadcast_to(positions, (3, 1, end - start)).copy()
    return positions
