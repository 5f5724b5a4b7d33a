"""The report across training seeds (``commons-arena train --train-seeds ...`` writes it).

Reads the seeds' run folders under one parent (each ``<parent>/s<seed>``) and writes into
the parent:

* ``aggregate.md`` / ``aggregate.json``: the final held-out normalised score of every seed
  (per tier for a mix), their mean and IQM with percentile-bootstrap 95 % CIs across seeds
  (:mod:`experiments.statistics`), and the paired comparison of every seed's
  ``best`` checkpoint with every scripted allocator on fresh held-out seeds
  (:func:`experiments.evaluation.checkpoint.compare_many`): per seed its mean difference, pooled
  over seeds their mean with a bootstrap CI across seeds, and the spread (min, max).
* ``vs_scripted.csv``: the comparison's rows, one per (seed, tier, scripted allocator).
* ``learning_curves.png``: the held-out score against iterations, the mean over seeds with
  a band from the lowest to the highest seed (per tier for a mix).

    commons-arena seed-report runs/allocator_mixed-mixed-seeds0-1-2 --compare-seeds 100 [--force]

With three seeds a bootstrap CI is no wider than the seeds' range: read it as how far the
figure moves between these seeds, not as the spread of all training runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.files import check_outputs, write_file
from commons_arena.inputs import load_json_object
from experiments.evaluation.evaluate import MAX_SCORE
from experiments.evaluation.tables import markdown_table, write_csv
from experiments.seeds import first_seed
from experiments.statistics import bootstrap_ci, iqm, iqm_of
from experiments.training.args import TrainArgs
from experiments.training.kinds import kind_of
from experiments.training.runs import RECORD, has_record, saved_args, saved_history

COMPARE_FIRST_SEED = first_seed("compare")  # as the main job's comparison (experiments/seeds.py)


@dataclass(frozen=True)
class SeedRun:
    seed: int
    folder: Path
    args: dict[str, Any]
    history: list[dict[str, Any]]
    final: dict[str, dict[str, Any]]  # tier -> held-out report (final_scores.json), may be empty


def seed_runs(parent: Path) -> list[SeedRun]:
    """The parent's run folders (those with a record of their arguments and a ``history.json``), by seed; each
    file checked (a damaged or hand-made one is one line naming it and the key)."""
    parent = Path(parent)
    if not parent.is_dir():
        raise ValueError(f"{parent} is not a folder: give the parent of the training seeds' run folders")
    runs = []
    for folder in sorted(p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()):
        if not has_record(folder) or not (folder / "history.json").is_file():
            continue
        args = saved_args(folder)
        history = saved_history(folder)
        if not history:
            continue  # killed before its first evaluation: not finished
        final_path = folder / "final_scores.json"
        final = load_json_object(final_path, "final scores", allow_nan=True) if final_path.exists() else {}
        for tier, report in final.items():
            score = report.get("score") if isinstance(report, dict) else None
            if isinstance(score, bool) or not isinstance(score, int | float) \
                    or not (math.isnan(score) or abs(score) <= MAX_SCORE):  # NaN: undefined where random = oracle
                raise ValueError(f"{final_path}: {tier}: expected an object with a number \"score\" of magnitude at "
                                 f"most {MAX_SCORE:.0e}")
        seed = args.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{folder}: its recorded seed must be an integer")
        runs.append(SeedRun(seed, folder, args, history, final))
    if not runs:
        raise ValueError(f"no finished run folders in {parent} (each needs {RECORD} and a history.json with "
                         "at least one evaluation)")
    seeds = [r.seed for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{parent}: two run folders have the same seed ({sorted(seeds)}): one folder per seed")
    shapes = {tuple(tiers(r)) for r in runs}
    if len(shapes) > 1:
        raise ValueError(f"{parent}: the runs were judged on different scenarios {sorted(shapes)}: not one "
                         "experiment over seeds")
    return sorted(runs, key=lambda r: r.seed)


def is_mixed(run: SeedRun) -> bool:
    """Whether the run's last evaluation scored per tier (``score/<tier>``: a mix, even of one tier)."""
    return any(key.startswith("score/") for key in run.history[-1])


def tiers(run: SeedRun) -> list[str]:
    """The scenarios the run is judged on: every tier of a mix, else the last row's scenario."""
    last = run.history[-1]
    mixed = [k.removeprefix("score/") for k in last if k.startswith("score/")]
    return mixed or [str(last["scenario"])]


