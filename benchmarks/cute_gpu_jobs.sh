#!/usr/bin/env bash
# The cute language on the GPUs of one host, for docs/search_gpu.md ("CuTe"), a queue per GPU.
#
#   bash benchmarks/cute_gpu_jobs.sh PLAN OUT [MINUTES]
#
# PLAN: check   GPU 0: the GPU tests of the cute language (its conformance row and each task's
#               CuTe kernel on every shape), then the baselines of silu_and_mul and
#               fused_add_rmsnorm with their CuTe starts timed beside them (--starts cute);
#               GPU 1 (GPU 0 where there is one): the CuTe gemm against cuBLAS at 4096^3 and
#               8192^3 at every knob setting (cute_gemm).
#       search  GPU 0: a search of silu_and_mul with cuda, triton and cute lineages side by side;
#               GPU 1: the same for fused_add_rmsnorm.
# CUTLASS's headers come from CUTLASS_PATH, else .gpu-cute/cutlass-include.tar.xz (the include/
# folder of the nvidia-cutlass wheel, packed), else the installed nvidia-cutlass wheel. Each job
# has its own time limit and writes its log (and its report, once done) under OUT as it goes
# (packed into OUT/logs.tgz at the end), so a call killed at its limit keeps what finished.
set -u
plan=${1:?PLAN: check or search}
out=${2:?OUT folder}
minutes=${3:-4}
stamp=$(date -u +%Y%m%d)
mkdir -p "$out/logs"
export KERNELSWARM_CACHE=${KERNELSWARM_CACHE:-$PWD/.gpu-cache/ks}
mkdir -p "$KERNELSWARM_CACHE"
if [ -f .gpu-cache/cache.tgz ] && [ ! -f "$KERNELSWARM_CACHE/.unpacked" ]; then
  tar -C "$KERNELSWARM_CACHE" -xzf .gpu-cache/cache.tgz && touch "$KERNELSWARM_CACHE/.unpacked"
fi
if [ -z "${CUTLASS_PATH:-}" ] && [ -f .gpu-cute/cutlass-include.tar.xz ]; then
  mkdir -p /tmp/cutlass && xz -dc .gpu-cute/cutlass-include.tar.xz | tar -C /tmp/cutlass -xf -
  export CUTLASS_PATH=/tmp/cutlass
fi
if [ -f .gpu-anchors/fi_subset.tar.xz ]; then  # FlashInfer among the baselines
  mkdir -p /tmp/fisite && xz -dc .gpu-anchors/fi_subset.tar.xz | tar -C /tmp/fisite -xf -
  export PYTHONPATH=/tmp/fisite${PYTHONPATH:+:$PYTHONPATH} FLASHINFER_WORKSPACE_BASE=/tmp/fi_ws
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
second=$((gpus > 1 ? 1 : 0))

step() {  # NAME GPU LIMIT_S COMMAND...: run COMMAND on GPU with its own limit, log to OUT/logs
  local name=$1 gpu=$2 seconds=$3
  shift 3
  local began
  began=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 "$seconds" "$@" >"$out/logs/$name.log" 2>&1
  echo "exit $? after $(($(date +%s) - began)) s on GPU $gpu" >>"$out/logs/$name.log"
}

search() {  # NAME GPU TASK
  step "$1" "$2" "$(python -c "print(int($minutes * 60 + 200))")" \
    python -m benchmarks.search_gpu --task "$3" --lineages 3 \
    --minutes "$minutes" --languages cuda,triton,cute --out "/tmp/runs-$1" \
    --json "$out/search-gpu-$3-cute-$stamp.json"
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
queue0() {
  case "$plan" in
    check)
      KERNELSWARM_BASELINE_COMPILE=0 step tests-cute 0 200 python -m pytest -q -m gpu \
        -p no:cacheprovider -rfE --tb=short tests/evaluators/test_cute_language.py
      KERNELSWARM_BASELINE_COMPILE=0 step tests-conformance 0 120 python -m pytest -q -m gpu \
        -p no:cacheprovider -rfE --tb=short tests/conformance/test_languages.py -k cute
      step baselines 0 320 python -m benchmarks.baselines \
        --tasks silu_and_mul,fused_add_rmsnorm --starts cute --budget-s 0.15 \
        --out "$out/baselines-cute-$stamp.json" --markdown "$out/baselines-cute-$stamp.md" ;;
    search) search search-silu 0 silu_and_mul ;;
  esac
}
queue1() {  # on GPU 1, or after queue0 on GPU 0 where there is one GPU
  case "$plan" in
    check)
      step gemm "$second" 420 python -m benchmarks.cute_gemm \
        --json "$out/cute-gemm-$stamp.json" ;;
    search) search search-rms "$second" fused_add_rmsnorm ;;
  esac
}
case "$plan" in
  check|search) ;;
  *) echo "unknown plan $plan (check or search)" >&2; exit 2 ;;
esac
if [ "$second" = 1 ]; then
  queue0 &
  queue1 &
else
  queue0
  queue1
fi
wait
tar -C "$KERNELSWARM_CACHE" -czf "$out/cache.tgz" --exclude='*.lock' \
  $(cd "$KERNELSWARM_CACHE" && ls -d calibration baselines starts 2>/dev/null)
tar -C "$out" -czf "$out/logs.tgz" logs && rm -rf "$out/logs"
ls -la "$out"
