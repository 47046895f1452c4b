"""Write THIRD-PARTY.txt: every distribution installed in the build environment and its licence.

Usage: python packaging/third_party.py OUT_FILE [SITE_PACKAGES]
(run with the build environment's Python; or name the folder the distributions are
installed in, as build_windows.sh does for the Windows site-packages).
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path


def licence(dist: metadata.Distribution) -> str:
    """The licence a distribution declares (expression, field or classifier)."""
    meta = dist.metadata
    expression = meta.get("License-Expression")
    if expression:
        return expression
    declared = (meta.get("License") or "").strip().splitlines()
    if declared and len(declared[0]) < 80:
        return declared[0]
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or []]
    found = [c for c in classifiers if "License" in c]
    return ", ".join(found) or "see the package's own files"


def main(out: str, site: str | None = None) -> None:
    """Write the list to `out` (the distributions in `site`, else on sys.path)."""
    found = metadata.distributions(path=[site]) if site else metadata.distributions()
    rows = sorted(
        {(d.metadata["Name"] or "?", d.version, licence(d)) for d in found},
        key=lambda r: r[0].lower(),
    )
    lines = [f"{name} {version}: {lic}" for name, version, lic in rows if name != "pip"]
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
