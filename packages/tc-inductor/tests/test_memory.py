"""Memory planning in the generated wrapper: buffers die after their last use, dead buffers are
reused (large ones by the next step only), boxed calls let inputs die early; peak memory at or
below eager's."""

from __future__ import annotations

import re

import pytest
import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir
from tc_inductor import memory

aten = torch.ops.aten


def _chain(g, x, w):
    # extern matmuls between kernels: each kernel's result dies after the next matmul reads it
    h = x
    for _ in range(4):
        h = g.call(aten.mm.default, g.call(aten.relu.default, g.call(aten.mul.Tensor, h, 0.5)), w)
    return g.call(aten.add.Tensor, h, 1.0)


def _compile(fn, inputs, **options):
    return tc_inductor.compile(build(fn, inputs), inputs, {"cache": False, **options})


def _locals_after(source: str) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """The wrapper's lines, and per name the line of its ``del`` and of its last other mention."""
    lines = source.splitlines()
    deleted, last = {}, {}
    for i, line in enumerate(lines):
        code = line.split("#", 1)[0]
        if code.strip().startswith("del "):
            for name in code.strip()[4:].split(","):
                deleted[name.strip()] = i
            continue
        for name in re.findall(r"[A-Za-z_]\w*", code):
            last[name] = i
            if name.startswith("ptr_"):
                last[name[4:]] = i
    return lines, deleted, last


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_every_dead_local_is_deleted_after_its_last_use(backend):
    inputs = [torch.randn(16, 16), torch.randn(16, 16)]
    k = _compile(_chain, inputs, backend=backend)
    lines, deleted, last = _locals_after(k.source)
    assert deleted, k.source
    for name, at in deleted.items():
        assert last[name] < at, f"{name} read after its del:\n{k.source}"
    returned = set(re.findall(r"\w+", lines[-1]))
    assigned = {m for line in lines for m in memory._assigned(line)} - returned
    tensors = {n for n in assigned if not n.startswith("ptr_")}
    assert tensors <= set(deleted), (tensors - set(deleted), k.source)
    for _ in range(2):
        fresh = [torch.randn(16, 16), torch.randn(16, 16)]
        assert_same(k(*fresh), tc_ir.interpret(build(_chain, inputs), fresh))


def test_a_large_dead_buffer_is_reused_by_the_next_step_only():
    # 512x512 float32 = 1 MiB + 4 bytes past FreePool.SMALL: only the next step may take it
    inputs = [torch.randn(512, 513), torch.randn(513, 513)]
    k = _compile(_chain, inputs, backend="cpp")
    assert "# reuse" in k.source
    lines = k.source.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"\s*(\w+) = (\w+)(?:\.as_strided\(.*\))?  # reuse", line)
        if match:  # the reused buffer's last reader is the step just before
            old = match.group(2)
            readers = [j for j, other in enumerate(lines[:i]) if re.search(rf"\b{old}\b", other.split("#")[0])]
            assert i - readers[-1] <= 6, k.source
    fresh = [torch.randn(512, 513), torch.randn(513, 513)]
    assert_same(k(*fresh), tc_ir.interpret(build(_chain, inputs), fresh))


def _layout(shape, dtype=torch.float32):
    stride = tuple(int(torch.tensor(shape[i + 1:]).prod()) for i in range(len(shape)))
    return (shape, stride, dtype, torch.device("cpu"))


def test_size_class_reuse_reshapes_a_dead_buffer():
    pool = memory.FreePool()
    pool.add("buf1", ((4, 8), (8, 1), torch.float32, torch.device("cpu")))
    pool.next_step()
    assert pool.take((8, 4), (1, 8), torch.float32, "cpu") == "buf1.as_strided((8, 4), (1, 8))"
    pool.add("buf2", ((4, 8), (8, 1), torch.float32, torch.device("cpu")))
    pool.next_step()
    assert pool.take((4, 8), (8, 1), torch.float16, "cpu") is None  # another dtype
    assert pool.take((2, 8), (8, 1), torch.float32, "cpu") is None  # another size


