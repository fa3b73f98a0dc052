"""Exceptions raised and caught inside a compiled frame: the instruction that raises is a graph
break run in Python, and capture resumes in the ``except``/``finally`` handler that catches it."""

from __future__ import annotations

import io

import pytest
import torch
from helpers import check

import tc_capture


def _targets(be):
    return [[getattr(n.target, "__name__", str(n.target)) for n in g.calls] for g in be.graphs]


def _counts(fn, *args):
    r = tc_capture.capture(fn, *args)
    return r.graph_count, r.graph_break_count


def raise_and_dict_miss(x):
    y = x * 2
    try:
        raise ValueError("boom")
    except ValueError:
        y = y + 1
    try:
        d = {}["missing"]  # noqa: F841
    except KeyError:
        y = y - 3
    return torch.sin(y)


def test_capture_continues_in_handlers():
    compiled, be = check(raise_and_dict_miss, lambda: (torch.randn(4),), lambda: (torch.randn(2, 3),))
    assert _counts(raise_and_dict_miss, torch.randn(4)) == (3, 3)  # was 1 graph, 2 breaks
    assert _targets(be)[:3] == [["mul"], ["add"], ["sub", "sin"]]


def raise_as_name(x):
    try:
        raise KeyError("k")
    except (IndexError, KeyError) as e:
        x = x + len(e.args)
    return x.cos()


def test_except_tuple_with_name():
    check(raise_as_name, lambda: (torch.randn(3),))
    assert _counts(raise_as_name, torch.randn(3)) == (1, 2)  # the graph: add, cos


class Obj:
    def __init__(self, scale=None):
        if scale is not None:
            self.scale = scale

    def __eq__(self, other):
        return vars(self) == vars(other)


def getattr_default(x, obj):
    try:
        s = obj.scale
    except AttributeError:
        s = None
    y = x * 2
    return y * s if s is not None else y - 1


def test_attribute_error_default_pattern():
    check(getattr_default, lambda: (torch.randn(3), Obj()), lambda: (torch.randn(3), Obj(3.0)))
    assert _counts(getattr_default, torch.randn(3), Obj()) == (1, 1)


def index_error(x, items):
    try:
        w = items[5]
    except IndexError:
        w = 0.5
    return (x * w).relu()


def test_index_error_from_a_list():
    check(index_error, lambda: (torch.randn(3), [1.0, 2.0]), lambda: (torch.randn(3), [1.0] * 7))


def try_finally(x):
    y = x + 1
    try:
        y = y * {}["nope"]
    except KeyError:
        y = y - 1
    finally:
        y = y * 3
    return y.exp()


def test_finally_after_a_handled_exception():
    compiled, be = check(try_finally, lambda: (torch.randn(3),))
    assert any("exp" in t for t in _targets(be))


def finally_escapes(x):
    y = x + 1
    try:
        y = y[{}["nope"]]
    finally:
        y = y * 3
    return y


def mismatched_except(x):
    try:
        return x + {}["nope"]
    except IndexError:
        return x


def test_exceptions_escaping_the_frame_propagate():
    be_free = tc_capture.optimize(tc_capture.api.interpret_backend)
    for fn in (finally_escapes, mismatched_except):
        compiled = be_free(fn)
        for _ in range(2):
            with pytest.raises(KeyError, match="nope"):
                compiled(torch.randn(3))


def _raises_inside(x):
    x = x * 2
    return x[{}["absent"]]


def caught_from_inlined_call(x):
    y = x - 1
    try:
        y = _raises_inside(y)
    except KeyError:
        y = y * 10
    return y.tanh()


def test_exception_from_an_inlined_call_is_caught_in_the_caller():
    compiled, be = check(caught_from_inlined_call, lambda: (torch.randn(3),))
    assert any("tanh" in t for t in _targets(be))


def loop_with_try(x, keys):
    table = {"a": 1.0, "b": 2.0}
    for k in keys:
        try:
            x = x * table[k]
        except KeyError:
            x = x + 1
    return x.sin()


def test_loop_with_try_except_in_the_body():
    check(loop_with_try, lambda: (torch.randn(3), ["a", "z", "b", "q"]),
          lambda: (torch.randn(3), ["z", "z", "a"]))


def test_loop_with_try_past_the_recompile_limit():
    compiled = tc_capture.optimize(tc_capture.api.interpret_backend, recompile_limit=2)(loop_with_try)
    keys = ["a", "z"] * 6
    x = torch.randn(3)
    for _ in range(2):
        assert torch.allclose(compiled(x, keys), loop_with_try(x, keys))


def bare_reraise(x):
    try:
        x = x + {}["gone"]
    except KeyError:
        x = x * 2
        raise
    return x


def test_bare_raise_in_a_handler_keeps_native_handlers():
    compiled = tc_capture.optimize(tc_capture.api.interpret_backend)(bare_reraise)
    for _ in range(2):
        with pytest.raises(KeyError, match="gone"):
            compiled(torch.randn(3))


def raise_in_handler(x):
    try:
        x = x + {}["gone"]
    except KeyError:
        raise ValueError("changed")  # noqa: B904  (eager's __context__ is what is compared)
    return x


def test_new_exception_from_a_handler_propagates():
    compiled = tc_capture.optimize(tc_capture.api.interpret_backend)(raise_in_handler)
    for _ in range(2):
        with pytest.raises(ValueError, match="changed"):
            compiled(torch.randn(3))


_SINK = io.StringIO()


def break_in_handler(x, log):
    try:
        x = x * {}["gone"]
    except KeyError as e:
        log.append(str(e))
        print(e, file=_SINK)  # a break inside the handler body
        x = x * 2
    return x.cos()


def test_break_inside_a_handler_body():
    compiled, be = check(break_in_handler, lambda: (torch.randn(3), []))
    assert _counts(break_in_handler, torch.randn(3), []) == (1, 2)  # x * 2, cos after the print
