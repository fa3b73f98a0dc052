"""The trace cache: what :func:`~tc_autograd.aot` made for one variant, kept across processes.

Tracing to ATen (fake tensors, functionalization, the joint graph, the min-cut partition) runs
the model's ops through the dispatcher and costs hundreds of milliseconds per graph, on every
process start. Its results are data: the ATen graphs, as ``tc_ir`` text, and the few facts the
runtime glue needs (output plan, mutated inputs, which values are differentiable, how many
tensors are saved), as JSON. They live in an artifact store the caller passes in (duck-typed:
``get(kind, key) -> bytes | None`` and ``put(kind, key, data)``; the umbrella passes
``tc_runtime.ArtifactCache()``). Nothing is pickled.

The key states everything a trace depends on: the torch-level graph's text, each input's
spec, strides, storage offset, ``requires_grad`` and aliasing, the variant (grad pattern), the
decomposition table (each entry's target and the bytecode of its function), the partition
strategy, ambient autocast and default dtype, and the versions of Python, torch and the source
of tc_ir and tc_autograd. Graphs that hold tensors are not cached (their data must not be stored). A stored
entry that does not read back whole (bad JSON, a graph that does not parse, counts that do not
fit the graphs) is a miss: the variant is traced again and the entry rewritten.

A graph with size symbols (``tc_ir.sym`` in its input specs) is keyed by its symbolic input specs,
not by the example's sizes: one trace serves every size its guards admit. The guards (the size
relations the trace relied on, including 0/1 specialisations) are stored with the entry and read
back exactly; an entry is used only when they hold for the inputs at hand. A trace for sizes an
earlier one's guards refused goes to the next *slot* of the same key (``KEY-0``, ``KEY-1``, ...,
as the in-process chain of traces), so a warm process finds each of them. An entry whose guards
or graphs would not read back identical is not stored.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sympy
import torch

import tc_ir
from tc_ir.text import parse_size

from .joint import OutputLeaf, Traced

KIND = "aot_trace"
FORMAT = 3  # 3: symbolic variants (guards, the backward's size inputs); 2: input views replayed
log = tc_ir.logs.get_logger("aot")


class Unstorable(Exception):
    """A value of the output plan has no JSON form; the variant is not cached."""


# ---- the key --------------------------------------------------------------------------------------
def trace_key(graph: tc_ir.Graph, inputs: Sequence[Any], variant: Any, options: dict) -> str | None:
    """The cache key of one variant, or ``None`` when it must not be cached."""
    if graph.tensors:
        return None
    try:
        text = graph.format(data=False, name="graph", strict=True)  # exact target names, or no key
    except (tc_ir.TargetError, TypeError):
        return None
    # Checkpoint regions change the partition but not the text: their tags are part of the key.
    regions = repr([(n.name, n.meta["recompute"]) for n in graph.calls if "recompute" in n.meta])
    parts = [text, regions, *_input_specs(graph, inputs), repr(variant), options["partition"],
             _decompositions_id(options["decompositions"]), _autocast_state(), _versions()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _input_specs(graph: tc_ir.Graph, inputs: Sequence[Any]) -> list[str]:
    """What each input contributes to the key. An input whose spec holds size symbols is traced
    from that spec (a fake with SymInt sizes, an int bound to its symbol), never from the
    example's sizes, strides or value: its spec is the key, so one entry serves every size."""
    storages: dict[int, int] = {}
    specs = []
    for i, (node, x) in enumerate(zip(graph.inputs, inputs)):
        symbolic = is_symbolic_spec(node.spec)
        if isinstance(x, torch.Tensor):
            ptr = x.untyped_storage().data_ptr() if x.device.type != "meta" else id(x)
            alias = storages.setdefault(ptr, i)  # which earlier input shares this one's memory
            layout = f"{node.spec} stride={list(map(str, node.spec.stride))}" if symbolic else \
                f"{tc_ir.spec_of(x)} {tuple(x.stride())} {x.storage_offset()}"
            specs.append(f"{layout} {x.requires_grad} {x.is_leaf} {alias} {type(x).__name__}")
        elif symbolic:
            specs.append(f"size {node.spec}")
        else:
            specs.append(f"{type(x).__qualname__} {x!r}")
    return specs


def is_symbolic_spec(spec: Any) -> bool:
    """Does an input spec hold size symbols (a tensor's dims, or an int bound to a size)?"""
    if isinstance(spec, tc_ir.TensorSpec):
        return not spec.is_static
    return isinstance(spec, tc_ir.ScalarSpec) and isinstance(spec.expr, sympy.Expr)


