"""tc_autograd (under construction)."""

__version__ = "0.1.0"
