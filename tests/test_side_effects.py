"""No process-wide side effects: after ``import tc`` and tc compiles, torch and other code behave
exactly as without tc.

Each scenario runs in a fresh interpreter; the baseline never imports tc, so nothing tc does at
import can leak into it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script: str, timeout: int = 600) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", TORCHDYNAMO_VERBOSE="0")
    env.pop("TC_LOGS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=_ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Models torch.compile runs in both processes, and the use of tc in the second one. The sliced
# decoder loop is HF's ``for layer in self.layers[: self.config.num_hidden_layers]``.
_MODELS = """
import json, sys, torch
torch.manual_seed(0)

class Sliced(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
        self.n = 3

    def forward(self, x):
        for layer in self.layers[: self.n]:
            x = torch.tanh(layer(x))
        return x

def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    return LlamaForCausalLM(cfg).eval()

USE_TC = sys.argv[1:] == ["tc"] if len(sys.argv) > 1 else __USE_TC__
if USE_TC:
    import tc
    tc.compile(Sliced(), backend="eager")(torch.randn(2, 8))          # the same classes, compiled by tc
    tc.compile(llama(), backend="eager")(input_ids=torch.randint(0, 64, (1, 6)))
    tc.compile(lambda x: x.sin() + 1)(torch.randn(3))                   # and a function, by the inductor
    tc.reset()
    tc.compile(lambda x: x.cos() * 2, backend="eager")(torch.randn(3))

import torch._dynamo
counts = {}
for name, make, arg in [("sliced", Sliced, lambda: torch.randn(2, 8)),
                        ("llama", llama, lambda: torch.randint(0, 64, (1, 6)))]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []
    def backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward
    model = make()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(4):
            x = arg()
            out = compiled(x) if name == "sliced" else compiled(input_ids=x).logits
            ref = model(x) if name == "sliced" else model(input_ids=x).logits
            assert torch.allclose(out, ref, atol=1e-5), name
    stats = torch._dynamo.utils.counters["stats"]
    counts[name] = {"graphs": len(graphs), "nodes": graphs,
                    "unique_graphs": stats["unique_graphs"],
                    "recompiles": sum(torch._dynamo.utils.counters["recompiles"].values()),
                    "frames_ok": torch._dynamo.utils.counters["frames"]["ok"]}
print(json.dumps(counts))
"""


def test_torch_compile_counts_are_the_same_with_and_without_tc():
    pytest.importorskip("transformers")
    without = _run(_MODELS.replace("__USE_TC__", "False"))
    with_tc = _run(_MODELS.replace("__USE_TC__", "True"))
    assert with_tc == without, (with_tc, without)
    assert without["sliced"]["graphs"] == 1 and without["llama"]["recompiles"] == 0, without


# What tc must leave untouched: torch's classes and namespaces (by identity of every attribute),
# global module hooks, the dispatcher's operators, interpreter hooks, warning filters, and the
# global modes of torch.
_SNAPSHOT = """
import json, sys, threading, warnings, torch, torch.nn.functional, torch.optim

def snapshot():
    spaces = {"Module": torch.nn.Module, "Tensor": torch.Tensor, "ModuleList": torch.nn.ModuleList,
              "Sequential": torch.nn.Sequential, "Parameter": torch.nn.Parameter, "Optimizer": torch.optim.Optimizer,
              "torch": torch, "functional": torch.nn.functional, "RemovableHandle": torch.utils.hooks.RemovableHandle}
    state = {name: {k: id(v) for k, v in vars(space).items() if not k.startswith("__pycache")}
             for name, space in spaces.items()}
    g = torch.nn.modules.module
    state["hooks"] = [len(h) for h in (g._global_forward_hooks, g._global_forward_pre_hooks, g._global_backward_hooks,
                                       g._global_backward_pre_hooks, g._global_module_registration_hooks,
                                       g._global_parameter_registration_hooks, g._global_buffer_registration_hooks)]
    # ops of tc's own namespaces (tc_inductor::gemm_rows_out, a chunked GEMM that cached graphs
    # name) are new names no other code uses: they change nothing another caller sees
    state["ops"] = sorted(n for n in torch._C._dispatch_get_all_op_names() if not n.startswith("tc_"))
    state["interpreter"] = [repr(sys.gettrace()), repr(sys.getprofile()), repr(threading.gettrace()),
                            len(sys.meta_path), len(sys.path_hooks), len(warnings.filters)]
    state["modes"] = [torch.is_grad_enabled(), str(torch.get_default_dtype()), torch.is_inference_mode_enabled(),
                      torch.are_deterministic_algorithms_enabled(), torch._C._is_any_autocast_enabled(),
                      torch.get_num_threads(), torch.backends.mha.get_fastpath_enabled()]
    return state

# torch's own lazy imports (FakeTensorMode imports torch._dynamo, which wraps torch.manual_seed) and
# tc's dependencies' import-time filters happen for any user of them: done first, not counted.
import sympy, networkx, attrs
from torch._subclasses.fake_tensor import FakeTensorMode
FakeTensorMode()
before = snapshot()
import tc
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.lin(x).relu()
m = tc.compile(M())
m(torch.randn(2, 4)).sum().backward()
m.eval(); m.train(); m.lin.weight.requires_grad_(False); m.to(torch.float64)
tc.compile(lambda x: x.sin() * 2)(torch.randn(3))
tc.reset()
after = snapshot()
diff = {k: [n for n in set(before[k]) | set(after[k]) if before[k].get(n) != after[k].get(n)]
        if isinstance(before[k], dict) else (before[k], after[k]) for k in before if before[k] != after[k]}
print(json.dumps(diff, default=str))
"""


def test_importing_and_using_tc_changes_no_global_state():
    diff = _run(_SNAPSHOT)
    assert diff == {}, diff
