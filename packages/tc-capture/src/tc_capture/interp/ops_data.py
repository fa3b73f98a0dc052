"""Opcodes that build, take apart and combine values: containers, subscripts, operators, f-strings."""

from __future__ import annotations

import operator

import torch

from . import tensor_keys
from .base import Unsupported, handler
from .builtins_ import length
from .pyops import BINARY, UNARY, binary, compare, contains, fold, identity, items_of, realize_const, set_add, unary
from .record import record
from .truth import call_own, own_method, truth
from .variables import Const, DataDictV, DictV, ListV, SetV, TensorV, TupleV, V


@handler("BUILD_TUPLE")
def op_build_tuple(f, inst):
    f.push(TupleV(f.popn(inst.arg)))


@handler("BUILD_LIST")
def op_build_list(f, inst):
    f.push(ListV(f.popn(inst.arg)))


@handler("BUILD_SET")
def op_build_set(f, inst):
    s = SetV([])
    for v in f.popn(inst.arg):
        set_add(s.items, v)
    f.push(s)


@handler("BUILD_MAP")
def op_build_map(f, inst):
    flat = f.popn(2 * inst.arg)
    f.push(DictV({realize_const(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))


@handler("BUILD_CONST_KEY_MAP")
def op_build_const_key_map(f, inst):
    keys = f.pop().value
    f.push(DictV(dict(zip(keys, f.popn(inst.arg)))))


@handler("BUILD_SLICE")
def op_build_slice(f, inst):
    parts = f.popn(inst.arg)
    if not all(isinstance(p, Const) for p in parts):
        raise Unsupported("slice bounds that are tensors")
    f.push(Const(slice(*(p.value for p in parts))))


@handler("BUILD_STRING")
def op_build_string(f, inst):
    f.push(Const("".join(realize_const(p) for p in f.popn(inst.arg))))


@handler("LIST_APPEND")
def op_list_append(f, inst):
    v = f.pop()
    target = _building(f, inst)
    target.items.append(v)


def _building(f, inst):
    """The container a comprehension or display is building, noted as mutated when it came from
    the frame state (a comprehension resumed after a graph break in its body: the region's
    appends are replayed onto the real list, as any sourced container's mutations are)."""
    target = f.stack[-inst.arg]
    if target.source is not None:
        if not isinstance(target, (ListV, DictV)):
            raise Unsupported(f"adding to a {type(target).__name__} built across a graph break")
        f.session.note_mutation(target)
    return target


@handler("SET_ADD")
def op_set_add(f, inst):
    v = f.pop()
    set_add(_building(f, inst).items, v)


@handler("MAP_ADD")
def op_map_add(f, inst):
    value, key = f.pop(), f.pop()
    _building(f, inst).items[realize_const(key)] = value


@handler("LIST_EXTEND")
def op_list_extend(f, inst):
    v = f.pop()
    _building(f, inst).items.extend(items_of(f, v))


@handler("SET_UPDATE")
def op_set_update(f, inst):
    v = f.pop()
    target = _building(f, inst)
    for item in items_of(f, v):
        set_add(target.items, item)


@handler("DICT_UPDATE", "DICT_MERGE")
def op_dict_update(f, inst):
    v = f.pop()
    target = _building(f, inst)
    if isinstance(v, DictV):
        target.items.update(v.items)
    elif isinstance(v, Const) and isinstance(v.value, dict):
        target.items.update({k: Const(x) for k, x in v.value.items()})
    else:
        raise Unsupported(f"** of {type(v).__name__}")


@handler("LIST_TO_TUPLE")
def op_list_to_tuple(f, inst):
    f.push(TupleV(f.pop().items))


@handler("UNPACK_SEQUENCE")
def op_unpack_sequence(f, inst):
    items = items_of(f, f.pop())
    if len(items) != inst.arg:
        raise Unsupported(f"cannot unpack {len(items)} values into {inst.arg}")
    f.stack.extend(reversed(items))


@handler("UNPACK_EX")
def op_unpack_ex(f, inst):
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = items_of(f, f.pop())
    if len(items) < before + after:
        raise Unsupported("not enough values to unpack")
    middle = ListV(items[before:len(items) - after])
    f.stack.extend(reversed(items[:before] + [middle] + items[len(items) - after:]))


# ---- subscripts ---------------------------------------------------------------------------------
def getitem(f, obj: V, key: V) -> V:
    if isinstance(obj, TensorV):
        return record(f.session, operator.getitem, (obj, key), {})
    if tensor_keys.is_tensor_lookup(obj, key):
        return tensor_keys.getitem(f, obj, key)
    if isinstance(key, TensorV):
        raise Unsupported("indexing a Python container with a tensor")
    own = own_method(obj, "__getitem__")
    if own is not None:
        return call_own(f, own, obj, key)
    k = realize_const(key)
    if isinstance(obj, (ListV, TupleV)):
        if isinstance(k, slice):
            return type(obj)(obj.items[k]) if isinstance(obj, ListV) else TupleV(obj.items[k])
        try:
            return obj.items[k]
        except (IndexError, TypeError) as e:
            raise Unsupported(f"index {k!r}: {e}") from e
    if isinstance(obj, DataDictV) and not isinstance(k, str):
        return TupleV(list(obj.items.values()))[k] if isinstance(k, slice) else list(obj.items.values())[k]
    if isinstance(obj, DictV):
        if k not in obj.items:
            raise Unsupported(f"key {k!r} is not in the dict")
        return obj.items[k]
    if isinstance(obj, Const):
        return _const_getitem(f, obj, k)
    raise Unsupported(f"subscript of {type(obj).__name__}")


def _const_getitem(f, obj: Const, k) -> V:
    value = obj.value
    if isinstance(value, torch.nn.Module):
        if obj.source is None:
            raise Unsupported("indexing a module container reached without a source")
        if isinstance(value, torch.nn.ModuleList) and isinstance(k, slice):
            # ``layers[:n]`` builds a new ModuleList on every call (and registering its modules
            # moves the module-state epoch): hold the original's items, by their own sources.
            return ListV([f.session.wrap(value[i], obj.source.item(i, value)) for i in range(len(value))[k]])
        return f.session.wrap(value[k], obj.source.item(k, value))
    if obj.source is not None and not isinstance(value, (str, bytes, tuple, torch.Size, range)):
        return f.session.wrap(value[k], obj.source.item(k, value))
    result = fold(operator.getitem, obj, Const(k))
    if isinstance(result.value, torch.Tensor):
        raise Unsupported("a tensor held in an untracked container")
    return result


@handler("BINARY_SUBSCR")
def op_binary_subscr(f, inst):
    key, obj = f.pop(), f.pop()
    f.push(getitem(f, obj, key))


@handler("BINARY_SLICE")
def op_binary_slice(f, inst):
    end, start, obj = f.pop(), f.pop(), f.pop()
    f.push(getitem(f, obj, Const(slice(realize_const(start), realize_const(end)))))


def setitem(f, obj: V, key: V, value: V) -> None:
    if isinstance(obj, TensorV):
        record(f.session, operator.setitem, (obj, key, value), {})
        return
    if isinstance(obj, ListV):
        k = realize_const(key)
        if isinstance(k, slice):
            obj.items[k] = items_of(f, value)
        else:
            obj.items[k] = value
    elif isinstance(obj, DictV):
        obj.items[realize_const(key)] = value
    else:
        raise Unsupported(f"item assignment into {type(obj).__name__}")
    f.session.note_mutation(obj)


@handler("STORE_SUBSCR")
def op_store_subscr(f, inst):
    key, obj, value = f.pop(), f.pop(), f.pop()
    setitem(f, obj, key, value)


@handler("STORE_SLICE")
def op_store_slice(f, inst):
    end, start, obj, value = f.pop(), f.pop(), f.pop(), f.pop()
    setitem(f, obj, Const(slice(realize_const(start), realize_const(end))), value)


@handler("DELETE_SUBSCR")
def op_delete_subscr(f, inst):
    key, obj = f.pop(), f.pop()
    if isinstance(obj, (ListV, DictV)):
        del obj.items[realize_const(key)]
        f.session.note_mutation(obj)
    else:
        raise Unsupported(f"del on {type(obj).__name__}")


# ---- operators ----------------------------------------------------------------------------------
@handler("BINARY_OP")
def op_binary(f, inst):
    b, a = f.pop(), f.pop()
    f.push(binary(f, BINARY[inst.argval], a, b))


@handler("COMPARE_OP")
def op_compare(f, inst):
    b, a = f.pop(), f.pop()
    f.push(compare(f, inst.argval, a, b))


@handler("IS_OP")
def op_is(f, inst):
    b, a = f.pop(), f.pop()
    f.push(Const(identity(a, b) != bool(inst.arg)))


@handler("CONTAINS_OP")
def op_contains(f, inst):
    container, item = f.pop(), f.pop()
    f.push(Const(contains(f, item, container) != bool(inst.arg)))


@handler("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def op_unary(f, inst):
    f.push(unary(f, UNARY[inst.opname], f.pop()))


@handler("UNARY_NOT")
def op_not(f, inst):
    f.push(Const(not truth(f, f.pop())))


@handler("FORMAT_VALUE")
def op_format_value(f, inst):
    spec = realize_const(f.pop()) if inst.arg & 4 else ""
    value = f.pop()
    if isinstance(value, TensorV):
        raise Unsupported("formatting a tensor into a string reads its data")
    v = realize_const(value)
    conv = {0: None, 1: str, 2: repr, 3: ascii}[inst.arg & 3]
    f.push(Const(format(conv(v) if conv else v, spec)))


@handler("GET_LEN")
def op_get_len(f, inst):
    f.push(length(f, f.stack[-1]))


