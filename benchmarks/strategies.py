"""Search strategies compared on one task, same budget, several seeds.

``python -m benchmarks.strategies --seeds 0 1 2 --out runs/strategies``

Runs the quickstart (the built-in agent on the C++ ``silu_and_mul``, on this machine's CPU) once
per variant and seed, the variants differing only in ``search.strategy`` and ``search.novelty``;
``--set`` passes any other override to every run (e.g. a GPU task: ``--set task.language=
\\"cuda\\" --set evaluator.device=\\"cuda\\"``). The seeds are the outer loop, so a change of the
machine's load falls on every variant alike. Per variant, over the seeds (median and range):

- **final best**: the run's reported best speedup over the starting kernel (after confirmation:
  the median of its best kernels judged again, what ``eval`` of the best file would read);
- **search best**: the best speedup as the search measured it, before confirmation;
- **worker s to islands' best**: the evaluation workers' seconds (``eval_s`` summed in record
  order) until the run's search best first reached the median search best of the islands runs
  (how many runs did, of how many); ``-`` where none did;
- **kept / families**: the kernels the strategy holds at the end and how many source families
  they are (two kernels of one family differ only in knob values);
- **rejected**: candidates novelty rejection kept from being judged, and the worker seconds that
  saved at the run's median evaluation time.

Writes every run's figures as JSON (``--json``) after each run; ``--table FILE.json`` prints
the table of a saved comparison again.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = {
    "islands": ['search.strategy="islands"'],
    "map_elites": ['search.strategy="map_elites"'],
    "islands+novelty=1": ['search.strategy="islands"', "search.novelty=1.0"],
    "islands+novelty=0.95": ['search.strategy="islands"', "search.novelty=0.95"],
}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.strategies",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("runs/strategies"))
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a configuration override for every run, as for kernelswarm run")
    parser.add_argument("--table", type=Path, metavar="FILE.json",
                        help="print the table of a saved comparison instead of running")
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    return args


def worker_curve(run_dir: Path) -> list[tuple[float, float]]:
    """(evaluation-worker seconds so far, best speedup so far) at every improvement."""
    from kernelswarm.experiments.sinks import read_evaluations

    rows = read_evaluations(run_dir).select(["seq", "eval_s", "global_best"]).to_pylist()
    spent, curve = 0.0, []
    for row in sorted({r["seq"]: r for r in rows}.values(), key=lambda r: r["seq"]):
        spent += float(row["eval_s"] or 0.0)
        if not curve or row["global_best"] > curve[-1][1] + 1e-12:
            curve.append((spent, float(row["global_best"])))
    return curve


def _median_eval_s(run_dir: Path) -> float:
    from kernelswarm.experiments.sinks import read_evaluations

    times = [t for t in read_evaluations(run_dir).column("eval_s").to_pylist() if t]
    return statistics.median(times) if times else 0.0


def one_run(variant: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console

    from kernelswarm.experiments.config import load_config
    from kernelswarm.experiments.run.execute import run as run_search

    name = variant.replace("+", "-").replace("=", "")
    overrides = [f"run.seed={seed}", f"run.out_dir={json.dumps(str(args.out))}",
                 f'run.name="{name}-s{seed}"', "tracking.mlflow=false", *VARIANTS[variant],
                 *args.set]
    config = load_config(None, overrides)
    began = time.time()
    outcome = run_search(config, Console(stderr=True, quiet=True))
    summary = outcome.result.summary
    population = dict(summary.population)
    return {"variant": variant, "seed": seed, "run_dir": str(outcome.run_dir),
            "wall_s": time.time() - began, "records": summary.records,
            "final": summary.best[1].speedup if summary.best is not None else 0.0,
            "curve": worker_curve(outcome.run_dir), "kept": population.get("kept", 0),
            "kept_families": population.get("kept_families", 0),
            "rejected": summary.rejected, "median_eval_s": _median_eval_s(outcome.run_dir),
            "population": population}


def _spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}-{max(values):.{digits}f}]")


def _search_best(run: dict[str, Any]) -> float:
    return run["curve"][-1][1] if run["curve"] else 0.0


def table(runs: list[dict[str, Any]]) -> str:
    islands = [_search_best(r) for r in runs if r["variant"] == "islands"]
    target = statistics.median(islands) if islands else None
    lines = [f"{'variant':<20} {'runs':>4} {'final best':>18} {'search best':>18} "
             f"{'worker s to islands best':>25} {'kept/families':>13} {'rejected':>8} "
             f"{'saved s':>7}"]
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        reach = [next((s for s, best in r["curve"] if best >= target - 1e-9), None)
                 for r in mine] if target is not None else []
        reached = [s for s in reach if s is not None]
        reach_text = (_spread(reached, 1) + f" {len(reached)}/{len(mine)}") if reached \
            else f"- 0/{len(mine)}"
        kept = statistics.median(r["kept"] for r in mine)
        families = statistics.median(r["kept_families"] for r in mine)
        rejected = sum(r["rejected"] for r in mine)
        saved = sum(r["rejected"] * r["median_eval_s"] for r in mine)
        lines.append(f"{variant:<20} {len(mine):>4} {_spread([r['final'] for r in mine]):>18} "
                     f"{_spread([_search_best(r) for r in mine]):>18} {reach_text:>25} "
                     f"{f'{kept:g}/{families:g}':>13} {rejected:>8} {saved:>7.1f}")
    lines.append("median [min-max] over the seeds; kept/families: medians")
    if target is not None:
        lines.append(f"islands' search best (the median of its runs): {target:.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())["runs"]))
        return 0
    runs: list[dict[str, Any]] = []
    command = "python -m benchmarks.strategies " + " ".join(
        shlex.quote(a) for a in args.argv)
    for seed in args.seeds:
        for variant in args.variants:
            run = one_run(variant, seed, args)
            runs.append(run)
            print(f"{variant} seed {seed}: final {run['final']:.3f}x, {run['records']} records, "
                  f"{run['rejected']} rejected, {run['wall_s']:.0f} s", file=sys.stderr,
                  flush=True)
            if args.json is not None:  # after every run: a stopped comparison keeps its runs
                args.json.write_text(json.dumps({"command": command, "runs": runs}, indent=2))
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
