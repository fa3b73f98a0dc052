"""tc_autograd: torch-level tc_ir graphs -> functional ATen graphs (forward, joint, backward).

:func:`aot` traces a graph to ATen on fake tensors, functionalizes it, traces the backward
through the autograd engine, splits forward from backward with a min-cut partition, and returns
a callable that behaves like eager (gradients, input mutations, aliasing outputs).
"""

from .api import AOTFunction, aot, interpret_compiler
from .joint import Traced, trace
from .partition import Partition, partition
from .passes import clean
from .trace import DataDependentError

__version__ = "0.1.0"

__all__ = ["aot", "AOTFunction", "interpret_compiler", "trace", "Traced", "partition", "Partition", "clean",
           "DataDependentError"]