def final_scores(run: SeedRun) -> dict[str, float]:
    """Tier -> the run's final held-out normalised score (``final_scores.json``, else the last
    evaluation), and ``mean`` over tiers for a mix."""
    last = run.history[-1]
    names = tiers(run)
    if run.final:
        scores = {t: float(run.final[t]["score"]) for t in names if t in run.final}
    elif is_mixed(run):
        scores = {t: float(last[f"score/{t}"]) for t in names}
    else:
        scores = {names[0]: float(last["score"])}
    if len(scores) > 1:
        scores["mean"] = float(np.mean(list(scores.values())))
    return scores


def across_seeds(values: list[float]) -> dict[str, Any]:
    """Mean and IQM with bootstrap 95 % CIs, and the range, of one figure over seeds."""
    mean, mean_low, mean_high = bootstrap_ci(values)
    middle, iqm_low, iqm_high = bootstrap_ci(values, iqm_of)
    return {"values": values, "mean": mean, "mean_ci": [mean_low, mean_high], "iqm": middle,
            "iqm_ci": [iqm_low, iqm_high], "min": float(np.min(values)), "max": float(np.max(values))}


def score_table(runs: list[SeedRun]) -> dict[str, dict[str, Any]]:
    per_seed = [final_scores(r) for r in runs]
    names = [k for k in per_seed[0] if all(k in s for s in per_seed)]
    return {name: across_seeds([s[name] for s in per_seed]) for name in names}


def pooled_comparison(rows: list[dict[str, Any]], seeds: list[int]) -> list[dict[str, Any]]:
    """Per (tier, scripted allocator): each training seed's mean paired difference, their
    mean with a bootstrap CI across seeds, and the spread."""
    pooled = []
    keys = dict.fromkeys((r["scenario"], r["versus"]) for r in rows)
    for scenario, rival in keys:
        mine = {r["checkpoint"]: r for r in rows if r["scenario"] == scenario and r["versus"] == rival}
        diffs = [float(mine[f"s{s}"]["diff"]) for s in seeds]
        stats = across_seeds(diffs)
        pooled.append({"scenario": scenario, "versus": rival, "per_seed": diffs,
                       "per_seed_ci95": [float(mine[f"s{s}"]["diff_ci95"]) for s in seeds],
                       "mean": stats["mean"], "mean_ci": stats["mean_ci"], "iqm": iqm(diffs),
                       "min": stats["min"], "max": stats["max"],
                       "seeds_above": sum(bool(mine[f"s{s}"]["beats"]) for s in seeds)})
    return pooled


def curve_rows(runs: list[SeedRun]) -> dict[str, list[dict[str, Any]]]:
    """Tier (or ``score``) -> rows of iteration, mean score over seeds and its min-max band,
    at the iterations every seed evaluated."""
    key_names = {t: f"score/{t}" for t in tiers(runs[0])} if is_mixed(runs[0]) else {"score": "score"}
    # the iterations every seed evaluated on every tier (a row judged elsewhere, a curriculum's earlier stage, lacks them)
    common = set.intersection(*({row["iteration"] for row in r.history if all(row.get(k) is not None
                                                                              for k in key_names.values())}
                                for r in runs))
    if not common:
        raise ValueError(f"{runs[0].folder.parent}: the seeds' runs share no evaluated iteration: not one experiment "
                         "over seeds (same --eval-every and budget)")
    curves: dict[str, list[dict[str, Any]]] = {}
    for label, key in key_names.items():
        rows = []
        for iteration in sorted(common):
            values = [next(row[key] for row in r.history if row["iteration"] == iteration) for r in runs]
            rows.append({"iteration": iteration, "score": float(np.mean(values)),
                         "score_low": float(np.min(values)), "score_high": float(np.max(values))})
        curves[f"{label} (mean of {len(runs)} seeds, band: min-max)"] = rows
    return curves


def _fmt_ci(stats: dict[str, Any], key: str) -> str:
    low, high = stats[f"{key}_ci"]
    return f"{stats[key]:.3f} [{low:.3f}, {high:.3f}]"


