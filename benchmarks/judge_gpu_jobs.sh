#!/usr/bin/env bash
# What judging a candidate costs on a GPU, before and after a change, in calls of the device tool
# (one GPU, 10 minutes a call). Run from the repository root on the GPU machine:
#
#   bash benchmarks/judge_gpu_jobs.sh before OUT [TASK...]   # eval_cost of the old tree
#   bash benchmarks/judge_gpu_jobs.sh check OUT [gpu_check args...]
#   bash benchmarks/judge_gpu_jobs.sh screen OUT [N]              # screen_cost of the three tasks
#
# Carried paths: .gpu-bundle (make-bundle), .gpu-cache (the caches of an earlier call, optional),
# .gpu-before (``before`` only: the tree to compare with, as kernelswarm/<package>/ and
# benchmarks/, made with
#   mkdir -p .gpu-before/kernelswarm && git archive REV search agents evaluators cluster \
#     experiments | tar -x -C .gpu-before/kernelswarm && git archive REV benchmarks | tar -x -C .gpu-before
# and imported ahead of the installed tree through PYTHONPATH; a tree whose benchmarks sit in
# experiments/benchmarks/ runs its eval_cost.py from there).
# Every call leaves OUT/caches.tar.gz (calibrations and baselines measured, unpacked by the next
# call from .gpu-cache/caches.tar.gz). torch.compile is left out of the baselines
# (KERNELSWARM_BASELINE_COMPILE=0): what is measured is the cost of each candidate after the
# calibration, and compile's minutes a task would spend the call's time on start-up.
set -uo pipefail
job=${1:?before|check|screen}; out=${2:?OUT}; shift 2
source .gpu-bundle/install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
export KERNELSWARM_CACHE=/tmp/kernelswarm-cache KERNELSWARM_TEST_CACHE=/tmp/kernelswarm-gpu-check
export KERNELSWARM_BASELINE_COMPILE=0 PYTHONUNBUFFERED=1
if [ -f .gpu-cache/caches.tar.gz ]; then tar -xzf .gpu-cache/caches.tar.gz -C / || true; fi
pack() {
  local dirs=()
  for d in "$KERNELSWARM_CACHE"/calibration "$KERNELSWARM_CACHE"/baselines \
           "$KERNELSWARM_TEST_CACHE"/calibration "$KERNELSWARM_TEST_CACHE"/baselines; do
    [ -d "$d" ] && dirs+=("${d#/}")
  done
  [ ${#dirs[@]} -gt 0 ] && tar -czf "$out/caches.tmp" -C / "${dirs[@]}" && mv "$out/caches.tmp" "$out/caches.tar.gz"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/device.txt"
case "$job" in
  before)
    tasks=("$@"); [ ${#tasks[@]} -eq 0 ] && tasks=(silu_and_mul fused_add_rmsnorm merge_attn_states_lse)
    # the old tree's own eval_cost, run as a file so that the checkout's benchmarks/ (the
    # current directory, first on the path of python -m) does not stand in for it
    before=.gpu-before/benchmarks/eval_cost.py
    [ -f "$before" ] || before=.gpu-before/kernelswarm/experiments/benchmarks/eval_cost.py
    for task in "${tasks[@]}"; do
      echo "=== before: eval_cost $task cuda cuda 3" | tee -a "$out/before.log"
      PYTHONPATH="$PWD/.gpu-before:${PYTHONPATH:-}" timeout 200 python3 "$before" \
        "$task" cuda cuda 3 >> "$out/before.jsonl" 2>> "$out/before.log"
      echo "exit $?" >> "$out/before.log"
      pack
    done
    tail -n 3 "$out/before.jsonl" ;;
  check)
    python3 -m benchmarks.gpu_check --out "$out" \
      --pack-cache "$out/caches.tar.gz" "$@"
    pack ;;
  screen)
    # full against screened-out evaluations (benchmarks/screen_cost.py), 1 and 3 shapes
    for task in silu_and_mul fused_add_rmsnorm merge_attn_states_lse; do
      echo "=== screen_cost $task cuda cuda ${1:-4}" | tee -a "$out/screen.log"
      timeout 240 python3 -m benchmarks.screen_cost "$task" cuda cuda "${1:-4}" 1 3 \
        >> "$out/screen-cost.jsonl" 2>> "$out/screen.log"
      echo "exit $?" >> "$out/screen.log"
      pack
    done ;;
  *) echo "unknown job $job" >&2; exit 2 ;;
esac
