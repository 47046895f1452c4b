"""What Windows lacks, simulated on Linux: `resource`, `os.sysconf`, a UTF-8 code page,
streams in a windowed process, `os.kill(pid, 0)` as a liveness probe, and paths over
MAX_PATH (260 characters) while long paths are disabled.

Issue #32: each of these made the app fail on Windows (the template check died on
`import resource`, printing `→` to a pipe raised UnicodeEncodeError under cp1252, the
memory figures called `os.sysconf`).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmforge.app import cli
from mmforge.app.stdio import utf8_stdio
from mmforge.backend import memory, processes, templates
from mmforge.backend.convert import outpath
from mmforge.backend.errors import MmforgeError
from mmforge.gui.errors import in_app_words  # imports Qt, which must not see "win32"
from mmforge.gui.safe_text import SHORT, SHORT_LINES, for_display

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}→{% endfor %}"


def no_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import resource` raises ImportError, as on Windows."""
    monkeypatch.setitem(sys.modules, "resource", None)
    with pytest.raises(ImportError):
        import resource  # noqa: F401


def cp1252(buffer: io.BytesIO) -> io.TextIOWrapper:
    """A stream as Windows gives a redirected stdout: the ANSI code page."""
    return io.TextIOWrapper(buffer, encoding="cp1252", write_through=True)


class FakeKernel32:
    """The few kernel32 functions the app calls through ctypes, answering as Windows."""

    def __init__(self) -> None:
        self.jobs: list[int] = []

    def GlobalMemoryStatusEx(self, ref: object) -> int:
        status = ref._obj  # type: ignore[attr-defined]
        assert status.dwLength == ctypes.sizeof(status)
        status.ullTotalPhys, status.ullAvailPhys = 16 << 30, 5 << 30
        return 1

    def GetCurrentProcess(self) -> int:
        return 2**64 - 1  # the pseudo-handle -1, as restype HANDLE gives it

    def K32GetProcessMemoryInfo(self, process: int, ref: object, size: int) -> int:
        assert isinstance(process, ctypes.c_void_p) and process.value == 2**64 - 1
        counters = ref._obj  # type: ignore[attr-defined]
        assert size == ctypes.sizeof(counters) == counters.cb
        counters.WorkingSetSize, counters.PeakWorkingSetSize = 300 << 20, 700 << 20
        return 1

    def CreateJobObjectW(self, attributes: object, name: object) -> int:
        return 77

    def SetInformationJobObject(self, job, kind, ref, size) -> int:
        limits = ref._obj
        assert kind == 9 and size == ctypes.sizeof(limits)
        self.jobs.append(limits.ProcessMemoryLimit)
        assert limits.BasicLimitInformation.LimitFlags == 0x100
        return 1

    def AssignProcessToJobObject(self, job, process) -> int:
        # What ctypes could pass: a plain int over 32 bits fails to convert (ArgumentError).
        assert isinstance(process, ctypes.c_void_p) and process.value == 2**64 - 1
        return 1


@pytest.fixture
def windows_ctypes(monkeypatch: pytest.MonkeyPatch) -> FakeKernel32:
    kernel32 = FakeKernel32()
    # Plain functions, as ctypes' are: the app sets `restype` on some.
    functions = {
        name: (lambda method: lambda *args: method(*args))(getattr(kernel32, name))
        for name in dir(FakeKernel32)
        if name[0].isupper()
    }
    monkeypatch.setattr(
        ctypes, "windll", SimpleNamespace(kernel32=SimpleNamespace(**functions)), raising=False
    )
    return kernel32


def test_render_child_runs_without_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    no_resource(monkeypatch)
    request = {"template": TEMPLATE, "messages": [{"role": "user", "content": "hi"}]}
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    monkeypatch.setattr(sys, "stdout", out)
    assert templates.render_child() == 0
    answer = json.loads(out.getvalue())
    assert answer == {"ok": True, "chars": len("<|user|>hi→")}


def test_render_limit_without_resource_is_a_job_object(
    monkeypatch: pytest.MonkeyPatch, windows_ctypes: FakeKernel32
) -> None:
    no_resource(monkeypatch)
    assert templates.limit_this_process() == "job"
    assert windows_ctypes.jobs == [templates.MEMORY_BYTES]


