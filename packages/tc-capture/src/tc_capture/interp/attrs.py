"""Attribute reads and writes on captured values, resolved statically through the class MRO.

Nothing user-defined runs behind our back: properties are inlined, methods become bound
values, module parameters/buffers/submodules are read from the module's dicts with a source
(so they become graph inputs and gated guards), and an unknown ``__getattr__`` is a break.
"""

from __future__ import annotations

import functools
import sys
import types

import torch

from .base import Unsupported, call_function
from .record import record, run_fake
from .symbols import SYM_PYTHON_TYPES
from .variables import (
    BoundV,
    Const,
    DataDictV,
    DictV,
    FuncV,
    IterV,
    LazyV,
    ListV,
    MethodV,
    ObjV,
    SetV,
    SuperV,
    TensorV,
    TupleV,
    V,
    ViewV,
)

_MODULE_DICTS = ("_parameters", "_buffers", "_modules")
_TENSOR_META = {"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf", "layout",
                "is_sparse", "is_quantized", "is_meta", "is_complex", "names", "itemsize", "nbytes", "is_nested",
                "is_mkldnn", "is_cpu", "is_xpu", "is_mps", "is_sparse_csr"}


class AttrMissing(Unsupported):
    pass


def _written(f, obj: Const) -> bool:
    """An attribute write of this capture is pending on ``obj`` (writes are kept by tracked value,
    and an object read from the frame is one tracked value however many paths reach it:
    ``Session._wrap_aliased``)."""
    return any(key[0] == id(obj) for key in f.session.attr_writes)


def _taken_dict(f, inst_dict: dict | None) -> V | None:
    """The tracked value of an instance ``__dict__`` this capture read (``o.__dict__[k] = v``)."""
    seen = f.session.by_object.get(id(inst_dict)) if inst_dict is not None else None
    return seen[1] if seen is not None and seen[0] is inst_dict else None


def get_attr(f, obj: V, name: str) -> V:
    overlay = f.session.attr_writes.get((id(obj), name))
    if overlay is not None:
        return overlay
    if isinstance(obj, TensorV):
        return _tensor_attr(f, obj, name)
    if hasattr(obj, "attr"):  # standard-library models (stdlib_values)
        found = obj.attr(f, name)
        if found is None:
            raise AttrMissing(f"{type_of(obj).__name__!r} object has no attribute {name!r}")
        return found
    if isinstance(obj, ObjV):
        if name in obj.attrs:
            return obj.attrs[name]
        return _class_attr(f, obj, obj.cls, name)
    if isinstance(obj, SuperV):
        return _super_attr(f, obj, name)
    if isinstance(obj, DataDictV):
        if name in obj.fields:
            return obj.fields[name]
        return _class_attr(f, obj, obj.cls, name)
    if isinstance(obj, TupleV) and obj.cls is not tuple and _python_level(obj.cls, name, tuple):
        return _named_tuple_attr(f, obj, name)
    if isinstance(obj, DictV) and obj.cls is not dict and _python_level(obj.cls, name, dict):
        return _class_attr(f, obj, obj.cls, name)
    if isinstance(obj, (ListV, TupleV, DictV)):
        kind = {ListV: list, TupleV: tuple, DictV: dict}[type(obj)]
        if hasattr(kind, name):
            return BoundV(Const(getattr(kind, name)), obj)
        if hasattr(getattr(obj, "cls", kind), name):
            found = getattr(obj.cls, name)
            if isinstance(found, types.MethodDescriptorType):  # a C method of a subclass (move_to_end)
                return BoundV(Const(found), obj)  # calling one with no rule is a break
            if not hasattr(type(found), "__get__"):  # a plain class attribute (a namedtuple's _fields)
                return Const(found)
            raise Unsupported(f"{obj.cls.__name__}.{name} of a value built while capturing")
        raise AttrMissing(f"{kind.__name__} has no attribute {name!r}")
    if isinstance(obj, FuncV):
        return _func_attr(obj, name)
    if isinstance(obj, BoundV):
        if name == "__self__":
            return obj.self_v
        if name == "__func__":
            return obj.func
        return get_attr(f, obj.func, name)
    if isinstance(obj, Const):
        return _const_attr(f, obj, name)
    if isinstance(obj, (IterV, LazyV, ViewV, SetV)):
        return _builtin_obj_attr(obj, name)
    if hasattr(obj, "py_type"):
        return _builtin_obj_attr(obj, name)
    raise Unsupported(f"attribute {name!r} of {type(obj).__name__}")


