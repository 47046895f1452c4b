"""This process's memory: the figures conversion, parity and chat report.

Linux reads /proc, macOS `resource`; Windows has neither (nor `os.sysconf`), and asks
the system through ctypes (`GlobalMemoryStatusEx`, `GetProcessMemoryInfo`).
"""

from __future__ import annotations

import os
import sys


def peak_rss_bytes(children: bool = False) -> int:
    """Peak resident memory so far (0 where the platform does not say).

    With `children`, the largest peak of the child processes that have ended (LFM2-VL's
    decoder builder runs in one; Windows does not keep that figure: 0).
    """
    try:
        import resource
    except ImportError:  # Windows
        if children:
            return 0
        figures = _windows_process_memory()
        return figures[1] if figures else 0
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    peak = int(resource.getrusage(who).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes


def current_rss_bytes() -> int:
    """Resident memory now (Linux /proc, Windows' working set; elsewhere the peak)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _page_size()
    except (OSError, ValueError, AttributeError):
        pass
    figures = _windows_process_memory()
    return figures[0] if figures else peak_rss_bytes()


def available_bytes() -> int | None:
    """Memory the system can give a new allocation now, without swapping (None: unknown).

    Linux's MemAvailable (free memory plus the page cache it can drop), Windows'
    available physical memory, else the free physical pages.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    status = _windows_memory_status()
    if status is not None:
        return status[1]
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * _page_size()
    except (ValueError, OSError, AttributeError):
        return None


def total_bytes() -> int | None:
    """Physical memory (None: unknown)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * _page_size()
    except (ValueError, OSError, AttributeError):  # Windows has no sysconf
        pass
    status = _windows_memory_status()
    return status[0] if status is not None else None


def _page_size() -> int:
    return int(os.sysconf("SC_PAGE_SIZE"))  # AttributeError where there is no sysconf


def _windows_memory_status() -> tuple[int, int] | None:
    """(total, available) physical bytes from GlobalMemoryStatusEx; None off Windows."""
    import ctypes

    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return None
    from ctypes import wintypes

    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [
            ("dwLength", wintypes.DWORD),
            ("dwMemoryLoad", wintypes.DWORD),
            ("ullTotalPhys", ctypes.c_uint64),
            ("ullAvailPhys", ctypes.c_uint64),
            ("ullTotalPageFile", ctypes.c_uint64),
            ("ullAvailPageFile", ctypes.c_uint64),
            ("ullTotalVirtual", ctypes.c_uint64),
            ("ullAvailVirtual", ctypes.c_uint64),
            ("ullAvailExtendedVirtual", ctypes.c_uint64),
        ]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    try:
        if not windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return None
    except (AttributeError, OSError, ctypes.ArgumentError):
        return None
    return int(status.ullTotalPhys), int(status.ullAvailPhys)


def _windows_process_memory() -> tuple[int, int] | None:
    """(working set, peak working set) of this process in bytes; None off Windows."""
    import ctypes

    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return None
    from ctypes import wintypes

    class ProcessMemoryCounters(ctypes.Structure):
        _fields_ = [
            ("cb", wintypes.DWORD),
            ("PageFaultCount", wintypes.DWORD),
            ("PeakWorkingSetSize", ctypes.c_size_t),
            ("WorkingSetSize", ctypes.c_size_t),
            ("QuotaPeakPagedPoolUsage", ctypes.c_size_t),
            ("QuotaPagedPoolUsage", ctypes.c_size_t),
            ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t),
            ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
            ("PagefileUsage", ctypes.c_size_t),
            ("PeakPagefileUsage", ctypes.c_size_t),
        ]

    counters = ProcessMemoryCounters()
    counters.cb = ctypes.sizeof(ProcessMemoryCounters)
    kernel32 = windll.kernel32
    try:
        kernel32.GetCurrentProcess.restype = wintypes.HANDLE
        process = wintypes.HANDLE(kernel32.GetCurrentProcess())  # the pseudo-handle -1
        # K32GetProcessMemoryInfo is kernel32's name for psapi's (Windows 7 and later).
        if not kernel32.K32GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb):
            return None
    except (AttributeError, OSError, ctypes.ArgumentError):
        return None
    return int(counters.WorkingSetSize), int(counters.PeakWorkingSetSize)
