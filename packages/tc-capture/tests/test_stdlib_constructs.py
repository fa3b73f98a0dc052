"""Python as users write it, under ``fullgraph=True``, against eager (issue 13, part 3).

Each family runs its functions eagerly and compiled (``fullgraph=True``) over two calls with
different tensor values (and, where a Python value changes, a third call that must recompile);
results are compared with their exact types, and side effects on containers passed in (the
order of events appended to a list, a dict mutated) must match eager's.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import enum
import functools
import heapq
import itertools
import logging
import math
import operator
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

import tc_capture
from tc_capture.api import interpret_backend


def same(a, b, path="out"):
    """Equal values and types; classes made inside the function compare by name (eager makes a
    new class per call)."""
    ta, tb = type(a), type(b)
    assert ta is tb or ta.__qualname__ == tb.__qualname__ and ta.__module__ == tb.__module__, f"{path}: {ta} vs {tb}"
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=path)
    elif isinstance(a, (list, tuple, collections.deque)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
        if isinstance(a, collections.deque):
            assert a.maxlen == b.maxlen, path
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
        if isinstance(a, collections.defaultdict):
            assert a.default_factory == b.default_factory, path
    elif dataclasses.is_dataclass(a) or hasattr(a, "__dict__") and not callable(a) and not isinstance(a, enum.Enum):
        same(vars(a), vars(b), path)
    elif isinstance(a, enum.Enum):
        assert a.name == b.name and a.value == b.value, path
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def run_both(fn, *make_args, calls=2):
    """``fn`` eager and compiled on ``calls`` fresh argument sets (``make_args[i]()`` makes the
    i-th argument); returns the compiled function for further checks."""
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(fn)
    for _ in range(calls):
        args = [m() for m in make_args]
        args2 = copy.deepcopy(args)
        want = fn(*args)
        got = compiled(*args2)
        same(want, got)
        same(args, args2, "arguments after the call")
    return compiled


def t34():
    return torch.randn(3, 4)


def events():
    return []


# ---- functools ------------------------------------------------------------------------------------
def partial_torch(x):
    f = functools.partial(torch.add, alpha=2.0)
    return f(x, x)


def partial_lambda_nested(x):
    g = functools.partial(lambda a, b, c=1: a * b + c, x)
    h = functools.partial(g, c=3)
    return h(2.0), type(h) is functools.partial, h.keywords["c"], len(h.args)


def partial_returned(x):
    return functools.partial(torch.mul, 3.0)


def reduce_(x):
    return (functools.reduce(lambda a, b: a + b, [x, x * 2, x * 3]), functools.reduce(operator.mul, [2, 3, 4], 1),
            functools.reduce(torch.maximum, [x, -x]))


def wraps_(x):
    def deco(f):
        @functools.wraps(f)
        def w(*a):
            return f(*a) + 1

        return w

    @deco
    def g(t):
        """doc of g"""
        return t * 2

    return g(x), g.__name__, g.__doc__, g.__wrapped__(x)


@functools.lru_cache
def _cached(n):
    return n * 2


@functools.lru_cache(maxsize=4)
def _cached_tensor(t):
    return t.sin()


def lru_(x):
    return x * _cached(3) + _cached_tensor(x)


def cached_property_(x):
    class A:
        def __init__(self, t):
            self.t = t

        @functools.cached_property
        def v(self):
            return self.t * 3

    a = A(x)
    return a.v + a.v, "v" in vars(a)


@pytest.mark.parametrize("fn", [partial_torch, partial_lambda_nested, reduce_, wraps_, lru_, cached_property_],
                         ids=lambda f: f.__name__)
def test_functools(fn):
    run_both(fn, t34)


def test_partial_escapes_and_is_rebuilt():
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(partial_returned)
    p = compiled(torch.randn(2))
    assert type(p) is functools.partial and p.func is torch.mul and p.args == (3.0,)


# ---- itertools ------------------------------------------------------------------------------------
def it_combinatorics(x):
    return (sum(x * a * b for a, b in itertools.product([1, 2], [3, 4])),
            [x * a for a, b in itertools.permutations([1, 2, 3], 2)],
            len(list(itertools.combinations(range(4), 2))),
            list(itertools.combinations_with_replacement("ab", 2)),
            sum(x * len(p) for p in itertools.product([x, x], repeat=2)))


def it_chains(x):
    return (sum(x * a for a in itertools.chain([1], (2, 3))), list(itertools.chain.from_iterable([[x], [x + 1]])),
            [a * b for a, b in itertools.zip_longest([x, x], [1], fillvalue=5)],
            list(itertools.accumulate([1, 2, 3])), list(itertools.accumulate([x, x], torch.mul, initial=x)),
            [a - b for a, b in itertools.pairwise([x, x * 2, x * 4])])


def it_filters(x):
    return (sum(x * a for a in itertools.compress([1, 2, 3], [1, 0, 1])),
            list(itertools.filterfalse(lambda v: v % 2, [1, 2, 4])), list(itertools.filterfalse(None, [0, 1, 0])),
            list(itertools.takewhile(lambda v: v < 3, [1, 2, 3, 1])), list(itertools.dropwhile(lambda v: v < 3, [1, 4, 1])),
            list(itertools.starmap(torch.add, [(x, 1), (x, 2)])))


def it_infinite(x):
    return (sum(x * a for a in itertools.islice(itertools.count(2), 3)),
            list(itertools.islice(itertools.cycle([1, 2]), 5)), list(itertools.repeat(x, 2)),
            [a for a in itertools.islice(itertools.count(1, 0.5), 1, 6, 2)])


def it_groupby_tee(x):
    groups = [(k, x * len(list(g))) for k, g in itertools.groupby([1, 1, 2, 3, 3, 3])]
    by_len = [(k, list(g)) for k, g in itertools.groupby(["a", "b", "cc", "dd", "e"], key=len)]
    a, b = itertools.tee([x, x + 1, x + 2])
    first = next(a)
    return groups, by_len, first, list(b), list(a)


def it_lazy_order(x, log):
    """Laziness: functions run only when items are pulled, in eager's order."""
    def f(v):
        log.append(("f", v))
        return x * v

    it = itertools.islice(map(f, itertools.count()), 1, 4)
    log.append("made")
    out = [next(it)]
    log.append("one")
    out += list(itertools.takewhile(lambda t: log.append("p") is None, it))
    return out


