"""The strategy comparison's table (benchmarks/strategies.py) from saved runs: the
target is the islands runs' median search best, and a run that never reached it counts as such."""

from __future__ import annotations

import json

from benchmarks.strategies import main, table


def _run(variant: str, seed: int, curve, final: float, rejected: int = 0) -> dict:
    return {"variant": variant, "seed": seed, "final": final, "curve": curve, "kept": 4,
            "kept_families": 3, "rejected": rejected, "median_eval_s": 2.0}


RUNS = [
    _run("islands", 0, [(1.0, 1.2), (5.0, 2.0)], 1.9),
    _run("islands", 1, [(2.0, 1.5), (8.0, 3.0)], 2.8),
    _run("islands", 2, [(3.0, 2.5)], 2.4),
    _run("map_elites", 0, [(4.0, 2.5), (6.0, 2.6)], 2.5),
    _run("map_elites", 1, [(1.0, 1.1)], 1.0, rejected=3),
]


def test_the_table_measures_each_variant_against_the_islands_median(tmp_path, capsys):
    text = table(RUNS)
    islands, map_elites = text.splitlines()[1:3]
    # islands' median search best is 2.5: two of its runs got there (after 8 and 3 s)
    assert "2/3" in islands and "5.5 [3.0-8.0]" in islands
    assert "1/2" in map_elites and "4.0 [4.0-4.0]" in map_elites
    assert map_elites.split()[-2:] == ["3", "6.0"]  # rejected, worker seconds they saved
    assert "2.500x" in text.splitlines()[-1]
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"command": "x", "runs": RUNS}))
    assert main(["--table", str(saved)]) == 0
    assert capsys.readouterr().out.strip() == text