def pooled_row(row: dict[str, Any], seeds: list[int]) -> dict[str, str]:
    """One row of the pooled comparison, its cells formatted (differences with signs, ± per-seed CI)."""
    low, high = row["mean_ci"]
    per_seed = {f"seed {s}": f"{d:+.2f} ± {c:.2f}"
                for s, d, c in zip(seeds, row["per_seed"], row["per_seed_ci95"], strict=True)}
    return {"tier": row["scenario"], "versus": row["versus"], **per_seed,
            "mean over seeds [95% CI]": f"{row['mean']:+.2f} [{low:+.2f}, {high:+.2f}]",
            "min..max": f"{row['min']:+.2f}..{row['max']:+.2f}", "above": f"{row['seeds_above']}/{len(seeds)}"}


def seed_report_markdown(runs: list[SeedRun], scores: dict[str, dict[str, Any]], pooled: list[dict[str, Any]],
             compare_seeds: int) -> str:
    seeds = [r.seed for r in runs]
    head = runs[0].args
    lines = [f"# {head['experiment']} over training seeds {', '.join(map(str, seeds))}", "",
             f"Iterations per seed: {', '.join(str(r.history[-1]['iteration']) for r in runs)}; "
             "minutes: " + ", ".join(f"{r.history[-1]['minutes']:.1f}" for r in runs) + ".", "",
             "## Final held-out normalised score", "",
             "CIs: percentile bootstrap (95 %) across training seeds; with a few seeds no wider than their range.", "",
             markdown_table([{"tier": name, **{f"seed {s}": f"{v:.3f}" for s, v in zip(seeds, stats["values"], strict=True)},
                              "mean [95% CI]": _fmt_ci(stats, "mean"), "IQM [95% CI]": f"{stats['iqm']:.3f}"}
                             for name, stats in scores.items()])]
    if pooled:
        lines += ["", f"## Paired difference to every scripted allocator ({compare_seeds} fresh held-out episodes per tier, "
                  f"seeds {COMPARE_FIRST_SEED}..)", "",
                  "Each seed's `best` checkpoint minus the scripted allocator, episode by episode; per seed its mean "
                  "(± its 95% t-interval over episodes); pooled: the mean over training seeds with a bootstrap CI "
                  "across them, and the spread (min..max). `above`: seeds whose own interval lies above zero.", "",
                  markdown_table([pooled_row(row, seeds) for row in pooled])]
    else:
        lines += ["", "No paired comparison with the scripted allocators: the allocator does not learn in this run."]
    return "\n".join(lines) + "\n"


OUTPUTS = ("aggregate.md", "aggregate.json", "vs_scripted.csv", "learning_curves.png")


def write_seed_report(parent: Path, compare_seeds: int = 100, progress: bool = False, force: bool = False) -> Path:
    """Write the report across the parent's seed runs; returns ``aggregate.md``. Its files are
    never written through a symlink, nor over an earlier report without ``force``."""
    from experiments.evaluation.checkpoint import compare_many
    from experiments.viewing.plots import learning_curve

    parent = Path(parent)
    runs = seed_runs(parent)
    check_outputs(parent, OUTPUTS, force)
    scores = score_table(runs)
    head = runs[0].args
    learns_allocator = kind_of(head["experiment"]).allocator_learns(head.get("learners", TrainArgs().learners))
    curves = curve_rows(runs)
    rows: list[dict[str, Any]] = []
    pooled: list[dict[str, Any]] = []
    if learns_allocator and compare_seeds > 0:
        checkpoints = {f"s{r.seed}": r.folder / "best" for r in runs}
        episodes = list(range(COMPARE_FIRST_SEED, COMPARE_FIRST_SEED + compare_seeds))
        rows = compare_many(checkpoints, tiers(runs[0]), episodes, progress=progress)
        pooled = pooled_comparison(rows, [r.seed for r in runs])
    text = seed_report_markdown(runs, scores, pooled, compare_seeds)
    # every figure computed before the first file: a refusal or an error leaves no half report
    if rows:
        write_csv(rows, parent / "vs_scripted.csv")
    learning_curve(curves, None, parent / "learning_curves.png", y="score", x="iteration",
                   title="held-out normalised score over training seeds")
    write_file(parent / "aggregate.json", json.dumps({"seeds": [r.seed for r in runs], "final_scores": scores,
                                                      "vs_scripted": pooled}, indent=1))
    path = write_file(parent / "aggregate.md", text)
    print(text)
    return path



__all__ = ["OUTPUTS", "SeedRun", "across_seeds", "curve_rows", "final_scores", "pooled_comparison", "seed_runs",
           "write_seed_report"]
