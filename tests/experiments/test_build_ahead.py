"""The starts' Triton device code built while a run starts up (experiments/run/build_ahead.py):
the real build (Triton's compiler and ptxas, for sm_90) on the CPU, found afterwards by the
lookup a judge makes, which never builds."""

from __future__ import annotations

import time

from kernelswarm.evaluators import EvaluatorSettings, SandboxBuilder
from kernelswarm.experiments.run.build_ahead import build_starts_ahead
from kernelswarm.search import load_task
from tests.conftest import SILU_TASK
from tests.evaluators.test_prebuild import needs_ptxas


@needs_ptxas
def test_the_triton_start_and_its_first_candidate_are_built_before_they_are_judged(tmp_path):
    settings = EvaluatorSettings(device="cuda", cuda_arch="sm_90", cache_dir=tmp_path,
                                 check_heldout=False)
    task = load_task(SILU_TASK, "cuda")
    start, cuda_start = task.starting_candidate("triton"), task.starting_candidate("cuda")
    first = start.derive(source=start.source + "\n# the kernel its lineages judge first\n")
    looked_up = SandboxBuilder(SILU_TASK, "triton", settings)
    assert looked_up.build(start).prebuilt is None  # nothing built yet: a judge would compile
    began = time.monotonic()
    threads = build_starts_ahead(SILU_TASK, (cuda_start, start), {"triton": (first,)},
                                 settings)
    assert len(threads) == 2  # the cuda start has no device code built ahead
    assert time.monotonic() - began < 5  # it returns at once: the builds run beside the run
    for thread in threads:
        thread.join(timeout=600)
    for candidate in (start, first):
        found = looked_up.build(candidate)  # a judge's lookup: it builds nothing ahead
        assert found.prebuilt is not None and any(found.prebuilt.rglob("*.cubin")), candidate.id


def test_nothing_is_built_ahead_off_a_gpu(tmp_path):
    settings = EvaluatorSettings(device="cpu", cache_dir=tmp_path)
    task = load_task(SILU_TASK, "cpu")
    assert build_starts_ahead(SILU_TASK, (task.starting_candidate("triton"),), {},
                              settings) == []
