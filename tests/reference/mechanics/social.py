"""Starvation reveal, escalation and credibility (docs/rules.md §5, rules 7–9).

* A team is **starved** in a tick when some ready job could not run on its grant.
* After ``reveal_after`` consecutive starved ticks its true need is shown to the
  allocator, and stays shown for the rest of the episode.
* An ``escalate`` stance at tick t is about the grant of tick t-1. It is **justified** if
  the team was starved at t-1: the allocator pays board pressure (the team's
  ``board_pressure``). Otherwise the team loses credibility. Stances at tick 0 (no grant
  yet) have no effect.
* An audit compares each team's declaration for this tick with its true need this tick;
  a declared total above ``need x (1 + tolerance)`` is an exposed bluff.
Credibility starts at 1 and never goes below 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def update_starvation(streak: np.ndarray, starved: Sequence[bool], revealed: np.ndarray, reveal_after: int) -> None:
    """Advance the consecutive-starvation counters and reveal flags, in place."""
    streak[:] = new_streak = [s + 1 if hungry else 0 for s, hungry in zip(streak.tolist(), starved, strict=True)]
    revealed[:] = [shown or s >= reveal_after for shown, s in zip(revealed.tolist(), new_streak, strict=True)]


def judge_escalations(escalating: Sequence[bool], starved_last: Sequence[bool]) -> tuple[list[bool], list[bool]]:
    """(justified, unjustified) flags per team."""
    justified = [bool(e and s) for e, s in zip(escalating, starved_last, strict=True)]
    unjustified = [bool(e and not s) for e, s in zip(escalating, starved_last, strict=True)]
    return justified, unjustified


def exposed_bluffs(declared: np.ndarray, need: np.ndarray, tolerance: float) -> np.ndarray:
    """Boolean mask over teams: declared total exceeds true need beyond the tolerance."""
    return declared.sum(axis=1) > need.sum(axis=1) * (1.0 + tolerance) + 1e-9


def lose_credibility(credibility: np.ndarray, loss: Sequence[float]) -> list[float]:
    """Apply losses in place (floored at 0); return what was actually lost, per team."""
    before = credibility.tolist()
    after = [max(c - lose, 0.0) for c, lose in zip(before, loss, strict=True)]
    credibility[:] = after
    return [b - a for b, a in zip(before, after, strict=True)]
