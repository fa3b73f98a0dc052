"""Options of tc_inductor.compile: one typed record, readable from a dict or the environment."""

from __future__ import annotations

import os
from typing import Any

import attrs

VERSION = "0.1.0"


@attrs.frozen
class Options:
    """What a compile may be asked to do differently.

    backend: "auto" (C++ on CPU, Triton on CUDA), "cpp", or "triton" (Triton on CPU tensors
      runs under the Triton interpreter, for testing).
    max_autotune: benchmark several configs per Triton kernel and keep the fastest.
    emulate_precision_casts: round intermediates to bf16/fp16 wherever eager would.
    fusion: fuse buffers into shared kernels (off: one kernel per buffer, for debugging).
    cache: use the graph-level cache (in memory and on disk).
    artifact_store: an object with get(kind, key) -> bytes | None and put(kind, key, data).
    mm_template: Triton matmul templates with fused epilogues for mm/addmm/bmm: "auto" (under
      max_autotune on CUDA, benchmarked against the extern call), "never", or, for tests,
      "always" (heuristic config, any device) and "autotune" (benchmark on any device).
    pad_mm_operands: GEMMs of unaligned M, N or K computed on zero-padded operands, outputs in
      eager's layout (padding.py): "auto" (CUDA, dims >= 64 elements, tensors >= 1 MiB,
      where measured 10% faster on the device),
      "never", or, for tests, "always" (any device and size).
    conv_layout: channels-last (NHWC) layout for the values around 2-D convolutions (layout.py):
      "auto" (CUDA graphs with half/bf16 convolutions or a channels-last input), "never", or
      "always" (any device: tests run the NHWC path on the CPU).
    free_outputs: positions (among the flattened outputs) whose strides the caller leaves to the
      compiler, e.g. activations a forward saves for its backward: they may come back
      channels-last (``CompiledGraph.output_strides`` says how each output is laid out). Other
      outputs keep the strides of the graph's specs, as eager.
    guarded_inputs: positions of inputs whose shape and strides the caller checks on every call
      to be the example inputs' (as tc_capture's guards do for the tensors they see): the
      wrapper does not check them again (~0.2 µs an input). Inputs not named here that arrive
      in another layout are copied into the compiled one.
    inplace_outputs: {output position: input position} (a dict, or pairs): outputs that are the
      new value of a mutated input, which the caller would copy back into it. Where safe
      (inplace.py), the output is written directly into the input's memory and returned as that
      input; elsewhere it is allocated as usual. Set by tc_autograd (``graph.meta``).
    """

    backend: str = "auto"
    max_autotune: bool = False
    emulate_precision_casts: bool = False
    fusion: bool = True
    cache: bool = True
    artifact_store: Any = None
    mm_template: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "never", "always", "autotune")))
    pad_mm_operands: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "never", "always")))
    conv_layout: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "never", "always")))
    free_outputs: tuple = attrs.field(default=(), converter=lambda v: tuple(sorted({int(i) for i in v})))
    guarded_inputs: tuple = attrs.field(default=(), converter=lambda v: tuple(sorted({int(i) for i in v})))
    inplace_outputs: tuple = attrs.field(default=(), converter=lambda v: tuple(sorted(
        (int(k), int(i)) for k, i in (v.items() if isinstance(v, dict) else v))))

    @classmethod
    def from_dict(cls, options: dict | None) -> Options:
        options = dict(options or {})
        env_backend = os.environ.get("TC_INDUCTOR_BACKEND")
        if env_backend and "backend" not in options:
            options["backend"] = env_backend
        env_layout = os.environ.get("TC_CONV_LAYOUT")  # A/B measurements without code changes
        if env_layout and "conv_layout" not in options:
            options["conv_layout"] = env_layout
        unknown = set(options) - {f.name for f in attrs.fields(cls)}
        if unknown:
            raise TypeError(f"unknown tc_inductor options {sorted(unknown)}")
        return cls(**options)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)

    def cache_text(self) -> str:
        return repr({f.name: getattr(self, f.name) for f in attrs.fields(Options) if f.name != "artifact_store"})
