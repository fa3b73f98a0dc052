"""Triton kernels on CPU tensors run under the Triton interpreter, which must be on before
triton is first imported; on a CUDA machine Triton compiles for the GPU instead."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))  # helpers.py and op_corpus.py

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
