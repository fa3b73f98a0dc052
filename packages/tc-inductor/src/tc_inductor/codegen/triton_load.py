"""Loading a compiled Triton kernel without Triton's compiler cache key.

``JITFunction.warmup`` (and ``run`` on a miss) ends in ``_do_compile`` → ``triton.compile``,
which first computes Triton's cache key: ``triton_key()`` hashes Triton's own sources (seconds,
once per process) and the NVIDIA backend's hash runs ``ptxas --version``, and only then finds
the binary that a compile worker (``triton_compile.py``) or the artifact store put into
Triton's cache directory. Here the kernel is built the way ``triton.compile`` builds a cache
hit, ``CompiledKernel(ASTSource(fn, signature, constexprs, attrs), metadata_group, hash)``,
with:

* ``signature``, ``constexprs`` and ``attrs`` bound by Triton's own binder and argument packing
  (``JITFunction.device_caches[device]`` and ``_pack_args``: what ``run`` computes before
  ``_do_compile``, none of it hashing Triton), on the same arguments and keyword arguments that
  ``warmup`` would get, so they are what ``warmup`` would bind: Triton's C launcher is generated
  from them (a mismatch would be wrong launches);
* ``hash``: the one Triton computed where the kernel was compiled (the worker's reply, or the
  artifact-store entry), so that the lookup is Triton's own (``get_cache_manager(hash)``).

What was compiled must be what is loaded: the description that comes with the hash (the
signature, constants and attributes of the ``CompiledKernel.src`` the compile made) must equal
the binding here, and the binary's metadata must name this hash, this target, these compile
options, the cache-invalidating environment variables and Triton version; anything else raises
``LoadError`` and the caller compiles through ``warmup`` (logged under ``TC_LOGS=perf_hints``).
The loaded kernel is also entered in the ``JITFunction``'s own kernel cache under ``run``'s key,
so a launch that goes through ``run`` (a profiler hook, a misaligned pointer) finds it there.
"""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path
from typing import Any, NamedTuple


class LoadError(RuntimeError):
    """The kernel cannot be loaded without Triton's compile path (missing or not the same)."""


class Bound(NamedTuple):
    """What ``JITFunction.run`` binds for some arguments, up to its kernel-cache lookup."""

    args: dict  # the kernel's parameters by name, constexprs included (run launches their values)
    key: str  # the JITFunction's kernel-cache key
    signature: dict
    constexprs: dict
    attrs: dict
    options: Any  # the backend's parsed options
    kernel_cache: dict


def run_kwargs(fn: Any, kwargs: dict) -> dict:
    """``kwargs`` completed as ``JITFunction.run`` completes them (debug, instrumentation)."""
    return completed_kwargs(kwargs, fn.debug)


def completed_kwargs(kwargs: dict, debug: Any) -> dict:
    """``run_kwargs`` for a ``JITFunction`` whose own ``debug`` (its decorator's) is ``debug``."""
    from triton import knobs

    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    return kwargs


def bind(fn: Any, args: Any, kwargs: dict) -> Bound:
    """Triton's binding of ``fn(*args, **kwargs)`` for the current device, as ``run`` does it."""
    from triton.runtime import driver
    from triton.runtime.jit import MockTensor, compute_cache_key

    kwargs = run_kwargs(fn, kwargs)
    device = driver.active.get_current_device()
    kernel_cache, key_cache, _, backend, binder = fn.device_caches[device]
    bound, specialization, options = binder(*[MockTensor.wrap_dtype(a) for a in args], **kwargs)
    key = compute_cache_key(key_cache, specialization, options)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return Bound(bound, key, signature, constexprs, attrs, options, kernel_cache)


def describe(src: Any) -> dict:
    """The signature, constants and attributes of a ``CompiledKernel.src`` as plain JSON data
    (what a compile worker replies and the artifact-store entry holds)."""
    return _plain({"signature": dict(src.signature), "constants": sorted(map(list, src.constants.items())),
                   "attrs": sorted(map(list, src.attrs.items()))})


def bound_description(fn: Any, bound: Bound) -> dict:
    """``describe`` of the ``src`` that ``run`` would compile for ``bound``."""
    from triton.compiler import ASTSource

    return describe(ASTSource(fn, bound.signature, bound.constexprs, bound.attrs))


def load(fn: Any, args: Any, kwargs: dict, digest: str, described: dict | None) -> Any:
    """The ``CompiledKernel`` of hash ``digest`` for ``fn.warmup(*args, grid=..., **kwargs)``,
    read from Triton's cache directory without computing Triton's cache key; ``LoadError``
    when it is absent or not what ``warmup`` would compile."""
    from triton.compiler import ASTSource, CompiledKernel
    from triton.runtime.cache import get_cache_manager
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction) or not isinstance(digest, str) or not isinstance(described, dict):
        raise LoadError("no JITFunction, hash or description of the compiled kernel")
    b = bind(fn, args, kwargs)
    src = ASTSource(fn, b.signature, b.constexprs, b.attrs)
    if describe(src) != described:
        raise LoadError(f"compiled as {described}, warmup binds {describe(src)}")
    group = get_cache_manager(digest).get_group(f"{src.name[:150]}.json")
    if not group:
        raise LoadError(f"no Triton cache entry {digest}")
    try:
        kernel = CompiledKernel(src, launch_files(group, src.name[:150]), digest)
    except (OSError, ValueError, KeyError, StopIteration) as e:  # a file of the group is gone or damaged
        raise LoadError(f"Triton cache entry {digest} is unreadable ({type(e).__name__}: {e})") from e
    _check_metadata(kernel.metadata._asdict(), digest, b.options)
    b.kernel_cache.setdefault(b.key, kernel)
    return kernel