def test_small_dead_buffers_wait_for_a_later_step_large_ones_do_not():
    pool = memory.FreePool()
    pool.add("small", _layout((64, 64)))
    pool.add("large", _layout((1024, 1024)))  # 4 MiB > SMALL
    pool.next_step()
    for _ in range(5):
        pool.next_step()
    assert pool.take((1024, 1024), (1024, 1), torch.float32, "cpu") is None
    assert pool.take((64, 64), (64, 1), torch.float32, "cpu") == "small"
    assert pool.take((64, 64), (64, 1), torch.float32, "cpu") is None  # taken once


def test_held_bytes_are_bounded_oldest_dropped_first():
    pool = memory.FreePool()
    n = memory.FreePool.HELD // memory.FreePool.SMALL + 1
    shape = (memory.FreePool.SMALL // 4,)
    for i in range(n):  # each exactly SMALL bytes: one more than HELD allows
        pool.add(f"buf{i}", _layout(shape))
        pool.next_step()
    pool.next_step()
    taken = []
    while (name := pool.take(shape, (1,), torch.float32, "cpu")) is not None:
        taken.append(name)
    assert sorted(taken) == sorted(f"buf{i}" for i in range(1, n)), taken


def _two_mm_chain(g, x, w):
    # each kernel's result dies at the first matmul after it: two steps before the next kernel
    h = x
    for _ in range(4):
        t = g.call(aten.relu.default, g.call(aten.mul.Tensor, h, 0.5))
        h = g.call(aten.add.Tensor, g.call(aten.mm.default, g.call(aten.mm.default, t, w), w), 1.0)
    return h


def test_a_small_buffer_is_reused_steps_after_it_died_and_results_match():
    inputs = [torch.randn(16, 16), torch.randn(16, 16)]
    k = _compile(_two_mm_chain, inputs, backend="cpp")
    assert k.source.count("# reuse") >= 3, k.source
    for _ in range(3):
        fresh = [torch.randn(16, 16), torch.randn(16, 16)]
        assert_same(k(*fresh), tc_ir.interpret(build(_two_mm_chain, inputs), fresh))


def test_globals_are_never_deleted():
    chunks = [["a, b = args"], ["buf0 = k0(a, const0)"], ["c = ext(buf0, b)"], ["return c"]]
    body = memory.free_dead(chunks)
    assert body == ["a, b = args", "buf0 = k0(a, const0)", "del a", "c = ext(buf0, b)", "del b, buf0", "return c"]


def test_pointer_reads_keep_the_tensor_alive():
    chunks = [["x, = args"], ["ptr_x = x.data_ptr()", "k0(ptr_x)"], ["k1(ptr_x)"], ["return 1"]]
    body = memory.free_dead(chunks)
    assert body.index("del x") == body.index("k1(ptr_x)") + 1


def test_boxed_call_empties_the_list_and_matches():
    inputs = [torch.randn(16, 16), torch.randn(16, 16)]
    k = _compile(_chain, inputs, backend="cpp")
    fresh = [torch.randn(16, 16), torch.randn(16, 16).t()]  # one input in another layout
    expected = tc_ir.interpret(build(_chain, inputs), fresh)
    boxed = list(fresh)
    assert_same(k.call_boxed(boxed), expected)
    assert boxed == []


def test_zero_size_and_noncontiguous_inputs():
    def fn(g, x):
        return g.call(aten.mul.Tensor, g.call(aten.sin.default, g.call(aten.cos.default, x)), 2.0)

    for x in (torch.randn(0, 5), torch.randn(6, 5).t()):
        k = _compile(fn, [x], backend="cpp")
        assert_same(k(x), tc_ir.interpret(build(fn, [x]), [x]))


# ---- CUDA: peak memory against eager -------------------------------------------------------------
def _peak(step) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


@pytest.mark.cuda
def test_cuda_training_peak_memory_at_most_eager():
    tc_autograd = pytest.importorskip("tc_autograd")
    n, width, layers = 4096, 1024, 6
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((n, width), torch.float32, torch.device("cuda")))
    ws = [g.input(f"w{i}", tc_ir.TensorSpec((width, width), torch.float32, torch.device("cuda")))
          for i in range(layers)]
    h = x
    for w in ws:  # matmul, gelu, a residual: activations the backward needs, temporaries it does not
        h = g.call(torch.add, h, g.call(torch.nn.functional.gelu, g.call(torch.matmul, h, w)))
    g.output(g.call(torch.sum, g.call(torch.mul, h, h)))

    def inputs():
        return [torch.randn(n, width, device="cuda")] + \
            [(torch.randn(width, width, device="cuda") / width ** 0.5).requires_grad_() for _ in ws]

    compiler = lambda graph, ex: tc_inductor.compile(graph, ex)  # noqa: E731
    f = tc_autograd.aot(g, inputs(), fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=tc_inductor.decompositions())
    args = inputs()
    f(*args).backward()  # warm: kernels loaded

    def run(fn):
        def step():
            fn(*args).backward()
        return step

    eager = _peak(run(lambda *a: tc_ir.interpret(g, a)))
    compiled = _peak(run(f))
    assert compiled <= eager * 1.05, (compiled / 2**20, eager / 2**20)


