"""Evaluation tables (docs/rules.md §9): every allocator against each scenario's background population.

For each scenario x allocator, over the same seeds: mean ± 95% CI of the allocator's
return, the normalised score ``(R - R_random) / (R_oracle - R_random)`` (random and oracle
are always run on the same seeds, so the score is defined for every row), the plain ratio
``R / R_oracle`` (the compute-commons source system's metric), the **paired difference**
to the best scripted allocator other than itself (mean of per-seed return differences
with its 95% CI: > 0 with the CI above zero means it beats that allocator on these seeds),
and the episode statistics. A second table gives each team's **misreport gain**: its return when it plays
``greedy_bluffer`` minus its return when it plays ``truthful``, every other agent fixed.

    commons-arena evaluate --scenarios standard deadline_crunch --allocators proportional edf --seeds 20

Writes ``<out>/evaluation.csv``, ``evaluation.md``, ``misreport.csv``, ``misreport.md`` and a
score plot ``scores.png``. Each (scenario, allocator) run is one :class:`~experiments.evaluation.engine.Group`
of the engine (the allocator in the allocator seat, the scenario's own population around
it): the same episodes a tournament plays on the same seeds. This module is the lineup
and the aggregates (statistics: :mod:`experiments.statistics`; tables:
:mod:`experiments.evaluation.tables`); the progress bar is tqdm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder
from commons_arena.scenario import MAX_RETURN
from experiments.evaluation.engine import play
from experiments.evaluation.tables import write_table
from experiments.seeds import validate_seeds
from experiments.statistics import mean_ci95, paired_difference
from policies.allocators import SCRIPTED_ALLOCATORS
from policies.population import Population

RANDOM, ORACLE, PLANNER = "random", "oracle", "planner"
# the scripted allocators a learned one is held to, random aside (it anchors the score like
# the oracle): the heuristics and the observation-only planner
HEURISTICS = tuple(name for name in SCRIPTED_ALLOCATORS if name != RANDOM)
BASELINE_ALLOCATORS = (*HEURISTICS, PLANNER)
TABLE_COLUMNS = (
    "scenario",
    "allocator",
    "episodes",
    "reward_mean",
    "reward_ci95",
    "score",
    "ratio",
    "vs",
    "diff_vs",
    "diff_ci95",
    "completed",
    "missed",
    "invalid_units",
    "utilisation",
    "spend",
    "idle_gpu_ticks",
    "carbon_kg",
    "fairness",
    "justified_escalations",
)
STAT_COLUMNS = TABLE_COLUMNS[10:]
Episodes = dict[tuple[str, ...], list[dict[str, dict[str, float]]]]  # (scenario, allocator[, team, style]) -> episodes


MAX_SCORE = 2 * MAX_RETURN / 1e-9  # a normalised score's largest magnitude: returns over the smallest span it divides by


def normalised_score(reward: float, random_reward: float, oracle_reward: float) -> float:
    span = oracle_reward - random_reward
    return float("nan") if abs(span) < 1e-9 else (reward - random_reward) / span


def plain_ratio(reward: float, oracle_reward: float) -> float:
    """``R / R_oracle``: the metric the compute-commons source system quoted (nan when the
    oracle's return is 0; meaningless when it is negative, which the normalised score is not)."""
    return float("nan") if abs(oracle_reward) < 1e-9 else reward / oracle_reward


def best_other(returns_by_policy: Mapping[str, Sequence[float]], candidates: Iterable[str], besides: str) -> str | None:
    """The candidate with the highest mean return, ``besides`` excluded (None if there is none)."""
    others = [c for c in candidates if c != besides and c in returns_by_policy]
    return max(others, key=lambda c: float(np.mean(returns_by_policy[c])), default=None)


def versus_best(
    policy: str, returns_by_policy: Mapping[str, Sequence[float]], candidates: Iterable[str] = BASELINE_ALLOCATORS
) -> dict[str, Any]:
    """``vs`` (the best candidate other than ``policy``), ``diff_vs`` and ``diff_ci95``: the
    paired difference of ``policy``'s returns to that candidate's over the same seeds."""
    rival = best_other(returns_by_policy, candidates, policy)
    if rival is None:
        return {"vs": "", "diff_vs": float("nan"), "diff_ci95": float("nan")}
    diff, ci = paired_difference(returns_by_policy[policy], returns_by_policy[rival])
    return {"vs": rival, "diff_vs": diff, "diff_ci95": ci}


def allocator_returns(episodes: list[dict[str, dict[str, float]]]) -> list[float]:
    return [e[ALLOCATOR]["return"] for e in episodes]


@dataclass
class EvaluationResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    episode_scores: list[dict[str, Any]] = field(default_factory=list)  # one row per episode
    misreport: list[dict[str, Any]] = field(default_factory=list)
    episodes: Episodes = field(default_factory=dict)


def play_many(
    scenario: str,
    allocator: str,
    seeds: Iterable[int],
    overrides: dict[str, str] | None = None,
    record: Path | None = None,
) -> list[dict[str, dict[str, float]]]:
    """One episode per seed with ``allocator`` against the scenario's background population;
    ``record`` writes them all to one JSONL recording (``commons-arena replay`` shows it)."""
    config = commons_arena.load_scenario(scenario)
    background = Population.default(config)
    for agent, policy in (overrides or {}).items():
        background = background.with_agent(agent, policy)
    return [episode.summaries for episode in play(config, background.with_agent(ALLOCATOR, allocator), seeds,
                                                  record=record)]


def summarise(scenario: str, allocator: str, episodes: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """A table row without the columns that need other allocators' runs (filled with nan)."""
    alloc = [e[ALLOCATOR] for e in episodes]
    mean, ci = mean_ci95([e["return"] for e in alloc])
    row: dict[str, Any] = dict.fromkeys(TABLE_COLUMNS, float("nan"))
    row.update({"scenario": scenario, "allocator": allocator, "episodes": len(alloc), "reward_mean": mean,
                "reward_ci95": ci, "vs": ""})
    for column in STAT_COLUMNS:
        row[column] = float(np.mean([e[column] for e in alloc]))
    return row


def validate_lineup(scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int]) -> None:
    """Refuse, before anything is played, what would fail (or print NaN) later: no seeds, an
    unknown scenario, a policy that is not an allocator, a checkpoint that does not fit one
    of the scenarios."""
    from policies.registry import available_policies, make_policy, policy_spec

    validate_seeds(seeds)
    if not scenarios:
        raise ValueError("no scenarios given")
    configs = [commons_arena.load_scenario(s) for s in scenarios]
    for name in allocators:
        spec = policy_spec(name)
        if not spec.plays(ALLOCATOR):
            raise ValueError(f"{name!r} is a {'/'.join(spec.roles)} policy, not an allocator; allocators: "
                             f"{', '.join(available_policies(ALLOCATOR))}, learned:<checkpoint>")
        if name.startswith("learned:"):
            for config in configs:  # loads the weights and checks the spaces of every scenario
                make_policy(name, config, ALLOCATOR)


def score_row(
    row: dict[str, Any], anchors: Mapping[str, float], returns: Mapping[str, Sequence[float]],
    candidates: Iterable[str] = BASELINE_ALLOCATORS,
) -> dict[str, Any]:
    """``row`` with its normalised score, plain ratio and paired difference to the best
    candidate (``anchors``: mean returns of random and oracle; ``returns``: per-seed
    returns of every allocator on the same seeds)."""
    row = dict(row)
    row["score"] = normalised_score(row["reward_mean"], anchors[RANDOM], anchors[ORACLE])
    row["ratio"] = plain_ratio(row["reward_mean"], anchors[ORACLE])
    row.update(versus_best(row["allocator"], returns, candidates))
    return row


def score_rows(scenario: str, lineup: Sequence[str], seeds: Sequence[int],
               episodes: Episodes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The evaluation table's rows of ``scenario`` (one per allocator of ``lineup``, random and
    oracle among them) and the per-episode normalised scores."""
    anchors = {a: summarise(scenario, a, episodes[(scenario, a)])["reward_mean"] for a in (RANDOM, ORACLE)}
    returns = {a: allocator_returns(episodes[(scenario, a)]) for a in lineup}
    rows, scores = [], []
    for allocator in lineup:
        rows.append(score_row(summarise(scenario, allocator, episodes[(scenario, allocator)]), anchors, returns))
        for seed, episode in zip(seeds, episodes[(scenario, allocator)], strict=True):
            scores.append({
                "scenario": scenario, "policy": allocator, "seed": seed,
                "score": normalised_score(episode[ALLOCATOR]["return"], anchors[RANDOM], anchors[ORACLE]),
            })
    return rows, scores


def misreport_rows(scenarios: Sequence[str], allocators: Sequence[str], episodes: Episodes) -> list[dict[str, Any]]:
    """Each team's misreport gain: its return as ``greedy_bluffer`` minus as ``truthful``, paired by seed."""
    rows = []
    for scenario in scenarios:
        for allocator in allocators:
            for team in commons_arena.load_scenario(scenario).team_names:
                bluff = [e[team]["return"] for e in episodes[(scenario, allocator, team, "greedy_bluffer")]]
                truth = [e[team]["return"] for e in episodes[(scenario, allocator, team, "truthful")]]
                gain, ci = paired_difference(bluff, truth)
                rows.append({"scenario": scenario, "allocator": allocator, "team": team,
                             "bluff_return": float(np.mean(bluff)), "truthful_return": float(np.mean(truth)),
                             "misreport_gain": gain, "gain_ci95": ci})
    return rows


def evaluate(
    scenarios: Sequence[str],
    allocators: Sequence[str],
    seeds: Sequence[int],
    misreport: bool = True,
    progress: bool = True,
    run: Callable[..., list[dict[str, dict[str, float]]]] = play_many,
    record_dir: Path | None = None,
) -> EvaluationResult:
    """Play every (scenario, allocator) on ``seeds``; ``record_dir`` keeps a JSONL recording
    of each (scenario, allocator) run, named ``<scenario>__<allocator>.jsonl``."""
    validate_lineup(scenarios, allocators, seeds)
    result = EvaluationResult()
    allocators = list(dict.fromkeys(allocators))  # a name given twice is one allocator
    # random and oracle anchor the normalised score, so they always run; each allocator once
    lineup = list(dict.fromkeys([RANDOM, ORACLE, *allocators]))
    jobs: list[tuple[str, ...]] = [(s, a) for s in scenarios for a in lineup]
    if misreport:
        jobs += [(s, a, team, style) for s in scenarios for a in allocators
                 for team in commons_arena.load_scenario(s).team_names for style in ("greedy_bluffer", "truthful")]
    bar = tqdm(total=len(jobs), desc="evaluate", unit="run", disable=not progress)
    for job in jobs:
        scenario, allocator = job[0], job[1]
        overrides = {job[2]: job[3]} if len(job) == 4 else None
        bar.set_postfix_str(f"{scenario}/{allocator}" + (f"/{job[2]}={job[3]}" if overrides else ""))
        key = (scenario, allocator) if overrides is None else job
        if record_dir is not None and overrides is None:
            name = f"{scenario}__{allocator}".replace("/", "_").replace(":", "_")
            result.episodes[key] = run(scenario, allocator, seeds, overrides, record=record_dir / f"{name}.jsonl")
        else:
            result.episodes[key] = run(scenario, allocator, seeds, overrides)
        bar.update()
    bar.close()
    for scenario in scenarios:
        rows, scores = score_rows(scenario, lineup, seeds, result.episodes)
        result.rows += rows
        result.episode_scores += scores
    if misreport:
        result.misreport = misreport_rows(scenarios, allocators, result.episodes)
    return result


def write_tables(result: EvaluationResult, out: Path, plot: bool = True) -> list[Path]:
    """CSV + markdown per table, and the score bars (per-episode scores, 95% CI) as PNG."""
    make_folder(out)
    written = []
    if plot and result.episode_scores:
        from experiments.viewing.plots import score_bars

        written.append(score_bars(result.episode_scores, out / "scores.png", title="normalised score (random 0, oracle 1)"))
    for name, rows in (("evaluation", result.rows), ("misreport", result.misreport)):
        written += write_table(rows, out, name)
    return written
