"""Env steps per second: the reference env, the batched core at several batch sizes, PettingZoo's rps_v2.

Every env is stepped with uniformly random actions drawn *before* timing, so the figures
measure ``step()`` (and the resets between episodes), not action sampling. The envs take
turns in chunks of ``chunk`` env steps, so a change in machine load during the run hits all
of them about equally and the ratios stay meaningful on a shared machine. A batch of N arenas
counts N env steps per ``step()``; its arenas reset in place (autoreset).

``--scripted``: the scenario's own scripted teams and broker act (the reference env: one
policy per seat; the batched core: one batch policy per seat, ``policies.registry.batch_policy``
where the tree has it, else ``LoopBatchPolicy``), the
allocator plays random actions drawn before timing. The load average is printed at the start
and the end.

    python -m experiments.bench.env --steps 20000
    python -m experiments.bench.env --scenario crisis --sizes 1 256 --steps 4000
    python -m experiments.bench.env --scripted --sizes 1024
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
from commons_arena import VectorArenaEnv
from commons_arena.enums import ALLOCATOR
from experiments.bench.suite_speed import load_average
from policies import registry
from policies.batch import BatchPolicy, LoopBatchPolicy
from policies.population import Population
from policies.registry import make_policy

Run = Callable[[int], tuple[int, float]]  # run(n) steps about n env steps; returns (env steps, seconds)


@dataclass
class Args:
    scenario: str = ""
    """one scenario to step (empty: every one of ``scenarios``)"""
    scenarios: tuple[str, ...] = ("standard", "elevated", "crisis")
    """scenarios to step, one table each, when ``scenario`` is empty"""
    steps: int = 20_000
    """env steps timed per env (a batch of N arenas steps ``steps / N`` times)"""
    sizes: tuple[int, ...] = (1, 64, 256, 1024)
    """batch sizes of the batched core"""
    seed: int = 0
    """seed of the action draws and of the first reset"""
    chunk: int = 1_000
    """env steps per turn before switching to the next env"""
    scripted: bool = False
    """the scenario's scripted teams and broker act (random allocator); no rps_v2"""
    frames: int = 0
    """if > 0, also time this many ``render_mode="rgb_array"`` dashboard frames (median, p95)"""


def stepper(env, seed: int) -> Callable[[int], float]:
    """A function ``run(n)`` that steps ``env`` (a PettingZoo ParallelEnv) n more times and returns the seconds it took."""
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


def counted(run: Callable[[int], float]) -> Run:
    return lambda n: (n, run(n))


def batch_pool(env: VectorArenaEnv, seed: int, size: int = 16) -> list[dict[str, np.ndarray]]:
    """``size`` random joint actions of every arena, ``agent -> (N, act_dim)``."""
    rng = np.random.default_rng(seed)
    return [{a: rng.integers(0, env.action_space(a).nvec, size=(env.num_envs, len(env.action_space(a).nvec)))
             for a in env.possible_agents} for _ in range(size)]


def batch_stepper(scenario: str, num_envs: int, seed: int) -> Run:
    """``run(n)``: about n env steps of ``num_envs`` arenas with random actions in every seat."""
    env = commons_arena.vector_env(scenario, num_envs=num_envs)
    pool = batch_pool(env, seed)
    env.reset(seed=seed)
    calls = 0

    def run(n: int) -> tuple[int, float]:
        nonlocal calls
        k = max(1, round(n / num_envs))
        start = time.perf_counter()
        for i in range(calls, calls + k):
            env.step(pool[i & 15])
        calls += k
        return k * num_envs, time.perf_counter() - start

    return run


# ---------------------------------------------------------------------- scripted seats
def batch_seat(config, agent: str, entry, num_envs: int) -> BatchPolicy:
    """One seat's scripted policy in ``num_envs`` arenas: ``policies.registry.batch_policy`` (the batched
    form where one exists) when this tree has it, otherwise N per-arena policies in a loop."""
    batched = getattr(registry, "batch_policy", None)
    if batched is not None:
        return batched(entry.policy, config, agent, num_envs, **dict(entry.params))
    return LoopBatchPolicy(lambda: make_policy(entry.policy, config, agent, **dict(entry.params)), num_envs)


