from .registry import register_backend  # noqa: F401  (the Triton backend comes next)
