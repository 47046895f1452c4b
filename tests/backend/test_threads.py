"""The CPU thread policy: physical cores, and brief spinning if other processes leave the
cores free when a package loads (its speed is measured by benchmarks/chat.py --load and
--turns, not here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmforge.backend import threads
from mmforge.backend.threads import SPIN_US, CpuWatch, ThreadPlan, physical_cores


def _stat(path: Path, busy: list[int], idle: int = 1000) -> Path:
    """A /proc/stat with one line per CPU: `busy` ticks of user time each."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{i} {b} 0 0 {idle} 7 0 0 0 0 0" for i, b in enumerate(busy)]
    path.write_text("\n".join(lines) + "\nintr 1 2 3\n", encoding="ascii")
    return path


def test_physical_cores_count_smt_siblings_once(tmp_path: Path) -> None:
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(siblings + "\n")
    assert physical_cores([0, 1, 2, 3], tmp_path) == 2
    assert physical_cores([0, 2], tmp_path) == 1  # pinned to one core's two threads
    assert physical_cores([0, 1], tmp_path) == 2
    # No topology to read: each logical CPU is a core.
    assert physical_cores([7, 8], tmp_path) == 2
    assert physical_cores(None, tmp_path) == 0  # unknown: ONNX Runtime counts


def test_the_default_follows_the_affinity() -> None:
    # Run in a child pinned to one CPU, as `taskset -c 0` would.
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no affinity on this system")
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from mmforge.backend.threads import default_threads; print(default_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_plan_options() -> None:
    # Spinning threads poll for SPIN_US microseconds, then sleep.
    assert ThreadPlan(4, spinning=True).session_options() == {
        "intra_op_num_threads": 4,
        "session.intra_op.allow_spinning": "1",
        "session.intra_op.spin_duration_us": str(SPIN_US),
    }
    # 0: ONNX Runtime's own spin; no spinning: no spin time to set.
    assert "session.intra_op.spin_duration_us" not in ThreadPlan(4, True, 0).session_options()
    assert ThreadPlan(0, spinning=False).session_options() == {
        "intra_op_num_threads": 0,
        "session.intra_op.allow_spinning": "0",
    }


def test_others_use_is_the_counters_less_our_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    own = [5.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(os, "times", lambda: os.times_result((own[0], 0.0, 0.0, 0.0, clock[0])))
    hz = os.sysconf("SC_CLK_TCK")
    stat = _stat(tmp_path / "stat", [0, 0])
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.10 0.20 0.30 1/97 12345\n")
    watch = CpuWatch([0, 1], stat, loadavg)
    assert watch.cores() == 2
    assert watch.others() is None  # no window yet

    # 1 s later: the two CPUs were busy for 1.5 s in all, 0.5 s of it ours.
    clock[0] += 1.0
    own[0] += 0.5
    _stat(stat, [hz, hz // 2])
    assert watch.others() == pytest.approx(1.0)
    assert not watch.cores_free()  # a whole core taken by others, of 2

    # Our own spinning does not count against us.
    watch.look()
    clock[0] += 1.0
    own[0] += 1.9
    _stat(stat, [2 * hz, hz + 4 * hz // 10])  # 1.9 s more, all of it ours
    assert watch.others() == pytest.approx(0.0, abs=0.02)
    assert watch.cores_free()
    # ...unless other threads are runnable right now: a load that has only just begun
    # (ourselves, the one reading, not counted).
    loadavg.write_text("0.10 0.20 0.30 3/99 12345\n")
    assert not watch.cores_free()
    loadavg.write_text("0.10 0.20 0.30 2/99 12345\n")
    assert not watch.cores_free()  # one other thread: more than half a core
    loadavg.write_text("garbage\n")
    assert watch.cores_free()  # not said: the window alone decides

    # A look a moment ago is too short a window: the one before it is used.
    watch.look()
    clock[0] += 0.1
    assert watch.others() == pytest.approx(0.0, abs=0.1)


def test_the_look_at_load_waits_out_a_short_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(os, "times", lambda: os.times_result((0.0, 0.0, 0.0, 0.0, clock[0])))
    stat = _stat(tmp_path / "stat", [0, 0])
    watch = CpuWatch([0, 1], stat, tmp_path / "no-loadavg")
    clock[0] += 0.1  # the package checks took 0.1 s
    assert not watch.cores_free()  # too short a look: unknown, so no spinning
    assert watch.cores_free(wait=True)  # the rest of the window waited out
    assert slept == [pytest.approx(threads.MIN_WINDOW_S - 0.1)]
    assert watch.cores_free(wait=True) and len(slept) == 2 and slept[1] == 0.0


def test_only_the_usable_cpus_count(tmp_path: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    stat = _stat(tmp_path / "stat", [0, 0, 0])
    watch = CpuWatch([0, 1], stat)
    before = threads._busy_seconds(stat, [0, 1])
    _stat(stat, [0, 0, 50 * hz])  # someone busy on a CPU we may not use
    assert threads._busy_seconds(stat, [0, 1]) == before
    assert watch.cores() == 2
    # A CPU missing from the counters, or a damaged file: unknown, so no spinning.
    assert threads._busy_seconds(stat, [0, 5]) is None
    (tmp_path / "bad").write_text("cpu0 a b c\n")
    assert threads._busy_seconds(tmp_path / "bad", [0]) is None
    assert CpuWatch([0], tmp_path / "missing").cores_free() is False


def test_a_real_spinner_is_seen(tmp_path: Path) -> None:
    if not Path("/proc/stat").is_file() or not hasattr(os, "sched_getaffinity"):
        pytest.skip("no /proc/stat here")
    cpus = sorted(os.sched_getaffinity(0))
    spin = "import time\nend = time.time() + 5\nwhile time.time() < end: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in cpus]
    try:
        time.sleep(0.3)
        watch = CpuWatch(cpus)
        time.sleep(0.6)
        others = watch.others()
        runnable = threads._runnable(Path("/proc/loadavg"))
        free = watch.cores_free()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert others is not None and others > 0.5 * len(cpus)
    assert others > threads.FREE_SHARE * len(cpus)
    assert runnable is not None and runnable >= len(cpus)  # the spinners, steadily
    assert not free


def test_on_windows_the_counters_come_from_getsystemtimes_and_unknown_means_no_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated on Linux: no /proc, no affinity, and the kernel32 call unavailable.
    import ctypes

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.delattr(ctypes, "windll", raising=False)
    assert threads.usable_cpus() is None
    assert threads.default_threads() == 0  # ONNX Runtime counts its physical cores
    assert threads._busy_seconds(tmp_path / "stat", None) is None  # /proc is not read
    watch = CpuWatch(None, tmp_path / "stat", tmp_path / "loadavg")
    assert watch.cores() == (os.cpu_count() or 1)
    assert watch.others() is None
    assert not watch.cores_free()  # unknown counts as busy: threads sleep

    # With GetSystemTimes answering (kernel time includes idle), busy = kernel + user - idle.
    class FakeKernel32:
        def GetSystemTimes(self, idle, kernel, user):
            for ref, value in ((idle, 30_000_000), (kernel, 50_000_000), (user, 20_000_000)):
                ref._obj.dwLowDateTime, ref._obj.dwHighDateTime = value, 0
            return 1

    class FakeWindll:
        kernel32 = FakeKernel32()

    monkeypatch.setattr(ctypes, "windll", FakeWindll(), raising=False)
    assert threads._busy_seconds(tmp_path / "stat", None) == pytest.approx(4.0)