def scripted_reference_stepper(scenario: str, seed: int) -> Run:
    """The reference env with the scenario's scripted teams and broker, random allocator actions."""
    env = commons_arena.parallel_env(scenario)
    config = env.config
    entries = Population.default(config).resolve(config)
    seats = {a: make_policy(e.policy, config, a, **dict(e.params)) for a, e in entries.items() if a != ALLOCATOR}
    rng = np.random.default_rng(seed)
    nvec = env.action_space(ALLOCATOR).nvec
    pool = [rng.integers(0, nvec) for _ in range(1024)]
    episode = 0

    def start(s: int) -> dict[str, np.ndarray]:
        for policy in seats.values():
            policy.reset(s)
        return env.reset(seed=s)[0]

    obs = start(seed)
    done = 0

    def run(n: int) -> tuple[int, float]:
        nonlocal obs, done, episode
        begin = time.perf_counter()
        for i in range(done, done + n):
            if not env.agents:
                episode += 1
                obs = start(seed + episode)
            actions = {a: policy.act(obs[a]) for a, policy in seats.items()}
            actions[ALLOCATOR] = pool[i & 1023]
            obs = env.step(actions)[0]
        done += n
        return n, time.perf_counter() - begin

    return run


def scripted_batch_stepper(scenario: str, num_envs: int, seed: int) -> Run:
    """The batched core with every seat but the allocator's played by its batch policy."""
    env = commons_arena.vector_env(scenario, num_envs=num_envs)
    config = env.config
    entries = Population.default(config).resolve(config)
    seats = {a: batch_seat(config, a, e, num_envs) for a, e in entries.items() if a != ALLOCATOR}
    pool = [p[ALLOCATOR] for p in batch_pool(env, seed)]
    obs, _ = env.reset(seed=seed)
    for policy in seats.values():
        policy.reset(env.episode_seeds)
    ended = np.zeros(num_envs, dtype=bool)
    calls = 0

    def run(n: int) -> tuple[int, float]:
        nonlocal obs, ended, calls
        k = max(1, round(n / num_envs))
        begin = time.perf_counter()
        for i in range(calls, calls + k):
            if ended.any():  # those arenas were reset in place by the last step: so are their seats
                index = np.flatnonzero(ended)
                seeds = [env.episode_seeds[j] for j in index.tolist()]
                for policy in seats.values():
                    policy.reset(seeds, index)
            actions = {a: policy.act(obs[a]) for a, policy in seats.items()}
            actions[ALLOCATOR] = pool[i & 15]
            obs, _, terminations, truncations, _ = env.step(actions)
            ended = terminations[ALLOCATOR] | truncations[ALLOCATOR]
        calls += k
        return k * num_envs, time.perf_counter() - begin

    return run


# ---------------------------------------------------------------------- the run
def race(runs: dict[str, Run], steps: int, chunk: int) -> dict[str, float]:
    """Env steps/s of each run, taking turns in chunks of ``chunk`` env steps."""
    done, seconds = dict.fromkeys(runs, 0), dict.fromkeys(runs, 0.0)
    while min(done.values()) < steps:
        for name, run in runs.items():
            if done[name] < steps:
                n, s = run(min(chunk, steps - done[name]))
                done[name] += n
                seconds[name] += s
    return {name: done[name] / seconds[name] for name in runs}


def main(args: Args) -> dict[str, float]:
    print(f"at start: {load_average()}")
    scenarios = (args.scenario,) if args.scenario else args.scenarios
    figures: dict[str, float] = {}
    for scenario in scenarios:
        if args.scripted:
            runs = {"reference": scripted_reference_stepper(scenario, args.seed)}
            runs.update({f"batched N={n}": scripted_batch_stepper(scenario, n, args.seed) for n in args.sizes})
        else:
            runs = {"reference": counted(stepper(commons_arena.parallel_env(scenario=scenario), args.seed))}
            runs.update({f"batched N={n}": batch_stepper(scenario, n, args.seed) for n in args.sizes})
            runs["rps_v2"] = counted(stepper(rps_v2.parallel_env(), args.seed))
        rates = race(runs, args.steps, args.chunk)
        kind = "scripted teams and broker, random allocator" if args.scripted else "random actions in every seat"
        print(f"commons_arena[{scenario}], {kind}, env steps/s:")
        for name, rate in rates.items():
            print(f"  {name:<16} {rate:>12,.0f}   {rate / rates['reference']:6.2f}x the reference")
            figures[f"{scenario}/{name}"] = rate
        if not args.scripted and len(scenarios) == 1:
            # the figures of the single-env benchmark before the batched core (kept for scripts that read them)
            figures.update({"arena": rates["reference"], "rps_v2": rates["rps_v2"],
                            "ratio": rates["reference"] / rates["rps_v2"]})
    if args.frames > 0:
        figures.update(frame_times(scenarios[0], args.frames, args.seed))
    print(f"at end: {load_average()}")
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