@pytest.mark.parametrize("fn", [it_combinatorics, it_chains, it_filters, it_infinite, it_groupby_tee],
                         ids=lambda f: f.__name__)
def test_itertools(fn):
    run_both(fn, t34)


def test_itertools_lazy_side_effect_order():
    run_both(it_lazy_order, t34, events)


# ---- collections ----------------------------------------------------------------------------------
def ordered_(x):
    d = collections.OrderedDict(a=1, b=2, c=3)
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    k, v = d.popitem()
    first = d.popitem(last=False)
    e = collections.OrderedDict(b=2, c=1)
    return x * v + len(d), k, first, list(d), d == collections.OrderedDict(b=2), e == {"c": 1, "b": 2}, \
        e == collections.OrderedDict(c=1, b=2), type(d).__name__


def defaultdict_(x):
    d = collections.defaultdict(list)
    d["a"].append(x)
    d.setdefault("b", []).append(x * 2)
    counts = collections.defaultdict(int)
    for w in "abca":
        counts[w] += 1
    nested = collections.defaultdict(lambda: collections.defaultdict(int))
    nested["p"]["q"] += 2
    return sum(d["a"]) + sum(d["b"]), len(dict.fromkeys("abc")), counts, d.default_factory is list, \
        collections.OrderedDict.fromkeys([1, 2], 0), nested["p"]["q"], "z" in counts


def deque_(x):
    d = collections.deque([x, x * 2], maxlen=3)
    d.appendleft(x + 1)
    d.append(x - 1)
    d.rotate(1)
    left = d.popleft()
    d.extend([x * 5, x * 6])
    q = collections.deque(range(5))
    q.rotate(-2)
    q.extendleft([9, 8])
    return sum(d), len(d), left, d.maxlen, list(q), q.pop(), q[0], 4 in q, q


