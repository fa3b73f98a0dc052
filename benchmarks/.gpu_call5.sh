set -u
export PYTHONPATH="$(ls -d $PWD/packages/*/src | tr "\n" ":")${PYTHONPATH:-}" TC_ZOO_DEVICE=cuda PYTHONUNBUFFERED=1 TC_COMPILE_WORKERS=3
Z=benchmarks/zoo_case_errors.py
( timeout 385 python3 benchmarks/ptxas_bisect.py --ways 6 --timeout 150 --keep $OUT/bisect -- python3 $Z timm/inception_v3 train --float64 --image-size 107 --top 4 > $OUT/bisect.log 2>&1; echo "rc $?" >> $OUT/bisect.log ) &
( export DISABLE_PTXAS_OPT=1 TC_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d); timeout 300 python3 $Z timm/mobilenetv3_small_050 train --float64 --image-size 96 --top 6 > $OUT/mnv3_O0.log 2>&1; echo "rc $?" >> $OUT/mnv3_O0.log ) &
wait
cd $OUT && tar czf bisect.tgz bisect && rm -rf bisect
cat $OUT/bisect.log; tail -20 $OUT/mnv3_O0.log
