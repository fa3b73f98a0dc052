"""Python-semantics differential tests for capture (issue 12, test engine 3).

Programs are generated from a table of snippets over builtins and the standard library's
containers (dict and its live views, list, set, frozenset, tuple, namedtuple, NamedTuple,
dataclass, iterators, lazy map/filter/zip/enumerate, functools, itertools, collections) mixed with
tensor ops. Graph breaks (``print(end="")``) are inserted at random points, also between two lines
of one snippet (a lazy iterator or a live view then lives across the break). Each program runs
eagerly and through ``tc_capture.optimize`` twice, on different inputs; return values (exact
types included), the list of events the program appends to (the order of side effects), and the
arguments it mutates must be equal.

The generator is seeded: a failure names its seed, and ``program_source(seed)`` prints the program.
``TC_PYSEM_PROGRAMS=N`` runs N programs (default: a fast slice for ``nox -s tests``).
"""

from __future__ import annotations

import bisect
import collections
import collections.abc
import copy
import dataclasses
import enum
import functools
import itertools
import math
import operator
import os
import random
import types
import typing

import pytest
import torch

import tc_capture
from tc_capture.api import interpret_backend

Pt = collections.namedtuple("Pt", "a b")


class Vec(typing.NamedTuple):
    t: torch.Tensor
    n: int

    def __add__(self, other):
        return Vec(self.t + other.t, self.n * 10 + other.n)

    def norm2(self):
        return (self.t * self.t).sum() + self.n


class Proto(typing.NamedTuple):
    """A NamedTuple overriding the container protocol: each dunder must be the one called."""

    t: torch.Tensor
    n: int

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return self.n * 100 + i

    def __iter__(self):
        yield self.n
        yield self.n + 1

    def __eq__(self, other):
        return isinstance(other, Proto) and self.n == other.n

    def __ne__(self, other):
        return not self == other

    def __contains__(self, item):
        return item == "magic"

    def __bool__(self):
        return False


@dataclasses.dataclass
class DC:
    t: torch.Tensor
    n: int = 1