def counter_(x):
    c = collections.Counter("abca")
    c.update(["a", "z"])
    c2 = collections.Counter(a=1, b=5)
    return (x * c["a"] + len(c), c["missing"], c.most_common(2), c.most_common(), c + c2, c - c2, c & c2,
            c | c2, c.total(), sorted(c.elements()), c == collections.Counter("aaabcz"))


def namedtuple_(x):
    P = collections.namedtuple("P", "a b")
    p = P(x, 2)
    q = p._replace(b=3)
    return p.a * p.b + q.b, q._asdict()["b"], P._fields, P._make([1, 2]).b


@pytest.mark.parametrize("fn", [ordered_, defaultdict_, deque_, counter_, namedtuple_], ids=lambda f: f.__name__)
def test_collections(fn):
    run_both(fn, t34)


def collections_side_effects(x, log, table):
    """Containers passed in are mutated from values the stdlib models computed."""
    c = collections.Counter(k for k in table)
    log.extend(c.most_common(1))
    table.update(collections.OrderedDict(z=x.shape[0]))
    d = collections.deque(log, maxlen=2)
    log.append(len(d))
    return x + len(table)


def test_collections_side_effects_on_arguments():
    run_both(collections_side_effects, t34, events, lambda: {"a": 1, "b": 2})


# ---- dict / set / frozenset methods and live views, lazy builtins, sorted/min/max ---------------------
def dict_set_methods(x):
    d = {"a": 1, "b": 2}
    k, it = d.keys(), d.items()
    d["c"] = 3
    last = d.popitem()
    d |= {"e": 5}
    s = {1, 2}
    s.update([3])
    fs = frozenset([1, 2]) | {3}
    return (x * len(k), list(it), last, sorted(k & {"a", "e"}), len(d.keys() - {"a"}), fs, 2 in fs,
            fs.union([9]), s.issubset({1, 2, 3, 4}), d.get("zz", 7), sorted(d))


def lazy_builtins(x, log):
    m = map(lambda v: (log.append(v), x * v)[1], [1, 2, 3])
    log.append("made")
    first = next(m)
    fl = filter(lambda v: v > 1, [1, 2, 3])
    z = zip([x, x], "ab")
    return first, list(m), list(fl), list(z)


def sort_key(x):
    pairs = [(1, "b"), (0, "c"), (1, "a")]
    return (x * sorted([3, 1, 2], key=lambda v: -v)[0], sorted(pairs, key=operator.itemgetter(0)),
            min(pairs, key=lambda p: p[1]), max(range(5), key=lambda v: (v % 3, v)), max([], default=4),
            heapq.nlargest(2, [5, 1, 7, 3]), heapq.nsmallest(1, pairs, key=operator.itemgetter(1)))


def test_dict_set_and_sorting():
    run_both(dict_set_methods, t34)
    run_both(sort_key, t34)


def test_lazy_builtins_order():
    run_both(lazy_builtins, t34, events)


# ---- range, torch.Size, finfo/iinfo, numpy scalars --------------------------------------------------
def range_size(x):
    r = range(1, 7, 2)
    s = x.shape + (1,)
    return (x * len(r) + r[1] + r.index(5) + r.count(3), list(r[::-1]), r[1:], 3 in r,
            x.reshape(s).expand(*s[:-1], 2) * math.prod(x.shape[:1]), torch.zeros(x.shape[::-1] + (2,)).shape)


def finfo_numpy(x):
    return (x.clamp(min=torch.finfo(x.dtype).min) + torch.iinfo(torch.int32).bits, torch.finfo(torch.float16).eps,
            x * np.float32(2.0), np.float64(1.5) + 1, x.half() * np.float32(3.0))


def test_range_size_finfo_numpy():
    run_both(range_size, t34)
    run_both(finfo_numpy, t34)


