"""``commons-arena scenarios check FILE``: is a scenario valid, and what does it ask of an allocator?

    commons-arena scenarios check my_cluster.toml --seeds 10

1. **Validity**: the file loads (:func:`commons_arena.load_scenario`; an invalid one stops here
   with the scenario error, one line).
2. **Scores** on a few seeds (the ``evaluate`` range): the oracle's, random's and every scripted
   allocator's return (raw) and normalised score (random 0, oracle 1), with the episode
   statistics evaluate reports (invalid units among them): the rows of ``commons-arena evaluate``,
   played by the same engine.
3. **Where bluffing pays**: each team's misreport gain (its return as ``greedy_bluffer`` minus as
   ``truthful``, paired by seed, the other seats unchanged) against a couple of allocators
   (``proportional``, which believes declarations, and ``planner``, which discounts inflation);
   ``pays`` says whether the 95% interval lies above 0 (yes), below (no) or spans it (?).
4. **Cost**: milliseconds per episode, scripted (the mean over the scripted allocators' episodes)
   and with the oracle (a MILP per tick), measured while checking.
5. **What the table says** (:func:`readings`): when the carbon cap binds for every scripted allocator,
   when the scripted allocators barely differ, and which team each job shock with no ``team`` lands on.

The default (10 seeds) takes a few seconds on ``standard``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR, DEFAULT_SHOCK_TEAM
from commons_arena.files import make_folder
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.engine import play
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, ORACLE, RANDOM, Episodes, score_rows
from experiments.evaluation.tables import write_table
from experiments.statistics import paired_difference
from policies.population import Population

MISREPORT_ALLOCATORS = ("proportional", "planner")
BINDS = 0.95  # mean emissions at this share of the cap or more: the cap, not the work, set how much ran
BARELY = 0.1  # scripted allocators' normalised scores within this span: the cluster does not tell them apart
CHECK_COLUMNS = ("allocator", "reward_mean", "reward_ci95", "score", "ratio", "completed", "missed", "invalid_units",
                 "spend", "idle_gpu_ticks", "carbon_kg", "fairness")


@dataclass
class CheckResult:
    config: ScenarioConfig
    seeds: list[int]
    scores: list[dict[str, Any]] = field(default_factory=list)
    misreport: list[dict[str, Any]] = field(default_factory=list)
    timing: list[dict[str, Any]] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        c = self.config
        tiers = ", ".join(f"{t.name} x{t.owned}" for t in c.gpu_tiers)
        return {"scenario": c.name, "hash": c.content_hash, "teams": ", ".join(c.team_names), "tiers": tiers,
                "ticks": c.max_ticks, "budget": c.budget, "carbon": f"{c.carbon.mode} cap {c.carbon.cap_kg:g} kg"}


def _play(config: ScenarioConfig, allocator: str, seeds: Sequence[int],
          overrides: dict[str, str] | None = None) -> tuple[list[dict[str, dict[str, float]]], list[float]]:
    """Episodes of ``allocator`` against the scenario's own population (``overrides``: agent -> policy),
    and each episode's wall seconds."""
    background = Population.default(config)
    for agent, policy in (overrides or {}).items():
        background = background.with_agent(agent, policy)
    played = list(play(config, background.with_agent(ALLOCATOR, allocator), seeds))
    return [episode.summaries for episode in played], [episode.wall_seconds for episode in played]


