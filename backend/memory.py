"""This process's memory: the figures conversion, parity and chat report."""

from __future__ import annotations

import os


def peak_rss_bytes(children: bool = False) -> int:
    """Peak resident memory so far (0 where the platform does not say).

    With `children`, the largest peak of the child processes that have ended (LFM2-VL's
    decoder builder runs in one).
    """
    try:
        import resource
    except ImportError:  # Windows
        return 0
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    peak = int(resource.getrusage(who).ru_maxrss)
    return peak if os.uname().sysname == "Darwin" else peak * 1024  # macOS counts bytes


def current_rss_bytes() -> int:
    """Resident memory now (Linux /proc; elsewhere the peak, the best available)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def available_bytes() -> int | None:
    """Memory the system can give a new allocation now, without swapping (None: unknown).

    Linux's MemAvailable (free memory plus the page cache it can drop), else the free
    physical pages.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
