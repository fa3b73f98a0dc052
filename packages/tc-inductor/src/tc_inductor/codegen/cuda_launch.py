"""tc's own launcher of compiled Triton kernels on CUDA (``cuda_launch.c``).

Triton's C launcher parses every launch's arguments with ``PyArg_ParseTuple`` against a format
of the kernel's full parameter list (constexprs and launch hooks included), releases and takes
back the GIL, and is reached through Python (``TritonLauncher``): 6-9 µs of host time a launch on
the H100 hosts measured, where eager's whole ``torch.add(out=)`` takes 7 µs; this launcher, 4.5 µs
(``benchmarks/NOTES.md`` §22). A training step of ResNet-50 makes ~300 launches.

This module's ``Launcher`` is one C object per compiled kernel, called by the generated wrapper
as ``k.launch(grid0, *args)``: argument kinds (pointer, int widths, floats, constexprs skipped)
are fixed when it is made, from the compiled kernel's own signature (what Triton's launcher is
generated from), so a launch converts each argument, reads the current stream and calls
``cuLaunchKernel``. Anything it does not handle it hands to Triton (``fallback``): a launch hook
set (profilers), a pointer not 16-byte aligned, an int outside its parameter's type.

It is made only for a kernel whose first launch has been compared with Triton's own launch path
(``TritonLauncher._first``), and only where the kernel needs nothing else from Triton's launcher:
one CTA per cluster, no cooperative or programmatic launch, no scratch memory, parameter types
it knows. The extension is built once per machine (g++ on a C file that needs only Python's
headers; the driver is looked up in ``libcuda.so.1`` at the first launch), kept in tc's cache
under a recorded digest like the C++ kernels, and loaded from a private copy. Where it cannot be
built or loaded, Triton's launcher is used (logged under ``TC_LOGS=perf_hints``)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

import tc_ir
from tc_ir import storage

from . import build

_log = tc_ir.logs.get_logger("perf_hints")
SOURCE = Path(__file__).with_name("cuda_launch.c")
NAME = "tc_cuda_launch"

# Triton's scalar parameter types -> the extension's argument kinds
KINDS = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "B", "u8": "B", "u16": "H", "u32": "I",
         "u64": "L", "fp32": "f", "f32": "f", "fp64": "d", "constexpr": "x"}

_lock = threading.Lock()
_module: Any = None
_failed = False


def module() -> Any:
    """The built extension, or None where it cannot be had (no compiler, a failed build)."""
    global _module, _failed
    if _module is not None or _failed:
        return _module
    with _lock:
        if _module is None and not _failed:
            try:
                _module = _load()
            except Exception as e:  # Triton's launcher is always right
                _failed = True
                _log.info("tc's CUDA launcher is unavailable (%s: %s); Triton's launcher is used",
                          type(e).__name__, e)
    return _module


def kinds(signature: dict, n_args: int) -> bytes | None:
    """The argument kinds of a launch passing the first ``n_args`` parameters of a kernel of
    ``signature`` (the compiled kernel's ``src.signature``: name -> Triton type); None where
    the launch needs Triton's launcher (a parameter type not handled here, or a parameter past
    ``n_args`` that is no constexpr: the launch would not pass it)."""
    types = list(signature.values())
    if len(types) < n_args or any(t != "constexpr" for t in types[n_args:]):
        return None
    out = []
    for t in types[:n_args]:
        if not isinstance(t, str):  # a tuple parameter
            return None
        if t.startswith("*"):  # a pointer: "*fp32", "*kfp32" (const)
            out.append("p")
        elif t in KINDS:
            out.append(KINDS[t])
        else:  # fp16/bf16 scalars, tensor descriptors
            return None
    return "".join(out).encode()


def make(compiled: Any, n_args: int, fallback: Any, stream_of: Any, device: int, knobs: Any) -> Any:
    """A ``Launcher`` of ``compiled`` (a triton ``CompiledKernel``, loaded) for launches passing
    ``n_args`` arguments after the grid; None where this kernel or process needs Triton's."""
    from triton.compiler import CompiledKernel

    if not isinstance(compiled, CompiledKernel):  # a test's stand-in
        return None
    argument_kinds = kinds(dict(compiled.src.signature), n_args)
    if argument_kinds is None:
        return None
    compiled._init_handles()  # (loaded by the launch compared before this one)
    return make_for(compiled.function, compiled.metadata._asdict(), argument_kinds, fallback, stream_of, device,
                    knobs)


def make_for(function: int, meta: dict, argument_kinds: bytes, fallback: Any, stream_of: Any, device: int,
             knobs: Any) -> Any:
    """A ``Launcher`` of the loaded kernel ``function`` whose Triton metadata is ``meta`` (as
    the metadata json has it, or a ``CompiledKernel``'s), taking arguments of ``kinds``; None
    where the kernel needs more of Triton's launcher than a plain ``cuLaunchKernel``."""
    if not plain(meta):
        return None
    ext = module()
    if ext is None or len(argument_kinds) > ext.MAX_ARGS:
        return None
    block = meta["num_warps"] * _field(meta["target"], "warp_size")
    return ext.Launcher(fallback, int(function), block, int(meta["shared"]), argument_kinds, stream_of,
                        int(device), knobs)


def plain(meta: dict) -> bool:
    """Whether a kernel of Triton metadata ``meta`` launches as one ``cuLaunchKernel``: one CTA
    per cluster, no cooperative or programmatic launch, no scratch memory, a CUDA target."""
    return (meta.get("num_ctas", 1) == 1 and not meta.get("launch_cooperative_grid", False)
            and not meta.get("launch_pdl", False) and meta.get("global_scratch_size", 1) == 0
            and meta.get("profile_scratch_size", 1) == 0 and _field(meta.get("target"), "backend") == "cuda")


def _field(target: Any, name: str) -> Any:
    """A field of a ``GPUTarget``, or of its JSON form (a dict) in a metadata file."""
    return target.get(name) if isinstance(target, dict) else getattr(target, name, None)


def _load() -> Any:
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + repr((sys.version, platform.machine(), sysconfig.get_config_var("EXT_SUFFIX"),
                                         build.compiler())).encode()).hexdigest()[:24]
    path = build.cache_dir() / "launch" / f"{NAME}-{key}.so"
    data = build.verified_read(path)
    if data is None:
        data = _build(source)
        build.verified_write(path, data)
    # load exactly the verified bytes: a private copy, as build._load_verified does for kernels
    private = storage.private_dir() / f"{NAME}-{key}-{os.getpid()}.so"
    private.write_bytes(data)
    try:
        loader = importlib.machinery.ExtensionFileLoader(NAME, str(private))
        spec = importlib.util.spec_from_file_location(NAME, str(private), loader=loader)
        ext = importlib.util.module_from_spec(spec)
        loader.exec_module(ext)
        return ext
    finally:
        private.unlink(missing_ok=True)


def _build(source: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tc-launch-") as tmp:
        src, out = Path(tmp) / f"{NAME}.c", Path(tmp) / f"{NAME}.so"
        src.write_bytes(source)
        include = sysconfig.get_paths()["include"]
        cmd = [build.compiler(), "-x", "c", "-O2", "-shared", "-fPIC", "-w", f"-I{include}", str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {SOURCE.name} failed:\n{proc.stderr[-2000:]}")
        return out.read_bytes()
