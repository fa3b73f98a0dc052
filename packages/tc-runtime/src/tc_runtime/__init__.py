"""tc_runtime: the CUDA-graph runtime and the on-disk compiled-artifact cache of tc.

>>> import tc_runtime
>>> g = tc_runtime.cudagraphify(fn, [x])                 # CUDA graphs, one per input signature
>>> cache = tc_runtime.ArtifactCache()                   # $TC_CACHE_DIR or ~/.cache/tc
>>> cache.put("triton", cache.key(source), source.encode())
>>> blob = tc_runtime.save_artifacts(); tc_runtime.load_artifacts(blob)
"""

from .cache import (
    LAYOUT,
    ArtifactCache,
    BundleError,
    CorruptEntry,
    Environment,
    LoadStats,
    cache_key,
    current_environment,
    load_artifacts,
    save_artifacts,
)
from .config import Config, config
from .cudagraphs import CudaGraphed, cudagraphify, shared_pool
from .timings import Timings

__version__ = "0.1.0"

__all__ = [
    "cudagraphify", "CudaGraphed", "shared_pool",
    "ArtifactCache", "LAYOUT", "cache_key", "Environment", "current_environment", "CorruptEntry",
    "save_artifacts", "load_artifacts", "LoadStats", "BundleError",
    "Timings", "Config", "config",
]
