"""``compile``: the pipeline, top to bottom, plus the graph-level cache.

    lower (graph → buffers + extern calls) → schedule (fusion) → kernels (per backend,
    compiled in parallel as soon as generated) → wrapper (Python) → CompiledGraph
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import torch

import tc_ir
from tc_ir import storage

from . import combo, inplace, kir, padding
from .codegen import choose_backend, triton_mm
from .codegen.build import COUNTERS, cache_dir, verified_read, verified_write
from .config import VERSION, Options
from .graph_lowering import GraphLowering, LoweredGraph
from .ir import BufferValue, ComputedBuffer, ExternCall
from .rewrites import rewrite
from .scheduler import Group, Schedule, build_kernel, reads_of, schedule
from .wrapper import KernelCall, _layouts, generate, wrapper_devices, wrapper_globals

perf = tc_ir.logs.get_logger("perf_hints")
output_code = tc_ir.logs.get_logger("output_code")
_MEMORY_CACHE: dict[str, dict] = {}


class CompiledGraph:
    """A compiled graph: call it with the graph's inputs, positionally.

    ``source`` is the generated Python wrapper, ``kernels`` the kernel sources, ``stats`` a
    dict with ``kernels`` (launches per call), ``fused_nodes``, ``bytes_read``,
    ``bytes_written`` and ``extern_calls``. ``output_strides``: per flattened output, the
    strides the returned tensor has (None: not a tensor tc lays out, or symbolic); they differ
    from the graph's specs only for ``free_outputs`` that were stored channels-last.

    A graph compiled with ``meta["defer_load"]`` returns before its kernels are built: its
    kernels build in the compile pool while the caller goes on (tc_autograd generates the
    backward's kernels meanwhile), and ``finish_loading`` (else the first call) waits for them
    and loads the wrapper.
    """

    def __init__(self, fn, source: str, kernels: list[str], stats: dict, timings: dict,
                 output_strides: list | None = None, writes_inputs: bool = True, pending: Any = None):
        self._fn, self.source, self.kernels, self.stats, self.timings = fn, source, kernels, stats, timings
        self.output_strides = output_strides
        self.writes_inputs = writes_inputs
        self._pending = pending  # () -> (the wrapper, timings), where the load was deferred
        if pending is not None:
            self._lock = threading.Lock()
            self._fn = self._load_then_call

    def finish_loading(self) -> None:
        """Wait for the kernels and load the wrapper (at once where the load was not deferred)."""
        if self._pending is None:
            return
        with self._lock:
            if self._pending is not None:
                self._fn, self.timings = self._pending()
                self._pending = None

    def _load_then_call(self, inputs: Any) -> Any:
        try:
            self.finish_loading()
        except Exception as e:  # nothing ran: the caller may run the graph another way
            e.tc_while_compiling = True
            raise
        return self._fn(inputs)

    def __call__(self, *inputs: Any) -> Any:
        try:
            return self._fn(inputs)
        except Exception as e:
            # A Triton kernel that fails to build at its launch (Triton compiles there when no
            # ahead-of-time compile was possible, the interpreter only then) has written nothing;
            # where no earlier step of the call can have written an input either, nothing the
            # caller sees has changed: it may run the graph another way (``tc_while_compiling``,
            # the umbrella's eager fallback).
            if getattr(e, "tc_kernel_failed", False) and not self.writes_inputs:
                e.tc_while_compiling = True
            raise

    def call_boxed(self, inputs: list) -> Any:
        """Call with the inputs in a list that the wrapper empties: the caller hands its
        references over, so each input is freed after its last use (a backward's saved
        activations), not when the call returns."""
        return self._fn(inputs)

    def __repr__(self) -> str:
        return f"<tc_inductor.CompiledGraph {self.stats}>"


class _Timer:
    def __init__(self):
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        yield
        self.times[stage] = self.times.get(stage, 0.0) + time.perf_counter() - start


def compile(graph: tc_ir.Graph, example_inputs: list, options: dict | Options | None = None) -> CompiledGraph:  # noqa: A001
    """Compile an ATen-level ``tc_ir.Graph`` into a callable running fused kernels.

    >>> import torch, tc_ir, tc_inductor
    >>> aten = torch.ops.aten
    >>> g = tc_ir.Graph()
    >>> x = g.input("x", tc_ir.TensorSpec((1024,), torch.float32))
    >>> g.output(g.call(aten.mul.Tensor, g.call(aten.relu.default, x), 2.0))
    >>> k = tc_inductor.compile(g, [torch.randn(1024)])
    >>> k.stats["kernels"]
    1
    """
    with tc_ir.deferred_full_gc():  # a compile's heap only grows: no full GC rescans of it
        return _compile(graph, example_inputs, options)


def _compile(graph: tc_ir.Graph, example_inputs: list, options: dict | Options | None) -> CompiledGraph:
    opts = options if isinstance(options, Options) else Options.from_dict(options)
    if graph.meta.get("free_outputs") and not opts.free_outputs:  # set by tc_autograd: saved activations
        opts = attrs.evolve(opts, free_outputs=graph.meta["free_outputs"])
    if graph.meta.get("inplace_outputs") and not opts.inplace_outputs:  # set by tc_autograd: mutated inputs
        opts = attrs.evolve(opts, inplace_outputs=graph.meta["inplace_outputs"])
    timer = _Timer()
    key = _cache_key(graph, example_inputs, opts)
    record = _cache_get(key, opts) if key and opts.cache else None
    if record is None:
        with timer("lower"):
            lowering = GraphLowering(padding.pad_gemm_dims(rewrite(graph), padding.mode(opts)), list(example_inputs), opts,
                                     lambda sub, inputs: compile(sub, inputs, opts))
            lowered = lowering.run()
        with timer("schedule"):
            sched = schedule(lowered, opts)
        with timer("codegen"):
            record = _generate(lowered, sched, opts, graph, timer)
        # The lowering sits in reference cycles with its IR (pointwise bodies close over it),
        # which only the cyclic GC frees: holding the example inputs there kept a backward's
        # examples (zeros the size of every saved activation: 4.5 GiB on BERT-base 32x512)
        # allocated until some later collection.
        lowering.example_inputs = None
        if key and opts.cache and record.get("cacheable"):
            _cache_put(key, record, opts)
    else:
        timer.times["cache_hit"] = 0.0
        _show_cached(record, graph)

    def load() -> tuple[Any, dict]:
        fn = _load(record, graph, opts, timer)
        _report(timer.times, record)
        return fn, dict(timer.times)

    strides = record.get("output_strides")
    compiled = CompiledGraph(None, record["source"], [k["source"] for k in record["kernels"]], dict(record["stats"]),
                             {}, [tuple(s) if s is not None else None for s in strides] if strides is not None else None,
                             _writes_inputs(record, graph), pending=load)
    if not graph.meta.get("defer_load"):
        compiled.finish_loading()
    return compiled


def compile_counters() -> dict:
    """Kernels built in this process so far: ``cpp_kernels`` (C++ sources built or loaded),
    ``triton_kernels`` (Triton sources imported), ``triton_configs`` (launch configs of
    size-bucketed Triton kernels: a compile each on a GPU), and their sum ``kernel_builds``."""
    counts = {k: COUNTERS[k] for k in ("cpp_kernels", "triton_kernels", "triton_configs")}
    return {**counts, "kernel_builds": sum(counts.values())}


def _show_cached(record: dict, graph: tc_ir.Graph) -> None:
    """A cache hit shows what it will run, as a compile does (``TC_LOGS=output_code``,
    ``TC_DEBUG_DIR``): the wrapper and kernel sources read back from the cache."""
    for k in record["kernels"]:
        tc_ir.logs.dump("kernel", k["name"], f"# {k['backend']} kernel read back from the cache\n\n{k['source']}")
        output_code.debug("kernel %s of %s (read back from the cache):\n%s", k["name"], graph.name, k["source"])
    tc_ir.logs.dump("wrapper", graph.name, record["source"])
    output_code.debug("wrapper for %s (read back from the cache):\n%s", graph.name, record["source"])


# ---- code generation ------------------------------------------------------------------------

def _generate(lowered: LoweredGraph, sched: Schedule, opts: Options, graph: tc_ir.Graph, timer: _Timer) -> dict:
    dtypes = _buffer_dtypes(lowered)
    calls: dict[Group, KernelCall] = {}
    kernels: list[dict] = []
    by_source: dict[str, str] = {}
    stats = {"kernels": 0, "fused_nodes": 0, "bytes_read": 0, "bytes_written": 0, "extern_calls": 0}
    nbytes = _buffer_nbytes(lowered)
    sched = triton_mm.fuse_templates(lowered, sched, opts, dtypes)
    built: dict[Group, Any] = {}  # kernels built to decide on combining, reused below

    def kernel_of(group: Group) -> Any:
        if group not in built:
            built[group] = build_kernel(group, sched.stored, dtypes, opts)
        return built[group]

    sched = combo.combine(sched, kernel_of, opts)
    for step in sched.steps:
        if isinstance(step, triton_mm.TemplateGroup):
            _template_call(step, lowered, sched, opts, dtypes, kernels, by_source, calls, stats, nbytes)
            continue
        if isinstance(step, combo.ComboGroup):  # many small kernels as one launch
            name, args, launch, pointers = combo.emit(step, opts, kernels, by_source)
            calls[step] = KernelCall(name, args, [], launch, pointers)
            stats["kernels"] += 1
            stats["fused_nodes"] += len(step.members) - 1
            stats["bytes_read"] += sum(nbytes.get(n, 0) for k in step.kernels for n, _ in k.inputs)
            stats["bytes_written"] += sum(nbytes.get(n, 0) for k in step.kernels for n, _ in k.outputs)
            tc_ir.logs.dump("kernel", name, next(k["source"] for k in kernels if k["name"] == name))
            continue
        if isinstance(step, ExternCall):
            stats["extern_calls"] += 1
            continue
        kernel = kernel_of(step)
        backend = choose_backend(step.device, opts)
        source = backend.generate(kernel, "kernel", opts, step.device)
        meta = backend.metadata(kernel, opts, step.device)
        # one kernel per source and launch config: the same source may run with other block sizes
        key = source + repr(meta)
        if key not in by_source:
            name = f"k{len(by_source)}"
            by_source[key] = name
            kernels.append({"name": name, "backend": backend.name, "source": source, "meta": meta})
            backend.start(kernels[-1], opts)  # compile in the background while we go on
        name = by_source[key]
        args = [n for n, _ in kernel.inputs] + [n for n, _ in kernel.outputs]
        pointers = args if getattr(backend, "reads_pointers", False) else []
        calls[step] = KernelCall(name, args, list(kernel.sizes), backend.launch(name, kernel, args, opts, step.device),
                                 pointers)
        stats["kernels"] += 1
        stats["fused_nodes"] += len(step.members) - 1
        stats["bytes_read"] += sum(nbytes.get(n, 0) for n, _ in kernel.inputs)
        stats["bytes_written"] += sum(nbytes.get(n, 0) for n, _ in kernel.outputs)
        _dump_kernel(name, kernel, source)
    extern_names = {s.name: f"ext_{s.name}" for s in sched.steps if isinstance(s, ExternCall)}
    writes = inplace.plan(lowered, sched.steps, _layouts(lowered), dict(opts.inplace_outputs), reads_of)
    targets = {extern_names[s.name]: writes.externs[s.name][0] if s.name in writes.externs else s.target
               for s in sched.steps if isinstance(s, ExternCall)}
    stats["inplace_outputs"] = len(writes.buffers) + sum(len(m) for _, m in writes.externs.values())
    start = time.perf_counter()
    source = generate(lowered, sched, calls, extern_names, frozenset(opts.guarded_inputs), writes)
    timer.times["wrapper"] = time.perf_counter() - start  # reported apart from kernel codegen
    timer.times["codegen"] = timer.times.get("codegen", 0.0) - timer.times["wrapper"]
    tc_ir.logs.dump("wrapper", graph.name, source)
    tc_ir.logs.dump("fusion", graph.name, lambda: "\n".join(sched.log))
    output_code.debug("wrapper for %s:\n%s", graph.name, source)
    for k in kernels:
        output_code.debug("kernel %s of %s:\n%s", k["name"], graph.name, k["source"])
    target_names = {k: _target_name(t) for k, t in targets.items()}
    devices = sorted(set(wrapper_devices(lowered)) | {str(torch.device(s.device)) for s in calls})
    return {"source": source, "devices": devices, "kernels": kernels, "stats": stats,
            "targets": targets, "target_names": target_names,
            "constants": dict(lowered.constant_keys), "output_strides": _output_strides(lowered, graph),
            "cacheable": all(v is not None for v in target_names.values()),
            "extern_reasons": dict(lowered.extern_reasons)}


def _output_strides(lowered: LoweredGraph, graph: tc_ir.Graph) -> list | None:
    values = list(tc_ir.leaves(lowered.outputs))
    if len(values) != len(list(tc_ir.leaves(graph.outputs))):  # an output node holding a tuple
        return None
    return [list(v.stride) if isinstance(v, BufferValue) and all(isinstance(s, int) for s in v.stride) else None
            for v in values]


def _template_call(step, lowered: LoweredGraph, sched: Schedule, opts: Options, dtypes: dict, kernels: list,
                   by_source: dict, calls: dict, stats: dict, nbytes: dict) -> None:
    """A matmul template with its fused epilogue: one kernel instead of an extern call and a kernel."""
    kernel = triton_mm.template_kernel(step, sched.stored, dtypes, opts)
    source = triton_mm.generate(step, kernel, step.device)
    interpret = torch.device(step.device).type != "cuda"
    if source not in by_source:
        by_source[source] = f"k{len(by_source)}"
        kernels.append({"name": by_source[source], "backend": "triton_mm", "source": source,
                        "meta": {"interpret": interpret}})
    config = step.config or triton_mm.heuristic_config(step.extern, interpret)
    launch = triton_mm.launch_line(by_source[source], step, kernel, config, _layouts(lowered))
    calls[step] = KernelCall(by_source[source], [], [], launch)
    stats["kernels"] += 1
    stats["fused_nodes"] += len(step.epilogue.members) if step.epilogue is not None else 0
    stats["bytes_read"] += sum(nbytes.get(n, 0) for n, _ in kernel.inputs)
    stats["bytes_written"] += sum(nbytes.get(n, 0) for n, _ in kernel.outputs)
    _dump_kernel(by_source[source], kernel, source)


def _dump_kernel(name: str, kernel: kir.Kernel, source: str) -> None:
    """The kernel's IR and source in the debug directory; formatted only when dumps are on."""
    tc_ir.logs.dump("kernel", name, lambda: kir.format_kernel(kernel, name) + "\n\n" + source)


def _target_name(target: Any) -> str | None:
    try:
        name = tc_ir.target_name(target)
        return name if tc_ir.resolve_target(name) is target else None
    except Exception:
        return None


def _buffer_dtypes(lowered: LoweredGraph) -> dict:
    dtypes = {i.name: i.spec.dtype for i in lowered.inputs if isinstance(i.spec, tc_ir.TensorSpec)}
    dtypes.update({n: v.dtype for n, v in lowered.constants.items() if isinstance(v, torch.Tensor)})
    dtypes.update({name: torch.int64 for name in lowered.seeds})
    for step in lowered.steps:
        if isinstance(step, ComputedBuffer):
            dtypes[step.name] = step.dtype
        else:
            dtypes.update({o.name: o.dtype for o in tc_ir.leaves(step.outputs) if isinstance(o, BufferValue)})
    return dtypes


def _buffer_nbytes(lowered: LoweredGraph) -> dict[str, int]:
    """Bytes of each computed buffer and input, by name (0 where a size is symbolic), found
    once: looking each kernel's buffers up in the steps took time quadratic in the graph."""
    nbytes = {inp.name: _numel(inp.spec.shape) * inp.spec.dtype.itemsize
              for inp in reversed(lowered.inputs) if isinstance(inp.spec, tc_ir.TensorSpec)}
    for step in reversed(lowered.steps):  # the first step of a name wins, as inputs lose to steps
        if isinstance(step, ComputedBuffer):
            nbytes[step.name] = _numel(step.shape) * step.dtype.itemsize
    return nbytes


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s) if isinstance(s, int) else 0
    return n


