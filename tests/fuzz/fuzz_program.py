"""Random straight-line tensor programs, built as real Python source.

A :class:`Program` is a list of input specs (shape, dtype, memory layout) and a list of statements
``vN = <expression>`` over the inputs and earlier values: pointwise ops, reductions, views,
in-place ops (on inputs, views of inputs and intermediates), matmul, casts and ``where``. Its
source is a real ``def program(x0, x1, ...):`` that is exec'd, so capture sees real bytecode.

Generation is driven by a *chooser* (``choose(options) -> one of them``): a seeded
``random.Random`` for the long runs (a program is reproduced by its seed), or Hypothesis draws
for the test slice (so Hypothesis shrinks failures). Each candidate statement is run eagerly on
small real tensors as it is drawn; statements eager refuses are skipped, so programs are
almost always valid eager code.
"""

from __future__ import annotations

import linecache
import os
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

Chooser = Callable[[Sequence[Any]], Any]

FLOATS = (torch.float32, torch.float64, torch.bfloat16)
DTYPES = (torch.float32, torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool)
DIMS = (1, 2, 2, 3, 3, 3, 4, 4, 5, 5) * 2 + (0,)  # a zero-size dim in ~5% of dims
LAYOUTS = ("contiguous", "contiguous", "transposed", "step", "offset", "expanded")
SCALARS = ("2", "-1.5", "0.5", "3")


@attrs.frozen
class InputSpec:
    """One input: its shape and dtype, and the layout it arrives in (strides over a base)."""

    shape: tuple
    dtype: torch.dtype
    layout: str
    source: int | None = None  # carved out of this earlier input (so the two share memory)

    def base_shape(self) -> tuple:
        """The contiguous tensor the input is carved out of."""
        s = list(self.shape)
        if self.layout == "transposed":
            return tuple(s[:-2] + [s[-1], s[-2]])
        if self.layout == "step":
            return tuple(s[:-1] + [2 * s[-1]])
        if self.layout == "offset":
            return tuple([s[0] + 2] + s[1:])
        if self.layout == "expanded":
            return tuple(1 if i == _expanded_dim(self.shape) else n for i, n in enumerate(s))
        return tuple(s)

    def carve(self, base: torch.Tensor) -> torch.Tensor:
        """The input as a view of ``base`` with this layout."""
        if self.layout == "transposed":
            return base.transpose(-1, -2)
        if self.layout == "step":
            return base[..., ::2]
        if self.layout == "offset":
            return base.narrow(0, 1, self.shape[0])
        if self.layout == "expanded":
            return base.expand(self.shape)
        if self.layout == "row":
            return base[0]
        return base

    def text(self) -> str:
        shared = "" if self.source is None else f" of x{self.source}"
        return f"{list(self.shape)} {str(self.dtype).removeprefix('torch.')} {self.layout}{shared}"


def _expanded_dim(shape: tuple) -> int:
    return next((i for i, n in enumerate(shape) if n > 1), -1)


def _layouts_for(shape: tuple) -> list[str]:
    ok = ["contiguous"]
    if len(shape) >= 2:
        ok.append("transposed")
    if len(shape) >= 1:
        ok += ["step", "offset"]
    if _expanded_dim(shape) >= 0:
        ok.append("expanded")
    return [layout for layout in LAYOUTS if layout in ok]


@attrs.define
class Program:
    """A straight-line program: inputs, statements, outputs, and whether gradients are checked."""

    inputs: list[InputSpec]
    lines: list[str]
    outputs: list[str]
    grad: bool
    seed: int | None = None

    def source(self) -> str:
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        head = [f"# inputs: {'; '.join(s.text() for s in self.inputs)}; grad={self.grad}",
                f"def program({args}):"]
        body = [f"    {line}" for line in self.lines] + [f"    return ({''.join(o + ', ' for o in self.outputs)})"]
        return "\n".join(head + body) + "\n"

    def function(self) -> Callable:
        """The program as a real Python function (its source registered for tracebacks)."""
        source = self.source()
        filename = f"<fuzz program {abs(hash(source)):x}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        return namespace["program"]


