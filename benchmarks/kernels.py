"""Bandwidth of tc_inductor's generated kernels on large CUDA tensors.

For each graph: achieved bandwidth (bytes a perfect kernel must move / time) of the
tc_inductor kernel, of torch eager and of torch.compile on the same computation, against the
measured device copy bandwidth. Prints a table; skips cleanly without CUDA.

    python3 benchmarks/kernels.py
"""

from __future__ import annotations

import sys
import time

import torch

import tc_inductor
import tc_ir

aten = torch.ops.aten


def bench(fn, *args, reps: int = 50) -> float:
    """Median milliseconds of ``fn(*args)`` measured with CUDA events."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def copy_bandwidth(nbytes: int) -> float:
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(dst.copy_, src)
    return 2 * nbytes / ms / 1e6  # GB/s


def graph_of(build, inputs):
    g = tc_ir.Graph()
    nodes = [g.input(f"in{i}", tc_ir.TensorSpec.from_tensor(t)) for i, t in enumerate(inputs)]
    g.output(build(g, *nodes))
    return g


CASES = [
    ("add+relu+mul (pointwise)", lambda g, x, y: g.call(aten.mul.Tensor, g.call(aten.relu.default, g.call(
        aten.add.Tensor, x, y)), 2.0), lambda: [torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")], 3),  # noqa: E501
    ("gelu (pointwise)", lambda g, x: g.call(aten.gelu.default, x), lambda: [torch.randn(8192, 8192, device="cuda")], 2),
    ("bf16 scale+cast (pointwise)", lambda g, x: g.call(aten.mul.Tensor, x, 0.5),
     lambda: [torch.randn(8192, 8192, device="cuda").bfloat16()], 2),
    ("row sum (reduction)", lambda g, x: g.call(aten.sum.dim_IntList, x, [-1]), lambda: [torch.randn(32768, 4096, device="cuda")], 1),  # noqa: E501
    ("softmax (row reduction)", lambda g, x: g.call(aten._softmax.default, x, -1, False),
     lambda: [torch.randn(32768, 4096, device="cuda")], 2),
    ("layer norm (row reduction)", lambda g, x, w, b: g.call(aten.native_layer_norm.default, x, [4096], w, b, 1e-5),
     lambda: [torch.randn(32768, 4096, device="cuda"), torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")], 2),
    # Data-dependent indices: every indirect load is bounds-checked (tc-inductor README); bytes are
    # the rows read, the indices and the output written.
    ("embedding (indirect rows)", lambda g, w, i: g.call(aten.embedding.default, w, i),
     lambda: [torch.randn(65536, 1024, device="cuda"), torch.randint(0, 65536, (32768,), device="cuda")],
     lambda w, i: 2 * i.numel() * w.shape[1] * w.element_size() + i.numel() * 8),
    ("embedding + add (fused)", lambda g, w, i, y: g.call(aten.add.Tensor, g.call(aten.embedding.default, w, i), y),
     lambda: [torch.randn(65536, 1024, device="cuda"), torch.randint(0, 65536, (32768,), device="cuda"),
              torch.randn(32768, 1024, device="cuda")],
     lambda w, i, y: 3 * y.numel() * y.element_size() + i.numel() * 8),
    ("gather dim 1 (indirect)", lambda g, x, i: g.call(aten.gather.default, x, 1, i),
     lambda: [torch.randn(8192, 8192, device="cuda"), torch.randint(0, 8192, (8192, 4096), device="cuda")],
     lambda x, i: i.numel() * (8 + 2 * x.element_size())),
]


def main() -> int:
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py: no CUDA device; skipping")
        return 0
    print(f"device: {torch.cuda.get_device_name()}")
    peak = copy_bandwidth(1 << 30)
    print(f"measured copy bandwidth: {peak:.0f} GB/s\n")
    header = (f"{'graph':32} {'tc GB/s':>9} {'%copy':>6} {'eager GB/s':>11} {'compile GB/s':>13} {'tc ms':>8} "
              f"{'kernels':>8} {'tc compile s':>13}")
    print(header)
    print("-" * len(header))
    for name, build, make, tensors_moved in CASES:
        inputs = make()
        g = graph_of(build, inputs)
        start = time.perf_counter()
        compiled = tc_inductor.compile(g, inputs, {"cache": False})  # Triton's own disk cache may still hit
        compile_s = time.perf_counter() - start
        eager = lambda *a, g=g: tc_ir.interpret(g, list(a))  # noqa: E731
        fn = lambda *a, g=g: tc_ir.interpret(g, list(a))  # noqa: E731
        try:
            compiled_torch = torch.compile(fn)
            compiled_torch(*inputs)
        except Exception as e:  # torch.compile is only a comparison here
            print(f"  (torch.compile failed on {name}: {type(e).__name__})")
            compiled_torch = None
        big = inputs[0]
        nbytes = tensors_moved(*inputs) if callable(tensors_moved) else tensors_moved * big.numel() * big.element_size()
        if "reduction" in name and "softmax" not in name and "layer" not in name:
            nbytes = big.numel() * big.element_size()
        ms_tc = bench(compiled, *inputs)
        ms_eager = bench(eager, *inputs)
        ms_tcc = bench(compiled_torch, *inputs) if compiled_torch else float("nan")
        bw = lambda ms, nbytes=nbytes: nbytes / ms / 1e6  # noqa: E731
        print(f"{name:32} {bw(ms_tc):9.0f} {100 * bw(ms_tc) / peak:5.0f}% {bw(ms_eager):11.0f} {bw(ms_tcc):13.0f} "
              f"{ms_tc:8.3f} {compiled.stats['kernels']:8d} {compile_s:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
