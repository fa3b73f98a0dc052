"""Where a zoo case's tc run differs from eager's, tensor by tensor, against a float64 run.

    python benchmarks/zoo_case_errors.py timm/dla46_c train [--top 12]

Runs the case as ``tests/zoo/harness.py`` does (same seeds, same tolerance) and prints, for the
tensors with the largest tc-eager difference: that difference, eager's and tc's distance to the
float64 run (max norm) and the harness's verdict. A tensor that eager float32 already gets far
from float64 is ill-conditioned (batch norm over a few values), not miscompiled; tc is wrong
where it is much further from float64 than eager is. ``TC_ZOO_DEVICE=cuda`` runs on the GPU.

``--float64`` runs eager and tc in float64 instead (the float64 run is then eager's itself): a
correct compiler then agrees with eager to ~1e-10 however ill-conditioned the model, so an
error of a float32 size there is tc's, not the model's conditioning.

``--cpu-reference`` (with ``--float64`` on the GPU) makes the float64 run eager's on the CPU: a
second correct implementation. For a model that computes parts in float32 whatever its dtype
(``zoo_models.FLOAT32_INSIDE``), |eager-f64| is then how far two correct float64 runs of it lie
apart, the yardstick for tc's |tc-eager|.

Exits 3 when a tensor fails (so ``ptxas_bisect.py`` can tell a wrong answer from a crash), else 0.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "zoo"))
import tv_cpu  # noqa: E402

tv_cpu.prepare()

import harness  # noqa: E402
import torch  # noqa: E402
import zoo_models  # noqa: E402

import tc  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("case")
    p.add_argument("task", choices=("infer", "train"))
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--float64", action="store_true", help="eager and tc both in float64")
    p.add_argument("--cpu-reference", action="store_true", help="the float64 run is eager's on the CPU")
    p.add_argument("--image-size", type=int, help="another input size for an image case")
    args = p.parse_args()
    case = next(c for c in zoo_models.TIMM_CASES + zoo_models.HF_CASES if c.name == args.case)
    if args.image_size:
        case = dataclasses.replace(case, inputs=zoo_models._image(args.image_size))
    torch.manual_seed(0)
    if harness.DEVICE.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    eager = case.build().to(harness.DEVICE)
    if args.float64:
        eager = eager.double()
    harness._set_mode(eager, args.task)
    compiled_model, reference = copy.deepcopy(eager), copy.deepcopy(eager).double()
    if args.cpu_reference:
        reference = reference.cpu()
    compiled = tc.compile(compiled_model)
    rtol, atol = harness.TOL[args.task]
    any_failed = False
    for call, seed in enumerate((1, 2)):
        inputs = harness._on_device(case.inputs(torch.Generator().manual_seed(seed)))
        if args.float64:
            inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
        want = harness._run(eager, case, inputs, args.task)
        f64 = harness._float64_run(reference, case, _on(inputs, next(reference.parameters()).device), args.task)
        f64 = {name: t.to(harness.DEVICE) for name, t in f64.items()}
        got = harness._run(compiled, case, inputs, args.task, compiled_model)
        rows = []
        for name, w in want.items():
            err, excess = harness._error(got[name], w, rtol, atol)
            ref = f64.get(name)
            eager_f64 = tc_f64 = float("nan")
            if ref is not None and w.is_floating_point():
                eager_f64 = (w.double() - ref.double()).abs().max().item()
                tc_f64 = (got[name].double() - ref.double()).abs().max().item()
            verdict = "ok" if excess <= 0 else ("ok (f64)" if ref is not None and harness._as_close_to_f64(
                got[name], w, ref) else "FAIL")
            rows.append((err, name, eager_f64, tc_f64, verdict))
        rows.sort(reverse=True)
        failed = [r for r in rows if r[4] == "FAIL"]
        any_failed = any_failed or bool(failed)
        print(f"call {call + 1}: {len(failed)} of {len(rows)} tensors fail; the largest errors, then the failures")
        print(f"  {'tensor':48} {'|tc-eager|':>11} {'|eager-f64|':>12} {'|tc-f64|':>10}  verdict")
        for err, name, e64, t64, verdict in rows[:args.top] + failed[:args.top]:
            print(f"  {name[:48]:48} {err:11.3e} {e64:12.3e} {t64:10.3e}  {verdict}")
    return 3 if any_failed else 0


def _on(inputs: dict, device: torch.device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


if __name__ == "__main__":
    sys.exit(main())
