"""Fixed slices of op_db (names as ``engine.op_key`` prints them), chosen to cover each kind of
lowering once: pointwise math and comparisons, casts, reductions, scans, views, indexing (every
bounds-checked gather path), layout ops, norms, matmul and convolution (extern), losses."""

FAST = (
    # pointwise
    "abs", "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "remainder", "pow", "exp",
    "log1p", "sigmoid", "where", "clamp", "maximum", "copysign", "eq", "logical_not",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.hardtanh",
    # reductions and scans
    "sum", "mean", "amax", "argmax", "var", "prod", "logsumexp", "cumsum", "softmax", "nn.functional.layer_norm",
    # views and layout
    "transpose", "permute", "reshape", "narrow", "expand", "cat", "stack", "flip", "nn.functional.pad.constant",
    "tril",
    # indexing (the bounds-checked paths)
    "gather", "index_select", "nn.functional.embedding", "take_along_dim", "__getitem__",
    # extern
    "mm", "addmm", "nn.functional.conv2d", "nn.functional.cross_entropy",
)

# Run with Triton kernels under TRITON_INTERPRET=1 (slow: a subset of the fast slice).
TRITON = (
    "add", "mul", "where", "sigmoid", "sum", "amax", "softmax", "nn.functional.layer_norm", "gather",
    "index_select", "nn.functional.embedding", "transpose", "cat",
)
