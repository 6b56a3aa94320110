#!/usr/bin/env bash
# search_gpu on several GPUs of one host at once, one job per GPU, for docs/search_gpu.md.
#
#   bash benchmarks/search_gpu_jobs.sh PLAN OUT [MINUTES]
#
# PLAN: one      the three Astra tasks at 1 lineage (triton, from torch.compile's kernel) on
#                GPUs 0-2, and silu_and_mul at 4 lineages (triton from compile's kernel and
#                cuda, in turn) on GPU 3;
#       four     the other two tasks at 4 lineages on GPUs 0-1, the GPU tests of the compile
#                start on GPU 2 and launch_floor on GPU 3;
#       anchors  the GPU tests of the compile start on GPU 0, and the baselines benchmark of
#                each task on GPUs 1-3, with FlashInfer where .gpu-anchors/fi_subset.tar.xz
#                brings it (a subset of flashinfer-python with its kernels built for sm_90a).
# Each job has its own time limit and writes its log (and its report, once done) under OUT as it
# goes (logs under OUT/logs, packed into OUT/logs.tgz at the end), so a call killed at its limit
# still returns what finished. The evaluator's calibration,
# baselines and generated starts are kept in $KERNELSWARM_CACHE (default .gpu-cache/ks); the
# small parts of it are packed into OUT/cache.tgz for the next call on the same kind of GPU.
set -u
plan=${1:?PLAN: one or four}
out=${2:?OUT folder}
minutes=${3:-5}
stamp=$(date -u +%Y%m%d)
mkdir -p "$out"
export KERNELSWARM_CACHE=${KERNELSWARM_CACHE:-$PWD/.gpu-cache/ks}
mkdir -p "$KERNELSWARM_CACHE"
if [ -f .gpu-cache/cache.tgz ] && [ ! -f "$KERNELSWARM_CACHE/.unpacked" ]; then
  tar -C "$KERNELSWARM_CACHE" -xzf .gpu-cache/cache.tgz && touch "$KERNELSWARM_CACHE/.unpacked"
fi
if [ -f .gpu-anchors/fi_subset.tar.xz ]; then  # FlashInfer for the anchors
  mkdir -p /tmp/fisite && xz -dc .gpu-anchors/fi_subset.tar.xz | tar -C /tmp/fisite -xf -
  export PYTHONPATH=/tmp/fisite${PYTHONPATH:+:$PYTHONPATH} FLASHINFER_WORKSPACE_BASE=/tmp/fi_ws
fi
limit=$(python -c "print(int($minutes * 60 + 200))")  # the search, its judging and start-up

job() {  # NAME GPU LIMIT_S COMMAND...: run COMMAND on GPU with its own limit, log to OUT/NAME.log
  local name=$1 gpu=$2 seconds=$3
  shift 3
  (
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 "$seconds" "$@" >"$out/logs/$name.log" 2>&1
    echo "exit $? after $(($(date +%s) - start)) s on GPU $gpu" >>"$out/logs/$name.log"
  ) &
}

search() {  # NAME GPU TASK LINEAGES LANGUAGES
  local name=$1 gpu=$2 task=$3 lineages=$4 languages=$5
  job "$name" "$gpu" "$limit" python -m benchmarks.search_gpu \
    --task "$task" --lineages "$lineages" --minutes "$minutes" --languages "$languages" \
    --compile-start --out "/tmp/runs-$name" \
    --json "$out/search-gpu-$task-${lineages}l-$stamp.json"
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
mkdir -p "$out/logs"
case "$plan" in
  one)
    search silu-1 0 silu_and_mul 1 triton
    search rms-1 1 fused_add_rmsnorm 1 triton
    search merge-1 2 merge_attn_states_lse 1 triton
    search silu-4 3 silu_and_mul 4 triton,cuda
    ;;
  four)
    search rms-4 0 fused_add_rmsnorm 4 triton,cuda
    search merge-4 1 merge_attn_states_lse 4 triton,cuda
    job tests 2 "$limit" python -m pytest -q -m gpu -p no:cacheprovider \
      tests/experiments/test_compile_start.py tests/evaluators/test_inductor_triton.py \
      tests/evaluators/test_cuda_route.py
    job floor 3 300 python -m benchmarks.launch_floor --repeats 9 \
      --json "$out/launch-floor-$stamp.json"
    ;;
  anchors)
    job tests 0 280 python -m pytest -q -m gpu -p no:cacheprovider \
      tests/experiments/test_compile_start.py tests/evaluators/test_inductor_triton.py
    for pair in 1:silu_and_mul 2:fused_add_rmsnorm 3:merge_attn_states_lse; do
      job "baselines-${pair#*:}" "${pair%%:*}" 280 python -m benchmarks.baselines \
        --tasks "${pair#*:}" --budget-s 0.15 --out "$out/baselines-${pair#*:}-$stamp.json" \
        --markdown "$out/baselines-${pair#*:}-$stamp.md"
    done
    ;;
  *)
    echo "unknown plan $plan (one, four or anchors)" >&2
    exit 2
    ;;
esac
wait
tar -C "$KERNELSWARM_CACHE" -czf "$out/cache.tgz" --exclude='*.lock' \
  $(cd "$KERNELSWARM_CACHE" && ls -d calibration baselines starts 2>/dev/null)
tar -C "$out" -czf "$out/logs.tgz" logs && rm -rf "$out/logs"
ls -la "$out"