# One snippet: lines at one indentation (a break may go between any two) or one block (`{brk}`
# marks where a break may go inside it). `{i}` makes names unique; `x`, `y` are tensors, `d` a
# dict argument, `lst` a list argument, `ev` the event list, `out` what the program returns.
SNIPPETS = {
    # identity of the tensor arguments: some calls pass one tensor as both x and y (``fresh_args``)
    "identity": ["out.append(x is y)", "out.append(x * 3 if x is y else x + y)", "out.append(len({{x, y, x}}))",
                 "out.append(operator.is_not(y, x))", "out.append([t is x for t in (y, x)])"],
    "dict_views_live": ["d{i} = {{'a': x, 'b': y}}", "k{i} = d{i}.keys()", "v{i} = d{i}.values()",
                        "d{i}['c'] = x + {i}", "out.append((len(k{i}), list(k{i}), type(k{i}).__name__))",
                        "out.append([t.sum() for t in v{i}])", "del d{i}['a']", "out.append(('a' in k{i}, len(v{i})))"],
    "arg_dict_view": ["ak{i} = d.keys()", "d['n{i}'] = x * 2", "out.append(sorted(ak{i}))",
                      "out.append(isinstance(ak{i}, collections.abc.KeysView))"],
    "map_lazy": ["m{i} = map(lambda v: (ev.append(('m{i}', v)), x * v)[1], [1, 2, 3])", "ev.append('made{i}')",
                 "out.append(next(m{i}))", "ev.append('mid{i}')", "out.append(list(m{i}))"],
    "filter_lazy": ["fl{i} = filter(lambda v: (ev.append(('f{i}', v)), v % 2 == 0)[1], range(5))",
                    "ev.append('f{i}')", "out.append(type(fl{i}).__name__)", "out.append(list(fl{i}))"],
    "zip_lazy": ["z{i} = zip([x, y], 'ab')", "out.append(type(z{i}) is zip)", "out.append([(t * 2, c) for t, c in z{i}])"],
    "zip_of_map": ["zm{i} = zip(map(lambda v: (ev.append(('zm{i}', v)), v)[1], 'pq'), range(9))",
                   "ev.append('zm{i}')", "out.append(list(zm{i}))"],
    "enumerate": ["out.append([(j, t + j) for j, t in enumerate([x, y], {i})])",
                  "en{i} = enumerate('xy')", "out.append(type(en{i}) is enumerate)", "out.append(list(en{i}))"],
    "namedtuple": ["p{i} = Pt(x, {i})", "out.append((p{i}.a * p{i}.b, p{i}[1], isinstance(p{i}, tuple), type(p{i}) is Pt))",
                   "out.append(Pt(1, 2) == (1, 2))", "out.append((hasattr(p{i}, 'a'), hasattr(p{i}, 'zz')))"],
    "namedtuple_dunder": ["w{i} = Vec(x, 1) + Vec(y, {i})", "out.append((w{i}.n, w{i}.t, type(w{i}) is Vec))",
                          "out.append(w{i}.norm2())"],
    "frozenset": ["fs{i} = frozenset([3, 1, {i}])", "out.append((type(fs{i}), sorted(fs{i}), 2 in fs{i}))",
                  "out.append(fs{i} | {{7}})"],
    "set_ops": ["s{i} = set()", "s{i}.add(3)", "s{i}.add({i})", "s{i}.update([2, 3])",
                "out.append((sorted(s{i}), len(s{i}), list(s{i}), type(s{i})))", "out.append(s{i} & {{2, 5}})"],
    "dataclass": ["dc{i} = DC(x, {i})", "dc{i}.n += 1", "out.append((dc{i}.t * dc{i}.n, type(dc{i}).__name__))"],
    "functools": ["out.append(functools.reduce(lambda a, b: a + b, [x, y, x]))",
                  "pp{i} = functools.partial(torch.add, alpha={i})", "out.append(pp{i}(x, y))"],
    "itertools": ["out.append(list(itertools.chain([1], ({i}, 3))))",
                  "out.append([a * b for a, b in itertools.product([1, 2], [{i}])])",
                  "out.append(list(itertools.accumulate([1, 2, {i}])))",
                  "out.append([t * 2 for t in itertools.islice([x, y, x], 2)])"],
    "collections": ["od{i} = collections.OrderedDict(a=1)", "od{i}['b'] = x", "out.append(list(od{i})[-1])",
                    "dd{i} = collections.defaultdict(list)", "dd{i}['k'].append(x)", "out.append(len(dd{i}))"],
    "deque_counter": ["dq{i} = collections.deque([1, 2])", "dq{i}.append({i})", "out.append(list(dq{i}))",
                      "out.append(collections.Counter('abca').most_common(1))"],
    "range_iter": ["r{i} = iter(range({i} + 2))", "out.append(next(r{i}))", "out.append(type(r{i}).__name__)",
                   "out.append(list(r{i}))"],
    "list_iter": ["li{i} = iter([x, y])", "out.append(next(li{i}) * 2)", "out.append(type(li{i}).__name__)",
                  "out.append([t + 1 for t in li{i}])"],
    "sorted_key": ["out.append(sorted([3, 1, {i}], key=lambda v: (ev.append(('k{i}', v)), -v)[1]))",
                   "out.append(max(['a', 'bbb', 'cc'], key=len))", "out.append(min([4, {i}, 9]))"],
    "any_all": ["out.append(any(map(lambda v: (ev.append(('a{i}', v)), v > 1)[1], [1, 2, 3])))",
                "out.append(all(v < {i} + 1 for v in [0, 1]))"],
    "hasattr_isinstance": ["out.append((hasattr([], 'append'), hasattr({{}}.keys(), 'isdisjoint'), hasattr(x, 'zz')))",
                           "out.append(isinstance(iter([]), collections.abc.Iterator))",
                           "out.append(isinstance({{}}.items(), collections.abc.ItemsView))",
                           "out.append(type(map(abs, [1])) is map)"],
    "dict_methods": ["dm{i} = {{'a': x}}", "dm{i}.setdefault('b', {i})", "dm{i}.update(c=y)",
                     "out.append((dm{i}.pop('a'), list(dm{i}.items()), dm{i}.get('z', 7)))"],
    "arg_dict_items": ["out.append({{k: v * 2 for k, v in d.items() if isinstance(v, torch.Tensor)}})",
                       "d['m{i}'] = y + 1"],
    "arg_list": ["lst.append(x.sum())", "out.append(len(lst))", "lst.insert(0, {i})", "out.append(lst[0])"],
    "tensor_work": ["acc = acc + x.sin() * {i}", "ev.append(('shape', tuple(acc.shape)))", "acc = acc * y"],
    "unpack_star": ["h{i}, *t{i} = [x, {i}, y]", "out.append((h{i} + 1, len(t{i}), t{i}[0]))"],
    "fstring": ["out.append(f'{{len(lst)}}-{{type(x).__name__}}-{{{i}:03d}}')"],
    "loop_block": ["for j{i} in range(3):\n    acc = acc + j{i}\n    {brk}\n    ev.append(('loop{i}', j{i}))"],
    "no_grad_block": ["with torch.no_grad():\n    ng{i} = x * {i}\n    {brk}\n    ev.append(('ng{i}', ng{i}.requires_grad))",
                      "out.append(ng{i})"],
    "closure": ["cnt{i} = [0]", "def bump{i}():\n    cnt{i}[0] += 1\n    return cnt{i}[0]",
                "out.append((bump{i}(), bump{i}()))"],
    "itertools_more": ["out.append(list(itertools.zip_longest([1, 2], 'a', fillvalue={i})))",
                       "out.append(list(itertools.pairwise([x, y, x])))",
                       "out.append(list(itertools.compress('abc', [1, 0, {i}])))",
                       "out.append(list(itertools.filterfalse(lambda v: v % 2, range(5))))",
                       "out.append(list(itertools.islice(itertools.count({i}), 3)))",
                       "out.append(list(itertools.repeat(x, 2)))",
                       "out.append([(k, len(list(g))) for k, g in itertools.groupby('aab')])",
                       "out.append(list(itertools.permutations([1, 2, {i}], 2)))",
                       "out.append(list(itertools.combinations('abc', 2)))",
                       "out.append(list(itertools.starmap(pow, [(2, {i}), (3, 2)])))",
                       "out.append(list(itertools.takewhile(lambda v: v < 2, [0, 1, 2, 0])))"],
    "functools_more": ["out.append(cached_square({i}))", "out.append(wrapped_add(x, {i}))",
                       "cp{i} = WithCached(x)", "out.append(cp{i}.doubled + cp{i}.doubled)",
                       "out.append(functools.partial(pow, exp={i})(2))"],
    "collections_more": ["out.append(dict.fromkeys('ab', {i}))", "sd{i} = {{}}", "sd{i}.setdefault('l', []).append(x)",
                         "out.append(sd{i})", "cn{i} = collections.Counter([1, 1, {i}])", "out.append(cn{i}[1])",
                         "dq{i} = collections.deque([x, y])", "dq{i}.appendleft({i})", "out.append(dq{i}.popleft())",
                         "od{i} = collections.OrderedDict(a=1, b=2)", "od{i}.move_to_end('a')", "out.append(list(od{i}))"],
    "enum": ["out.append((Color.RED.value, Color(2).name, Color.RED in [Color.RED], Color.RED is Color.RED))",
             "out.append(x * Color.GREEN.value)", "out.append(type(Color.RED).__name__)"],
    "dataclass_more": ["dr{i} = dataclasses.replace(DC(x, {i}), n=5)", "out.append((dr{i}.n, dr{i}.t))",
                       "out.append([f.name for f in dataclasses.fields(DC)])",
                       "fz{i} = Frozen(x, {i})", "out.append((fz{i}.n, fz{i}.total))"],
    "torch_size": ["sz{i} = x.shape", "out.append((sz{i} + (1,), sz{i}[0] * {i}, type(sz{i} + (1,))))",
                   "out.append(x.new_zeros(sz{i}))", "out.append(torch.finfo(x.dtype).eps * {i})",
                   "out.append(torch.iinfo(torch.int32).max)", "out.append(x.view(torch.Size([1, sz{i}[0]])))"],
    "class_new": ["made{i} = Registry.made", "cn{i} = Tagged(x, {i})",
                  "out.append((cn{i}.tag, type(cn{i}).__name__, cn{i}.t))", "out.append(Registry.made - made{i})"],
    "sort_objects": ["out.append(sorted([(1, 'b'), ({i}, 'a')], key=operator.itemgetter(1)))",
                     "out.append(min({{'p': 3, 'q': {i}}}, key={{'p': 3, 'q': {i}}}.get))",
                     "out.append(sorted('bca', reverse=True))"],
    "strings": ["out.append(','.join(['a', str({i})]))", "out.append('a-b'.split('-'))",
                "out.append('%d-%s' % ({i}, 'x'))", "out.append('{{}}/{{}}'.format(1, {i}))"],
    "dict_iter_mutation": ["dm{i} = {{'a': x, 'b': y}}", "for kk{i} in list(dm{i}):\n    dm{i}[kk{i} + 'x'] = dm{i}[kk{i}] * 2",
                           "out.append(dm{i})"],
    "nested_args": ["def nf{i}(a, *rest, scale=2, **kw):\n    return a * scale + len(rest) + len(kw)",
                    "out.append(nf{i}(x, 1, 2, scale={i}, z=3))", "out.append(nf{i}(*[y], **{{'scale': 1}}))"],
    "generator": ["def gen{i}(n):\n    for q in range(n):\n        ev.append(('g{i}', q))\n        yield x * q",
                  "out.append(list(gen{i}(3)))", "out.append(sum(t.sum() for t in gen{i}(2)))"],
    "try_except": ["try:\n    ex{i} = {{}}['missing']\nexcept KeyError as e:\n    ex{i} = str(e)", "out.append(ex{i})"],
    "abc_checks": ["out.append((isinstance({{}}, collections.abc.Mapping), isinstance(collections.OrderedDict(), dict)))",
                   "out.append((isinstance(Pt(1, 2), collections.abc.Sequence), isinstance(range(3), collections.abc.Sequence)))",
                   "out.append((issubclass(Vec, tuple), isinstance(frozenset(), collections.abc.Set)))"],
    "reversed": ["rv{i} = reversed([x, y])", "out.append(type(rv{i}).__name__)", "out.append(list(rv{i}))",
                 "out.append(list(reversed(range({i} + 1))))"],
    "view_ops": ["vd{i} = {{'a': 1, 'b': {i}}}", "out.append(vd{i}.keys() & {{'a', 'z'}})",
                 "out.append(vd{i}.keys() - {{'a'}})", "out.append(list(reversed(vd{i}.keys())))",
                 "out.append(('a', 1) in vd{i}.items())"],
    "map_multi": ["out.append(list(map(operator.add, [1, 2], [3, 4, {i}])))", "out.append(list(map(str, range({i}))))"],
    "namespace": ["ns{i} = types.SimpleNamespace(a=x)", "ns{i}.b = {i}",
                  "out.append((ns{i}.a * ns{i}.b, getattr(ns{i}, 'zz', 5)))"],
    "math_copy": ["out.append((math.prod([2, {i}]), math.isclose(0.1 + 0.2, 0.3), math.sqrt(4)))",
                  "cl{i} = [1, [2]]", "cc{i} = copy.copy(cl{i})", "cc{i}[1].append({i})", "out.append(cl{i})",
                  "out.append(bisect.bisect_left([1, 3, 5], {i}))"],
    "namedtuple_protocol": ["np{i} = Proto(x, {i})", "out.append((len(np{i}), np{i}[1], list(np{i}), 'magic' in np{i}))",
                            "out.append((np{i} == Proto(y, {i}), np{i} == Proto(x, 0), 1 if np{i} else 0))"],
    # one object reached by two names: after a break each is read from the frame on its own path
    "iter_two_names": ["it{i} = iter([x, y, x * 2, y * 3, x + {i}])",
                       "for t{i} in it{i}:\n    out.append(t{i} + 1)\n    {brk}\n    out.append(next(it{i}, None))"],
    "tensor_rows_loop": ["tr{i} = []",
                         "for row{i} in torch.stack([x, y, x * {i}]):\n    {brk}\n    tr{i}.append(row{i}.sum() * 2)",
                         "out.append(tr{i})"],
    "object_two_names": ["ob{i} = DC(x, {i})", "al{i} = ob{i}", "al{i}.n = {i} + 5; out.append(ob{i}.n * 2)",
                         "ob{i}.__dict__['n'] = {i} + 7; out.append(al{i}.n)",
                         "al{i}.extra = y; out.append(sorted(ob{i}.__dict__)); out.append(hasattr(ob{i}, 'extra'))"],
    "python_fn_args": ["c0{i} = len(CALLS)", "out.append(functools.reduce(counted_add, [1, 2, {i}]))",
                       "out.append(list(itertools.starmap(counted_add, [(1, {i})])))",
                       "out.append(sorted([3, 1], key=functools.partial(counted_add, {i})))",
                       "out.append(list(map(counted_add, [x], [{i}])))", "out.append(len(CALLS) - c0{i})"],
}

