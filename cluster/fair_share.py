"""Which waiting search gets the next free evaluation worker, when several share one pool.

A pool's workers serve several *cells* (the searches of a sweep, or a study and nothing else).
Each cell queues its candidates in order; a free worker goes to the next cell in turn that has a
candidate waiting and holds fewer workers than its cap (cells of one group, a search's
languages, take turns and hold the cap together). Turns rotate, so a cell with many
lineages (and so many waiting candidates) gets one worker per round like any other cell, and
cannot starve a small one; a worker never idles while some cell under its cap has work.

No Ray here: ``EvalDispatcher`` (eval_worker.py) drives it on its event loop, one call at a time.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass


class UnknownCell(KeyError):
    """A candidate for a cell the pool was never told of (or that was released)."""


@dataclass(frozen=True)
class Share:
    """A cell's place in the pool: its cap (None: as many workers as are free), and the group
    it shares that cap and its turns with (None: a group of its own).

    A search of several kernel languages opens one cell per language (each judged by its own
    evaluator) in one group: together they hold at most the cap, and get one turn per round
    like a search of one language.
    """

    cell: str
    max_workers: int | None = None
    group: str | None = None

    @property
    def key(self) -> str:
        return self.group or self.cell


class FairShare:
    """Round-robin between groups of cells' waiting queues, each group held under its cap.

    Not thread-safe: one caller (the dispatcher's event loop) at a time.
    """

    def __init__(self) -> None:
        self._shares: dict[str, Share] = {}
        self._waiting: dict[str, deque[Hashable]] = {}
        self._holding: Counter[str] = Counter()  # per cell
        self._group_holding: Counter[str] = Counter()
        self._caps: dict[str, int | None] = {}  # per group
        self._members: dict[str, deque[str]] = {}  # per group: its cells, next served first
        self._turns: deque[str] = deque()  # groups in the order they are next served
        self._group_of: dict[str, str] = {}

    def add(self, share: Share) -> None:
        """Admit a cell (again: its cap is updated, its queue kept). A group's cap is that of
        the cell admitted last."""
        if share.max_workers is not None and share.max_workers < 1:
            raise ValueError(f"cell {share.cell!r}: max_workers must be >= 1 or None, "
                             f"got {share.max_workers}")
        old = self._shares.get(share.cell)
        if old is not None and old.key != share.key:
            raise ValueError(f"cell {share.cell!r} is in group {old.key!r}, not {share.key!r}")
        if old is None:
            self._waiting[share.cell] = deque()
            if share.key not in self._members:
                self._members[share.key] = deque()
                self._turns.append(share.key)
            self._members[share.key].append(share.cell)
        self._shares[share.cell] = share
        self._group_of[share.cell] = share.key
        self._caps[share.key] = share.max_workers

    def remove(self, cell: str) -> list[Hashable]:
        """Forget a cell; the tickets still waiting in it are returned (to be refused)."""
        share = self._shares.pop(cell, None)
        if share is not None:
            members = self._members[share.key]
            members.remove(cell)
            if not members:
                del self._members[share.key], self._caps[share.key]
                self._turns.remove(share.key)
        return list(self._waiting.pop(cell, ()))

    def __contains__(self, cell: str) -> bool:
        return cell in self._shares

    def wait(self, cell: str, ticket: Hashable) -> None:
        """Queue ``ticket`` (one candidate's request for a worker) behind the cell's others."""
        if cell not in self._shares:
            raise UnknownCell(f"no cell {cell!r} in this evaluation pool (known: "
                              f"{', '.join(sorted(self._shares)) or 'none'})")
        self._waiting[cell].append(ticket)

    def cancel(self, cell: str, ticket: Hashable) -> None:
        """Take back a ticket that no longer wants a worker (its caller went away)."""
        queue = self._waiting.get(cell)
        if queue is not None and ticket in queue:
            queue.remove(ticket)

    def next(self) -> tuple[str, Hashable] | None:
        """The cell whose turn it is and its oldest ticket, counted as holding one more worker;
        None when no group under its cap has one waiting."""
        for _ in range(len(self._turns)):
            group = self._turns[0]
            self._turns.rotate(-1)  # served or not, its turn is over
            cap = self._caps[group]
            if cap is not None and self._group_holding[group] >= cap:
                continue
            members = self._members[group]
            for _ in range(len(members)):
                cell = members[0]
                members.rotate(-1)
                if self._waiting[cell]:
                    self._holding[cell] += 1
                    self._group_holding[group] += 1
                    return cell, self._waiting[cell].popleft()
        return None

    def done(self, cell: str) -> None:
        """A worker the cell held is free again."""
        if self._holding[cell] > 0:
            self._holding[cell] -= 1
            group = self._group_of.get(cell, cell)  # known after the cell's release too
            if self._group_holding[group] > 0:
                self._group_holding[group] -= 1

    def holding(self, cell: str) -> int:
        return self._holding[cell]

    def waiting(self, cell: str) -> int:
        return len(self._waiting.get(cell, ()))
