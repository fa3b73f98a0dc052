"""Fixtures of the tc_runtime tests: isolated cache roots and a fixed environment."""

from __future__ import annotations

import pytest

from tc_runtime import ArtifactCache, config
from tc_runtime.cache import keys


@pytest.fixture(autouse=True)
def _stable_environment(monkeypatch):
    # Other people edit tc sources while these tests run; hashing them into the environment
    # would make keys differ between a parent test process and its subprocesses.
    monkeypatch.setattr(config, "fingerprint_sources", False)
    keys.current_environment.cache_clear()
    yield
    keys.current_environment.cache_clear()


@pytest.fixture
def cache(tmp_path) -> ArtifactCache:
    return ArtifactCache(tmp_path / "cache")
