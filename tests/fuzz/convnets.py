"""Random small convolution nets through ``tc.compile``, against eager: forward, input and
parameter gradients (accumulated over both calls; no two in one memory), batch-norm running
statistics, on two calls with fresh inputs (the second of another height: a recompile over
symbolic sizes).

A net is 2–5 layers from: convolutions (kernel 1 or 3, stride 1 or 2, with or without bias),
batch norm + relu, max pooling (kernel 2–3, stride, padding, dilation, ``ceil_mode``), average
pooling (``ceil_mode``, ``count_include_pad``), a residual 3x3 convolution, a float64 round trip
(as autocast's casts), then a 1x1 convolution; in training mode 70% of the time. Every net of a
run is an instance of one class, so later nets meet ``forward``'s cache with other weight shapes:
automatic dynamic makes them symbols, as two blocks of one class with different kernels would.
The layout around the convolutions is forced (``conv_layout``), so the channels-last path runs
on the CPU too. ``TC_FUZZ_DEVICE=cuda`` runs the nets on a GPU (Triton kernels; TF32 off, so
eager and tc compute the convolutions alike), ``TC_TEST_POINTWISE_CONFIG`` forces one block size
(tests/forced_configs.py).

    python tests/fuzz/convnets.py 300                     # seeds 0..299, conv_layout "always"
    python tests/fuzz/convnets.py 300 --start 1000 --layout never
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import tc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from forced_configs import force_configs  # noqa: E402

TOL = dict(atol=1e-4, rtol=1e-4, equal_nan=True)  # NaN where eager has NaN (seed 7023: -inf from a pool wholly in the padding)
DEVICE = torch.device(os.environ.get("TC_FUZZ_DEVICE", "cpu"))


class Net(nn.Module):
    """The layers drawn from ``r`` (see the module docstring)."""

    def __init__(self, r: random.Random):
        super().__init__()
        self.channels = ch = r.choice([3, 4])
        self.layers: list = []
        for _ in range(r.randint(2, 5)):
            kind = r.choice(["conv", "conv", "bn", "maxpool", "avgpool", "res", "cast"])
            if kind == "conv":
                out, k = r.choice([4, 6, 8]), r.choice([1, 3])
                self.layers.append(("conv", nn.Conv2d(ch, out, k, r.choice([1, 2]), k // 2, bias=r.random() < 0.5)))
                ch = out
            elif kind == "bn":
                self.layers.append(("bn", nn.BatchNorm2d(ch)))
            elif kind == "maxpool":
                k = r.choice([2, 3])
                self.layers.append(("maxpool", dict(kernel_size=k, stride=r.choice([1, 2]), padding=r.choice([0, k // 2]),
                                                    dilation=r.choice([1, 1, 2]), ceil_mode=r.random() < 0.4)))
            elif kind == "avgpool":
                k = r.choice([2, 3])
                self.layers.append(("avgpool", dict(kernel_size=k, stride=r.choice([1, 2]), padding=r.choice([0, k // 2]),
                                                    ceil_mode=r.random() < 0.4, count_include_pad=r.random() < 0.5)))
            elif kind == "res":
                self.layers.append(("res", nn.Conv2d(ch, ch, 3, 1, 1)))
            else:
                self.layers.append(("cast", None))
        self.layers.append(("conv", nn.Conv2d(ch, 5, 1)))
        self.mods = nn.ModuleList([m for _, m in self.layers if isinstance(m, nn.Module)])

    # eager (``ref``) lists here whether a max pooling returned an index past its input's plane
    # (a window wholly in the padding: dilation 2 over a 1-pixel map); eager's CPU backward then
    # writes that window's gradient into the next plane, so gradients are not compared
    out_of_plane: list | None = None

    def forward(self, x):
        for kind, m in self.layers:
            if kind == "conv":
                x = m(x)
            elif kind == "bn":
                x = F.relu(m(x))
            elif kind == "maxpool" and self.out_of_plane is not None:
                plane = x.shape[-2] * x.shape[-1]
                x, index = F.max_pool2d(x, return_indices=True, **m)
                self.out_of_plane.append(bool((index >= plane).any()))
            elif kind == "maxpool":
                x = F.max_pool2d(x, **m)
            elif kind == "avgpool":
                x = F.avg_pool2d(x, **m)
            elif kind == "res":
                x = F.relu(m(x) + x)
            else:
                x = x.to(torch.float64).relu().to(torch.float32)
        return x


def run(seed: int, layout: str = "always") -> str:
    """One net: ``"ok"``, ``"eager-error"`` (eager raised and tc raised too), ``"eager-ub"`` (the
    values match; eager's backward is undefined: ``Net.out_of_plane``), or ``"FAIL ..."``."""
    r = random.Random(seed)
    torch.manual_seed(seed)
    net = Net(r)
    ref = Net(random.Random(seed))
    ref.load_state_dict(net.state_dict())
    ref.out_of_plane = []
    net.to(DEVICE), ref.to(DEVICE)
    training = r.random() < 0.7
    net.train(training), ref.train(training)
    compiled = tc.compile(net, options={"conv_layout": layout})
    for height in (r.choice([9, 12, 16]), r.choice([9, 12, 16])):
        x = torch.randn(2, net.channels, height, 12).to(DEVICE)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        try:
            want = ref(xb)
        except RuntimeError as e:  # a pool over too small an image: tc must raise too
            try:
                compiled(xa)
            except RuntimeError:
                return "eager-error"
            return f"FAIL eager raised ({e}) and tc did not"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(xa)
        if fell := [str(w.message) for w in caught if str(w.message).startswith("tc:")]:
            return f"FAIL fell back: {fell[0][:200]}"
        try:
            torch.testing.assert_close(got, want, **TOL)
            if any(ref.out_of_plane):
                return "eager-ub"
            grad = torch.randn_like(want)
            got.backward(grad), want.backward(grad)
            torch.testing.assert_close(xa.grad, xb.grad, **TOL)
            for (name, p), q in zip(net.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=2e-4, rtol=2e-4, equal_nan=True,
                                           msg=lambda m, n=name: f"{n}: {m}")
            for a, b in zip(net.buffers(), ref.buffers()):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, equal_nan=True)
            storages = [p.grad.untyped_storage().data_ptr() for p in net.parameters() if p.grad is not None]
            assert len(set(storages)) == len(storages), "two parameters' .grad share memory"
        except AssertionError as e:
            return f"FAIL mismatch at height {height}: {str(e)[:300]}"
    return "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, nargs="?", default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--layout", default="always", choices=["always", "never", "auto"])
    args = parser.parse_args()
    force_configs()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for seed in range(args.start, args.start + args.n):
        try:
            outcome = run(seed, args.layout)
        except Exception as e:  # noqa: BLE001  (a crash inside tc: reported, the run goes on)
            outcome = f"FAIL {type(e).__name__}: {str(e)[:300]}"
        counts[outcome.split(" ")[0]] = counts.get(outcome.split(" ")[0], 0) + 1
        if outcome.startswith("FAIL"):
            print(f"seed {seed}: {outcome}", flush=True)
    print(f"{args.n} nets (seeds {args.start}..{args.start + args.n - 1}, conv_layout {args.layout}) in "
          f"{time.perf_counter() - t0:.0f} s: {counts}")
    return 1 if counts.get("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main())
