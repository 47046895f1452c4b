"""Comparing one stage's output with the Hugging Face reference: numbers and a verdict.

This is the measuring core of `mmforge verify`. Each check reports the max absolute
difference, the cosine similarity, the argmax match (for logits) and a verdict:

- PASS: every element within `atol + rtol·|reference|` (the debugging seed's tolerances
  for the package's dtype), and for logits the same top token at every position;
- AMBIGUOUS: the output points the same way (cosine at or above the floor) but some
  elements fall outside the tolerance by up to 10×, or a top token differs only where the
  reference's
  two best logits are closer than twice the tolerance (a near-tie, which rounding alone
  can flip);
- FAIL: anything else, including a shape mismatch and an error over 10× the tolerance
  (a wrong weight can keep the cosine above 0.98).

Tolerances (debugging seed, "Tolerance guidelines"): float32 atol 1e-4 / rtol 2e-2;
float32 models with 32+ layers atol 1e-3 / rtol 5e-2; float16 and bfloat16 atol 1e-2 /
rtol 5e-2; cosine > 0.98 as the primary metric. The seed's atol is meant for values of
order one; for a tensor whose RMS is larger (vision features often are), atol is scaled
by that RMS, because rounding error grows with the magnitudes being summed.

int4 is not in the seed. Its weights alone move logits far beyond the f16 bounds, so only
cosine and argmax decide, with the elementwise bounds of f16 reported for information.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PASS = "PASS"
AMBIGUOUS = "AMBIGUOUS"
FAIL = "FAIL"
DEEP_LAYERS = 32
# Up to this many times outside the elementwise bound, a close output is AMBIGUOUS; beyond
# it the difference is no longer rounding noise, whatever the cosine says.
AMBIGUOUS_EXCESS = 10.0


@dataclass(frozen=True)
class Tolerance:
    """Bounds for one dtype.

    Attributes:
        atol: Absolute tolerance per element.
        rtol: Relative tolerance per element.
        min_cosine: Cosine similarity below this fails outright.
        elementwise: Whether the elementwise bound can give PASS (not for int4).
    """

    atol: float
    rtol: float
    min_cosine: float = 0.98
    elementwise: bool = True


def tolerance(dtype: str, layers: int = 0) -> Tolerance:
    """The seed's tolerance for a package dtype ("f32", "f16", "bf16", "int4")."""
    if dtype == "f32":
        return Tolerance(1e-3, 5e-2) if layers >= DEEP_LAYERS else Tolerance(1e-4, 2e-2)
    if dtype in ("f16", "bf16"):
        return Tolerance(1e-2, 5e-2)
    if dtype == "int4":
        return Tolerance(1e-2, 5e-2, elementwise=False)
    raise ValueError(f"no tolerance for dtype {dtype!r}")


