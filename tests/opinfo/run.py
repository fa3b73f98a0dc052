"""The OpInfo sweep (``nox -s sweep``): every OpInfo of torch's ``op_db`` through tc, a summary table.

    python tests/opinfo/run.py                       # every op, C++ kernels on the CPU
    python tests/opinfo/run.py --ops add,sum,gather  # some ops (names as printed: name.variant)
    python tests/opinfo/run.py --slice fast          # the fixed slice that `nox -s tests` runs
    python tests/opinfo/run.py --backend triton --slice triton   # Triton (interpreted on CPU)
    python tests/opinfo/run.py --device cuda         # on the GPU host
    python tests/opinfo/run.py --op gather -v        # one op: every sample's outcome and detail

Ops run in worker processes (``--workers``), each op with a time limit: a worker that dies (a
segfault is a crash too) or overruns is replaced and the op is counted as ``crash``. Results go to
``--out`` (JSON lines, one per sample outcome) and the table to stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from forced_configs import ENV as POINTWISE_ENV  # noqa: E402
from forced_configs import force_configs  # noqa: E402
from slices import FAST, TRITON  # noqa: E402

COLUMNS = ("ops", "samples", "pass", "fallback", "mismatch", "crash")


def worker(args: argparse.Namespace) -> None:
    """Read op names on stdin; for each, one JSON line per outcome then ``{"done": name}``."""
    import warnings

    import attrs
    import engine
    import torch

    warnings.simplefilter("ignore")
    table = engine.op_table()
    options = {"backend": args.backend} if args.backend != "auto" else {}
    dtype = getattr(torch, args.dtype)
    force_configs(args.pointwise_config)
    for line in sys.stdin:
        name = line.strip()
        try:
            results = engine.sweep_op(table[name], device=args.device, samples=args.samples, options=options,
                                      paths=tuple(args.paths.split(",")), dtype=dtype)
        except Exception as e:  # a bug of the harness: counted against the op, never hidden
            results = [engine.SampleOutcome("-", "-", "-", -1, "crash", f"harness: {type(e).__name__}: {e}")]
        for r in results:
            print(json.dumps({"op": name, **attrs.asdict(r)}), flush=True)
        if not _device_usable(args.device):  # a CUDA error poisons the process: start a fresh one
            print(json.dumps({"done": name, "restart": True}), flush=True)
            return
        print(json.dumps({"done": name}), flush=True)


def _device_usable(device: str) -> bool:
    """False once an asynchronous device error (an illegal memory access) has been raised: every
    later call in this process fails with it, so the rest of the ops would all be misreported."""
    if not device.startswith("cuda"):
        return True
    import torch
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device=device).add_(1).item()
        return True
    except Exception:
        return False


class Pool:
    """Worker processes fed one op at a time (one thread per worker); a worker that dies or
    overruns its op's time limit is replaced and the op counted as a crash."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.cmd = [sys.executable, str(HERE / "run.py"), "--worker", "--device", args.device,
                    "--samples", str(args.samples), "--backend", args.backend, "--paths", args.paths,
                    "--dtype", args.dtype, "--pointwise-config", args.pointwise_config]
        self.lock = threading.Lock()

    def start(self) -> subprocess.Popen:
        return subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                stderr=subprocess.DEVNULL if not self.args.verbose else None, bufsize=1)

    def run(self, names: list[str], emit) -> None:
        pending = queue.SimpleQueue()
        for name in names:
            pending.put(name)
        threads = [threading.Thread(target=self.serve, args=(pending, emit)) for _ in range(self.args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def serve(self, pending: queue.SimpleQueue, emit) -> None:
        proc = None
        while True:
            try:
                name = pending.get_nowait()
            except queue.Empty:
                break
            proc = proc or self.start()
            if not self.one(proc, name, emit):
                proc = None
        if proc is not None:
            proc.stdin.close()
            proc.wait()

    def one(self, proc: subprocess.Popen, name: str, emit) -> bool:
        """Run ``name`` on ``proc``; False when the worker is gone (it died or was killed)."""
        watchdog = threading.Timer(self.args.timeout, proc.kill)
        watchdog.start()
        try:
            proc.stdin.write(name + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                record = json.loads(line)
                if "done" in record:
                    if record.get("restart"):
                        proc.stdin.close()
                        proc.wait()
                        return False
                    return True
                with self.lock:
                    emit(record)
        except (BrokenPipeError, OSError):
            pass
        finally:
            watchdog.cancel()
        proc.wait()
        why = f"over {self.args.timeout:.0f} s" if proc.returncode == -9 else \
            f"worker died (exit status {proc.returncode}: a signal if negative)"
        with self.lock:
            emit({"op": name, "path": "-", "phase": "-", "dtype": "-", "index": -1, "outcome": "crash", "detail": why})
        return False


def summarize(records: list[dict], paths: list[str]) -> str:
    """The table: per path, ops (by their worst outcome) and samples (each outcome counted)."""
    import engine

    by_op: dict = collections.defaultdict(list)
    for r in records:
        by_op[r["op"]].append(r)
    lines = [f"{'path':10s} {'phase':6s} " + " ".join(f"{c:>9s}" for c in COLUMNS)]
    for path in paths:
        for phase in ("fwd", "bwd", "err"):
            ops = collections.Counter()
            samples = collections.Counter()
            for rs in by_op.values():
                mine = [r for r in rs if (r["path"] == path and r["phase"] == phase) or r["path"] == "-"]
                outcomes = [r["outcome"] for r in mine if r["outcome"] != "skip"]
                if outcomes:
                    ops[max(outcomes, key=engine.RANK.__getitem__)] += 1
                samples.update(outcomes)
            row = [sum(ops.values()), sum(samples.values())] + [ops[c] for c in COLUMNS[2:]]
            lines.append(f"{path:10s} {phase:6s} " + " ".join(f"{v:>9d}" for v in row))
    lines.append("(ops: by each op's worst sample; samples: every sample outcome; skip = eager rejects it)")
    return "\n".join(lines)


def listing(records: list[dict]) -> str:
    """Every op that did not pass, with its first non-passing sample's detail."""
    worst: dict = {}
    import engine

    for r in records:
        if r["outcome"] in ("pass", "skip"):
            continue
        key = (r["op"], r["path"])
        if key not in worst or engine.RANK[r["outcome"]] > engine.RANK[worst[key]["outcome"]]:
            worst[key] = r
    lines = []
    for (op, path), r in sorted(worst.items(), key=lambda kv: (kv[1]["outcome"], kv[0])):
        lines.append(f"{r['outcome']:9s} {path:9s} {op:40s} {r['phase']} {r['dtype']}: {r['detail'][:200]}")
    return "\n".join(lines)


def selected(args: argparse.Namespace) -> list[str]:
    if args.ops:
        return args.ops.split(",")
    if args.slice == "fast":
        return list(FAST)
    if args.slice == "triton":
        return list(TRITON)
    import engine

    return sorted(engine.op_table())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="")
    p.add_argument("--op", default="", help="one op, every outcome printed")
    p.add_argument("--slice", choices=("all", "fast", "triton"), default="all")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="auto", help="tc_inductor's backend option: auto, cpp, triton")
    p.add_argument("--paths", default="inductor,tc")
    p.add_argument("--dtype", default="float32", help="the dtype of the forward and backward phases")
    p.add_argument("--pointwise-config", default=os.environ.get(POINTWISE_ENV, ""),
                   help="XBLOCK,num_warps for every pointwise Triton kernel (tests/forced_configs.py)")
    p.add_argument("--samples", type=int, default=4, help="samples per op and dtype (0: all)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default="opinfo-sweep.jsonl")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    names = [args.op] if args.op else selected(args)
    records: list[dict] = []
    start = time.time()
    with open(args.out, "w") as out:
        def emit(record: dict) -> None:
            records.append(record)
            out.write(json.dumps(record) + "\n")
            out.flush()
            if args.op or args.verbose:
                print(record, flush=True)

        Pool(args).run(names, emit)
    forced = f", pointwise config {args.pointwise_config}" if args.pointwise_config else ""
    print(f"\nOpInfo sweep: {len(names)} ops, device {args.device}, backend {args.backend}, {args.dtype}{forced}, "
          f"{args.samples or 'all'} samples per op and dtype, {time.time() - start:.0f} s\n")
    print(summarize(records, args.paths.split(",")))
    print("\nOps that did not pass (worst sample):")
    print(listing(records) or "(none)")


if __name__ == "__main__":
    main()