# ---- loading ---------------------------------------------------------------------------------

def _load(record: dict, graph: tc_ir.Graph, opts: Options, timer: _Timer) -> Any:
    """The generated wrapper, its kernels built (or loaded) and bound."""
    from .codegen.registry import BACKENDS, _load_builtin

    _load_builtin()
    backends = {e.name: e.backend for e in BACKENDS}
    env: dict[str, Any] = {"torch": torch, "_layout": _layout, "_own_memory": _own_memory,
                           **wrapper_globals(record.get("devices", []))}
    with timer("compile_kernels"):  # builds started during codegen (or now, on a cache hit) finish here
        if any(k["backend"] == "triton" for k in record["kernels"]):
            import triton

            env["triton"] = triton
        for k in record["kernels"]:
            backends[k["backend"]].start(k, opts)
        for k in record["kernels"]:
            env[k["name"]] = backends[k["backend"]].load(k, opts)
    with timer("wrapper"):
        targets = record.get("targets") or {n: tc_ir.resolve_target(t) for n, t in record["target_names"].items()}
        env.update({name: _direct_op(t) for name, t in targets.items()})
        env.update({name: graph.tensors[key] for name, key in record["constants"].items()})
        exec(compile_source(record["source"]), env)  # noqa: S102  (our own generated wrapper)
    return env["call"]


