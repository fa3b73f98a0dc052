"""Lower a tc_ir ATen graph to computed buffers and extern calls (in graph order).

Every call is lowered through the table in :mod:`tc_inductor.lowering`, decomposed with
torch's tables when it has no lowering, or kept as an extern call through torch, so every
graph compiles. A lowering whose result disagrees with the node's spec is rejected (and the
node runs as an extern call), which keeps a wrong lowering from giving a wrong answer.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import attrs
import sympy
import torch
from torch.utils._pytree import tree_flatten, tree_map

import tc_ir
from tc_ir import Node, TensorSpec
from tc_ir.aliasing import escaping
from tc_ir.spec import contiguous_strides

from . import kir, layout, split_reduction
from .codegen.registry import choose_backend
from .cond import lower_cond
from .decompositions import EXTERN_PREFERRED, corrected_spec, trace_decomposition
from .ir import (
    BufferValue,
    ComputedBuffer,
    ExternCall,
    InputBuffer,
    Pointwise,
    TensorValue,
    Unsupported,
    is_dense,
)
from .lowering import LOWERINGS
from .symbolic import binding_plan

log = tc_ir.logs.get_logger("fusion")

# A value known only when the wrapper runs (a scalar input, or an extern result of unknown kind).
@attrs.define(eq=False)
class RuntimeValue:
    name: str


@attrs.define
class LoweredGraph:
    """The result of lowering: what the scheduler and the wrapper work from."""

    steps: list  # ComputedBuffer | ExternCall, in a legal order
    inputs: list  # InputBuffer per graph input
    constants: dict  # name -> held tensor / value
    constant_keys: dict  # name -> key in graph.tensors
    outputs: Any  # structure of BufferValue | RuntimeValue | python values
    output_buffers: set  # names of buffers the outputs read
    own: set  # names of buffers tc allocates
    extern_reasons: dict  # op name -> reason it runs through torch
    seeds: dict = attrs.Factory(dict)  # seed buffer name -> (device, slots): drawn by the wrapper per call
    size_plan: dict = attrs.Factory(dict)  # size symbol -> (input position, dim): bound by the wrapper per call


class GraphLowering:
    """Walks a graph once, lowering each node; the context lowerings receive."""

    def __init__(self, graph: tc_ir.Graph, example_inputs: list, options: Any,
                 compile_subgraph: Callable[[tc_ir.Graph, list], Callable] | None = None):
        self.graph, self.example_inputs, self.options = graph, example_inputs, options
        self._compile_subgraph = compile_subgraph
        self.steps: list = []
        self.inputs: list[InputBuffer] = []
        self.constants: dict[str, Any] = {}
        self.constant_keys: dict[str, str] = {}  # wrapper name -> key in graph.tensors
        self.own: set[str] = set()
        self.extern_reasons: dict[str, str] = {}
        self.spec: Any = None
        self.target: Any = None
        self._count = 0
        self._depth = 0
        self._stored_bases: dict = {}  # Pointwise -> BufferValue: view bases stored for externs
        self._reductions: dict = {}  # _reduction_key -> (BufferValue, len(steps) then): reductions done
        self._nhwc_shapes: set = set()  # while a region node lowers: the shapes it stores channels-last
        self.seeds: dict[str, tuple] = {}  # seed buffer name -> (device, slots used)
        self.size_plan = binding_plan(graph)  # raises SymbolicUnsupported for sizes it cannot bind
        # nodes stored channels-last around convolutions (layout.py); static graphs only
        use_cl = not self.size_plan and layout.enabled(graph, example_inputs, layout.mode(options))
        self._cl = layout.region(graph, options.get("free_outputs", ())) if use_cl else set()
        self._cl_inputs = layout.copied_inputs(graph, self._cl) if use_cl else set()

    # ---- the context lowerings use ----------------------------------------------------------
    def new_name(self, prefix: str = "buf") -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def realize(self, value: TensorValue, stride: tuple | None = None) -> BufferValue:
        if isinstance(value, BufferValue) and (stride is None or tuple(value.stride) == tuple(stride)):
            return value
        if stride is None:
            stride = getattr(value, "preferred_stride", None) or contiguous_strides(value.shape)
        stride = tuple(stride)
        if self._cl and layout.is_channels_last(value.shape, stride):
            buf = _in_storage_order(self.new_name(), tuple(value.shape), stride, value.dtype, value.device,
                                    lambda index, rindex, value=value: value.load(index))
        else:
            buf = ComputedBuffer(self.new_name(), value.shape, stride, value.dtype, value.device,
                                 lambda index, rindex, value=value: value.load(index))
        self._add_computed(buf)
        return buf.value()

    def realize_in_base_layout(self, value: TensorValue) -> BufferValue:
        """Store ``value`` for an extern call or for several readers. A view of a computed value
        is stored as its base, in the base's own (eager) layout, and passed as a strided window,
        as eager passes views: ``mm(x, t(w.to(bf16)))`` gets a transposed view of a row-major cast weight, whose rows
        are 16-byte aligned for the vendor GEMM, not a transposed copy with odd leading dims."""
        if isinstance(value, Pointwise):
            # a value read by several externs (two matmuls reading one gradient) is stored once
            base, redo = value.view_of or (value, None)
            if base not in self._stored_bases:
                self._stored_bases[base] = self.realize(base)
            window = self._stored_bases[base] if redo is None else redo(self._stored_bases[base])
            if isinstance(window, BufferValue):
                return window
        return self.realize(value)

    def _stored_or_lazy(self, value: Any) -> Any:
        """A lazy value an extern call made us store is read from that buffer from then on, not
        recomputed: a transformer's normalised residual stream feeds the next layer's matmuls and
        its residual add, and recomputing it there chained every layer back to the embeddings."""
        if not isinstance(value, Pointwise):
            return value
        base, redo = value.view_of or (value, None)
        stored = self._stored_bases.get(base)
        if stored is None:
            return value
        window = stored if redo is None else redo(stored)
        return window if isinstance(window, BufferValue) else value

    def reduction(self, shape, dtype, device, body, rranges, reduction_type, reduced_dims=()) -> BufferValue:
        key = _reduction_key(shape, dtype, device, body, rranges, reduction_type)
        known = self._known_reduction(key, shape)
        if known is not None:
            return known
        split = split_reduction.plan(shape, rranges, reduction_type, body if self._cpp(device) else None)
        if split is not None:
            result = self._split_reduction(shape, dtype, device, body, rranges, reduction_type, reduced_dims, split)
        elif tuple(shape) in self._nhwc_shapes:  # max pooling's window reduction in the conv region
            buf = _in_storage_order(self.new_name(), tuple(shape), layout.channels_last_strides(tuple(shape)), dtype,
                                    device, body, rranges, reduction_type, reduced_dims)
            self._add_computed(buf)
            result = buf.value()
        else:
            buf = ComputedBuffer(self.new_name(), tuple(shape), contiguous_strides(shape), dtype, device, body,
                                 tuple(rranges), reduction_type, tuple(reduced_dims))
            self._add_computed(buf)
            result = buf.value()
        self._reductions[key] = (result, len(self.steps))
        return result

    def _region_shapes(self, node: Node) -> set:
        """The 4-D shapes of ``node``'s values that the conv region stores channels-last: its own,
        or its items' (``max_pool2d_with_indices``)."""
        if not self._cl:
            return set()
        items = [node] + [u for u in node.users if u.target is operator.getitem]
        return {tuple(n.spec.shape) for n in items if n in self._cl and isinstance(n.spec, TensorSpec)}

    def moments(self, shape, dtype, device, body, rranges, reduced_dims=()) -> tuple[BufferValue, BufferValue] | None:
        """(sum, sum of squared deviations from the mean) of ``body`` over ``rranges`` in
        ``dtype`` (a compute dtype), as one split reduction (split_reduction.moments); None
        where a sum of this size is not split. The sum serves later equal sums too."""
        split = split_reduction.plan(shape, rranges, "sum", body if self._cpp(device) else None)
        if split is None:
            return None
        bufs = split_reduction.moments(self.new_name, shape, dtype, device, body, rranges, reduced_dims, split)
        for buf in bufs:
            self._add_computed(buf)
        total, m2 = bufs[-2].value(), bufs[-1].value()
        self._reductions[_reduction_key(shape, dtype, device, body, rranges, "sum")] = (total, len(self.steps))
        return total, m2

    def _known_reduction(self, key: tuple, shape: tuple) -> BufferValue | None:
        """An equal reduction lowered before (batch norm's decomposition sums its input twice:
        for the variance's mean and for the mean it returns), unless a mutating call ran since."""
        known = self._reductions.get(key)
        if known is None or any(isinstance(s, ExternCall) and s.mutates for s in self.steps[known[1]:]):
            return None
        value = known[0]
        if tuple(value.stride) != contiguous_strides(value.shape):  # stored channels-last: as it is
            return value if tuple(value.shape) == tuple(shape) else None
        return BufferValue(value.name, tuple(shape), contiguous_strides(shape), value.dtype, value.device)

    def _cpp(self, device) -> bool:
        try:
            return choose_backend(device, self.options).name == "cpp"
        except RuntimeError:  # no backend: compile() says so when it generates the kernel
            return False

    def _split_reduction(self, shape, dtype, device, body, rranges, reduction_type, reduced_dims,
                         split: tuple[int, int]) -> BufferValue:
        """A reduction over many rows into few outputs (batch-norm statistics: [C] over N*H*W)
        in two kernels (split_reduction.py): partials ``[chunks, *shape]`` over runs of ``size``
        rows, in the compute dtype, then those reduced over ``chunks``. Pointwise producers stay
        inlined in the first kernel's body."""
        chunks, size = split
        pshape, acc = (chunks, *shape), kir.compute_dtype(dtype)
        partial = ComputedBuffer(self.new_name(), pshape, contiguous_strides(pshape), acc, device,
                                 split_reduction.partial_body(body, len(shape), rranges, size, reduction_type),
                                 (size,), reduction_type)
        self._add_computed(partial)
        value = partial.value()
        buf = ComputedBuffer(self.new_name(), tuple(shape), contiguous_strides(shape), dtype, device,
                             lambda index, rindex: value.load((rindex[0], *index)), (chunks,), reduction_type,
                             tuple(reduced_dims))
        self._add_computed(buf)
        return buf.value()

    def random_seed(self, device: torch.device) -> kir.UOp:
        """The seed of a new random op on ``device``: one slot of the int64 seed buffer the
        wrapper fills from torch's generator for that device on every call."""
        device = torch.device(device)
        name = f"seeds_{device.type}{'' if device.index is None else device.index}"
        slots = self.seeds.get(name, (device, 0))[1]
        self.seeds[name] = (device, slots + 1)
        return kir.seed(name, slots)

    def compile_subgraph(self, graph: tc_ir.Graph, example_inputs: list) -> Callable:
        """A sub-graph (a cond branch) compiled by the same pipeline and options."""
        if self._compile_subgraph is None:
            raise Unsupported("no compiler for sub-graphs was given")
        return self._compile_subgraph(graph, example_inputs)

    def owns_storage(self, value: BufferValue) -> bool:
        return value.name in self.own

    def _add_computed(self, buf: ComputedBuffer) -> None:
        self.steps.append(buf)
        self.own.add(buf.name)

    # ---- the walk ---------------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        env: dict[Node, Any] = {}
        self._env = env
        for node in self.graph.nodes:
            env[node] = self.lower_node(node, env)
        claimed: dict[str, Node] = {}
        outputs = tc_ir.map_structure(
            self.graph.outputs,
            lambda v: self._distinct(v, self._output(env[v], self._laid_out(v)), claimed) if isinstance(v, Node) else v)
        output_buffers = {v.name for v in tc_ir.leaves(outputs) if isinstance(v, BufferValue)}
        return LoweredGraph(self.steps, self.inputs, self.constants, self.constant_keys, outputs, output_buffers, self.own,
                            self.extern_reasons, dict(self.seeds), dict(self.size_plan))

    def _distinct(self, node: Node, value: Any, claimed: dict[str, Node]) -> Any:
        """Output ``node``'s ``value``, in memory of its own unless the graph itself makes it view
        the storage of an earlier output (``claimed``: buffer name -> the first output node in it).
        Lowering merges equal values (a reduction computed twice is read from the first one's
        buffer): two bias gradients equal by construction (a residual add's two branches) came
        back as views of one buffer, so ``.grad`` accumulation and ``clip_grad_norm_`` wrote
        each of them twice."""
        if not isinstance(value, BufferValue) or not self.owns_storage(value):
            return value
        first = claimed.setdefault(value.name, node)
        if first is node or escaping([first]) & escaping([node]):
            return value
        spec = self._laid_out(node)
        stride = (spec.stride if isinstance(spec, TensorSpec) and _dense(spec) and tuple(spec.shape) == value.shape
                  else contiguous_strides(value.shape))
        copy = ComputedBuffer(self.new_name(), value.shape, tuple(stride), value.dtype, value.device,
                              lambda index, rindex, value=value: value.load(index))
        self._add_computed(copy)
        return copy.value()

    def _laid_out(self, node: Node) -> Any:
        """The spec of ``node`` with the strides tc chose for it (channels-last in the region)."""
        if node in self._cl and isinstance(node.spec, TensorSpec):
            return node.spec.with_(stride=layout.channels_last_strides(tuple(node.spec.shape)))
        return node.spec

    def _output(self, value: Any, spec: Any) -> Any:
        if isinstance(value, Node):
            return self._output(value, value.spec)
        if isinstance(value, Pointwise):
            stride = spec.stride if isinstance(spec, TensorSpec) and _dense(spec) and \
                tuple(spec.shape) == tuple(value.shape) else None
            return self.realize(value, stride)
        if isinstance(value, (tuple, list)):
            specs = spec if isinstance(spec, (tuple, list)) and len(spec) == len(value) else [None] * len(value)
            return type(value)(self._output(v, s) for v, s in zip(value, specs))
        return value

    def lower_node(self, node: Node, env: dict) -> Any:
        if node.op == "input":
            return self._input(node)
        if node.op in ("param", "constant"):
            value = self.graph.tensors[node.target]
            if isinstance(value, torch.Tensor):
                name = f"const_{node.name}"
                self.constants[name] = value
                self.constant_keys[name] = node.target
                return BufferValue(name, value.shape, value.stride(), value.dtype, value.device)
            return value
        args, kwargs = tc_ir.map_structure((node.args, node.kwargs),
                                           lambda v: self._stored_or_lazy(env[v]) if isinstance(v, Node) else v)
        if node.target is operator.getitem:
            if isinstance(args[0], RuntimeValue):
                return self.extern(node, args, kwargs, "item of an opaque value")
            # an item of a multi-output lowering (layer norm's output) is realized like any value
            item = args[0][args[1]]
            if node in self._cl and isinstance(item, Pointwise):  # max pooling's: stored NHWC
                item.preferred_stride = layout.channels_last_strides(tuple(item.shape))
            return self._maybe_realize(node, item)
        spec = corrected_spec(node.target, node.spec, args, kwargs)
        outer = self._nhwc_shapes  # a decomposition's calls lower inside their node's lowering
        self._nhwc_shapes = outer | self._region_shapes(node)
        try:
            result = self.lower_call(node, node.target, spec, args, kwargs)
        finally:
            self._nhwc_shapes = outer
        for value, leaf in zip(tc_ir.leaves(result), tc_ir.leaves(spec)):
            if isinstance(value, Pointwise) and isinstance(leaf, TensorSpec) and _dense(leaf) \
                    and tuple(leaf.shape) == tuple(value.shape):
                value.preferred_stride = leaf.stride  # realized as eager would lay it out
        if node in self._cl and isinstance(result, Pointwise):  # conv region: stored NHWC
            result.preferred_stride = layout.channels_last_strides(tuple(result.shape))
        return self._maybe_realize(node, result)

    def _input(self, node: Node) -> Any:
        index = len(self.inputs)
        example = self.example_inputs[index] if index < len(self.example_inputs) else None
        if self.size_plan and isinstance(node.spec, TensorSpec):
            # compiled for the spec's sizes and strides (expressions), not the example's
            self.inputs.append(InputBuffer(node.name, node.spec, index))
            spec = node.spec
            return BufferValue(node.name, spec.shape, spec.stride, spec.dtype, spec.device)
        spec = TensorSpec.from_tensor(example) if isinstance(example, torch.Tensor) else node.spec
        self.inputs.append(InputBuffer(node.name, spec, index))
        if self.size_plan and getattr(spec, "expr", None) is not None:
            return spec.expr  # an int input that is a size: its expression, bound by the wrapper
        if not isinstance(example, torch.Tensor):
            return RuntimeValue(node.name)
        value = BufferValue(node.name, example.shape, example.stride(), example.dtype, example.device)
        if node in self._cl_inputs and not layout.same_order(tuple(example.shape), tuple(example.stride()),
                                                             layout.channels_last_strides(tuple(example.shape))):
            # A convolution reads this NCHW input: the first extern call that reads it stores
            # one channels-last copy, which later readers (the residual add) share.
            copy = Pointwise(value.shape, value.dtype, value.device, value.load)
            copy.preferred_stride = layout.channels_last_strides(tuple(value.shape))
            return copy
        return value

    def lower_call(self, node: Node, target: Any, spec: Any, args: tuple, kwargs: dict) -> Any:
        if target is tc_ir.ops.cond:
            return lower_cond(self, node, args, kwargs)
        reason = self._kernel_reason(target, spec, args, kwargs)
        if reason is None and target in LOWERINGS:
            try:
                self.spec, self.target = spec, target
                result = LOWERINGS[target](self, *args, **kwargs)
                _check(result, spec)
                return result
            except Unsupported as e:
                reason = f"lowering declined: {e}"
            except Exception as e:  # a lowering bug must not become a wrong answer
                reason = f"lowering failed: {type(e).__name__}: {e}"
                log.debug("%s: %s", target, reason)
        elif reason is None:
            reason = "no lowering"
        if reason == "no lowering" or (reason.startswith("lowering declined") and not tc_ir.is_random(target)):
            decomposed = self._decompose(node, target, args, kwargs)
            if decomposed is not _NOT_DONE and _same_shapes(decomposed, spec):
                return decomposed
            if decomposed is not _NOT_DONE:  # a decomposition's bug must not become a wrong shape
                reason = "decomposition gave other shapes than the node's spec"
                log.debug("%s: %s", target, reason)
        return self.extern(node, args, kwargs, reason, target=target, spec=spec)

    def _kernel_reason(self, target: Any, spec: Any, args: tuple, kwargs: dict) -> str | None:
        if not isinstance(target, torch._ops.OpOverload):
            return "not an ATen overload"
        if target in EXTERN_PREFERRED:
            return "extern by design (vendor kernel)"
        if tc_ir.is_mutating(target):
            return "mutating op"
        if tc_ir.is_random(target) and target not in LOWERINGS:
            return "random op without a lowering"
        if tc_ir.is_random(target) and kwargs.get("generator") is not None:
            return "random op with an explicit generator"
        leaves = [v for v in tc_ir.leaves((args, kwargs))]
        if any(isinstance(v, RuntimeValue) for v in leaves):
            return "reads a runtime value"
        if any(isinstance(v, torch.SymInt) for v in leaves):
            return "symbolic scalar argument"
        tensors = [v for v in leaves if isinstance(v, TensorValue)]
        specs = [s for s in tc_ir.leaves(spec) if s is not None] if spec is not None else []
        if spec is None or not all(isinstance(s, TensorSpec) for s in specs) or not specs:
            return "result is not a tensor of known spec"
        dtypes = {t.dtype for t in tensors} | {s.dtype for s in specs}
        if not dtypes <= kir.KERNEL_DTYPES:
            return f"dtype {sorted(map(str, dtypes - kir.KERNEL_DTYPES))}"
        devices = {t.device.type for t in tensors} | {s.device.type for s in specs}
        if len(devices) > 1 or not devices <= {"cpu", "cuda"}:
            return f"devices {sorted(devices)}"
        if any(isinstance(v, complex) for v in leaves):
            return "complex scalar"
        return None

    def _decompose(self, node: Node, target: Any, args: tuple, kwargs: dict) -> Any:
        if self._depth > 8:
            return _NOT_DONE
        flat, _ = tree_flatten((args, kwargs))
        tensors = [v for v in flat if isinstance(v, TensorValue)]
        if any(isinstance(v, RuntimeValue) for v in flat):
            return _NOT_DONE
        spec_args, spec_kwargs = tree_map(
            lambda v: TensorSpec(v.shape, v.dtype, v.device, _stride_of(v)) if isinstance(v, TensorValue) else v,
            (args, kwargs))
        device = tensors[0].device if tensors else _spec_device(node.spec)
        sub = trace_decomposition(target, spec_args, spec_kwargs, device)
        if sub is None or any(n.target is target for n in sub.calls):
            return _NOT_DONE
        log.debug("decomposing %s into %d calls", target, len(sub.calls))
        env = dict(zip(sub.inputs, tensors))
        self._depth += 1
        try:
            for inner in sub.nodes:
                if inner.op != "input":
                    env[inner] = self.lower_node(inner, env)
        finally:
            self._depth -= 1
        return tc_ir.map_structure(sub.outputs, lambda v: env[v] if isinstance(v, Node) else v)

    def extern(self, node: Node, args: tuple, kwargs: dict, reason: str, target: Any = None, spec: Any = None) -> Any:
        target = node.target if target is None else target
        spec = node.spec if spec is None else spec
        mutates = tc_ir.is_mutating(target)
        if mutates:
            self._realize_everything_pending()
            self._stored_bases.clear()  # later readers of a base must not see the mutation
        args, kwargs = tc_ir.map_structure(
            (args, kwargs), lambda v: self.realize_in_base_layout(v) if isinstance(v, Pointwise) else v)
        args, kwargs = self._aligned_operands(target, args, kwargs)
        name = self.new_name("extern")
        outputs = _extern_outputs(name, spec)
        outputs = self._extern_layout(node, outputs)
        self.steps.append(ExternCall(name, target, args, kwargs, outputs, mutates, reason))
        self.extern_reasons[tc_ir.target_name(target) if _nameable(target) else str(target)] = reason
        log.debug("extern %s: %s", target, reason)
        return outputs if outputs is not None else RuntimeValue(name)

    def _aligned_operands(self, target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``args``/``kwargs`` with each operand that ``target``'s kernel needs aligned
        (``ALIGNED_OPERANDS``) stored again in an aligned layout where the one it has is not."""
        where = ALIGNED_OPERANDS.get(target)
        if where is None:
            return args, kwargs
        position, name = where
        in_args = position < len(args)
        value = args[position] if in_args else kwargs.get(name)
        if not isinstance(value, BufferValue) or _aligned(value):
            return args, kwargs
        value = self._store_aligned(value)
        if in_args:
            return (*args[:position], value, *args[position + 1:]), kwargs
        return args, {**kwargs, name: value}

    def _store_aligned(self, value: BufferValue) -> BufferValue:
        """``value`` copied into a buffer whose rows start every ``ALIGN`` elements (the last dim
        padded, as eager's ``pad_bias`` pads it), keeping broadcast dims broadcast (a bias
        expanded over the batch is stored once)."""
        shape, broadcast = tuple(value.shape), [st == 0 and n != 1 for n, st in zip(value.shape, value.stride)]
        stored_shape = tuple(1 if b else n for n, b in zip(shape, broadcast))
        stride, step = [0] * len(shape), 1
        for d in reversed(range(len(shape))):
            stride[d] = step
            step *= stored_shape[d]
            if d == len(shape) - 1:
                step = -(-step // ALIGN) * ALIGN
        buf = ComputedBuffer(self.new_name(), stored_shape, tuple(stride), value.dtype, value.device,
                             lambda index, rindex, value=value: value.load(index))
        self._add_computed(buf)
        stored = buf.value()
        return stored.restrided(shape, tuple(0 if b else st for b, st in zip(broadcast, stored.stride)), 0)

    def _extern_layout(self, node: Node, outputs: Any) -> Any:
        """A convolution's results in the region are expected channels-last (cuDNN/oneDNN return
        them so for channels-last operands; the wrapper copies any other layout into it)."""
        if not self._cl:
            return outputs
        if node in self._cl and isinstance(outputs, BufferValue):
            return outputs.restrided(outputs.shape, layout.channels_last_strides(tuple(outputs.shape)), 0)
        items = {u.args[1] for u in node.users if u in self._cl and u.target is operator.getitem}
        if isinstance(outputs, tuple) and items:
            return tuple(o.restrided(o.shape, layout.channels_last_strides(tuple(o.shape)), 0)
                         if i in items and isinstance(o, BufferValue) else o for i, o in enumerate(outputs))
        return outputs

    def _realize_everything_pending(self) -> None:
        # Lazy values still to be read must be computed before a mutation runs, as in eager.
        for node, value in list(self._env.items()):
            if isinstance(value, Pointwise) and any(u not in self._env for u in node.users):
                self._env[node] = self.realize(value)

    def _maybe_realize(self, node: Node, result: Any) -> Any:
        if isinstance(result, Pointwise) and len(node.users) > 1 and _expensive(result) and not _picked_apart(node):
            # a view (LLaMA's flattened normalised input to gate_proj and up_proj) is stored as
            # its base, in the base's shape: the kernel that computes the base can store it
            return self.realize_in_base_layout(result)
        if isinstance(result, Pointwise) and node.users and _scalar_math(result):
            # one value computed with costly math (an optimizer's pow(beta, step) and bias
            # corrections) on the CPU: stored once, not recomputed for every element of each
            # reader (a few cores, ~10 ns a pow). A GPU hides it behind the kernel's memory
            # traffic, and a stored scalar costs a pointer and a kernel before its readers.
            return self.realize(result)
        if isinstance(result, Pointwise) and node.users and node in self.graph.output_nodes:
            # stored anyway as an output: its readers load it (in the same kernel, the value
            # itself) instead of recomputing it from its inputs. An optimizer's new exp_avg is
            # read by the parameter's update; recomputed there from the old exp_avg, that old
            # value would be read after the new one overwrote it in place (inplace.py refuses).
            return self.realize(result)
        if any(tc_ir.is_mutating(u.target) for u in node.users if u.op == "call"):
            return tc_ir.map_structure(result, lambda v: self.realize(v) if isinstance(v, Pointwise) else v)
        return result


_NOT_DONE = object()


def _reduction_key(shape, dtype, device, body, rranges, reduction_type) -> tuple:
    """What a reduction computes: its value in kernel variables (structural: equal values are
    equal UOps), the ranges, dtype and device; the shape with size-1 dims dropped, so a keepdim
    reduction and one without are one."""
    index = iter(kir.xvars(len(shape)))
    value = body(tuple(sympy.Integer(0) if s == 1 else next(index) for s in shape), kir.rvars(len(rranges)))
    return (value, tuple(s for s in shape if s != 1), tuple(rranges), reduction_type, dtype, str(device))


def _spec_device(spec: Any) -> torch.device:
    found = [s.device for s in tc_ir.leaves(spec) if isinstance(s, TensorSpec)]
    return found[0] if found else torch.device("cpu")


# Vendor kernels that refuse an operand unless its memory is aligned: (position, name) of the
# operand whose strides but the last (and offset) must be multiples of ``ALIGN`` elements, with a
# unit last stride. The memory-efficient attention's bias, forward and backward: eager's
# composite SDPA pads an unaligned bias (``pad_bias``: a pad and a slice in the trace), and the
# lowering, which picks its own layouts, stored the slice in a dense [.., 17, 17] buffer the
# kernel refused ("attn_bias is not correctly aligned", BEiT's relative-position bias on CUDA).
ALIGN = 8  # elements, as eager pads: 16 bytes of bf16, 32 of float32
ALIGNED_OPERANDS = {
    torch.ops.aten._scaled_dot_product_efficient_attention.default: (3, "attn_bias"),
    torch.ops.aten._scaled_dot_product_efficient_attention_backward.default: (4, "attn_bias"),
    torch.ops.aten._efficient_attention_forward.default: (3, "bias"),
    torch.ops.aten._efficient_attention_backward.default: (4, "bias"),
}


def _aligned(value: BufferValue) -> bool:
    """Whether ``value`` is laid out as ``ALIGNED_OPERANDS`` asks; True over symbolic strides,
    which are left as they are."""
    shape, stride, offset = ([_static(n) for n in ns] for ns in (value.shape, value.stride, [value.offset]))
    if None in (*shape, *stride, *offset):
        return True
    if shape and shape[-1] != 1 and stride[-1] != 1:
        return False
    return all(st % ALIGN == 0 for st in stride[:-1]) and offset[0] % ALIGN == 0


def _static(n: Any) -> int | None:
    """``n`` as an int, or None over symbolic sizes."""
    if isinstance(n, int):
        return n
    return int(n) if isinstance(n, sympy.Basic) and n.is_Integer else None


def _nameable(target: Any) -> bool:
    try:
        tc_ir.target_name(target)
        return True
    except Exception:
        return False


def _dense(spec: TensorSpec) -> bool:
    """Whether spec's strides are a permutation of contiguous strides (safe to allocate; over
    symbolic sizes, provably so at every size)."""
    return is_dense(spec.shape, spec.stride)


def _stride_of(v: TensorValue) -> tuple:
    return v.stride if isinstance(v, BufferValue) else contiguous_strides(v.shape)


def _in_storage_order(name: str, shape: tuple, stride: tuple, dtype: Any, device: Any, body: Callable,
                      rranges: tuple = (), reduction_type: str | None = None, reduced_dims: tuple = ()) -> ComputedBuffer:
    """A buffer of ``body`` (a lazy value's, or a reduction's) over ``shape``, laid out with the
    permuted dense ``stride`` and computed over its dims in storage order (outermost first), so the
    kernel writes memory contiguously and fuses with others laid out alike; ``view`` is the value
    as the graph sees it."""
    order = sorted(range(len(stride)), key=lambda d: (-stride[d], d))

    def permuted(index, rindex):
        logical = [None] * len(order)
        for k, d in enumerate(order):
            logical[d] = index[k]
        return body(tuple(logical), rindex)

    stored = tuple(shape[d] for d in order)
    return ComputedBuffer(name, stored, contiguous_strides(stored), dtype, device, permuted, tuple(rranges),
                          reduction_type, tuple(order.index(d) for d in reduced_dims), view=(tuple(shape), stride))


def _expensive(value: Pointwise) -> bool:
    index = kir.xvars(value.ndim)
    ops = value.load(index).toposort()
    loads = sum(1 for u in ops if u.op is kir.Ops.LOAD)
    return len(ops) > 48 or loads > 4


def _picked_apart(node: Node) -> bool:
    """A stack or cat read only by selects of constant positions along its dim: each select reads
    its own piece (lowering/views.py), so storing the whole is a kernel nobody needs (an optimizer
    stacks its per-parameter step sizes and selects one per parameter)."""
    aten = torch.ops.aten
    if node.target not in (aten.stack.default, aten.cat.default) or not isinstance(node.spec, TensorSpec):
        return False
    ndim = len(node.spec.shape)
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not isinstance(dim, int) or not ndim:
        return False
    return all(u.target is aten.select.int and len(u.args) == 3 and isinstance(u.args[1], int)
               and isinstance(u.args[2], int) and u.args[1] % ndim == dim % ndim for u in node.users)


_CHEAP = {kir.Ops.LOAD, kir.Ops.CONST, kir.Ops.CAST, kir.Ops.INDEX, kir.Ops.ADD, kir.Ops.SUB, kir.Ops.MUL,
          kir.Ops.NEG, kir.Ops.WHERE, kir.Ops.MAX, kir.Ops.MIN, kir.Ops.LT, kir.Ops.LE, kir.Ops.GT, kir.Ops.GE,
          kir.Ops.EQ, kir.Ops.NE, kir.Ops.AND, kir.Ops.OR, kir.Ops.NOT}


def _scalar_math(value: Pointwise) -> bool:
    """A one-element value whose body does more than cheap arithmetic (a pow, a division...)."""
    if torch.device(value.device).type != "cpu" or not all(isinstance(s, int) and s == 1 for s in value.shape):
        return False
    return any(u.op not in _CHEAP for u in value.load(kir.xvars(value.ndim)).toposort())


def _extern_outputs(name: str, spec: Any) -> Any:
    if isinstance(spec, TensorSpec):
        return BufferValue(name, spec.shape, spec.stride, spec.dtype, spec.device)
    if isinstance(spec, tuple) and spec:
        return tuple(BufferValue(f"{name}_{i}", s.shape, s.stride, s.dtype, s.device)
                     if isinstance(s, TensorSpec) else RuntimeValue(f"{name}_{i}") for i, s in enumerate(spec))
    return None


def _same_shapes(result: Any, spec: Any) -> bool:
    if isinstance(spec, TensorSpec):
        return isinstance(result, TensorValue) and tuple(result.shape) == tuple(spec.shape)
    if isinstance(spec, (tuple, list)):
        return isinstance(result, (tuple, list)) and len(result) == len(spec) and all(
            _same_shapes(r, s) for r, s in zip(result, spec))
    return True


def _check(result: Any, spec: Any) -> None:
    """Raise when a lowering's result does not have the node's shapes and dtypes."""
    if isinstance(spec, TensorSpec):
        if not isinstance(result, TensorValue):
            raise TypeError(f"lowering returned {type(result).__name__} for a tensor")
        if tuple(result.shape) != tuple(spec.shape) or result.dtype != spec.dtype:
            raise TypeError(f"lowering gave {result.dtype}{list(result.shape)}, expected {spec}")
        result.load(kir.xvars(result.ndim))  # build the body now, so a broken one falls back here
        return
    if isinstance(spec, tuple):
        if not isinstance(result, tuple) or len(result) != len(spec):
            raise TypeError("lowering returned the wrong number of results")
        for r, s in zip(result, spec):
            _check(r, s)
