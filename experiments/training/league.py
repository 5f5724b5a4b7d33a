"""League training: a team learns against a mix of scripted teams and frozen snapshots of itself.

The learner is the shared team module ``team`` (team identity in the observation). In every
episode one team seat, drawn per episode, is the learner; each other team seat draws its
player from the *mix*: the learner itself (self-play), the scripted team archetypes named by
``--league-scripted`` and every frozen snapshot ``team_v1``, ``team_v2``, ... taken so far.
The allocator and the broker are background (``--background``, default the scenario's own
population) playing inside the env.

When a snapshot is taken (:class:`LeagueCallback`): after an iteration in which the learner's
mean return **per seat it played** beats the mean per seat of the mix's other members (the
scripted archetypes and the snapshots) by the **margin** ``snapshot_margin`` (relative:
``learner - mix > snapshot_margin * max(1, |mix|)``; default 0.1, i.e. 10 %), at least
``snapshot_gap`` iterations after the last snapshot. Both means are over the (seat, episode)
pairs of the iteration's finished episodes (``result["env_runners"]["league_seat_return"]``,
smoothed like RLlib's own metrics). Not RLlib's ``module_episode_returns_mean``: that sums a
module's return over every seat it plays in an episode, and the learner also plays other
team seats as a member of its own mix (self-play), so it read 12-70 % above the mix whatever
was learned. The mix then grows by one frozen copy of the learner, also written as data-only
policies (``<run>/snapshots/team_vN/policies/<team>``: ``learned:`` plays them).

The snapshot trap (RLlib 2.60): ``Algorithm.add_module`` syncs the new
module's *random* initial weights to the env runners before ``set_state`` copies the
learner's weights into it, so the runners would play the snapshot with random weights for
one more iteration. :func:`add_snapshot` pushes the source weights to every env runner
explicitly; ``tests/experiments/training/test_league.py`` proves the snapshot acts exactly like its source on the
next iteration (and that without the push it would not).

Matchups are drawn per episode from the episode's seed (:func:`league_mapping`): the env
draws the seed in ``reset``, and RLlib maps agents to modules right after it; the callback
hands the episode its env (``on_episode_created``) so the mapping can read the seed, and
swaps the reference for the seed itself once the episode has started. The same seed and mix
give the same matchup.

At the end of a run the snapshots play each other through the tournament core
(:func:`payoff_matrix`): the snapshot × snapshot payoff matrix (row snapshot in one team seat,
the column snapshot in the others) and the Nash mixture of its symmetric zero-sum game go to
``<run>/league_payoff.json``. ``--resume`` re-adds the snapshots of ``league.json`` before
restoring the weights.

    commons-arena train --experiment league --scenario standard --minutes 10
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from commons_arena.files import write_file
from commons_arena.inputs import loads_json, read_text
from commons_arena.scenario import ScenarioConfig
from experiments.training.callbacks import RewardTermsCallback, foreach_sampling_runner
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.scripted import ScriptedRLModule, registered_policy

LEARNER = "team"
SNAPSHOT_PREFIX = "team_v"
SCRIPTED_PREFIX = "scripted_"


def _draw(key: str, n: int) -> int:
    return zlib.crc32(key.encode()) % n


EPISODE_ENV = "league_env"  # custom_data: the env of an episode that has not started yet
EPISODE_SEED = "league_seed"  # custom_data: the seed of an episode that has started


def episode_seed(episode: Any) -> int | None:
    """The seed an episode plays (its env's, read while RLlib maps its agents right after
    reset); None for an episode with neither (see :func:`league_mapping`)."""
    data = getattr(episode, "custom_data", {})
    if EPISODE_SEED in data:
        return int(data[EPISODE_SEED])
    env = data.get(EPISODE_ENV)
    return None if env is None or env.episode_seed is None else int(env.episode_seed)


def league_mapping(pool: Sequence[str], team_seats: Sequence[str], agent_id: Any, episode: Any = None, **kw: Any) -> str:
    """One team seat per episode plays the learner; every other team seat a member of ``pool``;
    both drawn from the episode's seed.

    An episode without a seed is a continuation RLlib builds in ``MultiAgentEpisode.cut``: it
    evaluates the mapping eagerly (``dict.get(agent, mapping(agent))``) and keeps the
    mapping it already has; the learner is returned there and never used.
    """
    return member_of(pool, team_seats, str(agent_id), episode_seed(episode))


def member_of(pool: Sequence[str], team_seats: Sequence[str], agent: str, seed: int | None) -> str:
    """Who plays ``agent`` in the episode of ``seed`` (:func:`league_mapping`; the lean runner asks it per arena)."""
    if agent not in team_seats:
        return agent
    if seed is None or team_seats[_draw(str(seed), len(team_seats))] == agent:
        return LEARNER
    return pool[_draw(f"{seed}/{agent}", len(pool))]


def mapping_for(pool: Sequence[str], team_seats: Sequence[str]) -> Any:
    return functools.partial(league_mapping, tuple(pool), tuple(team_seats))


def scripted_member_specs(
    scripted: Sequence[str], config: ScenarioConfig, team_seats: Sequence[str], scale: np.ndarray
) -> dict[str, RLModuleSpec]:
    """One never-trained ScriptedRLModule per scripted archetype of the mix, seeded by the
    episode's seed and the seat it plays (the rule of every background policy)."""
    seat_index = {seat: list(config.agents).index(seat) for seat in team_seats}
    return {
        f"{SCRIPTED_PREFIX}{name}": RLModuleSpec(
            module_class=ScriptedRLModule,
            observation_space=None,  # filled in by build_algorithm_config: the team seats' spaces
            action_space=None,
            model_config={"policy_factory": registered_policy(name, config), "agent_id": team_seats[0],
                          "seats": list(team_seats), "observation_scale": [float(x) for x in scale],
                          "seat_index": seat_index},
        )
        for name in scripted
    }


