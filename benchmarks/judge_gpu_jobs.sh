#!/usr/bin/env bash
# What judging a candidate costs on a GPU, before and after a change, in calls of the device tool
# (one GPU, 10 minutes a call). Run from the repository root on the GPU machine:
#
#   bash benchmarks/judge_gpu_jobs.sh before OUT [TASK...]   # eval_cost of the old tree
#   bash benchmarks/judge_gpu_jobs.sh check OUT [gpu_check args...]
#   bash benchmarks/judge_gpu_jobs.sh screen OUT [N]              # screen_cost of the three tasks
#   bash benchmarks/judge_gpu_jobs.sh steps OUT STEP...           # several, each with its limit
#
# ``steps`` runs, in order, each of (results under OUT/work/, packed into OUT/results.tar.gz
# after every step; the log is OUT/steps.log):
#   check                  the GPU check: eval_cost of the three tasks (cuda, 4 evaluations)
#   cold:TASK:MINUTES      search_gpu on TASK (4 lineages, cuda and triton, compile's kernel as
#                          the triton start, 3 screening shapes) from empty caches: its own
#                          kernelswarm, Triton and Inductor caches under .gpu-search/TASK
#   warm:TASK:MINUTES      the same search again on the caches the cold one left
#                          (a search step may take MINUTES * 60 + 360 s; its run folders and the
#                          baselines' table are kept under OUT/work/KIND-TASK/ even when cut)
#   fresh:TASK:MINUTES     as cold (a fresh machine: Triton's and Inductor's caches empty), with
#                          kernelswarm's cache of TASK carried from an earlier call (every search
#                          step leaves OUT/search-TASK.tar.gz; carry it in as .gpu-cache/)
#   judged:TASK:MINUTES    as cold, then its kernels re-timed against the baselines (step 3 of
#                          search_gpu: compile's kernel as the start against compile, per shape)
#   gap:TASK               benchmarks/compile_start_gap.py on TASK's worst shapes
#   test:PATH              pytest -m gpu PATH
# The searches measure as a user runs them: torch.compile in the baselines.
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
job=${1:?before|check|screen|steps}; out=${2:?OUT}; shift 2
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
  steps)
    mkdir -p "$out/work"
    packed() { tar -czf "$out/results.tmp" -C "$out" work && mv "$out/results.tmp" "$out/results.tar.gz"; }
    for step in "$@"; do
      IFS=: read -r kind task minutes <<< "$step"
      began=$(date +%s)
      echo "=== $step ($(date -u +%H:%M:%S))" | tee -a "$out/steps.log"
      case "$kind" in
        check)
          timeout 240 python3 -m benchmarks.gpu_check --out "$out/work/check" \
            --pack-cache "$out/caches.tar.gz" --languages cuda --evaluations 4 \
            --search-minutes 0 --no-tests --budget-s 230 >> "$out/steps.log" 2>&1 ;;
        cold|warm|judged|fresh)
          home="$PWD/.gpu-search/$task"
          [ "$kind" != warm ] && rm -rf "$home"
          [ -d "$home" ] && echo "caches: kept from an earlier step" >> "$out/steps.log"
          mkdir -p "$home/runs"
          if [ "$kind" = fresh ]; then  # kernelswarm's cache from an earlier call, no other
            if [ -f ".gpu-cache/search-$task.tar.gz" ]; then
              mkdir -p "$home/cache" && tar -xzf ".gpu-cache/search-$task.tar.gz" -C "$home/cache"
              echo "caches: kernelswarm's from .gpu-cache/search-$task.tar.gz" >> "$out/steps.log"
            else
              echo "caches: none carried (.gpu-cache/search-$task.tar.gz): as cold" >> "$out/steps.log"
            fi
          fi
          limit=$(python3 -c "print(int(float('$minutes') * 60 + 360))")
          (unset KERNELSWARM_BASELINE_COMPILE
           export KERNELSWARM_CACHE="$home/cache" TRITON_CACHE_DIR="$home/triton" \
                  TORCHINDUCTOR_CACHE_DIR="$home/inductor"
           timeout "$limit" python3 -m benchmarks.search_gpu --task "$task" --lineages 4 \
             --languages cuda,triton --compile-start --minutes "$minutes" \
             $([ "$kind" = judged ] || echo --no-judge) \
             --set search.screen_shapes=3 --json "$out/work/$kind-$task.json" \
             --out "$home/runs") >> "$out/steps.log" 2>&1
          status=$?
          # where the start-up went, kept even when the step was cut: each run folder (its
          # phase lines in run.log, compile_start.json, the records so far) and the
          # baselines' table (each compile's first-call seconds)
          kept="$out/work/$kind-$task"; mkdir -p "$kept"
          for run in "$home"/runs/*/; do
            tar -czf "$kept/$(basename "$run").tar.gz" -C "$home/runs" "$(basename "$run")"
          done
          cp "$home"/cache/baselines/*.json "$kept/" 2>/dev/null
          # kernelswarm's cache of the task (calibrations, baselines, compile's kernel), for a
          # later call's fresh:TASK step: carry OUT/search-TASK.tar.gz in as .gpu-cache/
          parts=(); for d in calibration baselines starts; do [ -d "$home/cache/$d" ] && parts+=("$d"); done
          [ ${#parts[@]} -gt 0 ] && tar -czf "$out/search-$task.tar.gz" -C "$home/cache" "${parts[@]}"
          (exit $status) ;;
        gap)
          home="$PWD/.gpu-search/$task"
          (unset KERNELSWARM_BASELINE_COMPILE
           [ -d "$home" ] && export KERNELSWARM_CACHE="$home/cache" \
             TRITON_CACHE_DIR="$home/triton" TORCHINDUCTOR_CACHE_DIR="$home/inductor"
           timeout 240 python3 -m benchmarks.compile_start_gap --task "$task" \
             --run "$home/runs" --out "$out/work/gap-$task") >> "$out/steps.log" 2>&1 ;;
        test)
          timeout 300 python3 -m pytest -m gpu -q -rA -p no:cacheprovider "$task" \
            >> "$out/steps.log" 2>&1 ;;
        *) echo "unknown step $step" >> "$out/steps.log" ;;
      esac
      echo "--- $step: exit $? after $(( $(date +%s) - began )) s" | tee -a "$out/steps.log"
      packed
    done
    tail -n 5 "$out/steps.log" ;;
  *) echo "unknown job $job" >&2; exit 2 ;;
esac
