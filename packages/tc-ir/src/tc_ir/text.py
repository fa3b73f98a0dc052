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
import math
import re
from typing import Any

import sympy
import torch

from .graph import Graph
from .node import Node, map_structure
from .spec import DTYPES_BY_NAME, SCALAR_TYPES, ScalarSpec, TensorSpec, parse_dim, spec_of
from .targets import resolve_target, target_name

VERSION = 1
_HEADER = f"# tc_ir v{VERSION}"


class ParseError(ValueError):
    """Text that is not a well-formed tc_ir graph; the message names the line."""


# ---- printing ---------------------------------------------------------------------------------
def format_graph(graph: Graph, data: bool = True, header: str | None = None, name: str | None = None) -> str:
    lines = [_HEADER] + ([f"# {line}" for line in header.splitlines()] if header else [])
    for g in [graph, *graph.subgraphs()]:
        lines += _format_block(g, name if g is graph and name is not None else g.name)
    held = {key: value for g in [graph, *graph.subgraphs()] for key, value in g.tensors.items()}
    if held:
        lines.append("")
        lines += [_format_data(key, value, data) for key, value in held.items()]
    return "\n".join(lines) + "\n"


def _format_block(graph: Graph, name: str) -> list[str]:
    lines = [f"graph {name}:"]
    for node in graph.nodes:
        lines.append(f"  %{node.name}: {format_spec(node.spec)} = {_format_rhs(node)}")
    lines.append(f"  return {format_value(graph.outputs)}")
    return lines


def _format_rhs(node: Node) -> str:
    if node.op == "input":
        return "input"
    if node.op in ("param", "constant"):
        return f"{node.op} {node.target!r}"
    args = [format_value(a) for a in node.args]
    args += [f"{k}={format_value(v)}" for k, v in node.kwargs.items()]
    return f"{target_name(node.target)}({', '.join(args)})"


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
_NODE_LINE = re.compile(r"^\s+%(\w+): (.*?) = (.*)$")
_REF = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|([%@])(\w+)""")


def parse(text: str) -> Graph:
    """Parse the text form back into a graph (the inverse of ``str(graph)``)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# tc_ir v"):
        raise ParseError("line 1: not tc_ir text (missing '# tc_ir v1' header)")
    version = int(lines[0].removeprefix("# tc_ir v"))
    if version > VERSION:
        raise ParseError(f"line 1: text is tc_ir v{version}; this tc_ir reads up to v{VERSION}")
    blocks, data = _split(lines)
    graphs = {name: Graph(name) for name, _ in blocks}
    for key, (kind, spec, payload) in data.items():
        data[key] = _load_data(kind, spec, payload)
    for name, body in blocks:
        _parse_block(graphs[name], body, graphs, data)
    return graphs[blocks[0][0]]


def _split(lines: list[str]) -> tuple[list[tuple[str, list]], dict]:
    blocks: list[tuple[str, list]] = []
    data: dict[str, Any] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("graph "):
            blocks.append((line[6:].rstrip(":"), []))
        elif line.startswith("data "):
            key, rest = _parse_data_line(line, lineno)
            data[key] = rest
        elif blocks:
            blocks[-1][1].append((lineno, line))
        else:
            raise ParseError(f"line {lineno}: expected 'graph NAME:', got {line!r}")
    if not blocks:
        raise ParseError("no graph in text")
    return blocks, data


def _parse_data_line(line: str, lineno: int) -> tuple[str, tuple]:
    match = re.match(r"^data ('(?:[^'\\]|\\.)*') (?:(param|tensor) (.*?) )?= (.*)$", line)
    if not match:
        raise ParseError(f"line {lineno}: malformed data line")
    key, kind, spec, payload = match.groups()
    return ast.literal_eval(key), (kind, spec and parse_spec(spec), payload)


def _load_data(kind: str | None, spec: Any, payload: str) -> Any:
    if kind is None:
        return _Evaluator({}, {}).eval_text(payload)
    if payload == "...":
        raise ParseError("text was written without tensor data (format(data=False)); cannot rebuild it")
    raw = bytearray(base64.b64decode(ast.literal_eval(payload[3:])))
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    dense = flat.view(spec.dtype).reshape(spec.shape)
    device = spec.device if spec.device.type == "cpu" or _device_available(spec.device) else "cpu"
    value = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=device).copy_(dense)
    return torch.nn.Parameter(value, requires_grad=spec.requires_grad) if kind == "param" else value


