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

from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
AMBIGUOUS = "AMBIGUOUS"
FAIL = "FAIL"
# A package's overall verdict only, never a stage's: every stage matches transformers run
# with the approximation the user accepted (Family.approximation), which is not the model
# as released.
APPROXIMATE = "APPROXIMATE"
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
    if dtype in ("int4", "int8"):
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
        per_position_excess: For logits, per position, the largest difference as a
            multiple of what the tolerance allows there (atol + rtol·|reference|): at
            most 1 where the position is within the tolerance.
    """

    name: str
    verdict: str
    max_abs_diff: float | None
    cosine: float
    argmax_match: bool | None
    reason: str
    per_position: list[float]
    near_ties: list[int]
    per_position_excess: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two arrays, flattened, in float64 (1.0 for two zero arrays)."""
    import numpy as np

    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    return _cosine_from(float(np.dot(x, y)), float(np.dot(x, x)), float(np.dot(y, y)))


# Elements per chunk when comparing: logits of a long prompt over a 200k vocabulary are
# 10^8 values, and whole-array float64 temporaries took 4 GB (Phi-4, 505 tokens).
_CHUNK = 1 << 22


@dataclass
class _Stats:
    """Everything compare needs, gathered over row chunks in float64."""

    max_abs: float = 0.0
    cosine: float = 1.0
    atol: float = 0.0
    excess: float = 0.0
    not_finite: int = 0
    per_position: list[float] = field(default_factory=list)
    per_position_excess: list[float] = field(default_factory=list)
    near_ties: list[int] = field(default_factory=list)
    mismatched: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, ref: Any, out: Any, tol: Tolerance, logits: bool) -> _Stats:
        import numpy as np

        stats = cls()
        if ref.size == 0:
            stats.atol = tol.atol
            return stats
        width = ref.shape[-1] if ref.ndim >= 1 and ref.shape[-1] else 1
        rows_ref, rows_out = ref.reshape(-1, width), out.reshape(-1, width)
        step = max(1, _CHUNK // width)
        chunks = [slice(i, i + step) for i in range(0, rows_ref.shape[0], step)]
        dot = ref_sq = out_sq = 0.0
        for rows in chunks:
            r = rows_ref[rows].astype(np.float64)
            o = rows_out[rows].astype(np.float64)
            finite = np.isfinite(o)
            if not finite.all():
                stats.not_finite += int(o.size - np.count_nonzero(finite))
                continue
            diff = np.abs(o - r)
            stats.max_abs = max(stats.max_abs, float(diff.max()))
            dot += float(np.vdot(r, o))
            ref_sq += float(np.vdot(r, r))
            out_sq += float(np.vdot(o, o))
            if logits:
                stats.per_position += [float(v) for v in diff.max(axis=1)]
                stats._tops(r, o, rows.start, tol)
        if stats.not_finite:
            return stats
        stats.cosine = _cosine_from(dot, ref_sq, out_sq)
        # The seed's atol is for values of order one (logits); float32 rounding grows with
        # the magnitude of what is summed, so atol scales with the tensor's RMS above one.
        stats.atol = tol.atol * max(1.0, float(np.sqrt(ref_sq / ref.size)))
        # How far outside the elementwise bound the worst element is (≤ 1: inside).
        for rows in chunks:
            r = rows_ref[rows].astype(np.float64)
            diff = np.abs(rows_out[rows].astype(np.float64) - r)
            ratio = diff / (stats.atol + tol.rtol * np.abs(r))
            stats.excess = max(stats.excess, float(ratio.max()))
            if logits:
                stats.per_position_excess += [float(v) for v in ratio.max(axis=1)]
        return stats

    def _tops(self, r: Any, o: Any, first_row: int, tol: Tolerance) -> None:
        import numpy as np

        top_ref, top_out = r.argmax(axis=1), o.argmax(axis=1)
        for i in np.nonzero(top_ref != top_out)[0]:
            gap = float(r[i, top_ref[i]] - r[i, top_out[i]])
            # Within the dtype's tolerance either logit may move by atol + rtol·|x|, so
            # a gap under twice that can flip by rounding alone.
            margin = 2 * (tol.atol + tol.rtol * abs(float(r[i, top_ref[i]])))
            (self.near_ties if gap <= margin else self.mismatched).append(first_row + int(i))


def _cosine_from(dot: float, x_sq: float, y_sq: float) -> float:
    """Cosine from a dot product and squared norms (1.0 for two zero arrays)."""
    import math

    nx, ny = math.sqrt(x_sq), math.sqrt(y_sq)
    if nx == 0.0 and ny == 0.0:
        return 1.0
    if nx == 0.0 or ny == 0.0:
        return 0.0
    return dot / (nx * ny)


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

    ref_in, out_in = np.asarray(reference), np.asarray(got)
    if ref_in.shape != out_in.shape:
        return Comparison(
            name,
            FAIL,
            None,
            0.0,
            None if not logits else False,
            f"shape {list(out_in.shape)} where the reference has {list(ref_in.shape)}",
            [],
            [],
        )
    stats = _Stats.of(ref_in, out_in, tol, logits)
    if stats.not_finite:
        return Comparison(
            name, FAIL, None, 0.0, False if logits else None,
            f"{stats.not_finite} values are NaN or infinite", [], [],
        )  # fmt: skip
    max_abs, cos, atol, excess = stats.max_abs, stats.cosine, stats.atol, stats.excess
    within = excess <= 1.0
    per_position = stats.per_position if logits else []
    near_ties, mismatched = stats.near_ties, stats.mismatched
    argmax_match: bool | None = None
    if logits and ref_in.ndim >= 1 and ref_in.size:
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
    return Comparison(
        name,
        verdict,
        max_abs,
        cos,
        argmax_match,
        reason,
        per_position,
        near_ties,
        stats.per_position_excess if logits else [],
    )


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
