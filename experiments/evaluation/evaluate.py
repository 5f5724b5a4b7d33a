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
score plot ``scores.png``. The mean-and-CI arithmetic is done by numpy/scipy; the progress
bar is tqdm.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.recording import RecordEpisode
from experiments.evaluation.statistics import mean_ci
from policies.allocators import SCRIPTED_ALLOCATORS
from policies.focal import run_episode
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


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t confidence interval (0 for one value)."""
    mean, _, high = mean_ci(values, 0.95)
    return mean, high - mean


def normalised_score(reward: float, random_reward: float, oracle_reward: float) -> float:
    span = oracle_reward - random_reward
    return float("nan") if abs(span) < 1e-9 else (reward - random_reward) / span


def plain_ratio(reward: float, oracle_reward: float) -> float:
    """``R / R_oracle``: the metric the compute-commons source system quoted (nan when the
    oracle's return is 0; meaningless when it is negative, which the normalised score is not)."""
    return float("nan") if abs(oracle_reward) < 1e-9 else reward / oracle_reward


def paired_difference(returns: Sequence[float], other: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% CI half-width of ``returns - other``, seed by seed (same seeds, same order)."""
    if len(returns) != len(other):
        raise ValueError(f"paired difference needs the same seeds: {len(returns)} vs {len(other)} episodes")
    return mean_ci95(np.subtract(returns, other).tolist())


def best_other(returns_by_policy: dict[str, Sequence[float]], candidates: Iterable[str], besides: str) -> str | None:
    """The candidate with the highest mean return, ``besides`` excluded (None if there is none)."""
    others = [c for c in candidates if c != besides and c in returns_by_policy]
    return max(others, key=lambda c: float(np.mean(returns_by_policy[c])), default=None)


def versus_best(
    policy: str, returns_by_policy: dict[str, Sequence[float]], candidates: Iterable[str] = BASELINE_ALLOCATORS
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
    episodes: dict[tuple[str, str], list[dict[str, dict[str, float]]]] = field(default_factory=dict)


def play_many(
    scenario: str,
    allocator: str,
    seeds: Iterable[int],
    overrides: dict[str, str] | None = None,
    record: Path | None = None,
) -> list[dict[str, dict[str, float]]]:
    """One episode per seed with ``allocator`` against the scenario's background population;
    ``record`` writes them all to one JSONL recording (``commons-arena replay`` shows it)."""
    base = commons_arena.parallel_env(scenario=scenario)
    population = Population.default(base.config).with_agent(ALLOCATOR, allocator)
    for agent, policy in (overrides or {}).items():
        population = population.with_agent(agent, policy)
    policies = population.build(base.config, env=base)  # built once, reset per episode
    env = base if record is None else RecordEpisode(base, record)
    episodes = [run_episode(env, policies, seed) for seed in seeds]
    env.close()
    return episodes


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


MAX_SEED = 2**63 - 1


def validate_seeds(seeds: Sequence[int]) -> None:
    """At least one seed, each a non-negative int (what ``reset(seed=...)`` accepts)."""
    if len(seeds) == 0:
        raise ValueError("no seeds to play: ask for at least one (--seeds 1 or more)")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int | np.integer) or not 0 <= s <= MAX_SEED]
    if bad:
        raise ValueError(f"seeds must be integers in [0, 2**63 - 1], got {bad[:3]}")


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
    row: dict[str, Any], anchors: dict[str, float], returns: dict[str, Sequence[float]],
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
    jobs = [(s, a) for s in scenarios for a in lineup]
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
            result.episodes[key] = run(scenario, allocator, seeds, overrides)  # type: ignore[index]
        bar.update()
    bar.close()
    for scenario in scenarios:
        anchors = {a: summarise(scenario, a, result.episodes[(scenario, a)])["reward_mean"] for a in (RANDOM, ORACLE)}
        returns = {a: allocator_returns(result.episodes[(scenario, a)]) for a in lineup}
        for allocator in lineup:
            result.rows.append(
                score_row(summarise(scenario, allocator, result.episodes[(scenario, allocator)]), anchors, returns)
            )
            for seed, episode in zip(seeds, result.episodes[(scenario, allocator)], strict=True):
                result.episode_scores.append({
                    "scenario": scenario, "policy": allocator, "seed": seed,
                    "score": normalised_score(episode[ALLOCATOR]["return"], anchors[RANDOM], anchors[ORACLE]),
                })
    if misreport:
        for scenario in scenarios:
            for allocator in allocators:
                for team in commons_arena.load_scenario(scenario).team_names:
                    bluff = [e[team]["return"] for e in result.episodes[(scenario, allocator, team, "greedy_bluffer")]]
                    truth = [e[team]["return"] for e in result.episodes[(scenario, allocator, team, "truthful")]]
                    gain, ci = mean_ci95(np.subtract(bluff, truth))
                    result.misreport.append(
                        {"scenario": scenario, "allocator": allocator, "team": team,
                         "bluff_return": float(np.mean(bluff)), "truthful_return": float(np.mean(truth)),
                         "misreport_gain": gain, "gain_ci95": ci}
                    )
    return result


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_tables(result: EvaluationResult, out: Path, plot: bool = True) -> list[Path]:
    """CSV + markdown per table, and the score bars (per-episode scores, 95% CI) as PNG."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if plot and result.episode_scores:
        from experiments.viewing.plots import score_bars

        written.append(score_bars(result.episode_scores, out / "scores.png", title="normalised score (random 0, oracle 1)"))
    for name, rows in (("evaluation", result.rows), ("misreport", result.misreport)):
        if not rows:
            continue
        with open(out / f"{name}.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        (out / f"{name}.md").write_text(markdown_table(rows) + "\n")
        written += [out / f"{name}.csv", out / f"{name}.md"]
    return written
