"""Bandwidth of tc_inductor's generated kernels on large CUDA tensors, next to eager and torch.compile.

For each graph: achieved bandwidth (bytes a perfect kernel must move / time) of the tc_inductor
kernel, of torch eager and of torch.compile on the same computation, against the measured device
copy bandwidth. Prints a table; skips cleanly without CUDA.

Each compiler is measured in its own fresh process, so neither can change what the other
measures: tc (``tc_inductor`` on a ``tc_ir`` graph) in one, eager and torch.compile in another
that never imports a tc package. A case is written once, over a ``call(op, *args)`` function:
``tc_ir.Graph.call`` builds tc's graph from it, and calling the ATen op directly is eager (which
torch.compile compiles).

    python3 benchmarks/kernels.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

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


def _cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _ints(high: int, *shape):
    return torch.randint(0, high, shape, device="cuda")


# (name, build(call, *inputs), make inputs, bytes moved: a count of inputs-sized tensors or a function)
CASES = [
    ("add+relu+mul (pointwise)",
     lambda call, x, y: call(aten.mul.Tensor, call(aten.relu.default, call(aten.add.Tensor, x, y)), 2.0),
     lambda: [_cuda(8192, 8192), _cuda(8192, 8192)], 3),
    ("gelu (pointwise)", lambda call, x: call(aten.gelu.default, x), lambda: [_cuda(8192, 8192)], 2),
    ("bf16 scale+cast (pointwise)", lambda call, x: call(aten.mul.Tensor, x, 0.5),
     lambda: [_cuda(8192, 8192, dtype=torch.bfloat16)], 2),
    ("row sum (reduction)", lambda call, x: call(aten.sum.dim_IntList, x, [-1]), lambda: [_cuda(32768, 4096)],
     lambda x: x.numel() * x.element_size()),
    ("softmax (row reduction)", lambda call, x: call(aten._softmax.default, x, -1, False),
     lambda: [_cuda(32768, 4096)], 2),
    ("layer norm (row reduction)", lambda call, x, w, b: call(aten.native_layer_norm.default, x, [4096], w, b, 1e-5),
     lambda: [_cuda(32768, 4096), _cuda(4096), _cuda(4096)], 2),
    # Data-dependent indices: every indirect load is bounds-checked (tc-inductor README); bytes are
    # the rows read, the indices and the output written.
    ("embedding (indirect rows)", lambda call, w, i: call(aten.embedding.default, w, i),
     lambda: [_cuda(65536, 1024), _ints(65536, 32768)],
     lambda w, i: 2 * i.numel() * w.shape[1] * w.element_size() + i.numel() * 8),
    ("embedding + add (fused)", lambda call, w, i, y: call(aten.add.Tensor, call(aten.embedding.default, w, i), y),
     lambda: [_cuda(65536, 1024), _ints(65536, 32768), _cuda(32768, 1024)],
     lambda w, i, y: 3 * y.numel() * y.element_size() + i.numel() * 8),
    ("gather dim 1 (indirect)", lambda call, x, i: call(aten.gather.default, x, 1, i),
     lambda: [_cuda(8192, 8192), _ints(8192, 8192, 4096)],
     lambda x, i: i.numel() * (8 + 2 * x.element_size())),
]


def moved_bytes(moved, inputs: list) -> int:
    if callable(moved):
        return moved(*inputs)
    return moved * inputs[0].numel() * inputs[0].element_size()


def eager_call(op, *args):
    return op(*args)


# ---- one process per compiler ------------------------------------------------------------------------
def measure_tc() -> dict:
    """tc_inductor's kernels; this process never calls torch.compile."""
    import tc_inductor
    import tc_ir

    rows = {}
    for name, build, make, moved in CASES:
        inputs = make()
        g = tc_ir.Graph()
        nodes = [g.input(f"in{i}", tc_ir.TensorSpec.from_tensor(t)) for i, t in enumerate(inputs)]
        g.output(build(g.call, *nodes))
        start = time.perf_counter()
        compiled = tc_inductor.compile(g, inputs, {"cache": False})  # Triton's own disk cache may still hit
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        rows[name] = {"ms": bench(compiled, *inputs), "compile_s": compile_s, "kernels": compiled.stats["kernels"],
                      "bytes": moved_bytes(moved, inputs)}
    return rows


def measure_torch() -> dict:
    """Eager and torch.compile, in a process where no tc package is imported."""
    rows = {"__copy_gbps__": copy_bandwidth(1 << 30)}
    for name, build, make, moved in CASES:
        inputs = make()

        def fn(*args, build=build):
            return build(eager_call, *args)

        row = {"eager_ms": bench(fn, *inputs), "bytes": moved_bytes(moved, inputs)}
        try:
            start = time.perf_counter()
            compiled = torch.compile(fn)
            compiled(*inputs)
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - start
            row["ms"] = bench(compiled, *inputs)
        except Exception as e:  # torch.compile is only a comparison here
            row["error"] = f"{type(e).__name__}: {e}"[:200]
        rows[name] = row
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("tc", "tc_ir", "tc_inductor", "tc_capture",
                                                                  "tc_autograd", "tc_runtime"))
    if leaked:
        raise RuntimeError(f"tc modules imported in the torch.compile process: {leaked}")
    return rows


def run_child(which: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", which], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the {which} process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- the parent: the two processes' figures side by side ----------------------------------------------
def table(tc_rows: dict, torch_rows: dict) -> str:
    peak = torch_rows["__copy_gbps__"]
    header = (f"{'graph':32} {'tc GB/s':>9} {'%copy':>6} {'eager GB/s':>11} {'compile GB/s':>13} {'tc ms':>8} "
              f"{'kernels':>8} {'tc compile s':>13} {'compile s':>10}")
    lines = [f"measured copy bandwidth: {peak:.0f} GB/s\n", header, "-" * len(header)]
    for name, *_ in CASES:
        mine, theirs = tc_rows[name], torch_rows[name]
        nbytes = mine["bytes"]

        def bw(ms, nbytes=nbytes):
            return nbytes / ms / 1e6

        tcc = bw(theirs["ms"]) if "ms" in theirs else float("nan")
        lines.append(f"{name:32} {bw(mine['ms']):9.0f} {100 * bw(mine['ms']) / peak:5.0f}% {bw(theirs['eager_ms']):11.0f} "
                     f"{tcc:13.0f} {mine['ms']:8.3f} {mine['kernels']:8d} {mine['compile_s']:13.2f} "
                     f"{theirs.get('compile_s', float('nan')):10.2f}")
        if "error" in theirs:
            lines.append(f"  (torch.compile failed on {name}: {theirs['error']})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=("tc", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py: no CUDA device; skipping")
        return 0
    if args.child:
        print(json.dumps(measure_tc() if args.child == "tc" else measure_torch()))
        return 0
    print(f"device: {torch.cuda.get_device_name()}")
    tc_rows = run_child("tc")
    torch_rows = run_child("torch")
    print(table(tc_rows, torch_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
