#!/usr/bin/env bash
# The KernelBench benchmark on a GPU machine, for docs/kernelbench.md.
#
#   bash benchmarks/kernelbench_gpu_jobs.sh PLAN OUT LEVEL [MINUTES] [LIMIT_S] [ONLY...]
#
# PLAN: starts   each problem's start from torch.compile, not searched (--no-search): which
#                problems get one, and why not (Inductor's code of each is kept);
#       search   the benchmark: 2 lineages of MINUTES (default 0.5) per problem, LIMIT_S
#                (default 240) per problem, every visible GPU busy with one problem at a time.
# ONLY: problem prefixes (19_ 23_ ...); default the whole level.
#
# The problems come from .gpu-kb/KernelBench.tar.xz (KernelBench's level1/ and level2/ files:
# `tar cJf .gpu-kb/KernelBench.tar.xz KernelBench/level1 KernelBench/level2` in a checkout of
# github.com/ScalingIntelligence/KernelBench; .gpu-kb/ is carried, not committed).
# A run goes on from .gpu-kb/results-<PLAN>-l<LEVEL>.jsonl when there (--resume: a device call
# killed at its limit loses only the problems in flight; copy OUT's results.jsonl there for the
# next call). KB_DEADLINE_S (default 500) bounds the benchmark itself. OUT gets the report (JSON and markdown), results.jsonl, and one archive of the
# logs, the rows and Inductor's code of every problem.
set -u
plan=${1:?PLAN: starts or search}
out=${2:?OUT folder}
level=${3:?LEVEL: 1 or 2}
minutes=${4:-0.5}
limit=${5:-240}
shift $(( $# < 5 ? $# : 5 ))
stamp=$(date -u +%Y%m%d)
mkdir -p "$out" /tmp/kbsrc
xz -dc .gpu-kb/KernelBench.tar.xz | tar -C /tmp/kbsrc -xf -
export KERNELSWARM_CACHE=${KERNELSWARM_CACHE:-$PWD/.gpu-cache/ks}
mkdir -p "$KERNELSWARM_CACHE"
work=/tmp/kb-$plan-l$level
mkdir -p "$work"
previous=.gpu-kb/results-$plan-l$level.jsonl
[ -f "$previous" ] && cp "$previous" "$out/results.jsonl"
only=()
for prefix in "$@"; do only+=(--only "$prefix"); done
case "$plan" in
  starts) mode=(--no-search) ;;
  # the lineages judge compile's kernel in its faster mode first (search.compile_start): the
  # task's start is Inductor's default mode, compile's figure is its faster mode's
  search) mode=(--set search.compile_start=true) ;;
  *) echo "unknown PLAN $plan" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
# stopped (SIGTERM) at KB_DEADLINE_S, the benchmark kills the problems in flight and still
# writes its report of those that ended, leaving time to pack
timeout -k 20 "${KB_DEADLINE_S:-500}" python -m benchmarks.kernelbench --kernelbench /tmp/kbsrc --level "$level" \
  --compile-starts --language triton --device cuda --lineages 2 --minutes "$minutes" \
  --problem-timeout "$limit" --resume --out "$work" --results "$out/results.jsonl" \
  "${mode[@]}" "${only[@]}" \
  --set search.confirm_repeats=2 \
  --json "$out/kernelbench-l$level-$plan-$stamp.json" 2>"$work/stderr.log" \
  | tee "$out/kernelbench-l$level-$plan.md"
echo "exit ${PIPESTATUS[0]}"
tail -5 "$work/stderr.log"
tar -C "$work" -czf "$out/kb-l$level-$plan.tgz" logs rows stderr.log \
  $(cd "$work" && ls -d tasks/*/inductor 2>/dev/null) 2>/dev/null
ls -la "$out"
