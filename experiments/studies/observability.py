"""What an observation-only allocator could learn beyond ``planner`` (issue 29's held-out target).

Two measurements on the family's *training* split (the held-out split is never read here):

1. ``teacher``: per scenario, the privileged teacher of ``commons-arena distil`` (``planner``
   with the correction ``clip(true need - its estimate, -2, +2)`` in every (team, tier) cell, the
   need read from the hidden state) minus ``planner``, paired on the same seeds, normalised by the
   scenario's oracle - random span; and on how many scenarios the paired 95 % CI lies above 0.
   It says whether the ``need`` codec *can* beat ``planner`` scenario by scenario when the
   corrections are right.
2. ``raises``: on teacher-played states, whether a cell's true need is above the planner's
   estimate (a *raise* is due) or below it (a *cut*), predicted by a small MLP from the cell view
   the universal allocator sees (``policies.universal``) alone, and from it plus the view's
   history (the estimate's and the declaration's change since last tick, the mean rise of the
   estimate so far in the cell and in its team, last tick's estimate). ROC AUC on held-out
   scenarios (every fifth). It says whether what the teacher knows can be read off the past.

    python -m experiments.studies.observability teacher --scenarios 20 --seeds 20 [--first 20]
    python -m experiments.studies.observability raises --scenarios 40 --seeds 6

Measured figures: docs/training.md, "One allocator for any cluster".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from tyro.conf import Positional

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from experiments.seeds import first_seed
from experiments.statistics import mean_ci95
from experiments.training.distil import paired_check, play_dagger

HISTORY_FEATURES = ("estimate_change", "declared_change", "cell_mean_rise", "team_mean_rise", "last_estimate")
# seeds 700000.. (the exploit range of experiments/seeds.py): nothing is chosen on them and no training plays
# them; the scenarios are the training split's, so the benchmark's held-out split stays unread
FIRST_SEED = first_seed("exploit")


@dataclass
class ObservabilityArgs:
    """One of the two measurements on ``scenarios`` scenarios of the training split, from index ``first``."""

    study: Positional[Literal["teacher", "raises"]]  # which of the two measurements
    scenarios: int = 20  # training-split scenarios, from --first on
    first: int = 0  # the first scenario's index in the split
    seeds: int = 20  # episodes per scenario
    split: str = "broad-train"
    steps: int = 1500  # the raise/cut MLP's gradient steps (batches of 4096 cells)


def _training_scenarios(args: ObservabilityArgs) -> list[ScenarioConfig]:
    from commons_arena.family import load_split, refuse_heldout

    configs = list(load_split(args.split))[args.first: args.first + args.scenarios]
    refuse_heldout(configs, "the observability study")
    return configs


def teacher_gains(args: ObservabilityArgs) -> list[dict[str, Any]]:
    """Per scenario: the teacher's normalised gain over planner (paired, distil's check) and its 95 % CI."""
    from experiments.evaluation.engine import play, returns_of
    from policies.population import Population

    seeds = list(range(FIRST_SEED, FIRST_SEED + args.seeds))
    rows = []
    for config in _training_scenarios(args):
        population = Population.default(config)
        anchors = {name: np.mean(returns_of(play(config, population.with_agent(ALLOCATOR, name), seeds), ALLOCATOR))
                   for name in ("random", "oracle")}
        span = float(anchors["oracle"] - anchors["random"])
        teacher_minus_planner = np.array(paired_check((config, seeds, None, 0, 2)))  # no network: the teacher
        gain, half = mean_ci95((teacher_minus_planner / span).tolist())
        planner = np.mean(returns_of(play(config, population.with_agent(ALLOCATOR, "planner"), seeds), ALLOCATOR))
        rows.append({"scenario": config.name, "teams": len(config.teams), "tiers": len(config.gpu_tiers),
                     "planner": float((planner - anchors["random"]) / span),
                     "gain": gain, "ci95": half, "beats_planner": gain - half > 0})
    return rows


def history_features(cells: np.ndarray, n_teams: int, n_tiers: int) -> np.ndarray:
    """One episode's cell rows (ticks x cells x features, in the order the allocator saw them) ->
    :data:`HISTORY_FEATURES` per row (ticks x cells x 5), each from ticks up to the row's own."""
    from policies.universal import FEATURE_NAMES

    estimate = cells[:, :, FEATURE_NAMES.index("estimate")]
    declared = cells[:, :, FEATURE_NAMES.index("declared")]
    last_estimate = np.vstack([estimate[:1], estimate[:-1]])
    rise = np.maximum(estimate - last_estimate, 0.0)
    seen = np.arange(1, len(cells) + 1)[:, None]
    cell_mean_rise = np.cumsum(rise, axis=0) / seen
    team_mean_rise = np.repeat(cell_mean_rise.reshape(len(cells), n_teams, n_tiers).sum(axis=2), n_tiers, axis=1)
    return np.stack([estimate - last_estimate, declared - np.vstack([declared[:1], declared[:-1]]),
                     cell_mean_rise, team_mean_rise, last_estimate], axis=2)


