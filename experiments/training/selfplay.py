"""Several seats learning at once: the pieces ``train.py`` uses beyond the allocator.

* ``seats_ppo``: the seats named by ``--learners`` learn (e.g. ``--learners team`` for the
  teams only, ``--learners allocator broker``); every other seat is background
  (``--background roster.toml``: scripted policies or frozen ``learned:<dir>`` checkpoints;
  default the scenario's own population), playing inside the env.
* ``selfplay``: allocator, teams and broker all learn at once, against each other.

Teams share one module with their identity in the observation (``--team-modules shared``,
the default) or get one each (``per_team``); see :mod:`experiments.training.seats`.

Evaluation on the held-out seeds plays the learned seats together, greedily, as the
checkpoint stores them (every other seat the background) and records each learning seat's
mean return; when the allocator learns, its normalised score is also measured alone
against the scenario's own population (so it compares with allocator-only runs). The
checkpoint holds one data-only policy per learning seat (``policies/<seat>/``, see
:mod:`policies.policy_set`), so ``learned:<run>/checkpoint`` plays any of their roles.

    commons-arena train --experiment selfplay --scenario standard --minutes 10
    commons-arena train --experiment seats_ppo --learners team --background roster.toml
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from experiments.training.seats import SeatPlan, TeamModules, fold_identity
from policies.focal import FocalEnv
from policies.learned import LearnedPolicy, ModuleInterface, save_policy
from policies.policy_set import SET_DIR
from policies.population import Population

ALL_ROLES = ("allocator", "team", "broker")


def plan_for(experiment: str, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
    """The learning seats an experiment trains: the allocator alone, the named ones, or all."""
    if experiment != "seats_ppo" and tuple(learners) != ("allocator",):
        raise ValueError(f"--learners is for --experiment seats_ppo; {experiment} decides its learners itself")
    if experiment in ("allocator_ppo", "allocator_curriculum", "allocator_mixed"):
        return SeatPlan.single(ALLOCATOR)
    if experiment == "selfplay":
        return SeatPlan.build(config, ALL_ROLES, team_modules)
    if experiment == "league":  # the shared team module learns (experiments/training/league.py)
        return SeatPlan.build(config, ["team"], "shared")
    return SeatPlan.build(config, learners, team_modules)


def background_population(path: Path | None, config: ScenarioConfig) -> Population:
    """The non-learning seats: a roster file (scripted or ``learned:`` entries) or the scenario's own."""
    return Population.default(config) if path is None else Population.from_toml(path, config)


def sample_observations(scenarios: Sequence[str], seed: int, episodes: int = 8) -> dict[str, np.ndarray]:
    """Every seat's observations from the scenario's population with a random and a
    proportional allocator (the spread the observation scales are fitted on)."""
    rows: dict[str, list[np.ndarray]] = {}
    for scenario in scenarios:
        config = commons_arena.load_scenario(scenario)
        for allocator in ("random", "proportional"):
            episode = FocalEnv.from_scenario(config, (), Population.default(config).with_agent(ALLOCATOR, allocator))
            for k in range(episodes):
                episode.reset(seed=seed * 7919 + k)
                while not episode.episode_over:
                    for seat, obs in episode.seat_observations.items():
                        rows.setdefault(seat, []).append(obs)
                    episode.step({})
    return {seat: np.stack(obs) for seat, obs in rows.items()}


def seat_networks(algo: Any, plan: SeatPlan) -> dict[str, Any]:
    """Learning seat -> the data-only greedy network of its module (identity folded in); a
    recurrent module, which that format cannot hold yet, is returned as itself."""
    from policies.checkpoint_format import network_from_rl_module

    out: dict[str, Any] = {}
    for module_id, seats in plan.modules.items():
        module = algo.get_module(module_id)
        if module.is_stateful():
            if any(seat in plan.identity for seat in seats):
                raise ValueError(f"module {module_id!r} is recurrent: its seat identity cannot be folded in")
            out.update(dict.fromkeys(seats, module))
            continue
        network = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
        for seat in seats:
            out[seat] = fold_identity(network, plan.identity[seat]) if seat in plan.identity else network
    return out


def learned_policies(
    networks: Mapping[str, Any], scales: Mapping[str, np.ndarray], codecs: Mapping[str, str], config: ScenarioConfig,
    histories: Mapping[str, int] | None = None,
) -> dict[str, LearnedPolicy]:
    """Each seat's (identity-folded) network behind the seat's ModuleInterface, as in its checkpoint."""
    histories = histories or {}
    return {
        seat: LearnedPolicy(network, ModuleInterface(config, seat, scales[seat], codecs.get(seat), histories.get(seat, 1)))
        for seat, network in networks.items()
    }


def held_out_seat_returns(
    networks: Mapping[str, Any],
    scales: Mapping[str, np.ndarray],
    codecs: Mapping[str, str],
    scenario: str,
    seeds: Sequence[int],
    background: Population,
    histories: Mapping[str, int] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Mean return per learning seat, the learned seats playing together, greedy; and each
    learning team's declared / true need ratio in those episodes (its bluffing)."""
    from experiments.evaluation.analysis import declared_to_need, play_traced

    env = commons_arena.parallel_env(scenario=scenario)
    policies = background.build(env.config, env=env, strict=False)
    policies.update(learned_policies(networks, scales, codecs, env.config, histories))
    traces = [play_traced(env, policies, seed) for seed in seeds]
    returns = {seat: float(np.mean([t.returns[seat] for t in traces])) for seat in networks}
    ratios = {team: declared_to_need(traces, team) for team in env.config.team_names if team in networks}
    return returns, ratios


def save_policy_set(
    checkpoint: Path,
    networks: Mapping[str, Any],
    config: ScenarioConfig,
    scales: Mapping[str, np.ndarray],
    codecs: Mapping[str, str],
    histories: Mapping[str, int] | None = None,
) -> Path:
    """One data-only policy per learning seat under ``<checkpoint>/policies/<seat>``."""
    folder = checkpoint / SET_DIR
    for seat, network in networks.items():
        save_policy(folder / seat, network, config, seat, scales[seat], codec=codecs.get(seat),
                    history=(histories or {}).get(seat, 1))
    return folder


__all__ = [
    "background_population",
    "held_out_seat_returns",
    "learned_policies",
    "plan_for",
    "sample_observations",
    "save_policy_set",
    "seat_networks",
]
