"""Fail closed: an exception inside tc_capture runs the region eagerly with one warning naming the
user's file:line; the user's own exceptions reach them unchanged; unusual inputs and calls
(sparse, quantized, nested, overload packets, custom ops, torch._C logging) compile or fall back.

Every result is compared with eager on fresh inputs, over two calls.
"""

from __future__ import annotations

import traceback
import warnings

import pytest
import torch

import tc_capture
import tc_capture.cache.frame_cache as runtime
import tc_capture.resume.compile_region as compile_region
from tc_capture import interpret_backend
from tc_capture.resume.real_frame import RealFrame


def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


def _model(x, w):
    y = torch.relu(x @ w)
    return y * 2 + 1


def _inputs():
    return torch.randn(3, 4), torch.randn(4, 5)


def _calls_with_warnings(fn, calls):
    outs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            outs.append(fn(*args))
    return outs, [w for w in caught if "tc" in str(w.message)]


# Each stage of compiling a region, by the name the driver calls it through.
STAGES = {
    "capture": (runtime, "capture_region"),
    "entry": (runtime, "build_entry"),
    "guards": (compile_region, "compile_guards"),
    "runner": (compile_region, "generate_runner"),
    "grad_mode": (compile_region, "hoist_grad_mode"),
}


@pytest.mark.parametrize("stage", [*STAGES, "backend"])
def test_a_failure_in_any_stage_runs_eagerly_with_one_warning(stage, monkeypatch):
    backend = _boom if stage == "backend" else interpret_backend
    if stage != "backend":
        monkeypatch.setattr(*STAGES[stage], _boom)
    fn = tc_capture.optimize(backend)(_model)
    calls = [_inputs(), _inputs(), _inputs()]
    outs, caught = _calls_with_warnings(fn, calls)
    for out, args in zip(outs, calls):
        torch.testing.assert_close(out, _model(*args))
    assert len(caught) == 1, [str(w.message) for w in caught]
    where = f"{__file__}:{_model.__code__.co_firstlineno}"
    assert where in str(caught[0].message) and "injected failure" in str(caught[0].message)
    assert caught[0].filename == __file__ and caught[0].lineno == _model.__code__.co_firstlineno


@pytest.mark.parametrize("stage", [*STAGES, "backend"])
def test_fullgraph_turns_a_failure_into_a_clear_error(stage, monkeypatch):
    backend = _boom if stage == "backend" else interpret_backend
    if stage != "backend":
        monkeypatch.setattr(*STAGES[stage], _boom)
    fn = tc_capture.optimize(backend, fullgraph=True)(_model)
    with pytest.raises(tc_capture.CompileError, match="injected failure") as err:
        fn(*_inputs())
    assert f"{__file__}:{_model.__code__.co_firstlineno}" in str(err.value)


def _with_break(x):
    y = x.sin()
    print(end="")  # a graph break: the code below is its own region
    return y.cos() + 1


def test_a_failure_after_a_break_runs_only_that_region_eagerly(monkeypatch):
    real = runtime.capture_region

    def fail_after_break(code, globals_, F, C, offset, *rest):
        if offset:
            raise RuntimeError("injected failure")
        return real(code, globals_, F, C, offset, *rest)

    monkeypatch.setattr(runtime, "capture_region", fail_after_break)
    graphs = []
    fn = tc_capture.optimize(lambda g, ex: (graphs.append(g), interpret_backend(g, ex))[1])(_with_break)
    calls = [(torch.randn(5),), (torch.randn(5),)]
    outs, caught = _calls_with_warnings(fn, calls)
    for out, (x,) in zip(outs, calls):
        torch.testing.assert_close(out, _with_break(x))
    assert len(graphs) == 1 and len(caught) == 1  # the first region stays compiled
    first = _with_break.__code__.co_firstlineno  # the region starts just after the print call
    assert any(f"{__file__}:{first + k}:" in str(caught[0].message) for k in (2, 3)), str(caught[0].message)


# ---- the user's own exceptions -----------------------------------------------------------------
def _raises_here(x):
    y = x + 1
    if y.shape[0] == 3:
        raise KeyError("user key")
    return y


def _helper(x):
    raise ValueError(f"bad value {x.shape[0]}")


def _raises_in_callee(x):
    y = x * 2
    return _helper(y)


