"""Channels-last (NHWC) layout for convolution graphs (option ``conv_layout``).

cuDNN's half and bfloat16 convolutions run NHWC kernels; an NCHW tensor is transposed in and
out around each call. Eager avoids that only when the user converts the model and input to
``channels_last``; torch.compile's inductor decides it per graph. Here, decided over the graph
before lowering: the 4-D values of the *conv region* are stored with channels-last strides
(``(H*W*C, 1, W*C, C)``), so every convolution (and ``convolution_backward``) gets NHWC operands
and returns NHWC results, and the batch-norm, activation and residual kernels around them read and
write NHWC, iterating in storage order (``GraphLowering.realize``), with no transposes between.

The region grows from the convolutions: their results (a backward's input and weight gradients),
the computed values they read (input, weight, a backward's incoming gradient), then every 4-D
elementwise/reduction call that reads a region value or feeds one of the same shape, to a fixed
point. Never in the region: values an output the caller sees may share storage with (outputs keep
eager's strides; ``free_outputs`` names outputs whose layout the caller leaves to us, e.g.
activations saved for a backward), views (they follow their base), values an ``as_strided`` or
another storage-reading op may see, and graphs with size symbols. Layout changes only strides,
never values: every extern result is still checked against the layout it was compiled for and
copied if a library returns another.
"""

from __future__ import annotations

from typing import Any

import torch

import tc_ir
from tc_ir import Node, TensorSpec
from tc_ir.aliasing import aliases, escaping

from .decompositions import EXTERN_PREFERRED
from .ir import is_dense

aten = torch.ops.aten

CONVS = {aten.convolution.default, aten._convolution.default}
CONV_BACKWARD = aten.convolution_backward.default
# Operand positions of a convolution whose layout picks cuDNN's/oneDNN's memory format.
_CONV_OPERANDS = {aten.convolution.default: (0, 1), aten._convolution.default: (0, 1), CONV_BACKWARD: (0, 1, 2)}
_HALF = (torch.float16, torch.bfloat16)
# Ops that read a tensor's storage, not its values by index: their operands keep eager's layout.
_STORAGE_READERS = ("as_strided", "view.dtype", "set_", "_reshape_alias", "unfold")


def mode(options: Any) -> str:
    return options.get("conv_layout", "auto")


def channels_last_strides(shape: tuple) -> tuple:
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def is_channels_last(shape: tuple, stride: tuple) -> bool:
    """Whether ``stride`` is the channels-last layout of a 4-D ``shape`` and differs from the
    contiguous one (size-1 dims make both the same storage order)."""
    if len(shape) != 4 or not _static(shape) or not _static(stride):
        return False
    return is_dense(shape, stride) and same_order(shape, stride, channels_last_strides(shape)) and \
        not same_order(shape, stride, tc_ir.spec.contiguous_strides(shape))


def same_order(shape: tuple, a: tuple, b: tuple) -> bool:
    """Whether strides ``a`` and ``b`` of ``shape`` agree on every dim of size > 1."""
    return all(x == y for x, y, n in zip(a, b, shape) if n != 1)


def enabled(graph: tc_ir.Graph, example_inputs: list, how: str) -> bool:
    """Whether to lay the graph out channels-last: ``"always"`` when it has a 2-D convolution
    (any device: tests run the NHWC path on the CPU), ``"auto"`` when it has one on CUDA in half
    precision or reading a channels-last input (cuDNN's NHWC kernels), never on the CPU."""
    if how == "never":
        return False
    convs = [n for n in graph.calls if n.target in CONVS or n.target is CONV_BACKWARD]
    convs = [n for n in convs if _is4d(n.args[_input_pos(n)]) and n.args[_input_pos(n)].spec.is_static]
    if not convs:
        return False
    if how == "always":
        return True
    operands = [n.args[_input_pos(n)].spec for n in convs]
    if not all(s.device.type == "cuda" for s in operands):
        return False
    cl_inputs = any(isinstance(t, torch.Tensor) and t.dim() == 4 and
                    is_channels_last(tuple(t.shape), tuple(t.stride())) for t in example_inputs)
    return cl_inputs or sum(s.dtype in _HALF for s in operands) * 2 > len(operands)


def _input_pos(node: Node) -> int:
    return 1 if node.target is CONV_BACKWARD else 0


