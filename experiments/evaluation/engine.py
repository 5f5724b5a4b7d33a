"""The one engine: the only episode loop of experiments/, and the rows it stores.

**What to play** (:func:`play`): a scenario (or an env), a *lineup* for every seat (a
:class:`~policies.population.Population` of registry names, already-built policy objects,
or a factory ``env -> policies``) and seeds; an optional :class:`Observer` sees every tick
(what each seat observed, the joint action, who acted) and every finished
:class:`Episode`. Every seat is background in one :class:`policies.focal.FocalEnv`, so each
policy is seeded by the one rule and the same seed gives the same episode whatever plays
it: training's held-out evaluation, traces, fixed codes, best-response reports, the codec
measurements and the ``play`` command all play through here (``tests/test_layout.py``
finds any other ``run_episode`` / ``FocalEnv`` call).

**How rows are stored**: a tournament-like evaluation is a roster and an aggregate over
what this module plays: the ``tournament`` command (:mod:`experiments.evaluation.tournament`), ``evaluate`` and its
misreport table (:mod:`experiments.evaluation.evaluate`, whose runs are :class:`Group`\\ s
played by :func:`play_group`), the checkpoint comparison (an ``evaluate`` lineup) and
``exploit`` (a tournament per cell). A :class:`Group` is one player in the focal seat of one
scenario x background, on some seeds: its policies are built once (:func:`focal_policies`,
the one place a uniformly random seat is made) and played by :func:`play`. A stored row
names its policies (registry names and checkpoints: hashed, and shipped to Ray workers);
anything else (a wrapped or hand-built policy) plays through :func:`play` and is kept by its
caller.

**Rows** go to the SQLite store (:mod:`experiments.evaluation.store`), one committed
transaction per episode as it finishes (:func:`play_roster`); a rerun plays only the
missing rows, and a scenario, checkpoint or background whose content changed since is
refused unless ``allow_changed``.

**The batched core**: a :class:`Group` of at least :data:`MIN_ARENAS` seeds (below, the per-arena
path is faster) whose every seat has a batched form (:func:`policies.registry.has_batch_form`: the scripted
teams, brokers and allocators, ``planner``, learned checkpoints) plays its seeds as batches of up to :data:`MAX_ARENAS` arenas on ``commons_arena.vector_env``
(:func:`play_batched`: arena k plays seed k, every seat's policy reset by the one seeding rule),
storing exactly the rows the per-arena path stores. The oracle, fixed codes, policy sets,
a uniformly random seat, recordings and observers play per arena through :func:`play`;
``PlayOptions(batched=False)`` or ``COMMONS_ARENA_PER_ARENA=1`` force every group per arena
(tests, A/B timing).

**Parallelism**: with more than one worker the missing episodes are packed into batches
(consecutive seeds of one player, scenario and background stay together, so policies are
built once per batch) and run as Ray tasks, each a streaming generator so that every
episode reaches the store as soon as it is played. Ray starts locally with ``workers``
CPUs, or joins ``address`` / ``RAY_ADDRESS``. Ray's start-up (seconds, more on a busy
machine) costs more than it saves on a small tournament, so below ``ray_min_seconds`` of
estimated single-core work the episodes are played in-process whatever ``workers`` says.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.arena import ArenaEnv
from commons_arena.recording import RecordEpisode
from commons_arena.scenario import ScenarioConfig
from experiments.cluster import start_ray
from experiments.evaluation.roster import Player, Roster, focal_agents
from experiments.evaluation.store import ChangedError, EpisodeKey, ResultStore
from policies.base import Policy, uniform_random_policies
from policies.batch import BatchPolicy
from policies.focal import FocalEnv, policy_seed
from policies.population import Entry, Population
from policies.registry import batch_policy, has_batch_form
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
# slow scenario's episodes start first and spread over the workers (batches); it underestimates the slowest.
ORACLE_SIZE_SECONDS = 1.4e-3
MAX_ARENAS = 256  # the batched path plays a group's seeds in batches of at most this many arenas
# ...and only a group of at least this many seeds: below it the per-arena path is faster (in-process, warm, 3
# allocators on `standard` and `crisis`, load ~4: batched / per-arena episodes/s 0.30x at 1 seed, 0.75x at 4,
# 1.1-1.2x at 8, 2.0x at 16, 5.1-5.3x at 64)
MIN_ARENAS = 8
PER_ARENA_ENV = "COMMONS_ARENA_PER_ARENA"  # set to 1: every group plays on the per-arena path (tests, A/B timing)
HEAVY_EPISODE_SECONDS = 0.5  # an episode estimated at this or more is a batch of its own (balance beats reuse)
LEARNED_SECONDS_PER_AGENT_TICK = 4e-4
RAY_MIN_SECONDS = 15.0  # below this much estimated work, Ray's start-up (4-15 s here) is not worth it
FLUSH_SECONDS = 0.1  # a Ray worker hands on its finished episodes this often
BATCHES_PER_WORKER = 3  # a few batches per worker balance uneven batches without much per-task overhead


# --------------------------------------------------------------------------- the episode loop

Lineup = Population | Mapping[str, Policy] | Callable[[ArenaEnv], Mapping[str, Policy]]
"""Who sits in every seat: a population (built here for the env, ``strict=False``), built policies
(reused, reset per episode) or a factory given the env (for privileged policies that read it)."""


@dataclass(frozen=True)
class Tick:
    """One tick of an episode, as an :class:`Observer` sees it (after the step)."""

    seed: int  # the episode's seed
    index: int  # 0 for the episode's first step
    observations: Mapping[str, np.ndarray]  # what every seat observed when it acted
    actions: Mapping[str, Any]  # the joint action
    policies: Mapping[str, Policy]  # who acted (a learned policy's ``last_module_action`` is its code)
    env: FocalEnv  # the episode after the step (``seat_infos``, ``seat_rewards``, ``unwrapped``)


@dataclass(frozen=True)
class Episode:
    """One finished episode."""

    seed: int
    summaries: dict[str, dict[str, float]]  # every agent's infos["episode"]
    wall_seconds: float

    def returns(self) -> dict[str, float]:
        return {agent: float(summary["return"]) for agent, summary in self.summaries.items()}


class Observer:
    """Sees every tick and every episode :func:`play` plays (override what you need; it must
    not act: trajectories are the same with or without it)."""

    def begin(self, seed: int) -> None:
        """A new episode of ``seed`` was reset."""

    def tick(self, tick: Tick) -> None:
        """One tick was played."""

    def end(self, episode: Episode) -> None:
        """The episode ended."""


def lineup_policies(lineup: Lineup, env: ArenaEnv) -> dict[str, Policy]:
    """Every seat's policy for ``env`` (see :data:`Lineup`)."""
    if isinstance(lineup, Population):
        return lineup.build(env.config, env=env, strict=False)
    if callable(lineup):
        return dict(lineup(env))
    return dict(lineup)