def _shape_error(a, b):
    h = torch.relu(a)
    return h @ b + 1


@pytest.mark.parametrize("fn, args, line", [
    (_raises_here, (torch.randn(3),), 3),
    (_raises_in_callee, (torch.randn(3),), 2),
    (_shape_error, (torch.randn(3, 4), torch.randn(5, 6)), 2),
])
def test_user_exceptions_propagate_unchanged_with_the_users_frame(fn, args, line):
    compiled = tc_capture.optimize(interpret_backend)(fn)
    for _ in range(2):
        with pytest.raises(Exception) as eager:
            fn(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback warning: this is the user's error
            with pytest.raises(Exception) as got:
                compiled(*args)
        assert type(got.value) is type(eager.value) and str(got.value) == str(eager.value)
        frames = traceback.extract_tb(got.value.__traceback__)
        want = fn.__code__.co_firstlineno + line
        assert any(f.filename == __file__ and f.lineno == want and f.name == fn.__name__ for f in frames), \
            "".join(traceback.format_list(frames))


def test_a_call_with_wrong_arguments_raises_eagers_error():
    compiled = tc_capture.optimize(interpret_backend)(_model)
    with pytest.raises(TypeError) as eager:
        _model(torch.randn(2, 2))
    with pytest.raises(TypeError) as got:
        compiled(torch.randn(2, 2))
    assert str(got.value) == str(eager.value)


# ---- unusual inputs ---------------------------------------------------------------------------------
class _Sub(torch.Tensor):
    pass


def _quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.randn(4), 0.1, 10, torch.quint8)


def _nested():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])


def _csr():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.randn(3, 3).relu().to_sparse_csr()


INPUTS = {
    "sparse_csr": (_csr, lambda x: (x * 2).to_dense()),
    "sparse_coo": (lambda: torch.randn(3, 3).relu().to_sparse(), lambda x: (x * 2).to_dense()),
    "quantized": (_quantized, lambda x: x.dequantize() * 2),
    "nested": (_nested, lambda x: torch.cat([t for t in x.sin().unbind()])),
    "complex": (lambda: torch.randn(3, dtype=torch.cfloat), lambda x: (x * 2 + 1).abs()),
    "meta": (lambda: torch.randn(3, device="meta"), lambda x: (x * 2).shape),
    "subclass": (lambda: torch.randn(3).as_subclass(_Sub), lambda x: x.sin() + 1),
    "non_leaf": (lambda: torch.randn(3, requires_grad=True) * 2, lambda x: (x.sin() * 3).sum()),
    "zero_size": (lambda: torch.randn(0, 3), lambda x: x.sin().sum(0)),
    "non_contiguous": (lambda: torch.randn(4, 6)[:, ::2], lambda x: x.t() * 2),
}


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert type(a) is type(b)
        if a.device.type == "meta":
            assert a.shape == b.shape and a.dtype == b.dtype
        else:
            torch.testing.assert_close(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("name", list(INPUTS))
def test_unusual_inputs_compile_or_fall_back_with_one_warning(name):
    make, fn = INPUTS[name]
    compiled = tc_capture.optimize(interpret_backend)(fn)
    calls = [(make(),), (make(),)]
    outs, caught = _calls_with_warnings(compiled, calls)
    for out, args in zip(outs, calls):
        _same(out, fn(*args))
    assert len(caught) <= 1, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]


# ---- unusual callables ----------------------------------------------------------------------------------
@torch.library.custom_op("tc_robustness::scaled_sin", mutates_args=())
def _scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return x.sin() * k


@_scaled_sin.register_fake
def _(x, k):
    return torch.empty_like(x)