def test_render_limit_without_resource_or_windows_is_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_resource(monkeypatch)
    monkeypatch.delattr(ctypes, "windll", raising=False)
    assert templates.limit_this_process() == "none"


def test_memory_figures_without_sysconf_or_resource(
    monkeypatch: pytest.MonkeyPatch, windows_ctypes: FakeKernel32
) -> None:
    no_resource(monkeypatch)
    monkeypatch.delattr(os, "sysconf")

    def no_proc(path: str, *args: object, **kwargs: object) -> object:
        raise FileNotFoundError(path)

    monkeypatch.setattr(memory, "open", no_proc, raising=False)  # no /proc on Windows
    assert memory.total_bytes() == 16 << 30
    assert memory.available_bytes() == 5 << 30
    assert memory.current_rss_bytes() == 300 << 20
    assert memory.peak_rss_bytes() == 700 << 20
    assert memory.peak_rss_bytes(children=True) == 0


def test_memory_with_proc_but_no_sysconf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wine: Linux's /proc is visible, os.sysconf is not; nothing raises."""
    monkeypatch.delattr(os, "sysconf")
    monkeypatch.delattr(ctypes, "windll", raising=False)
    assert memory.total_bytes() is None
    assert memory.current_rss_bytes() > 0  # the peak, from resource
    assert (memory.available_bytes() or 0) > 0  # MemAvailable


def test_the_model_card_gets_windows_memory(
    monkeypatch: pytest.MonkeyPatch, windows_ctypes: FakeKernel32
) -> None:
    from mmforge.gui import fit

    monkeypatch.delattr(os, "sysconf")
    assert fit.total_memory_bytes() == 16 << 30


def test_printing_arrows_to_a_cp1252_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    stream = cp1252(buffer)
    with pytest.raises(UnicodeEncodeError):  # what Windows did before
        print("a → b", file=stream)
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "stderr", cp1252(io.BytesIO()))
    utf8_stdio()
    print("a → b 你好")
    assert buffer.getvalue().decode("utf-8").endswith("a → b 你好\n")
    assert sys.stderr.encoding == "utf-8"


def test_the_cli_reconfigures_before_it_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", cp1252(buffer))
    monkeypatch.setattr(cli, "_run", lambda args: print("checkpoint → package") or 0)
    assert cli.main(["demo"]) == 0
    assert "checkpoint → package" in buffer.getvalue().decode("utf-8")


def test_a_windowed_process_gets_null_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """pythonw.exe (the Start-menu shortcut) starts with sys.stdout and sys.stderr None."""
    for name in ("stdout", "stderr", "stdin"):
        monkeypatch.setattr(sys, name, None)
    utf8_stdio()
    print("a stray line → nowhere")
    print("and a warning", file=sys.stderr)
    assert sys.stdin.read() == ""


def test_worker_pipes_are_utf8_whatever_the_code_page(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, object]] = []

    class Stop(Exception):
        pass

    def popen(*args: object, **kwargs: object) -> None:
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", popen)
    from mmforge.backend.worker.client import WorkerJob

    with pytest.raises(Stop):
        WorkerJob("inspect", {})
    with pytest.raises(Stop):
        templates.check_template(TEMPLATE, "a test")
    assert [kw.get("encoding") for kw in seen] == ["utf-8", "utf-8"]


def test_liveness_is_not_os_kill_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.kill(pid, 0) on Windows sends Ctrl+C (CTRL_C_EVENT is 0): never called there."""
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setattr(os, "name", "nt")
    monkeypatch.setattr(processes, "_windows_alive", lambda pid: pid == 4242)
    assert processes.process_alive(4242) and not processes.process_alive(4243)
    assert kills == []


def test_liveness_on_posix() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert processes.process_alive(os.getpid())
    assert not processes.process_alive(child.pid)


def test_a_slow_start_is_not_the_templates_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Wine (or a cold Windows start) the renderer's interpreter takes seconds to
    start: the render's clock starts in the child, once it has the request."""
    from mmforge.backend.worker import child

    slow = (
        "import time, sys; time.sleep(2.5); from mmforge.app.cli import main; "
        "sys.exit(main(['render-template']))"
    )
    monkeypatch.setattr(child, "app_command", lambda *args: [sys.executable, "-c", slow])
    monkeypatch.setattr(templates, "TIMEOUT_S", 1.0)  # the parent's share; the start is 2.5 s
    monkeypatch.setattr(templates, "_FORMS", {})
    assert templates.check_template(TEMPLATE, "a test") is not None


