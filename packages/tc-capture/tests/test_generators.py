"""Generator expressions and generator functions consumed where they are made, module traversals."""

from __future__ import annotations

import pytest
import torch
from helpers import check
from torch import nn

import tc_capture


def g_unpack(q, k):
    v = q * k
    b, t, d = q.shape
    q, k, v = (z.view(b, t, 2, d // 2).transpose(1, 2) for z in (q, k, v))
    return q @ k.transpose(-1, -2) + v.sum()


def g_tuple(x, y):
    return tuple(z * 2 for z in (x, y))


def g_sum(x, y):
    return sum(p.pow(2).sum() for p in (x, y))


def g_any_all(x, y):
    a = any(z.dim() == 2 for z in (x, y))
    b = all(z.shape[0] > 0 for z in (x, y))
    return x * (2 if a else 3) + (1 if b else 0)


def g_cat(x, y):
    return torch.cat([torch.relu(z) for z in (x, y)]) + torch.stack(list(z + 1 for z in (x, y))).sum(0).sum()


def g_dict_set(x, y):
    d = {f"k{i}": z * i for i, z in enumerate((x, y))}
    s = {z.dim() for z in (x, y)}
    return d["k1"] + len(s) + dict((k, v) for k, v in d.items())["k0"]


def g_minmax(x, y):
    return x * max(z.shape[0] for z in (x, y)) + min(z.dim() for z in (x, y))


def g_zip_star(x, y):
    pairs = ((z, z + 1) for z in (x, y))
    firsts, seconds = zip(*pairs)
    return firsts[0] + seconds[1]


def g_enumerate_for(x, y):
    out = x
    for i, z in enumerate(w * 2 for w in (x, y)):
        out = out + z * i
    return out


def _gen_fn(x, n):
    for i in range(n):
        yield x * i
    yield from (x + 1, x - 1)


def g_user_generator(x, y):
    return sum(_gen_fn(x, 3)) + y


def _nested(xs):
    yield from (z.sin() for z in xs)


def g_yield_from_genexpr(x, y):
    a, b = _nested([x, y])
    return a + b


GENS = [g_unpack, g_tuple, g_sum, g_any_all, g_cat, g_dict_set, g_minmax, g_zip_star, g_enumerate_for,
        g_user_generator, g_yield_from_genexpr]


@pytest.mark.parametrize("fn", GENS, ids=lambda f: f.__name__)
def test_generator_in_one_graph(fn):
    shape = (2, 3, 4) if fn is g_unpack else (3, 4)
    _, be = check(fn, lambda: (torch.randn(*shape), torch.randn(*shape)),
                  lambda: (torch.randn(4, *shape[1:]), torch.randn(4, *shape[1:])))
    assert tc_capture.capture(fn, torch.randn(*shape), torch.randn(*shape)).graph_break_count == 0


def _printing_gen(xs):
    for x in xs:
        print("gen")
        yield x * 2


def test_break_inside_generator_runs_it_in_python():
    def fn(x, y):
        a = x.cos()
        return sum(_printing_gen((a, y))) + 1

    check(fn, lambda: (torch.randn(3), torch.randn(3)))
    r = tc_capture.capture(fn, torch.randn(3), torch.randn(3))
    assert r.graph_break_count >= 1 and r.graph_count >= 1


class Reg(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.register_buffer("s", torch.ones(4))

    def forward(self, x):
        reg = sum(p.pow(2).sum() for p in self.parameters())
        names = [n for n, _ in self.named_parameters()]
        nb = len(list(self.buffers())) + len([m for m in self.modules()])
        return self.b(self.a(x)) * self.s + reg * len(names) + nb


def test_module_parameters_walk():
    m = Reg()
    check(None, lambda: (torch.randn(2, 4),), lambda: (torch.randn(3, 4),), module=m)
    r = tc_capture.capture(m, torch.randn(2, 4))
    assert r.graph_count == 1 and r.graph_break_count == 0


def test_module_parameters_walk_sees_new_parameter():
    m = Reg()
    f = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(2, 4)
    assert torch.allclose(f(x), m(x))
    m.extra = nn.Parameter(torch.ones(1))
    assert torch.allclose(f(x), m(x))
