"""What the ``planner`` cannot see, and what knowing it would be worth (why the ``need`` codec exists).

The planner estimates each team's need from declarations made a tick earlier, so at tick 0
(nothing declared yet) and whenever jobs arrive it sees nothing. This benchmark measures,
per scenario:

1. the average gap (true need − planner estimate) per tick and (team, tier), over the
   ``--train`` seeds (reading the env's hidden state: a measurement, not a policy);
2. on the ``--test`` seeds (held out from 1.), paired against the planner, the return of:
   ``true need`` (the planner fed the hidden true need every tick: the most better need
   estimates can give), ``true need within the codec's -2..+2`` (the estimate moved toward the
   true need by at most the ``need`` codec's largest correction: the most that codec can give),
   ``true need at tick 0`` (only at tick 0), ``per-tick gap on needs``
   (the planner plus the rounded average gap of its tick, within the ``need`` codec's
   -2..+2: a correction a learned module can represent with one weight per tick), ``tick-0
   gap on needs`` (that correction at tick 0 only) and
   ``per-tick gap on grants`` (the same correction added to the grants, as the ``residual``
   codec would).

Each row also gives the variant's normalised score on the test seeds (random 0, oracle 1, both
played on those seeds), the scale ``compare-checkpoint`` reports a learned allocator on: ``true
need`` is what an allocator that plans as the planner does could reach with a perfect need
estimate, so a learned ``need`` module's score read against it says whether the estimate or the
planning is what stands between it and the oracle.

    commons-arena need-gap --train 200 --test 30

Prints one markdown table; ``--out`` also writes it as CSV.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.engine import play, returns_of
from experiments.evaluation.evaluate import ORACLE, RANDOM, normalised_score
from experiments.evaluation.tables import markdown_table, write_csv
from experiments.seeds import SEED_RANGES
from experiments.statistics import paired_difference
from policies import Population
from policies.codecs import AllocatorCodec
from policies.planner import BatchPlanner
from policies.registry import make_policy

# how a variant changes the planner's need estimate (est) before it plans:
#   (estimate, true need now, tick) -> needs to plan on; None = correct the grants instead
NeedRule = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


class PlannerVariant:
    """The planner, with its need estimate (or, for ``on_grants``, its grants) changed by ``rule``;
    reads the env's hidden true need, so it is a measuring device, never a policy to play."""

    def __init__(self, env: Any, rule: NeedRule | None, on_grants: np.ndarray | None = None) -> None:
        self.env = env.unwrapped
        self.planner = BatchPlanner(self.env.config, ALLOCATOR, 1)  # one arena: observations and plans are rows of one
        self.codec = AllocatorCodec(self.env.config)  # for feasible() and the tiers' ceilings
        self.rule, self.on_grants = rule, on_grants
        config = self.env.config
        self.gap = np.zeros((config.max_ticks + 1, len(config.teams), len(config.gpu_tiers)))
        self.count = np.zeros(config.max_ticks + 1)

    def reset(self, seed: int | None = None) -> None:
        self.planner.reset([seed])

    def act(self, observation: np.ndarray) -> np.ndarray:
        estimate = self.planner.observe(observation[None])[0]
        tick = min(int(self.codec.obs.view(observation)["tick"][0]), len(self.count) - 1)
        true_need = self.env.hidden_state().need
        self.gap[tick] += true_need - estimate
        self.count[tick] += 1
        if self.on_grants is not None:
            T = self.codec.n_tiers
            grant = self.planner.plan(observation[None], estimate[None])[0, T:].reshape(-1, T)
            return self.codec.feasible(observation[None], (grant + self.on_grants[tick])[None])[0]
        need = estimate if self.rule is None else np.clip(self.rule(estimate, true_need, tick), 0, self.codec.ceiling)
        return self.planner.plan(observation[None], need[None])[0]


def population_returns(scenario: str, seeds: Sequence[int], allocator: Callable[[Any], Any]) -> tuple[np.ndarray, Any]:
    """The allocator's returns against the default population (``allocator``: env -> the policy) and the policy."""
    env = commons_arena.parallel_env(scenario=scenario)
    policies = dict(Population.default(env.config).build(env.config, env=env))
    policy = policies[ALLOCATOR] = allocator(env)
    return np.array(returns_of(play(env, policies, seeds), ALLOCATOR)), policy


def returns(scenario: str, seeds: Sequence[int], rule: NeedRule | None = None,
            on_grants: np.ndarray | None = None) -> tuple[np.ndarray, PlannerVariant]:
    return population_returns(scenario, seeds, lambda env: PlannerVariant(env, rule, on_grants))


def anchor_return(scenario: str, seeds: Sequence[int], allocator: str) -> float:
    """The mean return of ``allocator`` (``random`` or ``oracle``) against the default population."""
    result, _ = population_returns(scenario, seeds, lambda env: make_policy(allocator, env.config, ALLOCATOR, env=env))
    return float(result.mean())


def measure_gaps(scenario: str, train: Sequence[int], test: Sequence[int]) -> list[dict[str, Any]]:
    _, recorder = returns(scenario, train)
    bias = np.clip(np.rint(recorder.gap / np.maximum(recorder.count, 1)[:, None, None]), -2, 2).astype(np.int64)
    planner, _ = returns(scenario, test)
    variants: dict[str, tuple[NeedRule | None, np.ndarray | None]] = {
        "true need": (lambda est, need, t: need, None),
        "true need within the codec's -2..+2": (lambda est, need, t: est + np.clip(need - est, -2, 2), None),
        "true need at tick 0": (lambda est, need, t: need if t == 0 else est, None),
        "per-tick gap on needs": (lambda est, need, t: est + bias[t], None),
        "tick-0 gap on needs": (lambda est, need, t: est + bias[t] if t == 0 else est, None),
        "per-tick gap on grants": (None, bias),
    }
    low, high = (anchor_return(scenario, test, a) for a in (RANDOM, ORACLE))
    rows = []
    played = {"planner": planner, **{name: returns(scenario, test, rule, on_grants)[0]
                                     for name, (rule, on_grants) in variants.items()}}
    for name, mine in played.items():
        diff, ci = paired_difference(mine, planner)
        rows.append({"scenario": scenario, "variant": name, "episodes": len(test), "planner_return": float(planner.mean()),
                     "return": float(mine.mean()), "score": normalised_score(float(mine.mean()), low, high),
                     "diff": diff, "diff_ci95": ci})
    gap0 = recorder.gap[0] / max(recorder.count[0], 1)
    print(f"{scenario}: average gap at tick 0 (teams x tiers): {np.round(gap0, 2).tolist()}")
    return rows


def need_gap_report(scenarios: tuple[str, ...], train: int, test: int, out: Path | None = None) -> list[dict[str, Any]]:
    """``commons-arena need-gap``: the table printed (and written to ``out`` as CSV)."""
    rows = [row for s in scenarios
            for row in measure_gaps(s, SEED_RANGES["measure"].seeds(train), SEED_RANGES["compare"].seeds(test))]
    print(markdown_table(rows))
    if out is not None:
        write_csv(rows, out)
    return rows
