"""What agents are never told: the task's held-out shapes, their values and their errors.

Held-out shapes are checked on every candidate but never tuned on; an agent that learned them
(from a repair prompt, the history, an analysis) could specialise a kernel to them, and the check
would prove nothing. ``Withheld.screen`` is the one place an evaluation is cut down to what agents
may see; the lineage applies it to every evaluation before its roles read it. The full evaluation
is still what the tracker records and a person reads.

A held-out failure is recognised from the evaluation's data, not from its wording: a shape result
whose label is a held-out shape's, or a message naming a held-out shape (its label, or every one
of its sizes as ``key=value`` in any order and spacing), or a failed evaluation whose message
mentions a held-out check. The agents are told that a held-out check failed and the class of the
shape ("d not a multiple of 8 and above every tuning shape's; tokens not a power of two"),
derived by comparing it with the tuning shapes, never its values.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .evaluation import Evaluation, Status

_HELDOUT_WORDS = re.compile(r"held[- ]?out", re.I)


def _pairs(shape: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted((key, shape[key]) for key in shape)


def _label(shape: Mapping[str, Any]) -> str:
    """As ``Shape.label`` and the evaluator's shape results write it."""
    return ",".join(f"{k}={v}" for k, v in _pairs(shape))


def _sizes(shape: Mapping[str, Any]) -> dict[str, int]:
    return {k: v for k, v in _pairs(shape) if isinstance(v, int) and not isinstance(v, bool)}


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class Withheld:
    """The held-out shapes of a task, and its tuning shapes to describe them against."""

    heldout: tuple[Mapping[str, Any], ...]
    tuning: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, task: Any) -> Withheld:
        """From a ``Task`` (its ``heldout_shapes`` and ``tuning_shapes``)."""
        return cls(tuple(task.heldout_shapes), tuple(task.tuning_shapes))

    @property
    def labels(self) -> frozenset[str]:
        return frozenset(_label(s) for s in self.heldout)

    def classify(self, shape: Mapping[str, Any]) -> str:
        """What sets a held-out shape apart from the tuning shapes, without its values, e.g.
        "d not a multiple of 8 and above every tuning shape's; tokens not a power of two"."""
        parts = []
        for key, value in sorted(_sizes(shape).items()):
            tuned = [s[key] for s in self.tuning if isinstance(s.get(key), int)]
            if not tuned:
                continue
            traits = []
            if value % 8 and all(t % 8 == 0 for t in tuned):
                traits.append("not a multiple of 8")
            elif not _power_of_two(value) and all(_power_of_two(t) for t in tuned):
                traits.append("not a power of two")
            if value > max(tuned):
                traits.append("above every tuning shape's")
            elif value < min(tuned):
                traits.append("below every tuning shape's")
            if traits:
                parts.append(f"{key} {' and '.join(traits)}")
        dtypes = {s.get("dtype") for s in self.tuning}
        if "dtype" in shape and shape["dtype"] not in dtypes:
            parts.append("a dtype no tuning shape has")
        return "; ".join(parts) if parts else "sizes unlike the tuning shapes'"

    def _named(self, text: str) -> Mapping[str, Any] | None:
        """The held-out shape ``text`` names, by label or by all of its sizes; else None."""
        for shape in self.heldout:
            sizes = _sizes(shape)
            if _label(shape) in text or (sizes and all(
                    re.search(rf"\b{re.escape(k)}\s*[=:]\s*{v}\b", text) for k, v in sizes.items())):
                return shape
        return None

    def screen(self, evaluation: Evaluation) -> Evaluation:
        """``evaluation`` as agents may see it: no held-out shape results; a held-out failure's
        message replaced by the fact that a held-out check failed, and the shape's class."""
        labels = self.labels
        if not labels:
            return evaluation
        shapes = tuple(s for s in evaluation.shapes if s.shape not in labels)
        failed = next((s for s in evaluation.shapes if s.shape in labels and not s.correct), None)
        shape = next((h for h in self.heldout
                      if failed is not None and _label(h) == failed.shape), None) \
            or self._named(evaluation.message)
        mentions = not evaluation.ok and _HELDOUT_WORDS.search(evaluation.message) is not None
        if failed is None and shape is None and not mentions:
            return dataclasses.replace(evaluation, shapes=shapes) \
                if len(shapes) != len(evaluation.shapes) else evaluation
        what = f" on a shape with {self.classify(shape)}" if shape is not None else ""
        if evaluation.ok:  # an OK verdict that names a held-out shape: only the name goes
            return dataclasses.replace(evaluation, shapes=shapes,
                                       message=self._redact(evaluation.message))
        return dataclasses.replace(
            evaluation, shapes=shapes, metrics={},
            message=f"{_verdict(evaluation.status)} a held-out check{what}. Held-out shapes are "
                    f"never shown: their sizes and errors are withheld so that a kernel is made "
                    f"right for any size, not for them.")

    def _redact(self, text: str) -> str:
        for label in self.labels:
            text = text.replace(label, "a held-out shape")
        return text


def _verdict(status: Status) -> str:
    return {Status.INCORRECT: "Wrong results on", Status.RUNTIME_ERROR: "A crash on",
            Status.TIMEOUT: "A time-out on", Status.REJECTED: "Rejected on"}.get(
        status, f"{status.value} on")


def screen_all(withheld: Withheld | None,
               pairs: Iterable[tuple[Any, Evaluation]]) -> tuple[tuple[Any, Evaluation], ...]:
    """``(candidate, evaluation)`` pairs with each evaluation screened (unchanged without
    ``withheld``)."""
    if withheld is None:
        return tuple(pairs)
    return tuple((c, withheld.screen(e)) for c, e in pairs)
