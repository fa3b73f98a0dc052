"""Decompositions: the table handed to the autograd tracer, and lowering-time decomposition.

:func:`decompositions` is what the umbrella passes to tc_autograd: ops whose parts our
lowerings fuse well (gelu, silu, softmax backward, layer norm backward...) are decomposed into
pointwise ops and reductions. At lowering time, an op with neither a lowering nor a preference
for an extern call is decomposed with torch's table by :func:`trace_decomposition`, which
records the decomposition's ATen calls on meta tensors into a small tc_ir graph.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch._decomp
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

import tc_ir
from tc_ir.spec import SizeSource

aten = torch.ops.aten

# Ops that are better as a call into torch than as generated code (vendor libraries).
EXTERN_PREFERRED = {
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.addbmm.default,
    aten.convolution.default, aten.convolution_backward.default, aten._convolution.default,
    aten.scaled_dot_product_attention.default, aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_cudnn_attention_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default, aten.mv.default, aten.dot.default, aten.matmul.default,
    aten.cumsum.default, aten.cumprod.default, aten.sort.default, aten.topk.default, aten.nonzero.default,
    aten.addmv.default, aten.linear.default,
    # torch's decomposition broadcasts a source that eager's kernel rejects (index_add of a (2,)
    # source into rows of a (3, 2) tensor returned a value): the kernel is also what checks indices
    aten.index_add.default,
}

# What the autograd tracer should decompose before tc_inductor sees the graph.
_FOR_TRACER = [
    "gelu", "gelu_backward", "silu", "silu_backward", "mish", "hardswish", "hardsigmoid",
    "hardsigmoid_backward", "hardswish_backward", "softplus", "softplus_backward", "elu_backward",
    "leaky_relu_backward", "hardtanh_backward", "sigmoid_backward", "tanh_backward",
    "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm_backward",
    "native_group_norm", "native_group_norm_backward", "native_batch_norm_backward",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit", "native_batch_norm", "nll_loss_forward", "nll_loss_backward",
    "nll_loss2d_forward", "nll_loss2d_backward", "mse_loss", "mse_loss_backward", "binary_cross_entropy",
    "binary_cross_entropy_backward", "huber_loss", "huber_loss_backward", "smooth_l1_loss",
    "smooth_l1_loss_backward", "logsumexp", "linalg_vector_norm", "norm", "embedding_dense_backward",
    "select_backward", "slice_backward", "index_select_backward", "diagonal_backward", "expand_backward",
    "rsub", "addcmul", "addcdiv", "lerp", "clamp_min", "clamp_max", "masked_fill", "threshold_backward",
    "var_mean", "std_mean", "native_dropout_backward", "log_sigmoid_forward", "log_sigmoid_backward", "glu",
    "glu_backward", "upsample_nearest2d", "upsample_bilinear2d", "_adaptive_avg_pool2d", "avg_pool2d",
    "col2im", "im2col", "reflection_pad2d", "replication_pad2d", "rms_norm", "trace", "baddbmm", "addmv",
    "xlogy", "logit", "frac", "sgn", "special_entr",
]


def decompositions() -> dict[Any, Callable]:
    """The decomposition table tc_inductor prefers its input graphs to be traced with."""
    packets = [getattr(aten, name) for name in _FOR_TRACER if hasattr(aten, name)]
    return _with_fixes(torch._decomp.get_decompositions(packets))


@functools.cache
def _lowering_table() -> dict[Any, Callable]:
    table = dict(torch._decomp.decomposition_table)
    table.update(torch._decomp.core_aten_decompositions())
    return _with_fixes(table)


def _with_fixes(table: dict) -> dict:
    """Torch's entries, with wrappers around those some supported torch versions get wrong."""
    for op, fix in _FIXES.items():
        if op in table:
            table[op] = functools.partial(fix, table[op])
    return table


