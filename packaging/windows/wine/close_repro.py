# ruff: noqa: T201, D101, D102, D103, TID251 - a reproduction script with Qt alone: it prints what it measures
"""Minimal reproduction of the GUI self-test that never exited under Wine (issue #32).

No mmforge code: a QMainWindow is shown, then closed from a timer as the self-test did,
then the app quits. Under Wine 8 with no display (no DISPLAY: Wine's null driver) and
Qt's Windows platform, `close()` returns True but no close event comes and the window
stays visible; `QApplication.quit()` then never returns: Qt 6 closes every window first
(QApplicationPrivate::tryCloseAllWidgetWindows) and retries for as long as a visible
window is left, at 100% of a core. With Qt's offscreen platform, or under Xvfb (Wine's
X11 driver), the close event comes and quit() returns.

Run it with the installed Python under Wine (the test prefix of test_windows.sh):
  wine python.exe close_repro.py            # no display: close event missing, quit spins
  wine python.exe close_repro.py exit       # the same, but QApplication.exit(): it returns
  WINEQT_QPA_PLATFORM=offscreen wine python.exe close_repro.py   # close event, returns
  xvfb-run -a wine python.exe close_repro.py                     # close event, returns
(Wine drops Unix variables named QT_*: QT_QPA_PLATFORM=offscreen never reaches the
program; WINEQT_QPA_PLATFORM is passed on as QT_QPA_PLATFORM.)
Measured under Wine 8.0 (Debian 12) with PySide6 6.11: as above. After 40 s a stuck
run prints where it is and ends (faulthandler).
"""

import faulthandler
import os
import sys

from PySide6.QtCore import QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

faulthandler.dump_traceback_later(40, exit=True)
app = QApplication(sys.argv[:1])
print("platform:", app.platformName(), "QT_QPA_PLATFORM:", os.environ.get("QT_QPA_PLATFORM"))


class Window(QMainWindow):
    def closeEvent(self, event: QCloseEvent) -> None:
        print("close event")
        super().closeEvent(event)


window = Window()
window.setCentralWidget(QLabel("close me"))
window.resize(400, 300)
window.show()


def finish() -> None:
    closed = window.close()
    print(f"close() returned {closed}; the window is visible: {window.isVisible()}", flush=True)
    if sys.argv[1:] == ["exit"]:
        app.exit(0)
    else:
        app.quit()
    print("quit returned", flush=True)


QTimer.singleShot(300, finish)
print("exec returned", app.exec(), flush=True)
