"""Steps per second of the arena vs PettingZoo's rps_v2, in one run (issue 2's speed figure).

Both envs are stepped with uniformly random actions drawn *before* timing, so the figure
measures ``step()`` (and ``reset()`` between episodes), not action sampling.

    python -m experiments.bench_env --steps 20000
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import tyro
from pettingzoo.classic import rps_v2

import commons_arena


@dataclass
class Args:
    scenario: str = "standard"
    """scenario to step"""
    steps: int = 20_000
    """parallel steps timed per env"""
    seed: int = 0
    """seed of the action draws and of the first reset"""


def steps_per_second(env, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    agents = list(env.possible_agents)
    pool = [
        {a: rng.integers(0, env.action_space(a).nvec if hasattr(env.action_space(a), "nvec") else env.action_space(a).n)
         for a in agents}
        for _ in range(1024)
    ]
    env.reset(seed=seed)
    episode = 0
    start = time.perf_counter()
    for i in range(steps):
        if not env.agents:
            episode += 1
            env.reset(seed=seed + episode)
        env.step(pool[i & 1023])
    return steps / (time.perf_counter() - start)


def main(args: Args) -> dict[str, float]:
    arena = steps_per_second(commons_arena.parallel_env(scenario=args.scenario), args.steps, args.seed)
    rps = steps_per_second(rps_v2.parallel_env(), args.steps, args.seed)
    print(f"commons_arena[{args.scenario}]: {arena:,.0f} steps/s")
    print(f"rps_v2 (parallel):        {rps:,.0f} steps/s")
    print(f"ratio arena / rps_v2:     {arena / rps:.2f}x")
    return {"arena": arena, "rps_v2": rps, "ratio": arena / rps}


if __name__ == "__main__":
    main(tyro.cli(Args))