@dataclass(frozen=True)
class Comparison:
    """One stage's numbers and verdict.

    Attributes:
        name: The stage ("vision_encoder", "decoder_prefill", …).
        verdict: PASS, AMBIGUOUS or FAIL.
        max_abs_diff: Largest absolute difference; for id sequences, the number of
            positions that differ; None when the outputs cannot be compared (shape, NaN).
        cosine: Cosine similarity of the flattened outputs.
        argmax_match: For logits, whether the top token matches at every position
            (None for other tensors).
        reason: Why the verdict is what it is, in words.
        per_position: For logits, the max absolute difference at each position.
        near_ties: Positions whose top token differs at a near-tie.
    """

    name: str
    verdict: str
    max_abs_diff: float | None
    cosine: float
    argmax_match: bool | None
    reason: str
    per_position: list[float]
    near_ties: list[int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two arrays, flattened, in float64 (1.0 for two zero arrays)."""
    import numpy as np

    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 and ny == 0.0:
        return 1.0
    if nx == 0.0 or ny == 0.0:
        return 0.0
    return float(np.dot(x, y) / (nx * ny))


def compare(
    name: str, reference: Any, got: Any, tol: Tolerance, *, logits: bool = False
) -> Comparison:
    """Compare a stage's output with the reference.

    Args:
        name: The stage name for the report.
        reference: The Hugging Face output.
        got: The package's output.
        tol: Bounds for the package's dtype.
        logits: Treat the last axis as a vocabulary: check the top token per position and
            allow near-ties.
    """
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(got, dtype=np.float64)
    if ref.shape != out.shape:
        return Comparison(
            name,
            FAIL,
            None,
            0.0,
            None if not logits else False,
            f"shape {list(out.shape)} where the reference has {list(ref.shape)}",
            [],
            [],
        )
    if not np.all(np.isfinite(out)):
        bad = int(np.size(out) - np.count_nonzero(np.isfinite(out)))
        return Comparison(
            name, FAIL, None, 0.0, False if logits else None,
            f"{bad} values are NaN or infinite", [], [],
        )  # fmt: skip
    diff = np.abs(out - ref)
    max_abs = float(diff.max()) if diff.size else 0.0
    cos = cosine(ref, out)
    # The seed's atol is for values of order one (logits); float32 rounding grows with the
    # magnitude of what is summed, so atol scales with the tensor's RMS above one.
    scale = max(1.0, float(np.sqrt(np.mean(ref * ref)))) if ref.size else 1.0
    atol = tol.atol * scale
    # How far outside the elementwise bound the worst element is (≤ 1: inside).
    excess = float((diff / (atol + tol.rtol * np.abs(ref))).max()) if diff.size else 0.0
    within = excess <= 1.0
    per_position: list[float] = []
    near_ties: list[int] = []
    argmax_match: bool | None = None
    mismatched: list[int] = []
    if logits and ref.ndim >= 1 and ref.size:
        rows_ref = ref.reshape(-1, ref.shape[-1])
        rows_out = out.reshape(-1, out.shape[-1])
        rows_diff = diff.reshape(-1, diff.shape[-1])
        per_position = [float(v) for v in rows_diff.max(axis=1)]
        top_ref = rows_ref.argmax(axis=1)
        top_out = rows_out.argmax(axis=1)
        for i in np.nonzero(top_ref != top_out)[0]:
            gap = float(rows_ref[i, top_ref[i]] - rows_ref[i, top_out[i]])
            # Within the dtype's tolerance either logit may move by atol + rtol·|x|, so
            # a gap under twice that can flip by rounding alone.
            margin = 2 * (tol.atol + tol.rtol * abs(float(rows_ref[i, top_ref[i]])))
            (near_ties if gap <= margin else mismatched).append(int(i))
        argmax_match = not near_ties and not mismatched

    if mismatched:
        verdict = FAIL
        reason = (
            f"the top token differs at {len(mismatched)} position(s), first at "
            f"{mismatched[0]} (cosine {cos:.4f})"
        )
    elif cos < tol.min_cosine:
        verdict, reason = FAIL, f"cosine {cos:.4f} is below {tol.min_cosine}"
    elif near_ties:
        verdict = AMBIGUOUS
        reason = (
            f"the top token differs only at near-ties ({len(near_ties)} position(s), first "
            f"at {near_ties[0]}): the reference's two best logits are closer than the error"
        )
    elif within and tol.elementwise:
        verdict, reason = PASS, f"within atol {atol:.2g} + rtol {tol.rtol:g}"
    elif not tol.elementwise:
        tops = " with the same top tokens" if logits else ""
        verdict, reason = PASS, f"cosine {cos:.4f} ≥ {tol.min_cosine}{tops}"
    elif excess <= AMBIGUOUS_EXCESS:
        verdict = AMBIGUOUS
        reason = (
            f"cosine {cos:.4f} but max abs diff {max_abs:.3g} is {excess:.1f}× the bound "
            f"atol {atol:.2g} + rtol {tol.rtol:g}"
        )
    else:
        verdict = FAIL
        reason = (
            f"max abs diff {max_abs:.3g} is {excess:.0f}× the bound atol {atol:.2g} + rtol "
            f"{tol.rtol:g}: beyond rounding noise (cosine {cos:.4f})"
        )
    return Comparison(name, verdict, max_abs, cos, argmax_match, reason, per_position, near_ties)


def compare_ids(name: str, reference: list[int], got: list[int]) -> Comparison:
    """Compare two id sequences (input ids after expansion, or generated tokens)."""
    differing = [i for i, (a, b) in enumerate(zip(reference, got, strict=False)) if a != b]
    differing += list(range(min(len(reference), len(got)), max(len(reference), len(got))))
    if not differing:
        return Comparison(name, PASS, 0.0, 1.0, True, f"all {len(reference)} ids equal", [], [])
    return Comparison(
        name,
        FAIL,
        float(len(differing)),
        0.0,
        False,
        f"ids differ from position {differing[0]} (lengths {len(got)}, reference {len(reference)})",
        [],
        [],
    )


def overall(comparisons: list[Comparison]) -> tuple[str, str | None]:
    """The overall verdict and the first divergent stage, in check order.

    The first FAIL is blamed when there is one; an earlier AMBIGUOUS stage is numeric
    noise that did not change the outcome there.
    """
    for verdict in (FAIL, AMBIGUOUS):
        first = next((c.name for c in comparisons if c.verdict == verdict), None)
        if first is not None:
            return verdict, first
    return PASS, None
