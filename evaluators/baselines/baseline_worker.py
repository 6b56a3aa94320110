"""The baselines' own process: ``python -m kernelswarm.evaluators.baselines.baseline_worker REQUEST REPLY``.

Started by ``measure_baselines`` (evaluators/baselines/baselines.py). It runs only trusted code (the task's
reference, ``torch.compile`` of it, library kernels a task names), never a candidate, and never
inside an evaluator's or a Ray actor's process, so a library's CUDA context, its threads or a
compiler's state cannot leak into the judging of candidates. It reads a JSON request (task path,
device, timing settings, whether to compile), measures every tuning shape and writes a JSON reply.

Per shape, every baseline's output is checked against the reference first (an anchor that
disagrees is reported with the mismatch and not timed), then timed by the candidates' timers:
evaluators/measure/gpu_timing.py on a GPU (input copies made from the timing seeds, the L2 flushed,
CUDA-graph replays for short calls), evaluators/measure/timing.py on the CPU (one core, as a candidate
runs, the cache flushed when the settings flush it).

The task's starting kernel in the evaluator's language (trusted: the task's own) is timed here
too, on the same inputs and in the same minutes, as the reference that carries the baselines
over to a candidate's evaluation (evaluators/baselines/baselines.py, ``with_baselines``).

``torch.compile`` is specialised per shape: for each shape, dynamo is reset and the reference is
compiled afresh with ``dynamic=False`` in each mode of ``COMPILE_MODES``; the fastest mode is
kept and named. The seconds of each mode's first call (tracing and code generation) are
reported apart from its times.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
SLOW_CALL_S = 0.02  # a call slower than this is timed with one warm-up and three samples


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


class Bench:
    """Times calls on one device with the candidates' timer and stopping rule."""

    def __init__(self, device: str, timing: dict[str, Any]) -> None:
        from ..measure.machine import device_cache_bytes
        from ..measure.timing import CacheFlusher, TimingPlan

        self.device, self.timing = device, timing
        self.on_gpu = device.startswith("cuda")
        self.cache_bytes = device_cache_bytes(device)
        # The GPU timer always flushes the L2 (as the sandbox's does); the CPU one follows the run.
        flush = self.on_gpu or timing["flush_cache"]
        self.flusher = CacheFlusher(2 * self.cache_bytes, device) if flush else None
        self.plan = TimingPlan(timing["warmup"], timing["min_repeats"], timing["max_repeats"],
                               timing["target_rel_se"], timing["timing_budget_s"])
        self.slow_plan = TimingPlan(1, 3, 3, timing["target_rel_se"], timing["timing_budget_s"])

    def synchronize(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize()

    def inputs(self, module: Any, params: dict[str, Any]) -> tuple[Any, list[tuple]]:
        """The copy plan (GPU) and the input copies a candidate is timed on."""
        if not self.on_gpu:  # the CPU sandbox times candidates on the problem of seed 0
            return None, [tuple(module.make_inputs(params, 0, self.device))]
        from ..measure.gpu_timing import TIMING_SEED, plan_copies

        first = tuple(module.make_inputs(params, TIMING_SEED, self.device))
        outputs = tuple(module.make_outputs(params, self.device))
        copies = plan_copies(_nbytes(first) + _nbytes(outputs), self.cache_bytes)
        return copies, [first] + [tuple(module.make_inputs(params, TIMING_SEED + i, self.device))
                                  for i in range(1, copies.copies)]

    def seconds(self, call: Callable[[], Any]) -> float:
        self.synchronize()
        started = time.perf_counter()
        call()
        self.synchronize()
        return time.perf_counter() - started

    def time(self, call: Callable[[int], Any], copies: Any, estimate_s: float) -> dict[str, Any]:
        """``call(copy)`` timed alone: median, IQR and samples, or the error."""
        plan = self.slow_plan if estimate_s > SLOW_CALL_S else self.plan
        try:
            if self.on_gpu:
                from ..measure.gpu_timing import GraphCaptureError, measure_gpu

                below = self.timing["cuda_graph_below_us"]
                try:
                    stats = measure_gpu([call], copies, plan, self.flusher, below).stats[0]
                except GraphCaptureError:
                    stats = measure_gpu([call], copies, plan, self.flusher, 0.0).stats[0]
            else:
                from ..measure.timing import measure

                (stats,) = measure([lambda: call(0)], plan, self.flusher, self.synchronize)
        except Exception as exc:
            return {"error": _error(exc)}
        return {"median_us": stats.median_us, "iqr_us": stats.iqr_us, "samples": stats.samples}


def _anchor_functions(module: Any, device: str) -> tuple[dict[str, Callable], dict[str, str]]:
    """The task's anchors that can run here, and the reasons the others are skipped."""
    found, skipped = {}, {}
    for name, anchor in dict(getattr(module, "ANCHORS", {}) or {}).items():
        package = anchor.get("package", anchor["module"])
        try:  # looked up without importing it: is it installed at all?
            installed = importlib.util.find_spec(anchor["module"]) is not None
        except (ImportError, ValueError):
            installed = False
        if not installed:
            skipped[name] = f"not installed ({package})"
            continue
        devices = tuple(anchor.get("devices", ("cuda",)))
        if device.split(":")[0] not in devices:
            skipped[name] = f"runs on {', '.join(devices)} only"
            continue
        try:
            library = importlib.import_module(anchor["module"])
        except ImportError as exc:
            skipped[name] = f"not installed ({package}: {exc})"
            continue
        adapter = getattr(module, anchor["call"])
        found[name] = lambda *inputs, _a=adapter, _l=library: tuple(_a(_l, *inputs))
    return found, skipped


def _checked(task: Any, fn: Callable, inputs: tuple, expected: tuple) -> str:
    """"" when ``fn`` on a copy of ``inputs`` matches the reference, else what is wrong."""
    from ..correctness import clones, compare

    try:
        got = tuple(fn(*clones(inputs)))
        mismatch = compare(got, expected, task.tolerance).mismatch
    except Exception as exc:
        return f"fails: {_error(exc)}"
    return "" if mismatch is None else f"incorrect: {mismatch.describe()}"


def rotating(fn: Callable, inputs: list[tuple]) -> Callable[[int], None]:
    """``fn`` on input copy ``i``, its result held until copy ``i`` comes round again.

    A baseline returns new tensors where a candidate writes into the output copy of its input
    copy. Dropped at once, a result's memory would be handed to the next call (the caching
    allocator's, or a CUDA graph's pool), and every call would write one buffer that stays in
    the L2: 5-10% faster than a candidate writing its rotating outputs on small shapes. Held,
    the results take as many buffers as the candidate's output copies, reused in the same turn.
    With one copy (a problem of twice the L2 or more, which no cache holds) nothing is held: a
    result held while the next is made would double the output's memory.
    """
    if len(inputs) < 2:
        return lambda i: fn(*inputs[i])
    held: dict[int, Any] = {}

    def call(i: int) -> None:
        held[i] = fn(*inputs[i])

    return call


def _timed_fn(bench: Bench, task: Any, fn: Callable, inputs: list[tuple], copies: Any,
              expected: tuple) -> dict[str, Any]:
    problem = _checked(task, fn, inputs[0], expected)
    if problem:
        return {"error": problem}
    estimate = bench.seconds(lambda: fn(*inputs[0]))
    return {**bench.time(rotating(fn, inputs), copies, estimate),
            "first_call_s": estimate}


def compile_reference(reference: Callable, mode: str, backend: Any = None) -> Callable:
    """``reference`` compiled for static shapes (``dynamic=False``: every size a constant, a
    new shape a new graph) in ``mode`` ("default" or an inductor mode); ``backend`` replaces
    inductor (tests record the graphs with it)."""
    import torch

    if backend is not None:
        return torch.compile(reference, dynamic=False, backend=backend)
    return torch.compile(reference, dynamic=False, mode=None if mode == "default" else mode)


def _compile_target(task: Any, inputs: list[tuple]) -> tuple[Callable, list[tuple]]:
    """What ``torch.compile`` is given, and its arguments per input copy: the task's
    ``compile_target`` where it defines one (a KernelBench task: the model's forward with the
    model and the scalars fixed, one graph, rather than the reference's unpacking of its inputs,
    which breaks the graph), else the reference on the inputs."""
    target = getattr(task.module, "compile_target", None)
    if target is None:
        return task.module.reference, inputs
    body, positions = target(inputs[0])
    positions = list(positions)
    return body, [tuple(copy[p] for p in positions) for copy in inputs]


def _compiled(bench: Bench, task: Any, inputs: list[tuple], copies: Any,
              expected: tuple) -> dict[str, Any]:
    """The reference compiled for this shape alone in each mode; the fastest, named."""
    import torch

    from ..inductor.inductor_start import configs_since, loaded_module_count

    body, args = _compile_target(task, inputs)
    modes: dict[str, dict[str, Any]] = {}
    for mode in COMPILE_MODES:
        torch._dynamo.reset()  # a fresh compile: nothing from another shape or mode is reused
        fn = compile_reference(body, mode)
        loaded = loaded_module_count()
        try:
            first_s = bench.seconds(lambda fn=fn: fn(*args[0]))
        except Exception as exc:
            modes[mode] = {"error": f"fails: {_error(exc)}"}
            continue
        configs = configs_since(loaded)  # what its Triton kernels run with, once autotuned
        problem = _checked(task, fn, args[0], expected)
        if problem:
            modes[mode] = {"error": problem, "first_call_s": first_s}
            continue
        second_s = bench.seconds(lambda fn=fn: fn(*args[0]))
        modes[mode] = {**bench.time(rotating(fn, args), copies, second_s),
                       "first_call_s": first_s, "configs": configs}
    timed = {m: v for m, v in modes.items() if "median_us" in v}
    if not timed:
        return {"error": "; ".join(f"{m}: {v['error']}" for m, v in modes.items()),
                "modes": modes}
    best = min(timed, key=lambda m: timed[m]["median_us"])
    others = ", ".join(f"{m} {v['median_us']:.2f} us" if m in timed else f"{m} {v['error']}"
                       for m, v in modes.items() if m != best)
    return {**timed[best], "detail": f"mode {best}" + (f" (also timed: {others})" if others else ""),
            "first_call_s": sum(v.get("first_call_s", 0.0) for v in modes.values())}


def _start_kernel(task: Any, request: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(language, loaded starting kernel, launcher) in the request's language, or Nones."""
    if not request.get("language"):
        return None, None, None
    import os

    from ..languages import get_language
    from ..languages.compile_cache import CompileCache
    from ..settings import EvaluatorSettings

    settings = EvaluatorSettings(device=request["device"], cache_dir=request["cache_dir"])
    language = get_language(request["language"], settings)
    os.environ.update(language.sandbox_environment())  # e.g. TRITON_INTERPRET=1 on the CPU
    candidate = task.starting_candidate(language.name)
    build = CompileCache(settings.cache_dir).build(language, candidate, 600.0)
    if build.artifact is None:
        raise RuntimeError(f"the starting {language.name} kernel does not build:\n"
                           f"{build.result.log}")
    kernel = language.load(build.artifact, candidate.entry, candidate.spec_dict)
    return language, kernel, getattr(task.module, language.launcher)


def _timed_start(bench: Bench, task: Any, params: dict[str, Any], start: tuple,
                 expected: tuple) -> dict[str, Any]:
    """The starting kernel on the shape, checked, then timed like the baselines."""
    from ..correctness import compare

    _, kernel, launch = start
    copies, inputs = bench.inputs(task.module, params)
    outputs = [tuple(task.module.make_outputs(params, bench.device)) for _ in inputs]

    def call(i: int) -> None:  # the timers synchronise (a GPU one may capture it in a graph)
        launch(kernel.fn, inputs[i], outputs[i], params)

    try:
        call(0)
        mismatch = compare(outputs[0], expected, task.tolerance).mismatch
    except Exception as exc:
        return {"error": f"fails: {_error(exc)}"}
    if mismatch is not None:
        return {"error": f"incorrect: {mismatch.describe()}"}
    return bench.time(call, copies, bench.seconds(lambda: call(0)))


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """Every tuning shape of the request's task: eager, compile (when asked), anchors."""
    import torch

    from ...search import load_task

    device = request["device"]
    if not device.startswith("cuda"):
        torch.set_num_threads(1)  # a CPU candidate runs on one core: so do its baselines
    task = load_task(request["task"], device.split(":")[0])
    bench = Bench(device, request["timing"])
    # start_only: a language's starting kernel joins baselines measured for another language,
    # timed beside eager alone, whose ratio carries it in (baselines.carried_start)
    only = bool(request.get("start_only"))
    anchors, skipped = ({}, {}) if only else _anchor_functions(task.module, device)
    start = _start_kernel(task, request)
    starts: dict[str, dict[str, Any]] = {}
    if not request["compile"] and not only:
        skipped["compile"] = request.get("compile_reason", "not measured")
    shapes: dict[str, dict[str, Any]] = {}
    for shape in task.tuning_shapes:
        params = dict(shape)
        from ..correctness import clones

        # Fresh input copies for each baseline: a library kernel may work in place, and the
        # next baseline must see the task's inputs (``make_inputs`` is deterministic per seed).
        copies, inputs = bench.inputs(task.module, params)
        expected = tuple(task.module.reference(*clones(inputs[0])))
        row = {"eager": _timed_fn(bench, task, task.module.reference, inputs, copies, expected)}
        if request["compile"] and not only:
            copies, inputs = bench.inputs(task.module, params)
            row["compile"] = _compiled(bench, task, inputs, copies, expected)
        for name, fn in anchors.items():
            copies, inputs = bench.inputs(task.module, params)
            row[name] = _timed_fn(bench, task, fn, inputs, copies, expected)
        if start[0] is not None:
            starts[shape.label] = _timed_start(bench, task, params, start, expected)
        shapes[shape.label] = row
        print(f"{shape.label}: " + ", ".join(
            f"{k} {v['median_us']:.2f} us" if "median_us" in v else f"{k} {v['error']}"
            for k, v in row.items()), file=sys.stderr, flush=True)
        del inputs, expected
        if bench.on_gpu:
            torch.cuda.empty_cache()
    return {"task": task.name, "shapes": _finite(shapes), "skipped": skipped,
            "start": _finite(starts)}


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    return value


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    reply = measure(request)
    Path(argv[1]).write_text(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
