"""Starvation reveal, escalation and credibility (SPEC §5.8–5.9, §7 audits).

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

import numpy as np


def update_starvation(streak: np.ndarray, starved: np.ndarray, revealed: np.ndarray, reveal_after: int) -> None:
    """Advance the consecutive-starvation counters and reveal flags, in place."""
    streak[:] = np.where(starved, streak + 1, 0)
    revealed |= streak >= reveal_after


def judge_escalations(escalating: np.ndarray, starved_last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(justified, unjustified) boolean masks over teams."""
    return escalating & starved_last, escalating & ~starved_last


def exposed_bluffs(declared: np.ndarray, need: np.ndarray, tolerance: float) -> np.ndarray:
    """Boolean mask over teams: declared total exceeds true need beyond the tolerance."""
    return declared.sum(axis=1) > need.sum(axis=1) * (1.0 + tolerance) + 1e-9


def lose_credibility(credibility: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Apply losses in place (floored at 0); return what was actually lost."""
    before = credibility.copy()
    np.maximum(credibility - loss, 0.0, out=credibility)
    return before - credibility
