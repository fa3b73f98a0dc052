"""A guard's code object is read back from the cache in a later process (a large model's guard is
a third of a second of ``compile`` in every warm start), and it checks what it checked before."""

from __future__ import annotations

import marshal

import torch

import tc_capture


def _compiled(model):
    return tc_capture.optimize(tc_capture.interpret_backend)(model)


def test_guard_code_is_cached_and_still_guards(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    torch.testing.assert_close(_compiled(model)(x), model(x))
    guards = [p for p in (tmp_path / "code").glob("*.marshal")
              if marshal.loads(p.read_bytes()).co_filename == "<tc_capture guards>"]
    assert len(guards) == 1

    from tc_ir import storage

    compiles = []  # what the cache compiles (a raise here would only make tc fall back to eager)

    def counted(source, filename, mode):
        compiles.append(filename)
        return compile(source, filename, mode)

    monkeypatch.setattr(storage, "compile", counted, raising=False)  # a later process reads it back
    compiled = _compiled(model)
    torch.testing.assert_close(compiled(x), model(x))
    assert "<tc_capture guards>" not in compiles, compiles  # read back, not compiled
    monkeypatch.delattr(storage, "compile")
    model[0] = torch.nn.Linear(4, 4)  # a new module's parameters are read by the read-back guard
    y = torch.randn(5, 4)
    torch.testing.assert_close(compiled(y), model(y))


def test_guard_rewrite_is_cached_and_keyed_by_the_guards(tmp_path, monkeypatch):
    """The hoisting rewrite of the guard lines is read back in a later process (not redone), and
    guards over other sources (another module, another structure) get their own entry."""
    from tc_capture.cache import guards as guards_module

    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    rewrites = []
    real = guards_module._rewrite_blocks
    monkeypatch.setattr(guards_module, "_rewrite_blocks", lambda *a: rewrites.append(1) or real(*a))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    torch.testing.assert_close(_compiled(model)(x), model(x))
    assert len(rewrites) == 1 and len(list((tmp_path / "guards").glob("*.json"))) == 1
    compiled = _compiled(model)  # a later process: the same guards
    torch.testing.assert_close(compiled(x), model(x))
    assert len(rewrites) == 1
    model[2] = torch.nn.Linear(4, 3)  # the read-back guard still checks the module it reads
    torch.testing.assert_close(compiled(x), model(x))
    other = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())  # other guards: rewritten
    torch.testing.assert_close(_compiled(other)(x), other(x))
    assert len(rewrites) >= 3 and len(list((tmp_path / "guards").glob("*.json"))) >= 3