def arena_for(env: ArenaEnv | ScenarioConfig | str) -> Any:
    """``env`` itself if it is an arena (or a wrapper of one), else a new arena of that scenario."""
    return commons_arena.parallel_env(scenario=env) if isinstance(env, str | ScenarioConfig) else env


def play(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Iterable[int],
         observer: Observer | None = None, record: Path | None = None) -> Iterator[Episode]:
    """The one episode loop: every seed's episode in order, every seat played by ``lineup``
    (policies built once, reset per episode by the one seeding rule of
    :class:`~policies.focal.FocalEnv`), each yielded as soon as it ends. ``env``: an arena
    (or a wrapper of one) to play on, or a scenario to make one of; ``record``: write the
    episodes to this JSONL recording."""
    base = arena_for(env)
    policies = lineup_policies(lineup, base.unwrapped)
    played = base if record is None else RecordEpisode(base, record)
    episode = FocalEnv(played, (), policies)
    try:
        for seed in seeds:
            start = time.perf_counter()
            episode.reset(seed=seed)
            if observer is not None:
                observer.begin(seed)
            index = 0
            while not episode.episode_over:
                observed = episode.seat_observations
                episode.step({})
                if observer is not None:
                    observer.tick(Tick(seed, index, observed, episode.seat_actions, policies, episode))
                index += 1
            result = Episode(int(seed), {agent: info["episode"] for agent, info in episode.seat_infos.items()},
                             time.perf_counter() - start)
            if observer is not None:
                observer.end(result)
            yield result
    finally:
        if record is not None:
            played.close()


def play_all(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Iterable[int],
             observer: Observer | None = None, record: Path | None = None) -> list[Episode]:
    """:func:`play`, every episode at once (a recording is closed when it returns)."""
    return list(play(env, lineup, seeds, observer, record))


