"""The text form of graphs: readable, stable, versioned, and parsed back to an equal graph.

::

    # tc_ir v1
    graph main:
      %x: f32[1024] cpu = input
      %w: f32[16, 8] cpu grad = param 'layer.weight'
      %relu: f32[1024] cpu = aten.relu.default(%x)
      %mul: f32[1024] cpu = aten.mul.Tensor(%relu, 2.0)
      return (%mul, {'w': %w})

    data 'layer.weight' f32[16, 8] cpu = b64'AAAA...'

Each line of a graph block defines one node: ``%name: spec = input``, ``= param 'key'``,
``= constant 'key'`` or ``= target(args)``. Args and the return value use Python literal
syntax plus ``%node``, ``@subgraph``, ``torch.<dtype>``, ``device('cuda:0')`` and ``sym('s0*2')``.
Sub-graphs follow the main graph as blocks of their own. Held tensors are stored at the end as
base64 of their bytes, so the text alone rebuilds the graph.
"""

from __future__ import annotations

import ast
import base64
import ctypes
import functools
import math
import operator
import re
from typing import Any

import sympy
import torch

from .graph import Graph
from .node import Node, map_structure
from .spec import DTYPES_BY_NAME, SCALAR_TYPES, ScalarSpec, SizeFloat, TensorSpec, spec_of, sym
from .targets import display_name, resolve_target, target_name

VERSION = 1
_HEADER = f"# tc_ir v{VERSION}"


class ParseError(ValueError):
    """Text that is not a well-formed tc_ir graph; the message names the line."""


# ---- printing ---------------------------------------------------------------------------------
def format_graph(graph: Graph, data: bool = True, header: str | None = None, name: str | None = None,
                 strict: bool = False) -> str:
    """The text form. Never raises for a target: one without an exact name prints as ``<name>``
    (readable, but such text cannot be parsed back). ``strict=True`` raises
    :class:`~tc_ir.TargetError` instead, for cache keys, where two targets must never share a name."""
    lines = [_HEADER] + ([f"# {line}" for line in header.splitlines()] if header else [])
    naming = target_name if strict else display_name
    for g in [graph, *graph.subgraphs()]:
        lines += _format_block(g, name if g is graph and name is not None else g.name, naming)
    held = {key: value for g in [graph, *graph.subgraphs()] for key, value in g.tensors.items()}
    if held:
        lines.append("")
        lines += [_format_data(key, value, data) for key, value in held.items()]
    return "\n".join(lines) + "\n"


def _format_block(graph: Graph, name: str, naming: Any) -> list[str]:
    lines = [f"graph {name}:"]
    for node in graph.nodes:
        lines.append(f"  %{node.name}: {format_spec(node.spec)} = {_format_rhs(node, naming)}")
    lines.append(f"  return {(format_value if naming is target_name else _show_value)(graph.outputs)}")
    return lines


def _format_rhs(node: Node, naming: Any) -> str:
    if node.op == "input":
        return "input"
    if node.op in ("param", "constant"):
        return f"{node.op} {node.target!r}"
    show = format_value if naming is target_name else _show_value
    args = [show(a) for a in node.args]
    args += [f"{k}={show(v)}" for k, v in node.kwargs.items()]
    return f"{naming(node.target)}({', '.join(args)})"


def _show_value(value: Any) -> str:
    """``format_value``, or a readable stand-in for a value text cannot hold (display only)."""
    try:
        return format_value(value)
    except Exception:
        return f"<{type(value).__name__}>"


def format_spec(spec: Any) -> str:
    if spec is None:
        return "?"
    if isinstance(spec, tuple):
        return "(" + ", ".join(map(format_spec, spec)) + ("," if len(spec) == 1 else "") + ")"
    return str(spec)


