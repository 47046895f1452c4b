"""The mouse wheel scrolls the page; it changes a setting only in the field being edited.

Qt's drop-downs, number boxes and sliders take every wheel turn over them, focused or
not, so scrolling a settings page on a small screen changed whatever passed under the
pointer ("When the conversation gets too long" among them). The guard hands such a turn
to the page's scroll area instead, unless the user clicked into the field first.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

_VALUE_WIDGETS = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _value_widget(obj: QObject) -> QWidget | None:
    """The drop-down, number box or slider `obj` is (or is part of), if any.

    A scroll bar keeps the wheel (that is what it is for), and so does anything inside a
    scroll area of its own (an open drop-down's list).
    """
    node: QObject | None = obj
    while isinstance(node, QWidget):
        if isinstance(node, QScrollBar | QAbstractScrollArea):
            return None
        if isinstance(node, _VALUE_WIDGETS):
            return node
        node = node.parentWidget()
    return None


def _scroll_area(widget: QWidget) -> QAbstractScrollArea | None:
    node = widget.parentWidget()
    while node is not None:
        if isinstance(node, QAbstractScrollArea):
            return node
        node = node.parentWidget()
    return None


class WheelGuard(QObject):
    """An application event filter: unfocused value widgets pass the wheel to their page."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Hand an unfocused value widget's wheel turn to its scroll area; keep its value.

        Qt gives a widget with `Qt.WheelFocus` (drop-downs and number boxes have it) the
        focus on a wheel turn before any filter sees the turn, so the field would always
        look clicked into: each such widget is made `Qt.StrongFocus` (click or Tab) as it
        is first shown. (Offscreen, where no window is active, Qt gives no focus: the
        tests passed while the real window changed values.)
        """
        if event.type() == QEvent.Type.Polish and isinstance(watched, _VALUE_WIDGETS):
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if event.type() != QEvent.Type.Wheel or not isinstance(event, QWheelEvent):
            return False
        widget = _value_widget(watched)
        if widget is None or widget.hasFocus():
            return False
        area = _scroll_area(widget)
        if area is not None:
            viewport = area.viewport()
            moved = QWheelEvent(
                viewport.mapFromGlobal(event.globalPosition().toPoint()).toPointF(),
                event.globalPosition(),
                event.pixelDelta(),
                event.angleDelta(),
                event.buttons(),
                event.modifiers(),
                event.phase(),
                event.inverted(),
            )
            QApplication.sendEvent(viewport, moved)
        return True  # the value stays as it is


def install(app: QApplication) -> WheelGuard:
    """Install the guard on the application (once); returns it."""
    guard = app.findChild(WheelGuard)
    if guard is None:
        guard = WheelGuard(app)
        app.installEventFilter(guard)
    return guard
