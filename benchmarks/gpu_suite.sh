#!/usr/bin/env bash
# Everything GPU-only in one call on the Hopper GPU test host (see ../.library/device):
# the cuda-marked tests of every package, then the kernel, overhead and CUDA-graph benchmarks.
# Usage there: bash benchmarks/gpu_suite.sh [tests|bench|all]   (logs go to $OUT when set)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$(ls -d $PWD/packages/*/src | tr "\n" ":")${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-bench_out}"; mkdir -p "$OUT"
what="${1:-all}"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 420 python3 -m pytest -p no:cacheprovider -q -m cuda packages tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -40
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in benchmarks/kernels.py benchmarks/overhead.py; do
    [ -f "$b" ] && timeout 240 python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -30
  done
  timeout 120 python3 -m tc_runtime.bench 2>&1 | tee "$OUT/cudagraph_bench.log" | tail -15
fi