def play_returns(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Iterable[int], seat: str,
                 observer: Observer | None = None) -> list[float]:
    """``seat``'s return per seed."""
    return [float(e.summaries[seat]["return"]) for e in play(env, lineup, seeds, observer)]


@dataclass(frozen=True)
class Group:
    """Episodes of one player on one scenario x background: its policies are built once."""

    config: ScenarioConfig
    seat: str
    background: Population
    player: Player
    keys: tuple[EpisodeKey, ...]
    record: Path | None = None  # write the group's episodes to this JSONL recording (in-process only)


@dataclass(frozen=True)
class EpisodeResult:
    key: EpisodeKey
    policy: str
    focal_return: float
    episode: str  # JSON of every agent's infos["episode"], encoded where it was played
    wall_seconds: float


# --------------------------------------------------------------------------- planning


def planned_keys(roster: Roster) -> list[EpisodeKey]:
    """Every episode the roster asks for, in a fixed order (scenario, background, player, seed)."""
    return [
        EpisodeKey(roster.seat, config.name, config.content_hash, background, roster.background_hashes[background],
                   player.name, roster.player_hashes[player.name], seed)
        for config in roster.scenarios
        for background in roster.backgrounds
        for player in roster.players
        for seed in roster.seeds
    ]


def check_unchanged(roster: Roster, store: ResultStore, allow_changed: bool) -> None:
    """Refuse to mix results of a changed scenario, background or checkpoint with the stored ones."""
    current = {
        "scenario": {c.name: c.content_hash for c in roster.scenarios},
        "background": dict(roster.background_hashes),
        "player": dict(roster.player_hashes),
    }
    problems = []
    for column, hashes in current.items():
        for name, stored in store.changed(roster.seat, column, hashes).items():
            problems.append(f"{column} {name!r} is now {hashes[name]}, the store has results for {', '.join(stored)}")
    if problems and not allow_changed:
        raise ChangedError(
            f"{store.path}: " + "; ".join(problems) + ". Its content changed since those episodes were played; "
            "pass --allow-changed to play the new version beside the old rows (the tables use the new one), "
            "or use another --out."
        )


def missing_groups(roster: Roster, done: set[tuple[Any, ...]]) -> list[Group]:
    by_name = {c.name: c for c in roster.scenarios}
    players = {p.name: p for p in roster.players}
    groups: dict[tuple[str, str, str], list[EpisodeKey]] = {}
    for key in planned_keys(roster):
        if key.as_tuple() not in done:
            groups.setdefault((key.scenario, key.background, key.player), []).append(key)
    return [Group(by_name[s], roster.seat, roster.backgrounds[b], players[p], tuple(keys))
            for (s, b, p), keys in groups.items()]


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


def episode_seconds(config: ScenarioConfig, seat: str, player: Player, background: Population) -> float:
    """A rough single-core estimate of one episode's cost: whether Ray pays off, and how to balance its batches."""
    agents = focal_agents(seat, config)
    entries = focal_population(background, agents, player).resolve(config).values()
    policies = [e.policy for e in entries]
    learned = sum(1 for p in policies if p.startswith("learned:"))
    return (config.max_ticks * (len(config.agents) * SECONDS_PER_AGENT_TICK
                                + LEARNED_SECONDS_PER_AGENT_TICK * learned)
            + oracle_episode_seconds(config) * policies.count("oracle"))


def group_seconds(group: Group) -> float:
    return len(group.keys) * episode_seconds(group.config, group.seat, group.player, group.background)


