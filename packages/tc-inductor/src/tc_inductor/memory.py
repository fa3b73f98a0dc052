"""Memory planning for the generated wrapper: every buffer dies right after its last use.

Peak memory is what is alive at once. The wrapper is straight-line Python, so a local that is
never read again still holds its tensor until the call returns, unless it is deleted; eager
frees each temporary as soon as its last consumer has run. Two steps bring the wrapper there:

* :func:`free_dead` puts ``del`` after the last chunk (one chunk per scheduled step) that
  mentions each local, so tensors die as soon as their last reader has been launched. On CUDA
  the caching allocator hands the freed block to the next allocation on the stream, which
  runs after the reader: stream order makes this safe, as it does in eager.
* :class:`FreePool` reuses a dead buffer for a new output of the same dtype, device and size
  (reshaped when only the layout differs). A large buffer is reused only in the very next step:
  held back for a later match it would stay allocated in between and raise the peak, which is
  what ``del`` and the allocator already avoid. A small one (at most ``SMALL`` bytes, at most
  ``HELD`` bytes of them at once) waits for any later step: a batch-norm's partial sums, a
  weight's low-precision copy, a softmax's row statistics recur in every layer, and each reuse
  saves an allocation (a few µs of host time on CUDA) for a bounded, tiny rise of the peak. A
  buffer no later step takes is deleted after its last reader as before: only a reuse extends a
  buffer's life.

Inputs die early too when the caller hands its references over (a *boxed* call, a list the
wrapper clears): the backward graph's saved activations are freed one by one as the backward
goes, as eager's autograd frees them node by node.
"""

from __future__ import annotations

import re
from typing import Any

import sympy
import torch

from .codegen.common import pointer_name
from .symbolic import is_symbolic, provably_le, py_tuple

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNED = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*,?\s*=(?!=)")
_POINTER_PREFIX = pointer_name("")


def free_dead(chunks: list[list[str]]) -> list[str]:
    """The wrapper body: ``chunks`` joined, with ``del`` of each local after the last chunk
    reading it. Only names the wrapper assigns are deleted (never globals: kernels, extern
    ops, held constants), and never one the last chunk (the ``return``) reads."""
    # pointers are ints: deleting them frees nothing
    assigned = {name for chunk in chunks for line in chunk for name in _assigned(line)
                if not name.startswith(_POINTER_PREFIX)}
    last: dict[str, int] = {}
    for index, chunk in enumerate(chunks):
        for name in _mentions(chunk):
            if name in assigned:
                last[name] = index
    returned = _mentions(chunks[-1])
    dying: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in returned and index < len(chunks) - 1:
            dying.setdefault(index, []).append(name)
    body: list[str] = []
    for index, chunk in enumerate(chunks):
        body += chunk
        if index in dying:
            body.append(f"del {', '.join(sorted(dying[index]))}")
    return body


def _assigned(line: str) -> list[str]:
    match = _ASSIGNED.match(line)
    return [n.strip() for n in match.group(1).split(",")] if match else []


def _mentions(chunk: list[str]) -> set[str]:
    """Names a chunk reads or writes; ``ptr_<name>`` (a buffer's pointer, read by later launches
    without the tensor) counts as ``<name>``, since the tensor must outlive every launch using it."""
    names: set[str] = set()
    for line in chunk:
        code = line.split("#", 1)[0]
        for name in _IDENT.findall(code):
            names.add(name)
            if name.startswith(_POINTER_PREFIX):
                names.add(name[len(_POINTER_PREFIX):])
    return names


class FreePool:
    """Dead buffers a new output may take over (see the module docstring)."""

    SMALL = 1 << 20  # bytes: a dead buffer up to this size waits for any later step
    HELD = 8 << 20  # bytes: at most this much waits at once (the oldest goes first)

    def __init__(self):
        self._ready: list[tuple[str, tuple]] = []    # died in the step just generated
        self._pending: list[tuple[str, tuple]] = []  # dying in the step being generated
        self._held: list[tuple[str, tuple, int]] = []  # small ones that died before, oldest first

    def add(self, name: str, layout: tuple) -> None:
        self._pending.append((name, layout))

    def next_step(self) -> None:
        for name, layout in self._ready:  # not taken by this step: small ones wait, others die
            nbytes = _nbytes(layout)
            if nbytes is not None and nbytes <= self.SMALL:
                self._held.append((name, layout, nbytes))
        total = sum(nbytes for _, _, nbytes in self._held)
        while total > self.HELD:
            total -= self._held.pop(0)[2]
        self._ready, self._pending = self._pending, []

    def take(self, shape: Any, stride: Any, dtype: torch.dtype, device: Any) -> str | None:
        """A dead buffer's name (as an expression of the wanted layout) for an output, or None.
        The last step's dead buffers first, then the small ones held from before."""
        want = (tuple(shape), tuple(stride), dtype, str(torch.device(device)))
        size = _span(shape, stride)
        for pool in (self._ready, self._held):
            for i, (name, layout, *_) in enumerate(pool):
                if _key(layout) == want:
                    del pool[i]
                    return name
            for i, (name, layout, *_) in enumerate(pool):
                have_shape, have_stride, have_dtype, have_device = layout
                have = _span(have_shape, have_stride)
                if (have_dtype, str(torch.device(have_device))) == want[2:] and size is not None \
                        and have is not None and _fits(size, have, have_shape):
                    del pool[i]
                    return f"{name}.as_strided({_tup(shape)}, {_tup(stride)})"
        return None


def _nbytes(layout: tuple) -> int | None:
    """Bytes a dense static layout holds (None over symbolic sizes: never held)."""
    shape, stride, dtype, _ = layout
    span = _span(shape, stride)
    if span is None or is_symbolic(span) or not _same(span, _numel(shape)):
        return None
    return int(span) * dtype.itemsize


def _fits(size: Any, have: Any, have_shape: Any) -> bool:
    """Whether a dead dense buffer reaching ``have`` elements can hold a layout reaching ``size``:
    equal spans; over symbolic sizes also a span provably no larger, for every size."""
    if not _same(have, _numel(have_shape)):
        return False
    if is_symbolic(size) or is_symbolic(have):
        return provably_le(size, have)
    return have == size


def _same(a: Any, b: Any) -> bool:
    return a == b if not (is_symbolic(a) or is_symbolic(b)) else sympy.expand(a - b) == 0


def _key(layout: tuple) -> tuple:
    shape, stride, dtype, device = layout
    return tuple(shape), tuple(stride), dtype, str(torch.device(device))


def _span(shape: Any, stride: Any) -> Any:
    """Elements of storage a layout reaches (a sympy expression over symbolic sizes, which are
    >= 2; None for layouts whose strides are not all known to be non-negative)."""
    if any(isinstance(n, int) and n == 0 for n in shape):
        return 0
    if any(is_symbolic(st) and not st.is_nonnegative for st in stride):
        return None
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride))
    return sympy.expand(span) if is_symbolic(span) else int(span)


def _numel(shape: Any) -> Any:
    n = 1
    for s in shape:
        n = n * s
    return sympy.expand(n) if is_symbolic(n) else int(n)


def _tup(values: Any) -> str:
    return py_tuple(values)
