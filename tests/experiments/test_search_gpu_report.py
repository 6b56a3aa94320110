"""search_gpu's command line and report (the GPU run itself is in docs/search_gpu.md): the
languages and compile start it asks for, and the table with the compile start's column."""

from __future__ import annotations

import math

from benchmarks.search_gpu import _arguments, _overrides, _table
from kernelswarm.experiments.config import load_config


def test_languages_and_the_compile_start_become_the_runs_configuration():
    args = _arguments(["--task", "silu_and_mul", "--languages", "cuda,triton", "--compile-start",
                       "--lineages", "4"])
    config = load_config(None, _overrides(args))
    assert config.languages == ("cuda", "triton") and config.search.compile_start
    assert config.compile_start_languages() == ("triton",)
    one = load_config(None, _overrides(_arguments(["--task", "silu_and_mul"])))
    assert one.languages == ("cuda",) and not one.search.compile_start


def _shape(label: str, start: float, compiled: float, best: float, generated: float) -> dict:
    return {"shape": label, "roofline_us": 1.0, "start_us": start, "compile_us": compiled,
            "compile_mode": "default", "best_baseline": "compile", "best_baseline_us": compiled,
            "best_us": best, "check": "ok", "vs_start": start / best, "vs_compile": compiled / best,
            "vs_best": compiled / best, "search_vs_best": compiled / best,
            "search_vs_best_ci": 0.01, "roofline_fraction": 1.0 / best, "large": False,
            "compile_start_us": generated, "compile_start_vs_compile": compiled / generated}


def test_the_table_shows_compiles_kernel_as_the_start_next_to_compile():
    shapes = [_shape("tokens=1", 20.0, 2.0, 1.8, 2.02), _shape("tokens=64", 30.0, 3.0, 2.9, 3.0)]
    judged = {"machine": {"device": "NVIDIA H100"}, "versions": {"torch": "2.11.0"},
              "baselines_skipped": {}, "shapes": shapes, "geomean_vs_start": 12.0,
              "geomean_vs_best": 1.07, "worst_vs_best": 1.03, "geomean_vs_compile": 1.07,
              "worst_vs_compile": 1.03, "min_roofline_large": math.nan,
              "geomean_compile_start_vs_compile": math.sqrt(2.0 / 2.02),
              "all_correct": True}
    report = {"task": "silu_and_mul", "lineages": 1, "minutes": 5.0, "command": "x",
              "judged": judged, "evaluations": 20, "search_best": 11.0, "best_id": "abc",
              "best_knobs": {"XBLOCK_S0": 128}, "best_move": "dispatch",
              "best_language": "triton",
              "throughput": {"evaluations": 20, "span_s": 300.0, "evals_per_gpu_minute": 4.0,
                             "median_eval_s": 3.0}}
    text = _table(report)
    header = next(line for line in text.splitlines() if line.startswith("| shape"))
    assert "compile's kernel as start µs" in header
    row = next(line for line in text.splitlines() if line.startswith("| tokens=1 "))
    assert row.count("|") == header.count("|") and "| 2.02 |" in row
    assert "torch.compile's kernel as the start (re-timed): 0.995x compile" in text
    assert "(triton, dispatch)" in text
    # a run without a compile start has no such column
    for s in shapes:
        s["compile_start_us"] = math.nan
    assert "compile's kernel" not in _table(report).split("\n\n")[3]


def test_a_generated_starts_many_knobs_are_shown_by_those_moved_from_compiles_choice():
    from benchmarks.search_gpu import knobs_text

    assert knobs_text({"BLOCK": 256}) == "{'BLOCK': 256}"
    many = {f"XBLOCK_S{i}": 0 for i in range(8)}
    assert knobs_text(many) == "8 knobs, all as compiled"
    many["XBLOCK_S3"] = 2048
    assert knobs_text(many) == "8 knobs, set away from compile's choice: {'XBLOCK_S3': 2048}"


def test_the_start_up_and_the_first_candidate_are_said_apart_from_the_search():
    from benchmarks.search_gpu import _throughput_line

    report = {"search_best": 1.2, "search_startup_s": 52.5,
              "throughput": {"evaluations": 41, "span_s": 130.0, "evals_per_gpu_minute": 18.9,
                             "median_eval_s": 2.9, "build_wait_s": 0.0,
                             "after_start": {"evaluations": 40, "span_s": 120.0,
                                             "languages": {"triton": 40},
                                             "evals_per_gpu_minute": 20.0,
                                             "first_candidate_after_s": 3.5}}}
    line = _throughput_line(report)  # a report of before first_candidate_s: added up
    assert line.startswith("start-up 52.5 s (the command's start to the search's), the first "
                           "candidate judged 56.0 s after the command's start; ")
    report["throughput"]["first_candidate_s"] = 61.25  # measured from the records' clock
    assert "the first candidate judged 61.2 s after the command's start; " in \
        _throughput_line(report)
    del report["search_startup_s"]  # a report of before the figure existed
    assert _throughput_line(report).startswith("41 evaluations in 130 s of search")


def test_a_screened_search_says_how_many_it_screened_out_and_the_timing_saved():
    from benchmarks.search_gpu import _throughput_line

    report = {"search_best": 1.2,
              "throughput": {"evaluations": 41, "span_s": 130.0, "evals_per_gpu_minute": 18.9,
                             "median_eval_s": 2.9, "build_wait_s": 0.0},
              "screening": {"screen_shapes": 3, "screened_out": 17, "saved_s": 40.25}}
    assert "; screened out 17 on 3 shapes, about 40.2 s of timing saved; search's own best" \
        in _throughput_line(report)
    report["screening"]["screen_shapes"] = 0  # screening off: nothing said
    assert "screened" not in _throughput_line(report)


def test_a_start_judged_late_does_not_hide_what_the_other_lineages_searched_before_it():
    """A CUDA start judged at once, compile's Triton kernel 60 s later: the CUDA lineages'
    candidates in between are the search's, and its first candidate is theirs."""
    from benchmarks.search_gpu import first_candidate_s, searched

    def record(wall_s: float, role: str, language: str) -> dict:
        return {"wall_s": wall_s, "timestamp": 1000.0 + wall_s, "origin_role": role,
                "language": language}

    records = [record(5.0, "seed", "cuda"), record(8.0, "plan", "cuda"),
               record(30.0, "plan", "cuda"), record(65.0, "seed", "triton"),
               record(70.0, "plan", "triton"), record(80.0, "plan", "cuda")]
    found = searched(records, span=80.0)
    assert found["evaluations"] == 4 and found["languages"] == {"cuda": 3, "triton": 1}
    assert found["span_s"] == 75.0  # from the first start's verdict
    assert found["first_candidate_after_s"] == 3.0
    assert found["evals_per_gpu_minute"] == 4 / (75.0 / 60)
    assert first_candidate_s(records, began=1000.0 - 90.0) == 98.0  # start-up 90 s, then 8 s
