"""Several training seeds, one command: ``commons-arena train --train-seeds 0 1 2``.

Each seed trains in turn, in its own run folder ``<parent>/s<seed>`` under one parent
(``<out>/<experiment>-<scenario>-seeds<0-1-2>``, numbered ``-2``, ``-3``, ... when taken),
then :func:`experiments.studies.seed_report.write_seed_report` writes the report across them into the
parent. In turn, not side by side: a run samples and updates in its driver (about one core),
so an idle 2-core machine could run two at once, but this project's shared machine is already
oversubscribed (load average 13-36 while the seeds ran), where a second process only takes a
larger share from other jobs (docs/training.md). Ray starts once for all the seeds, with
retries (:func:`start_local_ray`). Each seed's run folder is an ordinary run: ``--resume <parent>/s1`` continues
one that was killed, and ``commons-arena seed-report <parent>`` redoes the report.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from commons_arena.files import make_folder, write_file
from experiments.training.args import TrainArgs
from experiments.training.config_file import write_experiment
from experiments.training.runs import SEEDS_PARENT


def parent_folder(args: TrainArgs, seeds: tuple[int, ...]) -> Path:
    """A new folder for the seeds' runs (never an existing run's)."""
    base = args.run_name or args.name.removesuffix(f"-s{args.seed}")
    name = f"{base}-seeds{'-'.join(str(s) for s in seeds)}"
    folder, number = args.out / name, 2
    while folder.exists():
        folder, number = args.out / f"{name}-{number}", number + 1
    return folder


def seed_args(args: TrainArgs, parent: Path, seed: int) -> TrainArgs:
    """One seed's arguments: everything as given but the seed and the folder."""
    return replace(args, seed=seed, out=parent, run_name=f"s{seed}")


RAY_START_ATTEMPTS = 3


def start_local_ray(args: TrainArgs, attempts: int = RAY_START_ATTEMPTS) -> None:
    """A local Ray for all the seeds (``train`` then reuses it), tried ``attempts`` times: on a
    loaded machine Ray gives its raylet 30 s to register and fails the whole command otherwise
    (seen at load average 20-36 on 2 cores). A cluster address (``--address``, $RAY_ADDRESS) is
    left to ``train``."""
    import ray

    from experiments.cluster import start_ray  # the one way Ray is started; this only adds retries

    if args.address or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return
    for attempt in range(1, attempts + 1):
        try:
            start_ray(None)
            return
        except Exception as err:  # Ray raises a bare Exception for the startup timeout
            ray.shutdown()
            if attempt == attempts:
                raise RuntimeError(f"Ray did not start in {attempts} attempts: {err}") from err
            print(f"Ray did not start ({err}); trying again ({attempt + 1}/{attempts})")


def train_seeds(args: TrainArgs, seeds: tuple[int, ...], compare_seeds: int = 100) -> Path:
    """Train ``args`` once per seed, in turn, then write the aggregate report; returns the parent."""
    from experiments.studies.seed_report import write_seed_report
    from experiments.training.setup import resolve
    from experiments.training.train import train

    for seed in seeds:  # refuse bad arguments before the first seed trains
        resolve(seed_args(args, args.out, seed))
    parent = parent_folder(args, seeds)
    make_folder(parent, new=True)
    write_experiment(parent / "experiment.toml", replace(args, seed=seeds[0]))
    write_file(parent / SEEDS_PARENT, json.dumps({"train_seeds": list(seeds)}))
    print(f"{len(seeds)} training seeds, in turn, under {parent}")
    start_local_ray(args)
    for seed in seeds:
        print(f"---- training seed {seed}")
        train(seed_args(args, parent, seed))
    write_seed_report(parent, compare_seeds=compare_seeds)
    return parent


__all__ = ["parent_folder", "seed_args", "start_local_ray", "train_seeds"]
