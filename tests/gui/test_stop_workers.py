"""Cancel, Stop and closing the window end a worker whatever it is doing (it may hang)."""

from __future__ import annotations

import time

from PySide6.QtCore import QSettings

from mmforge.gui import bridge
from tests.hung_worker import alive, end, use_hung_worker, wait_hung

GRACE_S = 0.5  # how long the GUI waits for a worker to stop by itself, in these tests
ENDED_S = 8  # by when a hung worker must be gone (its grace, SIGTERM ignored, SIGKILL)


def test_cancel_ends_a_job_whose_worker_hangs(qtbot, tmp_path, monkeypatch):
    use_hung_worker(monkeypatch, tmp_path / "hung")
    monkeypatch.setattr(bridge, "STOP_GRACE_S", GRACE_S, raising=False)
    runner = bridge.JobRunner()
    runner.start("convert", {"source": "x", "output": str(tmp_path / "out")})
    pids = wait_hung(tmp_path / "hung")
    try:
        with qtbot.waitSignals([runner.cancelled, runner.finished], timeout=ENDED_S * 1000):
            runner.cancel()
        assert not runner.running and not any(alive(pid) for pid in pids)
    finally:
        end(pids)


def test_closing_the_window_ends_hung_workers_promptly(qtbot, tmp_path, monkeypatch):
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(bridge, "CLOSE_GRACE_S", GRACE_S, raising=False)
    win = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: not win.chat_view.eps.running, timeout=60_000)
    use_hung_worker(monkeypatch, tmp_path / "hung")
    win.convert_view.runner.start("convert", {"source": "x", "output": str(tmp_path / "o")})
    pids = wait_hung(tmp_path / "hung")
    try:
        start = time.monotonic()
        win.close()
        assert time.monotonic() - start < ENDED_S
        assert not any(alive(pid) for pid in pids)
    finally:
        end(pids)


def test_closing_a_chat_whose_worker_hangs_loading_ends_it(qtbot, tmp_path, monkeypatch):
    use_hung_worker(monkeypatch, tmp_path / "hung")
    monkeypatch.setattr(bridge, "CLOSE_GRACE_S", GRACE_S, raising=False)
    chat = bridge.ChatBridge()
    chat.load(tmp_path / "package")
    pids = wait_hung(tmp_path / "hung")
    try:
        start = time.monotonic()
        with qtbot.waitSignal(chat.closed, timeout=ENDED_S * 1000):
            chat.close()
        assert time.monotonic() - start < ENDED_S
        assert not any(alive(pid) for pid in pids)
    finally:
        end(pids)


class _Job:
    """Records what the bridge asks of a worker."""

    def __init__(self):
        self.asked: list[str] = []

    def cancel(self) -> None:
        self.asked.append("cancel")

    def kill(self) -> None:
        self.asked.append("kill")


def test_a_stop_or_cancel_button_waits_its_grace_before_ending_a_worker(qtbot):
    # clicked(bool) passes False: taken as a grace of 0 s, it ended a worker mid-answer.
    from PySide6.QtWidgets import QPushButton

    chat, runner = bridge.ChatBridge(), bridge.JobRunner()
    chat._job, chat._running = _Job(), 1
    runner._job = _Job()
    stop, cancel = QPushButton(), QPushButton()
    stop.clicked.connect(chat.stop)
    cancel.clicked.connect(runner.cancel)
    stop.click()
    cancel.click()
    qtbot.wait(300)
    assert chat._job.asked == [] and runner._job.asked == ["cancel"]
    chat._job = runner._job = None


def test_the_self_test_ends_its_workers_and_the_app_when_the_window_will_not_close(
    qtbot, qapp, tmp_path, monkeypatch
):
    """Under Wine with no display, close() on the window never reaches closeEvent and
    Qt's quit() (which closes every window first) then spun for ever: the self-test must
    end the workers itself and leave the event loop whatever the window does. Here the
    window refuses to close, which on Linux stops quit() the same way."""
    from PySide6.QtCore import QTimer

    from mmforge.gui.main_window import MainWindow
    from mmforge.gui.self_test import SelfTest

    class Stuck(MainWindow):
        refused = 0
        stuck = True

        def closeEvent(self, event):
            if self.stuck:
                self.refused += 1
                event.ignore()
            else:
                super().closeEvent(event)

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(bridge, "CLOSE_GRACE_S", GRACE_S, raising=False)
    win = Stuck(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: not win.chat_view.eps.running, timeout=60_000)
    use_hung_worker(monkeypatch, tmp_path / "hung")
    win.chat_view.bridge.load(tmp_path / "package")
    pids = wait_hung(tmp_path / "hung")
    test = SelfTest(win)
    # The loop did not end: leave it. Stopped at the end, or it would end a later test's.
    watchdog = QTimer(singleShot=True, interval=ENDED_S * 2000)
    watchdog.timeout.connect(lambda: qapp.exit(99))
    try:
        QTimer.singleShot(0, lambda: test._fail("ended by the test"))
        watchdog.start()
        start = time.monotonic()
        code = qapp.exec()
        assert code == 1, "the event loop did not end (exit 99) or the self-test said it passed"
        assert time.monotonic() - start < ENDED_S
        assert win.refused, "the window was not asked to close"
        assert not any(alive(pid) for pid in pids)
    finally:
        watchdog.stop()
        win.stuck = False
        win.close()
        end(pids)