def _func_attr(fn: FuncV, name: str) -> V:
    """An attribute of a function made while capturing: what was set on it, else what CPython's
    function object says (the docstring is ``co_consts[0]`` when that is a string)."""
    if name in fn.attrs:
        return fn.attrs[name]
    consts = fn.code.co_consts
    plain = {"__name__": fn.code.co_name, "__qualname__": fn.qualname, "__code__": fn.code,
             "__module__": fn.globals.get("__name__"), "__globals__": fn.globals,
             "__doc__": consts[0] if consts and isinstance(consts[0], str) else None}
    if hasattr(types.FunctionType, "__type_params__"):  # Python 3.12+: ``functools.wraps`` copies it;
        plain["__type_params__"] = ()  # a ``def f[T]`` (the only way to get others) is not captured
    if name in plain:
        return Const(plain[name])
    if name == "__dict__":
        fn.attrs["__dict__"] = DictV({})
        return fn.attrs["__dict__"]
    if name == "__defaults__":
        return TupleV(fn.defaults) if fn.defaults else Const(None)
    if not hasattr(types.FunctionType, name):
        raise AttrMissing(f"'function' object has no attribute {name!r}")
    raise Unsupported(f"attribute {name} of a nested function")


def _python_level(cls: type, name: str, base: type) -> bool:
    """Whether ``name`` on a subclass of a builtin container comes from the subclass (a field, a
    Python method or property) rather than from the builtin (bound like the builtin's methods)."""
    found, desc = _lookup(cls, name)
    if not found:
        return True  # AttrMissing, or the subclass's __getattr__: _class_attr says which
    return isinstance(desc, (types.FunctionType, property, staticmethod, classmethod)) \
        or type(desc).__name__ == "_tuplegetter"


def _named_tuple_attr(f, obj: TupleV, name: str) -> V:
    """A field of a namedtuple (or torch structseq) by position; anything else from its class
    (``_asdict``, ``_replace``, a ``NamedTuple``'s own methods and properties)."""
    fields = getattr(obj.cls, "_fields", None)
    if fields and name in fields and len(fields) == len(obj.items):
        return obj.items[fields.index(name)]
    found, desc = _lookup(obj.cls, name)
    if found and not isinstance(desc, (types.FunctionType, property, staticmethod, classmethod)):
        if hasattr(desc, "__get__"):
            raise Unsupported(f"attribute {name!r} of a {obj.cls.__name__} (a C descriptor)")
        return Const(desc)
    return _class_attr(f, obj, obj.cls, name)


def _builtin_obj_attr(obj: V, name: str) -> V:
    """Iterators, lazy map/filter/zip, dict views, sets: ``hasattr`` answers as Python does; a
    method found is bound (calling one that has no rule is a break)."""
    kind = type_of(obj)
    if not hasattr(kind, name):
        raise AttrMissing(f"{kind.__name__!r} object has no attribute {name!r}")
    return BoundV(Const(getattr(kind, name)), obj)


def _tensor_attr(f, obj: TensorV, name: str) -> V:
    fake = obj.fake
    if name in ("T", "mT", "H", "mH", "real", "imag", "data"):
        method = {"T": "permute", "mT": "transpose", "data": "detach", "real": torch.real, "imag": torch.imag}
        if name == "T":
            return record(f.session, "permute", (obj, Const(tuple(reversed(range(fake.dim()))))), {})
        if name == "mT":
            return record(f.session, "transpose", (obj, Const(-2), Const(-1)), {})
        if name in method:
            target = method[name]
            return record(f.session, target, (obj,), {})
        raise Unsupported(f"tensor attribute {name}")
    if name == "grad":
        return _grad(f, obj)
    if name in _TENSOR_META:
        return Const(run_fake(f.session, getattr, (fake, name), {}))
    if callable(getattr(torch.Tensor, name, None)):
        return MethodV(name, obj)
    if not hasattr(torch.Tensor, name):  # hasattr(t, "jax") probes in library code
        if obj.source is not None:
            f.session.guards.no_attr(obj.source, name)
        raise AttrMissing(f"'Tensor' object has no attribute {name!r}")
    raise Unsupported(f"tensor attribute {name!r}")


