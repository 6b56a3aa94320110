"""Screening in the real judge (C++ kernels in the sandbox): a candidate slower than the bar on
its screening shape stops there, SCREENED_OUT and timed on that shape only; real variants,
slower, as fast and faster, are each judged in full and screened, and screening never drops
one the full protocol keeps."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from kernelswarm.agents import RuleCoder
from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.search import (
    Candidate,
    Evaluation,
    LineageView,
    Plan,
    Screen,
    Status,
)
from kernelswarm.search.evaluation import clearly_faster
from tests.conftest import SILU_TASK

pytestmark = pytest.mark.slow


def _view(candidate: Candidate) -> LineageView:
    return LineageView(lineage=0, step=0, current=candidate, best=None, global_best=None,
                       history=(), feedback=None)


def _twice(start: Candidate) -> Candidate:
    """The start doing each row twice: correct, and about half as fast everywhere."""
    body = re.sub(r"(extern \"C\" void silu_and_mul\([^)]*\) \{)",
                  r"\1\n    for (int rep = 0; rep < 2; ++rep)", start.source, count=1)
    assert body != start.source
    return replace(start, source=body)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """(evaluator, start, its own verdict, variants by name)."""
    settings = EvaluatorSettings(cache_dir=tmp_path_factory.mktemp("screening"),
                                 timing_budget_s=0.1, min_repeats=5)
    evaluator = SandboxEvaluator(SILU_TASK, "cpp", settings)
    start = evaluator.start_candidate
    fast_exp = RuleCoder().code(Plan("rewrite:fast_exp"), start, _view(start))
    assert fast_exp is not None
    fast = fast_exp  # the built-in moves that make it fastest here, where they apply
    for move in ("simd", "target_isa"):
        fast = RuleCoder().code(Plan(f"rewrite:{move}"), fast, _view(fast)) or fast
    variants = {"twice": _twice(start), "same": replace(start, source=start.source + "\n// a"),
                "fast_exp": fast_exp, "fast": fast}
    yield evaluator, start, evaluator.evaluate(start).as_own_start(), variants
    evaluator.close()


def _timed(evaluation: Evaluation) -> list[str]:
    return [s.shape for s in evaluation.shapes if s.time_us > 0]


def test_a_slower_kernel_stops_at_its_screening_shape(judged):
    evaluator, start, own, variants = judged
    screen = Screen.of(own, 1, against=start.id)
    assert screen is not None and len(screen.shapes) == 1
    verdict = evaluator.evaluate_screened(variants["twice"], screen)
    assert verdict.status is Status.SCREENED_OUT, verdict.message
    assert _timed(verdict) == list(screen.shapes)
    assert all(s.correct for s in verdict.shapes)  # checked on every shape all the same
    assert verdict.message.startswith("screened out: slower than its lineage's best")
    assert verdict.speedup == 0.0  # not a result: no best, elite or confirmation reads it
    done = verdict.metrics["screen"]
    assert done["screened_out"] and done["timed_shapes"] == 1 and done["saved_s"] > 0


def test_screening_never_drops_a_kernel_the_full_protocol_keeps(judged):
    """Against the start as the lineage's best, and against the fastest variant: every
    variant judged in full and screened. One the full protocol keeps (clearly faster than
    the best, or faster on a shape beyond its interval) is timed in full by the screen; one
    screened out is slower on every shape in full; and the screen drops something."""
    evaluator, start, own, variants = judged
    full = {name: evaluator.evaluate(v) for name, v in variants.items()}
    assert all(e.ok for e in full.values()), {n: e.message for n, e in full.items()}
    fastest = max(full, key=lambda name: full[name].speedup)
    dropped = 0
    for best in (own, full[fastest]):
        screen = Screen.of(best, 1)
        bars = {shape: speedup for shape, speedup, _ in screen.bar}
        for name, candidate in {**variants, "start": start}.items():
            whole = full.get(name, own)
            screened = evaluator.evaluate_screened(candidate, screen)
            wins_a_shape = any(s.speedup_vs_start - s.speedup_vs_start_ci > bars[s.shape]
                               for s in whole.shapes if not math.isnan(s.speedup_vs_start_ci))
            if clearly_faster(whole, best) or wins_a_shape:
                assert screened.status is Status.OK, (name, screened.message)
                assert len(_timed(screened)) == len(whole.shapes)
            elif screened.status is Status.SCREENED_OUT:
                dropped += 1
            else:
                assert screened.status is Status.OK, (name, screened.message)
    assert dropped >= 3  # "twice" against the start; the start and "twice" against the fastest


def test_a_screen_naming_a_shape_the_task_lacks_is_refused(judged):
    evaluator, start, own, _ = judged
    screen = Screen(("tokens=9,d=9",), (("tokens=9,d=9", 1.0, math.nan),))
    with pytest.raises(ValueError, match="not all tuning shapes"):
        evaluator.evaluate_screened(start, screen)
