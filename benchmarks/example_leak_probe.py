"""Diagnostic: are the example inputs tc compiles a backward with kept alive after compiling
(on CUDA a training step held ~the saved-tensor bytes between steps)? Prints referrer chains."""
import gc
import sys
import weakref

import torch

import tc
import tc.backends as backends
import tc_inductor

refs = []
_compile = tc_inductor.compile


def recording(graph, ex, options=None):
    refs.extend((graph.name, weakref.ref(t)) for t in ex
                if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter))
    return _compile(graph, ex, options)


backends.tc_inductor.compile = recording
if len(sys.argv) > 1:  # a model of models.py, e.g. bert 8x512
    from models import MODELS

    base, make_inputs = MODELS[sys.argv[1]](False, tuple(int(v) for v in sys.argv[2].split("x")))
    m, (x,) = base.cuda().train(), make_inputs("cuda")
else:
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(256, 64)).cuda()
    x = torch.randn(32, 64, device="cuda")
f = tc.compile(m)
for _ in range(2):
    start = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = f(x)
    y.float().sum().backward()
    del y
    m.zero_grad(set_to_none=True)
    gc.collect()
    print(f"held across the step: {(torch.cuda.memory_allocated() - start) / 2**20:.1f} MiB")
gc.collect()
alive = [(n, r()) for n, r in refs if r() is not None and r() is not x]
print(len(refs), "example tensors; alive:", [(n, tuple(t.shape)) for n, t in alive])


def chain(obj, depth=0, seen=None):
    seen = seen if seen is not None else set()
    if depth > 4:
        return
    for ref in gc.get_referrers(obj):
        if id(ref) in seen or ref is alive or isinstance(ref, type(gc.get_referrers)):
            continue
        seen.add(id(ref))
        text = list(ref.keys())[:8] if isinstance(ref, dict) else str(ref)[:120].replace("\n", " ")
        print("  " * depth + f"<- {type(ref).__name__}: {text}")
        if not isinstance(ref, (list, tuple)) or len(ref) < 50:
            chain(ref, depth + 1, seen)


for n, t in alive[:1]:
    chain(t)