def _writes_inputs(record: dict, graph: tc_ir.Graph) -> bool:
    """Whether a call may write an input's memory: outputs written in place, or a mutating op."""
    if record["stats"].get("inplace_outputs", 0):
        return True
    return any(tc_ir.is_mutating(n.target) for g in (graph, *graph.subgraphs()) for n in g.calls)


def _direct_op(target: Any) -> Any:
    """An ATen overload as the C++ callable behind it: ``OpOverload.__call__`` is one Python
    frame that only forwards to ``_op`` (~0.4 µs per extern call); the vendor-kernel overloads of
    ``_BOUND`` as their ``torch`` function."""
    if type(target) is torch._ops.OpOverload:  # subclasses (TorchBind ops) do more in __call__
        return _bound_functions().get(target) or getattr(target, "_op", target)
    return target


# Vendor-kernel overloads called through their ``torch`` function: its argument parser (the one
# ``torch.addmm`` and ``torch.conv2d`` use) takes ~1-4 µs less per call than ``_op``, which
# converts each argument by the schema (a convolution: 3.4 against 7.4 µs on a 2-core CPU); a
# host-bound step pays it per extern call (EfficientNet-B0's inference: 82 convolutions). Only
# ``default`` overloads that the function picks for every argument list their schema takes (the
# others need another arity or keyword). The tensors a wrapper holds are plain tensors or
# Parameters (capture refuses subclasses), so the function's ``__torch_function__`` check finds
# nothing to do.
_BOUND = ("mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
          "_scaled_dot_product_flash_attention_for_cpu")


