"""A universal allocator taught by a privileged need teacher (issue 29): DAgger on the cell policy.

    commons-arena distil --split broad-train --out runs/distil

**Why.** With the ``need`` codec the allocator's decision is one correction per (team, tier)
cell to the planner's need estimate. Reinforcement learning sees one reward per tick for
all of a tick's ~20 cells, and in the universal runs (docs/training.md, "What it reached")
that shared signal taught the cell policy nothing better than the zero code, i.e.
``planner``. But what a cell's correction *should* be is known during training: the env's
hidden state holds every team's true need this tick (the quantity the planner estimates
from declarations). Played with the correction ``clip(true need - estimate, -2, 2)`` in
every cell, the planner scores far above itself on most training scenarios (the
teacher's row this command prints first). That teacher is privileged, so it cannot play;
but its labels can teach a policy that sees only the allocator's observation. This is
"learning by cheating" (Chen et al., 2019) with DAgger (Ross et al., 2011):

1. **Collect**: play training-split scenarios (and any named shipped ones) with their
   default populations; in every allocator tick, record each real cell's features
   (:class:`policies.universal.CellEncoder`, what the student sees) and the teacher's code
   for it (from :meth:`commons_arena.arena.ArenaEnv.hidden_state`, which only the label
   reads). Round 1 is played by the teacher (so the states are those a good correction
   leads to); round ``k > 1`` by the current student, with the teacher's action in a share
   ``beta_k = teacher_share ** (k - 1)`` of ticks, so the student is labelled on the
   states its own mistakes reach (DAgger's aggregation: every round's rows are kept).
2. **Fit**: the cell policy (the same MLP as :class:`experiments.training.cell_module.CellPPOModule`'s
   ``pi``) by cross-entropy on every row so far.
3. **Check** each round: the greedy student against ``planner`` on training-split scenarios
   with seeds it never played (paired per episode; the ``distil_check`` block of experiments/seeds.py).

It writes one data-only universal checkpoint (``learned:<out>``, the same files as ``train
--network cells``) after every round, and ``distil.json`` (rounds, accuracies, the check).
Nothing here reads the held-out split: benchmark the result with
``commons-arena benchmark learned:<out> --suite heldout-allocator``. ``train --network cells
--init-from learned:<out>`` continues it with PPO.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, write_arrays, write_file
from experiments.seeds import SEED_RANGES

if TYPE_CHECKING:  # the command line imports DistilArgs; the rest loads when a run starts
    from commons_arena.scenario import ScenarioConfig
    from policies.checkpoint_format import PolicyNetwork
    from policies.universal import CellNetwork

DISTIL_FILE = "distil.json"
ROWS_FILE = "rows.npz"  # every round's (features, teacher code) rows so far: what the last fit read
COLLECT_FIRST_SEED = SEED_RANGES["training"].first  # the episodes it learns from are training episodes
CHECK_FIRST_SEED = SEED_RANGES["distil_check"].first  # never played while collecting
MAX_DISTIL_ROUNDS = 1_000
MAX_DISTIL_SCENARIOS = 100_000
MAX_CLIP = 64  # a correction of more GPUs than any tier holds asks nothing new
MAX_COLLECT_EPISODES = 1_000_000  # rounds x seeds: the training seed range's block per scenario


@dataclass(frozen=True)
class DistilArgs:
    """What ``commons-arena distil`` runs (the command's flags)."""

    split: str = "broad-train"
    """the training split whose scenarios are played (never a held-out one: refused)"""
    limit: int = 0
    """play only the split's first N scenarios (0: all of them)"""
    scenarios: tuple[str, ...] = ()
    """shipped scenarios or scenario files played beside the split (e.g. standard elevated crisis)"""
    rounds: int = 4
    """DAgger rounds: round 1 is played by the teacher, later ones mostly by the student"""
    seeds: int = 4
    """episodes per scenario per round (training seeds, a new block each round)"""
    teacher_share: float = 0.5
    """the share of ticks the teacher plays in round k is teacher_share ** (k - 1)"""
    clip: int = 2
    """the largest correction the teacher asks for (the need codec's corrections are -2 .. +2)"""
    hidden: tuple[int, ...] = (128, 128)
    """the cell policy's hidden layers (train --network cells --hidden must match to continue it with PPO)"""
    epochs: int = 20
    """passes over every row so far, each round"""
    lr: float = 1e-3
    """Adam's learning rate"""
    batch: int = 1024
    """rows per gradient step"""
    check_scenarios: int = 24
    """training-split scenarios of each round's paired check against planner"""
    check_seeds: int = 4
    """seeds per check scenario (seeds of their own, never played while collecting)"""
    workers: int = 2
    """processes that play episodes"""
    seed: int = 0
    """the fit's seed (row order, initial weights)"""
    out: Path = Path("runs/distil")
    """folder of the universal checkpoint (learned:<out>), distil.json and rows.npz"""

    def validate(self) -> None:
        """Every number bounded on both sides (the training limits of ``experiments.training.args``)."""
        from experiments.training.args import (
            MAX_BATCH,
            MAX_EPOCHS,
            MAX_EVAL_SEEDS,
            MAX_HIDDEN,
            MAX_LAYERS,
            MAX_LR,
            MAX_RUNNERS,
            MAX_TRAIN_SEED,
        )

        bounded = [("--rounds", self.rounds, 1, MAX_DISTIL_ROUNDS), ("--limit", self.limit, 0, MAX_DISTIL_SCENARIOS),
                   ("--seeds", self.seeds, 1, MAX_EVAL_SEEDS), ("--epochs", self.epochs, 1, MAX_EPOCHS),
                   ("--batch", self.batch, 1, MAX_BATCH), ("--workers", self.workers, 1, MAX_RUNNERS),
                   ("--clip", self.clip, 1, MAX_CLIP), ("--check-scenarios", self.check_scenarios, 1, MAX_DISTIL_SCENARIOS),
                   ("--check-seeds", self.check_seeds, 1, MAX_EVAL_SEEDS), ("--seed", self.seed, 0, MAX_TRAIN_SEED)]
        for flag, value, low, high in bounded:
            if not low <= value <= high:
                raise ValueError(f"{flag} must be in [{low}, {high}], got {value}")
        checks = [(math.isfinite(self.teacher_share) and 0.0 <= self.teacher_share <= 1.0,
                   f"--teacher-share must be in [0, 1], got {self.teacher_share}"),
                  (math.isfinite(self.lr) and 0 < self.lr <= MAX_LR, f"--lr must be in (0, {MAX_LR}], got {self.lr}"),
                  (1 <= len(self.hidden) <= MAX_LAYERS and min(self.hidden) >= 1 and max(self.hidden) <= MAX_HIDDEN,
                   f"--hidden needs 1 to {MAX_LAYERS} layers of 1 to {MAX_HIDDEN} units, got {list(self.hidden)[:10]}"),
                  (self.rounds * self.seeds <= MAX_COLLECT_EPISODES,
                   f"--rounds x --seeds must be at most {MAX_COLLECT_EPISODES} episodes per scenario, got "
                   f"{self.rounds * self.seeds}"),
                  (len(self.scenarios) == len(set(self.scenarios)),
                   f"--scenarios names a scenario more than once: {list(self.scenarios)[:10]}")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def teacher_codes(need: np.ndarray, estimate: np.ndarray, deltas: Sequence[int], clip: int) -> np.ndarray:
    """The teacher's code per (team, tier): the correction ``clip(need - estimate)`` as an index
    into the codec's ``deltas`` (the nearest delta when the codec has no such correction)."""
    wanted = np.clip(np.asarray(need, dtype=np.int64) - np.asarray(estimate, dtype=np.int64), -clip, clip)
    table = np.asarray(deltas, dtype=np.int64)
    return np.abs(wanted[..., None] - table).argmin(axis=-1).astype(np.int64)


class DaggerAllocator:
    """The allocator seat while collecting: records (features, teacher code) of every real cell
    each tick and plays the teacher's codes (a share ``beta`` of ticks) or the student's greedy ones.

    It holds the env only to read the hidden need for the label (the privileged part); the
    student's input is the universal view alone."""

    def __init__(self, env: Any, student: CellNetwork | None, beta: float, clip: int, codec: str = "need",
                 record: bool = True) -> None:
        from policies.universal import UniversalInterface

        self.env = getattr(env, "unwrapped", env)
        self.interface = UniversalInterface(self.env.config, ALLOCATOR, codec)
        self.student, self.beta, self.clip = student, float(beta), int(clip)
        self.deltas = self.interface.codec.DELTAS
        self.record = record  # False: play the teacher / student only (the paired check keeps no rows)
        self.features: list[np.ndarray] = []  # one (real cells x N_FEATURES) array per tick played
        self.labels: list[np.ndarray] = []
        self.starts: list[int] = []  # per episode: the index of its first tick in features / labels
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        self.interface.reset()
        self.rng = np.random.default_rng(seed)
        self.starts.append(len(self.features))

    def act(self, observation: np.ndarray) -> np.ndarray:
        from policies.universal import MAX_TEAMS, MAX_TIERS, N_FEATURES, split_view

        view = self.interface.observe(observation)
        estimate = self.interface.codec.planner.last_estimate[0]  # the one arena's
        N, T = self.interface.batched.encoder.n_teams, self.interface.batched.encoder.n_tiers
        label = teacher_codes(self.env.hidden_state().need, estimate, self.deltas, self.clip)
        if self.record:
            cells = split_view(view)[0].reshape(MAX_TEAMS, MAX_TIERS, N_FEATURES)[:N, :T]  # what the student sees
            self.features.append(cells.reshape(-1, N_FEATURES).astype(np.float32))
            self.labels.append(label.ravel())
        padded = np.full((MAX_TEAMS, MAX_TIERS), self.interface.batched.zero, dtype=np.int64)
        if self.student is None or self.rng.random() < self.beta:
            padded[:N, :T] = label
        else:
            padded = self.student.greedy(view).reshape(MAX_TEAMS, MAX_TIERS)
        return self.interface.act(observation, padded.ravel())


def play_dagger(config: ScenarioConfig, seeds: Sequence[int], student: CellNetwork | None = None,
                beta: float = 1.0, clip: int = 2) -> DaggerAllocator:
    """Play ``seeds`` of ``config`` with its default population and one :class:`DaggerAllocator`
    in the allocator seat (the teacher alone by default); that seat, holding every tick's rows."""
    from experiments.evaluation.engine import play
    from policies.population import Population

    made: list[DaggerAllocator] = []

    def lineup(env: Any) -> dict[str, Any]:
        if not made:
            made.append(DaggerAllocator(env, student, beta, clip))
        return Population.default(config).build(env.config, env=env, strict=False) | {ALLOCATOR: made[0]}
    list(play(config, lineup, seeds))
    return made[0]


def _collect(job: tuple[ScenarioConfig, list[int], PolicyNetwork | None, float, int, int]
             ) -> tuple[np.ndarray, np.ndarray]:
    """Play one scenario's seeds (a worker's task); the rows its allocator seat recorded."""
    from policies.universal import CellNetwork

    config, seeds, network, beta, clip, zero = job
    seat = play_dagger(config, seeds, None if network is None else CellNetwork(network, zero), beta, clip)
    return np.concatenate(seat.features), np.concatenate(seat.labels)


def paired_check(job: tuple[ScenarioConfig, list[int], PolicyNetwork | None, int, int]) -> list[float]:
    """Per seed: the greedy student's allocator return minus ``planner``'s (same seeds, default
    population); with no network, the (privileged) teacher's."""
    from experiments.evaluation.engine import play, returns_of
    from policies.learned import LearnedPolicy
    from policies.population import Population

    config, seeds, network, _, clip = job  # the student's zero code: the need codec's (LearnedPolicy.cells)
    population = Population.default(config)

    def lineup(env: Any) -> dict[str, Any]:
        policies = population.build(env.config, env=env, strict=False)
        policies[ALLOCATOR] = (DaggerAllocator(env, None, 1.0, clip, record=False) if network is None
                               else LearnedPolicy.cells(network, config))
        return policies
    mine = returns_of(play(config, lineup, seeds), ALLOCATOR)
    theirs = returns_of(play(config, population.with_agent(ALLOCATOR, "planner"), seeds), ALLOCATOR)
    return [a - b for a, b in zip(mine, theirs, strict=True)]


def fit_student(features: np.ndarray, labels: np.ndarray, args: DistilArgs, n_actions: int, zero: int,
                start: Any = None, groups: np.ndarray | None = None) -> tuple[Any, dict[str, float]]:
    """The cell MLP fitted by cross-entropy (continuing ``start`` when given); its accuracy on
    rows held out of the fit, beside the zero code's (``planner``'s) accuracy.

    ``groups`` (one id per row, e.g. the collection a row came from: one scenario's episodes in
    one round) holds out a tenth of the *groups* whole: rows of one episode are alike tick to
    tick, so rows held out one by one would score the fit on near-copies of what it saw. With
    no groups, a tenth of the rows."""
    import torch

    from experiments.training.cell_mlp import cell_mlp
    from policies.universal import N_FEATURES

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same rows give the same network on any machine
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if groups is None:
        order = rng.permutation(len(labels))
        held = np.sort(order[: max(1, len(order) // 10)])
    else:
        ids = np.unique(groups)
        held_ids = rng.permutation(ids)[: max(1, len(ids) // 10)]
        held = np.flatnonzero(np.isin(groups, held_ids))
    used = np.setdiff1d(np.arange(len(labels)), held)
    if len(used) == 0:
        raise ValueError("fit_student: nothing left to fit after holding out a tenth (one group only?)")
    x, y = torch.from_numpy(features), torch.from_numpy(labels)
    net = start if start is not None else cell_mlp([N_FEATURES, *args.hidden], n_actions)
    optimiser = torch.optim.Adam(net.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for batch in np.array_split(rng.permutation(used), max(1, len(used) // args.batch)):
            index = torch.from_numpy(batch)
            optimiser.zero_grad()
            loss = loss_fn(net(x[index]), y[index])
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        predicted = net(x[torch.from_numpy(held)]).argmax(-1).numpy()
    torch.set_num_threads(threads)
    truth = labels[held]
    return net, {"rows": int(len(labels)), "held_rows": int(len(held)), "held_accuracy": float((predicted == truth).mean()),
                 "zero_accuracy": float((truth == zero).mean())}


def distil_scenarios(args: DistilArgs) -> list[ScenarioConfig]:
    from commons_arena.family import load_split, refuse_heldout
    from commons_arena.scenario import load_scenario

    split = list(load_split(args.split))
    configs = (split[: args.limit] if args.limit else split) + [load_scenario(name) for name in args.scenarios]
    refuse_heldout(configs, "distil")
    return configs


def distil(args: DistilArgs) -> dict[str, Any]:
    """Run every round (see the module docstring); returns what ``distil.json`` holds."""
    from experiments.statistics import mean_ci95
    from experiments.training.cell_mlp import network_from_cell_mlp
    from policies.learned import save_universal_policy
    from policies.universal import BatchUniversalInterface

    args.validate()
    configs = distil_scenarios(args)
    probe = BatchUniversalInterface(configs[0], ALLOCATOR, "need")
    n_actions, zero = probe.n_actions, probe.zero
    check = configs[: args.check_scenarios]
    check_seeds = list(range(CHECK_FIRST_SEED, CHECK_FIRST_SEED + args.check_seeds))
    make_folder(args.out)
    features: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    groups: list[np.ndarray] = []  # per row: which (round, scenario) collection it came from
    rounds: list[dict[str, Any]] = []
    net: Any = None
    network: PolicyNetwork | None = None
    trained_on = f"split:{args.split}" + "".join(f"+{name}" for name in args.scenarios)

    def paired(pool: ProcessPoolExecutor, network: PolicyNetwork | None) -> tuple[float, float, int]:
        gains = [g for part in pool.map(paired_check, [(c, check_seeds, network, zero, args.clip) for c in check])
                 for g in part]
        mean, half = mean_ci95(gains)
        return mean, half, len(gains)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        teacher, teacher_half, _ = paired(pool, None)
        print(f"the teacher (privileged: plays clip(true need - estimate)) - planner: {teacher:+.1f} ± {teacher_half:.1f} "
              f"on the check's {len(check) * len(check_seeds)} episodes", flush=True)
        for k in range(1, args.rounds + 1):
            start = time.perf_counter()
            beta = args.teacher_share ** (k - 1) if network is not None else 1.0
            first = COLLECT_FIRST_SEED + (k - 1) * args.seeds
            jobs = [(config, list(range(first, first + args.seeds)), network, beta, args.clip, zero) for config in configs]
            played = list(pool.map(_collect, jobs, chunksize=4))
            features += [f for f, _ in played]
            labels += [y for _, y in played]
            groups += [np.full(len(y), len(groups) + j, dtype=np.int64) for j, (_, y) in enumerate(played)]
            rows_x, rows_y, rows_g = np.concatenate(features), np.concatenate(labels), np.concatenate(groups)
            write_arrays(args.out / ROWS_FILE, features=rows_x, labels=rows_y, groups=rows_g)
            net, accuracy = fit_student(rows_x, rows_y, args, n_actions, zero, net, rows_g)
            network = network_from_cell_mlp(net, n_actions)
            save_universal_policy(args.out, network, trained_on, "", codec="need")
            mean, half, episodes = paired(pool, network)
            row = {"round": k, "beta": beta, **accuracy, "student_minus_planner": mean, "ci95": half,
                   "check_episodes": episodes, "seconds": round(time.perf_counter() - start, 1)}
            rounds.append(row)
            print(f"round {k}: beta {beta:.2f}, {accuracy['rows']:,} rows, held-out accuracy "
                  f"{accuracy['held_accuracy']:.3f} (zero code {accuracy['zero_accuracy']:.3f}); greedy student - planner "
                  f"{mean:+.1f} ± {half:.1f} on {episodes} episodes ({row['seconds']} s)", flush=True)
            report = {"args": {**asdict(args), "out": str(args.out)},
                      "teacher_minus_planner": teacher, "teacher_ci95": teacher_half, "rounds": rounds}
            write_file(args.out / DISTIL_FILE, json.dumps(report, indent=1))
    return report


__all__ = ["DISTIL_FILE", "DaggerAllocator", "DistilArgs", "distil", "fit_student", "paired_check", "play_dagger",
           "teacher_codes"]

