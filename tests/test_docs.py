"""The Python blocks of docs/*.md run as written, each page in one namespace, in order.

The Hugging Face recipes (blocks that import transformers or accelerate) train a tiny GPT-2
for two steps with tc and with eager; they are marked slow (``nox -s slow``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def uses_hf(block: str) -> bool:
    return bool(re.search(r"^import (transformers|accelerate)", block, flags=re.M))


def run(page: str, chosen: list[str]) -> None:
    namespace: dict = {}
    for i, block in enumerate(chosen):
        exec(compile(block, f"{page} block {i + 1}", "exec"), namespace)  # noqa: S102


def test_from_torch_compile_examples_run():
    chosen = [b for b in blocks("from-torch-compile.md") if not uses_hf(b)]
    assert len(chosen) >= 2
    run("from-torch-compile.md", chosen)


@pytest.mark.slow
def test_hugging_face_recipes_train_like_eager():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    page = blocks("from-torch-compile.md")
    first_hf = next(i for i, b in enumerate(page) if uses_hf(b))
    assert len(page[first_hf:]) >= 2  # Trainer, then accelerate
    run("from-torch-compile.md", page[first_hf:])
