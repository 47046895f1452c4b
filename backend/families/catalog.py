"""The family list as users read it, made from the registry.

docs/families.md holds `table()` between its two markers; a test checks it is current, and
`python -m mmforge.backend.families.catalog --write docs/families.md` rewrites it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from mmforge.backend.families import ALL, Family

BEGIN = "<!-- families: generated from the registry by mmforge.backend.families.catalog -->"
END = "<!-- families: end -->"

EXACT = "converts exactly"
CONSENT = "converts with your consent"
NOT_YET = "not built yet"  # a runtime pipeline could run it exactly; mmforge has no graphs
CANNOT = "cannot convert"


@dataclass(frozen=True)
class Standing:
    """What this version does with a family, and why, in the user's words."""

    kind: str  # EXACT, CONSENT, NOT_YET or CANNOT
    why: str


def standing(family: Family) -> Standing:
    """Whether a family converts exactly, only with the user's consent, not yet, or not."""
    if family.exact_host is not None:
        return Standing(NOT_YET, family.no_pipeline_reason or f"'{family.exact_host}' could")
    if family.pipeline_type is None:
        return Standing(CANNOT, family.no_pipeline_reason or "no runtime pipeline")
    if family.not_converted:
        return Standing(CANNOT, family.not_converted)
    if family.package is None:
        return Standing(CANNOT, "not converted by this version")
    if family.approximation is not None:
        return Standing(
            CONSENT,
            "it converts only as an approximation, if you agree. "
            f"{family.approximation.what} Verify then says APPROXIMATE, never PASS.",
        )
    if family.recognition.remote_code_types and set(family.recognition.model_types) <= set(
        family.recognition.remote_code_types
    ):
        return Standing(
            CONSENT,
            "converting asks you to trust remote code, since the model is defined by its "
            "repository's code (mmforge reads its config and weights as data and runs none "
            "of that code)",
        )
    return Standing(EXACT, f"ONNX Runtime GenAI pipeline '{family.pipeline_type}'")


def counts(entries: tuple[Family, ...] = ALL) -> dict[str, int]:
    """How many families of each standing the registry holds."""
    out = {EXACT: 0, CONSENT: 0, NOT_YET: 0, CANNOT: 0}
    for family in entries:
        out[standing(family).kind] += 1
    return out


def sentence(n: dict[str, int] | None = None) -> str:
    """The counts in one sentence (the README carries it; a test keeps it current)."""
    n = n if n is not None else counts()
    later = (
        f"{n[NOT_YET]} more could run exactly on a runtime pipeline but mmforge does not build "
        f"{'its' if n[NOT_YET] == 1 else 'their'} graphs yet, and "
        if n[NOT_YET]
        else ""
    )
    return (
        f"{n[EXACT]} families convert exactly, {n[CONSENT]} with your consent; {later}"
        f"{n[CANNOT]} cannot convert, each with its measured reason (inspect describes them all)."
    )


def table(entries: tuple[Family, ...] = ALL) -> str:
    """The Markdown table of every family, with the counts above it."""
    n = counts(entries)
    lines = [
        BEGIN,
        "",
        sentence(n),
        "",
        "| Family | model_type | Converts | Why |",
        "|---|---|---|---|",
    ]
    for family in entries:
        s = standing(family)
        if s.kind == CONSENT and family.approximation is not None:
            s = Standing(s.kind, f"{s.why} {family.approximation.why}".strip())
        if family.variant_note:
            s = Standing(s.kind, f"{s.why}. {family.variant_note}")
        types = ", ".join(_type_words(family, t) for t in family.recognition.model_types)
        why = s.why.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")
        lines.append(f"| {family.name} | {types} | {s.kind} | {why} |")
    lines += ["", END]
    return "\n".join(lines)


def _type_words(family: Family, model_type: str) -> str:
    """A model_type as the table names it: a remote-code layout convert refuses says so.

    Remote code converts only through a family builder or a layout map that reads it as
    data (convert/job.py, `_check_convertible`; `Recognition.remote_layout`); otherwise
    inspect describes it and no more.
    """
    builder = family.package is not None and family.package.build is not None
    read_as_data = builder or family.recognition.remote_layout is not None
    if model_type in family.recognition.remote_code_types and not read_as_data:
        return f"`{model_type}` (remote code: inspect only)"
    return f"`{model_type}`"


def rewrite(text: str) -> str:
    """`text` with the part between the markers replaced by the current table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("the document has no family-table markers")
    return text[:start] + table() + text[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    """Print the table, or rewrite a document's table in place."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="the document to rewrite in place")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(table() + "\n")
        return 0
    args.write.write_text(rewrite(args.write.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
