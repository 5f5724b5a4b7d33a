"""What an allocator learned: does it discount a bluffer, or is it only more generous to everyone? (issue 30)

In one team seat, on the same seeds, a **truthful** team and a **bluffer** (``truthful`` with its
declarations inflated, ``--bluff``, the same stance: only the declaration differs) face the
allocator, every other seat the scenario's own population. Per episode (ticks >= 1, as
:func:`experiments.evaluation.traces.play_traced`), the seat's GPUs granted ``G``, declared ``D``
(what the allocator saw) and truly needed ``N`` are summed over tiers; per seed:

* **honoured** ``G / D``: how much of its declaration the team gets;
* **discount** ``1 - honoured(bluffer) / honoured(truthful)``: how much less of its declaration
  the bluffer gets than a truthful team with the same need (the same seed: the same jobs). 0: the
  allocator takes a declaration at face value (a bluff x3 gets ~3x the GPUs); ``1 - 1/inflation``
  (``discount_if_need_only``): it grants by need alone, the bluff buys nothing; above that it
  punishes the bluff;
* **generosity** ``G / N`` of the truthful team: how well it serves a truth-teller.

An allocator that only became *more generous to everyone* raises the truthful team's generosity
and leaves the discount where it was; one that learned to *discount* a bluffer raises the discount
(the bluffer's gain falls while the truth-teller's grants do not). Every figure is a mean over
seeds with its 95% Student-t CI. ``commons-arena exploit`` writes it per (tier, allocator, seat)
to ``discounting.md``; :func:`discounting_rows` measures any allocators, e.g. the arms race's A1
and A2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout
from experiments.evaluation.engine import Observer, Tick, play
from experiments.statistics import mean_ci95
from policies.base import Policy
from policies.population import Population
from policies.registry import make_policy

BLUFF = 3.0  # the bluffer's factor: the best scripted bluff (x3)


class SeatTotals(Observer):
    """Per episode, one seat's (granted, declared, needed) GPUs summed over tiers and ticks >= 1: what
    the allocator granted it, what it declared as the allocator saw it, and its true need."""

    def __init__(self, config: ScenarioConfig, seat: str) -> None:
        self.index = list(config.team_names).index(seat)
        self.seat = seat
        self.seen_by_allocator = observation_layout(config, ALLOCATOR)
        self.seen_by_team = observation_layout(config, seat)
        self.grant_of = action_layout(config, ALLOCATOR)
        self.totals: list[tuple[float, float, float]] = []

    def begin(self, seed: int) -> None:
        self.totals.append((0.0, 0.0, 0.0))

    def tick(self, tick: Tick) -> None:
        allocator = self.seen_by_allocator.view(np.asarray(tick.observations[ALLOCATOR]))
        team = self.seen_by_team.view(np.asarray(tick.observations[self.seat]))
        if team["tick"][0] >= 1:
            granted, declared, needed = self.totals[-1]
            self.totals[-1] = (granted + float(self.grant_of.view(np.asarray(tick.actions[ALLOCATOR]))["grant"][self.index].sum()),
                               declared + float(allocator["declared"][self.index].sum()),
                               needed + float(team["need"].sum()))


def seat_totals(env: Any, policies: Mapping[str, Policy], seat: str, seeds: Sequence[int]) -> list[tuple[float, float, float]]:
    """Per seed, the seat's (granted, declared, needed) GPUs (:class:`SeatTotals`), played by the engine."""
    totals = SeatTotals(env.config, seat)
    list(play(env, dict(policies), seeds, totals))
    return totals.totals


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("nan")


def discounting_row(scenario: str, allocator: str, seat: str, seeds: Sequence[int], bluff: float = BLUFF,
                    background: Population | None = None) -> dict[str, Any]:
    """The module docstring's figures for one (scenario, allocator, seat)."""
    env = commons_arena.parallel_env(scenario)
    population = (background or Population.default(env.config)).with_agent(ALLOCATOR, allocator)
    policies = dict(population.build(env.config, env=env, strict=False))
    players = {"truthful": make_policy("truthful", env.config, seat),
               "bluffer": make_policy("truthful", env.config, seat, bluff=bluff)}
    totals = {name: seat_totals(env, {**policies, seat: policy}, seat, seeds) for name, policy in players.items()}
    honest, bluffer = totals["truthful"], totals["bluffer"]
    discount = [1 - ratio(ratio(b[0], b[1]), ratio(t[0], t[1])) for t, b in zip(honest, bluffer, strict=True)]
    inflation = [ratio(ratio(b[1], b[2]), ratio(t[1], t[2])) for t, b in zip(honest, bluffer, strict=True)]
    row: dict[str, Any] = {"scenario": env.config.name, "allocator": allocator, "seat": seat, "bluff": bluff,
                           "seeds": len(seeds)}
    for key, values in (("discount", discount),
                        ("generosity", [ratio(t[0], t[2]) for t in honest]),
                        ("bluffer_generosity", [ratio(b[0], b[2]) for b in bluffer]),
                        ("honoured_truthful", [ratio(t[0], t[1]) for t in honest]),
                        ("honoured_bluffer", [ratio(b[0], b[1]) for b in bluffer]),
                        ("inflation", inflation)):
        mean, ci = mean_ci95(values)
        row[key], row[f"{key}_ci95"] = mean, ci
    row["discount_if_need_only"] = 1 - 1 / row["inflation"] if row["inflation"] > 0 else float("nan")
    row["per_seed"] = {"seeds": [int(s) for s in seeds], "discount": discount,
                       "generosity": [ratio(t[0], t[2]) for t in honest]}
    return row


