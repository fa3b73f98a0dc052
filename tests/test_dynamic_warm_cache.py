"""A warm start of a *dynamic* program: a fresh process whose ``TC_CACHE_DIR`` holds what an earlier
process compiled for graphs with size symbols (``dynamic=True``, ``tc.mark_dynamic``) reads every
layer back: no tc_autograd trace, no tc_inductor lowering, no C++ (or Triton) kernel built, no
artifact-cache miss, at sizes the first process never saw; outputs and gradients equal eager's;
and the size relations the first trace relied on still guard the cached graphs: a call that
breaks one is compiled again (and right), never run on the cached trace."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from warm_child import run_child

SCRIPT = textwrap.dedent("""
    import copy, json, sys, torch, tc
    import tc.backends, tc_inductor, warm_child

    counts = warm_child.install()  # traces, lowerings and builds: none on a warm start
    triton_before = tc_inductor.compile_counters()["triton_kernels"]

    class Block(torch.nn.Module):  # pre-norm attention + GELU MLP over [batch, seq, 16]
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(16), torch.nn.LayerNorm(16)
            self.qkv, self.proj = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-2, -1) * 8 ** -0.5, dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, 16))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    def pair(x, y, w):  # adding x to y makes the trace rely on their first dims being equal
        return torch.relu(x + y) @ w

    mode, sizes = sys.argv[1], [tuple(map(int, s.split("x"))) for s in sys.argv[2].split(",")]
    options = {"fallback": False, **({"backend": "triton"} if mode.endswith("triton") else {})}
    torch.manual_seed(0)
    eager = Block()
    mine = copy.deepcopy(eager)
    if mode.startswith("pair"):
        w = torch.randn(8, 4)
        compiled = tc.compile(pair, dynamic=True, options=options)
        for n, m in sizes:
            x, y = torch.randn(n, 8), torch.randn(m, 8)
            torch.testing.assert_close(compiled(x, y, w), pair(x, y, w))
    else:
        compiled = tc.compile(mine, dynamic=True if mode.startswith("dynamic") else None, options=options)
        for b, t in sizes:
            x = torch.randn(b, t, 16)
            if mode.startswith("marked"):
                tc.mark_dynamic(x, 1)
            with torch.no_grad():                                        # inference
                torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
            xe, xm = x.clone().requires_grad_(), x.clone().requires_grad_()   # training
            if mode.startswith("marked"):
                tc.mark_dynamic(xm, 1)
            got, want = compiled(xm), eager(xe)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            cot = torch.randn_like(want)
            (got * cot).sum().backward()
            (want * cot).sum().backward()
            torch.testing.assert_close(xm.grad, xe.grad, rtol=1e-4, atol=1e-5)
            for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
                p.grad = q.grad = None
    store = tc.backends.artifact_cache()
    counts["triton"] = tc_inductor.compile_counters()["triton_kernels"] - triton_before
    print(json.dumps({"misses": {k: v["misses"] for k, v in store.counters.by_kind.items() if v["misses"]},
                      "hits": store.counters.hits, **counts}))
""")


def run(cache: Path, mode: str, sizes: str) -> dict:
    env = {"TC_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"), "TRITON_INTERPRET": "1"}
    return run_child(SCRIPT, [mode, sizes], env, timeout=600)


def assert_nothing_rebuilt(warm: dict) -> None:
    assert warm["misses"] == {} and warm["hits"] > 0, warm
    assert (warm["traces"], warm["lowerings"], warm["builds"]) == (0, 0, 0), warm


WARM_SIZES = {"dynamic": "3x7,3x13", "marked": "2x7,2x13",
              # automatic dynamic: static at the first size, symbolic from the recompile on (which
              # dims went dynamic is not remembered across processes: the first size must repeat)
              "auto": "2x5,2x9,2x13"}


@pytest.mark.slow  # cold and warm compiles in fresh processes
@pytest.mark.parametrize("mode", ["dynamic", "marked", "auto"])
def test_warm_process_reads_every_symbolic_layer_back(tmp_path, mode):
    """Inference and training of a transformer-ish block; the warm process runs sizes the cold one
    never saw."""
    cold = run(tmp_path, mode, "2x5,2x9")
    assert cold["traces"] == (4 if mode == "auto" else 2) and cold["lowerings"] >= 3 and cold["builds"] > 0, cold
    warm = run(tmp_path, mode, WARM_SIZES[mode])
    assert_nothing_rebuilt(warm)


@pytest.mark.slow
def test_a_cached_trace_keeps_its_guards(tmp_path):
    """The cold trace of ``x + y`` relied on ``x.shape[0] == y.shape[0]``; the warm process reads
    it back for equal sizes, and a call broadcasting a size-1 ``y`` compiles again, matching eager."""
    cold = run(tmp_path, "pair", "6x6")
    assert cold["traces"] == 1, cold
    warm = run(tmp_path, "pair", "9x9,4x4")
    assert_nothing_rebuilt(warm)
    broken = run(tmp_path, "pair", "9x9,5x1")
    assert broken["traces"] + broken["lowerings"] >= 1, broken  # the broadcast was compiled anew


@pytest.mark.slow
def test_warm_process_rebuilds_no_triton_kernel(tmp_path):
    """The Triton back end (the interpreter on the CPU): the warm process reads the kernel sources
    back with the compiled graph (Triton's own cache holds the binaries on a GPU) and lowers nothing."""
    cold = run(tmp_path, "pair-triton", "6x6")
    assert cold["traces"] == 1 and cold["triton"] > 0, cold
    warm = run(tmp_path, "pair-triton", "11x11")
    assert_nothing_rebuilt(warm)
