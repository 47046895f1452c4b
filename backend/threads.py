"""How many threads ONNX Runtime computes with on CPU, and how they wait for work.

The policy, chosen with `benchmarks/chat.py --load` and `--turns` (docs/chat-engine.md,
"Threads"), is one plan per loaded package, decided when it loads:

- **Threads: one per physical core this process may run on** (its affinity mask, so
  `taskset` and container limits count; SMT siblings count once). ONNX Runtime GenAI
  0.18's own default is half the logical CPUs, which on a machine without SMT (most
  cloud machines, this one) is half the cores.
- **Spinning, briefly, if the cores are free when the package loads.** A spinning intra-op
  thread that runs out of work polls for the next piece instead of sleeping, which saves
  a sleep and a wake-up per operator: int4 decode at 1.6x the stock speed on 2 idle
  cores, where sleeping threads gave 1.04x. It polls for at most `SPIN_US` microseconds
  (`session.intra_op.spin_duration_us`, ONNX Runtime 1.26 and later), not ONNX Runtime's
  own 2^20 polls, so it gives a core back soon to whoever else wants it. When other
  processes want the cores at load (`CpuWatch`), the threads sleep: with two spinners
  running, sleeping threads decoded int4 at 1.25x stock, spinning ones at 0.75-1.06x.

ONNX Runtime fixes a session's thread settings when it makes it: no run option changes
them, and `session.force_spinning_stop` only stops the spin between runs. So the plan
holds for the life of the loaded package, and no turn loads it again.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Spinning pays only while other processes leave our cores alone: at most this many
# cores' worth of their CPU time per usable core (half a core on 2 cores).
FREE_SHARE = 0.25
# A look at the CPU covers at least this long (the load waits out the rest).
MIN_WINDOW_S = 0.25
# How long an idle intra-op thread polls for work before it sleeps, in microseconds.
SPIN_US = 50


@dataclass(frozen=True)
class ThreadPlan:
    """The intra-op thread settings for one package's sessions.

    Attributes:
        threads: intra-op threads; 0 leaves the count to ONNX Runtime (its physical cores).
        spinning: whether idle threads poll for work before they sleep.
        spin_us: for how long, in microseconds; 0 leaves it to ONNX Runtime (2^20 polls).
    """

    threads: int
    spinning: bool
    spin_us: int = SPIN_US

    def session_options(self) -> dict[str, Any]:
        """The `session_options` keys of genai_config.json that set this plan."""
        options: dict[str, Any] = {
            "intra_op_num_threads": self.threads,
            "session.intra_op.allow_spinning": "1" if self.spinning else "0",
        }
        if self.spinning and self.spin_us > 0:
            options["session.intra_op.spin_duration_us"] = str(self.spin_us)
        return options


def usable_cpus() -> list[int] | None:
    """The logical CPUs this process may run on; None where the system does not say."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return None


