#!/usr/bin/env bash
# Everything GPU-only in one call on the Hopper GPU test host (see ../.library/device):
# the cuda-marked tests of every package, then the kernel, overhead and CUDA-graph benchmarks.
# Usage there: bash benchmarks/gpu_suite.sh [tests|bench|f64zoo|all]   (logs go to $OUT when set)
#   f64zoo: the zoo in float64 alone with CNNs 32 pixels larger (any wrong kernel shows; NOTES §30)
# Wheels in .whl/ (gitignored: expecttest, pytest-xdist, execnet; the host has no index) are
# installed first when carried; with xdist the tests and the zoo run 4 at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/gpu_suite_site .whl/*.whl
  export PYTHONPATH="/tmp/gpu_suite_site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$(ls -d $PWD/packages/*/src | tr "\n" ":")${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-bench_out}"; mkdir -p "$OUT"
what="${1:-all}"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4")
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 540 python3 -m pytest -p no:cacheprovider -q -rfE $XDIST -m cuda packages tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -40
fi
if [ "$what" = f64zoo ]; then
  TC_ZOO_DEVICE=cuda TC_ZOO=full TC_ZOO_FLOAT64=1 TC_ZOO_IMAGE_GROW=32 TC_ZOO_RESULTS="$OUT/zoo_f64.md" \
    timeout 560 python3 -m pytest -p no:cacheprovider -q -rfE $XDIST tests/zoo/test_zoo.py 2>&1 | tee "$OUT/zoo_f64.log" | tail -30
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in benchmarks/kernels.py benchmarks/overhead.py; do
    [ -f "$b" ] && timeout 240 python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -30
  done
  timeout 120 python3 -m tc_runtime.bench 2>&1 | tee "$OUT/cudagraph_bench.log" | tail -15
fi
