"""scaled_dot_product_attention under eager and tc: which kernel runs, values, gradients, memory.

For each case (no mask, causal, boolean and additive masks, dropout, GQA, an explicit scale,
BERT- and GPT-2-style layers from transformers) this runs one forward and backward under eager
and under ``tc.compile``, and prints: the attention ops in tc's traced forward and backward
graphs (a fused ``_scaled_dot_product_*_attention`` pair, or ``bmm``/``_softmax`` when the
score matrix is materialised), the largest relative error of the output and each gradient
against eager, and the peak CUDA memory of each (``torch.cuda.max_memory_allocated`` above
what the inputs take). Dropout cases are compared under one seed: the fused kernels draw from
the same generator state as eager, so the outputs agree when tc calls the kernel eager chose.

    python benchmarks/attention.py                 # every case (CPU: small sizes)
    python benchmarks/attention.py --cases causal,gqa --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_ROOT = tempfile.mkdtemp(prefix="tc-attn-")
os.environ.setdefault("TC_CACHE_DIR", os.path.join(_ROOT, "cache"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tc  # noqa: E402

_OPS = re.compile(r"aten\.(_scaled_dot_product\w*|_efficient_attention\w*|_flash_attention\w*|bmm|_softmax|"
                  r"_safe_softmax|native_dropout)\.")


def _qkv(b: int, h: int, s: int, d: int, dtype, device, hkv: int | None = None):
    shapes = [(b, h, s, d), (b, hkv or h, s, d), (b, hkv or h, s, d)]
    return [torch.randn(sh, dtype=dtype, device=device, requires_grad=True) for sh in shapes]


def _cases(small: bool, dtype, device) -> dict[str, Callable]:
    b, h, s, d = (2, 4, 64, 16) if small else (8, 12, 1024, 64)

    def plain(**kw):
        return lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), _qkv(b, h, s, d, dtype, device))

    def with_mask(make):
        def build():
            mask = make()
            return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                    _qkv(b, h, s, d, dtype, device))
        return build

    keep = lambda: torch.rand(b, 1, 1, s, device=device) > 0.2  # noqa: E731  (padding-style)
    return {
        "plain": plain(),
        "causal": plain(is_causal=True),
        "scale": plain(scale=0.3),
        "bool_mask": with_mask(lambda: keep().expand(b, 1, s, s)),
        "additive_mask": with_mask(lambda: torch.randn(b, 1, 1, s, device=device, dtype=dtype)),
        "dropout": plain(dropout_p=0.1),
        "gqa": lambda: ((lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
                        _qkv(b, h, s, d, dtype, device, hkv=h // 4 if h >= 4 else 1)),
        "bert_layers": lambda: _hf("BertConfig", "BertModel", small, dtype, device),
        "gpt2_layers": lambda: _hf("GPT2Config", "GPT2Model", small, dtype, device),
    }


def _hf(config_cls: str, model_cls: str, small: bool, dtype, device):
    """Two transformer layers from transformers (dropout off), on input embeddings."""
    import transformers

    width, batch, seq = (64, 2, 32) if small else (768, 8, 512)
    cfg = getattr(transformers, config_cls)(hidden_size=width, n_embd=width, num_hidden_layers=2, n_layer=2,
                                            num_attention_heads=4 if small else 12, n_head=4 if small else 12,
                                            intermediate_size=4 * width, attention_probs_dropout_prob=0.0,
                                            hidden_dropout_prob=0.0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    model = getattr(transformers, model_cls)(cfg).to(device=device, dtype=dtype)
    model.config.use_cache = False
    x = torch.randn(batch, seq, width, device=device, dtype=dtype, requires_grad=True)
    return (lambda e: model(inputs_embeds=e).last_hidden_state), [x]


def _graph_ops(debug_dir: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(debug_dir.glob("*_aot_*.txt")):
        stage = path.name.split("_aot_")[1].split("_")[0]
        ops = sorted(set(_OPS.findall(path.read_text())))
        found.setdefault(stage, [])
        found[stage] = sorted(set(found[stage]) | set(ops))
    return found


def _run(fn: Callable, inputs: list, seed: int, device: str, cotangent=None) -> tuple[torch.Tensor, list, float]:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    torch.manual_seed(seed)
    out = fn(*inputs)
    # a random cotangent: with ones, a final layer norm's input gradient is ~0 and errors meaningless
    grads = torch.autograd.grad(out, inputs, torch.ones_like(out) if cotangent is None else cotangent)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else 0.0
    return out.detach(), [g.detach() for g in grads], peak


def _timed(fn: Callable, inputs: list, device: str, steps: int = 10) -> float:
    def step():
        out = fn(*inputs)
        torch.autograd.grad(out, inputs, torch.ones_like(out))
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def run_case(name: str, build: Callable, device: str) -> dict:
    fn, inputs = build()
    tc.reset()
    debug = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_ROOT))
    os.environ["TC_DEBUG_DIR"] = str(debug)
    compiled = tc.compile(fn, options={"fallback": False})
    first, _, _ = _run(compiled, inputs, 0, device)  # compile first: peak memory is the steady state's
    os.environ.pop("TC_DEBUG_DIR")
    cotangent = torch.randn_like(first)
    out_e, grads_e, peak_e = _run(fn, inputs, 1, device, cotangent)
    out_t, grads_t, peak_t = _run(compiled, inputs, 1, device, cotangent)
    row = {"case": name, "ops": _graph_ops(debug), "out_err": _err(out_t, out_e),
           "grad_err": max(_err(a, b) for a, b in zip(grads_t, grads_e)),
           "peak_mib_eager": round(peak_e, 1), "peak_mib_tc": round(peak_t, 1)}
    if device == "cuda":
        row["ms_eager"], row["ms_tc"] = _timed(fn, inputs, device), _timed(compiled, inputs, device)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    cases = _cases(device == "cpu", dtype, device)
    rows = []
    for name in (args.cases.split(",") if args.cases else cases):
        try:
            rows.append(run_case(name, cases[name], device))
        except Exception as e:  # one broken case must not hide the others' figures
            rows.append({"case": name, "error": f"{type(e).__name__}: {e}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"attention_{args.dtype}.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    print(format_table(rows, args.dtype))


def format_table(rows: list[dict], dtype: str) -> str:
    head = f"{'case':14} {'out err':>8} {'grad err':>8} {'MiB eager':>9} {'MiB tc':>8} {'ms eager':>8} {'ms tc':>7}  ops"
    lines = [f"dtype {dtype}", head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['case']:14} ERROR {r['error'][:100]}")
            continue
        ops = "; ".join(f"{k}: {','.join(v)}" for k, v in r["ops"].items())
        lines.append(f"{r['case']:14} {r['out_err']:8.1e} {r['grad_err']:8.1e} {r['peak_mib_eager']:9.1f} "
                     f"{r['peak_mib_tc']:8.1f} {r.get('ms_eager', 0):8.2f} {r.get('ms_tc', 0):7.2f}  {ops}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
