"""Graph counts, break reasons with file:line, recompiles, the recompile limit, threads, timing."""

from __future__ import annotations

import logging
import threading
import warnings

import pytest
import torch
from helpers import check, tree_close

import tc_capture


def _line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def brk_print(x):
    y = x * 2
    print("side")  # BREAK
    return y + 1


def brk_item(x):
    n = x.sum().item()  # BREAK
    return x * n


def brk_if(x):
    if x.sum() > 0:  # BREAK
        return x + 1
    return x - 1


def inner_break(x):
    print("inner")  # BREAK
    return x * 3


def brk_nested(x):
    y = x.sin()
    z = inner_break(y)
    return z.cos()


def brk_loop(x, out):
    for i in range(3):
        x = x + i
        out.append(x)
        print(i)  # BREAK
    return x


def brk_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")  # BREAK
        z = y + x
    return z * x


BREAKS = [(brk_print, 2, 1), (brk_item, 2, 1), (brk_if, 2, 1), (brk_nested, 3, 1), (brk_no_grad, 2, 1)]


@pytest.mark.parametrize("fn,graphs,breaks", BREAKS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_break_counts_and_location(fn, graphs, breaks):
    r = tc_capture.capture(fn, torch.randn(4, requires_grad=fn is brk_no_grad))
    assert len(r.breaks) == breaks, r
    assert len(r.graphs) == graphs, r
    b = r.breaks[0]
    target = inner_break if fn is brk_nested else fn
    assert b.filename == __file__ and b.lineno == _line_of(target, "# BREAK"), str(b)
    if fn is not brk_item:  # .item() gives a float the resumed code specializes on
        make = torch.rand if fn is brk_if else torch.randn  # same branch each call: no new resume point
        check(fn, lambda: (make(4, requires_grad=fn is brk_no_grad),))


def test_break_in_loop_side_effects():
    out1, out2 = [], []
    f = tc_capture.optimize(tc_capture.interpret_backend)(brk_loop)
    x = torch.randn(3)
    tree_close(brk_loop(x, out1), f(x, out2))
    tree_close(out1, out2)


def test_fullgraph_raises_with_location():
    f = tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(brk_print)
    with pytest.raises(tc_capture.GraphBreakError) as info:
        f(torch.randn(3))
    assert info.value.lineno == _line_of(brk_print, "# BREAK") and "print" in str(info.value)


def test_recompile_on_shape_and_log(caplog):
    be_calls = []
    f = tc_capture.optimize(lambda g, ex: be_calls.append(g) or tc_capture.interpret_backend(g, ex))(
        lambda x: x * 2)
    logging.getLogger("tc.recompiles").setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="tc.recompiles"):
        f(torch.randn(3))
        f(torch.randn(3))
        f(torch.randn(4))
    logging.getLogger("tc.recompiles").setLevel(logging.WARNING)
    assert len(be_calls) == 2
    assert any("x: Tensor float32[3]" in r.getMessage() for r in caplog.records)


def test_grad_mode_guard():
    calls = []
    f = tc_capture.optimize(lambda g, ex: calls.append(g) or tc_capture.interpret_backend(g, ex))(lambda x: x * 2)
    x = torch.randn(3, requires_grad=True)
    assert f(x).requires_grad
    with torch.no_grad():
        assert not f(x).requires_grad
    assert len(calls) == 2


def test_recompile_limit_falls_back_with_one_warning():
    f = tc_capture.optimize(tc_capture.interpret_backend, recompile_limit=2)(lambda x, k: x * k)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for k in range(5):
            assert torch.equal(f(torch.ones(2), k), torch.ones(2) * k)
    assert len(f._tc_cache.entries[0]) == 2
    assert sum("recompile limit" in str(m.message) for m in w) == 1


def test_threads_get_correct_results():
    f = tc_capture.optimize(tc_capture.interpret_backend)(lambda x, y: (x @ y).relu() + x.sum())
    errors = []

    def work(seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(30):
            x, y = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
            if not torch.allclose(f(x, y), (x @ y).relu() + x.sum()):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_is_compiling_and_reset():
    seen = []
    f = tc_capture.optimize(lambda g, ex: seen.append(tc_capture.is_compiling()) or tc_capture.interpret_backend(g, ex))(
        lambda x: x + 1)
    f(torch.randn(2))
    assert seen == [True] and not tc_capture.is_compiling()
    tc_capture.reset()
    f(torch.randn(2))
    assert len(seen) == 2


def test_mark_dynamic_accepted():
    x = torch.randn(3)
    tc_capture.mark_dynamic(x, 0)
    assert 0 in x._tc_dynamic_dims


def test_explain_reads_well():
    r = tc_capture.explain(brk_print, torch.randn(3))
    text = str(r)
    assert "graphs: 2, graph breaks: 1" in text and "print" in text and r.ops_per_graph == [1, 1]


# ---- breaks in loops past the recompile limit: the rest of the frame resumes natively ---------------
def _loop_item(x, n):
    acc = []
    for i in range(n):
        x = x * 1.01 + i
        acc.append(x.sum().item())  # a break in every iteration
    try:
        z = acc[n]  # IndexError, caught in the natively resumed code
    except IndexError:
        z = -1
    return x, acc, z


def _loop_with_null_on_stack(x, n):
    out = []
    for i in range(n):
        out.append(max(i, len(str(x.sum().item())) * 0))  # stack: NULL, max, i at the break
    return x + len(out), out


def _loop_in_no_grad(x, n):
    with torch.no_grad():
        for i in range(n):
            x = x + 1
            print("step", i)
        y = x * 2
    return y, torch.is_grad_enabled()


def _make_closure_loop():
    scale = 3.0

    def loop(x, n):
        total = x
        for i in range(n):
            total = total * scale / 3.0 + i
            print(i)
        if n > 100:
            del total
            return None
        return total

    return loop


@pytest.mark.parametrize("fn", [_loop_item, _loop_with_null_on_stack, _loop_in_no_grad, _make_closure_loop()],
                         ids=["item", "null_on_stack", "no_grad", "closure"])
def test_break_in_long_loop_resumes_natively(fn, monkeypatch, capsys):
    from tc_capture.cache import frame_cache as runtime

    natively = []
    real = runtime.resume_natively
    monkeypatch.setattr(runtime, "resume_natively", lambda *a: natively.append(a[3]) or real(*a))
    f = tc_capture.optimize(tc_capture.interpret_backend, recompile_limit=3)(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (2, 12, 12, 7):
            x = torch.randn(4, requires_grad=True)
            tree_close(fn(x, n), f(x, n))
    assert natively, "the limit was never hit"


def test_native_resume_keeps_exceptions_and_locations():
    import dis as _dis

    from tc_capture.resume.native_resume import _resume_function

    code = _loop_item.__code__
    offsets = [i.offset for i in _dis.get_instructions(code) if i.opname == "JUMP_BACKWARD"]
    made = _resume_function(code, offsets[0], (1,), ())
    entries = _dis._parse_exception_table(made)
    shift = len(made.co_code) - len(code.co_code)
    assert [(e.start - shift, e.end - shift, e.target - shift) for e in entries] == \
        [(e.start, e.end, e.target) for e in _dis._parse_exception_table(code)]
    assert [p for p in made.co_positions()][shift // 2:] == list(code.co_positions())