def physical_cores(cpus: list[int] | None, sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """Physical cores among `cpus` (SMT siblings count once); 0 when unknown.

    Linux says which logical CPUs share a core in `topology/thread_siblings_list`; where
    that cannot be read, each logical CPU counts as a core.
    """
    if not cpus:
        return 0
    cores: set[str] = set()
    for cpu in cpus:
        try:
            siblings = (sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()
        except OSError:
            siblings = str(cpu)
        cores.add(siblings.strip())
    return len(cores)


def default_threads() -> int:
    """The thread count of the policy: physical cores this process may use.

    0 (ONNX Runtime's own count of physical cores) where the affinity cannot be read.
    """
    return physical_cores(usable_cpus())


@dataclass(frozen=True)
class _Sample:
    wall: float
    busy: float  # seconds the watched CPUs spent on anything, all processes together
    own: float  # this process's CPU seconds


class CpuWatch:
    """How much CPU other processes use, from the system's counters.

    Made when `Runtime` starts loading a package (its first look); `cores_free` decides
    the package's thread plan. `others()` gives the cores other processes used on
    average over the time since an earlier look (this process's own CPU time taken out),
    at least `MIN_WINDOW_S` long.
    """

    def __init__(
        self,
        cpus: list[int] | None = None,
        stat: Path = Path("/proc/stat"),
        loadavg: Path = Path("/proc/loadavg"),
    ):
        self.cpus = cpus if cpus is not None else usable_cpus()
        self.stat = stat
        self.loadavg = loadavg
        self._samples: deque[_Sample] = deque(maxlen=3)
        self.look()

    def look(self) -> None:
        """Take a sample of the counters."""
        sample = self._sample()
        if sample is not None:
            self._samples.append(sample)

    def others(self) -> float | None:
        """Cores other processes used since the last look that is `MIN_WINDOW_S` old.

        None when the counters cannot be read or no look is old enough.
        """
        now = self._sample()
        if now is None:
            return None
        for then in reversed(self._samples):
            wall = now.wall - then.wall
            if wall >= MIN_WINDOW_S:
                used = (now.busy - then.busy) - (now.own - then.own)
                return max(0.0, used / wall)
        return None

    def cores_free(self, wait: bool = False) -> bool:
        """Whether other processes leave the cores free enough for spinning threads.

        They did over the last window (`others`), and they do at this instant: a load
        that began a moment ago is a small part of a long window, so the threads that are
        runnable now count too, where the system says (Linux's /proc/loadavg): the
        fewest of a few readings over about 8 ms, less ourselves (the one thread asking),
        so a process that only woke for a moment does not count and a steady load does.
        With `wait`, a window shorter than `MIN_WINDOW_S` is waited out first.
        """
        if wait and self._samples:
            time.sleep(max(0.0, self._samples[0].wall + MIN_WINDOW_S - time.monotonic()))
        limit = FREE_SHARE * self.cores()
        others = self.others()
        if others is None or others > limit:
            return False
        now = _runnable(self.loadavg)
        return now is None or now <= limit

    def cores(self) -> int:
        """How many logical CPUs the counters cover."""
        return len(self.cpus) if self.cpus else (os.cpu_count() or 1)

    def _sample(self) -> _Sample | None:
        busy = _busy_seconds(self.stat, self.cpus)
        if busy is None:
            return None
        # Children waited for (the template renderer) count as this process.
        t = os.times()
        return _Sample(
            time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system
        )


def _runnable(loadavg: Path, readings: int = 4, gap_s: float = 0.002) -> int | None:
    """Other threads runnable on the whole system now.

    The fewest over a few readings of /proc/loadavg's 4th field ("runnable/all"), less the
    thread reading it.
    """
    fewest: int | None = None
    for i in range(readings):
        if i:
            time.sleep(gap_s)
        try:
            field = loadavg.read_text(encoding="ascii").split()[3]
            count = int(field.split("/")[0]) - 1
        except (OSError, UnicodeDecodeError, IndexError, ValueError):
            return None
        fewest = count if fewest is None else min(fewest, count)
    return fewest


def _busy_seconds(stat: Path, cpus: list[int] | None) -> float | None:
    """CPU seconds the given logical CPUs were not idle since boot (all processes)."""
    if sys.platform == "win32":
        return _windows_busy_seconds()
    try:
        lines = stat.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    wanted = {f"cpu{c}" for c in cpus} if cpus else {"cpu"}
    ticks = 0
    found = 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0] not in wanted:
            continue
        try:
            values = [int(v) for v in fields[1:9]]
        except ValueError:
            return None
        if len(values) < 8:
            return None
        # user nice system idle iowait irq softirq steal: all but idle and iowait are
        # time the CPU was not ours to take (steal: the hypervisor gave it elsewhere).
        ticks += sum(values) - values[3] - values[4]
        found += 1
    if found != len(wanted):
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return ticks / hz


def _windows_busy_seconds() -> float | None:
    """Busy CPU seconds of the whole machine from GetSystemTimes (100 ns units)."""
    import ctypes
    from ctypes import wintypes

    idle, kernel, user = wintypes.FILETIME(), wintypes.FILETIME(), wintypes.FILETIME()
    windll = getattr(ctypes, "windll", None)
    if windll is None or not windll.kernel32.GetSystemTimes(
        ctypes.byref(idle), ctypes.byref(kernel), ctypes.byref(user)
    ):
        return None

    def value(t: Any) -> int:
        return (int(t.dwHighDateTime) << 32) | int(t.dwLowDateTime)

    # Kernel time includes the idle time.
    return (value(kernel) + value(user) - value(idle)) / 1e7
