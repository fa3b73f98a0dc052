"""A warm start: a fresh process with a warm ``TC_CACHE_DIR`` reads tc_autograd's traced graphs
back from the artifact store (and the inductor its compiled graphs) instead of tracing again:
no trace, no lowering, no C++ compiler run, no networkx imported (no compile step uses it), and its
results still equal eager's, BatchNorm buffer updates and dropout included."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from warm_child import run_child

from tc_runtime import LAYOUT

SCRIPT = textwrap.dedent("""
    import copy, hashlib, json, sys, torch, tc
    import tc.backends, tc_inductor, warm_child

    counts = warm_child.install()  # traces, lowerings and builds: none on a warm start

    class Net(torch.nn.Module):
        def __init__(self, act):
            super().__init__()
            self.lin, self.bn, self.act = torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), act()
            self.drop = torch.nn.Dropout(0.25)

        def forward(self, x):
            return self.drop(self.act(self.bn(self.lin(x))))

    act = {"relu": torch.nn.ReLU, "gelu": torch.nn.GELU}[sys.argv[1]]
    torch.manual_seed(0)
    eager = Net(act)
    mine = copy.deepcopy(eager)
    compiled = tc.compile(mine, options={"fallback": False})
    x = torch.randn(4, 8)
    with torch.no_grad():                                # inference: eval mode, no dropout
        eager.eval(), mine.eval()
        torch.testing.assert_close(compiled(x), eager(x))
    eager.train(), mine.train()                          # training: batch statistics, dropout
    xe, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = compiled(xm)
    kept = (got.detach() != 0).to(got.dtype)             # eager with the compiled call's mask
    want = eager.act(eager.bn(eager.lin(xe))) * kept / 0.75
    torch.testing.assert_close(got, want)
    cot = torch.randn_like(got)
    (got * cot).sum().backward()
    (want * cot).sum().backward()
    torch.testing.assert_close(xm.grad, xe.grad)
    for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
    for (name, b), c in zip(eager.named_buffers(), mine.buffers()):
        torch.testing.assert_close(c, b, msg=name)
    store = tc.backends.artifact_cache()
    kinds = {k: v["entries"] for k, v in store.stats().items()}
    print(json.dumps({"hits": store.counters.hits, "misses": store.counters.misses, "kinds": kinds,
                      "by_kind": store.counters.by_kind, "networkx": "networkx" in sys.modules, **counts}))
""")


def run(cache: Path, act: str = "relu") -> dict:  # the model with this activation, in a new process
    return run_child(SCRIPT, [act], {"TC_CACHE_DIR": str(cache)}, timeout=300)


# A changed model missing is tested without processes in tc-autograd's test_trace_cache.py.


@pytest.mark.slow  # cold and warm compiles in fresh processes
def test_fresh_process_reads_traced_graphs_back_and_matches_eager(tmp_path):
    cold = run(tmp_path)
    assert cold["kinds"]["aot_trace"] == 2  # one inference and one training variant
    assert cold["traces"] == 2 and cold["lowerings"] >= 3, cold
    warm = run(tmp_path)
    assert warm["kinds"] == cold["kinds"], "a warm process adds no entries"
    assert warm["misses"] == 0 and warm["hits"] >= 2 + cold["kinds"]["inductor_graph"]
    # read back, not rebuilt: no trace, no lowering, no g++, no partition or fusion DAG
    assert (warm["traces"], warm["lowerings"], warm["builds"], warm["networkx"]) == (0, 0, 0, False), warm
    assert all(row["misses"] == 0 for row in warm["by_kind"].values()), warm["by_kind"]
    # A damaged entry (the store's checksum catches this one) is a miss: traced again, rewritten;
    # the traced graphs are the same, so the inductor's compiled graphs still hit.
    damaged = list((tmp_path / LAYOUT / "aot_trace").rglob("*.bin"))
    assert len(damaged) == 2
    for path in damaged:
        path.write_bytes(path.read_bytes()[:-20])
    again = run(tmp_path)
    assert again["kinds"] == cold["kinds"] and again["misses"] == 2, (cold, again)
    assert again["by_kind"]["aot_trace"]["misses"] == 2 and again["traces"] == 2, again
    assert again["lowerings"] == 0 and again["builds"] == 0, again
