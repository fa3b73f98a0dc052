"""tc.export/tc.load, and tc as a torch.compile back end."""

from __future__ import annotations

import pytest
import torch
from tc_models import CNN, MLP, TinyTransformer, inputs_for

import tc


@pytest.mark.parametrize("make", [MLP, CNN], ids=lambda m: m.__name__)
def test_export_save_load_runs_without_source(make, tmp_path):
    model = make().eval()
    x = inputs_for(model)
    program = tc.export(model, *x)
    path = tmp_path / "model.tc"
    program.save(path)
    loaded = tc.load(path)
    for _ in range(2):
        y = inputs_for(model)
        with torch.no_grad():
            torch.testing.assert_close(loaded(*y), model(*y), atol=1e-4, rtol=1e-4)
    import safetensors  # a .tc file is a safetensors file: weights as raw data, the ATen graph as metadata

    with safetensors.safe_open(str(path), framework="pt") as f:
        text = f.metadata()["graph"]
        assert set(f.keys()) <= set(model.state_dict()) and f.keys()  # weights travel in the file
    assert text.startswith("# tc_ir v1") and "param f32" in text and "aten." in text


def test_export_keeps_nested_inputs_and_outputs(tmp_path):
    def f(x, parts):
        return {"sum": x + parts["a"], "pair": (parts["b"][0] * 2, 7)}

    args = (torch.randn(3), {"a": torch.randn(3), "b": [torch.randn(3)]})
    program = tc.export(f, *args)
    program.save(tmp_path / "f.tc")
    loaded = tc.load(tmp_path / "f.tc")
    fresh = (torch.randn(3), {"a": torch.randn(3), "b": [torch.randn(3)]})
    got, want = loaded(*fresh), f(*fresh)
    torch.testing.assert_close(got["sum"], want["sum"])
    torch.testing.assert_close(got["pair"][0], want["pair"][0])
    assert got["pair"][1] == 7
    with pytest.raises(TypeError, match="takes 3 tensors, got 1"):
        loaded(torch.randn(3))


def test_export_refuses_a_program_with_graph_breaks():
    def f(x):
        print("side effect")
        return x + 1

    with pytest.raises(tc.ExportError, match="one graph"):
        tc.export(f, torch.randn(2))


@pytest.mark.parametrize("make", [MLP, CNN, TinyTransformer], ids=lambda m: m.__name__)
def test_torch_compile_backend_tc(make):
    import torch._dynamo

    torch._dynamo.reset()
    model = make().eval()
    compiled = torch.compile(model, backend="tc")
    x = inputs_for(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*x), model(*x), atol=1e-4, rtol=1e-4)