def learner_beats_mix(returns: Mapping[str, float], margin: float) -> tuple[bool, float, float]:
    """(beats, learner mean, mix mean) from per-member mean returns *per seat played*."""
    learner = returns.get(LEARNER)
    mix = [v for m, v in returns.items() if m != LEARNER and np.isfinite(v)]
    if learner is None or not np.isfinite(learner) or not mix:
        return False, float("nan"), float("nan")
    mix_mean = float(np.mean(mix))
    return bool(learner - mix_mean > margin * max(1.0, abs(mix_mean))), float(learner), mix_mean


def seat_returns(episode: Any, chunks: Sequence[Any], team_seats: Sequence[str]) -> dict[str, list[float]]:
    """Member -> the episode returns of the team seats it played (each seat counted once, its
    earlier chunks included)."""
    out: dict[str, list[float]] = {}
    for seat in team_seats:
        if seat not in episode.agent_episodes:
            continue
        total = sum(c.agent_episodes[seat].get_return() for c in chunks if seat in c.agent_episodes)
        total += episode.agent_episodes[seat].get_return()
        out.setdefault(episode.module_for(seat), []).append(float(total))
    return out


def add_snapshot(algorithm: Any, snapshot_id: str, pool: Sequence[str], team_seats: Sequence[str],
                 push: bool = True) -> dict[str, np.ndarray]:
    """Freeze the learner's current weights as module ``snapshot_id``, added to the mix.

    Returns the source weights. ``push=False`` reproduces RLlib's stock behaviour (the env
    runners keep the new module's random weights for an iteration): only for the test.
    """
    weights = algorithm.learner_group.get_weights([LEARNER])[LEARNER]
    algorithm.add_module(
        module_id=snapshot_id,
        module_spec=RLModuleSpec.from_module(algorithm.get_module(LEARNER)),
        new_agent_to_module_mapping_fn=mapping_for([*pool, snapshot_id], team_seats),
        new_should_module_be_updated=[LEARNER],
    )
    algorithm.set_state({"learner_group": {"learner": {"rl_module": {snapshot_id: weights}}}})
    if push:  # the runners still hold the random initial weights add_module synced to them

        def load(runner: Any) -> None:
            runner.module[snapshot_id].set_state(weights)

        foreach_sampling_runner(algorithm, load)
    return weights


SEAT_RETURN_KEY = "league_seat_return"  # result["env_runners"][<this>][member]: mean return per seat played


class LeagueCallback(RewardTermsCallback):
    """Adds a snapshot of the learner when it beats the current mix (module docstring).

    The env config's :class:`~experiments.training.env_config.LeagueSettings` say who and when;
    ``result["league"]`` reports the mix, the comparison and whether a snapshot was added.
    """

    def on_episode_created(self, *, episode: Any, env: Any = None, env_index: int = 0, **kwargs: Any) -> None:
        if env is not None and hasattr(env, "envs"):
            episode.custom_data[EPISODE_ENV] = env.envs[env_index].unwrapped

    def on_episode_start(self, *, episode: Any, **kwargs: Any) -> None:
        env = episode.custom_data.pop(EPISODE_ENV, None)  # episodes travel: keep only the seed
        if env is not None:
            episode.custom_data[EPISODE_SEED] = int(env.episode_seed)

    def on_episode_end(self, *, episode: Any, env_runner: Any = None, metrics_logger: Any = None,
                       **kwargs: Any) -> None:
        super().on_episode_end(episode=episode, env_runner=env_runner, metrics_logger=metrics_logger, **kwargs)
        league = ArenaEnvConfig.of(env_runner.config.env_config).league if env_runner is not None else None
        if metrics_logger is None or not league:
            return
        window = env_runner.config.metrics_num_episodes_for_smoothing
        chunks = kwargs.get("prev_episode_chunks") or ()
        for member, values in seat_returns(episode, chunks, list(league.team_seats)).items():
            for value in values:
                metrics_logger.log_value((SEAT_RETURN_KEY, member), value, reduce="mean", window=window)

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        league = ArenaEnvConfig.of(algorithm.config.env_config).league
        if league is None:
            return
        pool = getattr(algorithm, "_league_pool", list(league.pool))
        since = getattr(algorithm, "_league_since", 0) + 1
        returns = result.get("env_runners", {}).get(SEAT_RETURN_KEY, {})
        beats, learner, mix = learner_beats_mix({m: float(v) for m, v in returns.items() if m in pool}, league.margin)
        added = None
        if beats and since >= league.gap:
            added = f"{SNAPSHOT_PREFIX}{sum(m.startswith(SNAPSHOT_PREFIX) for m in pool) + 1}"
            add_snapshot(algorithm, added, pool, list(league.team_seats))
            pool = [*pool, added]
            since = 0
        algorithm._league_pool = pool
        algorithm._league_since = since
        result["league"] = {"mix": list(pool), "learner_return": learner, "mix_return": mix, "snapshot": added,
                            "seat_returns": {m: float(v) for m, v in returns.items()}}


