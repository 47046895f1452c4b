# ruff: noqa: T201, D103 - a reproduction script: it prints what it measures
"""Minimal reproduction of the GUI self-test hang (issue #32), no mmforge code.

One thread waits for a line on standard input (a pipe that stays silent, as a worker's
command pipe is while its job runs); the main thread then imports numpy. The import
blocks until a line comes: loading numpy's native module calls a C-runtime function on
descriptor 0 (_lseeki64), and the C runtime holds descriptor 0's lock for the whole of
the other thread's blocking _read. packaging/windows/wine/crt_fd_lock.c shows the same
with the C runtime alone. With `--moved`, the reader reads a duplicate of descriptor 0
and descriptor 0 is the null device (what mmforge's worker now does:
backend/worker/server.py, take_stdin): the import takes its usual seconds.

Run it with the installed Python under Wine (the test prefix of test_windows.sh):
  (sleep 60; echo go) | wine python.exe repro_stdin_lock.py [--moved]
Measured under Wine 8: plain, the import waits for the line (about 60 s); moved, 4 s.
"""

import os
import sys
import threading
import time

moved = "--moved" in sys.argv
if moved:
    source = os.fdopen(os.dup(0), "rb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
else:
    source = sys.stdin.buffer


def reader() -> None:
    line = source.readline()
    print(f"reader: got {line!r} at {time.monotonic() - start:.1f} s", flush=True)


start = time.monotonic()
threading.Thread(target=reader, daemon=True).start()
time.sleep(1)
print("main: importing numpy", flush=True)
import numpy  # noqa: E402, F401 - the point: an import while the reader waits

print(f"main: numpy imported at {time.monotonic() - start:.1f} s", flush=True)