CALLS: list = []


def counted_add(a, b):
    """A global Python function with a side effect: folding it at capture would call it once."""
    CALLS.append((a, b))
    return a + b


class Color(enum.Enum):
    RED = 1
    GREEN = 2


@functools.cache
def cached_square(n):
    return n * n


def _add(a, b):
    return a + b


@functools.wraps(_add)
def wrapped_add(a, b):
    return _add(a, b) * 2


class WithCached:
    def __init__(self, t):
        self.t = t

    @functools.cached_property
    def doubled(self):
        return self.t * 2


@dataclasses.dataclass(frozen=True)
class Frozen:
    t: torch.Tensor
    n: int

    @property
    def total(self):
        return self.t.sum() + self.n


class Registry(type):
    made = 0

    def __call__(cls, *args):
        Registry.made += 1
        return super().__call__(*args)


class Tagged(metaclass=Registry):
    def __new__(cls, t, tag):
        obj = super().__new__(cls)
        obj.tag = f"tag{tag}"
        return obj

    def __init__(self, t, tag):
        self.t = t * tag

BREAK = 'print(end="")'
GLOBALS = {"torch": torch, "collections": collections, "functools": functools, "itertools": itertools,
           "Pt": Pt, "Vec": Vec, "DC": DC, "Proto": Proto, "Color": Color, "cached_square": cached_square,
           "wrapped_add": wrapped_add,
           "WithCached": WithCached, "Frozen": Frozen, "Tagged": Tagged, "Registry": Registry, "operator": operator,
           "dataclasses": dataclasses, "types": types, "math": math, "copy": copy, "bisect": bisect,
           "CALLS": CALLS, "counted_add": counted_add}


