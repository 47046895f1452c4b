"""verify's view of a quantized package: conversion exactness apart from rounding.

For an int4 or int8 package (see rounding.py for the method):
- the stages run on the package's exact-arithmetic view against transformers holding the
  package's own rounded weights, with the f32 tolerances: any difference is a conversion
  fault, named at its stage as for an f32 package;
- the rounding's own cost is measured afterwards, original against rounded transformers;
- the runtime's int8 arithmetic is measured as the tokens it changes against the
  exact-arithmetic view.
When the rounded reference cannot be built (a package weight with no place in the
model), verify says so and judges the package as before, with the quantized bounds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.errors import LayoutError
from mmforge.backend.families import WeightsRequest
from mmforge.backend.verify import hf_reference, rounding
from mmforge.backend.verify.evidence import (
    ReferenceEvidence,
    RuntimeEvidence,
    first_difference,
    longer,
    until_placeholder,
)
from mmforge.backend.verify.parity import Tolerance, tolerance
from mmforge.backend.verify.stages import Setup

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Rounded:
    """A quantized package's verification under way.

    Attributes:
        package: The package as the user has it.
        exact: Its exact-arithmetic view (setup for the stages).
        weights: Matrices the reference took from the package (0 until placed).
        wrong: Package weights that are not the rounding of their checkpoint tensor.
        error: Why the rounded reference could not be built (None: it was).
    """

    package: Path
    exact: Setup
    dtype: str = "int4"
    merged: dict[str, Any] | None = None
    weights: int = 0
    wrong: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None

    def round_into(self, model: Any) -> tuple[int, list[str]]:
        """Write the package's rounded weights into `model` (`round_like_package`)."""
        folder = self.exact.checkpoint.folder
        return rounding.round_like_package(model, self.package, folder, self.merged)

    def adjust(self, model: Any) -> None:
        """Write the package's rounded weights into the reference model (or note why not)."""
        try:
            self.weights, self.wrong = self.round_into(model)
        except LayoutError as e:
            self.error = e.user_message
            log.warning("no rounded reference: %s", e.user_message)


def as_converted(checkpoint: Checkpoint) -> dict[str, Any] | None:
    """The checkpoint's tensors as conversion read them, where the family changes them first.

    None where it does not (`prepare_weights`: Phi-4's vision LoRA merged into its base).
    """
    from mmforge.backend.tensors import checkpoint_refs

    spec = checkpoint.family.package
    if spec is None or spec.prepare_weights is None:
        return None
    return spec.prepare_weights(
        WeightsRequest(checkpoint, checkpoint_refs(checkpoint.folder))
    ).tensors


def prepare(setup: Setup, scratch: Path, dtype: str) -> Rounded:
    """The exact-arithmetic view of a quantized package, judged with the f32 tolerances.

    Encoders the package stores in f16 are judged with the f16 bounds; the embedding
    (its table rounded like the decoder's weights, and held so by the reference) and the
    decoder with the f32 ones.
    """
    exact = rounding.exact_arithmetic_copy(setup.package, scratch / "exact-arithmetic")
    layers = int(setup.model["decoder"].get("num_hidden_layers", 0))
    f32 = tolerance("f32", layers)
    encoders = encoder_tolerance(setup.package, tolerance("f32"))
    return Rounded(
        package=setup.package,
        dtype=dtype,
        merged=as_converted(setup.checkpoint),
        exact=dataclasses.replace(
            setup, package=exact, tol=f32, tol_encoders=encoders, tol_embedding=f32
        ),
    )


def encoder_tolerance(package: Path, otherwise: Tolerance) -> Tolerance:
    """The f16 bounds where the package stores an encoder in f16 (its manifest says so)."""
    from mmforge.backend.library import read_manifest

    stored = read_manifest(package).get("precisions")
    stored = stored if isinstance(stored, dict) else {}
    encoders = [stored.get(c) for c in ("vision_encoder", "audio_encoder")]
    return tolerance("f16") if "f16" in encoders else otherwise


def round_to_f16(model: Any) -> int:
    """Round the model's float32 weights to float16 and back, in place; how many tensors.

    What an f16 package's weights are (its arithmetic, float16 too, is not held here).
    """
    import torch

    count = 0
    with torch.no_grad():
        for tensor in model.parameters():  # not buffers: RoPE tables are computed
            if tensor.dtype == torch.float32:
                tensor.copy_(tensor.half().float())
                count += 1
    return count


def cost(
    dtype: str,
    adjust: Callable[[Any], int],
    checkpoint: Checkpoint,
    rt: RuntimeEvidence,
    ref: ReferenceEvidence,
    real_tokens: list[int],
    n_tokens: int,
) -> rounding.RoundingCost:
    """What the rounding itself changes on this prompt, and what the runtime's arithmetic does.

    Loads the original model once more: its greedy answer, then the original and the
    rounded model's logits over prompt + that answer (teacher-forced). `adjust` rounds
    the reference model's weights in place and says how many it rounded; `real_tokens`
    are the package's tokens as the user runs it, against `rt.tokens`.
    """
    import gc

    import torch

    model = hf_reference.load_model(checkpoint)
    try:
        inputs = hf_reference.from_runtime(checkpoint, rt.prompt, rt.arrays)
        # (cut before a generated placeholder: HF cannot be fed one without features)
        answer = until_placeholder(
            checkpoint, hf_reference.greedy_generate(model, inputs, n_tokens)
        )
        full = longer(checkpoint, rt, answer)
        with torch.no_grad():
            original = model(**full.tensors).logits[0].float()
            weights = adjust(model)
            changed = model(**full.tensors).logits[0].float()
    finally:
        del model
        gc.collect()
    prompt_len = len(rt.ids)
    # Over the answer; over the prompt itself when the answer is empty (it began with a
    # placeholder token).
    top1, kl, (a, b) = rounding.teacher_forced(original, changed, prompt_len if answer else 1)
    ids = list(full.input_ids)  # the runtime's ids as HF reads them, and the answer
    return rounding.RoundingCost(
        dtype=dtype,
        weights=weights,
        answer_tokens=len(answer),
        top1_agreement=top1,
        mean_kl=kl,
        prompt_perplexity=(
            rounding.perplexity(a, ids, prompt_len),
            rounding.perplexity(b, ids, prompt_len),
        ),
        first_difference=first_difference(answer, ref.tokens),
        arithmetic_changed=first_difference(rt.tokens, real_tokens),
        grade=rounding.grade(top1, kl),
    )
