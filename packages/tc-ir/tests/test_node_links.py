"""Structure walks, cached input links and unique names agree with their plain definitions."""

from __future__ import annotations

import collections
import random

import torch

import tc_ir
from tc_ir.node import leaves, map_structure, nodes_in

aten = torch.ops.aten
Pair = collections.namedtuple("Pair", "a b")


def _reference_leaves(value):
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        for v in value:
            yield from _reference_leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _reference_leaves(v)
    elif isinstance(value, slice):
        yield from _reference_leaves((value.start, value.stop, value.step))
    else:
        yield value


def _reference_map(value, fn):
    if isinstance(value, torch.Size):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_reference_map(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_reference_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _reference_map(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(_reference_map(v, fn) for v in (value.start, value.stop, value.step)))
    return fn(value)


def _random_structure(rng: random.Random, atoms: list, depth: int = 0):
    kind = rng.choice(["atom", "atom", "tuple", "list", "dict", "slice", "pair", "size"] if depth < 4 else ["atom"])
    if kind == "atom":
        return rng.choice(atoms)
    if kind == "size":
        return torch.Size([rng.randint(0, 9) for _ in range(rng.randint(0, 3))])
    items = [_random_structure(rng, atoms, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    if kind == "dict":
        return {f"k{i}": v for i, v in enumerate(items)}
    if kind == "pair":
        return Pair(*(items + [None, None])[:2])
    return slice(*(items + [None, None, None])[:3])


def test_walks_match_their_definitions():
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((4,), torch.float32))
    y = g.input("y", tc_ir.TensorSpec((4,), torch.float32))
    sub = tc_ir.Graph("sub")
    atoms = [x, y, 1, 2.5, True, None, "s", torch.float16, torch.device("cpu"), sub, Ellipsis, 3]
    rng = random.Random(0)
    for _ in range(2000):
        value = _random_structure(rng, atoms)
        expected = list(_reference_leaves(value))
        assert list(leaves(value)) == expected
        assert nodes_in(value) == [v for v in expected if isinstance(v, tc_ir.Node)]
        tag = lambda v: ("leaf", v)  # noqa: E731
        mapped, reference = map_structure(value, tag), _reference_map(value, tag)
        assert mapped == reference and type(mapped) is type(reference)


def test_cached_inputs_and_users_follow_arg_changes():
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((4,), torch.float32))
    y = g.input("y", tc_ir.TensorSpec((4,), torch.float32))
    s = g.call(aten.add.Tensor, x, x)
    assert s.inputs == [x] and list(x.users) == [s]
    c = g.call(aten.cat.default, [x, y, s], kwargs={"dim": 0})
    assert c.inputs == [x, y, s] and c in y.users
    c.args = ([y, y],)
    assert c.inputs == [y] and c not in x.users and c not in s.users and c in y.users
    c.kwargs = {"dim": 0, "out_like": s}
    assert c.inputs == [y, s] and c in s.users
    c.replace_input(y, x)
    assert c.inputs == [x, s] and c not in y.users and c in x.users
    s.replace_all_uses_with(y)
    assert c.inputs == [x, y] and not s.users
    c.inputs.append(s)  # a copy: the node's own links do not change
    assert c.inputs == [x, y]
    copy = g.copy()
    assert [n.inputs for n in copy.nodes][-1] == [copy.node("x"), copy.node("y")]
    assert str(copy) == str(g)


def _reference_names(ops: list) -> list[str]:
    """The first free ``{hint}``, ``{hint}_1``, ``{hint}_2``, ... as names are added and freed."""
    names: set[str] = set()
    out = []
    for op, hint in ops:
        if op == "free":
            names.discard(hint)
            continue
        name, i = hint, 1
        while name in names:
            name, i = f"{hint}_{i}", i + 1
        names.add(name)
        out.append(name)
    return out


def test_unique_names_are_the_first_free_ones():
    rng = random.Random(1)
    for _ in range(50):
        g = tc_ir.Graph()
        ops, live, got = [], [], []
        for _ in range(300):
            if live and rng.random() < 0.3:
                node = live.pop(rng.randrange(len(live)))
                g.erase(node)
                ops.append(("free", node.name))
            else:
                hint = rng.choice(["add", "add_1", "mul", "add_1_2", "v"])
                ops.append(("add", hint))
                live.append(g.input(hint, None))
                got.append(live[-1].name)
        assert got == _reference_names(ops)
