"""The adversarial cases: one kernel file each, and the verdicts a sound evaluator may give it.

A case names its kernel (``kernels/<language>/<name>.<ext>``), the statuses it may be judged with
and why. Kernels that need to reach something outside the sandbox get it through placeholders
that ``render`` fills in per test: ``@PORT@`` (a loopback port the test listens on), ``@OUTSIDE@``
(an empty folder outside the sandbox), ``@SECRET@`` (a file outside the sandbox) and ``@MARKER@``
(a word the kernel puts into the command line, environment or name of anything it starts, so
that the test can find what was left running).

``ok_below``: where a cheat can only be neutralised rather than detected (a memo that never hits
once timed inputs differ, a timer patch in a process whose clock nobody reads), OK is accepted
only with a speedup below this figure. Such a kernel does its honest work four times over, so an
OK at its true cost is far below 1, and any gain from the cheat shows above it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from kernelswarm.search import Status

KERNELS = Path(__file__).parent / "kernels"
SUFFIX = {"cpp": "cpp", "triton": "py", "cuda": "cu"}

OK = frozenset({Status.OK})
INCORRECT = frozenset({Status.INCORRECT})
REJECTED = frozenset({Status.REJECTED})
# A cheat whose wrong output either reaches an honest comparison or is refused beforehand.
WRONG_OR_REFUSED = frozenset({Status.INCORRECT, Status.REJECTED})
# An escape that is refused beforehand, or denied at run time: the kernel then fails loudly.
DENIED = frozenset({Status.REJECTED, Status.RUNTIME_ERROR})
# A forged result frame: ignored (the kernel's zeros are then INCORRECT), refused, or seen as
# garbage on the channel (the run then counts as a crash).
FORGERY = frozenset({Status.INCORRECT, Status.REJECTED, Status.RUNTIME_ERROR})
# Honest work four times over: an OK below this speedup means the cheat gained nothing.
HONEST_COST_CEILING = 0.6
# The starting kernel's own work plus a check: an OK at or above this speedup over the start is
# a gain (the start against itself reads 1.00x within a few per cent on a GPU).
NO_GAIN = 1.1


@dataclass(frozen=True)
class Case:
    """One adversarial kernel and the verdicts it may get."""

    name: str
    language: str
    expect: frozenset[Status]
    why: str
    phrase: dict[Status, str] = field(default_factory=dict)  # must appear in that verdict's message
    ok_below: float | None = None
    min_speedup: float | None = None  # honest controls that must also be measured faster
    source: Path | None = None  # a kernel kept elsewhere (a task's starting kernel)

    @property
    def path(self) -> Path:
        return self.source or KERNELS / self.language / f"{self.name}.{SUFFIX[self.language]}"

    @property
    def marker(self) -> str:
        """A short word unique to the case (it fits a process name's 15 characters)."""
        return "ksa" + hashlib.sha1(f"{self.language}/{self.name}".encode()).hexdigest()[:10]

    def render(self, port: int, outside: Path, secret: Path) -> str:
        return (self.path.read_text().replace("@PORT@", str(port))
                .replace("@OUTSIDE@", str(outside)).replace("@SECRET@", str(secret))
                .replace("@MARKER@", self.marker))

    def __str__(self) -> str:
        return self.name
