"""Fail if a package imports one of our packages that it does not declare, or that DESIGN.md forbids.

DESIGN.md: every package may import tc_ir; no package imports a sibling other than tc_ir; only the
umbrella (tc) imports them all. Imports are read with ``ast``, so strings and comments don't count.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = {"tc_ir": "tc-ir", "tc_capture": "tc-capture", "tc_autograd": "tc-autograd",
        "tc_inductor": "tc-inductor", "tc_runtime": "tc-runtime", "tc": "tc"}
ALLOWED = {"tc-ir": set(), "tc": set(OURS.values()) - {"tc"}}  # others: tc-ir only


def imported_roots(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def declared(package_dir: Path) -> set[str]:
    meta = tomllib.loads((package_dir / "pyproject.toml").read_text())
    names = {d.split(">")[0].split("=")[0].split(";")[0].strip() for d in meta["project"]["dependencies"]}
    return names & set(OURS.values())


def problems() -> list[str]:
    found = []
    for package_dir in sorted((ROOT / "packages").iterdir()):
        name = package_dir.name
        allowed = ALLOWED.get(name, {"tc-ir"})
        have = declared(package_dir)
        if have - allowed - {"tc-ir"}:
            found.append(f"{name}/pyproject.toml declares {sorted(have - allowed)}, which DESIGN.md forbids")
        for path in sorted((package_dir / "src").rglob("*.py")):
            for root, line in imported_roots(path):
                dep = OURS.get(root)
                if dep is None or dep == name:
                    continue
                where = f"{path.relative_to(ROOT)}:{line}"
                if dep not in allowed and dep != "tc-ir":
                    found.append(f"{where}: {name} imports {root}; DESIGN.md allows only tc_ir")
                elif dep not in have:
                    found.append(f"{where}: {name} imports {root} but does not declare {dep}")
    return found


if __name__ == "__main__":
    bad = problems()
    print("\n".join(bad) or "dependency check: every package imports only what it declares and may")
    sys.exit(1 if bad else 0)
