"""``search.compile_start``: a run's lineages judge torch.compile's own kernel first (on this CPU:
Inductor's C++ for a cpp run), generated once per machine, and go on from it where it is faster;
where none can be generated the run says why and starts from the task's kernel."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from kernelswarm.evaluators.starts.generated_starts import compile_start
from kernelswarm.experiments.config import ConfigError, load_config
from kernelswarm.experiments.run.compile_start import COMPILE_START_FILE, MOVE, first_candidates
from kernelswarm.experiments.run.execute import run
from kernelswarm.experiments.run.prepare import evaluator_settings
from kernelswarm.experiments.sinks import read_evaluations
from kernelswarm.search import load_task

pytestmark = pytest.mark.slow

SMALL = """TUNING_SHAPES = {
    "cpu": [
        {"tokens": 2, "d": 512, "dtype": "float32"},
        {"tokens": 4, "d": 1024, "dtype": "float32"},
    ],
    "cuda": ["""
HELDOUT = """HELDOUT_SHAPES = {
    "cpu": [
        {"tokens": 3, "d": 100, "dtype": "float32"},
    ],
    "cuda": ["""


def _small_task(folder: Path) -> Path:
    """The silu_and_mul task with two small tuning shapes and one held-out shape: Inductor
    compiles the reference once per shape."""
    task = folder / "task.py"
    text = task.read_text()
    for name, replacement in (("TUNING_SHAPES", SMALL), ("HELDOUT_SHAPES", HELDOUT)):
        text, count = re.subn(name + r' = \{\n    "cpu": \[\n.*?\],\n    "cuda": \[', replacement,
                              text, count=1, flags=re.S)
        assert count == 1, f"the silu_and_mul task's {name} layout changed"
    task.write_text(text)
    return folder


def _config(folder: Path, task: Path, cache: Path, *more: str):
    return load_config(None, [
        f'run.out_dir="{folder / "runs"}"', "run.name=compiled", f'task.name="{task}"',
        'task.language="cpp"', "search.compile_start=true", "search.lineages=1",
        "search.candidates_per_lineage=2", "search.tester=false", "search.confirm_top=0",
        "tracking.mlflow=false", "evaluator.seeds=1", f'evaluator.cache_dir="{cache}"',
        "timing.budget_s=0.02", "timing.min_repeats=3", "timing.max_repeats=6", *more])


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory, compile_cache, ray_session):
    from tests.conftest import SILU_TASK

    folder = tmp_path_factory.mktemp("compile-start")
    task = _small_task(Path(shutil.copytree(SILU_TASK, folder / "silu_and_mul")))
    config = _config(folder, task, compile_cache)
    console = Console(file=io.StringIO(), width=160)
    outcome = run(config, console)
    return config, task, outcome, console.file.getvalue()


def test_the_lineage_judges_compiles_kernel_first(compiled_run):
    config, task, outcome, text = compiled_run
    report = json.loads((outcome.run_dir / COMPILE_START_FILE).read_text())
    assert report["cpp"]["used"] is True and report["cpp"]["cached"] is False
    # generated for every shape the evaluator runs: both tuning shapes and the held-out one
    assert set(report["cpp"]["shapes"]) == {"d=512,dtype=float32,tokens=2",
                                            "d=1024,dtype=float32,tokens=4",
                                            "d=100,dtype=float32,tokens=3"}
    assert "search.compile_start: generating the cpp kernel of torch.compile" in text
    # where its seconds went: no baselines table on the CPU, the rest generating
    made = report["cpp"]
    assert made["baselines_s"] < 1 and 0 < made["generation_s"] <= made["seconds"]
    assert f"generating {made['generation_s']:.0f} s" in text
    rows = read_evaluations(outcome.run_dir).to_pylist()
    first = min((r for r in rows if r["lineage"] == 0), key=lambda r: r["step"])
    assert first["origin_move"] == MOVE and first["candidate_id"] == report["cpp"]["candidate"]
    assert first["status"] == "OK", first["message"]
    starts = [r for r in rows if r["lineage"] == -1]
    assert starts and starts[0]["origin_move"] != MOVE  # speedups stay over the task's kernel


def test_a_second_run_on_the_machine_takes_the_kernel_from_the_cache(compiled_run, compile_cache):
    config, task, outcome, _ = compiled_run
    report = json.loads((outcome.run_dir / COMPILE_START_FILE).read_text())
    settings = evaluator_settings(config)
    generated, cached = compile_start(load_task(task, "cpu"), "cpp", settings)
    assert cached is True
    assert report["cpp"]["shapes"] == list(generated.shapes)


def test_a_reference_compile_cannot_capture_leaves_the_task_start(tmp_path, compile_cache):
    from tests.conftest import SILU_TASK

    task = _small_task(Path(shutil.copytree(SILU_TASK, tmp_path / "silu_and_mul")))
    source = (task / "task.py").read_text()
    # a branch on a value: torch.compile cannot make one graph of it
    source = source.replace("    d = x.shape[-1] // 2\n",
                            "    d = x.shape[-1] // 2\n    if x.sum().item() > 1e30:\n"
                            "        print('large')\n", 1)
    (task / "task.py").write_text(source)
    config = _config(tmp_path, task, compile_cache)
    console = Console(file=io.StringIO(), width=200)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    found = first_candidates(config, load_task(task, "cpu"), evaluator_settings(config),
                             console, run_dir)
    assert found == {}
    report = json.loads((run_dir / COMPILE_START_FILE).read_text())
    assert report["cpp"]["used"] is False and "torch.compile" in report["cpp"]["reason"]
    assert "its lineages start from the task's kernel" in console.file.getvalue()


def test_compile_start_needs_a_language_compile_writes_on_the_device():
    with pytest.raises(ConfigError, match="search.compile_start"):
        load_config(None, ["task.language=\"cuda\"", "evaluator.device=\"cuda\"",
                           "search.compile_start=true"])


CUDA_ONE_SHAPE = """TUNING_SHAPES = {
    "cpu": [
        {"tokens": 2, "d": 512, "dtype": "float32"},
    ],
    "cuda": [
        {"tokens": 1024, "d": 11008, "dtype": "bfloat16"},
    ],
}
_UNUSED = {
    "cuda": ["""


@pytest.mark.gpu
def test_a_search_seeded_from_compile_starts_at_compiles_speed(tmp_path, compile_cache,
                                                               ray_session):
    """On a GPU the triton lineage's first candidate is Inductor's kernel, launched as
    torch.compile launches it: as fast as torch.compile (its fastest mode) within noise."""
    from kernelswarm.evaluators.baselines.baselines import measure_baselines
    from tests.conftest import SILU_TASK

    task = Path(shutil.copytree(SILU_TASK, tmp_path / "silu_and_mul"))
    text, count = re.subn(r'TUNING_SHAPES = \{\n    "cpu": \[\n.*?\],\n    "cuda": \[',
                          CUDA_ONE_SHAPE, (task / "task.py").read_text(), count=1, flags=re.S)
    assert count == 1
    (task / "task.py").write_text(text)
    config = load_config(None, [
        f'run.out_dir="{tmp_path / "runs"}"', "run.name=compiled-gpu", f'task.name="{task}"',
        'task.language="triton"', 'evaluator.device="cuda"', "search.compile_start=true",
        "search.lineages=1", "search.candidates_per_lineage=1", "search.tester=false",
        "search.confirm_top=0", "tracking.mlflow=false", f'evaluator.cache_dir="{compile_cache}"',
        "timing.budget_s=0.3", "evaluator.run_timeout_s=300"])
    outcome = run(config, Console(file=io.StringIO(), width=160))
    report = json.loads((outcome.run_dir / COMPILE_START_FILE).read_text())
    assert report["triton"]["used"] is True, report
    rows = [r for r in read_evaluations(outcome.run_dir).to_pylist()
            if r["lineage"] == 0 and r["shape"] == "d=11008,dtype=bfloat16,tokens=1024"]
    assert rows and rows[0]["origin_move"] == MOVE and rows[0]["status"] == "OK", rows
    first = rows[0]
    # torch.compile in its faster mode on the shape, by the same timer (the GPU tests' evaluation
    # workers leave it out: it is measured here, in the baselines' own process)
    table = measure_baselines(task, evaluator_settings(config), compile=True, language="triton")
    compiled = table.get("d=11008,dtype=bfloat16,tokens=1024", "compile")
    assert compiled.ok, compiled.error
    spread = max(first["time_spread_us"] / first["time_us"], 0.03)
    assert first["time_us"] <= compiled.median_us * (1.0 + spread), \
        (first["time_us"], compiled.median_us, compiled.detail)
