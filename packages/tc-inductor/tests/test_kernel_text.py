"""The kernel text of the debug directory: each distinct value printed once."""

import torch

from tc_inductor import kir
from tc_inductor.kir import Ops


def _kernel(value: kir.UOp) -> kir.Kernel:
    store = kir.Store("out", kir.xvars(1)[0], value, torch.float32)
    return kir.Kernel((8,), (), (kir.Stage((), (store,)),), (("in0", torch.float32),), (("out", torch.float32),))


def test_shared_operands_are_named_once():
    # v_{i+1} = v_i + v_i: as a tree this is 2**40 leaves; as a DAG, 42 values
    v = kir.UOp(Ops.LOAD, torch.float32, (), ("in0", kir.xvars(1)[0]))
    for _ in range(40):
        v = kir.UOp(Ops.ADD, torch.float32, (v, v))
    text = kir.format_kernel(_kernel(v), "k0")
    values = [line for line in text.splitlines() if line.strip().startswith("%")]
    assert len(values) == 41
    assert values[1].strip() == "%1 = add<float32>(%0, %0)"
    assert text.splitlines()[-1].strip() == "outer out[x0] = %40 as float32"


def test_indirect_index_names_are_the_same_in_every_process():
    """An embedding's kernel source must not change between processes (its cache entry would
    miss on a warm start): the indirect index symbol is named by the value's structure."""
    import subprocess
    import sys

    script = ("import torch, sympy; from tc_inductor import kir; x = kir.xvars(1)[0]; "
              "v = kir.UOp(kir.Ops.LOAD, torch.int64, (), ('idx', x)); "
              "s = kir.indirect_symbol(kir.UOp(kir.Ops.ADD, torch.int64, (v, kir.const(3, torch.int64)))); "
              "print(s.name, kir.indirect_symbol(v).name)")
    names = {subprocess.run([sys.executable, "-c", script], env={"PYTHONHASHSEED": seed, "PATH": ""},
                            capture_output=True, text=True, check=True).stdout for seed in ("1", "2", "3")}
    assert len(names) == 1, names
    first, second = names.pop().split()
    assert first != second and first.startswith("ind_")


def test_a_floor_of_a_possibly_negative_size_divides_exactly():
    """C++ and Triton divide integers toward zero, the Python wrapper toward minus infinity: a
    size ``floor(-s/2)`` (a convolution over a symbolic kernel size) printed as ``-s / 2`` made
    kernels index past the buffers the wrapper had sized. A numerator known non-negative keeps
    the plain division."""
    import sympy

    from tc_inductor.codegen.common import print_index

    s = sympy.Symbol("s3", integer=True, positive=True)
    negative, positive = sympy.floor(-s / 2) + 8, sympy.floor(s / 2)
    assert "tc_floordiv<int64_t>" in print_index(negative, {}, "/")
    assert print_index(positive, {}, "/") == "(s3 / 2)" and print_index(positive, {}, "tl") == "(s3 // 2)"
    triton_text, python_text = print_index(negative, {}, "tl"), print_index(negative, {}, "//")
    # Triton's text divides only non-negative values (either rounding then agrees): its value
    # under Python's rounding is the one under Triton's
    assert "tl.where(" in triton_text and ">= 0" in triton_text

    class TL:
        where = staticmethod(lambda c, a, b: a if c else b)

    for v in range(1, 9):
        want = (-v) // 2 + 8
        assert eval(python_text, {"s3": v}) == want
        assert eval(triton_text, {"s3": v, "tl": TL}) == want


def test_equal_kernel_trees_built_twice_compare_in_linear_time():
    """A max over a window reads the running best twice a step: attrs' recursive comparison of
    two such chains built apart took 2**length steps (20 steps: 2 s; 60 would never end). Also:
    trees that differ in one leaf, dtype or constant's sign are unequal."""
    def chain(n, last="in", dtype=torch.float32, zero=0.0):
        best = kir.UOp(kir.Ops.LOAD, dtype, (), "in0")
        for i in range(n):
            v = kir.UOp(kir.Ops.LOAD, dtype, (), f"{last if i == n - 1 else 'in'}{i + 1}")
            best = kir.where(kir.binary(kir.Ops.GT, best, v), best, v)
        return kir.binary(kir.Ops.ADD, best, kir.const(zero, dtype))

    a, b = chain(60), chain(60)
    assert a is not b and a == b and hash(a) == hash(b) and not (a != b)
    assert a != chain(60, last="other") and a != chain(60, dtype=torch.float64) and a != chain(60, zero=-0.0)
    assert len({a, b, chain(60, zero=-0.0)}) == 2