def _grad(f, obj: TensorV) -> V:
    """``p.grad`` of an input tensor (an optimizer's parameter) is another input, read from the
    parameter at call time; a guard says whether it is ``None``. ``.grad`` of a value computed in
    the graph is not known."""
    real = f.session.real_input(obj)
    if real is None:
        raise Unsupported("reading .grad of a tensor computed in the graph")
    return f.session.wrap(real.grad, obj.source.attr("grad", real))


def _const_attr(f, obj: Const, name: str) -> V:
    value, source = obj.value, obj.source
    if isinstance(value, types.ModuleType):
        try:
            found = getattr(value, name)
        except AttributeError as e:
            raise AttrMissing(str(e)) from e
        if source is not None and _plain_constant(found) and _settable_module(value):
            # a flag or number in a user's module (``config.SCALE``): set between calls, eager
            # reads the new value
            f.session.guards.constant(source.attr(name, value), found)
        return Const(found)
    if isinstance(value, type):
        return _type_attr(value, name)
    if isinstance(value, torch.nn.Module):
        for dict_name in _MODULE_DICTS:
            d = value.__dict__.get(dict_name)
            if d is not None and name in d:
                found = d[name]
                return _sourced(f, found, source, name, value)
    if type(value).__getattribute__ is not object.__getattribute__ and not isinstance(value, torch.nn.Module):
        return _opaque_attr(f, obj, name)
    if type(value).__module__ in _RECORD_MODULES:
        return _opaque_attr(f, obj, name)
    return _class_attr(f, obj, type(value), name)


def _settable_module(module: types.ModuleType) -> bool:
    """A module whose constants a program may set between calls: not torch's, not the standard
    library's (their constants, ``math.pi``, are read everywhere and never set)."""
    top = (getattr(module, "__name__", "") or "").partition(".")[0]
    return top != "torch" and top not in sys.stdlib_module_names


def _sourced(f, found, source, name, owner) -> V:
    if source is None:
        if isinstance(found, torch.Tensor):
            raise Unsupported(f"tensor attribute {name!r} of an object reached without a source")
        return Const(found)
    return f.session.wrap(found, source.attr(name, owner))


def _opaque_attr(f, obj: Const, name: str) -> V:
    """Builtin objects (numbers, dtypes, sizes, strings): a real getattr is safe."""
    try:
        found = getattr(obj.value, name)
    except AttributeError as e:
        if obj.source is not None:
            f.session.guards.no_attr(obj.source, name)
        raise AttrMissing(str(e)) from e
    if isinstance(found, (types.BuiltinMethodType, types.MethodWrapperType)) and found.__self__ is obj.value:
        # A fresh bound method each time: guarding its identity would always fail. Bound to this
        # call's object, it is read again from the object's source (never baked: a resumed frame
        # would call the first call's `array.copy`).
        source = obj.source.attr(name, obj.value) if obj.source is not None else None
        return Const(found, source)
    return _sourced(f, found, obj.source, name, obj.value)


# Objects of these standard-library modules are plain records (inspect.Signature, enum members,
# dataclass fields): their attributes are read for real rather than by inlining stdlib code.
_RECORD_MODULES = {"inspect", "enum", "dataclasses", "types"}


def _type_attr(cls: type, name: str) -> V:
    try:
        found = getattr(cls, name)
    except AttributeError as e:
        raise AttrMissing(str(e)) from e
    if isinstance(found, types.MethodType):
        return BoundV(Const(found.__func__), Const(found.__self__))
    return Const(found)


def _lookup(cls: type, name: str, start_after: type | None = None):
    mro = cls.__mro__
    if start_after is not None:
        mro = mro[mro.index(start_after) + 1:]
    for klass in mro:
        if name in klass.__dict__:
            return True, klass.__dict__[name]
    return False, None


