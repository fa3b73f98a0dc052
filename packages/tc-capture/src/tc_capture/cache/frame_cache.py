"""The guarded cache of compiled entries and the driver that runs a frame region by region.

A frame is run as a chain: find the entry whose guards pass at the current resume offset
(compiling one on a miss), run it; if it ended at a graph break, run that one instruction in
Python (``resume/real_frame``) with the rebuilt frame state and continue at the next offset. Resume
points past the recompile limit run in Python to the end of the frame.

Fail closed: an exception inside tc while compiling a region (capture, guards, the back end's
tracing, lowering, code generation, build, load) makes that region run eagerly from then on,
with one warning naming the user's file:line and the reason (``fullgraph=True``: a
:class:`CompileError` instead). The user's own exceptions reach them unchanged, with their
frame in the traceback.
"""

from __future__ import annotations

import dis
import functools
import os
import threading
import types
import warnings
import weakref

import torch
import torch.utils._python_dispatch

import tc_ir

from ..interp.symbols import DynamicPolicy
from ..resume.callees import binder, call_module, module_forward, plain_module_call, python_target
from ..resume.compile_region import (
    CompileError,
    Entry,
    GraphBreakError,
    build_entry,
    capture_region,
    count_args,
    distinct_breaks,
    line_at,
)
from ..resume.native_resume import resume_natively
from ..resume.real_frame import RealFrame
from .default_device import only_device_modes, set_aside

log_recompiles = tc_ir.logs.get_logger("recompiles")
_tls = threading.local()
ALL_CACHES: weakref.WeakSet = weakref.WeakSet()  # for reset(); caches die with their owners


def compiling_depth() -> int:
    return getattr(_tls, "depth", 0)


class _Compiling:
    def __enter__(self):
        _tls.depth = getattr(_tls, "depth", 0) + 1

    def __exit__(self, *exc):
        _tls.depth -= 1


COMPILING = _Compiling()