def region(graph: tc_ir.Graph, free_outputs: tuple = ()) -> set[Node]:
    """The nodes whose values are stored channels-last (see the module docstring)."""
    leaves = [v for v in tc_ir.leaves(graph.outputs)]
    strict = [v for i, v in enumerate(leaves) if isinstance(v, Node) and i not in set(free_outputs)]
    fixed = escaping(strict) | _storage_read(graph)
    found: set[Node] = set()
    pending: list[Node] = []

    def add(node: Any) -> None:
        if isinstance(node, Node) and node not in found and node not in fixed and _layout_free(node):
            found.add(node)
            pending.append(node)

    for node in graph.calls:
        if node.target in CONVS:
            add(node)
            for i in _CONV_OPERANDS[node.target]:
                add(node.args[i])
        elif node.target is CONV_BACKWARD:
            for i in _CONV_OPERANDS[node.target]:
                add(node.args[i])
            # grad_input = result[0], grad_weight = result[1]: cuDNN returns both channels-last
            # for channels-last operands, so a weight gradient expected contiguous was copied
            # (a kernel and a host call) after every 3x3 convolution's backward
            for user in node.users:
                if user.target is _getitem() and user.args[1] in (0, 1):
                    add(user)
    while pending:
        node = pending.pop()
        if node.op == "call" and node.target is CONV_BACKWARD:
            continue
        for user in node.users:  # what reads a region value: follows it
            if _elementwise_like(user):
                add(user)
            elif _elementwise_like_items(user):  # max pooling's values and indices
                for item in user.users:
                    if item.target is _getitem():
                        add(item)
        for arg in tc_ir.leaves((node.args, node.kwargs)):  # what feeds one, of the same shape
            if isinstance(arg, Node) and _elementwise_like(arg) and _is4d(arg) and \
                    tuple(arg.spec.shape) == tuple(node.spec.shape):
                add(arg)
    return {n for n in found if n.op == "call"}


def _getitem():
    import operator

    return operator.getitem


def _is4d(node: Any) -> bool:
    return isinstance(node, Node) and isinstance(node.spec, TensorSpec) and node.spec.ndim == 4 \
        and node.spec.is_static


def _layout_free(node: Node) -> bool:
    """A computed 4-D value whose channels-last layout would be a different storage order."""
    if node.op != "call" or not _is4d(node) or not is_dense(node.spec.shape, node.spec.stride):
        return False
    shape = tuple(node.spec.shape)
    return is_dense(shape, channels_last_strides(shape)) and \
        not same_order(shape, channels_last_strides(shape), tc_ir.spec.contiguous_strides(shape))


def _elementwise_like(node: Node) -> bool:
    """A call that computes its value element by element (pointwise ops, reductions): its layout
    is ours to choose. Views, mutations, extern-preferred ops and non-ATen calls are not."""
    target = node.target
    if node.op != "call" or not isinstance(target, torch._ops.OpOverload) or not _is4d(node):
        return False
    if target in EXTERN_PREFERRED or aliases(node) or tc_ir.is_mutating(target):
        return False
    return True


def _elementwise_like_items(node: Node) -> bool:
    """A call like ``_elementwise_like`` whose result is a tuple of 4-D tensors
    (``max_pool2d_with_indices``): its items' layouts are ours to choose, each on its own."""
    target = node.target
    if node.op != "call" or not isinstance(target, torch._ops.OpOverload) or not isinstance(node.spec, tuple):
        return False
    if target in EXTERN_PREFERRED or aliases(node) or tc_ir.is_mutating(target):
        return False
    return all(isinstance(s, TensorSpec) and s.ndim == 4 and s.is_static for s in node.spec)


def _storage_read(graph: tc_ir.Graph) -> set[Node]:
    """Values a storage-reading op (``as_strided``...) may see, through views: their layout is
    observable, so it stays eager's."""
    roots = [a for n in graph.calls if _reads_storage(n.target)
             for a in tc_ir.leaves((n.args, n.kwargs)) if isinstance(a, Node)]
    roots += [a for n in graph.calls if not isinstance(n.target, torch._ops.OpOverload)
              and n.target is not _getitem() for a in tc_ir.leaves((n.args, n.kwargs)) if isinstance(a, Node)]
    return escaping(roots)


def _reads_storage(target: Any) -> bool:
    name = str(getattr(target, "_schema", "")).split("(")[0]
    return any(name.split("::")[-1].startswith(s) for s in _STORAGE_READERS)


def _static(values) -> bool:
    return all(isinstance(v, int) for v in values)


def copied_inputs(graph: tc_ir.Graph, found: set[Node]) -> set[Node]:
    """Graph inputs that a convolution reads as its activation (input, or a backward's incoming
    gradient and input): stored once channels-last before the first call, if the region exists."""
    if not found:
        return set()
    positions = {aten.convolution.default: (0,), aten._convolution.default: (0,), CONV_BACKWARD: (0, 1)}
    inputs = set()
    for node in graph.calls:
        for i in positions.get(node.target, ()):
            arg = node.args[i]
            if isinstance(arg, Node) and arg.op == "input" and _is4d(arg) and _layout_free_shape(arg):
                inputs.add(arg)
    return inputs


def _layout_free_shape(node: Node) -> bool:
    shape = tuple(node.spec.shape)
    return not same_order(shape, channels_last_strides(shape), tc_ir.spec.contiguous_strides(shape))
