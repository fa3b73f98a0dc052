"""The long fuzz run (``nox -s fuzz``): N seeded programs, half in gradient mode, a summary table.

    python tests/fuzz/run.py [N] [--start S] [--workers W] [--out DIR] [--shrink]
    python tests/fuzz/run.py --seed S        # one program: its source and what happened

Program ``seed`` is ``random_program(seed)`` (odd seeds check gradients), so any failure is
reproduced by its seed alone. Failing programs (shrunk with ``--shrink``: statements dropped one
at a time while the same kind of failure remains) are written to ``DIR/seed_<S>.py``.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_check import Outcome, check  # noqa: E402
from fuzz_program import Program, random_program  # noqa: E402


def run_one(seed: int) -> tuple[int, Outcome, float]:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            outcome = check(random_program(seed), seed)
        except Exception as e:  # a bug in the fuzzer itself: counted, never hidden
            outcome = Outcome("harness", f"{type(e).__name__}: {e}")
    return seed, outcome, time.perf_counter() - start


def shrink(program: Program, kind: str) -> Program:
    """Drop statements (and outputs) one at a time while ``check`` still fails with ``kind``."""
    def fails(p: Program) -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return check(p, program.seed or 0).kind == kind
            except Exception:
                return False

    changed = True
    while changed:
        changed = False
        for k in range(len(program.lines) - 1, -1, -1):
            target = program.lines[k].split(" = ")[0] if " = " in program.lines[k] else None
            outputs = [o for o in program.outputs if o != target] or program.outputs
            candidate = Program(program.inputs, program.lines[:k] + program.lines[k + 1:], outputs,
                                program.grad, program.seed)
            if fails(candidate):
                program, changed = candidate, True
        for k in range(len(program.outputs) - 1, 0, -1):
            candidate = Program(program.inputs, program.lines, program.outputs[:k] + program.outputs[k + 1:],
                                program.grad, program.seed)
            if fails(candidate):
                program, changed = candidate, True
    return program


def _reason(warning: str) -> str:
    """The reason in a fallback warning, without the graph's name."""
    reason = warning.split(" (", 1)[1] if " (" in warning else warning
    return reason.split("); running")[0][:150]


def summary(results: list[tuple[int, Outcome, float]], elapsed: float) -> str:
    kinds = collections.Counter(o.kind for _, o, _ in results)
    fallbacks = collections.Counter(_reason(f) for _, o, _ in results for f in set(o.fallbacks))
    grad = sum(1 for s, o, _ in results if s % 2 and o.kind != "invalid")
    valid = sum(1 for _, o, _ in results if o.kind != "invalid")
    rows = [("programs", len(results)), ("valid (eager runs)", valid), ("  of them gradient mode", grad),
            ("passed", kinds["pass"]), ("bf16 rounding (documented)", kinds["bf16-rounding"])]
    rows += [(f"mismatch: {k}", n) for k, n in sorted(kinds.items()) if k not in ("pass", "invalid", "bf16-rounding")]
    rows += [("programs with a fallback", sum(1 for _, o, _ in results if o.fallbacks)),
             ("seconds", round(elapsed, 1)), ("programs / second", round(len(results) / max(elapsed, 1e-9), 2))]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if fallbacks:
        lines += ["", "fallback reasons:"] + [f"  {n:5d}  {reason}" for reason, n in fallbacks.most_common(15)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, nargs="?", default=int(os.environ.get("TC_FUZZ_N", 10000)))
    parser.add_argument("--start", type=int, default=int(os.environ.get("TC_FUZZ_START", 0)))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TC_FUZZ_WORKERS", os.cpu_count() or 1)))
    parser.add_argument("--out", default=os.environ.get("TC_FUZZ_OUT", "fuzz-failures"))
    parser.add_argument("--shrink", action="store_true")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if args.seed is not None:
        program = random_program(args.seed)
        print(program.source())
        outcome = check(program, args.seed)
        print(outcome.kind, outcome.detail, *outcome.fallbacks, sep="\n")
        return 0 if outcome.ok else 1
    seeds = range(args.start, args.start + args.n)
    start = time.perf_counter()
    results = []
    with multiprocessing.get_context("spawn").Pool(args.workers, maxtasksperchild=200) as pool:
        for seed, outcome, seconds in pool.imap_unordered(run_one, seeds, chunksize=4):
            results.append((seed, outcome, seconds))
            if not outcome.ok:
                print(f"seed {seed}: {outcome.kind}: {outcome.detail[:300]}", flush=True)
                _write_failure(Path(args.out), seed, outcome, args.shrink)
            if len(results) % 100 == 0:
                print(f"... {len(results)} programs, {time.perf_counter() - start:.0f} s", flush=True)
    print(summary(results, time.perf_counter() - start))
    return 0 if all(o.ok for _, o, _ in results) else 1


def _write_failure(out: Path, seed: int, outcome: Outcome, do_shrink: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    program = random_program(seed)
    if do_shrink:
        program = shrink(program, outcome.kind)
    note = "\n".join(f"# {line}" for line in f"{outcome.kind}: {outcome.detail}".splitlines())
    (out / f"seed_{seed}.py").write_text(f"# seed {seed} (python tests/fuzz/run.py --seed {seed})\n{note}\n"
                                         f"{program.source()}")


if __name__ == "__main__":
    sys.exit(main())
