"""Tournament throughput: scripted-only episodes per second, per arena vs batched vs Ray workers, side by side.

The same roster (every scripted allocator baseline in the allocator seat of ``--scenario``
against its default background, anchored by ``random`` and ``best_fit`` so that no oracle
plays) is played into fresh results stores: in-process on the per-arena path
(``PlayOptions(batched=False)``: one reference env, one episode at a time), in-process on the
batched core (the engine's default for a scripted lineup of at least ``MIN_ARENAS`` seeds: a
group's seeds as one batch; both paths warmed up first, untimed), then as
Ray tasks on ``--ray-workers`` local CPUs (batched too; ``--ray-workers 0`` skips it). Every
figure includes writing every episode to SQLite; the Ray one is given warm (after ``ray.init``
and the workers' imports, which are timed separately) and cold (everything from ``ray.init``).
The stores are compared row by row: neither the batched core nor parallel play may change a
single result.

On a machine shared with other work the wall-clock figures move with the load (and Ray's
extra processes win a bigger share of contended cores), so the in-process run is also
given per CPU-second of its own process, which the load hardly moves.

    python -m experiments.bench.tournament --seeds 250 --ray-workers 2
    python -m experiments.bench.tournament --seeds 250 --ray-workers 0   # per arena vs batched only
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

from experiments.evaluation.engine import MIN_ARENAS, on_batched_core
from experiments.evaluation.results import QUIET, fill_store, missing_groups
from experiments.evaluation.roster import Roster, roster_from_dict
from experiments.evaluation.store import ResultStore
from policies.registry import available_policies


@dataclass
class Args:
    scenario: str = "standard"
    """scenario to play"""
    seeds: int = 250
    """seeds per player (8 players: every allocator baseline but the oracle)"""
    ray_workers: int = 2
    """Ray workers (local CPUs) for the parallel run; 0 skips it"""


def scripted_roster(scenario: str, seeds: int) -> Roster:
    baselines = [name for name in available_policies("allocator") if name != "oracle"]
    return roster_from_dict({"scenarios": [scenario], "seeds": {"first": 0, "count": seeds}, "entrants": baselines,
                             "anchors": {"low": "random", "high": "best_fit"}}, source="(benchmark)")


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:  # read only
        return conn.execute("SELECT player, seed, focal_return, episode FROM episodes ORDER BY player, seed").fetchall()


def main(args: Args) -> dict[str, float]:
    roster = scripted_roster(args.scenario, args.seeds)
    print(f"{roster.episodes} scripted episodes on {args.scenario} ({len(roster.players)} allocators x {args.seeds} "
          f"seeds); {os.cpu_count()} CPUs on this machine")
    on_core = [g.player.name for g in missing_groups(roster, set()) if on_batched_core(g)]
    print(f"  on the batched core by default: {len(on_core)} of {len(roster.players)} allocators "
          f"({', '.join(on_core) or 'none'}; the rest per arena)")
    with tempfile.TemporaryDirectory() as tmp:
        looped, one, many = Path(tmp) / "per_arena.sqlite", Path(tmp) / "one.sqlite", Path(tmp) / "ray.sqlite"
        warm_up = scripted_roster(args.scenario, MIN_ARENAS)  # imports and first-call costs of both paths, untimed
        for batched in (False, True):
            with ResultStore(Path(tmp) / f"warm_{batched}.sqlite") as store:
                fill_store([warm_up], store, replace(QUIET, workers=1, batched=batched))
        with ResultStore(looped) as store:
            per_arena = fill_store([roster], store, replace(QUIET, workers=1, batched=False))
        cpu = time.process_time()
        with ResultStore(one) as store:
            single = fill_store([roster], store, replace(QUIET, workers=1))
        single_cpu = time.process_time() - cpu
        identical = _rows(looped) == _rows(one)
        figures = {
            "per_arena_eps": per_arena.episodes_per_second,
            "one_worker_eps": single.episodes_per_second,
            "batched_speedup": single.episodes_per_second / per_arena.episodes_per_second,
            "one_worker_eps_per_cpu_s": single.played / single_cpu,
        }
        print(f"  1 worker, per arena:    {per_arena.episodes_per_second:7.1f} episodes/s  ({per_arena.seconds:.1f} s)")
        print(f"  1 worker, batched core: {single.episodes_per_second:7.1f} episodes/s  ({single.seconds:.1f} s; "
              f"{figures['one_worker_eps_per_cpu_s']:.1f} episodes per CPU-second of the process) = "
              f"{figures['batched_speedup']:.2f}x")
        if args.ray_workers > 0:
            import ray

            start = time.perf_counter()
            # ray.init's annotation says int, but it takes a level name (its own default is "info")
            ray.init(num_cpus=args.ray_workers, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR")  # type: ignore[arg-type]
            # warm every worker up (process start, imports) so the timed run measures play, not start-up
            warm = ray.remote(num_cpus=1)(_warm_up)
            ray.get([warm.remote(args.scenario) for _ in range(args.ray_workers)])
            startup = time.perf_counter() - start
            cpu = time.process_time()
            with ResultStore(many) as store:
                parallel = fill_store([roster], store, replace(QUIET, workers=args.ray_workers, ray_min_seconds=0.0))
            driver_cpu = time.process_time() - cpu
            ray.shutdown()
            identical = identical and _rows(one) == _rows(many)
            cold = parallel.played / (parallel.seconds + startup)
            figures.update({
                "ray_eps": parallel.episodes_per_second,
                "ray_cold_eps": cold,
                "speedup": parallel.episodes_per_second / single.episodes_per_second,
                "ray_startup_s": startup,
                "ray_driver_cpu_s": driver_cpu,
            })
            print(f"  {args.ray_workers} Ray workers (warm):   {parallel.episodes_per_second:7.1f} episodes/s  "
                  f"({parallel.seconds:.1f} s) = {figures['speedup']:.2f}x the batched worker")
            print(f"  Ray start-up:           {startup:7.1f} s (ray.init + worker imports); cold {cold:.1f} episodes/s")
            print(f"  Ray driver (store, ray.get): {driver_cpu:.1f} CPU-s for {parallel.played} episodes")
    print(f"  identical rows: {identical}")
    if not identical:
        raise SystemExit("the batched core or parallel play changed the results")
    return figures


def _warm_up(scenario: str) -> None:
    import commons_arena
    from experiments.evaluation import tournament  # noqa: F401  (the task's imports)

    commons_arena.parallel_env(scenario=scenario).reset(seed=0)


if __name__ == "__main__":
    main(tyro.cli(Args))
