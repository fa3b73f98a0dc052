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
    assert "graph main" in path.read_text()


@pytest.mark.parametrize("make", [MLP, CNN, TinyTransformer], ids=lambda m: m.__name__)
def test_torch_compile_backend_tc(make):
    import torch._dynamo

    torch._dynamo.reset()
    model = make().eval()
    compiled = torch.compile(model, backend="tc")
    x = inputs_for(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*x), model(*x), atol=1e-4, rtol=1e-4)