# ---- the statement vocabulary ---------------------------------------------------------------------
# Each rule: (name, operand kinds, template). Kinds: "f" float tensor, "n" numeric (not bool),
# "b" bool, "t" any tensor. Templates use {a}, {b}, {c} for operands and {d}/{d2} for dims.
UNARY = [
    ("sin", "f", "torch.sin({a})"), ("exp", "f", "torch.exp({a})"), ("tanh", "f", "torch.tanh({a})"),
    ("sigmoid", "f", "torch.sigmoid({a})"), ("relu", "n", "torch.relu({a})"), ("abs", "n", "{a}.abs()"),
    ("neg", "n", "-{a}"), ("sqrt", "f", "torch.sqrt({a}.abs() + 1)"), ("gelu", "f", "torch.nn.functional.gelu({a})"),
    ("scale", "n", "{a} * {s}"), ("shift", "n", "{a} + {s}"), ("clamp", "n", "torch.clamp({a}, -1, 1)"),
    ("not", "b", "~{a}"), ("gt0", "n", "{a} > 0"), ("softmax", "f", "torch.softmax({a}, {d})"),
    ("log_softmax", "f", "torch.log_softmax({a}, {d})"),
]
BINARY = [
    ("add", "nn", "{a} + {b}"), ("sub", "nn", "{a} - {b}"), ("mul", "nn", "{a} * {b}"),
    ("div", "ff", "{a} / ({b}.abs() + 0.5)"), ("maximum", "nn", "torch.maximum({a}, {b})"),
    ("minimum", "nn", "torch.minimum({a}, {b})"), ("lt", "nn", "{a} < {b}"), ("and", "bb", "{a} & {b}"),
    ("or", "bb", "{a} | {b}"), ("matmul", "ff", "{a} @ {b}"),
]
TERNARY = [("where", "btt", "torch.where({a}, {b}, {c})")]
REDUCE = [
    ("sum", "n", "{a}.sum({d}, keepdim={k})"), ("sum_all", "n", "{a}.sum()"), ("mean", "f", "{a}.mean({d})"),
    ("amax", "n", "{a}.amax({d}, keepdim={k})"), ("argmax", "n", "{a}.argmax({d})"), ("any", "b", "{a}.any({d})"),
    ("var", "f", "{a}.var({d})"),
]
VIEW = [
    ("t", "t", "{a}.t()"), ("transpose", "t", "{a}.transpose({d}, {d2})"), ("permute", "t", "{a}.permute({perm})"),
    ("step", "t", "{a}[::2]"), ("step_last", "t", "{a}[..., 1::2]"), ("narrow", "t", "{a}.narrow({d}, {i}, 1)"),
    ("select", "t", "{a}.select({d}, {i})"), ("unsqueeze", "t", "{a}.unsqueeze({d})"),
    ("expand", "t", "{a}.expand({expand})"), ("flatten", "t", "{a}.flatten()"), ("view", "t", "{a}.view(-1)"),
    ("reshape", "t", "{a}.reshape({reshape})"), ("diagonal", "t", "{a}.diagonal()"),
]
CAST = [
    ("float", "t", "{a}.float()"), ("double", "t", "{a}.double()"), ("bf16", "t", "{a}.bfloat16()"),
    ("long", "f", "torch.nan_to_num({a}).clamp(-100, 100).long()"), ("long_b", "b", "{a}.long()"),
    ("bool", "n", "{a} != 0"),
]
INPLACE = [
    ("add_", "nn", "{a}.add_({b})"), ("mul_", "nn", "{a}.mul_({b})"), ("sub_", "nn", "{a}.sub_({b}, alpha=2)"),
    ("clamp_", "n", "{a}.clamp_(min=0)"), ("fill_", "n", "{a}.fill_({s})"), ("zero_", "n", "{a}.zero_()"),
    ("relu_", "f", "{a}.relu_()"), ("sin_", "f", "{a}.sin_()"), ("copy_", "tt", "{a}.copy_({b})"),
    ("setitem", "nn", "{a}[0] = {b}"), ("masked_fill_", "nb", "{a}.masked_fill_({b}, {s})"),
    ("lerp_", "ff", "{a}.lerp_({b}, 0.25)"), ("addcmul_", "fff", "{a}.addcmul_({b}, {c}, value=0.5)"),
    ("foreach_mul_", "ff", "torch._foreach_mul_([{a}, {b}], {s})"),
    ("foreach_add_", "fff", "torch._foreach_add_([{a}, {b}], [{c}, {c}], alpha=0.5)"),
    ("foreach_lerp_", "fff", "torch._foreach_lerp_([{a}], [{b}], 0.5)"),
]
GROUPS = [UNARY, UNARY, BINARY, BINARY, TERNARY, REDUCE, VIEW, VIEW, CAST, INPLACE, INPLACE]


def _fits(kind: str, t: torch.Tensor) -> bool:
    if kind == "f":
        return t.dtype.is_floating_point
    if kind == "n":
        return t.dtype != torch.bool
    if kind == "b":
        return t.dtype == torch.bool
    return True


