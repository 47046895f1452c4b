"""Screenshots of each page of the app, taken while it runs the demo flow.

Run under a real X server with real fonts (Xvfb), not the offscreen platform:

    xvfb-run -a -s "-screen 0 1400x900x24" python benchmarks/screenshots.py [--out DIR]

Writes model.png, convert.png, verify.png and chat.png into DIR (default
/tmp/mmforge-screenshots). Offline: it uses the built-in demo model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/mmforge-screenshots"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("DISPLAY"):
        raise SystemExit("No X server: run under xvfb-run (see the docstring)")
    home = Path(tempfile.mkdtemp(prefix="mmforge-shots-"))
    os.environ.setdefault("XDG_CONFIG_HOME", str(home / "config"))
    os.environ.setdefault("XDG_DATA_HOME", str(home / "data"))
    os.environ["HF_HUB_OFFLINE"] = "1"

    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFontDatabase
    from PySide6.QtWidgets import QApplication

    from mmforge import resources
    from mmforge.gui.main_window import MainWindow
    from mmforge.gui.self_test import SelfTest

    app = QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    QFontDatabase.addApplicationFont(str(resources.HERE / "DejaVuSans.ttf"))
    window = MainWindow(QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat))
    window.resize(1280, 820)
    window.show()

    def snapshot(page: str) -> None:
        path = args.out / f"{page}.png"
        window.grab().save(str(path))
        print(f"wrote {path}", flush=True)

    test = SelfTest(window, snapshot)
    test.start()
    app.exec()
    return 0 if test.ok else 1


if __name__ == "__main__":
    sys.exit(main())
