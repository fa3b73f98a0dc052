"""tc_ir: the graph IR shared by every tc package.

A :class:`Graph` holds inputs, named tensors, calls and a nested output; it prints as text
(:func:`parse` reads it back), checks itself (:func:`verify`), and runs on the reference
interpreter (:func:`interpret`), which is the oracle for every other package's tests.
"""

from . import aliasing, logs, ops
from .fx import from_fx, to_fx
from .gcdefer import deferred_full_gc
from .graph import Graph, infer_spec
from .interpret import InterpretError, bind_sizes, interpret
from .node import NODE_OPS, Node, leaves, map_structure, nodes_in
from .passes import cse, dce, dependency_graph, extract, lift_held, node_is_pure, topo_sort
from .spec import ScalarSpec, TensorSpec, dtype_name, spec_of, sym
from .targets import TargetError, is_mutating, is_pure, is_random, resolve_target, target_name
from .text import VERSION as TEXT_VERSION
from .text import ParseError, format_spec, format_value, parse, parse_spec
from .verify import VerifyError, verify

__version__ = "0.1.0"

__all__ = [
    "Graph", "Node", "TensorSpec", "ScalarSpec", "NODE_OPS", "sym", "spec_of", "dtype_name",
    "parse", "parse_spec", "format_value", "format_spec", "ParseError", "TEXT_VERSION",
    "verify", "VerifyError", "interpret", "InterpretError", "bind_sizes", "infer_spec",
    "dce", "cse", "topo_sort", "extract", "lift_held", "dependency_graph", "node_is_pure",
    "from_fx", "to_fx", "target_name", "resolve_target", "TargetError",
    "is_mutating", "is_pure", "is_random", "map_structure", "leaves", "nodes_in", "aliasing", "logs", "ops",
    "deferred_full_gc",
]