# ---- classes made in the function, custom __new__, metaclasses, enums, dataclasses -----------------
def dataclass_local(x):
    @dataclasses.dataclass
    class C:
        a: torch.Tensor
        b: int = 2
        tags: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class F:
        v: int

    c = C(x)
    c.tags.append("t")
    return c.a * c.b, c.tags, F(3).v, dataclasses.is_dataclass(c)


class Color(enum.Enum):
    R = 1
    G = 2


def enum_(x):
    class Mode(enum.IntEnum):
        A = 1
        B = enum.auto()

    return x * Color.G.value + (Color.R is Color(1)), Color(2).name, Mode.B + 1, Mode(1) is Mode.A, len(Mode)


class Singletonish:
    def __new__(cls, v):
        obj = super().__new__(cls)
        obj.made_by_new = True
        return obj

    def __init__(self, v):
        self.v = v


class CountingMeta(type):
    def __call__(cls, *args):
        obj = super().__call__(*args)
        obj.via_meta = True
        return obj


class Point(metaclass=CountingMeta):
    def __init__(self, t):
        self.t = t


def custom_new_meta(x):
    s = Singletonish(x * 2)
    p = Point(x)
    return s.v + p.t, s.made_by_new, p.via_meta


@pytest.mark.parametrize("fn", [dataclass_local, enum_, custom_new_meta], ids=lambda f: f.__name__)
def test_classes(fn):
    run_both(fn, t34)


def test_class_with_side_effects_in_its_body_breaks():
    def fn(x, log):
        class A:
            log.append(1)  # runs on every eager call: never at capture time
        return x + 1

    with pytest.raises(tc_capture.GraphBreakError, match="class A"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(fn)(torch.ones(1), [])


# ---- torch modules built inside forward -----------------------------------------------------------
class LossInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, y):
        logits = nn.Softmax(dim=-1)(self.lin(x)) + nn.GELU(approximate="tanh")(x[:, :3])
        return nn.CrossEntropyLoss(label_smoothing=0.1)(logits, y), nn.ReLU()(x)


def test_modules_built_in_forward_with_grads():
    torch.manual_seed(0)
    model = LossInForward()
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(model)
    for _ in range(2):
        x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
        want = model(x, y)
        want[0].backward()
        g_want = model.lin.weight.grad.clone()
        model.zero_grad()
        got = compiled(x, y)
        got[0].backward()
        same(want, got)
        torch.testing.assert_close(model.lin.weight.grad, g_want)
        model.zero_grad()


