"""Groups spread over workers: what the engine's groups cost, how they are parceled, where they run.

With more than one worker the missing episodes are packed into *parcels*, a worker's unit of work
(consecutive seeds of one group stay together, so its policies are built once), and run as Ray
tasks, each a streaming generator so that every episode reaches the store as soon as it is played.
Ray starts locally with ``workers`` CPUs, or joins ``address`` / ``RAY_ADDRESS``. Ray's start-up
(seconds, more on a busy machine) costs more than it saves on a small tournament, so below
``ray_min_seconds`` of estimated single-core work the episodes are played in-process whatever
``workers`` says. Every episode is played by :func:`experiments.evaluation.engine.group_results`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from commons_arena.scenario import ScenarioConfig
from experiments.cluster import start_ray
from experiments.evaluation.engine import EpisodeResult, Group, focal_population, group_results
from policies.shipping import PackedCheckpoint, install, pack_all

# Rough single-core costs (measured on `standard`: ~4 ms per scripted episode of 12 ticks x
# 5 agents; the oracle solves a MILP each tick, ~12 ms; a learned module ~0.3 ms per call).
SECONDS_PER_AGENT_TICK = 7e-5
ORACLE_SECONDS_PER_TICK = 1.2e-2  # the oracle's floor per tick; larger clusters: oracle_episode_seconds
# The oracle's MILP grows with the jobs it plans over and shrinks with the GPUs it may give them: one episode
# costs about ORACLE_SIZE_SECONDS x jobs^2 x tiers^(2/3) / GPUs. The exponents: a log-linear least-squares fit,
# rounded, on one oracle episode of each of the first 50 heldout-allocator scenarios (seed 500000: 0.08 .. 26 s
# on the shared 2-core machine at a load average of ~9; correlation of the logs 0.77; the five slowest are the
# five this ranks slowest but one, which is sixth); the constant: their median ratio (4.3e-3 loaded) divided by
# 3.1, the slowest one's loaded / quiet time (26.3 s / 8.4 s, docs/benchmarks.md). It orders the work, so a
# slow scenario's episodes start first and spread over the workers (parcels); it underestimates the slowest.
ORACLE_SIZE_SECONDS = 1.4e-3
HEAVY_EPISODE_SECONDS = 0.5  # an episode estimated at this or more is a parcel of its own (balance beats reuse)
LEARNED_SECONDS_PER_AGENT_TICK = 4e-4
RAY_MIN_SECONDS = 15.0  # below this much estimated work, Ray's start-up (4-15 s here) is not worth it
FLUSH_SECONDS = 0.1  # a Ray worker hands on its finished episodes this often
PARCELS_PER_WORKER = 3  # a few parcels per worker balance uneven parcels without much per-task overhead

Parcel = list[tuple[int, Group]]
"""A worker's unit of work: groups (or runs of a group's seeds), each with its place in the list being played."""
Played = tuple[int, EpisodeResult]
"""One episode of the group at that place in the list being played."""


# --------------------------------------------------------------------------- estimates


def expected_jobs(config: ScenarioConfig) -> float:
    """Jobs an episode of ``config`` holds on average: the fixed ones, the generators' and the shocks' injected."""
    generated = sum((g.last_tick - g.first_tick + 1) * g.rate for t in config.teams if (g := t.generator) is not None)
    injected = sum(1.0 if s.tick is not None else (s.rate or 0.0) * config.max_ticks
                   for s in config.shocks if s.job is not None)
    return sum(len(t.jobs) for t in config.teams) + generated + injected


def oracle_episode_seconds(config: ScenarioConfig) -> float:
    """A single-core estimate of one oracle episode of ``config`` (see :data:`ORACLE_SIZE_SECONDS`)."""
    jobs, gpus = expected_jobs(config), sum(t.owned for t in config.gpu_tiers) + 1
    sized = ORACLE_SIZE_SECONDS * jobs ** 2 * len(config.gpu_tiers) ** (2 / 3) / gpus
    return max(ORACLE_SECONDS_PER_TICK * config.max_ticks, sized)


def episode_seconds(group: Group) -> float:
    """A rough single-core estimate of one episode's cost: whether Ray pays off, and how to balance its parcels."""
    evaluation = group.evaluation
    config = evaluation.config
    entries = focal_population(evaluation.background, evaluation.focal_agents, group.player).resolve(config).values()
    policies = [e.policy for e in entries]
    learned = sum(1 for p in policies if p.startswith("learned:"))
    return (config.max_ticks * (len(config.agents) * SECONDS_PER_AGENT_TICK
                                + LEARNED_SECONDS_PER_AGENT_TICK * learned)
            + oracle_episode_seconds(config) * policies.count("oracle"))


def group_seconds(group: Group) -> float:
    return len(group.seeds) * episode_seconds(group)


def parcel_seconds(parcel: Parcel) -> float:
    return sum(group_seconds(group) for _, group in parcel)


# --------------------------------------------------------------------------- parcels


