"""Actions per second of each batched scripted policy vs the same policy in a Python loop (issue 40, item 3).

For every policy with a batched form (``policies.registry.BATCHED``, or ``--policies``), one seat of
the scenario acts in N arenas at once, for each N of ``--sizes``: once through its batched form and
once through :class:`~policies.batch.LoopBatchPolicy` (N per-arena policies), on the same
observations. The observations are drawn before timing from a pool the reference env produced
(``--episodes`` episodes, every seat acting uniformly at random), a random pool row per arena and
tick, so a stateful policy sees rows of different episodes (the speed, not the play, is measured).
Only ``act`` is timed; the two forms' actions are then compared, and a difference stops the run.

    python -m experiments.bench.policies                       # N = 256 and 1,024, every batched policy
    python -m experiments.bench.policies --sizes 8 --ticks 3   # a quick check that it runs
    python -m experiments.bench.policies --sizes 1 --ticks 2000  # N = 1: a batch of one against the per-arena form

At N = 1 the columns say what a batch of one (``policies.batch.OneArena``) costs per act. Every
scripted team, broker and allocator (``planner`` too) is defined once, its per-arena form that adaptor,
so both columns time the same code (the loop adds its own overhead; issue 51, stage 3;
docs/benchmarks.md has the figures of the per-arena classes they replaced).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import tyro

import commons_arena
from commons_arena.spaces import role_of
from policies.base import UniformRandomPolicy
from policies.batch import BatchPolicy, LoopBatchPolicy
from policies.registry import BATCHED, batch_policy, make_policy, policy_spec


@dataclass
class Args:
    scenario: str = "standard"
    """scenario whose seat the policies play"""
    sizes: tuple[int, ...] = (256, 1024)
    """numbers of arenas N"""
    ticks: int = 20
    """``act`` calls timed per policy, form and N"""
    episodes: int = 10
    """reference-env episodes whose observations make the pool"""
    policies: tuple[str, ...] = ()
    """policies to time (default: every policy with a batched form)"""
    seed: int = 0
    """seed of the episodes, the pool draws and the policies' resets"""


def observation_pool(scenario: str, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """Every seat's observations over ``episodes`` reference-env episodes of uniform random actions."""
    env = commons_arena.parallel_env(scenario=scenario)
    actors = {agent: UniformRandomPolicy(env.action_space(agent).nvec) for agent in env.possible_agents}
    pool: dict[str, list[np.ndarray]] = {agent: [] for agent in env.possible_agents}
    for e in range(episodes):
        for i, actor in enumerate(actors.values()):
            actor.reset(seed + 1000 * e + i)
        observations, _ = env.reset(seed=seed + e)
        while env.agents:
            for agent in env.agents:
                pool[agent].append(observations[agent])
            observations, *_ = env.step({agent: actors[agent].act(observations[agent]) for agent in env.agents})
    return {agent: np.stack(rows) for agent, rows in pool.items()}


def timed(policy: BatchPolicy, batches: np.ndarray, seeds: list[int]) -> tuple[float, np.ndarray]:
    """Seconds ``policy`` spends in ``act`` over ``batches`` (ticks, N, obs_dim), and its actions."""
    policy.reset(seeds)
    out, seconds = [], 0.0
    for obs in batches:
        start = time.perf_counter()
        out.append(policy.act(obs))
        seconds += time.perf_counter() - start
    return seconds, np.stack(out)


def main(args: Args) -> None:
    config = commons_arena.parallel_env(scenario=args.scenario).config
    pool = observation_pool(args.scenario, args.episodes, args.seed)
    rng = np.random.default_rng(args.seed)
    print(f"{args.scenario}: {args.ticks} act calls per form, actions/s (one action = one arena's action)")
    print(f"{'policy':<16}{'N':>7}{'batched':>14}{'loop':>12}{'speed-up':>10}{'us/act batched':>16}{'loop':>8}")
    for name in args.policies or tuple(BATCHED):
        role = policy_spec(name).role
        agent = next(a for a in pool if role_of(config, a) == role)
        for n in args.sizes:
            batches = pool[agent][rng.integers(0, len(pool[agent]), size=(args.ticks, n))]
            seeds = [args.seed + i for i in range(n)]
            fast, got = timed(batch_policy(name, config, agent, n), batches, seeds)
            slow, want = timed(LoopBatchPolicy(functools.partial(make_policy, name, config, agent), n), batches, seeds)
            if not np.array_equal(got, want):
                raise SystemExit(f"{name} as {agent}: the batched actions differ from the per-arena ones at N={n}")
            actions = args.ticks * n
            per_call = 1e6 / args.ticks
            print(f"{name:<16}{n:>7}{actions / fast:>14,.0f}{actions / slow:>12,.0f}{slow / fast:>9.1f}x"
                  f"{fast * per_call:>16,.0f}{slow * per_call:>8,.0f}")


if __name__ == "__main__":
    main(tyro.cli(Args))