def test_module_with_parameters_built_in_forward_breaks():
    def fn(x):
        return nn.Linear(4, 4)(x)

    with pytest.raises(tc_capture.GraphBreakError, match="parameters"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(fn)(torch.randn(2, 4))


# ---- copy ---------------------------------------------------------------------------------------------
def deepcopy_(x):
    cfg = {"a": [1, 2], "b": {"c": (3, [4])}}
    c2 = copy.deepcopy(cfg)
    c2["a"].append(3)
    c2["b"]["c"][1].append(5)
    shallow = copy.copy(cfg)
    shallow["a"].append(9)
    return x * len(c2["a"]) + len(cfg["a"]), cfg, c2


def test_deepcopy_of_configs():
    run_both(deepcopy_, t34)


class Config:
    """A config object as HF keeps them: plain data in ``__dict__``, a custom ``__getattribute__``
    that maps alias names (what makes its attributes opaque to capture)."""

    aliases = {"hidden": "width"}

    def __init__(self, width=4, scale=2.0, labels=None):
        self.width, self.scale, self.labels, self.enc_layers = width, scale, labels or {0: "a"}, 2

    def __getattribute__(self, name):
        return super().__getattribute__(type(self).aliases.get(name, name))


class CopiesItsConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()

    def forward(self, x, rename=True):
        c = copy.deepcopy(self.config)  # HF's get_text_config() on an encoder-decoder config
        if rename:
            value = c.enc_layers
            delattr(c, "enc_layers")
            c.layers = value + 1
        d = copy.deepcopy(c.__dict__)
        d["extra"] = len(c.labels)
        return x * c.hidden * c.scale + c.layers + d["extra"], c


def test_deepcopy_of_a_config_object_read_and_written():
    """Captured without a break; the returned copy is a new object per call with the writes
    replayed, and a change to the original's state is guarded (recompiles, reads the new value)."""
    m = CopiesItsConfig()
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(m)
    copies = []
    for width in (4, 4, 6):
        m.config.width = width
        x = torch.randn(3)
        want, want_c = m(x)
        got, got_c = compiled(x)
        same(want, got)
        assert vars(got_c) == vars(want_c) and got_c is not m.config and "enc_layers" not in vars(got_c)
        copies.append(got_c)
    assert copies[0] is not copies[1]
    assert "enc_layers" in vars(m.config) and "layers" not in vars(m.config)  # the original is untouched


def test_deepcopy_of_a_config_holding_an_object_is_a_break():
    m = CopiesItsConfig()
    m.config.labels = {0: nn.Identity()}  # not plain data: guarding the copy's state by value is not possible
    with pytest.raises(tc_capture.GraphBreakError, match="copy of a Config"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(m)(torch.randn(3), False)


# ---- print, logging, warnings -------------------------------------------------------------------------
def prints(x, n):
    y = x + n
    print("value", n, [1, 2], sep="|")
    return y * 2


def test_print_is_the_only_break(capsys):
    """print stays a graph break (torch.compile raises under fullgraph too): the graphs before
    and after it compile, and it prints on every call."""
    with pytest.raises(tc_capture.GraphBreakError, match="print"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(prints)(torch.ones(2), 1)
    compiled = tc_capture.optimize(interpret_backend)(prints)
    for n in (1, 1, 2):
        x = torch.randn(3)
        want = prints(x, n)
        eager_out = capsys.readouterr().out
        same(want, compiled(x, n))
        assert capsys.readouterr().out == eager_out
    assert len(tc_capture.capture(prints, torch.ones(2), 1).graphs) == 2


def print_tensor(x):
    y = x * 2
    print(y)
    return y + 1


def test_print_of_a_tensor_is_the_only_break():
    with pytest.raises(tc_capture.GraphBreakError, match="print"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(print_tensor)(torch.ones(2))
    r = tc_capture.capture(print_tensor, torch.ones(2))
    assert len(r.graphs) == 2 and len(r.breaks) == 1


_log = logging.getLogger("tc_stdlib_test")


def logs(x):
    logging.getLogger("tc_stdlib_test").info("info %s", 1)
    _log.warning("warn %d", 2)
    warnings.warn("careful")
    return x + 1


def test_logging_and_warnings_replayed(caplog):
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(logs)
    for level in (logging.INFO, logging.INFO, logging.ERROR):  # a level change recompiles
        _log.setLevel(level)
        caplog.clear()
        with warnings.catch_warnings(record=True) as w_eager:
            warnings.simplefilter("always")
            same(logs(torch.ones(2)), torch.ones(2) + 1)
        eager_msgs = [r.getMessage() for r in caplog.records]
        caplog.clear()
        with warnings.catch_warnings(record=True) as w_tc:
            warnings.simplefilter("always")
            compiled(torch.ones(2))
        assert [r.getMessage() for r in caplog.records] == eager_msgs
        assert [str(w.message) for w in w_tc] == [str(w.message) for w in w_eager]
    _log.setLevel(logging.NOTSET)


# ---- graph breaks with stdlib models live across them -----------------------------------------------
def live_across_breaks(x):
    out = []
    for a, b in itertools.product([1, 2], [3]):
        print(x.sum() > 0)  # a break with the product iterator live: drained and rebuilt
        out.append(x * a * b)
    d = collections.deque([x], maxlen=2)
    print(x[0])
    d.append(x + 1)
    p = functools.partial(torch.mul, 2.0)
    print(x[1])
    return out, d, p(x)


def test_models_live_across_breaks_are_rebuilt(capsys):
    compiled = tc_capture.optimize(interpret_backend)(live_across_breaks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager fallback
        for _ in range(2):
            x = torch.randn(3)
            same(live_across_breaks(x), compiled(x))
    assert len(tc_capture.capture(live_across_breaks, torch.randn(3)).graphs) >= 4
