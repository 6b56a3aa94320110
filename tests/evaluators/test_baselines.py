"""Baselines (evaluators/baselines/baselines.py): measured in their own process, checked, cached, skipped
with a reason when a library is missing, and a static-shape ``torch.compile``."""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.evaluators.baselines.baseline_worker import compile_reference
from kernelswarm.evaluators.baselines.baselines import (
    BaselineTable,
    BaselineTime,
    measure_baselines,
    with_baselines,
)
from kernelswarm.evaluators.measure.timing_protocol import TimingSettings
from kernelswarm.experiments.authoring.task_template import KERNEL_CPP, TASK_PY
from kernelswarm.search import ShapeResult

# Libraries a task may name: one missing, one that runs only on a GPU, one that answers wrongly,
# one right (torch itself, so that it is installed everywhere).
ANCHORS = '''
ANCHORS = {
    "missing": {"module": "no_such_library_for_kernelswarm", "call": "anchor_any",
                "package": "no-such-library", "devices": ["cpu", "cuda"]},
    "gpu_only": {"module": "torch", "call": "anchor_any", "devices": ["cuda"]},
    "wrong": {"module": "torch", "call": "anchor_wrong", "devices": ["cpu"]},
    "fused": {"module": "torch", "call": "anchor_any", "devices": ["cpu"]},
}


def anchor_any(lib, x, y):
    return (lib.add(y, x, alpha=ALPHA),)


def anchor_wrong(lib, x, y):
    return (lib.add(y, x),)
'''


def _task(folder: Path, sizes: tuple[int, ...], anchors: bool = True) -> Path:
    """The scaffold of `kernelswarm tasks new` with the given vector sizes (and the anchors)."""
    folder.mkdir(parents=True)
    text = TASK_PY.substitute(name="axpy")
    shapes = ", ".join(f'{{"n": {n}, "dtype": "float32"}}' for n in sizes)
    start = text.index('    "cpu": [{"n": 4096')
    end = text.index("],", start) + 2
    text = text[:start] + f'    "cpu": [{shapes}],' + text[end:]
    (folder / "task.py").write_text(text + (ANCHORS if anchors else ""))
    (folder / "axpy.cpp").write_text(KERNEL_CPP.substitute(name="axpy"))
    return folder


def _settings(cache: Path, flush: bool = False) -> EvaluatorSettings:
    return EvaluatorSettings(device="cpu", cache_dir=cache, flush_cache=flush, warmup=2,
                             min_repeats=10, max_repeats=60, timing_budget_s=0.2)


def test_anchors_are_checked_and_missing_ones_skipped_never_failed(tmp_path):
    task = _task(tmp_path / "axpy", (4096,))
    table = measure_baselines(task, _settings(tmp_path / "cache"), language="cpp")
    label = "dtype=float32,n=4096"
    # the starting cpp kernel, timed alongside, is the carrier, never a baseline
    assert table.start[label].ok and table.language == "cpp" and "start" not in table.names
    assert table.skipped["missing"] == "not installed (no-such-library)"
    assert table.skipped["gpu_only"] == "runs on cuda only"
    assert table.skipped["compile"].startswith("not measured on cpu")
    assert table.get(label, "wrong").error.startswith("incorrect: ")
    assert not table.get(label, "wrong").ok
    for name in ("eager", "fused"):
        timed = table.get(label, name)
        assert timed.ok and timed.samples >= 10 and timed.iqr_us >= 0, (name, timed)
    name, best = table.best(label)
    assert name in ("eager", "fused") and best.median_us == min(
        table.get(label, n).median_us for n in ("eager", "fused"))
    assert table.versions["no-such-library"] == "not installed"


def test_baselines_are_cached_by_task_content_and_timing(tmp_path):
    task = _task(tmp_path / "axpy", (4096,), anchors=False)
    settings = _settings(tmp_path / "cache")
    first = measure_baselines(task, settings)
    started = time.perf_counter()
    again = measure_baselines(task, settings)
    assert again.cached and not first.cached and again.key == first.key
    assert again.shapes == first.shapes
    assert time.perf_counter() - started < 15  # no worker process: a file read
    flushed = measure_baselines(task, _settings(tmp_path / "cache", flush=True))
    assert not flushed.cached and flushed.key != first.key  # other timing settings
    (task / "task.py").write_text((task / "task.py").read_text() + "\n# edited\n")
    assert not measure_baselines(task, settings).cached  # other task content