def collect_cells(args: ObservabilityArgs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-played cells of every scenario: (view features, history features, label code, scenario index)."""
    views, histories, labels, where = [], [], [], []
    for index, config in enumerate(_training_scenarios(args)):
        seat = play_dagger(config, list(range(FIRST_SEED, FIRST_SEED + args.seeds)))
        N, T = len(config.teams), len(config.gpu_tiers)
        for start, end in zip(seat.starts, [*seat.starts[1:], len(seat.features)], strict=True):
            cells = np.stack(seat.features[start:end])  # ticks x cells x features
            views.append(cells.reshape(-1, cells.shape[-1]))
            histories.append(history_features(cells, N, T).reshape(-1, len(HISTORY_FEATURES)))
            labels.append(np.concatenate(seat.labels[start:end]))
            where.append(np.full(cells.shape[0] * cells.shape[1], index))
    return np.concatenate(views), np.concatenate(histories), np.concatenate(labels), np.concatenate(where)


def held_out_auc(features: np.ndarray, target: np.ndarray, held: np.ndarray, steps: int, seed: int = 0) -> float:
    """A two-layer MLP fitted to ``target`` (bool) on the rows not ``held``; its ROC AUC on the ``held`` rows."""
    import torch
    from scipy.stats import mannwhitneyu

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x, y = torch.from_numpy(features.astype(np.float32)), torch.from_numpy(target.astype(np.float32))
    net = torch.nn.Sequential(torch.nn.Linear(features.shape[1], 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
    fit = np.flatnonzero(~held)
    for _ in range(steps):
        batch = torch.from_numpy(rng.choice(fit, size=min(4096, len(fit)), replace=False))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x[batch]).squeeze(1), y[batch])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        score = net(x[torch.from_numpy(np.flatnonzero(held))]).squeeze(1).numpy()
    truth = target[held]
    if truth.all() or not truth.any():
        raise ValueError("the held-out rows hold only one class: use more scenarios")
    return float(mannwhitneyu(score[truth], score[~truth]).statistic / (truth.sum() * (~truth).sum()))


def raise_predictability(args: ObservabilityArgs) -> list[dict[str, Any]]:
    """ROC AUC of a due raise and a due cut, from the cell view alone and with its history."""
    from policies.codecs import NeedResidualCodec

    views, histories, labels, where = collect_cells(args)
    zero = NeedResidualCodec.DELTAS.index(0)
    held = where % 5 == 0  # whole scenarios held out: the score is on clusters the fit never saw
    rows = []
    for name, target in (("raise", labels > zero), ("cut", labels < zero)):
        for inputs, features in (("cell view", views), ("cell view + history", np.hstack([views, histories]))):
            rows.append({"due": name, "inputs": inputs, "share": float(target.mean()), "rows": int(len(target)),
                         "auc": held_out_auc(features, target, held, args.steps)})
    return rows


def main(args: ObservabilityArgs) -> list[dict[str, Any]]:
    from experiments.evaluation.tables import markdown_table

    rows = teacher_gains(args) if args.study == "teacher" else raise_predictability(args)
    print(markdown_table(rows))
    if args.study == "teacher":
        wins = sum(r["beats_planner"] for r in rows)
        print(f"\nthe teacher beats planner (paired 95 % CI above 0) on {wins} of {len(rows)} scenarios")
    return rows


if __name__ == "__main__":
    import tyro

    main(tyro.cli(ObservabilityArgs))


__all__ = ["HISTORY_FEATURES", "ObservabilityArgs", "collect_cells", "history_features", "main", "raise_predictability",
           "teacher_gains"]
