#!/usr/bin/env bash
# On a GPU machine with torch/torchvision installed (no venv): build the extension for the
# local GPU and run the tests, compute-sanitizer over the CUDA kernel tests, and the
# benchmarks. Logs go to ${OUT:-/tmp/gpu_check}.
#   bash scripts/gpu_check.sh [build] [tests] [sanitize] [bench] [chain] [profile]
#   (default: the first four; chain = benchmarks/chain.py, profile = the train stage's
#   profile on the GPU path)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
steps=${*:-build tests sanitize bench}
status=0
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# The system compiler, whatever CXX says: a g++ that links libstdc++ statically (such as
# /opt/gcc on our GPU machines) builds an extension that crashes when it formats an error.
export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # the in-place build, for the scripts
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-$(nproc)}
for step in $steps; do
  start=$(date +%s)
  case $step in
    build) python3 setup.py build_ext --inplace > "$out/build.log" 2>&1 ;;
    tests) python3 -m pytest tests -q -p no:cacheprovider > "$out/tests.log" 2>&1 ;;
    sanitize) compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m pytest -q \
                -p no:cacheprovider -k "cuda or gpu or mixed" tests > "$out/sanitize.log" 2>&1 ;;
    bench) { python3 benchmarks/kernels.py && python3 -m torchdali.bench --device all --json "$out/bench.json"; } \
             > "$out/bench.log" 2>&1 ;;
    chain) python3 benchmarks/chain.py --threads 2 > "$out/chain.log" 2>&1 ;;
    profile) python3 benchmarks/profile_pipeline.py --device gpu --batch-size 256 > "$out/profile.log" 2>&1 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  rc=$?
  echo "$step: exit $rc, $(( $(date +%s) - start )) s; $(tail -n 1 "$out/$step.log")"
  [ $rc -eq 0 ] || status=1
done
exit $status
