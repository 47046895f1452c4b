"""timm for Gemma 3n's reference, also where torchvision cannot load.

transformers runs Gemma 3n's vision tower through timm (TimmWrapperModel), and timm 1.0
imports torchvision when it is imported (`timm/layers/create_norm.py`, `timm/data`), for
names MobileNetV5 never calls: FrozenBatchNorm2d, data transforms, datasets. torchvision
does not load beside torch's CPU build from a wheel folder: PyPI's 0.28.0, made for torch
2.13, links CUDA's libraries and stops with "operator torchvision::nms does not exist".
Where torchvision cannot be imported, timm is imported with stand-ins for those names; a
stand-in raises if it is ever called, so nothing is computed through one, and they leave
`sys.modules` once timm is in.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

from mmforge.backend.errors import MmforgeError

_STAND_INS = (
    "torchvision",
    "torchvision.datasets",
    "torchvision.models",
    "torchvision.models.feature_extraction",
    "torchvision.ops",
    "torchvision.ops.misc",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
)


class _Absent(type):
    """A torchvision name timm refers to at import; using it raises."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _absent(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"torchvision's {cls.__name__} was called, but torchvision did not load here; "
            "mmforge imported timm without it for Gemma 3n's MobileNetV5, which does not use it"
        )


def _absent(name: str) -> Any:
    return _Absent(name, (), {})


def _module_getattr(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _absent(name)


def _torchvision_loads() -> bool:
    try:
        importlib.import_module("torchvision")
    except Exception:  # noqa: BLE001 - a broken build raises RuntimeError, not ImportError
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        return False
    return True


class TimmMissing(MmforgeError, ImportError):
    """timm is not installed: one clear message for verify, an ImportError for inspect."""


def import_timm() -> Any:
    """The timm module; TimmMissing, saying what to install, when it is not installed."""
    if "timm" in sys.modules:
        return sys.modules["timm"]
    if importlib.util.find_spec("timm") is None:
        raise TimmMissing(
            "transformers runs Gemma 3n's vision tower through timm, which is not installed",
            "Install it into mmforge's environment: pip install timm (or pip install "
            "--no-deps timm beside a CPU build of torch, whose torchvision would not load)",
        )
    if _torchvision_loads():
        return importlib.import_module("timm")
    modules = {name: types.ModuleType(name) for name in _STAND_INS}
    for name, module in modules.items():
        module.__getattr__ = _module_getattr  # type: ignore[method-assign]
        module.__path__ = []
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    sys.modules.update(modules)
    try:
        return importlib.import_module("timm")
    finally:
        for name in modules:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def timm_in_transformers() -> Iterator[Any]:
    """Let transformers build Gemma 3n on the timm that `import_timm` gives.

    transformers takes timm as present only beside a torchvision it can find
    (`is_timm_available`), and imports it into TimmWrapper's module only then. Inside this
    block its timm check passes and its modules hold the imported timm (and the two
    `timm.data` names Gemma3nVisionConfig reads); nothing else changes, and all of it is
    put back afterwards. Where transformers already sees timm this does nothing.
    """
    from transformers.utils import import_utils

    if import_utils.is_timm_available():
        yield import_timm()
        return
    timm = import_timm()
    from transformers.models.gemma3n import configuration_gemma3n
    from transformers.models.timm_wrapper import modeling_timm_wrapper

    check, message = import_utils.BACKENDS_MAPPING["timm"]
    names = {
        (modeling_timm_wrapper, "timm"): timm,
        (configuration_gemma3n, "ImageNetInfo"): timm.data.ImageNetInfo,
        (configuration_gemma3n, "infer_imagenet_subset"): timm.data.infer_imagenet_subset,
    }
    before = {key: getattr(*key, _MISSING) for key in names}
    import_utils.BACKENDS_MAPPING["timm"] = (lambda: True, message)
    for (module, name), value in names.items():
        setattr(module, name, value)
    try:
        yield timm
    finally:
        import_utils.BACKENDS_MAPPING["timm"] = (check, message)
        for (module, name), value in before.items():
            if value is _MISSING:
                delattr(module, name)
            else:
                setattr(module, name, value)


_MISSING = object()