def program_source(seed: int) -> tuple[str, list[str]]:
    """The source of program ``seed`` and the snippets it uses."""
    rng = random.Random(seed)
    names = rng.sample(sorted(SNIPPETS), rng.randint(2, 5))
    body = ["out = []", "acc = x * 0"]
    for i, name in enumerate(names):
        for line in SNIPPETS[name]:
            if rng.random() < 0.2:
                body.append(BREAK)
            body.append(line.format(i=i + 1, brk=BREAK if rng.random() < 0.5 else "pass"))
    body.append("return out, acc")
    text = "def prog(x, y, d, lst, ev):\n" + "\n".join("    " + ln.replace("\n", "\n    ") for ln in body)
    return text, names


def make_program(seed: int):
    text, _ = program_source(seed)
    scope = dict(GLOBALS)
    exec(compile(text, f"<pysem program {seed}>", "exec"), scope)
    return scope["prog"]


def fresh_args(rng: torch.Generator, aliased: bool = False):
    """``aliased``: ``y`` is ``x`` itself (identity, ``is``, sets of tensors must follow the call)."""
    x = torch.randn(3, generator=rng, requires_grad=True)
    y = x if aliased else torch.randn(3, generator=rng)
    return [x, y, {"k": torch.randn(3, generator=rng), "n": 1}, [torch.randn(2, generator=rng)], []]