class Builder:
    """Draws a program statement by statement, checking each on small real tensors in eager."""

    def __init__(self, choose: Chooser, grad: bool, max_inputs: int = 3, max_lines: int = 10):
        self.choose, self.grad = choose, grad
        self.max_inputs, self.max_lines = max_inputs, max_lines
        self.env: dict[str, torch.Tensor] = {}
        self.lines: list[str] = []

    def build(self, seed: int | None = None) -> Program:
        inputs: list[InputSpec] = []
        for _ in range(self.choose(range(1, self.max_inputs + 1))):
            inputs.append(self.input_spec(inputs))
        bases = [_example(spec.base_shape(), spec.dtype) for spec in inputs]
        for i, value in enumerate(carve_inputs(inputs, bases)):
            self.env[f"x{i}"] = value
        for _ in range(self.choose(range(3, self.max_lines + 1))):
            self.statement()
        return Program(inputs, self.lines, self.pick_outputs(), self.grad, seed)

    def input_spec(self, specs: list[InputSpec]) -> InputSpec:
        if specs and self.choose(range(6)) == 0:
            return self.shared_spec(specs)
        rank = self.choose((0, 1, 2, 2, 3, 3))
        shape = tuple(self.choose(DIMS) for _ in range(rank))
        dtype = self.choose(FLOATS if self.grad and not self.env else DTYPES)
        spec = InputSpec(shape, dtype, self.choose(_layouts_for(shape)))
        self.env[f"x{len(self.env)}"] = torch.empty(0)  # reserve the name
        return spec

    def shared_spec(self, specs: list[InputSpec]) -> InputSpec:
        """An input that is a view of an earlier one: the same tensor, its transpose or its first row."""
        j = self.choose(range(len(specs)))
        shape = specs[j].shape
        ways = ["contiguous"] + (["transposed"] if len(shape) >= 2 else []) + (["row"] if shape and shape[0] else [])
        layout = self.choose(ways)
        shape = {"contiguous": shape, "row": shape[1:]}.get(layout, shape[:-2] + shape[-2:][::-1])
        self.env[f"x{len(self.env)}"] = torch.empty(0)
        return InputSpec(tuple(shape), specs[j].dtype, layout, j)

    def operands(self, kinds: str) -> list[str] | None:
        names = list(self.env)
        picked = []
        for kind in kinds:
            fitting = [n for n in names if _fits(kind, self.env[n])]
            if not fitting:
                return None
            # Prefer recent values and shapes that broadcast with the first operand.
            if picked:
                first = self.env[picked[0]].shape
                same = [n for n in fitting if _broadcasts(first, self.env[n].shape)]
                fitting = same or fitting
            picked.append(self.choose(fitting[-3:] if self.choose((True, True, False)) else fitting))
        return picked

    def statement(self) -> None:
        name, kinds, template = self.choose(self.choose(GROUPS))
        ops = self.operands(kinds)
        if ops is None:
            return
        a = self.env[ops[0]]
        if (self.grad or DEVICE.type == "cuda") and name.startswith("foreach") \
                and not _distinct_memory([self.env[n] for n in ops]):
            # eager's autograd applies a repeated tensor's op once (its value twice); on CUDA its
            # multi-tensor kernel reads every list item before writing any, so a tensor listed
            # twice gets the op once (once per item on the CPU): no defined result to match
            return
        if name in INPLACE_READS and _reads_what_it_writes(name, [self.env[n] for n in ops]):
            return  # eager's answer depends on its loop order: no defined result to match
        fields = dict(zip("abc", ops), s=self.choose(SCALARS), k=self.choose((False, True)), **self.dims(a))
        expr = template.format(**fields)
        target = f"v{len(self.lines)}"
        statement_only = (expr.startswith(tuple(ops)) and "] =" in expr) or expr.startswith("torch._foreach")
        line = expr if statement_only else f"{target} = {expr}"
        self.try_line(line, target)

    def dims(self, a: torch.Tensor) -> dict:
        rank = a.dim()
        d = self.choose(range(-rank, rank)) if rank else 0
        d2 = self.choose(range(-rank, rank)) if rank else 0
        perm = list(range(rank))
        perm = perm[::-1] if self.choose((True, False)) else perm[1:] + perm[:1]
        i = self.choose((0, 1, -1))
        expand = [self.choose((n, 3)) if n == 1 else n for n in a.shape]
        if self.choose((True, False)):
            expand = [2] + expand
        reshape = [-1, a.shape[-1]] if rank and a.shape[-1] else [-1]
        return dict(d=d, d2=d2, perm=tuple(perm), i=i, expand=expand, reshape=reshape)

    def try_line(self, line: str, target: str) -> None:
        scope = dict(self.env, torch=torch)
        try:
            exec(line, scope)
        except Exception:  # eager refuses it: not a valid statement, so not part of the program
            return
        self.lines.append(line)
        for name, value in scope.items():
            if name != "torch" and isinstance(value, torch.Tensor):
                self.env[name] = value
        if target not in scope:  # a statement writing through an index binds nothing
            return
        if not isinstance(scope[target], torch.Tensor):
            self.lines.pop()

    def pick_outputs(self) -> list[str]:
        """The last value, and some that nothing reads (so little of the program is dead code)."""
        names = list(self.env)
        text = "\n".join(self.lines)
        unread = [n for n in names[:-1] if text.count(n) <= (0 if n.startswith("x") else 1)]
        outs = [names[-1]]
        for _ in range(self.choose((0, 1, 2, 2))):
            outs.append(self.choose(unread or names))
        return outs