@functools.cache
def _bound_functions() -> dict:
    functions = torch._C._VariableFunctions
    return {getattr(torch.ops.aten, name).default: getattr(functions, name)
            for name in _BOUND if hasattr(functions, name) and hasattr(torch.ops.aten, name)}


def compile_source(source: str):
    """The wrapper's code object (cached across processes: ``tc_ir.storage.compiled_code``)."""
    return storage.compiled_code(source, "<tc_inductor wrapper>")


def _own_memory(result: Any, *inputs: Any) -> Any:
    """An extern call's result in memory of its own. Some torch ops return their argument or a
    view of it though their schema promises a new tensor (``conj_physical`` of a real tensor is
    ``self``), and views that lowering declined run as extern calls: the memory plan counts every
    extern result as a new buffer, so a shared one would be overwritten when its source's buffer
    is reused. A copy only when the storages are shared."""
    tensors = list(_tensors(inputs))
    shared = {_storage(t) for t in tensors} | {id(t) for t in tensors}
    if isinstance(result, (tuple, list)):
        return type(result)(_unshared(r, shared) for r in result)
    return _unshared(result, shared)


def _storage(t: torch.Tensor) -> int:
    """Where ``t``'s memory is; a tensor without a storage (sparse, mkldnn) by its identity: it
    shares memory with an input only by being that input (``to_sparse`` of a sparse tensor)."""
    return t.untyped_storage().data_ptr() if t.layout is torch.strided else id(t)


