"""The contract of a named source transformation, the unit the built-in coder applies."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from kernelswarm.search import COMPUTE, STAGES

KnobSpace = Mapping[str, tuple[Any, ...]]


class Transformation(ABC):
    """A named, composable rewrite of kernel source in some kernel languages.

    Contract:
    - ``apply(source, knob_space)`` returns the new source and the new knob space, or None when
      the transformation does not apply: the pattern it needs is absent, or it is already
      applied (so applying twice gives None the second time).
    - It never raises because of the source: what it cannot read with confidence, it declines.
    - The result keeps the kernel's entry points, calling contract and meaning; it may assert
      facts the task's contract guarantees (outputs do not alias inputs). The evaluator is the
      judge of correctness; a transformation is written so that it should never be needed.
    - Pure and stateless: the same input gives the same output, in any thread. A transformation
      may depend on the host (CPU features) and says so in its description.
    - Knobs it adds are listed in ``adds_knobs``; at their first value the kernel compiles as it
      did before the rewrite. ``initial_knobs`` are the values the rewritten kernel is first
      evaluated at: a setting that exercises the rewrite, since at the first values the
      evaluation would only measure noise around the parent, and a lineage keeps a child only
      when it is faster (the knobs would never reach the tuner).
    - ``stage`` is the stage of optimisation it serves (``search.STAGES``): ``"memory"`` for
      rewrites that cut or widen memory traffic and give the memory system more parallel work,
      ``"compute"`` for those that make the arithmetic cheaper; the planner orders by it.
    """

    name: ClassVar[str]
    languages: ClassVar[tuple[str, ...]]
    description: ClassVar[str]  # one line, for people and for plan rationales
    stage: ClassVar[str] = COMPUTE  # one of search.STAGES
    adds_knobs: ClassVar[tuple[str, ...]] = ()
    initial_knobs: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    @abstractmethod
    def apply(self, source: str,
              knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stage not in STAGES:
            raise ValueError(f"{cls.__name__}.stage is {cls.stage!r}; expected one of {STAGES}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} for {', '.join(self.languages)}>"