# For each in-place rule: (written operand, operand it reads) pairs, as indices into its operands.
INPLACE_READS = {
    "add_": [(0, 1)], "mul_": [(0, 1)], "sub_": [(0, 1)], "copy_": [(0, 1)], "setitem": [(0, 1)],
    "masked_fill_": [(0, 1)], "lerp_": [(0, 1)], "addcmul_": [(0, 1), (0, 2)],
    "foreach_add_": [(0, 2), (1, 2)], "foreach_lerp_": [(0, 1)],
}


def _reads_what_it_writes(name: str, tensors: list[torch.Tensor]) -> bool:
    """Whether an in-place op reads, through another view, memory it writes (e.g.
    ``x.add_(x.diagonal())``, ``x.sub_(x.narrow(0, 1, 1))``): eager then reads some elements
    before and some after they are written, in the order its loops happen to run, so the result
    is not defined by the program. Reading the written view itself (``x.add_(x)``) is defined."""
    for w, r in INPLACE_READS[name]:
        dest, src = tensors[w], tensors[r]
        if name == "setitem":
            if dest.dim() == 0 or dest.shape[0] == 0:
                continue
            dest = dest[0]
        if dest.untyped_storage().data_ptr() != src.untyped_storage().data_ptr():
            continue
        same_view = (dest.shape == src.shape and dest.stride() == src.stride()
                     and dest.storage_offset() == src.storage_offset())
        if not same_view and _elements(dest) & _elements(src):
            return True
    return False


def _elements(t: torch.Tensor) -> set[int]:
    """The storage elements a view covers."""
    n = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    return set(torch.arange(n).as_strided(t.shape, t.stride(), t.storage_offset()).flatten().tolist())


def _distinct_memory(tensors: list[torch.Tensor]) -> bool:
    ptrs = [t.untyped_storage().data_ptr() for t in tensors]
    return len(set(ptrs)) == len(ptrs)


def _broadcasts(a: torch.Size, b: torch.Size) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


def _example(shape: tuple, dtype: torch.dtype, gen: torch.Generator | None = None) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype == torch.int64:
        return torch.randint(-3, 4, shape, generator=gen)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def carve_inputs(specs: Sequence[InputSpec], bases: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The program's inputs: each carved out of its base, or out of an earlier input it shares."""
    inputs: list[torch.Tensor] = []
    for spec, base in zip(specs, bases):
        inputs.append(spec.carve(base if spec.source is None else inputs[spec.source]))
    return inputs


def random_program(seed: int, grad: bool | None = None) -> Program:
    """The program of ``seed`` (gradient mode for odd seeds unless ``grad`` says)."""
    rng = random.Random(seed)
    grad = bool(seed % 2) if grad is None else grad
    torch.manual_seed(seed)  # the eager checks while building draw example values
    return Builder(lambda options: rng.choice(list(options)), grad).build(seed)


# Where the programs run: "cpu" (C++ kernels; CI) or "cuda" on a GPU host (Triton kernels),
# with every pointwise kernel at one config when TC_TEST_POINTWISE_CONFIG says (forced_configs.py).
DEVICE = torch.device(os.environ.get("TC_FUZZ_DEVICE", "cpu"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from forced_configs import force_configs  # noqa: E402

force_configs()


def example_inputs(program: Program, seed: int) -> list[torch.Tensor]:
    """Fresh contiguous bases for the program's inputs (carve them with ``InputSpec.carve``),
    made on the CPU from ``seed`` and moved to ``DEVICE``."""
    gen = torch.Generator().manual_seed(seed)
    return [_example(spec.base_shape() if spec.source is None else (0,), spec.dtype, gen).to(DEVICE)
            for spec in program.inputs]
