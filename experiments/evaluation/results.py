"""A roster's missing episodes played into the results store (:mod:`experiments.evaluation.store`).

A tournament-like evaluation is a roster and an aggregate over what the engine plays: the
``tournament`` command (:mod:`experiments.evaluation.tournament`), the benchmark (a roster per
evaluation scenario), the checkpoint comparison and ``exploit`` (a tournament per cell). The
roster's episodes not yet stored become :class:`~experiments.evaluation.engine.Group`\\ s (one player in
the focal seat of one evaluation scenario, on the missing seeds), played in-process or on Ray
(:mod:`experiments.evaluation.workers`); each row's store key (:func:`episode_key`: the names and
content hashes of scenario, background and player, and the seed) is derived here, where the row is
written, one committed transaction per episode as it finishes. A rerun plays only the missing rows,
and a scenario, checkpoint or background whose content changed since is refused unless
``allow_changed``. A stored row names its policies (registry names and checkpoints: hashed, and
shipped to Ray workers); anything else (a wrapped or hand-built policy) plays through
:func:`~experiments.evaluation.engine.play` and is kept by its caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.evaluation.engine import EvaluationScenario, Group
from experiments.evaluation.roster import Player, Roster
from experiments.evaluation.store import ChangedError, EpisodeKey, ResultStore
from experiments.evaluation.workers import RAY_MIN_SECONDS, choose_workers, run_in_process, run_on_ray


def episode_key(roster: Roster, evaluation: EvaluationScenario, player: Player, seed: int) -> EpisodeKey:
    """The store key of one episode of ``roster``: names and content hashes, and the seed."""
    config, background = evaluation.config, evaluation.background_name
    return EpisodeKey(roster.seat, config.name, config.content_hash, background, roster.background_hashes[background],
                      player.name, roster.player_hashes[player.name], seed)


def evaluations_of(roster: Roster) -> tuple[EvaluationScenario, ...]:
    """Every scenario x background of ``roster`` in its focal seat, in order (scenario, then background)."""
    return tuple(EvaluationScenario(config, roster.seat, name, background)
                 for config in roster.scenarios for name, background in roster.backgrounds.items())


def planned_keys(roster: Roster) -> list[EpisodeKey]:
    """Every episode the roster asks for, in a fixed order (scenario, background, player, seed)."""
    return [episode_key(roster, evaluation, player, seed)
            for evaluation in evaluations_of(roster) for player in roster.players for seed in roster.seeds]


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
    """One group per evaluation scenario x player with seeds not yet in ``done`` (stored keys as tuples)."""
    groups = []
    for evaluation in evaluations_of(roster):
        for player in roster.players:
            seeds = tuple(seed for seed in roster.seeds
                          if episode_key(roster, evaluation, player, seed).as_tuple() not in done)
            if seeds:
                groups.append(Group(evaluation, player, seeds))
    return groups


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


@dataclass(frozen=True)
class PlayOptions:
    """How a roster is played (not what): forwarded unchanged from the command line through
    :func:`experiments.evaluation.tournament.run_tournament` to :func:`fill_store`."""

    workers: int | None = None  # parallel workers (None: every CPU); 1 plays in-process without Ray
    address: str | None = None  # a Ray cluster to join (RAY_ADDRESS does the same); None: a local Ray
    allow_changed: bool = False  # play a changed scenario / checkpoint / background beside its old rows
    progress: bool = True  # show the progress bar
    ray_min_seconds: float = RAY_MIN_SECONDS  # below this much estimated work, play in-process
    log: Callable[..., Any] = print  # where the one-line notes go
    batched: bool = True  # groups whose every seat has a batched form play on the batched core; False: per arena


DEFAULT_OPTIONS = PlayOptions()
QUIET = PlayOptions(progress=False, log=lambda *_: None)  # for callers that report themselves


def fill_store(rosters: Sequence[Roster], store: ResultStore, options: PlayOptions = DEFAULT_OPTIONS,
               desc: str = "tournament") -> PlayReport:
    """Play every missing episode of ``rosters`` into ``store`` in one go (one Ray start): a tournament is
    one roster, a benchmark suite a roster per evaluation scenario (:mod:`experiments.evaluation.benchmark`)."""
    from tqdm import tqdm

    workers, address, log = options.workers, options.address, options.log
    for roster in rosters:
        check_unchanged(roster, store, options.allow_changed)
    done: dict[str, set[tuple[Any, ...]]] = {}
    planned, groups, owners = 0, [], []
    for roster in rosters:
        if roster.seat not in done:
            done[roster.seat] = store.existing(roster.seat)
        planned += len(planned_keys(roster))
        missing = missing_groups(roster, done[roster.seat])
        groups += missing
        owners += [roster] * len(missing)
    todo = sum(len(g.seeds) for g in groups)
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
        for index, result in results:
            group = groups[index]
            key = episode_key(owners[index], group.evaluation, group.player, result.seed)
            if store.append(key, result.policy, result.focal_return, result.episode, result.wall_seconds):
                report.played += 1
            bar.update()
    report.seconds = time.perf_counter() - start
    return report


__all__ = ["DEFAULT_OPTIONS", "QUIET", "PlayOptions", "PlayReport", "episode_key", "fill_store", "missing_groups",
           "planned_keys"]
