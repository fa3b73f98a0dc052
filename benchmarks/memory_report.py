"""Where a training step's memory goes, eager against tc: one model of benchmarks/models.py.

Prints, for eager and for tc (each in its own process, as models.py runs cells): memory held
after the forward (what autograd keeps for the backward), the forward's peak, the backward's
peak (all above what the model and inputs take), and for tc the tensors its partition saves for
the backward, grouped by dtype and shape, largest first.

    python benchmarks/memory_report.py bert --shape 32x512
"""

from __future__ import annotations

import argparse
import copy
import logging
import re
import subprocess
import sys
from collections import Counter

import torch
from models import MODELS, _wrap  # noqa: E402  (run from the repository root or benchmarks/)

GiB = 2**30


class _Saved(logging.Handler):
    """Collects tc_autograd's 'saved for backward' summaries (TC_LOGS=aot)."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("saved for backward"):
            self.lines += text.splitlines()[1:]


def measure(name: str, variant: str, shape: tuple | None, device: str = "cuda") -> None:
    base, make_inputs = MODELS[name](device == "cpu", shape)
    model = copy.deepcopy(base).to(device).train()
    inputs = make_inputs(device)
    cuda = torch.cuda if device == "cuda" else _NoCuda()
    saved = _Saved()
    if variant == "tc":  # the summary comes through tc_autograd's "aot" logger
        logger = logging.getLogger("tc.aot")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(saved)
        logger.propagate = False
    fn = _wrap(variant, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)  # as models.py's training step
    for step in range(3):  # the last step is measured; the first compiles
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        start = cuda.memory_allocated()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = fn(*inputs).float().pow(2).mean()
        cuda.synchronize()
        after_forward, forward_peak = cuda.memory_allocated(), cuda.max_memory_allocated()
        cuda.reset_peak_memory_stats()
        loss.backward()
        cuda.synchronize()
        backward_peak, after_backward = cuda.max_memory_allocated(), cuda.memory_allocated()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        shared = sum(g.untyped_storage().nbytes() > g.numel() * g.element_size() for g in grads)
        del grads
        cuda.reset_peak_memory_stats()
        opt.step()
        cuda.synchronize()
        step_peak = cuda.max_memory_allocated()
        opt.zero_grad(set_to_none=True)
        del loss
        print(f"{variant:6} step {step}: {start / GiB:.2f} GiB allocated at its start")  # what outlives a step
    print(f"{variant:6} at step start {start / GiB:6.2f} GiB; above it: held after forward "
          f"{(after_forward - start) / GiB:6.2f}, forward peak {(forward_peak - start) / GiB:6.2f}, backward peak "
          f"{(backward_peak - start) / GiB:6.2f}, after backward {(after_backward - start) / GiB:6.2f}, "
          f"optimizer step peak {(step_peak - start) / GiB:6.2f}")
    print(f"{variant:6} gradients that are views of a larger storage: {shared}")
    if saved.lines:
        _summarise(saved.lines)
    _held_tensors(model, opt)


def _held_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Tensors of over 8 MiB that Python objects still reach after the step (not parameters,
    their gradients or optimizer state), with what refers to the largest."""
    import gc

    gc.collect()
    known = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
    known |= {id(t) for state in opt.state.values() for t in state.values() if isinstance(t, torch.Tensor)}
    big = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and id(o) not in known
           and o.is_cuda and o.untyped_storage().nbytes() > 8 * 2**20]
    total = sum({o.untyped_storage().data_ptr(): o.untyped_storage().nbytes() for o in big}.values())
    print(f"held by Python objects after the step: {len(big)} tensors, {total / GiB:.2f} GiB")
    for t in sorted(big, key=lambda o: -o.untyped_storage().nbytes())[:2]:
        print(f"  {tuple(t.shape)} {t.dtype} grad_fn={type(t.grad_fn).__name__ if t.grad_fn else None}")
        for ref in gc.get_referrers(t)[:4]:
            text = list(ref.keys())[:6] if isinstance(ref, dict) else str(ref)[:100].replace("\n", " ")
            print(f"    <- {type(ref).__name__}: {text}")
            for ref2 in gc.get_referrers(ref)[:3]:
                text = list(ref2.keys())[:6] if isinstance(ref2, dict) else str(ref2)[:100].replace("\n", " ")
                print(f"       <- {type(ref2).__name__}: {text}")


class _NoCuda:
    """CPU runs (the saved-tensor summary only): every memory figure reads 0."""

    def __getattr__(self, name: str):
        return lambda: 0


def _summarise(lines: list[str]) -> None:
    groups: Counter = Counter()
    counts: Counter = Counter()
    for line in lines:
        match = re.match(r"\s*%\S+: (\S+\[[^\]]*\])\S* .*?(\d+) B$", line)
        if match:
            groups[match.group(1)] += int(match.group(2))
            counts[match.group(1)] += 1
    total = sum(groups.values())
    print(f"tc saves {total / GiB:.2f} GiB in {sum(counts.values())} tensors; largest groups:")
    for spec, size in groups.most_common(12):
        print(f"  {counts[spec]:4d} x {spec:28} {size / GiB:6.3f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--shape", default="")
    parser.add_argument("--variant", default="")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.split("x")) if args.shape else None
    if args.variant:
        return measure(args.model, args.variant, shape, args.device)
    for variant in ("eager", "tc"):  # a process each: tc never imported where eager runs
        subprocess.run([sys.executable, __file__, args.model, "--shape", args.shape, "--variant", variant,
                        "--device", args.device], check=False)


if __name__ == "__main__":
    main()
