"""Launching a Triton kernel of a fixed config without ``JITFunction.run``'s per-call work.

``JITFunction.run`` (10–20 µs a launch) binds arguments, computes a specialisation key, looks
the compiled kernel up, builds launch metadata, and only then calls the compiled kernel's C
launcher. Our kernels have one config, static grids and sizes, so once the ahead-of-time compile
has returned the ``CompiledKernel``, the wrapper can call that launcher directly: what ``run``
ends in for triton 3.x, ``kernel.run(grid0, grid1, grid2, stream, function, packed_metadata,
launch_metadata, enter_hook, exit_hook, *all_args)`` with constexpr values included (the C
launcher's signature lists them and skips them), and pointers passed as ints (``data_ptr()``
read once here; the C launcher takes an int as it is).

The direct path checks itself at its first launch, against a second launch path that is
Triton's own: ``run``'s binder and argument packing on the launch's arguments (``triton_load.bind``:
which parameters are constexprs, in which order the launcher takes them, their values), then
the compiled kernel's own launcher (``CompiledKernel.run``, Python ``__call__``: scratch memory,
launch metadata) with the bound arguments. That is everything ``JITFunction.run`` does after its
kernel-cache lookup, without the lookup: a miss there (always, in a process that loaded the
kernel from the artifact store) computes Triton's compiler cache key, seconds in a fresh process
(``triton_load.py``). The check first asks whether ``run`` would launch this compiled kernel at
all: the binding's signature, constants and attributes must be the kernel's (``src``); where they
differ, this launch goes through ``run`` (which compiles what it needs), and the check waits for
a later launch (a few times, then ``run`` for good). Then both paths launch and the outputs must
be equal; any failure or difference falls back to ``run`` for good (logged under
``TC_LOGS=perf_hints``). So what the check protects (argument order, constexpr handling and
the launcher call of the direct path) is still compared with Triton's, at every process's first
launch, with no compile and no cache key. The direct launch compared there, and used from then on
as ``launch`` (the wrapper calls ``k<n>.launch(...)``), is tc's own C launcher where it can be had
(``cuda_launch.py``: the same arguments to ``cuLaunchKernel`` without Python or Triton's argument
parsing), else ``_direct``. A function that is no ``JITFunction`` (the
interpreter, tests' stand-ins) is compared with ``run`` itself. ``run`` is also used where the
direct path cannot be (the interpreter, a failed ahead-of-time compile, launch hooks set by a
profiler, a pointer whose alignment differs from what the kernel was specialised for).

A comparison that tc's C launcher passed is recorded (``on_verified``: the artifact store's
``"triton_verified"`` entry, keyed by the kernel's source, signature, config, Triton's version, the
device's capability and this launch code). A later process launches that kernel with a
``VerifiedLauncher``: its binary read from Triton's cache (``triton_load.load_verified``), tc's C
launcher from the first launch on, no ``JITFunction`` and no second comparison; ``run`` only for
what the C launcher hands back.
"""

from __future__ import annotations

from functools import reduce
from operator import or_
from typing import Any

import torch

import tc_ir

from . import cuda_launch, triton_load

_log = tc_ir.logs.get_logger("perf_hints")
CHECKS = 3  # first launches whose binding is not the compiled kernel's, before run for good


