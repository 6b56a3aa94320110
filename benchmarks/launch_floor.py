"""Launch floor: at the smallest shapes, does a candidate's launch path add latency that
``torch.compile``'s does not? ``python -m benchmarks.launch_floor``

At silu_and_mul's tokens=1, d=11008, bf16, each path is timed by the project's GPU timer as the
baselines time a call (``Bench`` of evaluators/baselines/baseline_worker.py, ``measure_gpu`` of the call
alone): empty Triton and CUDA kernels of one pointer and of silu_and_mul's kernel arguments, built
and loaded as ``triton`` and ``cuda`` candidates are and launched as the task's ``launch_triton``
and ``launch_cuda`` launch them; Inductor's kernel for the shape as a ``triton`` candidate
(evaluators/inductor/inductor_start.py); ``torch.compile`` of ``x + 1`` on one element and of the reference,
compiled as the baselines compile (``compile_reference``, per mode). Each path is timed
``--repeats`` times, interleaved; the table gives the median of the runs' medians, their 5th-95th
percentiles, the timer's mode, the gap over the fastest path and the host's microseconds per
launch (calls issued back to back: a graph replay does not see them). ``--json PATH`` writes every
figure. Exit status 2 where no CUDA GPU can be used.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.baselines import task_path
from kernelswarm.evaluators.baselines.baseline_worker import COMPILE_MODES

SHAPE = {"tokens": 1, "d": 11008, "dtype": "bfloat16"}
HOST_CALLS = 200  # launches per host-cost sample

TRITON_SOURCE = '''\
import triton
import triton.language as tl

@triton.jit
def _empty(x_ptr):
    pass

@triton.jit
def _empty_silu_and_mul(out_ptr, x_ptr, d, BLOCK: tl.constexpr):
    pass

def empty(x):
    _empty[(1,)](x)

def silu_and_mul(out, x, tokens, d, BLOCK=1024):
    _empty_silu_and_mul[(1,)](out, x, d, BLOCK=BLOCK)
'''

# launch_cuda looks its kernel up by the input's dtype (silu_and_mul_bf16) and passes out, x, d
CUDA_SOURCE = '''\
extern "C" __global__ void empty(const void* x) {}
extern "C" __global__ void silu_and_mul_bf16(void* out, const void* x, int d) {}
'''


def load_kernel(settings: Any, language_name: str, source: str, entry: str,
                knobs: dict[str, tuple[Any, ...]] | None = None) -> Any:
    """``source`` built into the compile cache and loaded as a candidate is: the ``fn`` a task's
    launcher receives."""
    from kernelswarm.evaluators.languages import get_language
    from kernelswarm.evaluators.languages.compile_cache import CompileCache
    from kernelswarm.search.candidate import Candidate

    language = get_language(language_name, settings)
    os.environ.update(language.sandbox_environment())  # Triton's cache beside the evaluator's
    candidate = Candidate.create(language=language.name, source=source, entry=entry,
                                 knob_space=knobs)
    build = CompileCache(settings.cache_dir).build(language, candidate, settings.compile_timeout_s)
    if build.artifact is None:
        raise RuntimeError(f"`{entry}` does not build: {' '.join(build.result.log.split())}")
    return language.load(build.artifact, entry, candidate.spec_dict).fn


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


LaunchPath = tuple[dict[str, Any], Callable[[int], Any] | None]  # its row to fill, its call


def _launch(bench: Any, name: str, make: Callable[[], Callable[[int], Any]]) -> LaunchPath:
    """The path ``make`` sets up, called once (Triton's JIT, Inductor's compile happen here)."""
    row = {"callable": name, "medians_us": [], "modes": [], "host_us": [], "error": ""}
    try:
        call = make()
        return {**row, "first_call_s": bench.seconds(lambda: call(0))}, call
    except Exception as exc:  # one path that cannot be set up must not stop the others
        return {**row, "error": _error(exc)}, None


def launch_paths(bench: Any, settings: Any, task: Any, inputs: list, outputs: list, tiny: list,
                 modes: list[str], inductor: bool) -> list[LaunchPath]:
    """Every path of the module's docstring, in its order (Inductor's start before the compiled
    ones: generating it resets Dynamo, which would recompile them inside the timer)."""
    from kernelswarm.evaluators.baselines.baseline_worker import compile_reference

    module, params = task.module, dict(SHAPE)

    def on_task(launcher: Callable[..., None], fn: Any) -> Callable[[int], None]:
        return lambda i: launcher(fn, inputs[i], outputs[i], params)

    def inductor_start() -> Callable[[int], None]:
        from kernelswarm.evaluators.inductor.inductor_start import generate_start

        start = generate_start(task, "triton", [params])
        fn = load_kernel(settings, "triton", start.source, start.entry, dict(start.knobs))
        return on_task(module.launch_triton, fn)

    def compiled(fn: Callable[..., Any], mode: str, args: list) -> Callable[[int], Any]:
        ready = compile_reference(fn, mode)
        return lambda i: ready(*args[i])

    def on_tiny(fn: Any, *geometry: int) -> Callable[[int], None]:
        return lambda i: fn(*geometry, tiny[i][0])

    triton = functools.partial(load_kernel, settings, "triton", TRITON_SOURCE)
    cuda = functools.partial(load_kernel, settings, "cuda", CUDA_SOURCE, "empty")
    paths = [
        ("triton: empty kernel, 1 pointer", lambda: on_tiny(triton("empty"))),
        ("triton: empty kernel, silu_and_mul's args, launch_triton",
         lambda: on_task(module.launch_triton, triton("silu_and_mul", {"BLOCK": (1024,)}))),
        ("cuda: empty kernel, 1 pointer", lambda: on_tiny(cuda(), 1, 1)),
        ("cuda: empty kernel, silu_and_mul's args, launch_cuda",
         lambda: on_task(module.launch_cuda, cuda()))]
    if inductor:
        paths.append(("triton: Inductor's silu_and_mul kernel, launch_triton", inductor_start))
    for mode in modes:
        paths += [(f"torch.compile ({mode}): x + 1, 1 element",
                   lambda mode=mode: compiled(_plus_one, mode, tiny)),
                  (f"torch.compile ({mode}): silu_and_mul reference",
                   lambda mode=mode: compiled(module.reference, mode, inputs))]
    return [_launch(bench, name, make) for name, make in paths]


def _plus_one(x: Any) -> tuple[Any]:
    return (x + 1,)


def time_once(bench: Any, call: Callable[[int], Any], copies: Any) -> tuple[float, str]:
    """One run of the timer on ``call`` alone, as ``Bench.time`` runs it: (median µs, mode)."""
    from kernelswarm.evaluators.measure.gpu_timing import GraphCaptureError, measure_gpu

    try:
        timing = measure_gpu([call], copies, bench.plan, bench.flusher,
                             bench.timing["cuda_graph_below_us"])
    except GraphCaptureError:  # a call that cannot be captured is timed with events
        timing = measure_gpu([call], copies, bench.plan, bench.flusher, 0.0)
    return timing.stats[0].median_us, timing.mode


def host_us(bench: Any, call: Callable[[int], Any], copies: int) -> float:
    """The host's microseconds per launch over ``HOST_CALLS`` calls issued back to back."""
    bench.synchronize()
    began = time.perf_counter()
    for k in range(HOST_CALLS):
        call(k % copies)
    spent = time.perf_counter() - began
    bench.synchronize()
    return spent / HOST_CALLS * 1e6


