"""Dispatch kernels: per-shape knob settings held as routes of one source (search/dispatch.py,
agents/builtin/dispatch_source.py, dispatch_move.py). The cpp kernels are judged by the real
evaluator; the route the generated C picks is checked against the table's rule by running it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernelswarm.agents import RuleCoder, RulePlanner
from kernelswarm.agents.builtin.dispatch_move import DISPATCH, dispatch_candidate
from kernelswarm.agents.builtin.dispatch_source import compose
from kernelswarm.search import (
    Attempt,
    Candidate,
    Evaluation,
    Feedback,
    LineageView,
    Plan,
    ShapeResult,
    Status,
)
from kernelswarm.search.dispatch import DispatchTable, read_dispatch_table

# silu_and_mul in chunks of CHUNK elements with a scalar tail: every CHUNK is correct on every
# size, odd ones included; WRONG=1 breaks the kernel, to see that a route is really taken.
CHUNKED = """#include <math.h>
#include <stdint.h>
#ifndef CHUNK
#define CHUNK 1
#endif
#ifndef WRONG
#define WRONG 0
#endif
static inline float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u + WRONG; }
extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* gate = x + t * 2 * d;
        const float* up = gate + d;
        float* row = out + t * d;
        int64_t i = 0;
        for (; i + CHUNK <= d; i += CHUNK) {
            for (int j = 0; j < CHUNK; ++j) row[i + j] = silu_mul(gate[i + j], up[i + j]);
        }
        for (; i < d; ++i) row[i] = silu_mul(gate[i], up[i]);
    }
}
"""
CPU_SHAPES = [{"tokens": 1, "d": 4096, "dtype": "float32"},
              {"tokens": 16, "d": 4096, "dtype": "float32"},
              {"tokens": 64, "d": 2048, "dtype": "float32"}]


def chunked(start: Candidate) -> Candidate:
    return start.derive(source=CHUNKED, knob_space={"CHUNK": (1, 3, 8, 16), "WRONG": (0, 1)})


def dispatch_of(start: Candidate, knobs: list[dict]) -> Candidate:
    composed = compose(CHUNKED, "cpp", "silu_and_mul", list(zip(CPU_SHAPES, knobs, strict=True)))
    assert composed is not None
    return start.derive(source=composed[0], knob_space={}, knobs={})


def test_each_tuning_shape_takes_its_own_route_and_an_unseen_shape_the_nearest():
    table = DispatchTable.build("k", [({"tokens": 1, "d": 4096, "dtype": "bf16"}, {"B": 1}),
                                      ({"tokens": 1024, "d": 4096, "dtype": "bf16"}, {"B": 2}),
                                      ({"tokens": 64, "d": 4096, "dtype": "f16"}, {"B": 3})])
    assert table.sizes == ("d", "tokens") and table.exact == ("dtype",)
    assert [table.select(r.shape_dict) for r in table.routes] == [0, 1, 2]
    assert table.knobs_for({"tokens": 3, "d": 4099, "dtype": "bf16"}) == {"B": 1}
    assert table.knobs_for({"tokens": 4099, "d": 5000, "dtype": "bf16"}) == {"B": 2}
    assert table.knobs_for({"tokens": 1, "d": 4096, "dtype": "f16"}) == {"B": 3}  # dtype first
    assert table.knobs_for({"tokens": 1, "d": 4096, "dtype": "f32"}) == {"B": 1}  # none: nearest
    assert DispatchTable.from_json(table.to_json()) == table
    with pytest.raises(ValueError, match="sizes"):
        DispatchTable.from_json({"entry": "k", "routes": []})


def test_the_composed_source_carries_its_table_and_builds_alone(start, compile_cpp):
    source = dispatch_of(start, [{"CHUNK": 1}, {"CHUNK": 3}, {"CHUNK": 16}]).source
    table = read_dispatch_table(source)
    assert table is not None and table.sizes == ("d", "tokens")  # cpp sees no dtype
    assert [r.knob_values["CHUNK"] for r in table.routes] == [1, 3, 16]
    built = compile_cpp(source, extra=("-Wall", "-Werror"))
    assert built.returncode == 0, built.stderr
    assert read_dispatch_table(CHUNKED) is None


def test_the_c_switch_picks_the_route_the_table_rule_picks(start, gxx, tmp_path: Path):
    marked = CHUNKED.replace("+ WRONG;", "* 0.0f + MARK;").replace("#ifndef WRONG", "#ifndef MARK")
    marked = marked.replace("#define WRONG 0", "#define MARK 0")
    routes = [(shape, {"MARK": i + 1}) for i, shape in enumerate(CPU_SHAPES)]
    source, table = compose(marked, "cpp", "silu_and_mul", routes)
    probes = [(t, d) for t in (1, 2, 3, 7, 16, 31, 64, 67, 5000) for d in (1, 515, 2048, 3000, 4099)]
    main = ['#include <cstdio>', '#include <cstdint>', '#include <vector>',
            'extern "C" void silu_and_mul(float*, const float*, int64_t, int64_t);',
            "int main() {", f"  const long long probes[][2] = {{{', '.join(f'{{{t},{d}}}' for t, d in probes)}}};",
            f"  for (int p = 0; p < {len(probes)}; ++p) {{",
            "    std::vector<float> x(2 * probes[p][0] * probes[p][1], 1.0f), out(x.size() / 2);",
            "    silu_and_mul(out.data(), x.data(), probes[p][0], probes[p][1]);",
            '    std::printf("%d\\n", static_cast<int>(out[0]));', "  }", "}"]
    (tmp_path / "kernel.cpp").write_text(source)
    (tmp_path / "main.cpp").write_text("\n".join(main))
    subprocess.run([gxx, "-O1", "-std=c++17", "kernel.cpp", "main.cpp", "-o", "probe"],
                   cwd=tmp_path, check=True, timeout=120)
    chosen = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    expected = [table.select({"tokens": t, "d": d}) + 1 for t, d in probes]
    assert [int(c) for c in chosen] == expected
    assert len(set(expected)) == 3  # every route is taken by some probe


@pytest.mark.slow
def test_a_cpp_dispatch_kernel_is_judged_correct_on_every_shape_and_a_bad_route_is_caught(
        start, evaluator):
    good = dispatch_of(start, [{"CHUNK": 16}, {"CHUNK": 3}, {"CHUNK": 8}])
    verdict = evaluator.evaluate(good)
    assert verdict.status is Status.OK, verdict.message
    assert {s.shape for s in verdict.shapes} == {
        "d=4096,dtype=float32,tokens=1", "d=4096,dtype=float32,tokens=16",
        "d=2048,dtype=float32,tokens=64"}
    # the route of tokens=64 alone is wrong: the evaluator must see that shape fail
    bad = dispatch_of(start, [{"CHUNK": 16}, {"CHUNK": 3}, {"CHUNK": 8, "WRONG": 1}])
    verdict = evaluator.evaluate(bad)
    assert verdict.status is Status.INCORRECT
    failed = verdict.failed_shape()
    assert failed is not None and "tokens=64" in failed.shape


def _tuned(candidate: Candidate, chunk: int, speedups: list[float], step: int
           ) -> tuple[Candidate, Attempt]:
    tuned = candidate.derive(knobs={"CHUNK": chunk})
    labels = [",".join(f"{k}={v}" for k, v in sorted(s.items())) for s in CPU_SHAPES]
    geo = (speedups[0] * speedups[1] * speedups[2]) ** (1 / 3)
    return tuned, Attempt(step, "tune", tuned.id, "OK", geo,
                          shape_speedups=tuple(zip(labels, speedups, strict=True)))


def _view(current: Candidate, history: list[Attempt]) -> LineageView:
    evaluation = Evaluation(current.id, Status.OK, shapes=(ShapeResult("n=1", correct=True),))
    return LineageView(lineage=0, step=len(history), current=current, best=(current, evaluation),
                       global_best=None, history=tuple(history), feedback=Feedback("", ))


def test_the_planner_proposes_a_dispatch_when_per_shape_bests_differ(start):
    base = chunked(start)
    history = []
    for step, (chunk, speedups) in enumerate([(1, [1.0, 1.0, 1.0]), (3, [1.3, 1.1, 0.9]),
                                              (8, [1.1, 1.2, 1.0]), (16, [0.9, 1.0, 1.4])]):
        current, attempt = _tuned(base, chunk, speedups, step)
        history.append(attempt)
    view = _view(current, history)
    candidate = dispatch_candidate(view)
    assert candidate is not None and candidate.space == {}
    table = read_dispatch_table(candidate.source)
    assert [r.knob_values["CHUNK"] for r in table.routes] == [16, 3, 8]  # tokens=64 row first
    planner = RulePlanner(0, dispatch_after=0)
    for transformation in planner.order("cpp"):  # rewrites come first: each tried, and failed
        child = RuleCoder().code(Plan(f"rewrite:{transformation.name}"), current, view)
        if child is not None:
            history.append(Attempt(len(history), f"rewrite:{transformation.name}", child.id,
                                   "COMPILE_ERROR", 0.0))
    view = _view(current, history)
    plan = planner.plan(view)
    assert plan.move == DISPATCH and "3 settings over 3 shapes" in plan.rationale
    made = RuleCoder().code(Plan(DISPATCH), current, view)
    assert made is not None and made.id == candidate.id
    history.append(Attempt(len(history), DISPATCH, made.id, "OK", 1.2))
    assert planner.plan(_view(current, history)).move != DISPATCH  # not proposed twice


def test_no_dispatch_when_one_setting_is_best_everywhere(start):
    base = chunked(start)
    history = []
    for step, (chunk, speedups) in enumerate([(1, [1.0, 1.0, 1.0]), (3, [1.3, 1.2, 1.1])]):
        current, attempt = _tuned(base, chunk, speedups, step)
        history.append(attempt)
    assert dispatch_candidate(_view(current, history)) is None


# --- the built-in roles in the real lineage state machine --------------------------------------

# Per tuning shape (in CPU_SHAPES order), the speedup each CHUNK gives: every shape has another
# best, so a kernel routing each shape to its best beats every single setting.
CHUNK_GAINS = {1: (1.0, 1.0, 1.0), 3: (1.3, 1.0, 0.9), 8: (1.0, 1.25, 1.0), 16: (0.9, 1.0, 1.4)}
LABELS = [",".join(f"{k}={v}" for k, v in sorted(s.items())) for s in CPU_SHAPES]


def judge(candidate: Candidate) -> Evaluation:
    """A stand-in evaluator scoring each shape by the CHUNK it runs with: the candidate's own, or
    for a dispatch kernel the CHUNK of the route its table gives that shape."""
    table = read_dispatch_table(candidate.source)
    shapes = []
    for i, shape in enumerate(CPU_SHAPES):
        knobs = table.knobs_for(shape) if table else candidate.knob_values
        gain = CHUNK_GAINS[knobs.get("CHUNK", 1)][i]
        shapes.append(ShapeResult(LABELS[i], correct=True, time_us=10.0 / gain,
                                  speedup_vs_start=gain, roofline_fraction=0.1 * gain))
    return Evaluation(candidate.id, Status.OK, shapes=tuple(shapes))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_lineage_of_the_builtin_roles_tunes_then_dispatches_and_keeps_the_dispatch(start, seed):
    from kernelswarm.agents import builtin_roles
    from kernelswarm.search import Budget, KnobTuner, Lineage

    base = start.derive(source=CHUNKED.replace("+ WRONG", ""), knob_space={"CHUNK": (1, 3, 8, 16)})
    lineage = Lineage(0, base, judge(base), builtin_roles(seed), KnobTuner(seed),
                      Budget(candidates=60))
    while (candidate := lineage.propose()) is not None:
        lineage.observe(candidate, judge(candidate))
    moves = [a.move for a in lineage.history]
    assert DISPATCH in moves, moves
    best, evaluation = lineage.best
    table = read_dispatch_table(best.source)
    assert table is not None, "the lineage's best is the dispatch kernel"
    assert [table.knobs_for(s)["CHUNK"] for s in CPU_SHAPES] == [3, 8, 16]
    assert evaluation.speedup == pytest.approx((1.3 * 1.25 * 1.4) ** (1 / 3))


def test_a_dispatch_kernel_is_stored_as_one_file_plus_its_table(start, tmp_path: Path):
    import json

    from kernelswarm.experiments.run.execute import write_best_kernel
    from kernelswarm.experiments.sinks.sources import read_kernel_file

    kernel = dispatch_of(start, [{"CHUNK": 1}, {"CHUNK": 3}, {"CHUNK": 16}])
    path = write_best_kernel(tmp_path, kernel)
    knobs, source = read_kernel_file(path.read_text(), "cpp", kernel.entry)
    assert knobs is None and source == kernel.source  # eval of the file judges the same kernel
    assert sorted(p.name for p in path.parent.glob("*.*")) == [path.name]  # one kernel file
    table = json.loads((path.parent / "dispatch" / f"{kernel.id}.json").read_text())
    assert table == read_dispatch_table(kernel.source).to_json()
    assert [r["knobs"]["CHUNK"] for r in table["routes"]] == [1, 3, 16]
