"""Steps per second of the arena vs PettingZoo's rps_v2, in one run (issue 2's speed figure).

Both envs are stepped with uniformly random actions drawn *before* timing, so the figure
measures ``step()`` (and ``reset()`` between episodes), not action sampling. The two envs
take turns in chunks of ``chunk`` steps, so a change in machine load during the run hits
both about equally and the ratio stays meaningful on a shared machine.

    python -m experiments.bench.env --steps 20000
    python -m experiments.bench.env --steps 2000 --frames 50   # ... and rgb_array frame times
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
    chunk: int = 1_000
    """steps per turn before switching to the other env"""
    frames: int = 0
    """if > 0, also time this many ``render_mode="rgb_array"`` dashboard frames (median, p95)"""


def stepper(env, seed: int) -> Callable[[int], float]:
    """A function ``run(n)`` that steps ``env`` n more times and returns the seconds it took."""
    rng = np.random.default_rng(seed)
    agents = list(env.possible_agents)
    pool = [
        {a: rng.integers(0, env.action_space(a).nvec if hasattr(env.action_space(a), "nvec") else env.action_space(a).n)
         for a in agents}
        for _ in range(1024)
    ]
    env.reset(seed=seed)
    done = episode = 0

    def run(n: int) -> float:
        nonlocal done, episode
        start = time.perf_counter()
        for i in range(done, done + n):
            if not env.agents:
                episode += 1
                env.reset(seed=seed + episode)
            env.step(pool[i & 1023])
        done += n
        return time.perf_counter() - start

    return run


def main(args: Args) -> dict[str, float]:
    envs = {"arena": stepper(commons_arena.parallel_env(scenario=args.scenario), args.seed),
            "rps_v2": stepper(rps_v2.parallel_env(), args.seed)}
    seconds = dict.fromkeys(envs, 0.0)
    for start in range(0, args.steps, args.chunk):
        n = min(args.chunk, args.steps - start)
        for name, run in envs.items():
            seconds[name] += run(n)
    arena, rps = args.steps / seconds["arena"], args.steps / seconds["rps_v2"]
    print(f"commons_arena[{args.scenario}]: {arena:,.0f} steps/s")
    print(f"rps_v2 (parallel):        {rps:,.0f} steps/s")
    print(f"ratio arena / rps_v2:     {arena / rps:.2f}x")
    figures = {"arena": arena, "rps_v2": rps, "ratio": arena / rps}
    if args.frames > 0:
        figures.update(frame_times(args.scenario, args.frames, args.seed))
    return figures


def frame_times(scenario: str, frames: int, seed: int) -> dict[str, float]:
    """Median and p95 seconds of one ``rgb_array`` dashboard frame (the first, which builds
    the figure, is not counted)."""
    env = commons_arena.parallel_env(scenario=scenario, render_mode="rgb_array")
    step = stepper(env, seed)
    env.render()
    times = []
    for _ in range(frames):
        step(1)
        start = time.perf_counter()
        env.render()
        times.append(time.perf_counter() - start)
    median, p95 = float(np.median(times)), float(np.percentile(times, 95))
    print(f"rgb_array frame:          median {median * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms ({frames} frames)")
    return {"frame_median_s": median, "frame_p95_s": p95}


if __name__ == "__main__":
    main(tyro.cli(Args))