def what_it_learned(learned: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, Any]:
    """``learned``'s discount and generosity minus ``reference``'s in the same seat, paired by seed
    (95% CI), and the verdict: it *discounts a bluffer* (discount up, CI above 0), is only *more
    generous to everyone* (generosity up, discount not), or *neither shows*."""
    mine, theirs = learned["per_seed"], reference["per_seed"]
    if mine["seeds"] != theirs["seeds"]:
        raise ValueError("what_it_learned: both rows must play the same seeds")
    discount, discount_ci = mean_ci95(np.subtract(mine["discount"], theirs["discount"]).tolist())
    generosity, generosity_ci = mean_ci95(np.subtract(mine["generosity"], theirs["generosity"]).tolist())
    if discount - discount_ci > 0:
        verdict = "discounts a bluffer"
    elif generosity - generosity_ci > 0:
        verdict = "more generous to everyone"
    else:
        verdict = "neither shows"
    return {"seat": learned["seat"], "allocator": learned["allocator"], "vs": reference["allocator"],
            "discount_minus": discount, "discount_minus_ci95": discount_ci, "generosity_minus": generosity,
            "generosity_minus_ci95": generosity_ci, "verdict": verdict}


def seat_verdicts(scenario: str, allocators: Mapping[str, str], reference: str, seats: Sequence[str],
                  seeds: Sequence[int], background: Population | None = None
                  ) -> tuple[dict[str, dict[str, dict[str, Any]]], list[dict[str, Any]]]:
    """:func:`discounting_row` of every named allocator (name -> policy) in every seat, and
    :func:`what_it_learned` of each but ``reference`` against ``reference`` per seat: (name -> seat -> row,
    verdicts)."""
    measured = {name: {seat: {**discounting_row(scenario, policy, seat, seeds, background=background), "allocator": name}
                       for seat in seats} for name, policy in allocators.items()}
    verdicts = [what_it_learned(measured[name][seat], measured[reference][seat])
                for name in allocators if name != reference for seat in seats]
    return measured, verdicts


def discounting_rows(scenarios: Sequence[str], allocators: Sequence[str], seats: Mapping[str, Sequence[str]],
                     seeds: Sequence[int], bluff: float = BLUFF) -> list[dict[str, Any]]:
    """:func:`discounting_row` per (scenario, allocator, team seat); ``seats``: scenario -> its team seats."""
    return [discounting_row(scenario, allocator, seat, seeds, bluff)
            for scenario in scenarios for allocator in allocators for seat in seats[scenario]]


COLUMNS = ("scenario", "allocator", "seat", "bluff", "discount", "discount_ci95", "discount_if_need_only",
           "generosity", "generosity_ci95", "bluffer_generosity", "bluffer_generosity_ci95", "honoured_truthful",
           "honoured_bluffer", "inflation", "seeds")

PREAMBLE = ("# What the allocator learned: discounting a bluffer, or generosity to everyone\n\n"
            "Per seat, a truthful team and a bluffer (`truthful` declaring x{bluff:g} its need, same stance) on the "
            "same seeds. **discount** = 1 - (granted/declared of the bluffer) / (granted/declared of the truthful "
            "team): 0 takes declarations at face value, `discount_if_need_only` grants by need alone; "
            "**generosity** = granted / true need of the truthful team. An allocator more generous to everyone "
            "raises generosity at the same discount; one that discounts bluffers raises the discount "
            "(experiments/evaluation/discounting.py). ± 95% CI over seeds.\n\n")


__all__ = ["BLUFF", "COLUMNS", "PREAMBLE", "discounting_row", "discounting_rows", "seat_totals", "seat_verdicts", "what_it_learned"]