def restore_mix(algorithm: Any, mix: Sequence[str], team_seats: Sequence[str], since: int) -> None:
    """A resumed league: the snapshots of ``mix`` added back as modules (their weights then come
    from the checkpoint, ``weight_sync.push_learner_weights``), the mapping over the whole mix."""
    pool: list[str] = [m for m in mix if not m.startswith(SNAPSHOT_PREFIX)]
    for member in mix:
        if member.startswith(SNAPSHOT_PREFIX):
            algorithm.add_module(module_id=member, module_spec=RLModuleSpec.from_module(algorithm.get_module(LEARNER)),
                                 new_agent_to_module_mapping_fn=mapping_for([*pool, member], team_seats),
                                 new_should_module_be_updated=[LEARNER])
            pool.append(member)
    algorithm._league_pool = pool
    algorithm._league_since = since


def last_mix(run: Path, iterations: int) -> tuple[list[str], int]:
    """The mix after iteration ``iterations`` (the checkpoint's) and the iterations since its
    last snapshot, from ``<run>/league.json`` (a killed session may have logged later ones)."""
    path = run / "league.json"
    text = read_text(path, "league log", 256 * 2**20, own=True) if path.is_file() else ""  # checked on resume
    rows = [loads_json(line, f"{path}", allow_nan=True) for line in text.splitlines() if line.strip()]
    rows = list({row["iteration"]: row for row in rows if row["iteration"] <= iterations}.values())
    if not rows:
        return [], 0
    since = next((i for i, row in enumerate(reversed(rows)) if row.get("snapshot")), len(rows))
    return list(rows[-1]["mix"]), since


def payoff_matrix(run: Path, config: ScenarioConfig, seeds: Sequence[int], focal: str | None = None) -> dict[str, Any]:
    """Snapshot × snapshot through the tournament core: the row snapshot plays team seat
    ``focal`` (default the first team), the column snapshot every other team seat, the rest the
    scenario's own population; entry = the row's mean return. The Nash mixture is that of the
    symmetric zero-sum game ``A - Aᵀ`` (``metagame.zero_sum_nash``)."""
    from dataclasses import replace

    from experiments.evaluation.metagame import zero_sum_nash
    from experiments.evaluation.results import QUIET
    from experiments.evaluation.roster import roster_from_dict
    from experiments.evaluation.tournament import run_tournament
    from policies.policy_set import SET_DIR

    folder = run / SNAPSHOTS
    snapshots = sorted((p.name for p in folder.iterdir() if p.is_dir()), key=lambda n: int(n.removeprefix(SNAPSHOT_PREFIX)))
    if len(snapshots) < 1:
        raise ValueError(f"{run} holds no league snapshots ({folder} is empty)")
    focal = focal or config.team_names[0]
    others = [t for t in config.team_names if t != focal]
    roster = roster_from_dict({
        "name": f"league snapshots of {run.name}", "seat": focal, "scenarios": [config.name], "seeds": list(seeds),
        "entrants": {s: f"learned:{folder / s / SET_DIR / focal}" for s in snapshots},
        "backgrounds": {s: {"agents": {t: f"learned:{folder / s / SET_DIR / t}" for t in others}} for s in snapshots},
    }, parsed=[config])  # the run's scenario as parsed (a scenario file is not looked up by its name)
    options = replace(QUIET, ray_min_seconds=float("inf"))  # in-process: the training run holds the CPUs
    result = run_tournament(roster, run / "league_tournament", options=options)
    means = {(r["player"], r["background"]): r["return_mean"] for r in result.aggregates.scores}
    payoff = np.array([[means[(a, b)] for b in snapshots] for a in snapshots])
    mixture, _, _ = zero_sum_nash(payoff - payoff.T)
    report = {"scenario": config.name, "focal_seat": focal, "seeds": [int(seeds[0]), int(seeds[-1])],
              "snapshots": snapshots, "payoff": payoff.tolist(),
              "nash": {s: float(w) for s, w in zip(snapshots, mixture, strict=True)}}
    write_file(run / "league_payoff.json", json.dumps(report, indent=1))
    return report


SNAPSHOTS = "snapshots"


__all__ = [
    "LEARNER",
    "SNAPSHOTS",
    "LeagueCallback",
    "episode_seed",
    "last_mix",
    "payoff_matrix",
    "restore_mix",
    "seat_returns",
    "add_snapshot",
    "league_mapping",
    "learner_beats_mix",
    "member_of",
    "mapping_for",
    "scripted_member_specs",
]
