"""The on-disk compiled-artifact cache and its portable bundles."""

from .bundle import BundleError, LoadStats, load_artifacts, save_artifacts
from .entry import CorruptEntry
from .keys import Environment, cache_key, current_environment
from .store import LAYOUT, ArtifactCache, Counters, EntryInfo

__all__ = ["ArtifactCache", "Counters", "EntryInfo", "LAYOUT", "Environment", "cache_key",
           "current_environment", "CorruptEntry", "save_artifacts", "load_artifacts", "LoadStats",
           "BundleError"]
