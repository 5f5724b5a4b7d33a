"""Scripted-vs-learned tournament: every allocator on every scenario and seed, rated.

Each (scenario, seed) is one *match*: all allocators play the same episode seed against the
scenario's background population, and are ranked by their return (equal returns share a
rank). Ratings come from openskill's Plackett-Luce model (a maintained TrueSkill-like
library, chosen over a hand-written Elo because it rates multi-player rankings directly),
updated in a fixed (scenario, seed) order so the standings are reproducible. The
standings table also gives each allocator's mean normalised score and mean plain ratio
(``R / R_oracle``) over the scenarios and its number of match wins; the per-scenario
evaluation table has both metrics and each allocator's paired difference to the best
scripted allocator (95% CI).

    commons-arena tournament --scenarios standard elevated crisis --allocators edf learned:runs/x/checkpoint

Writes ``standings.{csv,md,png}`` plus the per-scenario evaluation tables and score plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from openskill.models import PlackettLuce

from commons_arena.enums import ALLOCATOR
from experiments.evaluation.evaluate import EvaluationResult, evaluate, markdown_table, write_tables


@dataclass
class TournamentResult:
    evaluation: EvaluationResult
    standings: list[dict[str, Any]] = field(default_factory=list)


def match_ranks(returns: Sequence[float]) -> list[int]:
    """Competition ranks, 1 = best: higher return ranks better, ties share the rank."""
    order = sorted(set(returns), reverse=True)
    position = {value: 1 + sum(1 for r in returns if r > value) for value in order}
    return [position[r] for r in returns]


def rate(evaluation: EvaluationResult, scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int]):
    model = PlackettLuce()
    ratings = {a: model.rating(name=a) for a in allocators}
    wins = dict.fromkeys(allocators, 0)
    for scenario in scenarios:
        for k, _seed in enumerate(seeds):
            returns = [evaluation.episodes[(scenario, a)][k][ALLOCATOR]["return"] for a in allocators]
            ranks = match_ranks(returns)
            for a, r in zip(allocators, ranks, strict=True):
                wins[a] += r == 1
            rated = model.rate([[ratings[a]] for a in allocators], ranks=ranks)
            ratings = {a: team[0] for a, team in zip(allocators, rated, strict=True)}
    return ratings, wins


def tournament(
    scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int], progress: bool = True
) -> TournamentResult:
    evaluation = evaluate(scenarios, allocators, seeds, misreport=False, progress=progress)
    lineup = list(dict.fromkeys(row["allocator"] for row in evaluation.rows))
    ratings, wins = rate(evaluation, scenarios, lineup, seeds)
    standings = []
    for a in lineup:
        rows = [row for row in evaluation.rows if row["allocator"] == a]
        standings.append(
            {
                "allocator": a,
                "rating": float(ratings[a].ordinal()),  # mu - 3 sigma: a conservative skill estimate
                "mu": float(ratings[a].mu),
                "sigma": float(ratings[a].sigma),
                "mean_score": float(np.nanmean([row["score"] for row in rows])),
                "mean_ratio": float(np.nanmean([row["ratio"] for row in rows])),
                "wins": wins[a],
                "matches": len(scenarios) * len(seeds),
            }
        )
    standings.sort(key=lambda row: row["rating"], reverse=True)
    return TournamentResult(evaluation=evaluation, standings=standings)


def write_standings(result: TournamentResult, out: Path) -> list[Path]:
    import csv

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    written = write_tables(result.evaluation, out)
    rows = result.standings
    with open(out / "standings.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "standings.md").write_text(markdown_table(rows) + "\n")
    fig = Figure(figsize=(7, 0.45 * len(rows) + 1.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    names = [r["allocator"] for r in rows][::-1]
    ax.barh(names, [r["mu"] for r in rows][::-1], xerr=[3 * r["sigma"] for r in rows][::-1], color="#4e79a7", capsize=3)
    ax.set_xlabel("openskill rating mu (error bar: 3 sigma)")
    ax.set_title(f"tournament standings ({rows[0]['matches']} matches)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "standings.png")
    return written + [out / "standings.csv", out / "standings.md", out / "standings.png"]
