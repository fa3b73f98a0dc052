"""tc_inductor: ATen-level tc_ir graphs to fused kernels (C++/OpenMP on CPU, Triton on CUDA).

>>> import torch, tc_ir, tc_inductor
>>> aten = torch.ops.aten
>>> g = tc_ir.Graph()
>>> x = g.input("x", tc_ir.TensorSpec((1024,), torch.float32))
>>> g.output(g.call(aten.mul.Tensor, g.call(aten.relu.default, x), 2.0))
>>> k = tc_inductor.compile(g, [torch.randn(1024)])
>>> k.stats["kernels"]
1

``compile(graph, example_inputs, options)`` returns a callable with ``.source`` (the Python
wrapper), ``.kernels`` (kernel sources) and ``.stats``; ``decompositions()`` is the table the
umbrella hands the autograd tracer. Options are listed in :class:`Options`.
"""

from .codegen.build import CompilerNotFound
from .compile import CompiledGraph, compile, compile_counters
from .config import Options
from .decompositions import decompositions
from .lowering import LOWERINGS
from .symbolic import SymbolicUnsupported

__version__ = "0.1.0"

__all__ = ["compile", "compile_counters", "CompiledGraph", "decompositions", "Options", "CompilerNotFound", "LOWERINGS",
           "SymbolicUnsupported"]
