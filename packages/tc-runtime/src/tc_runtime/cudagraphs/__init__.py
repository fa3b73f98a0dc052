"""CUDA graphs for compiled callables: record per input signature, replay, fall back with reasons."""

from .outputs import AliasOutputs, CloneOutputs, PoolLedger, map_tensors
from .plan import Eager, Planner, Record, Replay, ShapeState, Warmup, input_problem, signature
from .record import CudaRecorder, RecordedGraph, shared_pool
from .runtime import CudaGraphed, cudagraphify, ledger_for

__all__ = ["cudagraphify", "CudaGraphed", "CudaRecorder", "RecordedGraph", "shared_pool", "Planner",
           "ShapeState", "Warmup", "Replay", "Record", "Eager", "signature", "input_problem", "CloneOutputs",
           "AliasOutputs", "PoolLedger", "ledger_for", "map_tensors"]