CALLS = {
    "overload_packet": (lambda x, y: torch.ops.aten.div(x, y) + 1, torch.ops.aten.div.Tensor),
    "packet_with_kwarg": (lambda x, y: torch.ops.aten.div(x, y, rounding_mode="floor"), torch.ops.aten.div.Tensor_mode),
    "packet_scalar": (lambda x, y: torch.ops.aten.add(x, 2, alpha=3) * y, None),
    "custom_op_object": (lambda x, y: _scaled_sin(x, 2.5) + y, torch.ops.tc_robustness.scaled_sin.default),
    "custom_op_packet": (lambda x, y: torch.ops.tc_robustness.scaled_sin(x, 2.5) * y,
                         torch.ops.tc_robustness.scaled_sin.default),
    "log_api_usage": (lambda x, y: (torch._C._log_api_usage_once("tc.test.usage"), x * y)[1], None),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_overload_packets_custom_ops_and_usage_logging_are_captured(name):
    fn, overload = CALLS[name]
    r = tc_capture.capture(fn, torch.randn(4), torch.rand(4) + 1)
    assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks
    targets = [n.target for n in r.graphs[0].calls]
    assert not any(isinstance(t, (torch._ops.OpOverloadPacket, torch._library.custom_ops.CustomOpDef)) for t in targets)
    assert torch._C._log_api_usage_once not in targets
    if overload is not None:
        assert overload in targets, targets
    compiled = tc_capture.optimize(interpret_backend)(fn)
    for _ in range(2):
        x, y = torch.randn(4), torch.rand(4) + 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.testing.assert_close(compiled(x, y), fn(x, y))


def test_graph_text_is_not_formatted_without_a_log_or_dump(monkeypatch):
    import tc_ir

    def refuse(self, *args, **kwargs):
        raise AssertionError("graph text formatted with no log or dump asking")

    monkeypatch.delenv("TC_DEBUG_DIR", raising=False)
    monkeypatch.setattr(tc_ir.Graph, "format", refuse)
    fn = tc_capture.optimize(interpret_backend)(_model)
    x, w = _inputs()
    torch.testing.assert_close(fn(x, w), _model(x, w))


def test_a_break_instruction_the_real_frame_does_not_run_runs_natively(monkeypatch):
    """After a break, the breaking instruction runs on the real-value frame; one it does not run
    runs as CPython bytecode from there (nothing of it ran yet), not an error."""
    runs = RealFrame.runs
    monkeypatch.setattr(RealFrame, "runs", staticmethod(lambda opname: opname != "CALL" and runs(opname)))
    fn = tc_capture.optimize(interpret_backend)(_item_break)
    for _ in range(2):
        x = torch.randn(5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.testing.assert_close(fn(x), _item_break(x))


def _item_break(x):
    y = x.sin()
    s = y.sum().item()  # a graph break at a CALL without keywords
    return y.cos() * s


class _BuiltinForward(torch.nn.Module):
    forward = staticmethod(torch.sin)  # not a Python function: nothing to capture


def test_a_module_whose_forward_is_not_python_runs_eagerly_with_one_warning():
    m = _BuiltinForward()
    compiled = tc_capture.optimize(interpret_backend)(m)
    calls = [(torch.randn(3),), (torch.randn(3),)]
    outs, caught = _calls_with_warnings(compiled, calls)
    for out, (x,) in zip(outs, calls):
        torch.testing.assert_close(out, m(x))
    assert len(caught) == 1 and caught[0].filename == __file__, [str(w.message) for w in caught]


def _module_state_changes():
    def requires_grad_off(m):
        m.lin.weight.requires_grad_(False)

    def data_swap(m):
        m.lin.weight.data = torch.randn(3, 4).t()  # same shape, other strides

    def to_double(m):
        m.to(torch.float64)

    def shadowed_flag(m):
        m.scale = 3.0

    def replaced_child(m):
        m.lin = torch.nn.Linear(3, 4, bias=False)

    return [requires_grad_off, data_swap, to_double, shadowed_flag, replaced_child]


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x).relu() * self.scale


@pytest.mark.parametrize("change", _module_state_changes(), ids=lambda f: f.__name__)
def test_module_state_changes_are_seen_without_any_patch(change):
    """What the removed nn.Module patch could not see (one parameter's requires_grad_, ``p.data =``)
    and what it did (``.to()``, attribute writes, replaced children) are all guarded now."""
    m = _Small()
    compiled = tc_capture.optimize(interpret_backend)(m)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), m(x))
    change(m)
    for _ in range(2):
        x = torch.randn(2, 3, dtype=m.lin.weight.dtype)
        out, expect = compiled(x), m(x)
        torch.testing.assert_close(out, expect)
        assert out.requires_grad == expect.requires_grad
    assert len(compiled._cache.entries[0]) == 2  # the change failed a guard: one recompile