def format_value(value: Any) -> str:
    """A literal in the text form's syntax (see the module docstring)."""
    if isinstance(value, Node):
        return f"%{value.name}"
    if isinstance(value, Graph):
        return f"@{value.name}"
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else {math.inf: "inf", -math.inf: "-inf"}.get(value, "nan")
    if isinstance(value, complex):
        return f"complex({format_value(value.real)}, {format_value(value.imag)})"
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, torch.device):
        return f"device({str(value)!r})"
    if isinstance(value, sympy.Expr):
        return f"sym({str(value)!r})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, slice):
        return f"slice({format_value(value.start)}, {format_value(value.stop)}, {format_value(value.step)})"
    if isinstance(value, torch.Size):
        return f"torch.Size([{', '.join(map(format_value, value))}])"
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        inner = ", ".join(map(format_value, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return f"[{', '.join(map(format_value, value))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{format_value(k)}: {format_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"tc_ir cannot write a {type(value).__name__} value ({value!r}) as text")


def _format_data(key: str, value: Any, with_bytes: bool) -> str:
    if not isinstance(value, torch.Tensor):
        return f"data {key!r} = {format_value(value)}"
    kind = "param" if isinstance(value, torch.nn.Parameter) else "tensor"
    payload = f"b64{_tensor_bytes(value)!r}" if with_bytes else "..."
    return f"data {key!r} {kind} {TensorSpec.from_tensor(value)} = {payload}"


def _tensor_bytes(t: torch.Tensor) -> str:
    flat = t.detach().cpu().contiguous()
    raw = ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())  # no numpy needed
    return base64.b64encode(raw).decode("ascii")


# ---- parsing ----------------------------------------------------------------------------------
#
# Text may come from anywhere (an exported file, a cache entry, a bundle), so parsing treats it as
# hostile data: targets resolve only through targets.resolve_target (torch.ops overloads and a fixed
# table; nothing imported), literals through ast without eval, sizes through a small arithmetic
# grammar (never sympy.sympify, which evaluates Python), tensor data only after its size is checked
# against its spec, and sub-graph references without cycles. Every failure is a ParseError that
# names the line; nothing else escapes.
_NODE_LINE = re.compile(r"^\s+%(\w+): (.*?) = (.*)$")
_REF = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|([%@])(\w+)""")
_GRAPH_NAME = re.compile(r"\w{1,200}")
MAX_TENSOR_BYTES = 1 << 36  # 64 GiB: a spec asking for more is taken for damage, not a model
_MAX_DIMS = 64


def parse(text: str | bytes, tensors: dict[str, torch.Tensor] | None = None) -> Graph:
    """Parse the text form back into a graph (the inverse of ``str(graph)``).

    ``tensors`` supplies the data of held tensors written without it (``format(data=False)``),
    by key, e.g. read from a safetensors file; each must match its data line's dtype and shape.
    Raises :class:`ParseError` (naming the line) for anything that is not well-formed tc_ir text:
    bad UTF-8, unknown or unloadable targets, malformed specs, data of the wrong size, cycles."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ParseError(f"text is not UTF-8 (byte {e.start})") from None
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}")
    lines = text.splitlines()
    if not lines or not re.fullmatch(r"# tc_ir v\d{1,6}", lines[0].strip()):
        raise ParseError("line 1: not tc_ir text (missing '# tc_ir v1' header)")
    version = int(lines[0].strip().removeprefix("# tc_ir v"))
    if version > VERSION:
        raise ParseError(f"line 1: text is tc_ir v{version}; this tc_ir reads up to v{VERSION}")
    blocks, data = _split(lines)
    graphs = {name: Graph(name) for name, _, _ in blocks}
    loaded = {key: _load_data_line(lineno, kind, spec, payload, (tensors or {}).get(key))
              for key, (lineno, kind, spec, payload) in data.items()}
    refs: dict[str, set[str]] = {}
    for name, _, body in blocks:
        refs[name] = _parse_block(graphs[name], body, graphs, loaded)
    _check_acyclic(blocks[0][0], refs, {name: lineno for name, lineno, _ in blocks})
    return graphs[blocks[0][0]]