def _class_attr(f, obj: V, cls: type, name: str, start_after: type | None = None) -> V:
    found, desc = _lookup(cls, name, start_after)
    if found and isinstance(desc, property):
        if desc.fget is None:
            raise Unsupported(f"property {name} has no getter")
        return call_function(f, Const(desc.fget), [obj], {})
    if found and hasattr(type(desc), "__set__") and not isinstance(desc, (types.FunctionType,)):
        if isinstance(obj, Const):
            if name == "__dict__" and _written(f, obj):
                raise Unsupported("the __dict__ of an object whose attributes this graph writes")
            return _opaque_attr(f, obj, name)  # slots and C-level data descriptors
        raise Unsupported(f"data descriptor {name} on a new object")
    if isinstance(obj, Const) and start_after is None:
        inst_dict = getattr(obj.value, "__dict__", None)
        taken = _taken_dict(f, inst_dict)
        if taken is not None:  # read through its tracked ``__dict__``: writes into that are seen
            if name in taken.items:
                return taken.items[name]
            if name in inst_dict:
                raise Unsupported(f"attribute {name!r} removed from an object's __dict__ in this graph")
        elif inst_dict is not None and name in inst_dict:
            return _sourced(f, inst_dict[name], obj.source, name, obj.value)
        _guard_not_own(f, obj, name, found, inst_dict)
    if found and isinstance(desc, functools.cached_property):
        return _cached_property(f, obj, desc, name)
    if found and isinstance(getattr(type(desc), "__get__", None), types.FunctionType):
        raise Unsupported(f"attribute {name!r}: a descriptor whose __get__ is Python code ({type(desc).__name__})")
    if found and isinstance(desc, (types.MethodDescriptorType, types.WrapperDescriptorType)) \
            and (not isinstance(obj, Const) or start_after is not None and isinstance(obj.value, type)):
        return BoundV(Const(desc), obj)  # a C method of a value built while capturing (super().__init__())
    if found and (_plain_constant(desc) or isinstance(desc, types.FunctionType)) and isinstance(obj, Const) \
            and obj.source is not None and start_after is None:
        f.session.guards.class_member(cls, name, desc)  # read from the class: the class must keep it
    if found:
        return _bind(desc, obj, cls, name)
    if not found and _lookup(cls, "__getattr__")[0] and not issubclass(cls, torch.nn.Module):
        raise Unsupported(f"{cls.__name__}.__getattr__ would run for {name!r}")
    raise AttrMissing(f"{cls.__name__!r} object has no attribute {name!r}")


# Plain values a class holds for its instances (``scale = 2.0``, ``use_relu = False``) or a module
# for its users (``config.SCALE``): set after a capture, eager reads the new one, so reads are guarded.
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _plain_constant(value) -> bool:
    return type(value) in _SCALARS or type(value) is tuple and all(type(x) in _SCALARS for x in value)


def _guard_not_own(f, obj: Const, name: str, found: bool, inst_dict: dict | None) -> None:
    """The read of an object from the frame state that its instance did not answer is valid only
    while the instance still lacks ``name``: a flag first read through ``getattr``'s default or a
    class-level default and then set (``self._hooks_installed = True``) must fail the guard on the
    next call, or the cached entry replays the first call's branch."""
    if obj.source is None:
        return
    if not found:
        f.session.guards.no_attr(obj.source, name)
    elif inst_dict is not None:
        f.session.guards.not_own(obj.source, name)


def _cached_property(f, obj: V, desc, name: str) -> V:
    """First read of a ``functools.cached_property``: its function inlined, the result stored in
    the instance (a side effect like any attribute write), as ``cached_property.__get__`` does."""
    if isinstance(obj, ObjV) and name in obj.attrs:
        return obj.attrs[name]
    value = call_function(f, Const(desc.func), [obj], {})
    set_attr(f, obj, name, value)
    return value


def _bind(desc, obj: V, cls: type, name: str) -> V:
    if isinstance(desc, staticmethod):
        return Const(desc.__func__)
    if isinstance(desc, classmethod):
        return BoundV(Const(desc.__func__), Const(cls))
    if isinstance(desc, types.FunctionType):
        return BoundV(Const(desc), obj)
    if hasattr(desc, "__get__") and isinstance(obj, Const):
        # Bound to this call's object: read again from its source, never baked (see _opaque_attr).
        # (Only when a plain read finds this descriptor: `super().get` is not `obj.get`.)
        plain = obj.source is not None and _lookup(type(obj.value), name)[1] is desc
        return Const(desc.__get__(obj.value, cls), obj.source.attr(name, obj.value) if plain else None)
    return Const(desc)