def spread(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """(median, 5th, 95th percentile) of ``values``; Nones when there are none."""
    if len(values) < 2:
        return (values[0],) * 3 if values else (None, None, None)
    cuts = statistics.quantiles(values, n=20, method="inclusive")
    return statistics.median(values), cuts[0], cuts[-1]


def measure(bench: Any, paths: list[LaunchPath], copies: Any, repeats: int) -> list[dict]:
    """Each path that is set up timed ``repeats`` times, the order rotating each round."""
    ready = [(row, call) for row, call in paths if call is not None]
    for round_ in range(repeats if ready else 0):
        shift = round_ % len(ready)
        for row, call in ready[shift:] + ready[:shift]:
            if row["error"]:
                continue
            try:
                median, mode = time_once(bench, call, copies)
                row["host_us"].append(host_us(bench, call, copies.copies))
            except Exception as exc:  # recorded on its row; the other paths go on
                row["error"] = _error(exc)
                continue
            row["medians_us"].append(median)
            row["modes"].append(mode)
        print(f"round {round_ + 1}/{repeats} done", file=sys.stderr, flush=True)
    rows = [row for row, _ in paths]
    for row in rows:
        row["median_us"], row["p5_us"], row["p95_us"] = spread(row["medians_us"])
        row["host_median_us"] = spread(row["host_us"])[0]
        row["mode"] = "/".join(sorted(set(row["modes"])))
    return with_gaps(rows)


def with_gaps(rows: list[dict]) -> list[dict]:
    """``rows`` with ``gap_us`` and ``gap_x``: each median over the fastest one."""
    fastest = min((r["median_us"] for r in rows if r.get("median_us") is not None), default=None)
    return [{**r, "gap_us": None, "gap_x": None} if r.get("median_us") is None else
            {**r, "gap_us": r["median_us"] - fastest,
             "gap_x": r["median_us"] / fastest if fastest > 0 else None} for r in rows]


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render(report: dict[str, Any]) -> str:
    """The report as markdown: the machine, the software, the method and the table."""
    software = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    n, below = report["repeats"], report["timing"]["cuda_graph_below_us"]
    lines = [f"Launch floor on {report['device']}; {software}.", "",
             f"Command: `{report['command']}`", "",
             f"Timing: the project's GPU timer as the baselines run it (L2 flushed before each "
             f"sample; calls under {below:g} µs timed as CUDA-graph replays, others with events), "
             f"each callable alone, {n} runs interleaved. Median: of the runs' medians; p5–p95: "
             f"their spread; gap: over the fastest median; host: µs of Python per launch, calls "
             f"issued back to back (not seen by a graph replay).", "",
             "| callable | mode | median µs | p5–p95 µs | gap over fastest | host µs/call |",
             "|---|---|---|---|---|---|"]
    notes = []
    for row in with_gaps(report["rows"]):
        gap = "—" if row["gap_us"] is None else "fastest" if row["gap_us"] == 0 else \
            f"+{row['gap_us']:.2f} µs" + (f" ({row['gap_x']:.2f}x)" if row["gap_x"] else "")
        band = "—" if row.get("p5_us") is None else f"{row['p5_us']:.2f}–{row['p95_us']:.2f}"
        lines.append(f"| {row['callable']} | {row.get('mode') or '—'} | "
                     f"{_us(row.get('median_us'))} | {band} | {gap} | "
                     f"{_us(row.get('host_median_us'))} |")
        if row.get("error"):
            notes.append(f"- {row['callable']}: {row['error']}")
    return "\n".join(lines + ([""] + notes if notes else []))


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks."
                                          "launch_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15,
                        help="runs of the timer per callable, interleaved (default 15)")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument("--compile-modes", nargs="+", choices=COMPILE_MODES,
                        default=list(COMPILE_MODES), help="torch.compile modes to time")
    parser.add_argument("--no-inductor-start", action="store_true",
                        help="skip generating and timing Inductor's kernel as a candidate")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    args.command = "python -m benchmarks.launch_floor " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    return args