def batches(groups: Sequence[Group], workers: int) -> list[list[Group]]:
    """Split the work into batches of similar estimated cost, longest first.

    About ``BATCHES_PER_WORKER x workers`` batches of the cheap episodes (consecutive seeds of one group stay
    together, so its policies are built once); an episode estimated at :data:`HEAVY_EPISODE_SECONDS` or more (a
    large cluster's oracle) is a batch of its own, so one slow scenario's seeds spread over every worker. The
    batches are returned by estimated cost, longest first: Ray starts them in that order, and the cheap ones fill
    the workers' ends (longest-processing-time first): the heavy episodes first (the estimate is rough where it
    matters most, so they are ordered by their estimate and each is one task), then the other batches."""
    costs = [group_seconds(g) for g in groups]
    target = max(sum(costs) / (workers * BATCHES_PER_WORKER), 1e-9)
    heavy: list[list[Group]] = []
    out: list[list[Group]] = [[]]
    load = 0.0
    for group, cost in sorted(zip(groups, costs, strict=True), key=lambda gc: -gc[1] / len(gc[0].keys)):
        per_episode = cost / len(group.keys)
        if per_episode >= HEAVY_EPISODE_SECONDS:
            heavy += [[Group(group.config, group.seat, group.background, group.player, (key,))] for key in group.keys]
            continue
        keys = list(group.keys)
        while keys:
            room = max(1, round((target - load) / per_episode))
            take, keys = keys[:room], keys[room:]
            out[-1].append(Group(group.config, group.seat, group.background, group.player, tuple(take)))
            load += per_episode * len(take)
            if load >= target - per_episode / 2:  # closer to the target than one more episode would get
                out.append([])
                load = 0.0
    heavy.sort(key=lambda part: -group_seconds(part[0]))  # the slowest episodes start first
    return heavy + sorted((b for b in out if b), key=lambda part: -sum(group_seconds(g) for g in part))


# --------------------------------------------------------------------------- playing


def focal_population(background: Population, agents: Sequence[str], player: Player) -> Population:
    """The background with every focal agent played by ``player`` (uniform random: left to the caller)."""
    population = background
    if not player.uniform_random:
        for agent in agents:
            population = population.with_agent(agent, player.entry.policy, **dict(player.entry.params))
    return population


def focal_policies(group: Group, env: Any) -> dict[str, Policy]:
    """Every seat's policy for ``group``: the background, and the player in the focal seat (built
    once, reset per episode); a uniformly random player acts through :func:`policies.base.uniform_random_policies`."""
    agents = focal_agents(group.seat, group.config)
    policies: dict[str, Policy] = focal_population(group.background, agents, group.player).build(group.config, env=env)
    if group.player.uniform_random:
        policies.update(uniform_random_policies(env, agents))
    return policies


def batched_entries(group: Group) -> dict[str, Entry] | None:
    """Every seat's entry for ``group`` when each has a batched form (:func:`policies.registry.has_batch_form`:
    the scripted policies and learned checkpoints), else None (the oracle, fixed codes, a policy set, a uniformly
    random player: they play per arena)."""
    if group.player.uniform_random:
        return None
    agents = focal_agents(group.seat, group.config)
    entries = focal_population(group.background, agents, group.player).resolve(group.config)
    return entries if all(has_batch_form(e.policy, group.config, agent) for agent, e in entries.items()) else None


def batched_policies(group: Group, num_envs: int) -> dict[str, BatchPolicy]:
    """Every seat's batched policy for ``group`` in ``num_envs`` arenas (built once per batch)."""
    entries = batched_entries(group)
    if entries is None:
        raise ValueError(f"{group.player.name!r} on {group.config.name!r}: a seat has no batched form; play it per arena")
    return {agent: batch_policy(entry.policy, group.config, agent, num_envs, **dict(entry.params))
            for agent, entry in entries.items()}


def plays_batched(group: Group, batched: bool = True) -> bool:
    """Whether :func:`play_episodes` plays ``group`` on the batched core: asked to (``batched``, and
    :data:`PER_ARENA_ENV` unset or 0), at least :data:`MIN_ARENAS` seeds, no recording, and every
    seat with a batched form."""
    return (batched and os.environ.get(PER_ARENA_ENV, "") in ("", "0") and len(group.keys) >= MIN_ARENAS
            and group.record is None and batched_entries(group) is not None)