def copy_args(args):
    x, y, d, lst, ev = args
    mine = x.detach().clone().requires_grad_(x.requires_grad)
    return [mine, mine if y is x else y.clone(), dict(d), list(lst), list(ev)]


def same(a, b, path="out"):
    """Equal values and exactly equal types, recursively; lazy iterators are consumed and compared."""
    assert type(a) is type(b), f"{path}: type {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.shape} vs {b.shape}"
        assert a.requires_grad == b.requires_grad, f"{path}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        torch.testing.assert_close(b, a, msg=f"{path}: values differ")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: len {len(a)} vs {len(b)}"
        for i, (p, q) in enumerate(zip(a, b)):
            same(p, q, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (map, filter, zip, enumerate)):
        same(list(a), list(b), f"list({path})")
    elif isinstance(a, (DC,)):
        same(dataclasses.astuple(a), dataclasses.astuple(b), path)
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def check_program(seed: int, fullgraph: bool = False) -> None:
    prog = make_program(seed)
    compiled = tc_capture.optimize(interpret_backend, fullgraph=fullgraph)(prog)
    gen = torch.Generator().manual_seed(seed)
    for call in range(2):
        args = fresh_args(gen, aliased=call == seed % 3)  # one call of two, in either order, or none
        if call:
            args[2]["extra"] = call  # a different key set on the second call
        mine = copy_args(args)
        expected = prog(*args)
        got = compiled(*mine)
        same(expected, got, f"seed {seed} call {call}: result")
        same(args[2:], mine[2:], f"seed {seed} call {call}: mutated args (d, lst, ev)")
        scribble(expected)  # the next call must not see these objects (values baked at capture)
        scribble(got)