def test_eager_is_timed_as_a_long_running_process_runs_it(tmp_path):
    """Eager out = 0.5 * x + y at n = 2^20 allocates 8 MiB a call; a process that returned that
    memory to the OS on each call paid 7-20 ms of page faults instead of about 0.5 ms."""
    n = 1 << 20
    task = _task(tmp_path / "axpy", (n,), anchors=False)
    table = measure_baselines(task, _settings(tmp_path / "cache"))
    eager = table.get(f"dtype=float32,n={n}", "eager")
    torch.set_num_threads(1)
    try:
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        plain = []
        for _ in range(30):
            started = time.perf_counter_ns()
            torch.add(y, x, alpha=0.5, out=out)
            plain.append((time.perf_counter_ns() - started) / 1e3)
    finally:
        torch.set_num_threads(torch.get_num_threads())
    # Allocating the result costs something; faulting 8 MiB in every call costs 15-40x.
    assert eager.ok and eager.median_us < 6 * statistics.median(plain), (eager, plain)


def test_the_compile_baseline_is_specialised_to_each_shape():
    """A shape change recompiles, and no compiled graph has a symbolic size."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def reference(x):
        return (torch.nn.functional.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:],)

    torch._dynamo.reset()
    compiled = compile_reference(reference, "default", backend=record)
    for tokens in (4, 4, 8, 16):
        compiled(torch.randn(tokens, 64))
    assert len(graphs) == 3  # one graph per distinct shape: the same shape reuses its graph
    for gm in graphs:
        values = [n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"]
        # a symbolic graph takes its sizes as SymInt inputs, or has SymInt in its tensors' shapes
        sizes = [d for v in values for d in (v.shape if hasattr(v, "shape") else [v])]
        assert sizes and all(type(d) is int for d in sizes), sizes
    torch._dynamo.reset()


def test_with_baselines_names_the_best_and_gives_spreads():
    timing = TimingSettings()
    table = BaselineTable(task="t", device="cpu", key="k", timing=timing, shapes={
        "s": {"eager": BaselineTime(30.0, 3.0, 100), "compile": BaselineTime(12.0, 1.2, 100),
              "liger": BaselineTime(error="incorrect: output 0 differs")}})
    result = ShapeResult(shape="s", correct=True, time_us=10.0, time_spread_us=1.0, samples=100,
                         start_time_us=20.0)
    filled = with_baselines(result, table)
    assert filled.best_baseline == "compile" and filled.best_baseline_us == 12.0
    assert filled.speedup_vs_best == pytest.approx(1.2)
    assert filled.speedup_vs_eager == pytest.approx(3.0)
    assert filled.speedup_vs_compile == pytest.approx(1.2)
    # 95% half-width from both medians' standard errors: small, but there
    assert 0 < filled.speedup_vs_best_ci < 0.1 and 0 < filled.speedup_vs_eager_ci < 0.3
    assert math.isnan(with_baselines(ShapeResult(shape="s"), table).speedup_vs_best)


def test_baselines_are_carried_over_by_the_starting_kernel():
    """Measured when the starting kernel took 10 us; the candidate's evaluation, on a machine
    now twice as slow, times the starting kernel at 20 us: the baselines count double."""
    table = BaselineTable(task="t", device="cpu", key="k", timing=TimingSettings(),
                          language="cpp", start={"s": BaselineTime(10.0, 0.5, 100)},
                          shapes={"s": {"eager": BaselineTime(30.0, 1.5, 100)}})
    result = ShapeResult(shape="s", correct=True, time_us=20.0, time_spread_us=1.0, samples=100,
                         start_time_us=20.0, start_spread_us=1.0)
    filled = with_baselines(result, table)
    assert filled.eager_time_us == pytest.approx(60.0)
    assert filled.speedup_vs_eager == pytest.approx(3.0) == filled.speedup_vs_best
    direct = with_baselines(result, replace(table, start={}))  # nothing to carry it: as timed
    assert direct.speedup_vs_eager == pytest.approx(1.5)
    # four medians' errors in the interval, not two
    assert filled.speedup_vs_eager_ci / 3.0 > direct.speedup_vs_eager_ci / 1.5


def test_the_timing_protocol_defaults_are_the_evaluators():
    # A run's timing.json with defaults must time as an evaluator built with defaults does.
    assert TimingSettings.of(EvaluatorSettings()) == TimingSettings()
    with pytest.raises(ValueError, match="min_repeats"):
        TimingSettings(min_repeats=0)


def test_compiles_launch_settings_travel_with_its_time_through_the_cache():
    chosen = {"triton_poi_fused_mul_silu_0": {"XBLOCK": 512, "num_warps": 8, "num_stages": 1}}
    table = BaselineTable(task="t", device="cuda: H100", key="k",
                          timing=TimingSettings.of(EvaluatorSettings()),
                          shapes={"s": {"compile": BaselineTime(7.1, 0.1, 50, detail="mode default",
                                                                configs=chosen),
                                        "eager": BaselineTime(20.0, 1.0, 50)}})
    again = BaselineTable.from_json(json.loads(json.dumps(table.as_json())))
    assert again.get("s", "compile").configs == chosen
    assert again.get("s", "eager").configs == {}
    # an entry written before configs were recorded reads as none
    old = table.as_json()
    del old["shapes"]["s"]["compile"]["configs"]
    assert BaselineTable.from_json(old).get("s", "compile").configs == {}


def test_a_baselines_results_rotate_over_the_copies_as_a_candidates_outputs_do():
    """A baseline's result is kept until its copy comes round: one result dropped at once
    would give every call the same (cached) memory to write, which no candidate gets."""
    import weakref

    from kernelswarm.evaluators.baselines.baseline_worker import rotating

    inputs = [(torch.full((4,), float(i)),) for i in range(3)]
    made: list[weakref.ref] = []

    def baseline(x: torch.Tensor) -> torch.Tensor:
        result = x * 2
        made.append(weakref.ref(result))
        return result

    call = rotating(baseline, inputs)
    for copy in (0, 1, 2):
        call(copy)
    assert all(ref() is not None for ref in made)  # three results, three buffers, all held
    assert len({ref().data_ptr() for ref in made}) == 3
    call(0)  # copy 0 comes round: its earlier result, and only it, is let go
    assert made[0]() is None and all(ref() is not None for ref in made[1:])
    made.clear()
    one = rotating(baseline, inputs[:1])  # one copy, larger than any cache: nothing held
    one(0)
    assert made[0]() is None


def test_a_second_language_joins_the_baselines_with_its_start_alone(tmp_path):
    """A search of cpp and triton lineages: the baselines are measured once, with the first
    language's start; the second's start is timed after, with eager, and carried in."""
    import shutil

    from tests.conftest import SILU_TASK

    task = Path(shutil.copytree(SILU_TASK, tmp_path / "silu_and_mul"))
    settings = _settings(tmp_path / "cache")
    first = measure_baselines(task, settings, language="cpp")
    label = next(iter(first.start))
    assert not first.cached and first.language == "cpp" and first.start[label].ok
    second = measure_baselines(task, settings, language="triton")
    assert not second.cached and second.key == first.key
    assert second.shapes == first.shapes  # eager and the rest: not measured again
    assert second.language == "triton" and set(second.start) == set(first.start)
    carried = second.start[label]
    assert carried.ok and carried.detail.startswith("timed after the baselines, scaled by")
    again = measure_baselines(task, settings, language="cpp")
    assert again.cached and again.start == first.start  # each language's start kept
    assert measure_baselines(task, settings, language="triton").cached
    assert measure_baselines(task, settings).cached  # no language: the baselines alone
    # what a run's report reads back: the baselines, with the judged kernel's language's start
    from kernelswarm.experiments.views.carried_baselines import read_measured

    for table in (first, second):
        kept = read_measured(settings.cache_dir, "silu_and_mul", table.key, table.language)
        assert kept is not None and kept.times_us[label]["eager"] == \
            table.get(label, "eager").median_us
        assert kept.start_us[label] == pytest.approx(table.start[label].median_us)