def run(args: argparse.Namespace, bench: Any, settings: Any) -> dict[str, Any]:
    from kernelswarm.evaluators.baselines.baseline_timing import software_versions
    from kernelswarm.evaluators.baselines.baselines import device_name
    from kernelswarm.search.task import load_task

    task = load_task(task_path("silu_and_mul"), "cuda")
    copies, inputs = bench.inputs(task.module, dict(SHAPE))
    outputs = [tuple(task.module.make_outputs(dict(SHAPE), bench.device)) for _ in inputs]
    tiny = [(x.new_zeros(1),) for (x,) in inputs]
    paths = launch_paths(bench, settings, task, inputs, outputs, tiny, args.compile_modes,
                         not args.no_inductor_start)
    return {"device": device_name("cuda"), "versions": software_versions(), "command": args.command,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "shape": SHAPE, "repeats": args.repeats, "timing": bench.timing,
            "rows": measure(bench, paths, copies, args.repeats)}


def main(argv: list[str] | None = None) -> int:
    from kernelswarm.evaluators.baselines.baseline_worker import Bench
    from kernelswarm.evaluators.measure.timing_protocol import TimingSettings
    from kernelswarm.evaluators.settings import EvaluatorSettings

    args = arguments(argv)
    # the first visible GPU (CUDA_VISIBLE_DEVICES picks another); the evaluator's timing, cache
    settings = EvaluatorSettings(device="cuda")
    try:
        bench = Bench("cuda", TimingSettings.of(settings).as_dict())
    except (RuntimeError, AssertionError) as exc:  # torch's words for "no GPU"
        print(f"launch_floor: no CUDA GPU can be used ({_error(exc)}); this benchmark times "
              f"kernel launches on a GPU: run it on a machine with one", file=sys.stderr)
        return 2
    report = run(args, bench, settings)
    print(render(report), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any(row["error"] for row in report["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