def _tensors(values: tuple) -> Any:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


def _unshared(t: Any, shared: set) -> Any:
    if isinstance(t, torch.Tensor) and t.numel() and _storage(t) in shared:
        return t.clone()
    return t


def _layout(t: Any, shape: tuple, stride: tuple, want: str | None = None) -> Any:
    """``t`` in the layout kernels were compiled for (a copy only when it differs); ``want`` is
    the symbolic shape of an input of a graph with size symbols, for the error message."""
    if not isinstance(t, torch.Tensor):
        return t
    if tuple(t.shape) != shape:
        raise ValueError(f"tc_inductor: compiled for shape {want or list(shape)}, got {list(t.shape)}")
    if all(st == want or size <= 1 for st, want, size in zip(t.stride(), stride, shape)):
        return t
    return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)


# ---- the graph-level cache -------------------------------------------------------------------------

def _cache_key(graph: tc_ir.Graph, example_inputs: list, opts: Options) -> str | None:
    try:
        text = graph.format(data=True, name="graph", strict=True)  # exact target names, or no key
    except Exception:
        return None
    specs = [_input_key(node, x) for node, x in zip(graph.inputs, example_inputs)]
    parts = [text, "|".join(specs), opts.cache_text(), VERSION, _code_version(), torch.__version__, _triton_version(),
             str(triton_mm.allow_tf32())]  # the matmul template's fp32 precision follows torch's flag
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _input_key(node: tc_ir.Node, example: Any) -> str:
    """What an input contributes to the key: its symbolic spec when it has size symbols (the
    compiled graph serves every size, so the example's sizes must not split the key), else the
    example's own spec and strides."""
    spec = node.spec
    if (isinstance(spec, tc_ir.TensorSpec) and not spec.is_static) or getattr(spec, "expr", None) is not None:
        return f"{spec} stride={list(map(str, spec.stride))}" if isinstance(spec, tc_ir.TensorSpec) else str(spec)
    return str(tc_ir.spec_of(example)) + (str(example.stride()) if isinstance(example, torch.Tensor) else repr(example))