def test_a_template_that_never_ends_is_stopped_by_the_childs_clock() -> None:
    endless = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    )
    request = json.dumps({"template": endless, "messages": []})
    command = [sys.executable, "-m", "mmforge.app", "render-template"]
    done = subprocess.run(command, input=request, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout) == {"limit": f"it ran over {templates.TIMEOUT_S:.0f} s"}


def test_the_worker_reads_commands_off_descriptor_zero(tmp_path) -> None:
    """Descriptor 0 is the null device once the worker has its command pipe: a library
    that touches descriptor 0 while the listener waits (Windows' C runtime locks a
    descriptor for a whole blocking read) does not wait for the next command."""
    script = (
        "import os, sys, threading\n"
        "from mmforge.backend.worker.server import take_stdin\n"
        "commands = take_stdin()\n"
        "got = []\n"
        "t = threading.Thread(target=lambda: got.append(commands.readline()))\n"
        "t.start()\n"
        "assert os.read(0, 10) == b''  # the null device, not the pipe\n"
        "assert sys.stdin.read() == ''\n"
        "t.join(30)\n"
        "print(got)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input='{"cmd": "run"} →\n', capture_output=True,
        text=True, encoding="utf-8", timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(['{"cmd": "run"} →\n'])


class FakeWinreg:
    """The few `winreg` names the app uses, answering with LongPathsEnabled as given."""

    HKEY_LOCAL_MACHINE = 0x80000002

    def __init__(self, long_paths: int | None) -> None:
        self.long_paths = long_paths  # None: the value is missing
        self.read: list[tuple[int, str, str]] = []

    def OpenKey(self, root: int, name: str) -> contextlib.AbstractContextManager[str]:
        self.read.append((root, name, ""))
        return contextlib.nullcontext(name)

    def QueryValueEx(self, key: str, name: str) -> tuple[int, int]:
        self.read[-1] = (*self.read[-1][:2], name)
        if self.long_paths is None:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return self.long_paths, 4  # REG_DWORD


def windows_with(monkeypatch: pytest.MonkeyPatch, long_paths: int | None) -> FakeWinreg:
    """Windows as far as the path check sees: the platform and the registry."""
    registry = FakeWinreg(long_paths)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "winreg", registry)
    return registry


def deep_folder(root: Path, length: int) -> Path:
    """A package folder whose path is `length` characters long."""
    name = "x" * (length - len(str(root)) - 1)
    return root / name[:100] / name[100:] if len(name) > 200 else root / name


@pytest.mark.parametrize("long_paths", [0, None], ids=["disabled", "missing"])
def test_a_deep_package_folder_is_refused_with_long_paths_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, long_paths: int | None
) -> None:
    registry = windows_with(monkeypatch, long_paths)
    # The deepest path: OUT + its working folder's extra + the deepest file in it.
    allowed = outpath.WINDOWS_MAX_PATH - 1 - outpath.NAME_EXTRA - 1 - outpath.DEEPEST_IN_PACKAGE
    outpath.check_path_lengths(deep_folder(tmp_path, allowed), None)
    out = deep_folder(tmp_path, allowed + 1)
    with pytest.raises(MmforgeError) as caught:
        outpath.check_path_lengths(out, None)
    error = caught.value
    assert error.user_message.startswith(
        f"A path in the package would be {outpath.WINDOWS_MAX_PATH} characters long, and with "
        "long paths disabled Windows takes at most 259 (MAX_PATH)"
    )
    assert error.user_message.endswith(f"the package folder: {out}")
    assert error.hint is not None
    assert error.hint.startswith(f"Use a package folder of at most {allowed} characters (-o OUT)")
    assert r"LongPathsEnabled = 1 in HKLM\SYSTEM\CurrentControlSet\Control\FileSystem" in error.hint
    assert 'Group Policy "Enable Win32 long paths"' in error.hint
    # The app's dialog says it its way, the hint whole, the numbers before the cut.
    in_app = in_app_words(error.hint)
    assert "-o OUT" not in in_app and "the Package folder field, or File > Library…" in in_app
    assert for_display(in_app, SHORT, SHORT_LINES) == in_app
    assert "at most 259 (MAX_PATH)" in for_display(error.user_message, SHORT, SHORT_LINES)
    assert registry.read[0] == (
        registry.HKEY_LOCAL_MACHINE,
        r"SYSTEM\CurrentControlSet\Control\FileSystem",
        "LongPathsEnabled",
    )


