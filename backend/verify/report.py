"""The verification report: its value, a terminal table and a self-contained HTML page."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field
from typing import Any

from mmforge.backend import typed
from mmforge.backend.verify.parity import AMBIGUOUS, APPROXIMATE, FAIL, PASS, Comparison
from mmforge.backend.verify.rounding import RoundingCost

_COLOURS = {PASS: "#1a7f37", AMBIGUOUS: "#9a6700", FAIL: "#cf222e", APPROXIMATE: "#9a6700"}


@dataclass
class VerifyReport:
    """The result of `verify`.

    Attributes:
        verdict: PASS, AMBIGUOUS or FAIL; APPROXIMATE for an approximated package
            (convert --approximate) whose every stage matches transformers run the same way.
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
        rounding: For an int4 package judged against its own rounded weights: what the
            rounding itself changes (None otherwise).
        approximation: What the package's approximation changes, in words (None: an
            exact package).
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
    rounding: RoundingCost | None = None
    approximation: str | None = None

    def summary(self) -> str:
        """The verdict in one sentence."""
        if self.verdict == APPROXIMATE:
            return (
                "APPROXIMATE: every stage matches transformers run with the approximation "
                f"you accepted, which is not the model as released. {self.approximation}"
            )
        if self.rounding is None or self.verdict != "PASS":
            return self.verdict
        if self.dtype == "f16":
            return (
                "PASS: the f16 package matches the original within float16 arithmetic's "
                f"bounds; {self.rounding.sentence()}"
            )
        return (
            f"PASS: the {self.dtype} package computes exactly what the original computes "
            f"with {self.dtype} weights; {self.rounding.sentence()}"
        )

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
            "rounding": None if self.rounding is None else dataclasses.asdict(self.rounding),
            "approximation": self.approximation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifyReport:
        """The report from its JSON form (`to_dict`)."""
        return typed.from_dict(cls, data)


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    return f"{value:.2e}"


def _argmax(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def render_table(report: VerifyReport) -> str:
    """The report as terminal text."""
    rows = [("stage", "verdict", "max abs diff", "cosine", "argmax", "")]
    for c in report.components:
        rows.append(
            (
                c.name,
                c.verdict,
                _num(c.max_abs_diff),
                f"{c.cosine:.6f}",
                _argmax(c.argmax_match),
                c.reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:5]))
        + ("  " + r[5] if r[5] else "")
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    t = report.tokens
    lines += [
        "",
        f"{report.family} package ({report.dtype}) against {report.reference}",
        f"end to end: {t['matched']} of {t['total']} greedy tokens identical",
        f"verdict: {report.summary()}",
    ]
    if report.first_divergent_stage:
        lines.append(f"first divergent stage: {report.first_divergent_stage}")
        lines.append(f"likely cause: {report.cause}")
    lines += [f"note: {n}" for n in report.notes]
    lines.append(
        f"peak memory {report.peak_rss_bytes / 1e9:.2f} GB for a "
        f"{report.checkpoint_bytes / 1e9:.2f} GB checkpoint"
    )
    return "\n".join(lines)