def slots(key: str, symbolic: bool, count: int) -> list[str]:
    """The store keys of one variant: one for a static graph; for a symbolic one, ``count`` slots,
    one per trace for sizes the earlier traces' guards refused."""
    return [f"{key}-{k}" for k in range(count)] if symbolic else [key]


def _autocast_state() -> str:
    """Ambient state a trace can read: autocast, and the default dtype (factories without one)."""
    autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
    return repr((autocast, torch.get_default_dtype()))


@functools.cache
def _versions() -> str:
    """Python, torch, and a hash of tc_ir's and tc_autograd's source: a changed tracer never
    reuses old graphs."""
    digest = hashlib.sha256()
    for root in (Path(tc_ir.__file__).parent, Path(__file__).parent):
        for path in sorted(root.rglob("*.py")):
            digest.update(path.read_bytes())
    return f"{sys.version_info[:3]} {torch.__version__} {FORMAT} {digest.hexdigest()[:16]}"


_DECOMP_IDS: dict[int, tuple[Any, str]] = {}


def _decompositions_id(table: dict | None) -> str:
    """A fingerprint of a decomposition table, computed once per table object."""
    if not table:
        return "none"
    seen = _DECOMP_IDS.get(id(table))
    if seen is None or seen[0] is not table:
        entries = sorted(f"{k}={_function_id(fn)}" for k, fn in table.items())
        seen = _DECOMP_IDS[id(table)] = (table, f"{len(table)}:" + hashlib.sha256("\n".join(entries).encode()).hexdigest())
    return seen[1]


def _function_id(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        args = [_function_id(a) if callable(a) else repr(a) for a in (*fn.args, *fn.keywords.items())]
        return f"partial({_function_id(fn.func)}, {', '.join(args)})"
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)  # an address in it makes this a miss every process: safe, never stale
    body = hashlib.sha256(code.co_code + repr(code.co_names).encode()).hexdigest()[:16]
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}:{body}"


# ---- the entry ------------------------------------------------------------------------------------
def dump(traced: Traced, graphs: dict[str, Any], num_saved: int, symbolic: bool = False) -> bytes | None:
    """The entry for one traced variant, or ``None`` when it cannot be stored. ``graphs`` may
    hold ``backward_sizes`` (the symbols a symbolic backward takes as int inputs)."""
    texts = {name: g for name, g in graphs.items() if isinstance(g, tc_ir.Graph)}
    if any(g.tensors for g in texts.values()):
        return None
    texts = {name: str(g) for name, g in texts.items()}
    try:
        plan = _encode(traced.plan)
        guards = [_encode_guard(g) for g in traced.guards]
        if symbolic:
            _check_reads_back(traced.guards, guards, texts)
    except Unstorable as e:
        log.debug("tc_autograd: not caching the trace of %s: %s", traced.graph.name, e)
        return None
    record = {"format": FORMAT, "graphs": texts, "plan": plan,
              "num_user_outputs": traced.num_user_outputs, "mutated_inputs": traced.mutated_inputs,
              "differentiable": traced.differentiable, "grad_inputs": traced.grad_inputs,
              "is_joint": traced.is_joint, "num_saved": num_saved, "guards": guards,
              "backward_sizes": [s.name for s in graphs.get("backward_sizes") or ()]}
    return json.dumps(record).encode()


def load(data: bytes, num_inputs: int, admits: Callable[[list], bool] | None = None) -> Any:
    """``(traced, graphs, num_saved)`` from an entry; ``None`` when it does not read back whole;
    ``False`` when ``admits(guards)`` (the entry's size guards) says the inputs are not its sizes.

    ``graphs`` maps names to parsed graphs, except ``joint``, which stays text until read.
    """
    read = _read_guards(data)
    if read is None:
        return None
    record, guards = read
    if admits is not None and not admits(guards):  # (its own errors are the trace's: not damage)
        return False  # checked before parsing the graphs: a trace for other sizes costs little
    try:
        texts = record["graphs"]
        graphs = {name: tc_ir.parse(text) for name, text in texts.items() if name != "joint"}
        graphs["joint"] = texts.get("joint")
        if record["backward_sizes"]:
            graphs["backward_sizes"] = [tc_ir.sym(str(name)) for name in record["backward_sizes"]]
        traced = Traced(graphs.get("inference"), _decode(record["plan"]), int(record["num_user_outputs"]),
                        [int(i) for i in record["mutated_inputs"]], [bool(d) for d in record["differentiable"]],
                        [int(i) for i in record["grad_inputs"]], bool(record["is_joint"]), guards)
        num_saved = int(record["num_saved"])
        _check(traced, graphs, num_saved, num_inputs)
    except Exception as e:  # a damaged entry is a miss, never a crash
        log.warning("tc_autograd: ignoring a damaged trace cache entry (%s: %s); tracing again", type(e).__name__, e)
        return None
    return traced, graphs, num_saved


