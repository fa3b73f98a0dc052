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
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import tc_ir

from .joint import OutputLeaf, Traced

KIND = "aot_trace"
FORMAT = 2  # 2: input views are replayed view ops, not size/stride/offset
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
    parts = [text, regions, *_input_specs(inputs), repr(variant), options["partition"],
             _decompositions_id(options["decompositions"]), _autocast_state(), _versions()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _input_specs(inputs: Sequence[Any]) -> list[str]:
    storages: dict[int, int] = {}
    specs = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            ptr = x.untyped_storage().data_ptr() if x.device.type != "meta" else id(x)
            alias = storages.setdefault(ptr, i)  # which earlier input shares this one's memory
            specs.append(f"{tc_ir.spec_of(x)} {tuple(x.stride())} {x.storage_offset()} {x.requires_grad} "
                         f"{x.is_leaf} {alias} {type(x).__name__}")
        else:
            specs.append(f"{type(x).__qualname__} {x!r}")
    return specs


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
def dump(traced: Traced, graphs: dict[str, tc_ir.Graph], num_saved: int) -> bytes | None:
    """The entry for one traced variant, or ``None`` when it cannot be stored."""
    if any(g.tensors for g in graphs.values()):
        return None
    try:
        plan = _encode(traced.plan)
    except Unstorable as e:
        log.debug("tc_autograd: not caching the trace of %s: %s", traced.graph.name, e)
        return None
    record = {"format": FORMAT, "graphs": {name: str(g) for name, g in graphs.items()}, "plan": plan,
              "num_user_outputs": traced.num_user_outputs, "mutated_inputs": traced.mutated_inputs,
              "differentiable": traced.differentiable, "grad_inputs": traced.grad_inputs,
              "is_joint": traced.is_joint, "num_saved": num_saved}
    return json.dumps(record).encode()


def load(data: bytes, num_inputs: int) -> tuple[Traced, dict[str, Any], int] | None:
    """``(traced, graphs, num_saved)`` from an entry; ``None`` when it does not read back whole.

    ``graphs`` maps names to parsed graphs, except ``joint``, which stays text until read.
    """
    try:
        record = json.loads(data)
        if record.get("format") != FORMAT:
            return None
        texts = record["graphs"]
        graphs = {name: tc_ir.parse(text) for name, text in texts.items() if name != "joint"}
        graphs["joint"] = texts.get("joint")
        traced = Traced(graphs.get("inference"), _decode(record["plan"]), int(record["num_user_outputs"]),
                        [int(i) for i in record["mutated_inputs"]], [bool(d) for d in record["differentiable"]],
                        [int(i) for i in record["grad_inputs"]], bool(record["is_joint"]))
        num_saved = int(record["num_saved"])
        _check(traced, graphs, num_saved, num_inputs)
    except Exception as e:  # a damaged entry is a miss, never a crash
        log.warning("tc_autograd: ignoring a damaged trace cache entry (%s: %s); tracing again", type(e).__name__, e)
        return None
    return traced, graphs, num_saved


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
        if len(backward.inputs) != num_saved + sum(traced.differentiable):
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
