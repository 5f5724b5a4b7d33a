"""Scripted-vs-scripted episodes per second, and the oracle's time per tick (issue 3's speed figures).

Every non-oracle allocator baseline plays ``--episodes`` episodes against the scenario's
background population (teams and broker scripted), single process, policies built once
and reset per episode. The wall time is split into the env's ``step``/``reset`` and the
policies' ``act``, so a slow figure says where the time goes. Then the oracle plays
``--oracle-episodes`` episodes and its ``act`` time per tick is reported.

    python -m experiments.bench.scripted --scenario standard --episodes 100 --oracle-episodes 20
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import tyro

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies import Population, available_policies
from policies.focal import FocalEnv, policy_seed


@dataclass
class Args:
    scenario: str = "standard"
    """scenario to play"""
    episodes: int = 100
    """episodes per allocator baseline"""
    oracle_episodes: int = 20
    """episodes played by the oracle"""
    seed: int = 0
    """first episode seed (episode e uses seed + e)"""


def timed_episode(env, policies, seed: int, clock: dict[str, float], per_tick: list[float] | None = None) -> int:
    """One episode through the substrate, as ``run_episode`` plays it, timing env and policies
    separately; with ``per_tick``, the allocator is the focal seat and each of its ``act``
    times is appended. Returns ticks."""
    focal = [] if per_tick is None else [ALLOCATOR]
    episode = FocalEnv(env, focal, policies)
    mine = policies[ALLOCATOR]
    if per_tick is not None:  # focal: seeded by the same rule the background follows
        mine.reset(policy_seed(seed, episode.seat_index[ALLOCATOR]))
    observations, _ = episode.reset(seed=seed)
    ticks = 0
    while not episode.episode_over:
        actions = {}
        if per_tick is not None:
            t1 = time.perf_counter()
            actions[ALLOCATOR] = mine.act(observations[ALLOCATOR])
            per_tick.append(time.perf_counter() - t1)
        observations, *_ = episode.step(actions)
        ticks += 1
    clock["env"] += episode.env_seconds
    clock["policies"] += sum(episode.act_seconds.values()) + sum(per_tick or ())
    return ticks


def main(args: Args) -> dict[str, float]:
    env = commons_arena.parallel_env(scenario=args.scenario)
    config = env.config
    baselines = [name for name in available_policies("allocator") if name != "oracle"]
    print(f"scenario {config.name} ({config.content_hash}); baselines: {', '.join(baselines)}")

    clock = {"env": 0.0, "policies": 0.0}
    total_episodes = total_ticks = 0
    start = time.perf_counter()
    for name in baselines:
        policies = Population(agents={"allocator": name}).build(config, env=env)
        b_clock = {"env": 0.0, "policies": 0.0}
        b_start = time.perf_counter()
        for e in range(args.episodes):
            total_ticks += timed_episode(env, policies, args.seed + e, b_clock)
        b_wall = time.perf_counter() - b_start
        print(
            f"  {name:<13} {args.episodes / b_wall:7.1f} episodes/s  (policies {b_clock['policies'] / b_wall:4.0%} of the time)"
        )
        total_episodes += args.episodes
        for key in clock:
            clock[key] += b_clock[key]
    wall = time.perf_counter() - start
    eps = total_episodes / wall
    print(
        f"scripted vs scripted: {eps:.1f} episodes/s ({total_episodes} episodes, {total_ticks / total_episodes:.1f} ticks each, "
        f"single process); env step/reset {clock['env'] / wall:.0%}, policies act {clock['policies'] / wall:.0%} of wall time"
    )
    print(
        f"  per tick: env {clock['env'] / total_ticks * 1e6:.0f} us, all policies {clock['policies'] / total_ticks * 1e6:.0f} us"
    )

    oracle_policies = Population(agents={"allocator": "oracle"}).build(config, env=env)
    per_tick: list[float] = []
    o_clock = {"env": 0.0, "policies": 0.0}
    o_start = time.perf_counter()
    for e in range(args.oracle_episodes):
        timed_episode(env, oracle_policies, args.seed + e, o_clock, per_tick)
    o_wall = time.perf_counter() - o_start
    ticks = np.array(per_tick) * 1e3
    print(
        f"oracle: {ticks.mean():.2f} ms per tick (median {np.median(ticks):.2f}, p95 {np.percentile(ticks, 95):.2f}, "
        f"max {ticks.max():.2f}); {args.oracle_episodes / o_wall:.1f} episodes/s with the oracle"
    )
    return {"episodes_per_s": eps, "oracle_ms_per_tick": float(ticks.mean())}


if __name__ == "__main__":
    main(tyro.cli(Args))