def _split(lines: list[str]) -> tuple[list[tuple[str, int, list]], dict]:
    blocks: list[tuple[str, int, list]] = []
    data: dict[str, Any] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("graph "):
            name = line[6:].rstrip().removesuffix(":")
            if not _GRAPH_NAME.fullmatch(name) or any(name == b[0] for b in blocks):
                raise ParseError(f"line {lineno}: bad or repeated graph name {name!r}")
            blocks.append((name, lineno, []))
        elif line.startswith("data "):
            key, rest = _parse_data_line(line, lineno)
            if key in data:
                raise ParseError(f"line {lineno}: data {key!r} is defined twice")
            data[key] = (lineno, *rest)
        elif blocks:
            blocks[-1][2].append((lineno, line))
        else:
            raise ParseError(f"line {lineno}: expected 'graph NAME:', got {line[:80]!r}")
    if not blocks:
        raise ParseError("no graph in text")
    return blocks, data


def _parse_data_line(line: str, lineno: int) -> tuple[str, tuple]:
    match = re.match(r"^data ('(?:[^'\\]|\\.)*') (?:(param|tensor) (.*?) )?= (.*)$", line)
    if not match:
        raise ParseError(f"line {lineno}: malformed data line")
    key, kind, spec, payload = match.groups()
    try:
        key = ast.literal_eval(key)
        return key, (kind, spec and parse_spec(spec), payload)
    except Exception as e:
        raise ParseError(f"line {lineno}: {e}") from None


def _load_data_line(lineno: int, kind: str | None, spec: Any, payload: str, given: Any) -> Any:
    try:
        if payload == "..." and kind is not None and given is not None:
            return _given_data(kind, spec, given)
        return _load_data(kind, spec, payload)
    except Exception as e:
        raise ParseError(f"line {lineno}: data: {e}") from None


def _load_data(kind: str | None, spec: Any, payload: str) -> Any:
    if kind is None:
        return _Evaluator({}, {}).eval_text(payload)
    if payload == "...":
        raise ParseError("text was written without tensor data (format(data=False)); cannot rebuild it")
    nbytes = checked_nbytes(spec)
    if not (payload.startswith("b64'") and payload.endswith("'")) or abs(len(payload) - 5 - nbytes * 4 // 3) > 8:
        raise ParseError(f"payload is not base64 of {nbytes} bytes")
    raw = bytearray(base64.b64decode(payload[4:-1], validate=True))
    if len(raw) != nbytes:
        raise ParseError(f"payload has {len(raw)} bytes, spec {spec} needs {nbytes}")
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return tensor_of_spec(flat.view(spec.dtype).reshape(spec.shape), spec, kind == "param")


def _given_data(kind: str, spec: Any, given: Any) -> torch.Tensor:
    checked_nbytes(spec)
    if not isinstance(given, torch.Tensor) or given.dtype != spec.dtype or tuple(given.shape) != spec.shape:
        what = f"{given.dtype} {tuple(given.shape)}" if isinstance(given, torch.Tensor) else type(given).__name__
        raise ParseError(f"tensor data is {what}, the spec says {spec}")
    return tensor_of_spec(given, spec, kind == "param")


def checked_nbytes(spec: Any) -> int:
    """Bytes of a held tensor's dense data; raises ParseError for specs no real tensor has
    (symbolic or negative sizes, strides reaching far past the data, absurd totals)."""
    if not isinstance(spec, TensorSpec):
        raise ParseError("held tensor needs a tensor spec")
    dims = [*spec.shape, *(spec.stride or ())]
    if not all(isinstance(d, int) and 0 <= d < 1 << 62 for d in dims) or len(spec.shape) > _MAX_DIMS:
        raise ParseError(f"held tensor spec {spec} has sizes or strides no tensor has")
    numel = math.prod(spec.shape)
    nbytes = numel * spec.dtype.itemsize
    extent = 1 + sum((n - 1) * s for n, s in zip(spec.shape, spec.stride or ())) if numel else 0
    if nbytes > MAX_TENSOR_BYTES or extent > 16 * numel + 64:
        raise ParseError(f"held tensor spec {spec} is too large ({nbytes} bytes, extent {extent})")
    return nbytes


def tensor_of_spec(dense: torch.Tensor, spec: TensorSpec, param: bool) -> torch.Tensor:
    """``dense`` laid out with the spec's strides on its device (CPU when that is absent)."""
    device = spec.device if spec.device.type == "cpu" or _device_available(spec.device) else torch.device("cpu")
    value = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=device).copy_(dense)
    return torch.nn.Parameter(value, requires_grad=spec.requires_grad) if param else value