def scribble(obj, depth=0) -> None:
    """Mutate every list, dict and set in a result, the same way for eager's and tc's."""
    if depth > 4:
        return
    if type(obj) is list:
        for x in obj:
            scribble(x, depth + 1)
        obj.append("scribbled")
    elif type(obj) is dict:
        for x in list(obj.values()):
            scribble(x, depth + 1)
        obj["scribbled"] = True
    elif type(obj) is set:
        obj.add("scribbled")
    elif type(obj) is tuple:
        for x in obj:
            scribble(x, depth + 1)


N_PROGRAMS = int(os.environ.get("TC_PYSEM_PROGRAMS", "40"))


@pytest.mark.parametrize("seed", range(N_PROGRAMS))
def test_generated_program_matches_eager(seed, capsys):
    check_program(seed)


# Snippets that must capture whole (no break) under fullgraph=True, each alone.
FULLGRAPH = ["namedtuple_protocol",
             "dict_views_live", "arg_dict_view", "map_lazy", "filter_lazy", "zip_lazy", "zip_of_map", "enumerate",
             "namedtuple", "namedtuple_dunder", "frozenset", "set_ops", "dataclass", "range_iter", "list_iter",
             "sorted_key", "any_all", "hasattr_isinstance", "dict_methods", "arg_dict_items", "arg_list",
             "tensor_work", "unpack_star", "fstring", "closure"]


def _single(name: str):
    lines = ["out = []", "acc = x * 0"] + [ln.format(i=1, brk="pass") for ln in SNIPPETS[name]] + ["return out, acc"]
    text = "def prog(x, y, d, lst, ev):\n" + "\n".join("    " + ln.replace("\n", "\n    ") for ln in lines)
    scope = dict(GLOBALS)
    exec(compile(text, f"<pysem {name}>", "exec"), scope)
    return scope["prog"]


@pytest.mark.parametrize("name", FULLGRAPH)
def test_snippet_fullgraph(name):
    prog = _single(name)
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(prog)
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        args = fresh_args(gen)
        mine = copy_args(args)
        same(prog(*args), compiled(*mine), f"{name}: result")
        same(args[2:], mine[2:], f"{name}: mutated args")


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_with_break_after_each_line(name):
    """Every line of the snippet followed by a break: values living across each point."""
    lines = ["out = []", "acc = x * 0"]
    for ln in SNIPPETS[name]:
        lines += [ln.format(i=1, brk=BREAK), BREAK]
    text = "def prog(x, y, d, lst, ev):\n" + "\n".join("    " + ln.replace("\n", "\n    ") for ln in lines + ["return out, acc"])
    scope = dict(GLOBALS)
    exec(compile(text, f"<pysem {name} breaks>", "exec"), scope)
    prog = scope["prog"]
    compiled = tc_capture.optimize(interpret_backend)(prog)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        args = fresh_args(gen)
        mine = copy_args(args)
        same(prog(*args), compiled(*mine), f"{name}: result")
        same(args[2:], mine[2:], f"{name}: mutated args")
