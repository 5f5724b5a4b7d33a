"""Allocators on one scenario with and without the shared fit step (policies/limits.py), paired by seed.

    python scripts/limits_paired.py tests/data/scenarios/hard_cap_cluster.toml --seeds 30

For each scripted allocator and ``planner``: the mean return before (its action as it was,
the env repairing it) and after (fitted within the observed limits), and the paired
difference to ``random`` (before and after) and to the oracle, each with a 95% CI; the
normalised score ``(R - R_random) / (R_oracle - R_random)`` after, against the random of
after. Seeds are ``evaluate``'s (experiments/seeds.py), as ``commons-arena evaluate`` uses.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import numpy as np

import commons_arena
from experiments.seeds import first_seed
from experiments.statistics import paired_difference
from policies import allocators, planner
from policies.focal import run_episode
from policies.population import Population

ALLOCATORS = ("random", "equal_split", "proportional", "fifo", "edf", "best_fit", "max_min_fair", "drf", "planner")


@contextlib.contextmanager
def unfitted() -> Iterator[None]:
    """Every allocator's action left as it decided it (the fit step off)."""
    saved = planner.fit_action, allocators.fit_action

    def identity(limits, buy, grant, order):
        return buy, grant

    planner.fit_action = allocators.fit_action = identity
    try:
        yield
    finally:
        planner.fit_action, allocators.fit_action = saved


def returns(scenario: str, allocator: str, seeds: list[int]) -> np.ndarray:
    config = commons_arena.load_scenario(scenario)
    env = commons_arena.parallel_env(scenario=config)
    population = Population.default(config).with_agent("allocator", allocator)
    return np.array([run_episode(env, population, seed)["allocator"]["return"] for seed in seeds])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=first_seed("evaluate"))
    args = parser.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    oracle = returns(args.scenario, "oracle", seeds)
    after = {a: returns(args.scenario, a, seeds) for a in ALLOCATORS}
    with unfitted():
        before = {a: returns(args.scenario, a, seeds) for a in ALLOCATORS}

    def diff(a: np.ndarray, b: np.ndarray) -> str:
        d, ci = paired_difference(a, b)
        return f"{d:+8.1f} ± {ci:5.1f}"

    print(f"{args.scenario}: {len(seeds)} seeds from {seeds[0]}; oracle {oracle.mean():.1f}")
    print("allocator     before    after   after-before      after-random(after)  after-random(before)  after-oracle"
          "        score(after)")
    r0, r1 = before["random"], after["random"]
    for a in ALLOCATORS:
        score = (after[a].mean() - r1.mean()) / (oracle.mean() - r1.mean())
        print(f"{a:12s} {before[a].mean():7.1f} {after[a].mean():8.1f}  {diff(after[a], before[a])}   "
              f"{diff(after[a], r1)}    {diff(after[a], r0)}    {diff(after[a], oracle)}   {score:6.3f}")


if __name__ == "__main__":
    main()
