"""Scripted teams: the five board archetypes of docs/rules.md §9.

A team knows its own true need (its observation's ``need`` field: GPUs per tier that
would run every ready job this tick, each on its smallest fitting tier). Every archetype
follows the same two rules and differs only in two numbers:

* **declaration** (the request for next tick): ``ceil(need[k] x bluff)`` per tier ``k``,
  clipped to the action space. A team that needs nothing on a tier declares nothing there.
* **stance** on last tick's grant:

  - ``escalate`` when ``starved_streak >= escalate_after`` (the team has been starved
    that many ticks in a row; such an escalation is always justified, since a streak of
    at least 1 means the team was starved last tick);
  - else ``counter`` when last tick's grant fell short, on some tier, of the declaration
    it answered (the ``declared`` field seen one tick earlier);
  - else ``accept``.

=================  =====  ==============  ================================================
archetype          bluff  escalate_after  character
=================  =====  ==============  ================================================
``truthful``       1.00   2               declares its true need
``safety_first``   1.10   1               near-truthful (audits hurt), escalates at once
``reliability``    1.25   3               asks for headroom, patient, counters first
``growth``         1.50   2               overstates to grow its share
``greedy_bluffer`` 2.00   2               doubles its need; same temper as ``truthful``
=================  =====  ==============  ================================================

``greedy_bluffer`` and ``truthful`` share the escalation threshold on purpose: the
misreport gain (bluffer minus truthful, docs/rules.md §9) then measures bluffing alone.
Both numbers can be overridden per policy (``make_policy("growth", ..., bluff=1.3)``).
Teams are deterministic: they never draw random numbers. :class:`BatchTeam` is the one
definition, over N arenas; the per-arena team is a batch of one of it
(:class:`policies.batch.OneArena`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import Stance
from commons_arena.scenario import ARCHETYPES, ScenarioConfig
from policies.batch import BatchScripted, OneArena


@dataclass(frozen=True)
class Archetype:
    bluff: float  # declared = ceil(true need x bluff), per tier
    escalate_after: int  # escalate once starved this many ticks in a row
    doc: str


# How each archetype a scenario may name (``commons_arena.scenario.ARCHETYPES``) plays.
ARCHETYPE_PROFILES: dict[str, Archetype] = {
    "truthful": Archetype(1.0, 2, "declares its true need"),
    "safety_first": Archetype(1.10, 1, "near-truthful, escalates as soon as it is starved"),
    "reliability": Archetype(1.25, 3, "asks for headroom, patient: counters before escalating"),
    "growth": Archetype(1.50, 2, "overstates its need to grow its share"),
    "greedy_bluffer": Archetype(2.0, 2, "doubles its need"),
}
if set(ARCHETYPE_PROFILES) != set(ARCHETYPES):  # a scenario could name an archetype no policy plays
    raise RuntimeError(f"team profiles {sorted(ARCHETYPE_PROFILES)} differ from the archetypes {sorted(ARCHETYPES)}")


class BatchTeam(BatchScripted):
    """One archetype in ``num_envs`` arenas: see the module docstring for the rules. Its
    per-arena form is a batch of one (:func:`make_team_factory`)."""

    role = "team"

    def __init__(
        self,
        config: ScenarioConfig,
        agent: str,
        num_envs: int,
        archetype: str = "truthful",
        bluff: float | None = None,
        escalate_after: int | None = None,
    ) -> None:
        if archetype not in ARCHETYPE_PROFILES:
            raise ValueError(f"unknown archetype {archetype!r}; known: {sorted(ARCHETYPE_PROFILES)}")
        base = ARCHETYPE_PROFILES[archetype]
        self.name = archetype
        self.bluff = float(base.bluff if bluff is None else bluff)
        self.escalate_after = int(base.escalate_after if escalate_after is None else escalate_after)
        if self.bluff < 0 or not math.isfinite(self.bluff):
            raise ValueError(f"bluff must be a finite number >= 0, got {self.bluff}")
        if self.escalate_after < 1:
            raise ValueError(f"escalate_after must be >= 1, got {self.escalate_after}")
        T = len(config.gpu_tiers)
        self._answered = np.zeros((num_envs, T))  # the declaration last tick's grant answered
        self._has_answered = np.zeros(num_envs, dtype=bool)  # False: the first tick (nothing answered yet)
        super().__init__(config, agent, num_envs)
        sl = self.obs_layout.slices
        self._request_high = self.high[:T]
        self._sl_need, self._sl_grant, self._sl_declared = sl["need"], sl["last_grant"], sl["declared"]
        self._i_streak = sl["starved_streak"].start

    @property
    def params(self) -> dict[str, Any]:
        return {"bluff": self.bluff, "escalate_after": self.escalate_after}

    @property
    def arguments(self) -> dict[str, Any]:
        return {"archetype": self.name, **self.params}

    def clear(self, arenas: np.ndarray) -> None:
        self._has_answered[arenas] = False

    def decide(self, obs: np.ndarray) -> np.ndarray:
        T = self.n_tiers
        out = np.zeros((self.num_envs, T + 1), dtype=np.int64)
        out[:, :T] = declare(obs[:, self._sl_need], self.bluff, self._request_high)
        # the stance rule (stance() below), every row at once
        escalate = obs[:, self._i_streak] >= self.escalate_after
        counter = self._has_answered & np.any(obs[:, self._sl_grant] < self._answered, axis=1)
        out[:, T] = np.where(escalate, int(Stance.ESCALATE), np.where(counter, int(Stance.COUNTER), int(Stance.ACCEPT)))
        # this tick's `declared` is what next tick's `last_grant` will answer
        self._answered[:] = obs[:, self._sl_declared]
        self._has_answered[:] = True
        return out


def declare(need: np.ndarray, bluff: float | np.ndarray, high: np.ndarray) -> np.ndarray:
    """The declaration rule: ``ceil(need x bluff)`` per tier (``bluff`` one factor or one per
    tier), at most ``high``. The small tolerance keeps ``need x 1.0`` exactly ``need``."""
    return np.minimum(np.ceil(need * bluff - 1e-6), high).astype(np.int64)


def stance(
    streak: float, grant: np.ndarray, answered: np.ndarray | None, escalate_after: int | None, counter: bool = True
) -> Stance:
    """The stance rule: escalate once starved ``escalate_after`` ticks in a row (``0``: always,
    ``None``: never); else, with ``counter``, counter a grant short of the declaration it
    answered (``None`` at the first tick); else accept."""
    if escalate_after is not None and streak >= escalate_after:
        return Stance.ESCALATE
    if counter and answered is not None and bool(np.any(grant < answered)):
        return Stance.COUNTER
    return Stance.ACCEPT


def make_team_factory(archetype: str):
    """The per-arena constructor ``(config, agent, seed=None, **params)`` of one archetype (a batch
    of one of :class:`BatchTeam`), for the registry."""

    factory = OneArena.maker(BatchTeam, archetype=archetype)
    factory.__name__ = f"team_{archetype}"
    factory.__doc__ = f"Team archetype {archetype!r}: {ARCHETYPE_PROFILES[archetype].doc}."
    return factory
