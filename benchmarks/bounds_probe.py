"""How much a bounds check on a data-dependent index costs a gather kernel, by way of checking.

Run on the GPU host: ``python3 benchmarks/bounds_probe.py``. One embedding-shaped gather (rows of
a table picked by an index tensor, flattened as tc's pointwise kernels are), written four ways:

- ``none``: no check (the speed to match; wrong on a bad index);
- ``assert``: ``tl.device_assert`` on every element, compiled with ``debug=True`` (tc until now);
- ``block``: the index clamped into range, and one assert per program on the block's
  ``max(bad)``, compiled with ``debug=True``;
- ``flag``: the index clamped into range, a bad one stored to a flag with a masked store (no
  debug mode), and one tiny debug kernel asserting the flag is clear, launched after.

Prints GB/s for each and the cost relative to ``none``, and checks each variant catches a bad index.
Then tc's own kernels for the indirect cases of ``benchmarks/kernels.py``, compiled with their
checks and without them (the check replaced by the raw index, for this measurement only).
"""

from __future__ import annotations

import subprocess
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _none(w, idx, out, xnumel, D: tl.constexpr, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < xnumel
    i = tl.load(idx + x // D, m)
    tl.store(out + x, tl.load(w + i * D + x % D, m), m)


@triton.jit(debug=True)
def _assert(w, idx, out, xnumel, n, D: tl.constexpr, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < xnumel
    i = tl.load(idx + x // D, m)
    tl.device_assert(((i >= 0) & (i < n)) | ~m, "index out of bounds")
    tl.store(out + x, tl.load(w + i * D + x % D, m), m)


@triton.jit(debug=True)
def _block(w, idx, out, xnumel, n, D: tl.constexpr, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < xnumel
    i = tl.load(idx + x // D, m)
    bad = ((i < 0) | (i >= n)) & m
    tl.device_assert(tl.max(bad.to(tl.int32), 0) == 0, "index out of bounds")
    i = tl.minimum(tl.maximum(i, 0), n - 1)
    tl.store(out + x, tl.load(w + i * D + x % D, m), m)


@triton.jit
def _flag(w, idx, out, flag, xnumel, n, D: tl.constexpr, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < xnumel
    i = tl.load(idx + x // D, m)
    bad = ((i < 0) | (i >= n)) & m
    tl.store(flag + x * 0, i + 1, bad)
    i = tl.minimum(tl.maximum(i, 0), n - 1)
    tl.store(out + x, tl.load(w + i * D + x % D, m), m)


@triton.jit(debug=True)
def _flag_clear(flag):
    tl.device_assert(tl.load(flag) == 0, "index out of bounds")


XBLOCK = 1024


def run(variant: str, w: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, flag: torch.Tensor) -> None:
    n, d = w.shape
    xnumel = out.numel()
    grid = (triton.cdiv(xnumel, XBLOCK),)
    if variant == "none":
        _none[grid](w, idx, out, xnumel, D=d, XBLOCK=XBLOCK)
    elif variant == "assert":
        _assert[grid](w, idx, out, xnumel, n, D=d, XBLOCK=XBLOCK, sanitize_overflow=False)
    elif variant == "block":
        _block[grid](w, idx, out, xnumel, n, D=d, XBLOCK=XBLOCK, sanitize_overflow=False)
    else:
        _flag[grid](w, idx, out, flag, xnumel, n, D=d, XBLOCK=XBLOCK)
        _flag_clear[(1,)](flag, sanitize_overflow=False)


VARIANTS = ("none", "assert", "block", "flag")


def _catches(variant: str) -> str:
    """Run one bad index in a child process (a device-side assert ends the CUDA context)."""
    code = ("import torch, sys; sys.path.insert(0, 'benchmarks'); import bounds_probe as b;"
            "w = torch.randn(64, 128, device='cuda'); i = torch.randint(0, 64, (256,), device='cuda'); i[77] = 64;"
            "o = torch.empty(256, 128, device='cuda'); f = torch.zeros(1, dtype=torch.int64, device='cuda');"
            f"b.run({variant!r}, w, i, o, f); torch.cuda.synchronize(); print('NOT CAUGHT')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return "caught" if done.returncode != 0 and "NOT CAUGHT" not in done.stdout else "NOT caught"


def _tc_kernels() -> None:
    import kernels  # benchmarks/kernels.py: its cases and graph builder

    import tc_inductor
    from tc_inductor import kir

    checked_index = kir.checked_index
    for name, build, make, nbytes in kernels.CASES:
        if "indirect" not in name and "embedding" not in name:
            continue
        inputs = make()
        times = {}
        for label, check in (("unchecked", lambda value, size, wraps: kir.cast(value, torch.int64)),
                             ("checked", checked_index)):
            kir.checked_index = check
            try:
                k = tc_inductor.compile(kernels.graph_of(build, inputs), inputs, {"cache": False})
            finally:
                kir.checked_index = checked_index
            k(*inputs)
            times[label] = triton.testing.do_bench(lambda k=k, a=inputs: k(*a), warmup=50, rep=300)
        moved = nbytes(*inputs)
        print(f"tc {name:28s} unchecked {moved / times['unchecked'] / 1e6:6.0f} GB/s  checked "
              f"{moved / times['checked'] / 1e6:6.0f} GB/s  cost {100 * (times['checked'] / times['unchecked'] - 1):+5.1f}%")


def main() -> int:
    if not torch.cuda.is_available():
        print("bounds_probe: needs a CUDA GPU")
        return 0
    print(torch.cuda.get_device_name(), "triton", triton.__version__)
    for rows, d, n in [(32768, 1024, 65536), (8192, 768, 50257), (4096, 4096, 32000)]:
        w = torch.randn(n, d, device="cuda")
        idx = torch.randint(0, n, (rows,), device="cuda")
        out = torch.empty(rows, d, device="cuda")
        flag = torch.zeros(1, dtype=torch.int64, device="cuda")
        want = torch.nn.functional.embedding(idx, w)
        nbytes = 2 * out.numel() * 4 + idx.numel() * 8
        base = None
        for variant in VARIANTS:
            run(variant, w, idx, out, flag)
            torch.testing.assert_close(out, want)
            ms = triton.testing.do_bench(lambda v=variant, a=(w, idx, out, flag): run(v, *a), warmup=50, rep=300)
            base = base or ms
            print(f"rows={rows:6d} d={d:5d}  {variant:7s} {nbytes / ms / 1e6:8.0f} GB/s  {ms * 1e3:8.1f} us  "
                  f"cost {100 * (ms / base - 1):+5.1f}%")
    for variant in VARIANTS[1:]:
        print(f"{variant}: a bad index is {_catches(variant)}")
    _tc_kernels()
    return 0


if __name__ == "__main__":
    sys.exit(main())
