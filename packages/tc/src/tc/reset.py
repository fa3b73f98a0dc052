"""``tc.reset``: forget every compiled entry, as if the process had just started."""

import tc_capture


def reset() -> None:
    """Clear capture's caches of compiled frames (guards, entries, recompile counts)."""
    tc_capture.reset()
