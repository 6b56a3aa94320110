"""Each language's best kernel in a run that searched several (``search.languages``).

The run's best is the fastest kernel overall, ranked by its speedup over the reference
language's starting kernel (search/archive_languages.py); this module states, per language,
the best kernel its lineages found, for ``summary.json``'s ``languages`` section and the closing
table's per-language lines. A language's figure is its confirmed one (the median of the repeats
after the search) where its best was judged again, else the search's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from kernelswarm.cluster import SwarmResult
from kernelswarm.search import Candidate, Evaluation

from ..sinks.sources import source_file_name
from .speedups import baseline_label, baseline_names, best_text, speedup_text


@dataclass(frozen=True)
class LanguageBest:
    """One language of a run: its lineages, how its starting kernel compares with the
    reference's, and the best kernel its lineages found (None when none beat nothing)."""

    language: str
    reference: bool  # the language every kernel's speedup_vs_reference is stated against
    lineages: tuple[int, ...]
    start_id: str
    scale: float  # its starting kernel's speedup over the reference's
    best: tuple[Candidate, Evaluation] | None
    confirmed: bool

    @property
    def speedup_vs_reference(self) -> float:
        return self.best[1].speedup * self.scale if self.best else 0.0

    def document(self, run_dir: Path) -> dict[str, Any]:
        """The ``summary.json`` entry; ``file`` is the kernel's source in ``candidates/``."""
        doc: dict[str, Any] = {"reference": self.reference, "lineages": list(self.lineages),
                               "start_candidate": self.start_id,
                               "start_speedup_vs_reference": self.scale, "best": None}
        if self.best is not None:
            candidate, evaluation = self.best
            path = run_dir / "candidates" / source_file_name(candidate)
            doc["best"] = {"candidate_id": candidate.id, "confirmed": self.confirmed,
                           "speedup_vs_start": evaluation.speedup,
                           "speedup_vs_reference": self.speedup_vs_reference,
                           "speedup_vs_best_baseline": evaluation.speedup_vs_best,
                           "file": str(path) if path.is_file() else None}
        return doc

    def line(self, overall: str | None) -> Text:
        """One closing-table line: the language's best, against its own start and the
        reference's; marked where it is the run's best overall."""
        head = f"{self.language}{' (reference)' if self.reference else ''}: "
        if self.best is None:
            return Text(head + "no kernel beyond its starting kernel", style="dim")
        candidate, evaluation = self.best
        text = (f"{head}best {candidate.id} {speedup_text(evaluation.speedup)} vs its start, "
                f"{speedup_text(self.speedup_vs_reference)} vs the reference start, "
                f"{best_text(evaluation)} {baseline_label(baseline_names(evaluation))}"
                f"{' (confirmed)' if self.confirmed else ' (unconfirmed)'}")
        won = candidate.id == overall
        return Text(text + (" ← best overall" if won else ""), style="bold" if won else "")


def language_bests(result: SwarmResult) -> list[LanguageBest]:
    """Per language searched, the reference first: its best kernel (see the module docstring)."""
    lineage_best = dict(result.summary.lineage_best)
    confirmation = result.confirmation
    out = []
    for index, (language, start) in enumerate(result.starts.items()):
        lineages = tuple(r.lineage for r in sorted(result.lineages, key=lambda r: r.lineage)
                         if result.language_of(r.lineage) == language)
        found = [lineage_best[i] for i in lineages if i in lineage_best]
        best = max(found, key=lambda m: m[1].speedup) if found else None
        chosen = confirmation.chosen_in(language) if confirmation is not None else None
        if chosen is not None:
            best = (chosen.candidate, chosen.median)
        out.append(LanguageBest(language, index == 0, lineages, start.candidate_id,
                                result.scales.scale(language), best, chosen is not None))
    return out


def languages_document(result: SwarmResult, run_dir: Path) -> dict[str, Any]:
    """``summary.json``'s ``languages`` section: each language's entry, by name."""
    return {b.language: b.document(run_dir) for b in language_bests(result)}


def language_lines(result: SwarmResult) -> list[Text]:
    """The closing table's per-language lines; none in a single-language run (the table says
    it all)."""
    if len(result.starts) < 2:
        return []
    overall = result.summary.best[0].id if result.summary.best is not None else None
    return [b.line(overall) for b in language_bests(result)]
