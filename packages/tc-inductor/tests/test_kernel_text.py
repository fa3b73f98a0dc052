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
