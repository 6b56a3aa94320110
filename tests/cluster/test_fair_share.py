"""Sharing one pool of evaluation workers between the cells of a sweep (no Ray needed)."""

from __future__ import annotations

import pytest

from kernelswarm.cluster import FairShare, Share
from kernelswarm.cluster.fair_share import UnknownCell


def _served(share: FairShare, workers: int, rounds: int) -> list[str]:
    """Which cell each grant went to, ``workers`` at a time, every grant finishing in turn."""
    order, held = [], []
    for _ in range(rounds):
        while len(held) < workers and (turn := share.next()) is not None:
            held.append(turn[0])
            order.append(turn[1])
        if not held:
            break
        share.done(held.pop(0))
    return order


def test_a_cell_with_many_candidates_does_not_starve_a_small_one():
    share = FairShare()
    share.add(Share("big"))
    share.add(Share("small"))
    for i in range(6):  # the big cell queued all of its candidates first
        share.wait("big", f"big-{i}")
    share.wait("small", "small-0")
    share.wait("small", "small-1")
    order = _served(share, workers=1, rounds=20)
    assert order[:4] == ["big-0", "small-0", "big-1", "small-1"]
    assert order[4:] == ["big-2", "big-3", "big-4", "big-5"]  # no worker idles meanwhile


def test_a_cap_holds_a_cell_to_its_share_and_the_rest_goes_to_others():
    share = FairShare()
    share.add(Share("capped", max_workers=1))
    share.add(Share("open"))
    for i in range(4):
        share.wait("capped", f"c{i}")
        share.wait("open", f"o{i}")
    granted = [share.next() for _ in range(3)]  # three free workers
    assert [cell for cell, _ in granted] == ["capped", "open", "open"]
    assert share.holding("capped") == 1 and share.holding("open") == 2
    assert share.next()[0] == "open"  # a fourth worker: still not the capped cell
    share.done("capped")
    assert share.next() == ("capped", "c1")


def test_a_candidate_of_an_unknown_or_released_cell_is_refused_by_name():
    share = FairShare()
    share.add(Share("a"))
    share.wait("a", 1)
    assert share.remove("a") == [1]
    with pytest.raises(UnknownCell, match="no cell 'a'"):
        share.wait("a", 2)
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        share.add(Share("b", max_workers=0))


def test_the_cells_of_a_group_hold_its_cap_together_and_take_one_turn_per_round():
    # A search of two languages (two cells in one group) beside a search of one language.
    share = FairShare()
    share.add(Share("run/cpp", max_workers=2, group="run"))
    share.add(Share("run/triton", max_workers=2, group="run"))
    share.add(Share("other"))
    for i in range(4):
        share.wait("run/cpp", f"cpp-{i}")
        share.wait("run/triton", f"triton-{i}")
        share.wait("other", f"other-{i}")
    granted = [share.next() for _ in range(4)]  # four free workers
    # The group's turn alternates between its languages; it holds two workers at most.
    assert [t for _, t in granted] == ["cpp-0", "other-0", "triton-0", "other-1"]
    assert share.holding("run/cpp") + share.holding("run/triton") == 2
    assert share.next() == ("other", "other-2")
    share.done("run/cpp")
    assert share.next() == ("run/cpp", "cpp-1")
    assert share.next() == ("other", "other-3")
    # A released cell leaves its group's turns to the group's other cells.
    assert share.remove("run/cpp") == ["cpp-2", "cpp-3"]
    share.done("run/triton")
    assert share.next() == ("run/triton", "triton-1")
    with pytest.raises(ValueError, match="in group 'run'"):
        share.add(Share("run/triton", group="elsewhere"))
