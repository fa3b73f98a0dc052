"""Training steps under CUDA graphs: eager vs tc default vs tc reduce-overhead (vs torch.compile).

    python3 benchmarks/cudagraph_training.py [--model mlp|cnn] [--steps 50] [--diag]
    python3 benchmarks/cudagraph_training.py --torch-compile   # in its own process: tc not imported

Each row is the median wall time of one training step (forward, backward, SGD-with-momentum step
on foreach kernels), after warm-up, synchronising after each step. ``--diag`` prints, for every
graphed callable tc made, its recorded graphs, replays and fallback reasons.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def make_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "mlp":
        layers = []
        for _ in range(6):
            layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
        return torch.nn.Sequential(*layers, torch.nn.Linear(512, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1, stride=2), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def batch(kind: str, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 512, device="cuda") if kind == "mlp" else torch.randn(n, 3, 32, 32, device="cuda")
    return x, torch.randint(0, 10, (n,), device="cuda")


def time_steps(model: torch.nn.Module, run: torch.nn.Module, kind: str, steps: int,
               mark_step: bool = False) -> tuple[float, float]:
    """Median ms of a step and the last loss."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    data = [batch(kind) for _ in range(4)]
    times, loss = [], None
    for i in range(steps + 5):
        x, y = data[i % len(data)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if mark_step:  # torch.compile's cudagraph trees: a new step may overwrite the last one's outputs
            torch.compiler.cudagraph_mark_step_begin()
        loss = torch.nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()  # set_to_none: torch.compile's graphs need it (param.grad would alias their memory)
        torch.cuda.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, float(loss.detach())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--diag", action="store_true")
    p.add_argument("--torch-compile", action="store_true")
    a = p.parse_args()
    rows = []
    if a.torch_compile:
        assert "tc" not in sys.modules
        for mode in ("default", "reduce-overhead"):
            m = make_model(a.model).cuda()
            rows.append((f"torch.compile {mode}", *time_steps(m, torch.compile(m, mode=mode), a.model, a.steps, True)))
    else:
        m = make_model(a.model).cuda()
        rows.append(("eager", *time_steps(m, m, a.model, a.steps)))
        import tc
        import tc_runtime
        made = []
        real = tc_runtime.cudagraphify

        def spy(*args, **kwargs):
            made.append(real(*args, **kwargs))
            return made[-1]

        tc_runtime.cudagraphify = spy  # this script's own bookkeeping: which graphed callables tc made
        for mode in ("default", "reduce-overhead"):
            m = make_model(a.model).cuda()
            rows.append((f"tc {mode}", *time_steps(m, tc.compile(m, mode=mode), a.model, a.steps)))
        if a.diag:
            for g in made:
                for sig, s in g.planner.states.items():
                    print(f"{g.name}: records={s.records} replays={s.replays} eager={s.eager_calls} "
                          f"fallback={s.fallback}")
    print(f"\n{a.model} training step, {torch.cuda.get_device_name()}")
    print(f"{'':28s}{'ms/step':>10s}{'last loss':>12s}")
    for name, ms, loss in rows:
        print(f"{name:28s}{ms:10.3f}{loss:12.4f}")


if __name__ == "__main__":
    main()
