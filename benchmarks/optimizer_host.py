"""Host cost of ``tc.compile(opt.step)`` per step, by phase, on CPU.

GPT-2 small's 148 parameter shapes (as ``benchmarks/optimizer.py``) with every dim divided by
256, so the kernels' work is negligible and what is left is host cost: the cache hit's guards,
the capture runner (reading inputs, writing results back), tc_autograd's alias check and
copy-back, and the inductor wrapper (layout checks, allocations, kernel calls). Each phase is
timed around its function; figures are µs per step, the best of 7 rounds of 40 steps. Eager
``foreach=True`` on the same tensors is printed beside it.

    python benchmarks/optimizer_host.py --opts sgd,adamw
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def _shapes() -> list[tuple[int, ...]]:
    h = 768
    shapes = [(50257, h), (1024, h)]
    for _ in range(12):
        shapes += [(h,), (h,), (h, 3 * h), (3 * h,), (h, h), (h,), (h,), (h,), (h, 4 * h), (4 * h,), (4 * h, h), (h,)]
    shapes += [(h,), (h,)]
    return [tuple(max(1, d // 256) for d in s) for s in shapes]


def _optimizer(name: str) -> tuple[list, torch.optim.Optimizer]:
    g = torch.Generator().manual_seed(0)
    params = []
    for shape in _shapes():
        p = torch.nn.Parameter(torch.randn(shape, generator=g))
        p.grad = torch.randn(shape, generator=g)
        params.append(p)
    if name == "adamw":
        return params, torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    return params, torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True)


def _best(step, totals: dict, rounds: int = 7, steps: int = 40) -> dict:
    best: dict = {}
    for _ in range(rounds):
        totals.clear()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        totals["total"] = time.perf_counter() - start
        for k, v in totals.items():
            best[k] = min(best.get(k, float("inf")), v / steps * 1e6)
    return best


TOTALS: dict = {}


def _timed(key, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTALS[key] = TOTALS.get(key, 0.0) + time.perf_counter() - start
    return wrapper


def _instrument() -> None:
    import tc_autograd.runtime as rt
    import tc_inductor  # noqa: F401  (loads tc_inductor.compile)

    inductor = sys.modules["tc_inductor.compile"]
    inductor.CompiledGraph.__call__ = _timed("inductor", inductor.CompiledGraph.__call__)
    rt.check_unshared = _timed("alias check", rt.check_unshared)
    rt.copy_back = _timed("copy-back", rt.copy_back)


def measure(name: str) -> str:
    import tc
    from tc_capture.cache import frame_cache

    totals, timed = TOTALS, _timed
    params, opt = _optimizer(name)
    step = tc.compile(opt.step)
    for _ in range(4):  # compile; the second call recompiles once the state exists
        step()
    for cache in list(frame_cache.ALL_CACHES):
        for entries in cache.entries.values():
            for e in entries:
                if getattr(e.guard, "__name__", "") == "wrapper":
                    continue  # timed already (an earlier optimizer's entry)
                e.guard, e.run = timed("guards", e.guard), timed("runner", e.run)
    tc_best = _best(step, totals)
    _, eager = _optimizer(name)
    for _ in range(4):
        eager.step()
    eager_best = _best(eager.step, {})
    rest = tc_best["runner"] - tc_best["inductor"] - tc_best["alias check"] - tc_best["copy-back"]
    return (f"{name:6} tc {tc_best['total']:6.0f} | guards {tc_best['guards']:5.0f} runner's own {rest:5.0f} "
            f"alias check {tc_best['alias check']:4.0f} copy-back {tc_best['copy-back']:4.0f} "
            f"inductor call {tc_best['inductor']:5.0f} | eager foreach {eager_best['total']:6.0f} µs/step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opts", default="sgd,adamw")
    args = parser.parse_args()
    _instrument()
    for name in args.opts.split(","):
        print(measure(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