def check_scenario(scenario: str | Path | ScenarioConfig, seeds: Sequence[int],
                   allocators: Sequence[str] = BASELINE_ALLOCATORS,
                   misreport_allocators: Sequence[str] = MISREPORT_ALLOCATORS) -> CheckResult:
    """Load (the scenario error if invalid), then score every allocator, the misreport gains and the cost."""
    config = commons_arena.load_scenario(scenario)  # type: ignore[arg-type]
    result = CheckResult(config, list(seeds))
    lineup = list(dict.fromkeys([RANDOM, ORACLE, *allocators]))
    episodes: Episodes = {}
    seconds: dict[str, list[float]] = {}
    for allocator in lineup:
        episodes[(config.name, allocator)], seconds[allocator] = _play(config, allocator, seeds)
    rows, _ = score_rows(config.name, lineup, list(seeds), episodes)
    result.scores = [{c: row[c] for c in CHECK_COLUMNS} for row in rows]
    for allocator in misreport_allocators:
        for team in config.team_names:
            bluff, truth = ([e[team]["return"] for e in _play(config, allocator, seeds, {team: style})[0]]
                            for style in ("greedy_bluffer", "truthful"))
            gain, ci = paired_difference(bluff, truth)
            result.misreport.append({"allocator": allocator, "team": team, "bluff_return": float(np.mean(bluff)),
                                     "truthful_return": float(np.mean(truth)), "misreport_gain": gain,
                                     "gain_ci95": ci, "pays": "yes" if gain - ci > 0 else "no" if gain + ci < 0 else "?"})
    scripted = [s for a in lineup if a != ORACLE for s in seconds[a]]
    result.timing = [
        {"episodes": "scripted allocators", "count": len(scripted), "ms_per_episode": 1000 * float(np.mean(scripted)),
         "ms_per_tick": 1000 * float(np.mean(scripted)) / config.max_ticks},
        {"episodes": "oracle", "count": len(seconds[ORACLE]), "ms_per_episode": 1000 * float(np.mean(seconds[ORACLE])),
         "ms_per_tick": 1000 * float(np.mean(seconds[ORACLE])) / config.max_ticks},
    ]
    result.readings = readings(config, result.scores)
    return result


def shock_landings(config: ScenarioConfig) -> list[str]:
    """Per job shock without a ``team``: the team its job goes to and by which rule."""
    lines = []
    for i, spec in enumerate(config.shocks):
        if spec.job is None or spec.team is not None:
            continue
        when = f"tick {spec.tick}" if spec.tick is not None else f"rate {spec.rate:g} per tick"
        team = config.target_team(spec)
        why = ("a seeded draw (shock_teams = \"drawn\")" if config.shock_teams == "drawn" else
               "the kind's usual team" if DEFAULT_SHOCK_TEAM.get(spec.shock_kind) == team else
               "the first team: set its `team`, or shock_teams = \"drawn\" to spread such shocks over the teams")
        lines.append(f"shocks[{i}] {spec.kind} ({when}): its job goes to {team} ({why})")
    return lines


def readings(config: ScenarioConfig, scores: Sequence[dict[str, Any]]) -> list[str]:
    """What the scores table says, in sentences (module docstring, point 5)."""
    scripted = [row for row in scores if row["allocator"] not in (RANDOM, ORACLE)]
    out: list[str] = []
    cap = config.carbon.cap_kg
    carbon = [row["carbon_kg"] for row in scripted]
    if carbon and min(carbon) >= BINDS * cap:
        out.append(f"the carbon cap binds for every scripted allocator: they emit {min(carbon):.3g}-{max(carbon):.3g} "
                   f"of {cap:g} kg ({config.carbon.mode} cap), so the cap, not their rule, decides how much runs; only "
                   "the oracle plans carbon over the whole episode")
    score = [row["score"] for row in scripted]
    if len(score) > 1 and max(score) - min(score) < BARELY:
        out.append(f"the scripted allocators barely differ: scores {min(score):.2f}-{max(score):.2f} (random 0, oracle "
                   f"1, a span under {BARELY:g}); this cluster does not tell their rules apart")
    return out + shock_landings(config)


def write_check(result: CheckResult, out: Path) -> list[Path]:
    make_folder(out)
    written: list[Path] = []
    for name, rows in (("scores", result.scores), ("misreport", result.misreport), ("timing", result.timing)):
        written += write_table(rows, out, name)
    return written


__all__ = ["BARELY", "BINDS", "MISREPORT_ALLOCATORS", "CheckResult", "check_scenario", "readings", "shock_landings",
           "write_check"]
