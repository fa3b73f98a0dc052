"""Probe of the Triton 3.6 miscompile of max pooling's backward gather (NOTES §27, §28).

Generates tc's Triton kernel for the backward of a bf16 channels-last max pooling (k3 s2 p1, the
failing case; made for CUDA tensors, as the lowering runs on CUDA again since §29), then
launches it on the GPU by hand at a grid of (XBLOCK, num_warps) and in text variants, counting
gradients that differ from a float64 reference built from the indices. On the H200 (2026-12-01)
the generated ``(1 + x) // 2`` was wrong at exactly 16 elements a thread; ``>> 1``, int64
indices and ptxas at ``-O0`` were right.

    python benchmarks/gather_probe.py            # on the GPU host

Each variant runs in a subprocess of its own (Triton's knobs are read per process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = [(256, 1), (512, 1), (1024, 1), (1024, 2), (1024, 4), (2048, 4), (4096, 4), (2048, 8), (4096, 8)]
def _int64_index(src: str) -> str:
    return src.replace("xindex = xoffset + tl.arange(0, XBLOCK)", "xindex = xoffset + tl.arange(0, XBLOCK).to(tl.int64)")


VARIANTS = {
    "generated": lambda s: s,
    "shift": lambda s: s.replace("// 2)", ">> 1)"),
    "int64_index": _int64_index,
}


def kernel_source(device: str = "cuda") -> tuple[str, dict]:
    import torch

    import tc_inductor
    import tc_ir

    aten = torch.ops.aten
    torch.manual_seed(0)
    x = torch.randn(4, 16, 15, 14, dtype=torch.bfloat16, device=device).contiguous(memory_format=torch.channels_last)
    args = ([3, 3], [2, 2], [1, 1], [1, 1], False)
    _, idx = aten.max_pool2d_with_indices.default(x, *args)
    grad = torch.randn(idx.shape, dtype=torch.bfloat16, device=device)
    g = tc_ir.Graph()
    nodes = [g.input(n, tc_ir.TensorSpec.from_tensor(t)) for n, t in (("g", grad), ("x", x), ("i", idx))]
    g.output(g.call(aten.max_pool2d_with_indices_backward.default, nodes[0], nodes[1], *args, nodes[2]))
    k = tc_inductor.compile(g, [grad, x, idx], {"backend": "triton", "cache": False})
    (src,) = [s for s in k.kernels if "tc_poi" in s]
    return src, {"x": x.cpu(), "idx": idx.cpu(), "grad": grad.cpu()}


def run_variant(src: str, data: dict, xblock: int, warps: int, trials: int = 2) -> dict:
    import torch
    import triton

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("probe_kernel", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = next(getattr(module, n) for n in dir(module) if n.startswith("tc_poi"))
    x, bad, worst, where = data["x"], 0, 0.0, []
    for trial in range(trials):
        grad = torch.randn(data["idx"].shape, dtype=torch.bfloat16) if trial else data["grad"]
        idx = data["idx"]
        ref = torch.zeros(x.shape[0], x.shape[1], x.shape[2] * x.shape[3], dtype=torch.float64)
        ref.scatter_add_(2, idx.flatten(2), grad.double().flatten(2))
        ref = ref.view(x.shape)
        out = torch.full_like(x, float("nan")).cuda()  # poisoned: every element must be written
        n = x.numel()
        fn[(triton.cdiv(n, xblock),)](idx.cuda().contiguous(memory_format=torch.channels_last),
                                      grad.cuda(), out, n, XBLOCK=xblock, num_warps=warps)
        torch.cuda.synchronize()
        got = out.cpu().double()
        wrong = ~((got - ref).abs() <= 1e-2 + 1e-2 * ref.abs())
        bad += int(wrong.sum())
        worst = max(worst, float((got - ref).abs().nan_to_num(1e9).max()))
        if trial == 0:
            where = [list(map(int, w)) for w in wrong.nonzero()[:6]]
    return {"wrong": bad, "of": trials * x.numel(), "max_err": worst, "first_wrong_nchw": where}


def main() -> None:
    if "--child" in sys.argv:  # one variant at several configs: ``--child VARIANT PATH XB,NW ...``
        import torch
        variant, blob = sys.argv[2], torch.load(sys.argv[3])
        for config in sys.argv[4:]:
            xb, nw = map(int, config.split(","))
            print(json.dumps({"XBLOCK": xb, "num_warps": nw,
                              **run_variant(VARIANTS[variant](blob["src"]), blob["data"], xb, nw)}), flush=True)
        return
    import torch
    src, data = kernel_source()
    path = os.path.join(tempfile.mkdtemp(), "probe.pt")
    torch.save({"src": src, "data": data}, path)
    out = os.environ.get("OUT")
    if out:
        open(os.path.join(out, "pool_backward_kernel.py"), "w").write(src)
    sixteen = [(512, 1), (2048, 4)]
    plans = [("generated", CONFIGS, {}), ("shift", CONFIGS, {}), ("int64_index", sixteen, {}),
             ("generated", sixteen, {"DISABLE_PTXAS_OPT": "1"})]
    for variant, configs, env in plans:
        r = subprocess.run([sys.executable, __file__, "--child", variant, path, *(f"{x},{w}" for x, w in configs)],
                           capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
        tag = variant + ("+ptxas_O0" if env else "")
        if r.returncode:
            print(f"{tag}: ERR {r.stderr[-400:]}", flush=True)
        for line in r.stdout.strip().splitlines():
            row = json.loads(line)
            xb, nw = row.pop("XBLOCK"), row.pop("num_warps")
            print(f"{tag:22} XBLOCK={xb:5} warps={nw}  ({xb // (32 * nw):3}/thread)  {json.dumps(row)}", flush=True)


if __name__ == "__main__":
    main()
