"""Does a learned allocator beat every scripted one? Paired, on held-out seeds, per tier.

Plays the checkpoint and every scripted allocator (the heuristics and ``planner``; random
and the oracle anchor the score) on the same seeds of each scenario, and prints per
scenario the learned allocator's normalised score and plain ratio, and its paired
difference (mean ± 95% CI over the seeds) to *every* scripted allocator. The verdict per
scenario is "beats all" when every difference is > 0 with its CI above zero.

    commons-arena compare-checkpoint runs/allocator_mixed-mixed-s0/best --seeds 100 --first-seed 7000

The main job uses 100 seeds per tier: on ``standard`` the learned allocator's lead over
``planner`` is about +8 return with a per-seed standard deviation near 30, so 30 seeds give
a 95% interval of about ±11 (the lead shows on some blocks of 30 seeds, not on others)
and 100 seeds about ±5.

The seeds are the ``compare`` range of :data:`experiments.seeds.SEED_RANGES`: held out from
training, from its evaluation (which chose ``best``) and from the tournament. The scores
are ``commons-arena evaluate``'s rows (one evaluation plays every allocator once); this
module only adds the paired difference to each scripted allocator. Writes
``<out>/checkpoint_vs_scripted.{csv,md}``. An evaluation, not a test: it takes a minute or two per
scenario on two cores (the oracle's MILPs dominate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from commons_arena.files import make_folder
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, allocator_returns, evaluate
from experiments.evaluation.tables import markdown_table, write_table
from experiments.statistics import paired_difference
from policies.learned import LEARNED_PREFIX


def compare(checkpoint: str | Path, scenarios: tuple[str, ...], seeds: list[int],
            scripted: tuple[str, ...] = BASELINE_ALLOCATORS, progress: bool = True) -> list[dict[str, Any]]:
    """One row per (scenario, scripted allocator): the learned one's paired difference to it."""
    rows = compare_many({"learned": checkpoint}, scenarios, seeds, scripted, progress)
    return [{k: v for k, v in row.items() if k != "checkpoint"} for row in rows]


def compare_many(checkpoints: Mapping[str, str | Path], scenarios: Sequence[str], seeds: list[int],
                 scripted: tuple[str, ...] = BASELINE_ALLOCATORS, progress: bool = True) -> list[dict[str, Any]]:
    """:func:`compare` for several checkpoints (label -> folder) on the same seeds, in one
    evaluation (the scripted allocators and the anchors play once): one row per (checkpoint,
    scenario, scripted allocator), labelled ``checkpoint``."""
    learned = {label: f"{LEARNED_PREFIX}{path}" for label, path in checkpoints.items()}
    result = evaluate(scenarios, [*scripted, *learned.values()], seeds, misreport=False, progress=progress)
    rows = []
    table = {(row["scenario"], row["allocator"]): row for row in result.rows}  # evaluate's scores
    for label, entrant in learned.items():
        for scenario in scenarios:
            mine = table[(scenario, entrant)]
            for rival in scripted:
                diff, ci = paired_difference(allocator_returns(result.episodes[(scenario, entrant)]),
                                             allocator_returns(result.episodes[(scenario, rival)]))
                rows.append({
                    "checkpoint": label, "scenario": scenario, "versus": rival, "episodes": len(seeds),
                    "learned_score": mine["score"], "learned_ratio": mine["ratio"],
                    "versus_score": table[(scenario, rival)]["score"],
                    "diff": diff, "diff_ci95": ci, "beats": bool(diff - ci > 0),
                })
    return rows


def verdicts(rows: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == scenario]
        lost = [r["versus"] for r in mine if not r["beats"]]
        out[scenario] = "beats all" if not lost else "not above: " + ", ".join(lost)
    return out


def checkpoint_report(checkpoint: Path, scenarios: tuple[str, ...], seeds: list[int], scripted: tuple[str, ...],
           out: Path) -> list[dict[str, Any]]:
    """``commons-arena compare-checkpoint``: the rows printed, the verdicts, and the table written to ``out``."""
    rows = compare(checkpoint, scenarios, seeds, scripted)
    print(markdown_table(rows))
    for scenario, verdict in verdicts(rows).items():
        print(f"{scenario}: {verdict}")
    make_folder(out)
    write_table(rows, out, "checkpoint_vs_scripted")
    return rows
