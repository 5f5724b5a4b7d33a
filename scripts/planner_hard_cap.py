"""``planner`` against every scripted allocator and the oracle on one scenario, paired by seed,
with the carbon each one ends at: does the cap bind, and who spends it best (issue 53, item 3).

    python scripts/planner_hard_cap.py docs/examples/own_cluster_hard_cap.toml --seeds 30

Prints each allocator's mean return and carbon (kg of the cap), and ``planner`` minus it,
paired over the same seeds, with a 95% CI (experiments/statistics.py). Seeds are
``evaluate``'s (experiments/seeds.py), as ``commons-arena evaluate`` and ``scenarios check`` use.
The figures are in docs/bring_your_own_cluster.md ("When a hard cap binds").
"""

from __future__ import annotations

import argparse

import numpy as np

import commons_arena
from experiments.seeds import first_seed
from experiments.statistics import paired_difference
from policies.focal import run_episode
from policies.population import Population

HEURISTICS = ("equal_split", "proportional", "fifo", "edf", "best_fit", "max_min_fair", "drf")


def episodes(scenario: str, allocator: str, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The allocator's return and the episode's carbon (kg) on each seed, the scenario's own background."""
    config = commons_arena.load_scenario(scenario)
    env = commons_arena.parallel_env(scenario=config)
    population = Population.default(config).with_agent("allocator", allocator)
    rows = [run_episode(env, population, seed)["allocator"] for seed in seeds]
    return np.array([r["return"] for r in rows]), np.array([r["carbon_kg"] for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=first_seed("evaluate"))
    args = parser.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    config = commons_arena.load_scenario(args.scenario)
    planner, planner_kg = episodes(args.scenario, "planner", seeds)
    print(f"{config.name}: {config.carbon.mode} cap {config.carbon.cap_kg:g} kg; {len(seeds)} seeds from {seeds[0]}")
    print(f"planner        return {planner.mean():8.1f}  carbon {planner_kg.mean():6.2f} kg")
    for name in (*HEURISTICS, "oracle"):
        returns, kg = episodes(args.scenario, name, seeds)
        d, ci = paired_difference(planner, returns)
        print(f"{name:14s} return {returns.mean():8.1f}  carbon {kg.mean():6.2f} kg   planner - {name}: {d:+7.1f} ± {ci:5.1f}")


if __name__ == "__main__":
    main()
