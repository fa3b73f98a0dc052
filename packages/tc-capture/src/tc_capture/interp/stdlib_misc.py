"""``functools`` (partial, wraps/update_wrapper, lru_cache-wrapped functions), ``logging`` as
effects replayed after the graph, and NumPy scalars as constants.

**Logging replayed after the graph.** ``logger.info(...)`` (any level) is recorded like
``warnings.warn``: the graph runs, then the region's side effects run in order, this among them,
on every call. Its arguments must be constants whose ``str`` runs no user code (tensors would be
read after the graph, not when logged): others stay a graph break. A disabled logger's call is
nothing, guarded on ``logger.isEnabledFor(level)``. ``print`` stays a graph break (the only one
it causes), as under torch.compile, which raises on print, logging and ``warnings.warn`` under
``fullgraph=True``.
"""

from __future__ import annotations

import functools
import logging

from .base import Unsupported, call_function
from .builtins_ import BUILTINS, CALLABLE_TYPES
from .pyops import realize_const
from .stdlib_values import PartialV
from .variables import Const, FuncV, V


# ---- functools --------------------------------------------------------------------------------------
def _partial(f, args, kwargs) -> V:
    if not args:
        raise Unsupported("partial() needs a function")
    return PartialV(args[0], list(args[1:]), dict(kwargs))


def _wraps(f, args, kwargs) -> V:
    """``functools.wraps(wrapped, ...)`` is ``partial(update_wrapper, wrapped=wrapped, ...)``."""
    wrapped = args[0] if args else kwargs["wrapped"]
    kw = {"wrapped": wrapped,
          "assigned": kwargs.get("assigned", args[1] if len(args) > 1 else Const(functools.WRAPPER_ASSIGNMENTS)),
          "updated": kwargs.get("updated", args[2] if len(args) > 2 else Const(functools.WRAPPER_UPDATES))}
    return PartialV(Const(functools.update_wrapper), [], kw)


def _update_wrapper(f, args, kwargs) -> V:
    """``functools.update_wrapper(wrapper, wrapped)`` on a function made while capturing: its
    attributes are set on the tracked function (and set again when it is rebuilt)."""
    names = ("wrapper", "wrapped", "assigned", "updated")
    bound = dict(zip(names, args), **kwargs)
    wrapper, wrapped = bound["wrapper"], bound["wrapped"]
    assigned = realize_const(bound.get("assigned", Const(functools.WRAPPER_ASSIGNMENTS)))
    updated = realize_const(bound.get("updated", Const(functools.WRAPPER_UPDATES)))
    if not isinstance(wrapper, FuncV):
        raise Unsupported("functools.update_wrapper of a function not made while capturing")
    for name in assigned:
        if name == "__annotations__" and isinstance(wrapped, FuncV) and name not in wrapped.attrs:
            continue  # not tracked on either (a rebuilt function has none): nothing to copy
        try:
            value = f.get_attr(wrapped, name)
        except Unsupported as e:
            if type(e).__name__ == "AttrMissing":
                continue  # update_wrapper skips attributes the wrapped object lacks
            raise
        wrapper.attrs[name] = value
    for name in updated:
        target = f.get_attr(wrapper, name)
        try:
            source = f.get_attr(wrapped, name)
        except Unsupported as e:
            if type(e).__name__ != "AttrMissing":
                raise
            continue
        call_function(f, f.get_attr(target, "update"), [source], {})
    wrapper.attrs["__wrapped__"] = wrapped
    return wrapper


_PLAIN = (int, float, bool, str, bytes, complex, type(None))


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(x) for x in value)
    return type(value) in _PLAIN or type(value).__module__ == "torch" and type(value).__name__ in ("dtype", "device")