@functools.cache
def _code_version() -> str:
    """A hash of this package's source, so a changed compiler never reuses stale graphs."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "none"


def _cache_get(key: str, opts: Options) -> dict | None:
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    data = None
    if opts.artifact_store is not None:
        data = opts.artifact_store.get("inductor_graph", key)
    else:
        data = verified_read(cache_dir() / "graphs" / f"{key}.json")  # digest checked: wrapper source is code
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    record["targets"] = None
    _MEMORY_CACHE[key] = record
    return record


def _cache_put(key: str, record: dict, opts: Options) -> None:
    _MEMORY_CACHE[key] = record
    stored = {k: v for k, v in record.items() if k != "targets"}
    data = json.dumps(stored).encode()
    if opts.artifact_store is not None:
        opts.artifact_store.put("inductor_graph", key, data)
        return
    verified_write(cache_dir() / "graphs" / f"{key}.json", data)


def _report(times: dict, record: dict) -> None:
    if not tc_ir.logs.enabled("perf_hints"):
        return
    total = sum(times.values())
    order = ["cache_hit", "lower", "schedule", "codegen", "compile_kernels", "wrapper"]
    stages = sorted(times, key=lambda st: order.index(st) if st in order else len(order))
    parts = ", ".join(f"{stage} {times[stage] * 1000:.1f} ms" for stage in stages)
    perf.debug("compile %.1f ms (%s); %d kernels (%d unique), %d extern calls", total * 1000, parts,
               record["stats"]["kernels"], len(record["kernels"]), record["stats"]["extern_calls"])
    for op, reason in record.get("extern_reasons", {}).items():
        perf.debug("extern call %s: %s", op, reason)