class TritonLauncher:
    """``launcher(grid0, *pointers_and_ints)``: one launch of ``fn`` with ``consts``."""

    def __init__(self, fn: Any, consts: dict, n_pointers: int, outputs: range, compiled: Any = None,
                 device: int = 0, options: dict | None = None, varying_ints: bool = False,
                 on_verified: Any = None):
        self.fn, self.consts, self.n_pointers, self.outputs = fn, dict(consts), n_pointers, outputs
        # the int arguments change between launches (sizes): ``compiled`` takes them unspecialised
        # as int32 (see ``TritonKernelWriter.unspecialised``); one past int32 goes through run
        self.varying_ints = varying_ints
        self.run_kwargs = {**consts, **(options or {})}  # compile options: run's key, not launch args
        # the C launcher takes the kernel's parameters (constexprs included) in their order, and
        # nothing else: a compile option of the config (num_warps) made every direct launch a
        # TypeError (one argument too many), so every kernel fell back to run for good
        names = getattr(fn, "arg_names", None) or list(consts)
        self.const_values = tuple(consts[name] for name in names if name in consts)
        self.compiled, self.device = compiled, device
        self._stream = self._knobs = None  # triton's current-stream getter and runtime knobs
        self._c_launch, self._c_args = None, ()  # bound at the first direct launch (``_bind``)
        self._checks = CHECKS
        # called with ``verified()`` once tc's C launcher has launched as Triton does (``_first``)
        self.on_verified = on_verified
        self.launch = self._first if compiled is not None else self._via_run

    def __call__(self, grid0: int, *args: Any) -> None:
        self.launch(grid0, *args)

    def _via_run(self, grid0: int, *args: Any) -> None:
        try:
            self.fn[(grid0,)](*args, **self.run_kwargs)
        except Exception as e:
            # an index check under the interpreter: eager's IndexError, not Triton's wrapper of it
            if isinstance(e.__cause__, IndexError):
                raise e.__cause__ from None
            if _is_triton_error(e):  # the kernel did not build (Triton compiles at launch): no write happened
                e.tc_kernel_failed = True
            raise

    def _first(self, grid0: int, *args: Any) -> None:
        self.launch = self._via_run
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return self._via_run(grid0, *args)  # no comparison inside a CUDA graph capture
        before = None
        try:
            if self._stream is None:
                from triton import knobs
                from triton.runtime import driver

                self._stream, self._knobs = driver.active.get_current_stream, knobs.runtime
            # an output written in place into an input (inplace.py) holds the input's old value:
            # kept, and put back before each further launch, so each computes from the same values
            before = [args[i].clone() for i in self.outputs] if _in_place(args, self.outputs, self.n_pointers) else None
            if not self._reference(grid0, *args):
                return
            expected = [args[i].clone() for i in self.outputs]
            _restore(args, self.outputs, before)
            native = self._native(len(args))
            direct = native or self._direct
            direct(grid0, *args)
            same = all(torch.equal(e, args[i]) or (e.is_floating_point() and torch.allclose(
                e, args[i], rtol=0, atol=0, equal_nan=True)) for e, i in zip(expected, self.outputs))
            if not same:
                _log.info("direct Triton launch of %s differs from JITFunction.run; using run", self.fn)
                _restore(args, self.outputs, before)
                return self._via_run(grid0, *args)
            self.launch = direct
            if native is not None and self.on_verified is not None:
                self.on_verified(self.verified(len(args)))
        except Exception as e:  # never a wrong answer: run is always right
            _log.info("direct Triton launch of %s failed (%s: %s); using JITFunction.run", self.fn,
                      type(e).__name__, e)
            _restore(args, self.outputs, before)
            self._via_run(grid0, *args)

    def verified(self, n_args: int) -> dict:
        """What a later process needs to launch this kernel with tc's C launcher without
        Triton's ``JITFunction`` (``triton_load.load_verified``, ``VerifiedLauncher``): the
        compiled kernel's hash and name, the launch's argument kinds, and what ``run`` derives
        its compile options from (the launch's keyword arguments and the function's ``debug``)."""
        k = self.compiled
        return {"hash": k.hash, "name": k.name, "kinds": cuda_launch.kinds(dict(k.src.signature), n_args).decode(),
                "kwargs": self.run_kwargs, "debug": self.fn.debug}

    def _reference(self, grid0: int, *args: Any) -> bool:
        """Launch as Triton would (see the module's docstring); False where ``run`` would not
        launch this compiled kernel: this launch then went through ``run``."""
        from triton.runtime.jit import JITFunction

        if not isinstance(self.fn, JITFunction):
            self._via_run(grid0, *args)
            return True
        k = self.compiled
        bound = triton_load.bind(self.fn, args, self.run_kwargs)
        if triton_load.bound_description(self.fn, bound) != triton_load.describe(k.src):
            self._checks -= 1
            if self._checks > 0:
                self.launch = self._first
            _log.debug("a launch of %s binds otherwise than its compiled kernel; through run", self.fn)
            self._via_run(grid0, *args)
            return False
        values = list(bound.args.values())
        stream, grid = self._stream(self.device), (grid0, 1, 1)
        k.run(grid0, 1, 1, stream, k.function, k.packed_metadata, k.launch_metadata(grid, stream, *values),
              self._knobs.launch_enter_hook, self._knobs.launch_exit_hook, *values)
        return True

    def _native(self, n_args: int) -> Any:
        """tc's C launcher of the compiled kernel (``cuda_launch.py``: the same launch as
        ``_direct``, without Python), or None where it cannot be had."""
        if self._knobs is None:
            return None
        try:
            return cuda_launch.make(self.compiled, n_args, self._via_run, self._stream, self.device, self._knobs)
        except Exception as e:  # the Python direct path launches it instead
            _log.info("tc's C launcher cannot launch %s (%s: %s); launching through Triton's", self.fn,
                      type(e).__name__, e)
            return None

    def _direct(self, grid0: int, *args: Any) -> None:
        # Pointers go to the C launcher as ints: given a tensor it would call data_ptr() again
        # and ask the driver about each pointer (cuPointerGetAttribute), on every launch.
        n = self.n_pointers
        pointers = [a.data_ptr() for a in args[:n]]
        if _hooks_set(self._knobs) or reduce(or_, pointers, 0) & 15 or (
                self.varying_ints and not _int32s(args[n:])):
            # hooks get run's launch metadata; the ahead-of-time compile assumed 16-byte aligned
            # pointers, as JITFunction.run would find them
            return self._via_run(grid0, *args)
        if self._c_launch is None:
            self._c_launch, self._c_args = _bind(self.compiled)
        self._c_launch(grid0, 1, 1, self._stream(self.device), *self._c_args, *pointers, *args[n:], *self.const_values)


