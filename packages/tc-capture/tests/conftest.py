import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Compiled frames are shared by every optimize() of a function with one back end: start clean."""
    import tc_capture

    tc_capture.reset()
    yield
