"""Fail if a package imports one of ours that it does not declare, or that the import rule forbids.

The rule (docs/ARCHITECTURE.md): every package may import tc_ir; no package imports a sibling other
than tc_ir; only the umbrella (tc) imports them all. Imports are read with ``ast``, so strings
and comments don't count. Each package's distribution name (``tcjit-…``) and import name come from
its folder: ``packages/<folder>/pyproject.toml`` and ``packages/<folder>/src/<import name>/``.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
BASE, UMBRELLA = "tc_ir", "tc"  # import names: the package all may import, and the one importing all


def requirement_name(requirement: str) -> str:
    """``"tcjit-ir>=0.1; python_version>'3'"`` -> ``"tcjit-ir"``."""
    for stop in "<>=!~;[ @":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


def metadata(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def import_name(folder: Path) -> str:
    (name,) = [p.name for p in (folder / "src").iterdir() if (p / "__init__.py").exists()]
    return name


def ours() -> dict[str, str]:
    """Import name -> distribution name of every package in the repository."""
    folders = [f for f in sorted(PACKAGES.iterdir()) if (f / "pyproject.toml").exists()]
    return {import_name(f): metadata(f)["name"].lower() for f in folders}


def imported_roots(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def problems() -> list[str]:
    dists = ours()
    found = []
    for folder in [f for f in sorted(PACKAGES.iterdir()) if (f / "pyproject.toml").exists()]:
        me = import_name(folder)
        allowed = set(dists) - {me} if me == UMBRELLA else ({BASE} - {me})
        declared = {requirement_name(r) for r in metadata(folder).get("dependencies", [])}
        for root in sorted(r for r, dist in dists.items() if dist in declared and r not in allowed):
            found.append(f"{folder.name}/pyproject.toml declares {dists[root]}, which the import rule forbids")
        for path in sorted((folder / "src").rglob("*.py")):
            for root, line in imported_roots(path):
                if root not in dists or root == me:
                    continue
                where = f"{path.relative_to(ROOT)}:{line}"
                if root not in allowed:
                    found.append(f"{where}: {me} imports {root}; only {UMBRELLA} imports siblings other than {BASE}")
                elif dists[root] not in declared:
                    found.append(f"{where}: {me} imports {root} but does not declare {dists[root]}")
    return found


if __name__ == "__main__":
    bad = problems()
    print("\n".join(bad) or f"dependency check: {len(ours())} packages import only what they declare and may")
    sys.exit(1 if bad else 0)
