"""Whether a process is alive, on POSIX and on Windows.

POSIX asks with `os.kill(pid, 0)`. On Windows signal 0 is CTRL_C_EVENT: `os.kill(pid, 0)`
would send Ctrl+C to the console process group `pid`, not ask anything; there the
process is opened (`OpenProcess`) and its exit code read (`GetExitCodeProcess`).
"""

from __future__ import annotations

import os

_STILL_ACTIVE = 259
_PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
_ERROR_ACCESS_DENIED = 5


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (True when the system cannot tell: keep what it owns)."""
    if pid == os.getpid():
        return True
    if os.name == "nt":
        return _windows_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or a system that cannot tell
        return True
    return True


def _windows_alive(pid: int) -> bool:
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.OpenProcess.restype = wintypes.HANDLE
    handle = kernel32.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
    if not handle:  # no such process, or one this user may not open
        denied = ctypes.get_last_error() == _ERROR_ACCESS_DENIED  # type: ignore[attr-defined]
        return bool(denied)
    try:
        code = wintypes.DWORD()
        if not kernel32.GetExitCodeProcess(wintypes.HANDLE(handle), ctypes.byref(code)):
            return True
        return code.value == _STILL_ACTIVE
    finally:
        kernel32.CloseHandle(wintypes.HANDLE(handle))
