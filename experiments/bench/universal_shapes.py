"""Which shape-free allocator network generalises to clusters it never saw: cells or padding.

Both see the same padded cell view (``policies.universal``); they differ in their weights:

* ``cells``: one MLP per (team, tier) cell, shared by every cell (59 -> 128 -> 128 -> 5);
* ``padded``: RLlib's MLP over the whole padded view, one output block per cell slot
  (1,920 -> 256 -> 256 -> 32 x 5), so a slot's weights learn only from scenarios that fill it.

RL on a 2-core machine moves a policy too slowly to tell them apart in minutes (both still
played ``planner`` greedily after 10 PPO iterations), so this measures what each can *learn
and carry over* directly: both are fitted by supervised learning to the same target, the
correction of the ``need`` codec that the hidden state says is right (the true need minus the
planner's estimate, cut to -2..+2: what a learned ``need`` allocator is after; reading the
hidden state makes this a measuring device, never a policy), on scenarios of the training
split, then scored on *other* generated clusters of the family (neither split holds them: the
held-out split is never read). Reported: per-cell accuracy on the training scenarios and on
the unseen ones, over every real cell and over the cells where a correction is due (the
target is not 0; also on the unseen largest shapes: 7-8 teams or 4 tiers), beside always
choosing the zero correction (the planner).

    python -m experiments.bench.universal_shapes --train-scenarios 60 --test-scenarios 40
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import tyro
from torch import nn

from commons_arena.enums import ALLOCATOR
from commons_arena.family import generate_scenarios, heldout_hashes, load_split
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.tables import markdown_table
from experiments.seeds import SEED_RANGES
from experiments.training.cell_mlp import cell_mlp
from experiments.training.distil import teacher_codes
from policies.focal import FocalEnv
from policies.universal import CELLS, MAX_TEAMS, MAX_TIERS, N_FEATURES, OBS_SIZE, UniversalInterface, split_view

UNSEEN_SEED = 2029  # generation seed of the unseen clusters (neither split's seed)


@dataclass
class Args:
    train_scenarios: int = 60
    """scenarios of broad-train the networks are fitted on"""
    test_scenarios: int = 40
    """generated clusters of the family in no split, scored zero-shot"""
    episodes: int = 3
    """episodes per scenario (the measure seed range)"""
    epochs: int = 60
    """passes over the training samples"""
    seed: int = 0


def samples(configs: tuple[ScenarioConfig, ...], episodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(views, target codes per padded cell, large-shape flag per sample) from the planner's play."""
    views, targets, large = [], [], []
    first = SEED_RANGES["measure"].first
    for config in configs:
        interface = UniversalInterface(config)
        N, T = len(config.teams), len(config.gpu_tiers)
        for seed in range(first, first + episodes):
            env = FocalEnv.from_scenario(config, [ALLOCATOR])
            obs, _ = env.reset(seed=seed)
            interface.reset()
            while env.agents:
                view = interface.observe(obs[ALLOCATOR])
                estimate, _ = interface.codec.proposal(obs[ALLOCATOR])
                gap = teacher_codes(env.arena.hidden_state().need, estimate, interface.codec.DELTAS, 2)
                target = np.full((MAX_TEAMS, MAX_TIERS), interface.batched.zero)
                target[:N, :T] = gap
                views.append(view)
                targets.append(target.ravel())
                large.append(N >= 7 or T == MAX_TIERS)
                obs, *_ = env.step({ALLOCATOR: interface.act(obs[ALLOCATOR], np.full(CELLS, interface.batched.zero))})
    return np.stack(views).astype(np.float32), np.stack(targets).astype(np.int64), np.array(large)


def logits_of(kind: str, net: nn.Module, views: torch.Tensor) -> torch.Tensor:
    """(samples, cells, 5) logits."""
    if kind == "cells":
        cells, _ = views[:, : CELLS * N_FEATURES].reshape(-1, CELLS, N_FEATURES), None
        return net(cells)  # type: ignore[no-any-return]
    return net(views).reshape(-1, CELLS, 5)  # type: ignore[no-any-return]


def fit(kind: str, views: np.ndarray, targets: np.ndarray, epochs: int, seed: int) -> tuple[nn.Module, float]:
    torch.manual_seed(seed)
    net = cell_mlp([N_FEATURES, 128, 128], 5) if kind == "cells" else cell_mlp([OBS_SIZE, 256, 256], CELLS * 5)
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.from_numpy(views), torch.from_numpy(targets)
    mask = torch.from_numpy(split_view(views)[1]) > 0.5
    gen = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    for _ in range(epochs):
        for batch in torch.randperm(len(x), generator=gen).split(256):
            loss = nn.functional.cross_entropy(logits_of(kind, net, x[batch])[mask[batch]], y[batch][mask[batch]])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return net, time.perf_counter() - started


def accuracy(chosen: np.ndarray, views: np.ndarray, targets: np.ndarray, due: bool = False) -> float:
    """Share of real cells whose code is the target (``due``: only cells where a correction is due)."""
    mask = split_view(views)[1] > 0.5
    if due:
        mask &= targets != 2
    return float((chosen == targets)[mask].mean())


def choices(kind: str, net: nn.Module | None, views: np.ndarray) -> np.ndarray:
    if net is None:  # the planner: always the zero correction
        return np.full((len(views), CELLS), 2)
    with torch.no_grad():
        return logits_of(kind, net, torch.from_numpy(views)).argmax(-1).numpy()  # type: ignore[no-any-return]


def main(args: Args) -> str:
    torch.set_num_threads(1)
    train_configs = load_split("broad-train")[: args.train_scenarios]
    known = heldout_hashes() | {c.content_hash for c in load_split("broad-train")}
    unseen = tuple(c for c in generate_scenarios("broad", args.test_scenarios * 2, UNSEEN_SEED)
                   if c.content_hash not in known)[: args.test_scenarios]
    x_train, y_train, _ = samples(train_configs, args.episodes)
    x_test, y_test, large = samples(unseen, args.episodes)
    rows = []
    for kind in ("always 0 (planner)", "cells", "padded"):
        net, seconds = (None, 0.0) if kind.startswith("always") else fit(kind, x_train, y_train, args.epochs, args.seed)
        train, test = choices(kind, net, x_train), choices(kind, net, x_test)
        rows.append({"network": kind, "parameters": 0 if net is None else sum(p.numel() for p in net.parameters()),
                     "fit_s": round(seconds, 1), "train_acc": accuracy(train, x_train, y_train),
                     "train_due_acc": accuracy(train, x_train, y_train, due=True),
                     "unseen_acc": accuracy(test, x_test, y_test),
                     "unseen_due_acc": accuracy(test, x_test, y_test, due=True),
                     "unseen_large_due_acc": accuracy(test[large], x_test[large], y_test[large], due=True)})
    table = markdown_table(rows)
    print(f"{len(train_configs)} training scenarios ({len(x_train)} ticks), {len(unseen)} unseen clusters "
          f"({len(x_test)} ticks, {int(large.sum())} of them 7-8 teams or 4 tiers)")
    print(table)
    return table


if __name__ == "__main__":
    main(tyro.cli(Args))
