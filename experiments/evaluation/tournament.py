"""Tournaments for any seat: every entrant plays every (scenario, background, seed) cell.

    commons-arena tournament ROSTER.toml                      # a roster (experiments/evaluation/roster.py)
    commons-arena tournament --scenarios standard elevated --allocators edf best_fit learned:runs/x/best

The flag form is a roster with the allocator seat, the scenarios' default backgrounds and
the given allocators. Each cell is played by every player (entrants and the score's
anchors) from the same seed, so their results are paired. Episodes go through
:func:`policies.focal.run_episode` with policies built once per (scenario,
background, player) and reset per episode, so a tournament row equals the
``commons-arena evaluate`` episode on the same seed.

The episodes are played and stored by the engine (:mod:`experiments.evaluation.engine`:
results are rows of a SQLite store, a rerun plays only the missing ones, in-process or as
Ray tasks). **Aggregates** (:mod:`experiments.evaluation.metagame`) are computed from the
stored rows of this roster only; this module writes them as tables and figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, write_figure
from experiments.evaluation.metagame import Aggregates, aggregate
from experiments.evaluation.results import DEFAULT_OPTIONS, PlayOptions, PlayReport, fill_store, planned_keys
from experiments.evaluation.roster import Roster, RosterError, roster_from_dict
from experiments.evaluation.store import ResultStore
from experiments.evaluation.tables import write_table


@dataclass
class TournamentResult:
    roster: Roster
    play: PlayReport
    aggregates: Aggregates
    store: Path
    written: list[Path] = field(default_factory=list)


def run_tournament(roster: Roster, out: Path, db: Path | None = None,
                   options: PlayOptions = DEFAULT_OPTIONS) -> TournamentResult:
    """Play what the store lacks, then write every table and figure of ``roster`` to ``out``."""
    path = db if db is not None else out / "results.sqlite"
    with ResultStore(path) as store:
        report = fill_store([roster], store, options)
        rows = store.rows(planned_keys(roster))
    result = TournamentResult(roster, report, aggregate(roster, rows), path)
    result.written = write_reports(roster, result.aggregates, out)
    return result


# --------------------------------------------------------------------------- tables and figures


def write_reports(roster: Roster, agg: Aggregates, out: Path) -> list[Path]:
    """``scores``, ``standings``, ``win_matrix``, ``crossplay`` and ``metagame`` as CSV + markdown;
    ``scores.png``, ``standings.png``, ``win_matrix.png`` and ``crossplay.png``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from experiments.viewing.plots import heatmap, score_bars

    make_folder(out)
    written: list[Path] = []
    for name in ("scores", "standings", "win_matrix", "crossplay", "metagame"):
        written += write_table(getattr(agg, name), out, name)
    low, high = roster.anchor("low"), roster.anchor("high")
    reference = {low.name if low else "lowest": 0.0, high.name if high else "best entrant": 1.0}
    if any(math.isfinite(r["score"]) for r in agg.episode_scores):
        written.append(score_bars(agg.episode_scores, out / "scores.png", category="scenario", group="policy",
                                  title=f"{roster.seat} seat: normalised score per scenario / background",
                                  reference_lines=reference))
    rows = agg.standings
    fig = Figure(figsize=(7, 0.45 * len(rows) + 1.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    names = [r["player"] for r in rows][::-1]
    ax.barh(names, [r["mu"] for r in rows][::-1], xerr=[3 * r["sigma"] for r in rows][::-1], color="#4e79a7", capsize=3)
    ax.set_xlabel("openskill rating mu (error bar: 3 sigma)")
    ax.set_title(f"{roster.seat} seat: standings ({rows[0]['matches']} matches)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    write_figure(out / "standings.png", fig)
    written.append(out / "standings.png")
    players = [r["player"] for r in agg.win_matrix]
    written.append(heatmap([[r[p] for p in players] for r in agg.win_matrix], players, players, out / "win_matrix.png",
                           title="how often the row beats the column (same cell)", xlabel="opponent",
                           ylabel="player", colorbar="win rate", cmap="RdBu", limits=(0.0, 1.0)))
    backgrounds = list(roster.backgrounds)
    entrants = [r["entrant"] for r in agg.crossplay]
    written.append(heatmap([[r[b] for b in backgrounds] for r in agg.crossplay], entrants, backgrounds,
                           out / "crossplay.png", title=f"cross-play: mean normalised score ({roster.seat} seat)",
                           xlabel="background", ylabel="entrant", colorbar="normalised score"))
    return written


# --------------------------------------------------------------------------- the flag form


def flag_roster(scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int]) -> Roster:
    """``--scenarios ... --allocators ...``: the allocator seat against each scenario's own background."""
    if not allocators:
        raise RosterError("--allocators: give at least one allocator")
    return roster_from_dict(
        {"seat": ALLOCATOR, "scenarios": list(scenarios), "seeds": list(seeds), "entrants": list(dict.fromkeys(allocators))},
        source="(command-line flags)",
    )


__all__ = ["TournamentResult", "flag_roster", "run_tournament", "write_reports"]
