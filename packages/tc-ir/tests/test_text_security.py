"""Text is data: formatting never raises for a target, parsing hostile text only ever raises ParseError."""

import operator
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tc_ir
from tc_ir import Graph, TensorSpec

aten = torch.ops.aten
HEAD = "# tc_ir v1\ngraph main:\n  %x: f32[2] cpu = input\n"


def test_graph_with_a_torch_C_function_formats_and_strict_format_raises():
    g = Graph()
    x = g.input("x", TensorSpec((2,), torch.float32))
    g.call(torch._C._log_api_usage_once, "torchvision.ops.stochastic_depth", spec=None)
    g.call(torch._C._get_tracing_state, spec=None)  # a pybind function with no exact name
    g.output(g.call(aten.relu.default, x))
    text = str(g)
    assert "torch._C._log_api_usage_once('torchvision.ops.stochastic_depth')" in text
    assert "<torch._C._get_tracing_state>" in text
    with pytest.raises(tc_ir.TargetError):
        g.format(strict=True)
    with pytest.raises(tc_ir.ParseError, match=r"line 4 \(%\w+\): target .*cannot be loaded"):
        tc_ir.parse(text)


def test_local_function_prints_in_angle_brackets():
    def helper(t):
        return t

    g = Graph()
    g.output(g.call(helper, g.input("x", TensorSpec((2,), torch.float32))))
    assert "<" in str(g) and "helper" in str(g)


@pytest.mark.parametrize("target", ["os.system", "builtins.exec", "builtins.eval", "builtins.__import__",
                                    "subprocess.run", "torch.load", "torch.ops.load_library", "torch.os.system",
                                    "operator.attrgetter", "operator.methodcaller", "tc_ir.text.parse", ".view",
                                    "._fix_weakref", "torch.sin", "aten.add", "_a.b.c", "aten.nope.default"])
def test_targets_outside_ops_and_the_table_are_refused(target):
    text = HEAD + f"  %y: f32[2] cpu = {target}(%x)\n  return %y\n"
    with pytest.raises(tc_ir.ParseError, match=r"line 4 \(%y\): target .* cannot be loaded"):
        tc_ir.parse(text)


def test_loading_imports_nothing():
    name = "this"  # importing it prints the Zen of Python: a visible side effect
    if name in sys.modules:
        pytest.skip("module already imported in this process")
    with pytest.raises(tc_ir.ParseError):
        tc_ir.parse(HEAD + "  %y: f32[2] cpu = this.s(%x)\n  return %y\n")
    assert name not in sys.modules


def test_table_and_ops_load():
    assert tc_ir.resolve_target("operator.getitem") is operator.getitem
    assert tc_ir.resolve_target("aten.add.Tensor") is aten.add.Tensor
    assert tc_ir.resolve_target("prims.add.default") is torch.ops.prims.add.default
    assert tc_ir.resolve_target("tc_ir.ops.cond") is tc_ir.ops.cond


@pytest.mark.parametrize("text, message", [
    (b"# tc_ir v1\ngraph main:\n  \xff\xfe\n", "not UTF-8"),
    (HEAD + "  %y: f32[__import__('os').system('true')] cpu = aten.relu.default(%x)\n", "size expression"),
    (HEAD + "  return sym(\"__import__('os')\")\n", "size expression"),
    (HEAD + "  %y: f32[9**9**9] cpu = aten.relu.default(%x)\n", "size expression"),
    (HEAD + "  return torch._dynamo\n", "unexpected attribute"),
    (HEAD + "  %y: f32[2] cpu = aten.relu.default(%x\n", "expected 'target\\(args\\)'"),
    (HEAD + "  %x: f32[2] cpu = input\n", "used twice"),
    (HEAD + "  return @nope\n", "names no graph"),
    ("# tc_ir v1\ngraph main:\n  %c: f32[2] cpu = constant 'c'\n  return %c\n\n"
     "data 'c' tensor f32[1000000000000] cpu = b64'AAAAAAAAAAA='\n", "too large|payload"),
    ("# tc_ir v1\ngraph main:\n  %c: f32[2] cpu = constant 'c'\n  return %c\n\n"
     "data 'c' tensor f32[2] cpu stride=[1000000000] cpu = b64'AAAAAAAAAAA='\n", "malformed|too large"),
    ("# tc_ir v1\ngraph main:\n  %c: f32[2] cpu = constant 'c'\n  return %c\n\n"
     "data 'c' tensor f32[3] cpu = b64'AAAAAAAAAAA='\n", "payload"),
    ("# tc_ir v1\ngraph main:\n  %c: f32[2] cpu = constant 'c'\n  return %c\n\n"
     "data 'c' tensor f32[2] cpu = b64'AAAA\"AAAAAA='\n", "payload|base64|Incorrect|Non-base64"),
    ("# tc_ir vX\ngraph main:\n", "header"),
    ("# tc_ir v1\ngraph main:\n  %p: bool[] cpu = input\n  %y: f32[2] cpu = tc_ir.ops.cond(%p, @a, @a, [])\n"
     "  return %y\ngraph a:\n  %z: f32[2] cpu = tc_ir.ops.cond(%p, @a, @a, [])\n  return %z\n", "cycle|%p"),
    ("# tc_ir v1\ngraph main:\n  %p: bool[] cpu = input\n  %y: f32[2] cpu = tc_ir.ops.cond(%p, @a, @a, [])\n"
     "  return %y\ngraph a:\n  %q: bool[] cpu = input\n  %z: f32[2] cpu = tc_ir.ops.cond(%q, @main, @a, [])\n"
     "  return %z\n", "cycle"),
    ("# tc_ir v1\ngraph main:\n  return " + "[" * 300 + "]" * 300 + "\n", "line 3"),
])
def test_malformed_text_gives_a_clear_error(text, message):
    with pytest.raises(tc_ir.ParseError, match=message):
        tc_ir.parse(text)


def _valid_text() -> str:
    g = Graph()
    x = g.input("x", TensorSpec((2, 3), torch.float32))
    w = g.param("w", torch.nn.Parameter(torch.randn(3, 3)))
    y = g.call(aten.mm.default, x, w)
    parts = g.call(aten.split.Tensor, y, 1, 1, spec=tuple(TensorSpec((2, 1), torch.float32) for _ in range(3)))
    first = g.call(operator.getitem, parts, 0)
    g.output({"y": g.call(aten.add.Tensor, first, 2.5, kwargs={"alpha": -1}), "n": None})
    return str(g)


VALID = _valid_text()
TOKENS = ["%", "@", "(", ")", "[", "]", "'", "\n", "\n  ", ",", " = ", "sym('s0')", "f32[", "aten.",
          "9" * 30, "-", "b64'", "data 'w' ", "graph g:\n", "return ", "\\", "\x00", "\udcff", "𝕏"]


@st.composite
def mutated_texts(draw):
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["cut", "insert", "delete", "replace"]))
        if action == "cut":
            text = text[:pos]
        elif action == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS) | st.text(max_size=8)) + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 12)):]
        else:
            text = text[:pos] + draw(st.characters()) + text[pos + 1:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_texts())
def test_fuzzed_text_parses_or_raises_parse_error(text):
    try:
        g = tc_ir.parse(text)
    except tc_ir.ParseError:
        return
    assert isinstance(g, Graph)
    str(g)  # whatever parsed also prints


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_parse_error(data):
    try:
        tc_ir.parse(b"# tc_ir v1\ngraph main:\n" + data)
    except tc_ir.ParseError:
        pass


def test_valid_text_still_roundtrips():
    g = tc_ir.parse(VALID)
    assert str(g) == VALID
