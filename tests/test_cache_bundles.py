"""A warm artifact cache moves between machines: save a signed bundle, load it with the same key
into an empty cache directory in a fresh process, and the inductor skips lowering and scheduling there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import sys, torch, tc
    from tc_models import MLP
    torch.manual_seed(0)
    model = tc.compile(MLP().eval())
    if sys.argv[1] == "load":
        stats = tc.load_cache_artifacts(open(sys.argv[2], "rb").read(), key=b"shared secret")
        print("loaded", stats)
    with torch.no_grad():
        model(torch.randn(4, 32))
    if sys.argv[1] == "save":
        open(sys.argv[2], "wb").write(tc.save_cache_artifacts(key=b"shared secret"))
""")


def run(mode: str, bundle: Path, cache: Path) -> str:
    env = dict(os.environ, TC_CACHE_DIR=str(cache), TC_LOGS="perf_hints",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(bundle)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow  # cold and warm compiles in fresh processes
def test_bundle_warms_an_empty_cache_in_another_process(tmp_path):
    bundle = tmp_path / "warm.bundle"
    cold = run("save", bundle, tmp_path / "first")
    assert "cache_hit" not in cold and bundle.stat().st_size > 0
    warm = run("load", bundle, tmp_path / "second")
    assert "loaded" in warm and "cache_hit" in warm, warm[-2000:]