def _lru_call(f, fn: Const, args, kwargs) -> V:
    """A call of an ``lru_cache``-wrapped function. On constant arguments the wrapper is called for
    real, as eager calls it (a hit returns the cached value; a miss runs the function once, now,
    as eager's first call would): the result is a constant of this entry. Otherwise the wrapped
    function is inlined (the cache bypassed, as torch.compile does); its result is the same for
    the pure functions caches are meant for."""
    values = [a.value for a in [*args, *kwargs.values()] if isinstance(a, Const)]
    if len(values) == len(args) + len(kwargs) and all(_plain(v) for v in values):
        try:
            out = fn.value(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
        except Exception as e:
            raise Unsupported(f"{fn.value.__qualname__}() raised {type(e).__name__}: {e}") from e
        if _plain(out):
            return Const(out)
        raise Unsupported(f"{fn.value.__qualname__}() (lru_cache) returned a {type(out).__name__}, not a constant")
    return call_function(f, Const(fn.value.__wrapped__), args, kwargs)


BUILTINS[functools.partial] = _partial
BUILTINS[functools.wraps] = _wraps
BUILTINS[functools.update_wrapper] = _update_wrapper
CALLABLE_TYPES[functools._lru_cache_wrapper] = _lru_call


# ---- logging: effects replayed after the graph ---------------------------------------------
def _text(f, v: V, what: str) -> str:
    try:
        value = realize_const(v)
    except Unsupported:
        raise Unsupported(f"{what} of a value not known at capture time (a tensor, an object)") from None
    if not _printable(value):
        raise Unsupported(f"{what} of a {type(value).__name__} (its str() may run Python code)")
    return str(value)


def _printable(value) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)) and type(value) in (list, tuple, set, frozenset):
        return all(_printable(x) for x in value)
    if type(value) is dict:
        return all(_printable(k) and _printable(x) for k, x in value.items())
    return _plain(value)


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL, "fatal": logging.CRITICAL}


def _log_method(name: str):
    def handler(f, args, kwargs):
        logger_v, rest = args[0], list(args[1:])
        if not isinstance(logger_v, Const) or not isinstance(logger_v.value, logging.Logger):
            raise Unsupported(f"Logger.{name} on a logger not known at capture time")
        logger = logger_v.value
        if name == "log":
            level, rest = realize_const(rest[0]), rest[1:]
            if type(level) is not int:
                raise Unsupported("Logger.log with a level that is not an int")
        else:
            level = _LEVELS[name]
        g = f.session.guards
        enabled = logger.isEnabledFor(level)
        g.add(None, f"{g.ref(logger)}.isEnabledFor({level}) is {enabled}",
              f"logger {logger.name!r} is {'en' if enabled else 'dis'}abled for level {level}")
        if not enabled:
            return Const(None)
        if set(kwargs) - {"stacklevel"}:
            raise Unsupported(f"Logger.{name} with exc_info/extra/stack_info")
        parts = [_text(f, a, f"Logger.{name}") for a in rest]  # checks: constants only
        del parts
        call_args = [Const(level)] + [Const(realize_const(a)) for a in rest]
        f.session.side_effects.append(("call", Const(logger.log), call_args, {}))
        return Const(None)

    return handler


def _get_logger(f, args, kwargs) -> V:
    name = realize_const(args[0]) if args else realize_const(kwargs.get("name", Const(None)))
    if name is not None and type(name) is not str:
        raise Unsupported("logging.getLogger of a name that is not a string")
    return Const(logging.getLogger(name))  # registered once: the same object eager gets


def _module_log(name: str):
    method = _log_method(name)
    return lambda f, args, kwargs: method(f, [Const(logging.getLogger()), *args], kwargs)


BUILTINS[logging.getLogger] = _get_logger
for _name in (*_LEVELS, "log"):
    if hasattr(logging.Logger, _name):
        BUILTINS[getattr(logging.Logger, _name)] = _log_method(_name)
for _name in ("debug", "info", "warning", "error", "critical"):
    BUILTINS[getattr(logging, _name)] = _module_log(_name)


# ---- NumPy scalars ---------------------------------------------------------------------------------
def numpy_scalar(cls, args, kwargs) -> V | None:
    """``np.float32(2.0)`` and friends on constants: a constant NumPy scalar (torch ops treat one
    as the Python number it holds, see ``pyops.binary``). None for other NumPy classes."""
    if getattr(cls, "__module__", None) != "numpy" or not any(k.__name__ == "generic" for k in cls.__mro__):
        return None
    if not all(isinstance(a, Const) and _plain(a.value) for a in [*args, *kwargs.values()]):
        raise Unsupported(f"numpy.{cls.__name__}() of a value not known at capture time")
    return Const(cls(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()}))


def is_numpy_scalar(value) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0