def _device_available(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def _parse_block(graph: Graph, body: list, graphs: dict[str, Graph], data: dict) -> set[str]:
    """Fill ``graph`` from its lines; returns the names of the sub-graphs it refers to."""
    env: dict[str, Node] = {}
    evaluator = _Evaluator(env, graphs)
    for lineno, line in body:
        match = None
        try:
            if line.strip().startswith("return "):
                graph.output(evaluator.eval_text(line.strip()[7:]))
                continue
            match = _NODE_LINE.match(line)
            if not match:
                raise ParseError(f"expected '%name: spec = ...', got {line.strip()[:80]!r}")
            name, spec_text, rhs = match.groups()
            if name in env:
                raise ParseError(f"node name %{name} is used twice")
            env[name] = _parse_rhs(graph, name, parse_spec(spec_text), rhs, evaluator, data)
        except Exception as e:  # hostile text: every failure becomes a ParseError with its line
            where = f"line {lineno}" + (f" (%{match.group(1)})" if match else "")
            raise ParseError(f"{where}: {e}" if str(e) else f"{where}: {type(e).__name__}") from None
    return evaluator.graph_refs


def _check_acyclic(main: str, refs: dict[str, set[str]], linenos: dict[str, int]) -> None:
    """A sub-graph may not (even indirectly) contain itself or the main graph."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str) -> None:
        state[name] = 1
        for inner in sorted(refs.get(name, ())):
            if state.get(inner) == 1 or inner == main:
                raise ParseError(f"line {linenos[inner]}: graph {inner} refers to itself (a cycle through @{inner})")
            if inner not in state:
                visit(inner)
        state[name] = 2

    visit(main)


def _parse_rhs(graph: Graph, name: str, spec: Any, rhs: str, evaluator: _Evaluator, data: dict) -> Node:
    if rhs == "input":
        return graph._add(name, "input", None, (), {}, spec)
    if rhs.startswith(("param ", "constant ")):
        op, key = rhs.split(" ", 1)
        key = ast.literal_eval(key)
        if not isinstance(key, str) or key not in data:
            raise ParseError(f"{op} {key!r} has no data line")
        graph.tensors[key] = data[key]
        return graph._add(name, op, key, (), {}, spec)
    target_text, paren, _ = rhs.partition("(")
    if not paren or not rhs.endswith(")"):
        raise ParseError(f"expected 'target(args)', got {rhs[:80]!r}")
    target = resolve_target(target_text.strip())
    args, kwargs = evaluator.eval_call("f(" + rhs[len(target_text) + 1:])
    return graph._add(name, "call", target, args, kwargs, spec)


@functools.lru_cache(maxsize=4096)
def parse_spec(text: str) -> Any:
    """A spec from its text. Memoised: a graph repeats few specs (GPT-2's training graphs:
    ~3,000 nodes), and specs are frozen, so one parse serves every equal text (a warm process
    parses its cached traces: ``tc_autograd/cache.py``)."""
    text = text.strip()
    if text == "?":
        return None
    if text in SCALAR_TYPES:
        return ScalarSpec(SCALAR_TYPES[text])
    scalar, eq, expr = text.partition("=")
    if eq and scalar in SCALAR_TYPES:
        return ScalarSpec(SCALAR_TYPES[scalar], parse_size(expr))
    if text.startswith("(") and text.endswith(")"):
        return tuple(parse_spec(part) for part in _split_top(text[1:-1]) if part.strip())
    match = _TENSOR_SPEC.match(text)
    if not match or match.group(1) not in DTYPES_BY_NAME:
        raise ParseError(f"malformed spec {text[:80]!r}")
    dtype, shape, device, _, stride, grad = match.groups()
    dims = lambda s: tuple(parse_size(d) for d in s.split(",") if d.strip())  # noqa: E731
    try:
        return TensorSpec(dims(shape), DTYPES_BY_NAME[dtype], device, dims(stride) if stride else None, bool(grad))
    except ParseError:
        raise
    except Exception as e:
        raise ParseError(f"malformed spec {text[:80]!r}: {e}") from None


_TENSOR_SPEC = re.compile(r"^(\w+)\[(.*?)\] (\S+)( stride=\[(.*?)\])?( grad)?$")
_INT = re.compile(r"-?\d{1,20}")

_SIZE_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_SIZE_FUNCS = {"floor": sympy.floor, "ceiling": sympy.ceiling, "Max": sympy.Max, "Min": sympy.Min,
               "Mod": sympy.Mod, "Abs": sympy.Abs, "SizeFloat": SizeFloat}  # a float from sizes (batch norm)


def parse_size(text: str) -> int | sympy.Expr:
    """One size, as :func:`tc_ir.spec.format_dim` writes it: an int, or arithmetic over size
    symbols (``2*s0``, ``floor(s0/2)``); read with a small grammar, never by evaluating it."""
    text = text.strip()
    if len(text) > 256:
        raise ParseError(f"size expression too long ({len(text)} characters)")
    if _INT.fullmatch(text):
        return int(text)
    expr = _size_expr(ast.parse(text, mode="eval").body)
    return int(expr) if expr.is_Integer else expr


def _size_expr(tree: ast.AST) -> sympy.Expr:
    if isinstance(tree, ast.Constant) and type(tree.value) is int and abs(tree.value) < 1 << 62:
        return sympy.Integer(tree.value)
    if isinstance(tree, ast.Name) and re.fullmatch(r"[a-z][a-z0-9_]{0,31}", tree.id):
        return sym(tree.id)
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.USub):
        return -_size_expr(tree.operand)
    if isinstance(tree, ast.BinOp) and type(tree.op) in _SIZE_OPS:
        small_power = isinstance(tree.right, ast.Constant) and type(tree.right.value) is int and 0 <= tree.right.value <= 8
        if not isinstance(tree.op, ast.Pow) or small_power:
            return _SIZE_OPS[type(tree.op)](_size_expr(tree.left), _size_expr(tree.right))
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in _SIZE_FUNCS \
            and not tree.keywords and 1 <= len(tree.args) <= 8:
        return _SIZE_FUNCS[tree.func.id](*[_size_expr(a) for a in tree.args])
    raise ParseError(f"unexpected size expression {ast.unparse(tree)[:80]!r}")


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


class _Evaluator:
    """Evaluates the literal syntax of args with ``ast``: no ``eval`` of arbitrary code."""

    def __init__(self, env: dict[str, Node], graphs: dict[str, Graph]):
        self.env, self.graphs = env, graphs
        self.graph_refs: set[str] = set()

    def eval_text(self, text: str) -> Any:
        return self._eval(ast.parse(self._mark_refs(text), mode="eval").body)

    def eval_call(self, text: str) -> tuple[tuple, dict]:
        call = ast.parse(self._mark_refs(text), mode="eval").body
        return tuple(self._eval(a) for a in call.args), {k.arg: self._eval(k.value) for k in call.keywords}

    @staticmethod
    def _mark_refs(text: str) -> str:
        def sub(m: re.Match) -> str:
            return m.group(1) or ("__node_" if m.group(2) == "%" else "__graph_") + m.group(3)

        return _REF.sub(sub, text)

    def _eval(self, tree: ast.AST) -> Any:
        method = getattr(self, "_eval_" + type(tree).__name__, None)
        if method is None:
            raise ParseError(f"unexpected syntax {ast.unparse(tree)!r}")
        return method(tree)

    def _eval_Constant(self, tree: ast.Constant) -> Any:
        return tree.value

    def _eval_Tuple(self, tree: ast.Tuple) -> tuple:
        return tuple(self._eval(e) for e in tree.elts)

    def _eval_List(self, tree: ast.List) -> list:
        return [self._eval(e) for e in tree.elts]

    def _eval_Dict(self, tree: ast.Dict) -> dict:
        return {self._eval(k): self._eval(v) for k, v in zip(tree.keys, tree.values)}

    def _eval_UnaryOp(self, tree: ast.UnaryOp) -> Any:
        if not isinstance(tree.op, ast.USub):
            raise ParseError(f"unexpected operator in {ast.unparse(tree)!r}")
        return -self._eval(tree.operand)

    def _eval_Name(self, tree: ast.Name) -> Any:
        name = tree.id
        if name.startswith("__node_"):
            if name[7:] not in self.env:
                raise ParseError(f"%{name[7:]} is used before it is defined")
            return self.env[name[7:]]
        if name.startswith("__graph_"):
            if name[8:] not in self.graphs:
                raise ParseError(f"@{name[8:]} names no graph in this text")
            self.graph_refs.add(name[8:])
            return self.graphs[name[8:]]
        constants = {"inf": math.inf, "nan": math.nan}
        if name not in constants:
            raise ParseError(f"unknown name {name!r}")
        return constants[name]

    def _eval_Attribute(self, tree: ast.Attribute) -> Any:
        if not (isinstance(tree.value, ast.Name) and tree.value.id == "torch"):
            raise ParseError(f"unexpected attribute {ast.unparse(tree)!r}")
        value = _torch_constants().get(tree.attr)  # never getattr(torch, ...): it may import
        if value is None:
            raise ParseError(f"unexpected attribute {ast.unparse(tree)!r}")
        return value

    def _eval_Call(self, tree: ast.Call) -> Any:
        if tree.keywords:
            raise ParseError(f"unexpected keywords in {ast.unparse(tree)[:80]!r}")
        fn = ast.unparse(tree.func)
        args = [self._eval(a) for a in tree.args]
        builders = {"slice": slice, "device": torch.device, "complex": complex,
                    "sym": parse_size, "torch.Size": torch.Size}
        if fn not in builders:
            raise ParseError(f"unexpected call {fn}(...)")
        return builders[fn](*args)


@functools.cache
def _torch_constants() -> dict[str, Any]:
    return {k: v for k, v in vars(torch).items() if isinstance(v, (torch.dtype, torch.memory_format, torch.layout))}


# ---- copying ----------------------------------------------------------------------------------
def copy_graph(graph: Graph, _copies: dict[int, Graph] | None = None) -> Graph:
    """Copy the structure of ``graph`` and its sub-graphs; held tensors are shared."""
    copies = {} if _copies is None else _copies
    new = Graph(graph.name)
    new.tensors = dict(graph.tensors)
    new.meta = dict(graph.meta)
    mapping: dict[Node, Node] = {}

    def remap(value: Any) -> Any:
        if isinstance(value, Node):
            return mapping[value]
        if isinstance(value, Graph):
            if id(value) not in copies:
                copies[id(value)] = copy_graph(value, copies)
            return copies[id(value)]
        return value

    for node in graph.nodes:  # two passes, so a graph out of topological order copies too
        mapping[node] = new._add(node.name, node.op, node.target, (), {}, node.spec)
        mapping[node].meta = dict(node.meta)
    for node in graph.nodes:
        mapping[node]._set_inputs(*map_structure((node.args, node.kwargs), remap))  # args, kwargs at once
    new.output(map_structure(graph.outputs, remap))
    return new


__all__ = ["parse", "format_graph", "format_value", "format_spec", "parse_spec", "ParseError", "spec_of"]
