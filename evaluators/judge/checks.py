"""Correctness, judged: the judge's inputs in, the runner's outputs back, compared here.

One check of a kernel on (shape, seed) is three calls in the runner on the same buffers:

1. the inputs, outputs poisoned with NaN: compared with the judge's reference (INCORRECT), and
   the inputs as they came back compared bit for bit with those sent (REJECTED);
2. the same inputs again, outputs poisoned with -Inf: bit-identical to the first call
   (non-deterministic otherwise, which also catches an element written only sometimes);
3. the same buffers refilled with other values (``REFILL_SEED``): the new answer (a kernel that
   caches results by pointer, shape or sampled values is "stale").

Held-out shapes and the extra checks are checked the same way, never timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...search import Shape, ShapeResult, Status
from ..correctness import Comparison, compare, first_bit_difference, structure_problem
from ..measure.shared_memory import BaseArena, describe
from ..protocol import FIRST_POISON, REFILL_SEED, SECOND_POISON, TensorSpec, layout
from .references import References, release_device_memory
from .trial import CandidateFault, Trial


@dataclass
class ShapeErrors:
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0

    def add(self, comparison: Comparison) -> None:
        self.max_abs_err = max(self.max_abs_err, comparison.max_abs_err)
        self.max_rel_err = max(self.max_rel_err, comparison.max_rel_err)


@dataclass(frozen=True)
class CheckKind:
    """A kind of checked shape: its name in a verdict (``label``) and in where the runner was
    when it failed (``phase``)."""

    label: str
    phase: str


TUNING = CheckKind("shape", "correctness")
HELD_OUT = CheckKind("held-out shape", "held-out")
EXTRA = CheckKind("extra check", "extra")


@dataclass(frozen=True)
class Checked:
    """The shapes one ``check_shapes`` passed: their largest errors by label, and their results
    (a verdict's shapes)."""

    errors: dict[str, ShapeErrors]
    passed: list[ShapeResult]


@dataclass(frozen=True)
class _Check:
    """One check of a kernel on (shape, seed): what its three calls share. ``where`` names the
    shape, ``place`` the shape and the seed."""

    kernel: str
    shape: Shape
    specs: tuple[list[TensorSpec], list[TensorSpec]]
    where: str
    place: str


@dataclass(frozen=True)
class _Call:
    """How one of a check's calls is made: whether the inputs are written to the arena first
    (the second call reuses those of the first), the outputs' poison, whether the runner makes
    new buffers (``fresh``) rather than reuse the last call's, and what a verdict adds to the
    check's place."""

    load: bool
    poison: str
    fresh: bool
    suffix: str


_FIRST = _Call(True, FIRST_POISON, True, "")
_AGAIN = _Call(False, SECOND_POISON, False, " (second call)")
_REFILLED = _Call(True, FIRST_POISON, False, " (refilled inputs)")


def _hint(task: Any) -> str:
    """The task's ``WRONG_RESULT_HINT`` (optional in task.py), as the message's last clause."""
    hint = getattr(getattr(task, "module", None), "WRONG_RESULT_HINT", "")
    return f"; {hint}" if isinstance(hint, str) and hint else ""


class Checker:
    """Drives one kernel's checked calls in a trial and judges what comes back."""

    def __init__(self, trial: Trial, arena: BaseArena, references: References, task: Any) -> None:
        self.trial = trial
        self.arena = arena
        self.references = references
        self.task = task

    def _call(self, check: _Check, call: _Call, sent: tuple) -> tuple:
        """One call on the inputs ``sent`` (written to the arena where ``call.load``); its
        outputs (a copy on the judge's device), once the inputs as they came back have been
        found bit-identical to ``sent`` (REJECTED otherwise). The inputs read back are dropped
        here: on a problem of several GB each copy held counts."""
        shape = check.shape
        in_specs, out_specs = check.specs
        if call.load:
            for spec, tensor in zip(in_specs, sent, strict=True):
                self.arena.write(spec, tensor)
        # the runner allocates its outputs now: room for them on a large problem
        release_device_memory(self.references.device,
                              sum(spec.nbytes for spec in (*in_specs, *out_specs)))
        reply = self.trial.ask({"type": "call", "kernel": check.kernel, "shape": dict(shape),
                                "inputs": [s.as_json() for s in in_specs],
                                "outputs": [s.as_json() for s in out_specs],
                                "poison": call.poison, "fresh": call.fresh, "load": call.load},
                               "called")
        self.trial.call_problem(reply, check.where, shape.label)
        device = self.references.device
        outputs = tuple(self.arena.read(s, device) for s in out_specs)
        changed = first_bit_difference(sent, tuple(self.arena.read(s, device) for s in in_specs))
        if changed is not None:
            raise CandidateFault(Status.REJECTED,
                                 f"the kernel modified its {changed.where('input')} "
                                 f"{check.place}{call.suffix}: "
                                 f"inputs are read-only (write only into the outputs)",
                                 [ShapeResult(shape=shape.label)])
        return outputs

    def check_once(self, kernel: str, shape: Shape, seed: int, where: str,
                   scale: float = 1.0) -> Comparison:
        """The three calls of one check; raises ``CandidateFault`` with the verdict. What is
        no longer needed is dropped as it goes (``del``): the cache may not hold the problem."""
        inputs, reference = self.references.get(shape, seed, scale)
        problem = structure_problem(self.references.outputs_template(shape), reference)
        if problem:
            raise CandidateFault(Status.INCORRECT, f"{where}, seed {seed}: {problem}",
                                 [ShapeResult(shape=shape.label)])
        in_specs, end = layout(describe(inputs))
        out_specs, _ = layout(describe(reference), end)
        place = f"{where}, seed {seed}"
        check = _Check(kernel, shape, (in_specs, out_specs), where, place)
        outputs = self._call(check, _FIRST, inputs)
        comparison = compare(outputs, reference, self.task.tolerance)
        del reference
        if comparison.mismatch is not None:
            raise CandidateFault(
                Status.INCORRECT,
                f"wrong result {place}: {comparison.mismatch.describe()}; max abs err "
                f"{comparison.max_abs_err:.3g}, max rel err {comparison.max_rel_err:.3g}"
                + _hint(self.task),
                [ShapeResult(shape=shape.label, max_abs_err=comparison.max_abs_err,
                             max_rel_err=comparison.max_rel_err)])
        again = self._call(check, _AGAIN, inputs)
        differs = first_bit_difference(outputs, again)
        del outputs, again
        if differs is not None:
            raise CandidateFault(
                Status.INCORRECT,
                f"non-deterministic {place}: two calls on the same inputs differ at "
                f"{differs.where('output')} (outputs are poisoned differently before each "
                f"call, so an element written only sometimes shows here too)",
                [ShapeResult(shape=shape.label)])
        fresh, reference = self.references.get(shape, REFILL_SEED, scale)
        if first_bit_difference(inputs, fresh) is None:
            return comparison  # the task draws the same values for every seed
        del inputs
        self._check_refilled(check, fresh, reference)
        return comparison

    def _check_refilled(self, check: _Check, fresh: tuple, reference: tuple) -> None:
        """A third call on the same buffers refilled with new values must give the new answer."""
        outputs = self._call(check, _REFILLED, fresh)
        comparison = compare(outputs, reference, self.task.tolerance)
        if comparison.mismatch is not None:
            raise CandidateFault(
                Status.INCORRECT,
                f"stale result {check.place}: after the same input buffers were refilled with new "
                f"values, the kernel's output is wrong ({comparison.mismatch.describe()}) — a "
                f"kernel may not cache results between calls (by pointer, shape or sampled "
                f"values)", [ShapeResult(shape=check.shape.label)])

    def check_shapes(self, kernel: str, kind: CheckKind, shapes: Sequence[Shape],
                     seeds: Sequence[int], scales: Sequence[float] = ()) -> Checked:
        """Each of ``seeds`` on every shape (inputs scaled by ``scales``, one a shape, where
        given); a failure raises with the shapes passed in front of the failed one."""
        errors: dict[str, ShapeErrors] = {}
        done: list[ShapeResult] = []
        for index, shape in enumerate(shapes):
            scale = scales[index] if scales else 1.0
            where = f"on {kind.label} {shape.label}" + (f" with inputs scaled by {scale:g}"
                                                         if scale != 1.0 else "")
            self.trial.at(f"{where} ({kind.phase})", shape.label)
            errors[shape.label] = ShapeErrors()
            for seed in seeds:
                try:
                    errors[shape.label].add(self.check_once(kernel, shape, seed, where, scale))
                except CandidateFault as fault:
                    fault.shapes = (*done, *fault.shapes)
                    raise
            done.append(ShapeResult(shape=shape.label, correct=True,
                                    **asdict(errors[shape.label])))
        return Checked(errors, done)


def arena_bytes(references: References, shapes: Sequence[Shape], seeds: Sequence[int],
                timed: Sequence[tuple[Shape, int]]) -> int:
    """Bytes the arena needs: one check's inputs and outputs on any shape, and ``copies``
    returned copies (outputs and inputs) of each timed shape. Sizes come from
    ``References.described``: each problem is drawn once, never all kept at once."""
    size = 1
    for shape in shapes:
        for seed in seeds:
            inputs, outputs = references.described(shape, seed)
            _, end = layout([*inputs, *outputs])
            size = max(size, end)
    for shape, copies in timed:
        inputs, outputs = references.described(shape, 0)
        _, end = layout([*outputs, *inputs] * copies)
        size = max(size, end)
    return size
