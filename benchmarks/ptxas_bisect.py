"""Which Triton kernels' optimised ptxas builds make a command go wrong (GPU host).

    python benchmarks/ptxas_bisect.py -- python3 benchmarks/zoo_case_errors.py timm/dla46_c train --float64

The command must exit 0 when its answer is right and 3 (``--wrong-exit``) when it is wrong (any
other status stops the search, with the end of the run's output), and must be
wrong as it stands and right with every kernel built by ptxas at ``--opt-level 0``
(``DISABLE_PTXAS_OPT=1``). Every run gets fresh Triton, tc and inductor cache directories (a
cached binary would hide the option), and a ``sitecustomize`` that wraps Triton's ``make_cubin``
in every Python process of the run (tc's compile workers too): it records each kernel it
builds, by name and a hash of its PTX without debug information (which names a file under the
run's own cache directory), and builds the kernels of the chosen set with ``--ptxas-options``
(``--opt-level 0``). A first run records the kernels; the set is then halved until it is the
fewest kernels whose unoptimised builds make the answer right (each half is tried alone, and
where neither half alone is enough, both are searched with the other held at ``-O0``). Printed
last: those kernels; with ``--keep DIR``, a last run with only them at ``-O0`` leaves their PTX
and tc's ``TC_DEBUG_DIR`` dumps (the kernels' Triton source) in ``DIR``. About ``2 log2(kernels)`` runs of the
command for one culprit. ``--ways K`` splits each level into K parts run side by side (the GPU
host has the cores and memory for several runs): about ``log_K(kernels)`` rounds of K runs for
one culprit, where the halving takes ``2 log2``; where no part alone is enough, that level is
halved as above.

Only a diagnostic: a kernel found here is either a ptxas miscompile or undefined behaviour in
the generated code (a race, an out-of-bounds read) that the optimiser turns into a wrong value.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SITECUSTOMIZE = r'''
import dataclasses, hashlib, os
try:
    from triton.backends.nvidia import compiler as _nv
except Exception:  # no CUDA backend in this process: nothing to wrap
    _nv = None
if _nv is not None:
    _make_cubin = _nv.CUDABackend.make_cubin
    _chosen = set(filter(None, os.environ.get("TC_BISECT_O0", "").split(",")))
    _record = os.environ["TC_BISECT_RECORD"]
    _ptx_dir = os.environ.get("TC_BISECT_PTX")

    def _code(ptx):  # without debug info, which names the kernel's file (a fresh path each run)
        ptx = ptx.split(".section\t.debug", 1)[0].split(".section .debug", 1)[0]
        return "\n".join(line for line in ptx.splitlines()
                         if not line.lstrip().startswith((".file", ".loc", "//")))

    def make_cubin(self, src, metadata, opt, capability):
        ident = metadata["name"] + "-" + hashlib.sha1(_code(src).encode()).hexdigest()[:12]
        with open(_record, "a") as f:
            f.write(ident + (" O0" if ident in _chosen else "") + "\n")
        if _ptx_dir and ident in _chosen:
            with open(os.path.join(_ptx_dir, ident + ".ptx"), "w") as f:
                f.write(src)
        if ident in _chosen:
            extra = (opt.ptx_options or "") + " " + os.environ["TC_BISECT_OPTIONS"]
            opt = dataclasses.replace(opt, ptx_options=extra.strip())
        return _make_cubin(self, src, metadata, opt, capability)

    _nv.CUDABackend.make_cubin = make_cubin
'''


class Runner:
    def __init__(self, command: list[str], args: argparse.Namespace):
        self.command, self.keep, self.timeout = command, args.keep, args.timeout
        self.wrong_exit, self.options = args.wrong_exit, args.ptxas_options
        self.root = Path(tempfile.mkdtemp(prefix="ptxas-bisect-"))
        (self.root / "site").mkdir()
        (self.root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.runs = 0
        self._numbers = itertools.count(1)

    def run(self, o0: set[str], label: str, keep: bool = False) -> tuple[bool, set[str]]:
        """Runs the command with ``o0`` built unoptimised: (right?, the kernels it built)."""
        number = next(self._numbers)  # runs of one round go side by side (``run_all``)
        self.runs = max(self.runs, number)
        work = self.root / f"run{number}"
        work.mkdir()
        record = work / "kernels.txt"
        record.touch()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root / "site"), env.get("PYTHONPATH")]))
        env["TC_BISECT_O0"] = ",".join(sorted(o0))
        env["TC_BISECT_RECORD"] = str(record)
        env["TC_BISECT_OPTIONS"] = self.options
        for var in ("TRITON_CACHE_DIR", "TC_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
            env[var] = str(work / var.lower())
        if keep and self.keep:
            env["TC_BISECT_PTX"] = env["TC_DEBUG_DIR"] = str(self.keep / f"run{number}")
            os.makedirs(env["TC_DEBUG_DIR"], exist_ok=True)
        log = work / "output.txt"
        try:
            with open(log, "w") as out:
                rc = subprocess.run(self.command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    timeout=self.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        lines = [line.split() for line in record.read_text().splitlines()]
        built = {line[0] for line in lines}
        applied = {line[0] for line in lines if line[1:] == ["O0"]}
        if applied != o0:
            sys.exit(f"run {number} ({label}): {len(o0 - applied)} of the {len(o0)} kernels chosen "
                     "were not built (a kernel's identity changed between runs)")
        if rc not in (0, self.wrong_exit):
            sys.exit(f"run {number} ({label}) ended with {rc}, neither right nor wrong; its output "
                     f"ends:\n{log.read_text()[-3000:]}")
        if self.keep:
            self.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, self.keep / f"run{number}.txt")
        shutil.rmtree(work, ignore_errors=True)
        right = rc == 0
        print(f"run {number}: {label}: {len(o0)} of {len(built)} kernels at -O0 -> "
              f"{'right' if right else 'wrong'}", flush=True)
        return right, built

    def run_all(self, jobs: list[tuple[set[str], str]]) -> list[tuple[bool, set[str]]]:
        """``run`` of each (o0, label), side by side."""
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            return list(pool.map(lambda job: self.run(*job), jobs))


def search(runner, candidates: list[str], held: set[str], ways: int) -> list[str]:
    """``bisect``, with each level split into ``ways`` parts tried side by side: a part that alone
    makes the answer right holds every culprit; where none does, the level is halved."""
    if len(candidates) == 1 or ways <= 2:
        return bisect(runner, candidates, held)
    size = -(-len(candidates) // min(ways, len(candidates)))
    parts = [candidates[i:i + size] for i in range(0, len(candidates), size)]
    results = runner.run_all([(held | set(part), f"part {n + 1} of {len(parts)} ({len(part)})")
                              for n, part in enumerate(parts)])
    for part, (right, _) in zip(parts, results):
        if right:
            return search(runner, part, held, ways)
    return bisect(runner, candidates, held)


def bisect(runner: Runner, candidates: list[str], held: set[str]) -> list[str]:
    """The fewest of ``candidates`` that, built at -O0 with ``held``, make the answer right."""
    if len(candidates) == 1:
        return candidates
    half = len(candidates) // 2
    first, second = candidates[:half], candidates[half:]
    if runner.run(held | set(first), f"first {len(first)}")[0]:
        return bisect(runner, first, held)
    if runner.run(held | set(second), f"last {len(second)}")[0]:
        return bisect(runner, second, held)
    found = bisect(runner, first, held | set(second))
    return found + bisect(runner, second, held | set(found))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keep", type=Path, help="a folder for each run's output and the culprits' PTX and TC_DEBUG_DIR")
    p.add_argument("--timeout", type=float, default=300, help="seconds a run may take")
    p.add_argument("--ptxas-options", default="--opt-level 0",
                   help="what the chosen kernels' ptxas gets (DISABLE_PTXAS_OPT=1 gives -g and -O0)")
    p.add_argument("--wrong-exit", type=int, default=3, help="the command's exit status when wrong")
    p.add_argument("--ways", type=int, default=2, help="parts a level is split into, run side by side")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command")
    runner = Runner(command, args)
    right, built = runner.run(set(), "as built")
    if right:
        print("the command is right with every kernel optimised: nothing to bisect")
        return 1
    kernels = sorted(built)
    if not runner.run(set(kernels), "all")[0]:
        print(f"still wrong with every kernel built with {args.ptxas_options!r}")
        return 2
    found = search(runner, kernels, set(), args.ways)
    print(f"\n{len(found)} kernel(s) whose optimised build makes the answer wrong "
          f"({runner.runs} runs of the command):")
    for ident in found:
        print("  ", ident)
    if args.keep:
        runner.run(set(found), "culprits only, PTX and TC_DEBUG_DIR kept", keep=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
