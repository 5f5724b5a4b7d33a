"""Why an episode went the way it did, in the game's words: the end screen's causes.

A reward term ("job value") says where the return went, not what the seat did to lose it. The
causes are counted tick by tick from each played tick's report (:attr:`ArenaEnv.last_tick`):

* ``starved_ticks``: ticks on which a team was starved (a ready job could not run on its grant;
  for a team's seat, ticks on which *it* was);
* ``ungranted_gpu_ticks``: GPUs online or bought that no team was granted, summed over ticks
  (capacity the allocator left unused; a tier no job fits counts too);
* ``missed_jobs``: jobs that passed their deadline unfinished (a team's seat: its own).

:class:`CauseCounter` is a wrapper, so the person's episode and each reference's episode on the
same seed are counted by the one rule (``serving.seat_references``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pettingzoo.utils.wrappers import BaseParallelWrapper

from commons_arena.view import TickReport

CAUSES = ("starved_ticks", "ungranted_gpu_ticks", "missed_jobs")
PREFIX = "cause/"  # beside a reference's ``return`` and ``term/...`` keys


def tick_causes(report: TickReport, online_before: Sequence[int], tiers: Sequence[str],
                team: int | None) -> dict[str, int]:
    """One tick's causes. ``online_before``: GPUs online per tier when the tick began (an incident firing in
    the tick takes its GPUs offline before the grant: those are not "left ungranted"); ``team``: the seat's
    team index, None to count every team (the allocator's and the broker's view)."""
    online = list(online_before)
    for event in report.events:
        if "tier" in event:
            k = tiers.index(event["tier"])
            online[k] = max(online[k] - int(event["gpus_offline"]), 0)
    available = sum(online) + int(report.bought.sum())
    teams = report.teams if team is None else [report.teams[team]]
    return {"starved_ticks": int(any(t.starved for t in teams)),
            "ungranted_gpu_ticks": max(available - report.granted_total, 0),
            "missed_jobs": sum(t.missed for t in teams)}


class CauseCounter(BaseParallelWrapper):
    """Counts :data:`CAUSES` over the episode for ``seat`` (:attr:`counts`, reset with the env)."""

    def __init__(self, env: Any, seat: str) -> None:
        super().__init__(env)
        config = self.unwrapped.config
        self._tiers = config.tier_names
        self._team = config.team_names.index(seat) if seat in config.team_names else None
        self.counts = dict.fromkeys(CAUSES, 0)

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        self.counts = dict.fromkeys(CAUSES, 0)
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> Any:
        arena = self.unwrapped
        online = arena.hidden_state().online.tolist()
        out = self.env.step(actions)
        for key, value in tick_causes(arena.last_tick, online, self._tiers, self._team).items():
            self.counts[key] += value
        return out


def cause_lines(role: str, counts: dict[str, float], references: dict[str, dict[str, float]]) -> list[str]:
    """The causes as sentences, each reference's count beside the seat's (``references``: name -> counts)."""
    if role == "broker":  # starvation and grants are not the broker's doing
        return []

    def beside(key: str) -> str:
        return "; " + ", ".join(f"{name} {int(c.get(key, 0))}" for name, c in references.items()) if references else ""

    whose = "you were" if role == "team" else "teams were"
    lines = [f"{whose} starved on {int(counts['starved_ticks'])} tick(s) (a ready job could not run on the grant)"
             + beside("starved_ticks"),
             f"{int(counts['missed_jobs'])} job(s) missed their deadline" + beside("missed_jobs")]
    if role == "allocator":
        lines.insert(1, f"{int(counts['ungranted_gpu_ticks'])} GPU-tick(s) left ungranted (online or bought, "
                        "granted to no team)" + beside("ungranted_gpu_ticks"))
    return lines


__all__ = ["CAUSES", "PREFIX", "CauseCounter", "cause_lines", "tick_causes"]
