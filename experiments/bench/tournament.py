"""Tournament throughput: scripted-only episodes per second, one worker vs Ray workers, side by side.

The same roster (every scripted allocator baseline in the allocator seat of ``--scenario``
against its default background, anchored by ``random`` and ``best_fit`` so that no oracle
plays) is played twice into fresh results stores: in-process (``--workers 1``), then as
Ray tasks on ``--ray-workers`` local CPUs. Both figures include writing every episode to
SQLite; the Ray one is given warm (after ``ray.init`` and the workers' imports, which are
timed separately) and cold (everything from ``ray.init``). The two stores are compared
row by row: parallel play must not change a single result.

On a machine shared with other work the wall-clock figures move with the load (and Ray's
extra processes win a bigger share of contended cores), so the in-process run is also
given per CPU-second of its own process, which the load hardly moves.

    python -m experiments.bench.tournament --seeds 250 --ray-workers 2
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

from experiments.evaluation.engine import QUIET, play_roster
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
    """Ray workers (local CPUs) for the parallel run"""


def scripted_roster(scenario: str, seeds: int) -> Roster:
    baselines = [name for name in available_policies("allocator") if name != "oracle"]
    return roster_from_dict({"scenarios": [scenario], "seeds": {"first": 0, "count": seeds}, "entrants": baselines,
                             "anchors": {"low": "random", "high": "best_fit"}}, source="(benchmark)")


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:  # read only
        return conn.execute("SELECT player, seed, focal_return, episode FROM episodes ORDER BY player, seed").fetchall()


def main(args: Args) -> dict[str, float]:
    import ray

    roster = scripted_roster(args.scenario, args.seeds)
    print(f"{roster.episodes} scripted episodes on {args.scenario} ({len(roster.players)} allocators x {args.seeds} "
          f"seeds); {os.cpu_count()} CPUs on this machine")
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one.sqlite", Path(tmp) / "ray.sqlite"
        cpu = time.process_time()
        with ResultStore(one) as store:
            single = play_roster(roster, store, replace(QUIET, workers=1))
        single_cpu = time.process_time() - cpu
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
            parallel = play_roster(roster, store, replace(QUIET, workers=args.ray_workers, ray_min_seconds=0.0))
        driver_cpu = time.process_time() - cpu
        ray.shutdown()
        identical = _rows(one) == _rows(many)
    cold = parallel.played / (parallel.seconds + startup)
    figures = {
        "one_worker_eps": single.episodes_per_second,
        "ray_eps": parallel.episodes_per_second,
        "ray_cold_eps": cold,
        "speedup": parallel.episodes_per_second / single.episodes_per_second,
        "ray_startup_s": startup,
        "one_worker_eps_per_cpu_s": single.played / single_cpu,
        "ray_driver_cpu_s": driver_cpu,
    }
    print(f"  1 worker (in-process):  {single.episodes_per_second:7.1f} episodes/s  ({single.seconds:.1f} s; "
          f"{figures['one_worker_eps_per_cpu_s']:.1f} episodes per CPU-second of the process)")
    print(f"  {args.ray_workers} Ray workers (warm):   {parallel.episodes_per_second:7.1f} episodes/s  "
          f"({parallel.seconds:.1f} s) = {figures['speedup']:.2f}x")
    print(f"  Ray start-up:           {startup:7.1f} s (ray.init + worker imports); cold {cold:.1f} episodes/s")
    print(f"  Ray driver (store, ray.get): {driver_cpu:.1f} CPU-s for {parallel.played} episodes")
    print(f"  identical rows: {identical}")
    if not identical:
        raise SystemExit("parallel play changed the results")
    return figures


def _warm_up(scenario: str) -> None:
    import commons_arena
    from experiments.evaluation import tournament  # noqa: F401  (the task's imports)

    commons_arena.parallel_env(scenario=scenario).reset(seed=0)


if __name__ == "__main__":
    main(tyro.cli(Args))
