#!/usr/bin/env bash
# Everything GPU-only in one call on the Hopper GPU test host (see ../.library/device):
# the cuda-marked tests of every package, then the kernel, overhead and CUDA-graph benchmarks.
# Usage there: bash benchmarks/gpu_suite.sh [tests|bench|f64zoo|soundness|all]   (logs go to $OUT when set)
#   f64zoo: the zoo in float64 alone with CNNs 32 pixels larger (any wrong kernel shows; NOTES §30)
#   soundness: the cuda tests beside the float64 zoo, then the float32 zoo (one device call; -v)
#   bisect CASE TASK [SIZE]: ptxas_bisect.py --ways 6 on a zoo case in float64 (which kernel's -O3
#     build makes it wrong; the culprit's PTX and Triton source are packed into $OUT/bisect.tgz)
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
cuda_tests() {  # $1: pytest's verbosity flag
  timeout 540 python3 -m pytest -p no:cacheprovider "$1" -rfE $XDIST -m cuda packages tests > "$OUT/cuda_tests.log" 2>&1
  tail -40 "$OUT/cuda_tests.log"
}
zoo() {  # $1: f64 or f32, $2: pytest's verbosity flag, $3: seconds it may take
  local env=(TC_ZOO_DEVICE=cuda TC_ZOO=full TC_ZOO_RESULTS="$OUT/zoo_$1.md")
  [ "$1" = f64 ] && env+=(TC_ZOO_FLOAT64=1 TC_ZOO_IMAGE_GROW=32)
  env "${env[@]}" timeout "$3" python3 -m pytest -p no:cacheprovider "$2" -rfE $XDIST tests/zoo/test_zoo.py \
    > "$OUT/zoo_$1.log" 2>&1
  tail -30 "$OUT/zoo_$1.log"
}
case "$what" in
  tests|all) cuda_tests -q ;;
  f64zoo) zoo f64 -q 540 ;;
  soundness)  # side by side; -v so that a run cut by its timeout still names every test that ended.
    # The float64 zoo took 203 s on the H200 (§31): the float32 zoo follows it in the time left.
    TC_COMPILE_WORKERS=4 cuda_tests -v > "$OUT/cuda_tests.tail" &
    ( start=$SECONDS; TC_COMPILE_WORKERS=4 zoo f64 -v 400 > "$OUT/zoo_f64.tail"
      left=$((530 - SECONDS + start)); [ "$left" -gt 60 ] && TC_COMPILE_WORKERS=4 zoo f32 -v "$left" > "$OUT/zoo_f32.tail" ) &
    wait; logs=("$OUT"/cuda_tests.log "$OUT"/zoo_f*.log)
    grep -c PASSED "${logs[@]}"; grep -E "FAILED|ERROR" "${logs[@]}" | head -60; tail -n 3 "${logs[@]}" ;;
  bisect)
    TC_ZOO_DEVICE=cuda TC_COMPILE_WORKERS=3 timeout 560 python3 benchmarks/ptxas_bisect.py --ways 6 --timeout 150 \
      --keep "$OUT/bisect" -- python3 benchmarks/zoo_case_errors.py "$2" "$3" --float64 ${4:+--image-size $4} --top 4 \
      2>&1 | tee "$OUT/bisect.log" | tail -40
    tar czf "$OUT/bisect.tgz" -C "$OUT" bisect && rm -rf "$OUT/bisect" ;;
esac
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in benchmarks/kernels.py benchmarks/overhead.py; do
    [ -f "$b" ] && timeout 240 python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -30
  done
  timeout 120 python3 -m tc_runtime.bench 2>&1 | tee "$OUT/cudagraph_bench.log" | tail -15
fi
