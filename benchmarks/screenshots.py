"""Screenshots of the app as a new user meets it, in the light and the dark palette.

Run under a real X server with real fonts (Xvfb), not the offscreen platform:

    xvfb-run -a -s "-screen 0 1366x768x24" python benchmarks/screenshots.py [--out DIR]
    xvfb-run -a -s "-screen 0 1024x600x24" python benchmarks/screenshots.py [--out DIR]

The window fills the screen, so the pictures show what fits a common laptop (1366×768)
and a small netbook-sized one (1024×600).

On a fresh profile (empty XDG data, config and cache folders, an empty Hugging Face
cache) it drives the real window through the whole flow, offline: the built-in demo
model is served by a local, deliberately slow hub so that the download can be seen.
Each moment is captured twice, as NAME-light.png and NAME-dark.png, in DIR (default
/tmp/mmforge-screenshots):

    1-model         the demo model inspected from the (local) hub
    2-download      the conversion downloading the weights, with rate and time left
    3-converting    the conversion past the download
    4-verify-pass   the f32 package verified: PASS
    5-verify-fail   an int4 package of the random demo model verified (named for when it
                    failed: it PASSes against its own rounded weights now), Details open
    6-chat          an answer streaming, the sent picture in the transcript
    7-error         the dialog for an attachment the model cannot take
    8-library       File > Library: the package and the downloaded model

With --compare it shows the Compare page only (no hub): the demo model converted here to
f32 and int4, answering one prompt and picture side by side:

    9-compare       both answers, their speeds, and where they part, marked
    9-compare-refused  the dialog for two packages of different models

With --browser it shows Find a model… against a local hub that lists a few released
models (the ids are real; the download counts are made up for the picture):

    11-find-model   a search, each result marked with its family, and the known models
    11-did-you-mean Inspect of a misspelt id: the closest names the hub has
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_REPO = "mmforge/demo-qwen2.5-vl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/mmforge-screenshots"))
    parser.add_argument("--compare", action="store_true", help="the Compare page only")
    parser.add_argument("--browser", action="store_true", help="Find a model… only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("DISPLAY"):
        raise SystemExit("No X server: run under xvfb-run (see the docstring)")
    home = Path(tempfile.mkdtemp(prefix="mmforge-shots-"))
    for name in ("CONFIG", "DATA", "CACHE"):
        os.environ[f"XDG_{name}_HOME"] = str(home / name.lower())
    os.environ["HF_HUB_CACHE"] = str(home / "hf-cache")
    os.environ.pop("HF_HUB_OFFLINE", None)
    sys.path.insert(0, str(ROOT))

    from mmforge.backend.tiny.demo import demo_checkpoint
    from tests.hubserver import HubServer

    demo = demo_checkpoint()
    if args.compare:
        from mmforge.backend.convert import convert

        pair = (home / "demo-f32", home / "demo-int4")
        for folder, dtype in zip(pair, ("f32", "int4"), strict=True):
            convert(str(demo), folder, dtype=dtype)
        return Flow(args.out, home, demo).compare(*pair)
    if args.browser:
        with HubServer() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            hub.state.listed = _listed()
            return Flow(args.out, home, demo).browser()
    with HubServer() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        hub.state.add_folder(DEMO_REPO, demo)
        files = hub.state.repos[DEMO_REPO].files
        weights = sum(len(d) for n, d in files.items() if n.endswith(".safetensors"))
        # About twenty seconds: long enough to see, as a user on a slow link sees it.
        hub.state.bytes_per_second = max(20_000, weights // 20)
        return Flow(args.out, home, demo).run()


def _listed() -> list[object]:
    """What the local hub lists for --browser: released ids, their types, made-up counts."""
    models = [
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", 3_100_000),
        ("Qwen/Qwen2.5-VL-3B-Instruct", "qwen2_5_vl", 2_400_000),
        ("Qwen/Qwen3-VL-2B-Instruct", "qwen3_vl", 900_000),
        ("google/gemma-3-4b-it", "gemma3", 800_000),
        ("llava-hf/llava-1.5-7b-hf", "llava", 600_000),
        ("LiquidAI/LFM2-VL-450M", "lfm2_vl", 150_000),
        ("someone/vl-experiment", None, 12),
    ]
    return [
        {
            "id": repo,
            "downloads": downloads,
            "pipeline_tag": "image-text-to-text",
            "tags": ["transformers", "safetensors"],
            **({"config": {"model_type": kind}} if kind else {}),
            **({"gated": "manual"} if repo.startswith("google/") else {}),
        }
        for repo, kind, downloads in models
    ]


class Flow:
    """The window driven step by step; each step waits for what the user would see."""

    def __init__(self, out: Path, home: Path, demo: Path):
        from PySide6.QtCore import QSettings
        from PySide6.QtGui import QFontDatabase, QIcon
        from PySide6.QtWidgets import QApplication

        from mmforge import resources
        from mmforge.gui.main_window import MainWindow

        self.out, self.home, self.demo = out, home, demo
        self.app = QApplication(sys.argv[:1])
        self.app.setStyle("Fusion")
        self.app.setWindowIcon(QIcon(str(resources.HERE / "mmforge.png")))
        QFontDatabase.addApplicationFont(str(resources.HERE / "DejaVuSans.ttf"))
        settings = QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat)
        self.window = MainWindow(settings)
        # The whole screen, as a maximised window on a 1366×768 or 1024×600 laptop.
        free = self.app.primaryScreen().availableGeometry()
        self.window.resize(free.width(), free.height())
        self.window.move(0, 0)
        self.window.show()

    def wait(self, what: str, ready: Callable[[], bool], timeout_s: float = 600) -> None:
        from PySide6.QtCore import QEventLoop

        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            self.app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.01)

    def settle(self, seconds: float = 0.4) -> None:
        end = time.monotonic() + seconds
        self.wait("the window to redraw", lambda: time.monotonic() > end)

    def shot(self, name: str, now: bool = False) -> None:
        """The screen under the window (dialogs included), light then dark.

        `now` draws the window itself at once, without running the event loop: a moment
        inside a signal handler stays that moment.
        """
        for scheme in ("light", "dark"):
            self.window.set_appearance(scheme)
            if now:
                from PySide6.QtCore import QEvent

                # Only the palette's own events, not the stream's: the moment stays.
                for kind in (
                    QEvent.Type.ApplicationPaletteChange,
                    QEvent.Type.PaletteChange,
                    QEvent.Type.StyleChange,
                    QEvent.Type.Polish,
                    QEvent.Type.PolishRequest,
                    QEvent.Type.LayoutRequest,
                    QEvent.Type.UpdateRequest,
                ):
                    self.app.sendPostedEvents(None, kind)
                picture = self.window.grab()
            else:
                self.settle(0.3)
                geometry = self.window.frameGeometry()
                screen = self.app.primaryScreen()
                picture = screen.grabWindow(
                    0, geometry.x(), geometry.y(), geometry.width(), geometry.height()
                )
            path = self.out / f"{name}-{scheme}.png"
            picture.save(str(path), "PNG")
            print(f"wrote {path}", flush=True)
        self.window.set_appearance("light")

    def run(self) -> int:
        w = self.window
        model, convert, verify, chat = w.model_view, w.convert_view, w.verify_view, w.chat_view
        failed: list[str] = []
        for runner in (model.runner, convert.runner, verify.runner):
            runner.failed.connect(lambda e: failed.append(str(e.get("message"))))
        chat.bridge.failed.connect(lambda e: failed.append(str(e.get("message"))))

        def ok(step: str) -> None:
            if failed:
                raise SystemExit(f"{step} failed: {failed[-1]}")

        # 1. The model, from the hub.
        model.source.setText(DEMO_REPO)
        model.inspect()
        self.wait("inspection", lambda: w.state.profile is not None or bool(failed))
        ok("inspect")
        self.settle()
        self.shot("1-model")

        # 2-3. Convert into the default folder: the download, then the conversion.
        model.next_button.click()
        convert.convert()
        self.wait(
            "the download to be a third done",
            lambda: convert.progress.stage_name == "download" and convert.stage_bar.value() > 330,
        )
        ok("download")
        self.shot("2-download")
        self.wait(
            "the conversion past the download",
            lambda: convert.progress.stage_name not in ("", "download", "resolve") or bool(failed),
        )
        ok("convert")
        self.shot("3-converting")
        self.wait("the package", lambda: bool(w.state.package) or bool(failed))
        ok("convert")
        package = w.state.package
        self.wait("the conversion to finish", lambda: not convert.runner.running)

        def verified() -> bool:
            return (not verify.runner.running and verify.report is not None) or bool(failed)

        # 4. Verify PASS.
        w.show_page(w.verify_view)
        verify.run()
        self.wait("verification", verified)
        ok("verify")
        self.settle()
        self.shot("4-verify-pass")

        # 5. Verify FAIL: the random demo model in int4 (the app does not offer it).
        from mmforge.backend.convert import convert as convert_package

        int4 = self.home / "demo-int4"
        convert_package(str(self.demo), int4, dtype="int4")
        verify.package.setText(str(int4))
        verify.reference.setText(str(self.demo))
        verify.report = None
        verify.run()
        self.wait("verification", verified)
        ok("verify int4")
        verify.details.set_expanded(True)  # the stage that differs, in the table
        self.settle()
        self.shot("5-verify-fail")

        # 6. Chat: an answer streaming, with the picture it was sent.
        from mmforge import resources
        from mmforge.backend.attachments import IMAGE

        w.show_page(chat)
        chat.package.setText(package)
        chat.load()
        self.wait("the model to load", lambda: chat._loaded or bool(failed))
        ok("load")
        chat.max_tokens.setValue(600)
        chat.strip.add(resources.probe_image(), IMAGE)
        chat.input.setPlainText("What is in this picture? Describe it in detail.")
        taken: list[int] = []

        def on_token(_: str) -> None:
            # The demo model streams thousands of tokens a second: the picture is taken
            # inside the handler of the 40th token, while the answer is still coming.
            if chat._tokens == 40 and not taken:
                taken.append(chat._tokens)
                chat._show_progress()
                self.shot("6-chat", now=True)

        chat.bridge.token.connect(on_token)
        chat.send()
        self.wait("the answer", lambda: (bool(taken) and not chat._busy) or bool(failed))
        ok("chat")
        chat.bridge.token.disconnect(on_token)

        # 7. An error dialog: audio for a model that takes images only.
        chat._add_files([str(resources.probe_audio())])
        self.settle()
        self.shot("7-error")
        from PySide6.QtWidgets import QMessageBox

        for box in w.findChildren(QMessageBox):
            box.close()

        # 8. The library: the package and the downloaded model, with sizes and dates.
        from mmforge.gui.library_dialog import LibraryDialog

        library = LibraryDialog(w.state, w)
        library.move(140, 120)
        library.show()
        self.settle()
        self.shot("8-library")
        library.close()
        w.close()
        return 0

    def compare(self, f32: Path, int4: Path) -> int:
        """The Compare page: f32 and int4 answering one prompt and picture."""
        import json
        import shutil

        from PySide6.QtWidgets import QMessageBox

        from mmforge import resources
        from mmforge.backend.attachments import IMAGE

        w = self.window
        view = w.compare_view
        failed: list[str] = []
        for bridge in view.bridges:
            bridge.failed.connect(lambda e: failed.append(str(e.get("message"))))
        w.compare_action.trigger()
        view.pair.choose_pair(f32, int4)
        view.max_tokens.setValue(60)
        view.strip.add(resources.probe_image(), IMAGE)
        view.input.setPlainText("What is in this picture? Describe it in detail.")
        done: list[bool] = []
        view.finished.connect(lambda: done.append(True))
        view.compare()
        self.wait("both answers", lambda: bool(done))
        if failed:
            raise SystemExit(f"compare failed: {failed[-1]}")
        print(f"verdict: {view.verdict.text()}", flush=True)
        for column in view.columns:
            print(f"{column.title.text()}: {column.speed.text()}", flush=True)
        self.settle()
        self.shot("9-compare")

        # Two packages of different models: refused, in plain words.
        other = self.home / "other-model-f32"
        shutil.copytree(f32, other)
        manifest = json.loads((other / "mmforge_manifest.json").read_text())
        manifest["source"] = "someone/another-model"
        # Another model's settings and weights (a copy of the same files is one model).
        manifest["checkpoint_digest"] = {
            "config": "config-sha256-v1:another",
            "weights": "tensors-sampled-sha256-v1:another",
        }
        (other / "mmforge_manifest.json").write_text(json.dumps(manifest))
        view.pair.choose_pair(f32, other)
        view.compare()
        self.settle()
        self.shot("9-compare-refused")
        for box in w.findChildren(QMessageBox):
            box.close()
        w.close()
        return 0

    def browser(self) -> int:
        """Find a model…: a search with family marks, then a misspelt id's near names."""
        w = self.window
        model = w.model_view
        browser = model.find_model()
        browser.query.setText("vl")
        browser.search()
        self.wait("the search", lambda: not browser.call.running)
        print(f"search: {browser.status.text()}", flush=True)
        self.settle()
        self.shot("11-find-model")
        browser.close()
        model.source.setText("Qwen/Qwen2.5-VL-3B-Instrcut")
        model.inspect()
        self.wait("the near names", lambda: model.browser is not browser and bool(model.browser))
        near = model.browser
        assert near is not None
        self.wait("the near names", lambda: not near.call.running)
        print(f"did you mean: {near.status.text()}", flush=True)
        self.settle()
        self.shot("11-did-you-mean")
        near.close()
        w.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
