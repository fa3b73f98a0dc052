"""Sessions for the tc monorepo. ``nox -l`` lists them; each says what it is for."""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PINS = ["torch==2.13.0", "triton==3.6.0"]
# numpy: the Triton interpreter (CPU tests of generated kernels) needs it; transformers: HF models in capture tests
# expecttest: torch.testing._internal (the OpInfo database of tests/opinfo) imports it
# pytest-xdist: tests run in parallel (one worker per core); accelerate: the Hugging Face recipes of docs/
TEST_TOOLS = ["pytest>=8", "hypothesis>=6", "pytest-timeout", "numpy", "transformers==5.23.0", "expecttest",
              "pytest-xdist>=3", "accelerate"]
TEST_DIRS = [f"packages/{p}/tests" for p in ["tc-ir", "tc-capture", "tc-autograd", "tc-inductor", "tc-runtime", "tc"]]
TEST_DIRS += ["tests"]
PARALLEL = ["-n", "auto"]  # pytest-xdist: one worker per CPU core
# Folders under packages/; their distributions are named tcjit-ir, ..., tcjit (the umbrella)
PACKAGES = ["tc-ir", "tc-capture", "tc-autograd", "tc-inductor", "tc-runtime", "tc"]

nox.options.sessions = ["lint", "deps", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _project(folder: str) -> dict:
    return tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]


def _declared_ours(package: str) -> list[str]:
    """The folders of our packages that ``package`` (a folder) declares as dependencies, transitively."""
    folder_of = {_project(p)["name"]: p for p in PACKAGES}  # distribution name (tcjit-...) -> folder
    direct = [d.split(">")[0].split("=")[0].split(";")[0].strip() for d in _project(package)["dependencies"]]
    found: list[str] = []
    for dep in [folder_of[d] for d in direct if d in folder_of]:
        found += [d for d in _declared_ours(dep) + [dep] if d not in found]
    return found


def _install(session: nox.Session, packages: list[str]) -> None:
    session.install(*PINS, *TEST_TOOLS)
    editable = [arg for p in packages for arg in ("-e", str(ROOT / "packages" / p))]
    session.install("--no-build-isolation", *editable)


@nox.session
def tests(session: nox.Session) -> None:
    """Every test but those marked slow, in parallel: the dependency check, each package's unit
    tests, and the integration tests in tests/ (``nox -s slow`` runs the slow ones)."""
    _install(session, PACKAGES)
    session.run("python", str(ROOT / ".ci" / "check_deps.py"))
    session.run("pytest", *PARALLEL, "-m", "not slow", *TEST_DIRS, *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The tests marked slow (whole-model trainings, Hugging Face recipes, subprocess cache runs), in parallel."""
    _install(session, PACKAGES)
    session.run("pytest", *PARALLEL, "-m", "slow", *TEST_DIRS, *session.posargs)


@nox.session
@nox.parametrize("name", [nox.param(p, id=p) for p in PACKAGES])
def package(session: nox.Session, name: str) -> None:
    """One package's tests with only it and its declared dependencies installed (proves separability)."""
    _install(session, _declared_ours(name) + [name])
    session.run("pytest", f"packages/{name}/tests", *session.posargs)


# timm imports torchvision; PyPI's 0.28.0 (the one for torch 2.13) is a CUDA build: tests/zoo/tv_cpu.py says why it still imports
ZOO_TOOLS = ["timm==1.0.31", "torchvision==0.28.0"]


@nox.session
def zoo(session: nox.Session) -> None:
    """Model zoo: tiny timm and HF models, inference and a training step, tc.compile vs eager, then a table."""
    _install(session, PACKAGES)
    session.install(*PINS, *ZOO_TOOLS)
    session.run("pytest", "tests/zoo", *session.posargs, env={"TC_ZOO": "full"})


@nox.session
def fuzz(session: nox.Session) -> None:
    """Differential fuzzer: N random programs (default 10000, half gradient mode) vs eager, then a table.

    `nox -s fuzz -- 2000 --workers 8 --shrink` (or TC_FUZZ_N); see tests/fuzz/README.md."""
    _install(session, PACKAGES)
    session.run("python", "tests/fuzz/run.py", *session.posargs)


@nox.session
def convfuzz(session: nox.Session) -> None:
    """Random small conv nets (pools, strides, batch norm, casts, residuals) vs eager, both layouts.

    `nox -s convfuzz -- 300 --start 1000 --layout never`; see tests/fuzz/README.md."""
    _install(session, PACKAGES)
    args = session.posargs or ["300"]
    session.run("python", "tests/fuzz/convnets.py", *args)


@nox.session
def sweep(session: nox.Session) -> None:
    """OpInfo sweep: every op of torch's op_db, forward and backward, hand-built graphs and tc.compile vs eager.

    `nox -s sweep -- --workers 4 --samples 0` (all samples); `-- --device cuda` on the GPU host;
    see tests/opinfo/README.md."""
    _install(session, PACKAGES)
    session.run("python", "tests/opinfo/run.py", *session.posargs)


@nox.session
def deps(session: nox.Session) -> None:
    """Fail if a package imports one of ours that it does not declare, or breaks the import rule (docs/ARCHITECTURE.md)."""
    session.run("python", str(ROOT / ".ci" / "check_deps.py"))


@nox.session
def demo(session: nox.Session) -> None:
    """Install tc and run the demo: a model compiled, checked against eager, and timed."""
    _install(session, PACKAGES)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every package, the tests, benchmarks and this file."""
    session.install("ruff")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "examples", "noxfile.py", ".ci")


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks (not in CI): pass a script name, e.g. ``nox -s bench -- models``."""
    _install(session, PACKAGES)
    scripts = session.posargs or ["models"]
    for script in scripts:
        session.run("python", f"benchmarks/{script}.py")
