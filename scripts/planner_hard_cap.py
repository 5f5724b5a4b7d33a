"""``planner`` against every scripted allocator and the oracle on one scenario, paired by seed,
with the carbon each one ends at: does the cap bind, and who spends it best (issue 53, item 3).

    python scripts/planner_hard_cap.py docs/examples/own_cluster_hard_cap.toml --seeds 30

Prints each allocator's mean return and carbon (kg of the cap), and ``planner`` minus it,
paired over the same seeds, with a 95% CI (experiments/statistics.py). Seeds are
``evaluate``'s (experiments/seeds.py), as ``commons-arena evaluate`` and ``scenarios check`` use.
The figures are in docs/bring_your_own_cluster.md ("When a hard cap binds").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tyro

import commons_arena
from experiments.evaluation.engine import play
from experiments.seeds import first_seed
from experiments.statistics import paired_difference
from policies.population import Population

HEURISTICS = ("equal_split", "proportional", "fifo", "edf", "best_fit", "max_min_fair", "drf")


@dataclass
class Args:
    scenario: tyro.conf.Positional[str]
    """a scenario (name or TOML path)"""
    seeds: int = 30
    first_seed: int = first_seed("evaluate")


def episodes(config: commons_arena.ScenarioConfig, allocator: str, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The allocator's return and the episode's carbon (kg) on each seed, the scenario's own background
    (the engine's one episode loop: the batched core where the allocator has a batch form)."""
    rows = [e.summaries["allocator"] for e in play(config, Population.default(config).with_agent("allocator", allocator),
                                                   seeds)]
    return np.array([r["return"] for r in rows]), np.array([r["carbon_kg"] for r in rows])


def main(args: Args) -> None:
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    config = commons_arena.load_scenario(args.scenario)
    planner, planner_kg = episodes(config, "planner", seeds)
    print(f"{config.name}: {config.carbon.mode} cap {config.carbon.cap_kg:g} kg; {len(seeds)} seeds from {seeds[0]}")
    print(f"planner        return {planner.mean():8.1f}  carbon {planner_kg.mean():6.2f} kg")
    for name in (*HEURISTICS, "oracle"):
        returns, kg = episodes(config, name, seeds)
        d, ci = paired_difference(planner, returns)
        print(f"{name:14s} return {returns.mean():8.1f}  carbon {kg.mean():6.2f} kg   planner - {name}: {d:+7.1f} ± {ci:5.1f}")


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n")[0]))