def test_compile_keeps_no_example_input_alive():
    """Example inputs die with the caller's references, without waiting for the cyclic GC: a
    backward is compiled with zeros the size of every saved activation."""
    import gc
    import weakref

    inputs = [torch.randn(16, 16), torch.randn(16, 16)]
    refs = [weakref.ref(t) for t in inputs]
    enabled = gc.isenabled()
    gc.disable()
    try:
        k = _compile(_chain, inputs, backend="cpp")
        del inputs
        assert all(r() is None for r in refs)
    finally:
        if enabled:
            gc.enable()
    fresh = [torch.randn(16, 16), torch.randn(16, 16)]
    assert_same(k(*fresh), tc_ir.interpret(build(_chain, fresh), fresh))


def test_size_one_strides_are_not_compared(monkeypatch):
    """An input (or extern result) whose strides differ from the compiled ones only on size-1 dims
    is used as it is, without a ``_layout`` call; any other difference is laid out, and the values
    always match eager."""
    import sys

    from tc_inductor.wrapper import _not_laid_out

    assert _not_laid_out("x", (4, 1, 3), (3, 3, 1)) == "x.shape != (4, 1, 3) or (_st := x.stride())[0] != 3 or _st[2] != 1"
    assert _not_laid_out("x", (1, 1), (1, 1)) == "x.shape != (1, 1)"
    assert _not_laid_out("x", (2, 3), (3, 1)) == "x.stride() != (3, 1) or x.shape != (2, 3)"

    def fn(g, x):
        return g.call(aten.mul.Tensor, g.call(aten.sin.default, x), 2.0)

    example = torch.randn(4, 1, 3)
    calls = []
    module = sys.modules["tc_inductor.compile"]
    real = module._layout
    monkeypatch.setattr(module, "_layout", lambda *a: calls.append(a) or real(*a))  # read when the wrapper loads
    k = _compile(fn, [example], backend="cpp")
    odd = torch.randn(12).as_strided((4, 1, 3), (3, 99, 1))  # another stride on the size-1 dim only
    assert_same(k(odd), tc_ir.interpret(build(fn, [example]), [odd]))
    assert calls == []
    transposed = torch.randn(3, 1, 4).permute(2, 1, 0)  # another order on the size > 1 dims
    assert_same(k(transposed), tc_ir.interpret(build(fn, [example]), [transposed]))
    assert len(calls) == 1