class Verified(NamedTuple):
    """A kernel loaded by ``load_verified``: the driver's function handle and Triton's metadata."""

    function: int
    metadata: dict


def load_verified(digest: str, name: str, kwargs: dict, debug: Any, device: int) -> Verified:
    """The binary of hash ``digest`` (kernel ``name``) read from Triton's cache directory and
    loaded on ``device``, for a kernel that an earlier process compiled, loaded through ``load``
    and whose direct launch it compared with Triton's own (``triton_launch``): no
    ``JITFunction``, no binding and no Triton launcher. What is still checked is what this
    process could change: the binary's metadata names this hash, this target, the Triton
    version, the cache-invalidating environment and the compile options that ``run`` would
    parse here from the launch's ``kwargs`` (with this process's debug and instrumentation
    knobs); shared memory and threads fit the device; no kernel-load hook (a profiler) is set.
    ``LoadError`` otherwise: the caller then loads the kernel through ``load``."""
    from triton import knobs
    from triton.compiler.compiler import make_backend, max_shared_mem
    from triton.runtime import driver

    if hooked(knobs.runtime.kernel_load_start_hook) or hooked(knobs.runtime.kernel_load_end_hook):
        raise LoadError("a kernel-load hook is set")
    root = cache_root()
    entry = triton_cache_entry(root, digest)
    if entry is None:
        raise LoadError(f"no Triton cache entry {digest}")
    name = name[:150]
    try:
        meta = json.loads((root / entry / f"{name}.json").read_text())
        binary = (root / entry / f"{name}.{_binary_ext()}").read_bytes()
    except (OSError, ValueError) as e:
        raise LoadError(f"Triton cache entry {digest} is unreadable ({type(e).__name__}: {e})") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("target"), dict):
        raise LoadError(f"Triton cache entry {digest} has no metadata")
    options = make_backend(driver.active.get_current_target()).parse_options(completed_kwargs(kwargs, debug))
    _check_metadata(meta, digest, options)
    threads = meta["num_warps"] * meta["target"]["warp_size"]
    if meta["shared"] > max_shared_mem(device):
        raise LoadError(f"{name} needs {meta['shared']} bytes of shared memory")
    _, function, _, _, max_threads = driver.active.utils.load_binary(meta["name"], binary, meta["shared"], device)
    if threads > max_threads:
        raise LoadError(f"{name} needs {threads} threads, the device gives {max_threads}")
    return Verified(function, meta)


def cache_root() -> Path:
    """Triton's cache directory."""
    from triton import knobs

    return Path(knobs.cache.dir)


def triton_cache_entry(root: Path, digest: str) -> str | None:
    """The directory of the compiled kernel of hash ``digest`` in Triton's cache ``root``: named
    by the hash's base32 (Triton 3.x's ``FileCacheManager``), or the hash itself; None if absent."""
    names = [digest]
    with contextlib.suppress(ValueError):
        names.insert(0, base64.b32encode(bytes.fromhex(digest)).decode().rstrip("="))
    return next((n for n in names if (root / n).is_dir()), None)


def hooked(hook: Any) -> bool:
    """Whether a Triton launch or kernel-load hook is set: triton 3.6's knobs hold a ``HookChain``
    that is never None (empty ``calls`` when no profiler is attached); earlier versions hold None
    or a function.
    Testing ``is not None`` sent every launch through ``run`` on triton 3.6 (half of ResNet-50's
    training step on the host, measured on the H100)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else True


def launch_files(group: dict, name: str) -> dict:
    """The entries of a Triton cache group that loading and launching read: the metadata json
    and the binary. ``CompiledKernel`` reads every file it is given, and the IR texts (ttir,
    ttgir, llir, ptx, source: most of an entry's bytes) are only for people and profilers."""
    wanted = {f"{name}.json", f"{name}.{_binary_ext()}"}
    files = {child: path for child, path in group.items() if child in wanted}
    if len(files) != len(wanted):
        raise LoadError(f"Triton cache group of {name} lacks {sorted(wanted - files.keys())}")
    return files


def _binary_ext() -> str:
    """The current target's binary suffix (``cubin`` on NVIDIA, ``hsaco`` on AMD)."""
    from triton.compiler.compiler import make_backend
    from triton.runtime import driver

    target = driver.active.get_current_target()
    return _binary_exts.get(target) or _binary_exts.setdefault(target, make_backend(target).binary_ext)


_binary_exts: dict = {}


def _check_metadata(meta: dict, digest: str, options: Any) -> None:
    """The binary was compiled for this hash, target, options, environment and Triton."""
    wanted = {"hash": digest, **_process_metadata(), **_plain(options.__dict__)}
    have = {k: _plain(meta.get(k)) for k in wanted}
    if have != wanted:
        diff = {k: (have[k], wanted[k]) for k in wanted if have[k] != wanted[k]}
        raise LoadError(f"Triton cache entry {digest} was compiled otherwise: {diff}")


def _process_metadata() -> dict:
    """What every binary loaded by this process must have been compiled for: the Triton
    version, the current target and the cache-invalidating environment variables (as JSON)."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime import driver

    key = (driver.active.get_current_target(), tuple(sorted(get_cache_invalidating_env_vars().items())))
    found = _process_wanted.get(key)
    if found is None:
        found = _process_wanted.setdefault(key, {"triton_version": triton.__version__, "target": _plain(key[0]),
                                                  **_plain(dict(key[1]))})
    return found


_process_wanted: dict = {}


def _plain(value: Any) -> Any:
    """JSON data (tuples as lists, objects as their fields): how Triton writes its metadata."""
    return json.loads(json.dumps(value, default=_fields))


def _fields(obj: Any) -> Any:
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    return vars(obj)
