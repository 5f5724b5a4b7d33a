"""Traced episodes: what one episode shows about bluffing, granting and pricing.

A :class:`Tracer` watches the engine's episodes (:func:`experiments.evaluation.engine.play`,
the one episode loop) and records, tick by tick, what each team declared against its true
need, what the allocator granted against declarations and revealed needs, and the
broker's price level against the demand it saw; :class:`SeatCodes` keeps the codes a
learned seat chose. The functions below reduce traces to the figures of
``commons-arena analyze`` (:mod:`experiments.studies.analysis`) and of training's
held-out evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commons_arena.arena import ArenaEnv
from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout
from experiments.evaluation.engine import Episode, Lineup, Observer, Tick, arena_for, play
from policies.base import uniform_random_policies
from policies.population import Population


@dataclass
class Trace:
    """What one episode shows about bluffing, granting and pricing."""

    returns: dict[str, float]
    declared: dict[str, float] = field(default_factory=dict)  # team -> GPUs declared (ticks >= 1)
    need: dict[str, float] = field(default_factory=dict)  # team -> true need over the same ticks
    on_declared: list[tuple[float, float]] = field(default_factory=list)  # (declared, granted), unrevealed
    on_revealed: list[tuple[float, float]] = field(default_factory=list)  # (revealed need, granted)
    prices: list[tuple[float, float]] = field(default_factory=list)  # (demand seen, mean price level)


class Tracer(Observer):
    """One :class:`Trace` per episode played (in :attr:`traces`), every seat as it played."""

    def __init__(self, config: ScenarioConfig) -> None:
        self.layouts = {seat: observation_layout(config, seat) for seat in config.agents}
        self.grant_of = action_layout(config, ALLOCATOR)
        self.price_of = action_layout(config, BROKER)
        self.teams = list(config.team_names)
        self.traces: list[Trace] = []

    def begin(self, seed: int) -> None:
        self.trace = Trace(returns={}, declared=dict.fromkeys(self.teams, 0.0), need=dict.fromkeys(self.teams, 0.0))

    def tick(self, tick: Tick) -> None:
        trace, teams = self.trace, self.teams
        observed = {seat: self.layouts[seat].view(obs) for seat, obs in tick.observations.items()}
        if observed[teams[0]]["tick"][0] >= 1:
            for team in teams:
                trace.declared[team] += float(observed[team]["declared"].sum())
                trace.need[team] += float(observed[team]["need"].sum())
        seen = observed[ALLOCATOR]
        grants = self.grant_of.view(np.asarray(tick.actions[ALLOCATOR]))["grant"]
        for i in range(len(teams)):
            revealed = seen["revealed"][i] > 0
            basis = seen["revealed_need"][i] if revealed else seen["declared"][i]
            (trace.on_revealed if revealed else trace.on_declared).extend(zip(basis, grants[i], strict=True))
        levels = self.price_of.view(np.asarray(tick.actions[BROKER]))["price_level"]
        trace.prices.append((float(observed[BROKER]["demand"].sum()), float(np.mean(levels))))

    def end(self, episode: Episode) -> None:
        self.trace.returns = episode.returns()
        self.traces.append(self.trace)


class SeatCodes(Observer):
    """The codes one seat's learned module chose (its own action, before the codec), tick by
    tick; a seat without a module (scripted) leaves :attr:`codes` empty."""

    def __init__(self, seat: str) -> None:
        self.seat = seat
        self.codes: list[np.ndarray] = []

    def tick(self, tick: Tick) -> None:
        code = getattr(tick.policies[self.seat], "last_module_action", None)
        if code is not None:
            self.codes.append(np.array(code, copy=True))


def traced(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Sequence[int]) -> list[Trace]:
    """Every seed's :class:`Trace`, ``lineup`` in every seat (policies built once, reset per episode)."""
    arena = arena_for(env)
    tracer = Tracer(arena.unwrapped.config)
    for _ in play(arena, lineup, seeds, tracer):
        pass
    return tracer.traces


def declared_to_need(traces: Sequence[Trace], team: str) -> float:
    need = sum(t.need[team] for t in traces)
    return float("nan") if need <= 0 else sum(t.declared[team] for t in traces) / need


def slope(pairs: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope through the origin of granted on basis (nan without data)."""
    x, y = (np.asarray(v, dtype=np.float64) for v in zip(*pairs, strict=True)) if pairs else (np.zeros(0), np.zeros(0))
    denominator = float(x @ x)
    return float("nan") if denominator <= 0 else float(x @ y) / denominator


def price_demand_correlation(demand: np.ndarray, level: np.ndarray) -> float:
    """Pearson correlation of a broker's price level with the demand it saw (nan if either is constant)."""
    return float(np.corrcoef(demand, level)[0, 1]) if demand.std() > 0 and level.std() > 0 else float("nan")


def price_response(traces: Sequence[Trace], bins: int = 4) -> dict[str, Any]:
    demand, level = (np.asarray(v) for v in zip(*[p for t in traces for p in t.prices], strict=True))
    corr = price_demand_correlation(demand, level)
    edges = np.unique(np.quantile(demand, np.linspace(0, 1, bins + 1)))
    which = np.clip(np.searchsorted(edges, demand, side="right") - 1, 0, len(edges) - 2)
    by_bin = [{"demand_from": float(edges[b]), "demand_to": float(edges[b + 1]),
               "mean_price_level": float(level[which == b].mean()), "ticks": int((which == b).sum())}
              for b in range(len(edges) - 1) if (which == b).any()]
    return {"correlation": corr, "by_demand": by_bin, "demand": demand.tolist(), "level": level.tolist()}


def reference_ratios(config: ScenarioConfig, background: Population, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Declared / true need of scripted teams and of uniformly random team actions (every
    team so played, the rest the background, a proportional allocator): the scale on which a
    learned team's ratio reads as truthful, bluffing, or still random."""
    rows = []
    for name in ("truthful", "greedy_bluffer", "uniform random"):
        population = background.with_agent(ALLOCATOR, "proportional")

        def lineup(env: ArenaEnv, name: str = name, population: Population = population) -> dict[str, Any]:
            policies: dict[str, Any] = population.build(config, env=env, strict=False)
            if name == "uniform random":
                policies.update(uniform_random_policies(env, config.team_names))
            else:
                for team in config.team_names:
                    policies[team] = population.with_agent(team, name).build(config, env=env)[team]
            return policies

        traces = traced(config, lineup, seeds)
        rows.append({"teams": name, **{team: declared_to_need(traces, team) for team in config.team_names}})
    return rows


__all__ = ["SeatCodes", "Trace", "Tracer", "declared_to_need", "price_demand_correlation", "price_response",
           "reference_ratios", "slope", "traced"]