def parcels(groups: Sequence[Group], workers: int) -> list[Parcel]:
    """Split the work into parcels of similar estimated cost, longest first.

    About ``PARCELS_PER_WORKER x workers`` parcels of the cheap episodes (consecutive seeds of one group stay
    together, so its policies are built once); an episode estimated at :data:`HEAVY_EPISODE_SECONDS` or more (a
    large cluster's oracle) is a parcel of its own, so one slow scenario's seeds spread over every worker. The
    parcels are returned by estimated cost, longest first: Ray starts them in that order, and the cheap ones fill
    the workers' ends (longest-processing-time first): the heavy episodes first (the estimate is rough where it
    matters most, so they are ordered by their estimate and each is one task), then the other parcels."""
    costs = [group_seconds(g) for g in groups]
    target = max(sum(costs) / (workers * PARCELS_PER_WORKER), 1e-9)
    heavy: list[Parcel] = []
    out: list[Parcel] = [[]]
    load = 0.0
    for index, group, cost in sorted(zip(range(len(groups)), groups, costs, strict=True),
                                     key=lambda igc: -igc[2] / len(igc[1].seeds)):
        per_episode = cost / len(group.seeds)
        if per_episode >= HEAVY_EPISODE_SECONDS:
            heavy += [[(index, replace(group, seeds=(seed,)))] for seed in group.seeds]
            continue
        seeds = list(group.seeds)
        while seeds:
            room = max(1, round((target - load) / per_episode))
            take, seeds = seeds[:room], seeds[room:]
            out[-1].append((index, replace(group, seeds=tuple(take))))
            load += per_episode * len(take)
            if load >= target - per_episode / 2:  # closer to the target than one more episode would get
                out.append([])
                load = 0.0
    heavy.sort(key=lambda parcel: -parcel_seconds(parcel))  # the slowest episodes start first
    return heavy + sorted((p for p in out if p), key=lambda parcel: -parcel_seconds(parcel))


def parcel_results(parcel: Parcel, batched: bool = True) -> Iterator[Played]:
    for index, group in parcel:
        for result in group_results(group, batched):
            yield index, result


def streamed(parcel: Parcel, flush_seconds: float, batched: bool = True) -> Iterator[list[Played]]:
    """:func:`parcel_results`, handed on in small lists: every ``flush_seconds`` rather than per
    episode, so that Ray's per-item cost stays small next to a few-millisecond episode."""
    pending: list[Played] = []
    last = time.perf_counter()
    for played in parcel_results(parcel, batched):
        pending.append(played)
        if time.perf_counter() - last >= flush_seconds:
            yield pending
            pending, last = [], time.perf_counter()
    if pending:
        yield pending


def policy_names(groups: Sequence[Group]) -> list[str]:
    """Every policy the groups' players and backgrounds name (``learned:`` ones are shipped)."""
    names = []
    for group in groups:
        names.append(group.player.entry.policy)
        evaluation = group.evaluation
        names.extend(entry.policy for entry in evaluation.background.resolve(evaluation.config, strict=False).values())
    return names


def shipped_parcel(parcel: Parcel, checkpoints: Sequence[PackedCheckpoint], flush_seconds: float,
                   batched: bool) -> Iterator[list[Played]]:
    """A Ray task: install the shipped checkpoints on this node, then :func:`streamed`."""
    install(checkpoints)
    yield from streamed(parcel, flush_seconds, batched)


# --------------------------------------------------------------------------- where they run


def run_in_process(groups: Sequence[Group], batched: bool = True) -> Iterator[Played]:
    yield from parcel_results(list(enumerate(groups)), batched)


def run_on_ray(groups: Sequence[Group], workers: int, address: str | None, batched: bool = True) -> Iterator[Played]:
    """Yield episodes as Ray tasks finish them (streaming generators, several parcels per worker)."""
    import ray

    # A cluster address (or RAY_ADDRESS) joins it, shipping the code; otherwise a local Ray with
    # `workers` CPUs. A Ray we start, we stop; one already running (a notebook, tests) stays.
    started = start_ray(address, num_cpus=workers)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        parts = parcels(groups, max(1, min(workers, cpus)))
        # the learned players' checkpoints go to the nodes as bytes, once (ray.put), not as paths
        packed: Sequence[PackedCheckpoint] = pack_all(policy_names(groups))
        checkpoints = ray.put(packed)
        # learned policies set torch to one thread themselves
        task = ray.remote(num_cpus=1, num_returns="streaming", max_retries=0)(shipped_parcel)
        pending: list[Any] = [task.remote(parcel, checkpoints, FLUSH_SECONDS, batched) for parcel in parts]
        ready: list[Any]  # streaming tasks' ObjectRefGenerators (ray.wait is typed for plain refs too)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for generator in ready:
                try:
                    ref = next(generator)
                except StopIteration:
                    continue
                yield from ray.get(ref)
                pending.append(generator)
    finally:
        if started:
            ray.shutdown()


def choose_workers(groups: Sequence[Group], workers: int | None, address: str | None,
                   ray_min_seconds: float) -> tuple[int, str]:
    """How many workers to use, and why (a sentence for the log)."""
    requested = workers if workers is not None else (os.cpu_count() or 1)
    if requested <= 1:
        return 1, "one worker: in-process"
    estimate = sum(group_seconds(g) for g in groups)
    if estimate < ray_min_seconds:
        return 1, (f"about {estimate:.1f} s of single-core work, below --ray-min-seconds {ray_min_seconds:g}: "
                   "in-process (starting Ray would cost more than it saves)")
    where = f"the Ray cluster at {address or os.environ.get('RAY_ADDRESS')}" if (address or os.environ.get("RAY_ADDRESS")) else "local Ray"
    return requested, f"about {estimate:.1f} s of single-core work: {requested} workers on {where}"


__all__ = ["Parcel", "choose_workers", "episode_seconds", "group_seconds", "parcels", "run_in_process", "run_on_ray"]