def play_batched(config: ScenarioConfig, policies: Mapping[str, BatchPolicy],
                 seeds: Sequence[int]) -> list[dict[str, dict[str, float]]]:
    """One episode per seed on the batched core, arena k playing ``seeds[k]`` (``policies`` in
    ``len(seeds)`` arenas, reset by the one seeding rule of :class:`~policies.focal.FocalEnv`):
    every agent's episode totals per seed, as the per-arena path gives them (what an arena plays
    after its first episode ends is ignored; it stops when every arena has ended)."""
    env = commons_arena.vector_env(config, num_envs=len(seeds))
    seat_index = {agent: i for i, agent in enumerate(env.possible_agents)}
    for agent, policy in policies.items():
        policy.reset([policy_seed(seed, seat_index[agent]) for seed in seeds])
    observations, _ = env.reset(seed=[int(seed) for seed in seeds])
    summaries: list[dict[str, dict[str, float]] | None] = [None] * len(seeds)
    pending = np.ones(len(seeds), dtype=bool)
    while pending.any():
        actions = {agent: policy.act(observations[agent]) for agent, policy in policies.items()}
        observations, _, _, _, infos = env.step(actions)
        for k in np.flatnonzero(pending & infos[env.possible_agents[0]].get("_episode", False)).tolist():
            summaries[k] = {agent: {key: float(values[k]) for key, values in infos[agent]["episode"].items()}
                            for agent in env.possible_agents}
            pending[k] = False
    return [summary for summary in summaries if summary is not None]