class FrameCache:
    """All compiled entries of one function's frame, by resume offset."""

    def __init__(self, fn, backend, fullgraph: bool, recompile_limit: int, dynamic: bool | None = None):
        self.fn, self.code, self.globals = fn, fn.__code__, fn.__globals__
        self.closure = fn.__closure__ or ()
        self.nargs = count_args(self.code)
        self.backend, self.fullgraph, self.limit = backend, fullgraph, recompile_limit
        self.dynamic = dynamic
        self.policies: dict[int, DynamicPolicy] = {}  # resume offset -> which input dims are symbols
        self.entries: dict[int, list[Entry]] = {}
        self.lock = threading.RLock()
        self.warned = False
        self.failed: set[int] = set()  # resume offsets whose compile failed: they run eagerly
        self.listeners: list = []  # capture() records compiled entries through these
        self.callees: dict = {}  # code -> FrameCache of calls run at nested breaks (held here)
        self.reported = False  # the no-graph / many-breaks warning of a first call was decided
        self.warned_modes = False
        ALL_CACHES.add(self)

    def clear(self) -> None:
        with self.lock:
            self.entries = {}
            self.policies = {}
            self.warned = False
            self.failed = set()

    # ---- lookup and compile -------------------------------------------------------------------
    def lookup(self, offset: int, F, C) -> Entry | None:
        if _function_modes():  # DeviceContexts only: guards read tensors through torch calls they would hook
            with set_aside():
                return self._lookup(offset, F, C)
        return self._lookup(offset, F, C)

    def _lookup(self, offset: int, F, C) -> Entry | None:
        for entry in self.entries.get(offset, ()):
            if entry.guard(F, C):
                return entry
        return None

    def miss(self, offset: int, F, C) -> Entry | None:
        with self.lock, set_aside():  # capture and compile: tc's own work, see ``default_device``
            found = self.lookup(offset, F, C)
            if found is not None:
                return found
            existing = self.entries.get(offset, [])
            if offset in self.failed:
                return None
            if len(existing) >= self.limit:
                self._warn_limit()
                return None
            if existing:
                self._log_recompile(existing, offset, F, C)
            try:
                entry = self._compile(offset, F, C, len(existing))
            except (GraphBreakError, CompileError):
                raise  # asked for: fullgraph=True, or a back end told not to fall back
            except Exception as e:
                return self._failed(offset, f"{type(e).__name__}: {e}", e)
            if not entry.guard(F, C):
                return self._failed(offset, f"its guard rejects the call it was compiled from ({entry.why(F, C)})")
            self.entries[offset] = existing + [entry]
            for listener in dict.fromkeys([*self.listeners, *getattr(_tls, "listeners", ())]):
                listener(entry)
            return entry

    def _failed(self, offset: int, reason: str, cause: Exception | None = None) -> None:
        """Compiling the region at ``offset`` failed inside tc: it runs eagerly from now on."""
        filename, lineno = self.code.co_filename, line_at(self.code, offset)
        if self.fullgraph:
            raise CompileError(f"tc could not compile {self.code.co_name} at {filename}:{lineno}: {reason}") from cause
        self.failed.add(offset)
        warn_fallback(filename, lineno, f"compiling {self.code.co_name} failed ({reason}); running it eagerly")
        return None

    def _compile(self, offset: int, F, C, n: int) -> Entry:
        name = f"{self.code.co_name}_{offset}_{n}" if offset else f"{self.code.co_name}_{n}"
        policy = self.policies.setdefault(offset, DynamicPolicy(self.dynamic))
        with COMPILING, tc_ir.deferred_full_gc():  # a compile's heap only grows: no full GC rescans of it
            session, out, brk = capture_region(self.code, self.globals, F, C, offset, self.nargs, self.fullgraph, name,
                                               policy)
            policy.saw(session.inputs)
            return build_entry(self.code, self.globals, session, out, brk, self.backend, name, offset)

    def _log_recompile(self, existing, offset, F, C) -> None:
        """``TC_LOGS=recompiles``: for each entry tried, the guard that failed, what it expected
        and the value it found."""
        if log_recompiles.isEnabledFor(10):
            tried = "\n".join(f"  entry {i}: failed guard: {e.why(F, C)}" for i, e in enumerate(existing))
            log_recompiles.debug("recompiling %s (%s:%s, offset %d), %d entries tried:\n%s", self.code.co_name,
                                 self.code.co_filename, self.code.co_firstlineno, offset, len(existing), tried)

    def _warn_limit(self) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(f"tc_capture: {self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno}) "
                          f"hit the recompile limit ({self.limit}); new cases run in Python", stacklevel=4)

    # ---- running ------------------------------------------------------------------------------------
    def call(self, F, args, kwargs, fn=None):
        """Run the frame of ``fn`` (by default the cache's function; a callee cache, keyed by
        code, is handed the function object of each call) with parameter slots ``F``."""
        fn = self.fn if fn is None else fn
        if F is None:  # arguments the function does not take: eager raises its own TypeError
            return fn(*args, **kwargs)
        if (_function_modes() or _dispatch_modes()) and not only_device_modes():
            return self._under_modes(fn, args, kwargs)
        C = self.closure if fn is self.fn else (fn.__closure__ or ())
        entry = self.lookup(0, F, C)
        if entry is None:
            if not self.reported and getattr(_tls, "tally", None) is None:
                return self._first_call(fn, F, args, kwargs)
            entry = self.miss(0, F, C)
            if entry is None:
                return fn(*args, **kwargs)
            _tally(entry)
        elif fn is not self.fn:
            _tally(entry)
        out = _run(entry, F, C)
        if entry.break_ip is None:
            return out
        return self._continue(entry, out)

    def _under_modes(self, fn, args, kwargs):
        """A torch function or dispatch mode other than a ``DeviceContext`` is active (a user's
        mode): eager calls route every op through it, the compiled code would not (the mode's own
        results, the ops a dispatch mode sees), so the call runs in Python while one is (one
        warning). ``DeviceContext`` modes alone (``with torch.device(...)``,
        ``torch.set_default_device``) are compiled for: see ``default_device``."""
        self._warn_modes()
        return fn(*args, **kwargs)

    def _warn_modes(self) -> None:
        if not self.warned_modes:
            self.warned_modes = True
            active = [type(m).__name__ for m in torch.overrides._get_current_function_mode_stack()]
            active += [type(m).__name__ for m in torch.utils._python_dispatch._get_current_dispatch_mode_stack()]
            warn_fallback(self.code.co_filename, self.code.co_firstlineno,
                          f"{self.code.co_name} runs with a torch function or dispatch mode active "
                          f"({', '.join(active)}); compiled code would bypass it, so it runs eagerly while one is")

    def _first_call(self, fn, F, args, kwargs):
        """The first call of a compiled function: the entries it runs, through nested frames too,
        are tallied, and a call that captured no graph, or broke many times, warns once."""
        self.reported = True
        _tls.tally = tally = []
        try:
            out = self.call(F, args, kwargs, fn)
        finally:
            _tls.tally = None
        self._report(tally)  # not when the user's exception ended the call: it is theirs to see
        return out

    def _report(self, entries: list) -> None:
        breaks = distinct_breaks([b for e in entries for b in e.breaks])
        graphs = sum(e.graph is not None for e in entries)
        if not breaks or (graphs and len(breaks) < MANY_BREAKS):
            return
        what = "captured no graph" if not graphs else f"captured {graphs} graphs"
        where = "; ".join(str(b) for b in breaks[:MANY_BREAKS])
        more = f" (and {len(breaks) - MANY_BREAKS} more)" if len(breaks) > MANY_BREAKS else ""
        warn_fallback(self.code.co_filename, self.code.co_firstlineno,
                      f"{self.code.co_name} {what} with {len(breaks)} graph breaks: {where}{more} "
                      "(TC_LOGS=graph_breaks logs each one)")

    # ---- calls at a nested break ---------------------------------------------------------------
    def call_callee(self, fn, args, kwargs):
        """The call a region broke inside of, run as compiled frames of its own (``callees``)."""
        saved = getattr(_tls, "listeners", ())
        _tls.listeners = (*saved, *self.listeners)
        try:
            if plain_module_call(fn):
                forward, lead = module_forward(fn)
                return call_module(fn, tuple(args), kwargs, lambda a, k: self._call_function(forward, (*lead, *a), k))
            target = python_target(fn)
            if target is None:
                return fn(*args, **kwargs)
            func, lead = target
            return self._call_function(func, (*lead, *args), kwargs)
        finally:
            _tls.listeners = saved

    def _call_function(self, func, args: tuple, kwargs: dict):
        if not isinstance(func, types.FunctionType) or func.__code__.co_flags & 0xA0:
            return func(*args, **kwargs)  # not Python code, or a generator: runs natively
        cache = self.callees.get(func.__code__)
        if cache is None:
            cache = self.callees[func.__code__] = callee_cache(func, self.backend, self.limit, self.dynamic)
        if cache.globals is not func.__globals__:
            return func(*args, **kwargs)
        return cache.call(binder(func)(args, kwargs), args, kwargs, func)

    def _give_up(self, frame: RealFrame, offset: int, F, C):
        """The rest of the frame in Python: as native bytecode where we can rebuild the frame."""
        if not frame.kw_names:
            done, result = resume_natively(self.code, self.globals, C[:len(self.code.co_freevars)], offset, F)
            if done:
                return result
        return frame.run()

    def _handler(self, frame: RealFrame, stack: list, exc: Exception) -> tuple[int, list, bool] | None:
        """Where the exception raised by the instruction just run is caught in this frame:
        (handler offset, frame state there, whether capture resumes there), None if it escapes.

        Captured: ``except`` and ``finally`` handlers (``handler_is_captured``). The others
        (``with`` exits, the clean-up handlers that re-raise) run as native bytecode.
        """
        offset = frame.insts[frame.ip - 1].offset
        for e in dis._parse_exception_table(self.code):
            if e.start <= offset < e.end:
                F = frame.local_list() + stack[:e.depth] + ([offset // 2] if e.lasti else []) + [exc]
                return e.target, F, not e.lasti and handler_is_captured(self.code, e.target)
        return None

    def _raise_natively(self, frame: RealFrame, offset: int, F: list, exc: Exception):
        done, result = resume_natively(self.code, self.globals, frame.cell_list()[:len(self.code.co_freevars)], offset, F)
        if done:
            return result
        raise_in_user_frame(exc, self.code, line_at(self.code, offset))

    def _continue(self, entry: Entry, out):
        while True:
            locals_, stack, cells = out
            frame = RealFrame(self.code, self.globals, locals_, stack, cells, entry.break_ip)
            frame.kw_names = entry.kw_names
            if entry.breaks and entry.breaks[0].nested:
                frame.callee = self.call_callee
            if not frame.runs(frame.insts[frame.ip].opname):  # nothing ran yet: CPython runs it
                return self._give_up(frame, *frame.state())
            saved = list(frame.stack)
            try:
                if frame.step():
                    return frame.result
                offset, F, C = frame.state()
            except Exception as exc:
                caught = self._handler(frame, saved, exc)
                if caught is None:
                    raise_in_user_frame(exc, self.code, frame.insts[frame.ip - 1].lineno)
                offset, F, captured = caught
                if not captured:
                    return self._raise_natively(frame, offset, F, exc)
                C = frame.cell_list()
                frame = RealFrame(self.code, self.globals, F[:len(self.code.co_varnames)],
                               F[len(self.code.co_varnames):], C, frame.index_of[offset])
            if (_function_modes() or _dispatch_modes()) and not only_device_modes():
                self._warn_modes()  # the break entered a mode: the rest of the frame runs under it
                return self._give_up(frame, offset, F, C)
            # Capture goes on after the break, or in the handler that caught its exception.
            entry = self.lookup(offset, F, C) or self.miss(offset, F, C)
            if entry is None:
                return self._give_up(frame, offset, F, C)
            _tally(entry)
            out = _run(entry, F, C)
            if entry.break_ip is None:
                return out


def _run(entry: Entry, F, C):
    """Run a cache entry; ``DeviceContext`` modes (the only ones a compiled call runs under) are
    set aside meanwhile: the entry's graph holds their device, and tc's own tensors must not get
    it (``default_device``)."""
    if not _function_modes():
        with COMPILING:
            return entry.run(F, C)
    with COMPILING, set_aside():
        return entry.run(F, C)


def _tally(entry: Entry) -> None:
    tally = getattr(_tls, "tally", None)
    if tally is not None:
        tally.append(entry)


MANY_BREAKS = 8  # a first call with this many graph breaks warns (as does one with no graph)

# Weak values: a cache lives as long as a compiled function, module or caller cache holding it.
SHARED_CACHES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def frame_cache(fn, backend, fullgraph: bool, recompile_limit: int, dynamic: bool | None = None) -> FrameCache:
    """The one cache of ``fn``'s frame for this back end and settings.

    Shared by every ``optimize`` of the same function with the same back end, so one block
    class compiled per instance (regional compilation) compiles once: parameters are graph
    inputs, and guards check types and state, not which instance it is.
    """
    key = (fn, backend, fullgraph, recompile_limit, dynamic)
    cache = SHARED_CACHES.get(key)
    if cache is None:
        cache = SHARED_CACHES[key] = FrameCache(fn, backend, fullgraph, recompile_limit, dynamic)
    return cache


def callee_cache(fn, backend, recompile_limit: int, dynamic: bool | None = None) -> FrameCache:
    """The cache of a function called at a nested break, keyed by its code object (a closure made
    on every call is one frame; its cells are guarded like any closure's) and its globals."""
    key = (fn.__code__, id(fn.__globals__), backend, recompile_limit, dynamic)
    cache = SHARED_CACHES.get(key)
    if cache is None or cache.globals is not fn.__globals__:
        cache = SHARED_CACHES[key] = FrameCache(fn, backend, False, recompile_limit, dynamic)
        cache.fn = None  # called with each call's function object, never held
        cache.reported = True  # its first call is tallied by the caller's
    return cache


# Names that read the exception being handled (``sys.exc_info()``, ``traceback.print_exc()``):
# inside a handler resumed by capture no exception is being handled, so such frames keep native
# handlers, where CPython sets it.
_READS_HANDLED = frozenset({"exc_info", "exception", "print_exc", "format_exc", "print_exception"})


@functools.lru_cache(maxsize=256)
def handler_is_captured(code, target: int) -> bool:
    """Whether capture resumes in the handler at ``target``: an ``except`` or ``finally`` block
    (not a ``with`` exit) in a frame without a bare ``raise`` or a read of the handled exception."""
    insts = list(dis.get_instructions(code))
    at = next(k for k, i in enumerate(insts) if i.offset == target)
    if insts[at].opname != "PUSH_EXC_INFO" or insts[at + 1].opname == "WITH_EXCEPT_START":
        return False
    bare_raise = any(i.opname == "RAISE_VARARGS" and i.arg == 0 for i in insts)
    return not bare_raise and not _READS_HANDLED & set(code.co_names)


# Lengths of torch's function-mode and dispatch-mode stacks (C calls: checked at every frame entry).
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack


# ---- failures and tracebacks ----------------------------------------------------------------------
def warn_fallback(filename: str, lineno: int, reason: str) -> None:
    """The one warning of an eager fallback, attributed to the user's file:line."""
    warnings.warn_explicit(f"tc: {filename}:{lineno}: {reason}", UserWarning, filename, lineno or 0)


_OUR_DIR = os.path.dirname(os.path.abspath(__file__))


def raise_in_user_frame(exc: BaseException, code, lineno: int | None):
    """Raise the user's exception from a frame naming their file, function and line.

    The instruction that raised ran on tc's real-value frame (``resume/real_frame.py``), so CPython's traceback would
    show tc's frames where the user's own frame should be: tc's frames below the raise are cut,
    and the exception is raised again from a stand-in code object at the user's file:line.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OUR_DIR):
        tb = tb.tb_next
    exec(_raiser(code.co_filename, lineno or code.co_firstlineno, code.co_name), {"_exc": exc.with_traceback(tb)})


@functools.lru_cache(maxsize=256)
def _raiser(filename: str, lineno: int, name: str):
    return compile("\n" * (lineno - 1) + "raise _exc", filename, "exec").replace(co_name=name)