def plot_svg(excess: list[float], width: int = 720, height: int = 240) -> str:
    """An inline SVG of each prompt position's largest logit difference.

    As a multiple of what the tolerance allows there (log scale), with the tolerance
    drawn at 1×: a non-expert reads "under the line" as "within tolerance".
    """
    import math

    if not excess:
        return "<p>No per-position logits to plot.</p>"
    floor = 1e-6
    values = [math.log10(max(v, floor)) for v in excess]
    low, high = min(*values, -1.0), max(*values, 0.5)  # the tolerance line always shows
    left, right, top, bottom = 70, 20, 16, 44
    n = len(values)

    def x(i: float) -> float:
        return left + (width - left - right) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (high - v) / (high - low)

    def label(k: int) -> str:
        return f"{10.0**k:g}×"

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    grid = "".join(
        f'<line x1="{left}" x2="{width - right}" y1="{y(k):.1f}" y2="{y(k):.1f}" '
        f'stroke="#8888" stroke-width="0.5"/>'
        f'<text x="{left - 6}" y="{y(k) + 4:.1f}" font-size="11" text-anchor="end" '
        f'fill="currentColor">{label(k)}</text>'
        for k in range(math.ceil(low), math.floor(high) + 1)
    )
    positions = sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1})
    xticks = "".join(
        f'<text x="{x(i):.1f}" y="{height - bottom + 16}" font-size="11" '
        f'text-anchor="middle" fill="currentColor">{i}</text>'
        for i in positions
    )
    tolerance = (
        f'<line x1="{left}" x2="{width - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" '
        f'stroke="#cf222e" stroke-width="1.5" stroke-dasharray="6 4"/>'
        f'<text x="{width - right - 4}" y="{y(0) - 5:.1f}" font-size="11" text-anchor="end" '
        f'fill="#cf222e">tolerance: above this line the package is outside it</text>'
    )
    # The rotated axis title fits the plot's height: a smaller font on a short chart (the
    # app's at 1366×768 cut it to "difference ÷ allowe"), a shorter title below 8 px.
    side_label, room = "difference ÷ allowed", height - 4  # centred on the whole height
    side_size = min(12, int(room / (0.6 * len(side_label))))
    if side_size < 8:
        side_label, side_size = "÷ allowed", min(12, max(7, int(room / (0.6 * 9))))
    titles = (
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" font-size="12" '
        f'text-anchor="middle" fill="currentColor">position in the prompt</text>'
        f'<text x="14" y="{height / 2:.0f}" font-size="{side_size}" '
        f'text-anchor="middle" fill="currentColor" '
        f'transform="rotate(-90 14 {height / 2:.0f})">'
        f"{side_label}</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="largest logit difference per prompt position, as a '
        f'multiple of the tolerance">{grid}{tolerance}'
        f'<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{points}"/>'
        f"{xticks}{titles}</svg>"
    )


def _rounding_html(report: VerifyReport) -> str:
    r = report.rounding
    if r is None:
        return ""
    return f"<p><b>{html.escape(report.summary())}</b></p>"


def _approximation_html(report: VerifyReport) -> str:
    if report.approximation is None:
        return ""
    return f"<p><b>{html.escape(report.summary())}</b></p>"


def render_html(report: VerifyReport) -> str:
    """The report as one HTML page with no outside references."""
    esc = html.escape
    rows = []
    for c in report.components:
        first = c.name == report.first_divergent_stage
        rows.append(
            f"<tr{' class=first' if first else ''}><td>{esc(c.name)}</td>"
            f'<td><span class=badge style="background:{_COLOURS[c.verdict]}">'
            f"{c.verdict}</span></td>"
            f"<td>{_num(c.max_abs_diff)}</td><td>{c.cosine:.6f}</td>"
            f"<td>{_argmax(c.argmax_match)}</td><td>{esc(c.reason)}</td></tr>"
        )
    prefill = next((c for c in report.components if c.name == "decoder_prefill"), None)
    t = report.tokens
    cause = ""
    if report.first_divergent_stage:
        cause = (
            f"<p><b>First divergent stage:</b> {esc(report.first_divergent_stage)}<br>"
            f"<b>Likely cause:</b> {esc(report.cause or '')}</p>"
        )
    notes = "".join(f"<li>{esc(n)}</li>" for n in report.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>mmforge verify: {esc(report.family)} — {report.verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #1f2328; }}
table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #d0d7de; padding: 6px 10px; text-align: left;
  vertical-align: top; }}
tr.first td {{ background: #fff8c5; }}
.badge {{ color: white; border-radius: 10px; padding: 2px 8px; font-size: 12px; }}
.verdict {{ font-size: 1.4em; }}
</style></head><body>
<h1>Parity report</h1>
<p>{esc(report.family)} package ({esc(report.dtype)}) at <code>{esc(report.package)}</code>
against <code>{esc(report.reference)}</code></p>
<p class=verdict>Verdict: <span class=badge style="background:{_COLOURS[report.verdict]}">
{report.verdict}</span></p>
{_approximation_html(report)}
{cause}
<table><tr><th>stage</th><th>verdict</th><th>max abs diff</th><th>cosine</th>
<th>argmax</th><th>why</th></tr>
{"".join(rows)}
</table>
<p>End to end: {t["matched"]} of {t["total"]} greedy tokens identical.</p>
{_rounding_html(report)}
<h2>Decoder prefill: max |logit difference| per position</h2>
{plot_svg(prefill.per_position_excess if prefill else [])}
<ul>{notes}</ul>
<p>Peak memory {report.peak_rss_bytes / 1e9:.2f} GB for a
{report.checkpoint_bytes / 1e9:.2f} GB checkpoint.</p>
</body></html>
"""