def play_episodes(group: Group, batched: bool = True) -> Iterator[tuple[EpisodeKey, dict[str, dict[str, float]], float]]:
    """Play a group's episodes in order: ``(key, every agent's infos["episode"], wall seconds)`` each.

    On the batched core (:func:`play_batched`, the seeds split evenly into batches of at most
    :data:`MAX_ARENAS`, each batch's wall time shared evenly by its episodes) when
    :func:`plays_batched`, else per arena through :func:`play`, each as soon as it is finished;
    the two give the same episodes bit for bit."""
    if plays_batched(group, batched):
        parts = -(-len(group.keys) // MAX_ARENAS)
        for part in np.array_split(np.arange(len(group.keys)), parts):
            keys = group.keys[int(part[0]):int(part[-1]) + 1]
            began = time.perf_counter()
            played = play_batched(group.config, batched_policies(group, len(keys)), [key.seed for key in keys])
            seconds = (time.perf_counter() - began) / len(keys)
            for key, summary in zip(keys, played, strict=True):
                yield key, summary, seconds
        return
    episodes = play(group.config, lambda env: focal_policies(group, env), [key.seed for key in group.keys],
                    record=group.record)
    for key, episode in zip(group.keys, episodes, strict=True):
        yield key, episode.summaries, episode.wall_seconds


def play_group(group: Group, batched: bool = True) -> Iterator[EpisodeResult]:
    """:func:`play_episodes` as results for the store (the focal seat's mean return, the episode as JSON)."""
    agents = focal_agents(group.seat, group.config)
    policy = json.dumps({"policy": group.player.entry.policy, **dict(group.player.entry.params)}, sort_keys=True)
    for key, episode, seconds in play_episodes(group, batched):
        focal = sum(episode[a]["return"] for a in agents) / len(agents)
        yield EpisodeResult(key, policy, float(focal), json.dumps(episode, sort_keys=True), seconds)


def play_batch(batch: Sequence[Group], batched: bool = True) -> Iterator[EpisodeResult]:
    for group in batch:
        yield from play_group(group, batched)


def play_batch_streaming(batch: Sequence[Group], flush_seconds: float,
                         batched: bool = True) -> Iterator[list[EpisodeResult]]:
    """:func:`play_batch`, handed on in small lists: every ``flush_seconds`` rather than per
    episode, so that Ray's per-item cost stays small next to a few-millisecond episode."""
    pending: list[EpisodeResult] = []
    last = time.perf_counter()
    for result in play_batch(batch, batched):
        pending.append(result)
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
        names.extend(entry.policy for entry in group.background.resolve(group.config, strict=False).values())
    return names


def play_shipped_batch(batch: Sequence[Group], checkpoints: Sequence[PackedCheckpoint],
                       flush_seconds: float, batched: bool) -> Iterator[list[EpisodeResult]]:
    """A Ray task: install the shipped checkpoints on this node, then :func:`play_batch_streaming`."""
    install(checkpoints)
    yield from play_batch_streaming(batch, flush_seconds, batched)


def run_in_process(groups: Sequence[Group], batched: bool = True) -> Iterator[EpisodeResult]:
    yield from play_batch(groups, batched)


def run_on_ray(groups: Sequence[Group], workers: int, address: str | None,
               batched: bool = True) -> Iterator[EpisodeResult]:
    """Yield episodes as Ray tasks finish them (streaming generators, several batches per worker)."""
    import ray

    # A cluster address (or RAY_ADDRESS) joins it, shipping the code; otherwise a local Ray with
    # `workers` CPUs. A Ray we start, we stop; one already running (a notebook, tests) stays.
    started = start_ray(address, num_cpus=workers)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        parts = batches(groups, max(1, min(workers, cpus)))
        # the learned players' checkpoints go to the nodes as bytes, once (ray.put), not as paths
        packed: Sequence[PackedCheckpoint] = pack_all(policy_names(groups))
        checkpoints = ray.put(packed)
        # learned policies set torch to one thread themselves
        task = ray.remote(num_cpus=1, num_returns="streaming", max_retries=0)(play_shipped_batch)
        pending: list[Any] = [task.remote(batch, checkpoints, FLUSH_SECONDS, batched) for batch in parts]
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


@dataclass
class PlayReport:
    planned: int
    already_stored: int
    played: int = 0
    seconds: float = 0.0
    mode: str = "in-process"
    notes: list[str] = field(default_factory=list)

    @property
    def episodes_per_second(self) -> float:
        return self.played / self.seconds if self.seconds > 0 else float("nan")


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


@dataclass(frozen=True)
class PlayOptions:
    """How a roster is played (not what): forwarded unchanged from the command line through
    :func:`experiments.evaluation.tournament.run_tournament` to :func:`play_roster`."""

    workers: int | None = None  # parallel workers (None: every CPU); 1 plays in-process without Ray
    address: str | None = None  # a Ray cluster to join (RAY_ADDRESS does the same); None: a local Ray
    allow_changed: bool = False  # play a changed scenario / checkpoint / background beside its old rows
    progress: bool = True  # show the progress bar
    ray_min_seconds: float = RAY_MIN_SECONDS  # below this much estimated work, play in-process
    log: Callable[..., Any] = print  # where the one-line notes go
    batched: bool = True  # groups whose every seat has a batched form play on the batched core; False: per arena


DEFAULT_OPTIONS = PlayOptions()
QUIET = PlayOptions(progress=False, log=lambda *_: None)  # for callers that report themselves


def play_roster(roster: Roster, store: ResultStore, options: PlayOptions = DEFAULT_OPTIONS) -> PlayReport:
    """Play every missing episode of ``roster`` into ``store``."""
    return play_rosters([roster], store, options)


def play_rosters(rosters: Sequence[Roster], store: ResultStore, options: PlayOptions = DEFAULT_OPTIONS,
                 desc: str = "tournament") -> PlayReport:
    """Play every missing episode of several rosters into ``store`` in one go (one Ray start): a
    benchmark suite is a roster per evaluation scenario (:mod:`experiments.evaluation.benchmark`)."""
    from tqdm import tqdm

    workers, address, log = options.workers, options.address, options.log
    for roster in rosters:
        check_unchanged(roster, store, options.allow_changed)
    done: dict[str, set[tuple[Any, ...]]] = {}
    planned, groups = 0, []
    for roster in rosters:
        if roster.seat not in done:
            done[roster.seat] = store.existing(roster.seat)
        planned += len(planned_keys(roster))
        groups += missing_groups(roster, done[roster.seat])
    todo = sum(len(g.keys) for g in groups)
    report = PlayReport(planned=planned, already_stored=planned - todo)
    if report.already_stored:
        log(f"{report.already_stored} of {planned} episodes already in {store.path}: playing the other {todo}")
    if not todo:
        return report
    n, why = choose_workers(groups, workers, address, options.ray_min_seconds)
    log(why)
    report.mode = "in-process" if n == 1 else f"ray x{n}"
    results = run_in_process(groups, options.batched) if n == 1 else run_on_ray(groups, n, address, options.batched)
    start = time.perf_counter()
    with tqdm(total=todo, desc=desc, unit="ep", disable=not options.progress, smoothing=0.1) as bar:
        for result in results:
            if store.append(result.key, result.policy, result.focal_return, result.episode, result.wall_seconds):
                report.played += 1
            bar.update()
    report.seconds = time.perf_counter() - start
    return report


__all__ = ["DEFAULT_OPTIONS", "QUIET", "Episode", "EpisodeResult", "Group", "Lineup", "Observer", "PlayOptions", "PlayReport",
           "Tick", "arena_for", "focal_policies", "lineup_policies", "planned_keys", "play", "play_all", "play_batched", "play_episodes", "play_group",
           "play_returns", "play_roster", "play_rosters"]
