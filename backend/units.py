"""Numbers as people read them: sizes in KB/MB/GB, counts in K/M/B."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as download sizes are shown)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def human_rate(bytes_per_s: float) -> str:
    """55800 -> '55.8 KB/s': a slow link reads in KB/s, never as '0.0 MB/s'."""
    return f"{human_bytes(bytes_per_s)}/s"


def human_count(n: int) -> str:
    """207970 -> '207.97K'."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def a_or_an(name: str) -> str:
    """`name` after its indefinite article, by its first letter ("an InternVL", "a Qwen")."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
