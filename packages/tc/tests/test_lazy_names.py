"""``import tc`` loads names lazily; whatever is touched first, ``tc.export`` and ``tc.explain``
stay the functions (a submodule named like them would be bound over them on its import)."""

import subprocess
import sys

import pytest

FIRST_TOUCHES = ["tc.ExportError", "tc.ExplainReport", "tc.load", "tc.LoadError", "tc.ExportedProgram"]


@pytest.mark.parametrize("first", FIRST_TOUCHES)
def test_functions_stay_functions_whatever_is_read_first(first):
    code = (f"import tc, types; {first}; "
            "assert not isinstance(tc.export, types.ModuleType) and callable(tc.export); "
            "assert not isinstance(tc.explain, types.ModuleType) and callable(tc.explain)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
