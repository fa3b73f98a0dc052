"""What tc tells its user: ``TC_LOGS`` areas, ``TC_DEBUG_DIR`` dumps on a cold and a warm
cache, and the user's own frame in the traceback of an exception raised inside a compiled region.

Each environment-variable case runs in a fresh process, since the variables are read once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import traceback

import pytest
import torch

import tc

PROGRAM = textwrap.dedent("""
    import torch, tc
    fn = tc.compile(lambda x: torch.relu(x) * 2 + 1, options={"fallback": False})
    x = torch.randn(64)
    torch.testing.assert_close(fn(x), torch.relu(x) * 2 + 1)
    print("ok")
""")


def run(env: dict, code: str = PROGRAM) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300)


def test_unknown_log_area_is_an_error_listing_the_valid_ones():
    done = run({"TC_LOGS": "graph_breakz"}, "import tc")
    assert done.returncode != 0
    assert "unknown area(s) 'graph_breakz'" in done.stderr and "did you mean 'graph_breaks'" in done.stderr
    assert "valid areas: all, graph_breaks, recompiles, guards, graph" in done.stderr


def test_log_areas_of_every_package_are_known():
    import tc_ir

    for area in ["graph_breaks", "recompiles", "guards", "graph", "output_code", "perf_hints", "fusion", "all"]:
        assert area == "all" or area in tc_ir.logs.AREAS
    with pytest.raises(ValueError, match="not a log area"):
        tc_ir.logs.get_logger("grpah")


@pytest.mark.slow  # cold and warm compiles in fresh processes
def test_output_code_and_debug_dir_show_kernels_on_a_warm_cache_too(tmp_path):
    for run_name in ("cold", "warm"):
        dump = tmp_path / run_name
        done = run({"TC_CACHE_DIR": str(tmp_path / "cache"), "TC_LOGS": "output_code", "TC_DEBUG_DIR": str(dump)})
        assert done.returncode == 0 and "ok" in done.stdout, done.stderr
        assert "[tc.output_code] wrapper for" in done.stderr and "[tc.output_code] kernel k0 of" in done.stderr
        names = sorted(p.name for p in dump.iterdir())
        assert any("_kernel_k0" in n for n in names) and any("_wrapper_" in n for n in names), names
        kernel = next(p for p in dump.iterdir() if "_kernel_k0" in p.name).read_text()
        assert "relu" in kernel or "max" in kernel or "0.0" in kernel, kernel
    assert "read back from the cache" in done.stderr  # the second process did read the cache


def _user_model(a, b):
    h = torch.relu(a)
    return h @ b + 1  # a shape mismatch raises here, in the compiled function's own line


def test_user_exception_traceback_shows_the_users_frame():
    fn = tc.compile(_user_model)
    with pytest.raises(RuntimeError) as caught:
        fn(torch.randn(3, 4), torch.randn(5, 6))
    with pytest.raises(RuntimeError) as eager:
        _user_model(torch.randn(3, 4), torch.randn(5, 6))
    assert str(caught.value) == str(eager.value)  # eager's message, unchanged
    line = _user_model.__code__.co_firstlineno + 2
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert any(f.filename == __file__ and f.lineno == line for f in frames), "".join(traceback.format_list(frames))
