"""Traced episodes: what one episode shows about bluffing, granting and pricing.

:func:`play_traced` plays one episode with every seat a background policy (through
:class:`policies.focal.FocalEnv`, the one substrate) and records, tick by tick, what each
team declared against its true need, what the allocator granted against declarations and
revealed needs, and the broker's price level against the demand it saw; the functions
below reduce traces to the figures of ``commons-arena analyze``
(:mod:`experiments.evaluation.analysis`) and of training's held-out evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout
from policies.base import Policy, uniform_random_policies
from policies.focal import FocalEnv
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


def play_traced(env: Any, policies: Mapping[str, Policy], seed: int) -> Trace:
    """One episode, every seat background, recording the quantities of the module docstring."""
    episode = FocalEnv(env, (), policies)
    config: ScenarioConfig = episode.config
    layouts = {seat: observation_layout(config, seat) for seat in episode.arena.possible_agents}
    grant_of = action_layout(config, ALLOCATOR)
    price_of = action_layout(config, BROKER)
    teams = list(config.team_names)
    trace = Trace(returns={}, declared=dict.fromkeys(teams, 0.0), need=dict.fromkeys(teams, 0.0))
    episode.reset(seed=seed)
    while not episode.episode_over:
        observed = {seat: layouts[seat].view(obs) for seat, obs in episode.seat_observations.items()}
        episode.step({})
        if observed[teams[0]]["tick"][0] >= 1:
            for team in teams:
                trace.declared[team] += float(observed[team]["declared"].sum())
                trace.need[team] += float(observed[team]["need"].sum())
        seen = observed[ALLOCATOR]
        grants = grant_of.view(np.asarray(episode.seat_actions[ALLOCATOR]))["grant"]
        for i in range(len(teams)):
            revealed = seen["revealed"][i] > 0
            basis = seen["revealed_need"][i] if revealed else seen["declared"][i]
            (trace.on_revealed if revealed else trace.on_declared).extend(zip(basis, grants[i], strict=True))
        levels = price_of.view(np.asarray(episode.seat_actions[BROKER]))["price_level"]
        trace.prices.append((float(observed[BROKER]["demand"].sum()), float(np.mean(levels))))
    trace.returns = {seat: float(info["episode"]["return"]) for seat, info in episode.seat_infos.items()}
    return trace


def play_many_traced(config: ScenarioConfig, population: Population, seeds: Sequence[int]) -> list[Trace]:
    env = commons_arena.parallel_env(config)
    policies = population.build(config, env=env, strict=False)  # built once, reset per episode
    return [play_traced(env, policies, seed) for seed in seeds]


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
    env = commons_arena.parallel_env(config)
    rows = []
    for name in ("truthful", "greedy_bluffer", "uniform random"):
        population = background.with_agent(ALLOCATOR, "proportional")
        policies = population.build(config, env=env, strict=False)
        if name == "uniform random":
            policies.update(uniform_random_policies(env, config.team_names))
        else:
            for team in config.team_names:
                policies[team] = population.with_agent(team, name).build(config, env=env)[team]
        traces = [play_traced(env, policies, seed) for seed in seeds]
        rows.append({"teams": name, **{team: declared_to_need(traces, team) for team in config.team_names}})
    return rows


__all__ = ["Trace", "declared_to_need", "play_many_traced", "play_traced", "price_demand_correlation", "price_response",
           "reference_ratios", "slope"]
