"""Held-out evaluation of a training run, outside RLlib (seeds training never plays).

Against the reference allocators' returns on the held-out seeds (:mod:`references`, read
once by the run's setup): the learned allocator alone against each scenario's own population, and the
learning seats playing together (a multi-seat run), each greedy, as the checkpoint stores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.engine import play, returns_of
from experiments.evaluation.evaluate import (
    BASELINE_ALLOCATORS,
    best_other,
    normalised_score,
    plain_ratio,
)
from experiments.evaluation.traces import declared_to_need, traced
from experiments.statistics import paired_difference
from experiments.training.networks import MLP
from experiments.training.setup import RunSetup
from policies.learned import LearnedPolicy
from policies.population import Population


def allocator_returns_alone(policy: LearnedPolicy, config: ScenarioConfig, seeds: Sequence[int]) -> list[float]:
    """Per-seed returns of the learned allocator (greedy) against the scenario's own population."""
    return returns_of(play(config, lambda env: {**Population.default(config).build(config, env=env), ALLOCATOR: policy},
                             seeds), ALLOCATOR)


def learned_policies(networks: Mapping[str, Any], setup: RunSetup, config: ScenarioConfig) -> dict[str, LearnedPolicy]:
    """Each seat's (identity-folded) network behind the seat's ModuleInterface, as in its checkpoint."""
    return {seat: (setup.args.net if seat == ALLOCATOR else MLP).policy(network, setup, seat, config)
            for seat, network in networks.items()}


def held_out_report(returns: list[float], references: Mapping[str, Any]) -> dict[str, Any]:
    """Score, plain ratio and paired difference to the best baseline of per-seed ``returns``."""
    means = {a: float(np.mean(v)) for a, v in references.items()}
    mean_return = float(np.mean(returns))
    report: dict[str, Any] = {
        "return": mean_return,
        "score": normalised_score(mean_return, means["random"], means["oracle"]),
        "ratio": plain_ratio(mean_return, means["oracle"]),
    }
    best = best_other(dict(references), BASELINE_ALLOCATORS, besides="")
    if best is not None and isinstance(references[best], list):
        diff, ci = paired_difference(returns, references[best])
        report.update({"best_baseline": best, "best_baseline_return": means[best], "diff_vs_best": diff,
                       "diff_ci95": ci, "oracle_return": means["oracle"]})
    return report


def describe(report: Mapping[str, Any]) -> str:
    text = f"return {report['return']:.2f}, normalised score {report['score']:.3f}, ratio {report['ratio']:.3f}"
    if "best_baseline" in report:
        text += (f"; vs best baseline {report['best_baseline']} ({report['best_baseline_return']:.2f}): "
                 f"{report['diff_vs_best']:+.2f} ± {report['diff_ci95']:.2f} (95% CI, paired)")
    return text


def held_out_seat_returns(
    policies: Mapping[str, LearnedPolicy], config: ScenarioConfig, seeds: Sequence[int], background: Population,
) -> tuple[dict[str, float], dict[str, float]]:
    """Mean return per learning seat, the learned seats playing together, greedy; and each
    learning team's declared / true need ratio in those episodes (its bluffing)."""
    traces = traced(config, lambda env: {**background.build(config, env=env, strict=False), **policies}, seeds)
    returns = {seat: float(np.mean([t.returns[seat] for t in traces])) for seat in policies}
    ratios = {team: declared_to_need(traces, team) for team in config.team_names if team in policies}
    return returns, ratios


def held_out_evaluation(setup: RunSetup, networks: Mapping[str, Any], scenarios: Sequence[ScenarioConfig]
             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One held-out evaluation: the history row's results and, when the allocator learns, its
    report per scenario. Several learners play the first scenario together; the allocator is
    also judged alone against each scenario's own population (a mix: its score is the mean)."""
    row: dict[str, Any] = {}
    if setup.plan.seats != [ALLOCATOR]:
        returns, ratios = held_out_seat_returns(learned_policies(networks, setup, scenarios[0]), scenarios[0],
                                                setup.eval_seeds, setup.background)
        row["returns"] = returns
        if ratios:
            row["declared_to_need"] = ratios  # learned teams' bluffing (commons-arena analyze plots it)
    reports: dict[str, dict[str, Any]] = {}
    if ALLOCATOR in networks:
        reports = allocator_reports(setup, networks[ALLOCATOR], scenarios)
        scores = [r["score"] for r in reports.values() if np.isfinite(r["score"])]  # undefined where random = oracle
        score = float(np.mean(scores)) if scores else float("nan")
        eval_return = float(np.mean([r["return"] for r in reports.values()]))
        if len(scenarios) > 1:
            row.update({f"score/{name}": r["score"] for name, r in reports.items()})
    else:  # no allocator learns: the learners' mean held-out return ranks checkpoints
        eval_return = score = float(np.mean(list(row["returns"].values())))
    row.update({"eval_return": eval_return, "score": score})
    return row, reports


def allocator_reports(setup: RunSetup, network: Any, scenarios: Sequence[ScenarioConfig]) -> dict[str, dict[str, Any]]:
    """Scenario name -> the learned allocator's held-out report there, alone against its population."""
    return {
        config.name: held_out_report(
            allocator_returns_alone(learned_policies({ALLOCATOR: network}, setup, config)[ALLOCATOR], config,
                                    setup.eval_seeds),
            setup.references[config.name])
        for config in scenarios
    }


__all__ = [
    "allocator_reports",
    "allocator_returns_alone",
    "describe",
    "held_out_evaluation",
    "held_out_report",
    "held_out_seat_returns",
    "learned_policies",
]