def _read_guards(data: bytes) -> tuple[dict, list] | None:
    """The entry's record and its size guards; None for an entry of another format or damaged."""
    try:
        record = json.loads(data)
        if record.get("format") != FORMAT:
            return None
        return record, [_decode_guard(g) for g in record["guards"]]
    except Exception as e:
        log.warning("tc_autograd: ignoring a damaged trace cache entry (%s: %s); tracing again", type(e).__name__, e)
        return None


def _check(traced: Traced, graphs: dict[str, Any], num_saved: int, num_inputs: int) -> None:
    num_values = len(traced.differentiable)
    if traced.num_user_outputs + len(traced.mutated_inputs) != num_values:
        raise ValueError("output counts do not add up")
    forward = graphs["forward"] if traced.is_joint else graphs["inference"]
    if len(forward.inputs) != num_inputs or len(list(tc_ir.leaves(forward.outputs))) < num_values:
        raise ValueError("the forward graph does not fit the entry")
    if traced.is_joint:
        backward = graphs["backward"]
        if len(list(tc_ir.leaves(forward.outputs))) != num_values + num_saved:
            raise ValueError("saved-tensor count does not fit the forward graph")
        sizes = graphs.get("backward_sizes") or ()  # a symbolic backward's int inputs (add_size_inputs)
        if len(backward.inputs) != num_saved + sum(traced.differentiable) + len(sizes):
            raise ValueError("the backward graph does not fit the entry")
    # No tc_ir.verify here: it re-infers every node's spec (~60 ms a graph), the cost the cache
    # exists to avoid; the store's checksum and the parser (names, targets, specs) catch damage.


# ---- the output plan as JSON ------------------------------------------------------------------------
def _encode(v: Any) -> Any:
    if isinstance(v, OutputLeaf):
        return {"leaf": v.kind, "args": _encode(v.args)}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch._ops.OpOverload) and v.namespace == "aten":  # a view op to replay
        return {"op": [v.overloadpacket.__name__, v._overloadname]}
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return {"tuple": [_encode(x) for x in v]}
    if type(v) is list:
        return [_encode(x) for x in v]
    if type(v) is dict and all(isinstance(k, str) for k in v):
        return {"dict": [[k, _encode(x)] for k, x in v.items()]}
    raise Unstorable(f"output of type {type(v).__name__}")


def _decode(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "leaf" in v:
        return OutputLeaf(str(v["leaf"]), _decode(v["args"]))
    if "tuple" in v:
        return tuple(_decode(x) for x in v["tuple"])
    if "op" in v:
        packet, overload = v["op"]
        return getattr(getattr(torch.ops.aten, packet), overload)
    return {str(k): _decode(x) for k, x in v["dict"]}


# ---- size guards as JSON (sides in tc_ir's size grammar, read without evaluating) -------------------
_RELATIONS = {"Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt, "Ge": sympy.Ge}
_LOGIC = {"And": sympy.And, "Or": sympy.Or, "Not": sympy.Not}


def _encode_guard(g: sympy.Basic) -> list:
    for name, relation in _RELATIONS.items():
        if type(g) is relation:
            return [name, str(g.lhs), str(g.rhs)]
    for name, logic in _LOGIC.items():
        if type(g) is logic:
            return [name, *map(_encode_guard, g.args)]
    raise Unstorable(f"size guard {g} ({type(g).__name__})")


def _decode_guard(v: list) -> sympy.Basic:
    name, *args = v
    if name in _RELATIONS:
        return _RELATIONS[name](*map(parse_size, args))
    return _LOGIC[name](*map(_decode_guard, args))


def _check_reads_back(guards: list, encoded: list, texts: dict[str, str]) -> None:
    """A symbolic entry is stored only if it reads back identical: a guard that came back
    different (or lost) would let the entry run at sizes its trace never admitted."""
    try:
        if [_decode_guard(g) for g in encoded] != list(guards):
            raise Unstorable(f"size guards {guards} do not read back identical")
        for name, text in texts.items():
            if str(tc_ir.parse(text)) != text:
                raise Unstorable(f"the {name} graph does not read back identical")
    except (tc_ir.ParseError, SyntaxError, ValueError, TypeError) as e:
        raise Unstorable(f"a size expression does not read back ({e})") from None