class VerifiedLauncher:
    """``launcher(grid0, *pointers_and_ints)`` of a kernel that an earlier process loaded, launched
    and compared (``TritonLauncher._first``), loaded now by ``triton_load.load_verified``:
    ``launch`` is tc's C launcher from the first launch on. What it hands back (a launch hook
    set, a pointer not 16-byte aligned, an int past its type) goes to the fallback the C launcher
    was made with: ``JITFunction.run``, the kernel's module imported when first needed
    (``triton._RunLater``)."""

    def __init__(self, launch: Any):
        self.launch = launch

    def __call__(self, grid0: int, *args: Any) -> None:
        self.launch(grid0, *args)


def _bind(k: Any) -> tuple[Any, tuple]:
    """The C function a launch of the compiled kernel ``k`` ends in, and its arguments before
    the kernel's own. ``k.run`` is the backend's launcher object, whose ``__call__`` (Python)
    allocates scratch memory and then calls its C ``launch``; a kernel that needs no scratch
    (ours: no global or profile scratch) calls ``launch`` directly. Attributes of triton 3.x
    (NVIDIA); when one is missing, ``k.run`` itself, which is always right."""
    launcher = k.run
    c_launch = getattr(launcher, "launch", None)
    flags = [getattr(launcher, name, None) for name in ("launch_cooperative_grid", "launch_pdl")]
    scratch = [getattr(launcher, name, None) for name in ("global_scratch_size", "profile_scratch_size")]
    if callable(c_launch) and None not in flags and scratch == [0, 0]:
        return c_launch, (k.function, *flags, None, None, k.packed_metadata, None, None, None)
    return launcher, (k.function, k.packed_metadata, None, None, None)


def _hooks_set(runtime: Any) -> bool:
    return triton_load.hooked(runtime.launch_enter_hook) or triton_load.hooked(runtime.launch_exit_hook)


def _is_triton_error(e: BaseException) -> bool:
    """A failure of Triton itself (a compile error, too few resources, the interpreter on a
    kernel it cannot run): our kernel is at fault, not the values (CompiledGraph then lets the
    caller run the graph eagerly)."""
    from triton.errors import TritonError

    return isinstance(e, TritonError)


def _restore(args: tuple, outputs: Any, values: list | None) -> None:
    for i, value in zip(outputs, values or ()):
        args[i].copy_(value)


def _in_place(args: tuple, outputs: Any, n_pointers: int) -> bool:
    """Whether an output shares memory with an input of the launch."""
    written = {args[i].untyped_storage().data_ptr() for i in outputs}
    return any(args[i].untyped_storage().data_ptr() in written for i in range(n_pointers) if i not in outputs)


def _int32s(ints: tuple) -> bool:
    """Whether every int argument is one Triton passes as int32 (it picks int64 past that)."""
    for v in ints:
        if not -(2**31) <= v < 2**31:
            return False
    return True
