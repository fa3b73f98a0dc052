"""Max pooling's forward indices on the GPU: the kernel ``ptxas_bisect.py`` found (NOTES §30).

    python benchmarks/pool_index_probe.py            # on the GPU host; DISABLE_PTXAS_OPT=1 for -O0

timm's dla46_c training in float64 at 96x96 went wrong on the H200 in one kernel: the backward's
recomputation of a 2x2/2 max pooling's indices over a 6x6 map (4 x 128 planes), fused beside a
batch norm and ReLU. This runs that kernel as tc generated it then (int64 index math; the
lowering now computes it in int32), and variants of its text, at each config whose block
divides the 4,608 elements (the kernel is unmasked), against torch's
``max_pool2d_with_indices``; then tc end to end over map sizes and dtypes. Prints one line per
run: the wrong indices (and values of the other half) out of 4,608 (or the size's count).
``TRITON_PTXAS_PATH`` picks the assembler.

On the H200 (Triton 3.6; ptxas 12.8, 12.9 and 13.0 alike) the kernel as generated had 884 wrong
indices at 512/4 and 866 at 256/2, right at the other configs and at ``-O0``; it was right
without the batch-norm half, with int32 index math, in float32, and with masked loads.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def kernel(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, out_ptr0, out_ptr1, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x0 = (xindex // 1152)
    x1 = ((xindex // 9) % 128)
    x2 = ((xindex // 3) % 3)
    x3 = (xindex % 3)
    tmp1 = tl.load(in_ptr0 + (xindex))
    tmp2 = tl.load(in_ptr1 + (x1))
    tmp3 = (tmp1 - tmp2)
    tmp4 = tl.load(in_ptr2 + (x1))
    tmp5 = (tmp3 * tmp4)
    tmp6 = tl.load(in_ptr3 + (x1))
    tmp7 = (tmp5 * tmp6)
    tmp8 = tl.load(in_ptr4 + (x1))
    tmp9 = (tmp7 + tmp8)
    tmp10 = tl.full([1], 0.0, tl.float64)
    tmp11 = tl.maximum(tmp9, tmp10, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr0 + (xindex), tl.broadcast_to(tmp11, [XBLOCK]))
    tmp12 = tl.load(in_ptr5 + ((7 + (2 * x3) + (12 * x2) + (36 * x1) + (4608 * x0))))
    tmp13 = tl.load(in_ptr5 + ((6 + (2 * x3) + (12 * x2) + (36 * x1) + (4608 * x0))))
    tmp14 = tl.load(in_ptr5 + ((1 + (2 * x3) + (12 * x2) + (36 * x1) + (4608 * x0))))
    tmp15 = tl.load(in_ptr5 + (((2 * x3) + (12 * x2) + (36 * x1) + (4608 * x0))))
    tmp16 = (tmp14 > tmp15)
    tmp17 = (tmp14 != tmp14)
    tmp18 = (tmp16 | tmp17)
    tmp19 = tl.where(tmp18, tmp14, tmp15)
    tmp20 = (tmp13 > tmp19)
    tmp21 = (tmp13 != tmp13)
    tmp22 = (tmp20 | tmp21)
    tmp23 = tl.where(tmp22, tmp13, tmp19)
    tmp24 = (tmp12 > tmp23)
    tmp25 = (tmp12 != tmp12)
    tmp26 = (tmp24 | tmp25)
    tmp27 = (tl.zeros([1], tl.int64) + (1 + (2 * x2)))
    tmp28 = tl.full([1], 6, tl.int64)
    tmp29 = (tmp27 * tmp28)
    tmp30 = (tl.zeros([1], tl.int64) + (1 + (2 * x3)))
    tmp31 = (tmp29 + tmp30)
    tmp32 = (tl.zeros([1], tl.int64) + (2 * x3))
    tmp33 = (tmp29 + tmp32)
    tmp34 = (tl.zeros([1], tl.int64) + (2 * x2))
    tmp35 = (tmp34 * tmp28)
    tmp36 = (tmp35 + tmp30)
    tmp37 = (tmp35 + tmp32)
    tmp38 = tl.where(tmp18, tmp36, tmp37)
    tmp39 = tl.where(tmp22, tmp33, tmp38)
    tmp40 = tl.where(tmp26, tmp31, tmp39)
    tl.store(out_ptr1 + (xindex), tl.broadcast_to(tmp40, [XBLOCK]))
'''


def _drop(text: str, first: str, last: str) -> str:
    lines = text.splitlines()
    a = next(i for i, line in enumerate(lines) if line.strip().startswith(first))
    b = next(i for i, line in enumerate(lines) if line.strip().startswith(last))
    return "\n".join(lines[:a] + lines[b + 1:])


VARIANTS = {
    "as generated": lambda t: t,
    "index only (no batch-norm half)": lambda t: _drop(t, "tmp1 =", "tl.store(out_ptr0"),
    "no NaN test": lambda t: re.sub(r"\((tmp\d+) != \1\)", "(xindex < 0)", t),
    "int32 index math": lambda t: t.replace("tl.int64", "tl.int32"),
    "float32 data": lambda t: t.replace("tl.float64", "tl.float32"),
    "masked loads and stores": lambda t: re.sub(r"tl\.load\(([^\n]*)\)\n", r"tl.load(\1, xmask)\n", t)
    .replace("[XBLOCK]))", "[XBLOCK]), xmask)"),
}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: under TRITON_INTERPRET=1
CONFIGS = [(512, 4), (512, 2), (256, 2), (256, 1), (128, 1), (512, 8), (256, 4)]


def _load(text: str, tag: str):
    path = Path(tempfile.mkdtemp()) / f"probe_{tag}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def kernel_variants() -> None:
    g = torch.Generator().manual_seed(0)
    for name, mutate in VARIANTS.items():
        dtype = torch.float32 if "float32" in name else torch.float64
        itype = torch.int32 if "int32" in name else torch.int64
        b = torch.randn(4, 128, 6, 6, generator=g, dtype=dtype).to(DEVICE)
        a = torch.randn(4, 128, 3, 3, generator=g, dtype=dtype).to(DEVICE)
        params = [torch.randn(128, generator=g, dtype=dtype).to(DEVICE) for _ in range(4)]
        want = F.max_pool2d_with_indices(b, 2, 2)[1]
        kernel = _load(mutate(KERNEL), re.sub(r"\W", "_", name))
        row = []
        for xblock, warps in CONFIGS:
            out0 = torch.empty_like(a)
            out1 = torch.full(want.shape, -1, dtype=itype, device=DEVICE)
            kernel[(4608 // xblock,)](a, *params, b, out0, out1, 4608, XBLOCK=xblock, num_warps=warps)
            wrong = (out1.long() != want).sum().item()
            if "batch-norm" not in name:  # the other half's values, to rounding (the GPU fuses a multiply-add)
                p = [q[:, None, None] for q in params]
                ref = torch.relu((a - p[0]) * p[1] * p[2] + p[3])
                wrong += (~torch.isclose(out0, ref, rtol=1e-5 if dtype == torch.float32 else 1e-12)).sum().item()
            row.append(f"{xblock}/{warps}: {wrong:4d}")
        print(f"  {name:34} " + "  ".join(row), flush=True)


def end_to_end() -> None:
    import tc

    def pool(x, a, m, s):
        return torch.relu((a - m) * s), F.max_pool2d_with_indices(x, 2, 2)

    for dtype in (torch.float64, torch.float32):
        row = []
        for size in (4, 5, 6, 7, 8, 10, 12, 14, 24):
            g = torch.Generator().manual_seed(size)
            x = torch.randn(4, 128, size, size, generator=g, dtype=dtype).to(DEVICE)
            a = torch.randn(4, 128, size // 2, size // 2, generator=g, dtype=dtype).to(DEVICE)
            m, s = (torch.randn(128, 1, 1, generator=g, dtype=dtype).to(DEVICE) for _ in range(2))
            tc.reset()
            got = tc.compile(pool, fullgraph=True)(x, a, m, s)
            want = pool(x, a, m, s)
            wrong = (got[1][1] != want[1][1]).sum().item()
            row.append(f"{size}: {wrong}/{want[1][1].numel()}")
        print(f"  tc, {str(dtype)[6:]:8} " + "  ".join(row), flush=True)


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU", file=sys.stderr)
    print("wrong indices of 4608, the kernel's text and variants (XBLOCK/num_warps):")
    kernel_variants()
    print("tc end to end, max_pool2d_with_indices(2, 2) beside a pointwise op, by map size:")
    end_to_end()
