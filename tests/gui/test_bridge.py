"""The Qt binding itself: Python-side emits must not leak references (PySide6 6.12.0 did)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal, Slot


class _Source(QObject):
    value = Signal(int)


class _Sink(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    @Slot(int)
    def on_value(self, value: int) -> None:
        self.seen += 1


def test_emitting_from_python_keeps_the_refcount_of_true(qtbot):
    source, sink = _Source(), _Sink()
    source.value.connect(sink.on_value)
    before = sys.getrefcount(True)
    for i in range(200):
        source.value.emit(i)
    assert sink.seen == 200
    # 6.12.0 dropped one reference per emit and aborted the app after a few hundred.
    assert sys.getrefcount(True) >= before - 5