def _device_available(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def _parse_block(graph: Graph, body: list, graphs: dict[str, Graph], data: dict) -> None:
    env: dict[str, Node] = {}
    evaluator = _Evaluator(env, graphs)
    for lineno, line in body:
        try:
            if line.strip().startswith("return "):
                graph.output(evaluator.eval_text(line.strip()[7:]))
                continue
            match = _NODE_LINE.match(line)
            if not match:
                raise ParseError(f"expected '%name: spec = ...', got {line.strip()!r}")
            name, spec_text, rhs = match.groups()
            node = _parse_rhs(graph, name, parse_spec(spec_text), rhs, evaluator, data)
            if node.name != name:
                raise ParseError(f"node name %{name} is used twice")
            env[name] = node
        except (ParseError, SyntaxError, ValueError, KeyError, TypeError) as e:
            raise ParseError(f"line {lineno}: {e}") from e


def _parse_rhs(graph: Graph, name: str, spec: Any, rhs: str, evaluator: _Evaluator, data: dict) -> Node:
    if rhs == "input":
        return graph._add(name, "input", None, (), {}, spec)
    if rhs.startswith(("param ", "constant ")):
        op, key = rhs.split(" ", 1)
        key = ast.literal_eval(key)
        if key not in data:
            raise ParseError(f"{op} {key!r} has no data line")
        graph.tensors[key] = data[key]
        return graph._add(name, op, key, (), {}, spec)
    target_text, _, _ = rhs.partition("(")
    args, kwargs = evaluator.eval_call("f(" + rhs[len(target_text) + 1:])
    return graph._add(name, "call", resolve_target(target_text), args, kwargs, spec)


def parse_spec(text: str) -> Any:
    text = text.strip()
    if text == "?":
        return None
    if text in SCALAR_TYPES:
        return ScalarSpec(SCALAR_TYPES[text])
    if text.startswith("("):
        return tuple(parse_spec(part) for part in _split_top(text[1:-1]) if part.strip())
    match = re.match(r"^(\w+)\[(.*?)\] (\S+)( stride=\[(.*?)\])?( grad)?$", text)
    if not match or match.group(1) not in DTYPES_BY_NAME:
        raise ParseError(f"malformed spec {text!r}")
    dtype, shape, device, _, stride, grad = match.groups()
    dims = lambda s: tuple(parse_dim(d) for d in s.split(",") if d.strip())  # noqa: E731
    return TensorSpec(dims(shape), DTYPES_BY_NAME[dtype], device, dims(stride) if stride else None, bool(grad))


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
            return self.graphs[name[8:]]
        constants = {"inf": math.inf, "nan": math.nan}
        if name not in constants:
            raise ParseError(f"unknown name {name!r}")
        return constants[name]

    def _eval_Attribute(self, tree: ast.Attribute) -> Any:
        if not (isinstance(tree.value, ast.Name) and tree.value.id == "torch"):
            raise ParseError(f"unexpected attribute {ast.unparse(tree)!r}")
        value = getattr(torch, tree.attr, None)
        if not isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
            raise ParseError(f"unexpected attribute {ast.unparse(tree)!r}")
        return value

    def _eval_Call(self, tree: ast.Call) -> Any:
        fn = ast.unparse(tree.func)
        args = [self._eval(a) for a in tree.args]
        builders = {"slice": slice, "device": torch.device, "complex": complex,
                    "sym": parse_dim, "torch.Size": torch.Size}
        if fn not in builders:
            raise ParseError(f"unexpected call {fn}(...)")
        return builders[fn](*args)


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
        mapping[node].args, mapping[node].kwargs = map_structure((node.args, node.kwargs), remap)
    new.output(map_structure(graph.outputs, remap))
    return new


__all__ = ["parse", "format_graph", "format_value", "format_spec", "parse_spec", "ParseError", "spec_of"]