def test_long_paths_enabled_or_not_windows_lets_any_depth(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = deep_folder(tmp_path, 400)
    outpath.check_path_lengths(out, "org/model")  # Linux: nothing to check
    windows_with(monkeypatch, 1)
    assert outpath.long_paths_enabled()
    outpath.check_path_lengths(out, "org/model")


def test_a_registry_that_cannot_be_read_or_no_winreg_is_long_paths_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = windows_with(monkeypatch, 1)
    assert outpath.long_paths_enabled()

    def denied(root: int, name: str) -> object:
        raise PermissionError(5, "Access is denied")

    monkeypatch.setattr(registry, "OpenKey", denied)
    assert not outpath.long_paths_enabled()
    monkeypatch.setitem(sys.modules, "winreg", None)  # import winreg raises ImportError
    assert not outpath.long_paths_enabled()


def test_a_deep_hub_cache_is_refused_for_a_hub_model_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    windows_with(monkeypatch, 0)
    repo = "org/" + "m" * 40
    # blobs/<sha-256>.mmforge-partial is 87; a Phi-4-multimodal adapter's snapshot entry 88.
    snapshot_entry = "snapshots/" + "0" * 40 + "/speech-lora/adapter_model.safetensors"
    assert len(snapshot_entry) == outpath.DEEPEST_IN_CACHE
    below = len("/models--org--" + "m" * 40) + 1 + outpath.DEEPEST_IN_CACHE
    monkeypatch.setenv("HF_HUB_CACHE", str(deep_folder(tmp_path, 259 - below)))
    outpath.check_path_lengths(tmp_path / "pkg", repo)
    monkeypatch.setenv("HF_HUB_CACHE", str(deep_folder(tmp_path, 260 - below)))
    with pytest.raises(MmforgeError) as caught:
        outpath.check_path_lengths(tmp_path / "pkg", repo)
    line = caught.value.one_line()
    assert line.startswith("A path in the Hugging Face cache would be 260 characters long")
    assert f"Set HF_HUB_CACHE to a folder of at most {259 - below} characters" in line
    assert '"Enable Win32 long paths"' in line
    outpath.check_path_lengths(tmp_path / "pkg", None)  # a local folder: no download


def test_the_cli_refuses_a_deep_folder_before_writing_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    windows_with(monkeypatch, 0)
    out = tmp_path / ("d" * 120) / ("e" * 120) / "model-int4"
    # A killed conversion's working folder: any conversion reaching its cleanup removes it.
    stale = out.parent / ".model-int4.mmforge-9999999-0123abcd"
    stale.mkdir(parents=True)
    code = cli.main(["convert", "org/model", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("mmforge: error: A path in the package would be ")
    assert f"the package folder: {out}. Use a package folder of at most" in err
    # The deepest path: a backup folder with a 7-digit pid, LFM2-VL's builder output in it.
    working = out.parent / f".{out.name}.mmforge-old-9999999-0123abcd"
    deepest = working / ".build" / "decoder" / "tokenizer_config.json"
    assert f"would be {len(str(deepest))} characters long" in err
    assert sorted(p.name for p in out.parent.iterdir()) == [stale.name]  # nothing written
