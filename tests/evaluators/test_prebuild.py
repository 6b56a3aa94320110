"""Triton kernels built ahead of their first call, for a named GPU, on a machine without one.

The compile pool builds a Triton candidate's kernels for every shape the judge calls it on
(evaluators/judge/prebuild.py) in a sandboxed process with no device; the candidate's runner
then finds them in its Triton cache instead of compiling on the GPU's time. These tests run the
real build (Triton's compiler and ptxas, for sm_90) on the CPU and check what a runner would
find: every kernel the real calls need, under the keys Triton computes for real tensors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.judge.jit_cache import copy_tree, safe_files
from tests.conftest import SILU_TASK

triton = pytest.importorskip("triton", reason="Triton is not installed")


def _ptxas_runs() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        try:
            ptxas = get_ptxas(90)
        except TypeError:  # releases whose ptxas does not depend on the target
            ptxas = get_ptxas()
        return subprocess.run([ptxas.path, "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except Exception:  # noqa: BLE001 - no NVIDIA backend in this Triton
        return False


needs_ptxas = pytest.mark.skipif(not _ptxas_runs(), reason="Triton's ptxas does not run here")

# A process that calls the entry point on every tuning shape as a runner would (real tensors,
# on the CPU here), with launches turned into compiles, and counts what Triton's cache held.
_CALLS = """
import json, os, sys
from pathlib import Path
import triton
from kernelswarm.search.task import load_task
from kernelswarm.evaluators.languages.triton import TritonLanguage
from kernelswarm.evaluators.languages import triton_aot
task = load_task(Path(sys.argv[1]), "cuda")
kernel = TritonLanguage("cuda").load(Path(sys.argv[2]), "silu_and_mul", {})
hits = []
triton.knobs.compilation.listener = lambda **event: hits.append(event["cache_hit"])
with triton_aot.compile_only(90, []):
    for shape in task.tuning_shapes:
        x = task.module.make_inputs(dict(shape), 7, "cpu")
        out = task.module.make_outputs(dict(shape), "cpu")
        task.module.launch_triton(kernel.fn, x, out, dict(shape))
print(json.dumps(hits))
"""


@pytest.fixture(scope="module")
def gpu_triton(tmp_path_factory):
    """A triton evaluator for an sm_90 GPU, with no GPU: what a compile pool holds."""
    cache = tmp_path_factory.mktemp("prebuild-cache")
    settings = EvaluatorSettings(device="cuda", cuda_arch="sm_90", cache_dir=cache,
                                 check_heldout=False)
    with SandboxEvaluator(SILU_TASK, "triton", settings) as evaluator:
        yield evaluator


@needs_ptxas
def test_a_candidates_kernels_are_built_ahead_under_the_keys_of_its_real_calls(gpu_triton,
                                                                             tmp_path):
    start = gpu_triton.start_candidate
    result = gpu_triton.compile(start)
    assert result.ok, result.log
    build = gpu_triton._build(start)
    assert build.prebuilt is not None and build.prebuilt.is_dir()
    report = json.loads((build.prebuilt / "report.json").read_text())
    assert report["shapes"] == len(gpu_triton.task.tuning_shapes) and report["failed"] == {}
    # bf16 and fp16 rows: at least one kernel each, every one with its sm_90 cubin
    assert report["kernels"] >= 2
    cubins = [p for p in build.prebuilt.rglob("*.cubin")]
    assert len(cubins) == report["kernels"]
    metadata = [json.loads(p.read_text()) for p in build.prebuilt.glob("*/*.json")
                if not p.name.startswith("__grp__")]
    assert metadata and all(m["target"]["arch"] == 90 for m in metadata)
    # a runner's private cache holds a copy; the real calls find every kernel there
    runner_cache = tmp_path / "triton"
    assert copy_tree(build.prebuilt, runner_cache) >= 2 * report["kernels"]
    artifact = tmp_path / "kernel.py"
    shutil.copyfile(build.artifact, artifact)
    done = subprocess.run([sys.executable, "-c", _CALLS, str(SILU_TASK), str(artifact)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_CACHE_DIR": str(runner_cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    hits = json.loads(done.stdout.strip().splitlines()[-1])
    assert hits and all(hits), f"compiled again: {hits}"


@needs_ptxas
def test_an_evaluation_only_looks_its_build_up(gpu_triton):
    """The judge never builds ahead on its GPU's time: a candidate no pool built is left to
    compile at its first calls."""
    variant = gpu_triton.start_candidate.derive(
        source=gpu_triton.start_candidate.source + "\n# not built ahead\n")
    build = gpu_triton._build(variant)
    assert build.artifact is not None and build.prebuilt is None
    assert not list(build.artifact.parent.glob(f"{build.artifact.stem}.aot-*"))


def test_a_build_ahead_that_fails_is_remembered_with_its_reason(gpu_triton):
    broken = gpu_triton.start_candidate.derive(
        source=gpu_triton.start_candidate.source + "\nraise RuntimeError('no kernels today')\n")
    assert gpu_triton.compile(broken).ok  # the module itself builds: its run fails, in a runner
    failed = list(Path(gpu_triton.cache.root).glob("*.aot-*.error.txt"))
    assert len(failed) == 1 and "no kernels today" in failed[0].read_text()
    again = gpu_triton._builder._prebuild().prebuild(broken, gpu_triton._build(broken).artifact)
    assert again.cached and again.folder is None and "no kernels today" in again.note


def test_a_build_ahead_still_running_at_the_searchs_deadline_is_stopped_and_not_remembered(
        gpu_triton):
    slow = gpu_triton.start_candidate.derive(
        source=gpu_triton.start_candidate.source + "\n_SPIN = sum(range(10 ** 11))\n")
    builder = gpu_triton._builder
    builder.until(time.time() + 3.0)
    try:
        began = time.monotonic()
        result = builder.compile(slow)
        took = time.monotonic() - began
    finally:
        builder.until(None)
    assert result.ok, result.log  # the module built; only its device code was left
    assert took < 30, f"the build ahead ran {took:.0f} s past a deadline 3 s away"
    artifact = gpu_triton._build(slow).artifact
    assert not list(artifact.parent.glob(f"{artifact.stem}.aot-*"))  # no folder, no error kept
    note = builder._prebuild().prebuild(slow, artifact, build=False).note
    assert note == "not built ahead"  # a later build starts it again


def test_only_plain_files_two_levels_down_reach_a_runner(tmp_path):
    source = tmp_path / "built"
    (source / "KEY1").mkdir(parents=True)
    (source / "KEY1" / "kernel.cubin").write_bytes(b"\x7fELF")
    (source / "KEY1" / "deeper").mkdir()
    (source / "KEY1" / "deeper" / "hidden.cubin").write_bytes(b"x")
    (source / "report.json").write_text("{}")
    (source / "KEY1" / "link.cubin").symlink_to("/etc/hostname")
    (source / "KEY2").symlink_to(tmp_path)
    (source / "bad name").write_text("x")
    found = sorted(str(relative) for relative, _ in safe_files(source))
    assert found == ["KEY1/kernel.cubin", "report.json"]
    target = tmp_path / "runner"
    assert copy_tree(source, target) == 2
    assert (target / "KEY1" / "kernel.cubin").read_bytes() == b"\x7fELF"
    assert not (target / "KEY1" / "link.cubin").exists()