def _vector_norm(decomposition: Callable, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    # torch <= 2.12's reference compares negative dims with non-negative ones on its
    # "all reduced dims have size 1" path, so norm(x[5, 1], dim=-1) came out [5, 1], not [5].
    if dim is not None and not isinstance(dim, int):
        dim = [d % x.ndim if x.ndim else d for d in dim]
    elif isinstance(dim, int):
        dim = [dim % x.ndim if x.ndim else dim]
    return decomposition(x, ord, dim, keepdim, dtype=dtype)


_FIXES = {aten.linalg_vector_norm.default: _vector_norm}


def corrected_spec(target: Any, spec: Any, args: tuple, kwargs: dict) -> Any:
    """``spec``, or the result spec the device gives where some torch versions' meta kernels
    disagree with it (graphs built on those versions carry the meta kernel's answer)."""
    fix = _SPEC_FIXES.get(target)
    return spec if fix is None else fix(spec, *args, **kwargs)


def _vector_norm_spec(spec: Any, x, ord=2, dim=None, keepdim=False, *, dtype=None) -> Any:
    # torch <= 2.12's meta kernel is the reference above: norm(x[5, 1], dim=-1) is [5, 1] on
    # meta and [5] on the device, so the graph's spec is wrong there.
    ndim = len(getattr(x, "shape", ()))
    if not isinstance(spec, tc_ir.TensorSpec) or dim is None or keepdim or not ndim:
        return spec
    dims = {d % ndim for d in ([dim] if isinstance(dim, int) else dim)}
    shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
    if not dims or shape == tuple(spec.shape):
        return spec
    return tc_ir.TensorSpec(shape, spec.dtype, spec.device)


_SPEC_FIXES = {aten.linalg_vector_norm.default: _vector_norm_spec}


# Torch decompositions that give other answers than eager's kernels, never used: max pooling's
# (torch 2.13: a gather and ``max.dim``) returns the first NaN's index where eager returns the
# last one's, a window of -inf its first element, not eager's, and contiguous results for
# channels-last inputs. Windows too large for lowering/pooling.py run eager's kernel instead.
WRONG_DECOMPOSITIONS = {aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default}


def find_decomposition(target: Any) -> Callable | None:
    if target in EXTERN_PREFERRED or target in WRONG_DECOMPOSITIONS or not isinstance(target, torch._ops.OpOverload):
        return None
    return _lowering_table().get(target)


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: tc_ir.Graph, nodes: dict[int, Any], device: torch.device, sizes: Any = None):
        super().__init__()
        self.graph, self.nodes, self.device, self.sizes = graph, nodes, device, sizes

    def _node_of(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if id(value) not in self.nodes:
                raise _Untraceable("a tensor from outside the decomposition")
            return self.nodes[id(value)][0]
        if isinstance(value, torch.device) and value.type == "meta":
            return self.device  # recorded calls run on the real device
        if isinstance(value, torch.SymInt) and self.sizes is not None:
            return self.sizes.ours(value)
        return value

    def _spec(self, value: Any) -> Any:
        spec = tc_ir.spec_of(value)
        if self.sizes is not None:
            spec = tuple(map(self.sizes.spec, spec)) if isinstance(spec, tuple) else self.sizes.spec(spec)
        if isinstance(spec, tc_ir.TensorSpec):
            return spec.with_(device=self.device)
        if isinstance(spec, tuple):
            return tuple(s.with_(device=self.device) if isinstance(s, tc_ir.TensorSpec) else s for s in spec)
        return spec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise _Untraceable("data-dependent value")
        if func._schema.is_mutable:
            # an in-place write (diagonal_scatter's ``out.diagonal().copy_(src)``) through a view of
            # an intermediate: the recorded graph would write a copy and lose it; extern instead
            raise _Untraceable(f"the decomposition writes in place ({func})")
        out = func(*args, **kwargs)
        if func is torch.ops.prim.device.default:  # a device, which the recorded calls take as self.device
            return out
        node_args, node_kwargs = tree_map(self._node_of, (args, kwargs))
        node = self.graph.call(func, *node_args, kwargs=node_kwargs, spec=self._spec(out))
        if isinstance(out, torch.Tensor):
            self.nodes[id(out)] = (node, out)
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    import operator

                    self.nodes[id(item)] = (self.graph.call(operator.getitem, node, i, spec=self._spec(item)), item)
        return out


class _Untraceable(Exception):
    pass


def trace_decomposition(target: Any, args: tuple, kwargs: dict, device: torch.device) -> tc_ir.Graph | None:
    """Record ``target``'s decomposition as a tc_ir graph whose inputs are the tensor args.

    ``args``/``kwargs`` hold ``tc_ir.TensorSpec`` where the call has tensors, which live on
    ``device``; the decomposition runs on meta tensors, or over size symbols on fake tensors of
    a ``ShapeEnv`` (:class:`_Sizes`: every size and argument recorded as an expression over the
    graph's symbols). Returns None when the decomposition cannot be recorded (data-dependent
    values, or a decomposition that branched on a symbolic size: it would hold for some sizes only).
    """
    fn = find_decomposition(target)
    if fn is None:
        return None
    graph = tc_ir.Graph(f"decomp_{target}")
    nodes: dict[int, Any] = {}
    counter = iter(range(1 << 30))
    sizes = _Sizes() if _has_symbols((args, kwargs)) else None

    def to_meta(value: Any) -> Any:
        if isinstance(value, tc_ir.TensorSpec):
            t = value.meta_tensor() if sizes is None else sizes.tensor(value)
            nodes[id(t)] = (graph.input(f"a{next(counter)}", value), t)
            return t
        if sizes is not None and isinstance(value, sympy.Expr) and not value.is_Number:
            return sizes.symint(value)
        return value

    try:
        # over symbols, torch's Python dispatcher (as Dynamo traces): some C++ composites read
        # concrete sizes of SymInt-sized tensors and fail (torch 2.11's matmul calls numel())
        with sizes.mode if sizes is not None else contextlib.nullcontext(), \
                enable_python_dispatcher() if sizes is not None else contextlib.nullcontext():
            meta_args, meta_kwargs = tree_map(to_meta, (args, kwargs))
            meta_kwargs = {k: (torch.device("meta") if k == "device" else v) for k, v in meta_kwargs.items()}
            with _Recorder(graph, nodes, torch.device(device), sizes) as recorder:
                out = fn(*meta_args, **meta_kwargs)
                graph.output(tree_map(recorder._node_of, out))
    except Exception:
        return None
    if sizes is not None and not sizes.unconditional():
        return None
    return graph


def _has_symbols(tree: Any) -> bool:
    return any((isinstance(v, tc_ir.TensorSpec) and not v.is_static)
               or (isinstance(v, sympy.Expr) and not v.is_Number) for v in tc_ir.leaves(tree))


_MAX_SIZE = 2**48


class _Sizes:
    """Fake tensors over a ``ShapeEnv`` for a decomposition traced over size symbols: one
    ShapeEnv symbol per graph symbol (each >= 2, torch's range for a dynamic size, as ours);
    hints are distinct primes, so no two symbols are taken for one (duck sizing). Any guard the
    ShapeEnv records means the decomposition chose a path by the hint: :meth:`unconditional`
    is then False and the caller declines (an extern call, right at every size)."""

    def __init__(self):
        self.env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.env, allow_non_fake_inputs=True)
        self.to_env: dict[sympy.Symbol, sympy.Expr] = {}
        self.to_tc: dict[sympy.Symbol, sympy.Symbol] = {}

    def symint(self, expr: Any) -> Any:
        expr = sympy.sympify(expr)
        for symbol in sorted(expr.free_symbols, key=lambda s: s.name):
            if symbol not in self.to_env:
                hint = int(sympy.prime(101 + len(self.to_env)))
                theirs = self.env.create_symbol(hint, SizeSource(symbol.name), dynamic_dim=DimDynamic.DYNAMIC)
                # a size is below 2**48 (no memory holds more), so clamps against int64's max
                # (slice ends) are decided without a guard
                self.env.constrain_symbol_range(theirs, compiler_min=2, compiler_max=_MAX_SIZE)
                self.to_env[symbol], self.to_tc[theirs] = theirs, symbol
        theirs = expr.xreplace(self.to_env)
        if theirs.is_Integer:
            return int(theirs)
        return self.env.create_symintnode(theirs, hint=int(theirs.xreplace(self.env.backed_var_to_val)))

    def tensor(self, spec: tc_ir.TensorSpec) -> torch.Tensor:
        return torch.empty_strided([self.symint(d) for d in spec.shape], [self.symint(d) for d in spec.stride],
                                   dtype=spec.dtype, device="meta")

    def ours(self, value: Any) -> Any:
        """A ShapeEnv size (SymInt or int) as an int or an expression over the graph's symbols."""
        if isinstance(value, torch.SymInt):
            value = value.node.expr
        if isinstance(value, sympy.Expr):
            expr = tc_ir.spec.plain_size_expr(value).xreplace(self.to_tc)
            return int(expr) if expr.is_Integer else expr
        return value

    def spec(self, spec: Any) -> Any:
        if isinstance(spec, tc_ir.TensorSpec):
            return tc_ir.TensorSpec(tuple(self.ours(d) for d in spec.shape), spec.dtype, spec.device,
                                    tuple(self.ours(d) for d in spec.stride))
        return spec

    def unconditional(self) -> bool:
        return not self.env.guards and not self.env.replacements and not self.env.divisible
