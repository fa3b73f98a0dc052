"""Make PyPI's torchvision importable on a CPU-only torch (timm imports torchvision).

Why this is needed, precisely: every torchvision wheel on PyPI for Linux is a CUDA build. Its
``torchvision/_C.so`` links ``libtorch_cuda.so`` and ``libc10_cuda.so``, which a CPU build of
torch does not ship, so ``torch.ops.load_library`` raises ``OSError``. torchvision catches that
(``torchvision.extension._has_ops()`` is then False, and every op in ``torchvision.ops`` raises
its own "Couldn't load custom C++ ops" error when called), and guards all its kernel
registrations on ``_has_ops()`` except two: ``_meta_registrations.py`` registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` unconditionally, and registering a fake kernel for
an operator that has no schema raises ``RuntimeError: operator torchvision::nms does not exist``
at ``import torchvision``.

So, only when the extension cannot load, this defines those two schemas (as torchvision's C++
declares them) before torchvision is imported. Nothing else changes: the models, layers and
transforms are pure Python, and the C++ ops still raise torchvision's own error if called (the
zoo calls none of them). No PyTorch CPU wheel index is reachable here and PyPI has no source
distribution of torchvision, so this is the way to a working ``import timm``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

# The schemas of the two operators torchvision registers fake kernels for without checking.
_UNGUARDED = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARY: list[torch.library.Library] = []  # kept alive: a dropped Library removes its schemas


def prepare() -> bool:
    """Define the missing schemas if torchvision's C++ extension cannot load on this torch.

    Returns True when the schemas were defined here. Call before the first ``import torchvision``
    (or ``import timm``); a no-op when torchvision is absent, already imported, or loads its ops.
    """
    if "torchvision" in sys.modules or _LIBRARY:
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    if _extension_loads(Path(next(iter(spec.submodule_search_locations)))):
        return False
    lib = torch.library.Library("torchvision", "DEF")
    for schema in _UNGUARDED:
        lib.define(schema)
    _LIBRARY.append(lib)
    return True


def _extension_loads(package_dir: Path) -> bool:
    """Whether ``_C.so`` loads (then its own registrations define the schemas)."""
    candidates = sorted(package_dir.glob("_C*.so"))
    if not candidates:
        return False
    try:
        torch.ops.load_library(str(candidates[0]))
    except OSError:
        return False
    return True