def _super_attr(f, sup: SuperV, name: str) -> V:
    """``super(C, obj).name``: looked up after ``C`` in ``type(obj)``'s MRO, or in ``obj``'s own
    when ``obj`` is a subclass of ``C`` rather than an instance (``super().__new__(cls)``)."""
    obj = sup.obj
    if isinstance(obj, Const) and isinstance(obj.value, type) and not isinstance(obj.value, sup.cls):
        cls = obj.value
    else:
        cls = type_of(obj)
    return _class_attr(f, obj, cls, name, start_after=sup.cls)


# ---- writes --------------------------------------------------------------------------------------
def set_attr(f, obj: V, name: str, value: V) -> None:
    if hasattr(obj, "write"):  # a private copy (stdlib_collections.FreshCopy)
        obj.write(name, value)
        return
    if isinstance(obj, ObjV):
        own = _lookup(obj.cls, "__setattr__")[1]
        if own is not object.__setattr__:  # a frozen dataclass raises, others do their own thing
            if not isinstance(own, types.FunctionType):
                raise Unsupported(f"{obj.cls.__name__}.__setattr__ is not Python code")
            call_function(f, Const(own), [obj, Const(name), value], {})
            return
        obj.attrs[name] = value
        return
    if isinstance(obj, DataDictV):  # a ModelOutput: its own __setattr__ also sets the item
        own = _lookup(obj.cls, "__setattr__")[1]
        if own is object.__setattr__:
            obj.fields[name] = value
            f.session.note_mutation(obj)
        elif isinstance(own, types.FunctionType):
            call_function(f, Const(own), [obj, Const(name), value], {})
        else:
            raise Unsupported(f"{obj.cls.__name__}.__setattr__ is not Python code")
        return
    if isinstance(obj, FuncV) and name not in ("__code__", "__globals__", "__closure__", "__defaults__",
                                                "__kwdefaults__"):
        obj.attrs[name] = value
        return
    if isinstance(obj, Const) and obj.source is not None and not isinstance(obj.value, type):
        if _taken_dict(f, getattr(obj.value, "__dict__", None)) is not None:
            raise Unsupported(f"attribute {name!r} written on an object whose __dict__ this graph reads")
        f.session.attr_writes[(id(obj), name)] = value
        f.session.side_effects.append(("setattr", obj, name, value))
        return
    raise Unsupported(f"attribute assignment .{name} on {type(obj).__name__}")


_VIEW_TYPES = {"keys": type({}.keys()), "values": type({}.values()), "items": type({}.items())}


def type_of(v: V) -> type:
    """The type Python would report; a value whose type is not known exactly is a break (guessing
    ``object`` made ``isinstance``/``type()`` answer wrongly)."""
    if isinstance(v, TensorV):
        return v.node.meta.get("type", torch.Tensor) if v.source is not None else torch.Tensor
    if isinstance(v, Const):  # a symbolic size is an int to the program
        return SYM_PYTHON_TYPES.get(type(v.value), type(v.value))
    if isinstance(v, ObjV):
        return v.cls
    if isinstance(v, TupleV):
        return v.cls
    if isinstance(v, DictV):
        return v.cls
    if isinstance(v, (IterV, LazyV)) and v.cls is not None:
        return v.cls
    if isinstance(v, ViewV):
        return _VIEW_TYPES[v.kind]
    if isinstance(v, BoundV):
        python = isinstance(v.func, FuncV) or isinstance(v.func, Const) and isinstance(v.func.value, types.FunctionType)
        return types.MethodType if python else types.BuiltinMethodType
    known = {ListV: list, SetV: set, FuncV: types.FunctionType, MethodV: types.BuiltinMethodType}
    if type(v) in known:
        return known[type(v)]
    if hasattr(v, "py_type"):  # standard-library models (stdlib_values)
        return v.py_type()
    raise Unsupported(f"the type of a {type(v).__name__} is not known exactly")
