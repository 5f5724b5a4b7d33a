"""League training: a team learns against a mix of scripted teams and frozen snapshots of itself.

The learner is the shared team module ``team`` (team identity in the observation). In every
episode one team seat, drawn per episode, is the learner; each other team seat draws its
player from the *mix*: the learner itself (self-play), the scripted team archetypes named by
``--league-scripted`` and every frozen snapshot ``team_v1``, ``team_v2``, ... taken so far.
The allocator and the broker are background (``--background``, default the scenario's own
population) playing inside the env.

When a snapshot is taken (:class:`LeagueCallback`): after an iteration in which the learner's
smoothed mean episode return (RLlib's ``module_episode_returns_mean["team"]``) beats the
mean over the mix's other members by the **margin** ``snapshot_margin`` (relative:
``learner - mix > snapshot_margin * max(1, |mix|)``; default 0.1, i.e. 10 %), at least
``snapshot_gap`` iterations after the last snapshot (the smoothing window still holds older
episodes). The mix then grows by one frozen copy of the learner.

The snapshot trap (RLlib 2.60): ``Algorithm.add_module`` syncs the new
module's *random* initial weights to the env runners before ``set_state`` copies the
learner's weights into it, so the runners would play the snapshot with random weights for
one more iteration. :func:`add_snapshot` pushes the source weights to every env runner
explicitly; ``tests/test_league.py`` proves the snapshot acts exactly like its source on the
next iteration (and that without the push it would not).

Matchups are drawn per episode from the episode id (not from the env seed): the env and the
background stay seeded by the one rule, but which member plays which seat is not replayable.

    commons-arena train --experiment league --scenario standard --minutes 10
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from commons_arena.scenario import ScenarioConfig
from experiments.training.callbacks import RewardTermsCallback, foreach_sampling_runner
from experiments.training.scripted import ScriptedRLModule, registered_policy

LEARNER = "team"
SNAPSHOT_PREFIX = "team_v"
SCRIPTED_PREFIX = "scripted_"
DEFAULT_SCRIPTED = ("truthful", "greedy_bluffer")


def _draw(key: str, n: int) -> int:
    return zlib.crc32(key.encode()) % n


def league_mapping(pool: Sequence[str], team_seats: Sequence[str], agent_id: Any, episode: Any = None, **kw: Any) -> str:
    """One team seat per episode plays the learner; every other team seat a member of ``pool``."""
    agent = str(agent_id)
    if agent not in team_seats:
        return agent
    episode_id = str(getattr(episode, "id_", ""))
    if team_seats[_draw(episode_id, len(team_seats))] == agent:
        return LEARNER
    return pool[_draw(f"{episode_id}/{agent}", len(pool))]


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
    """(beats, learner mean, mix mean) from per-module mean episode returns."""
    learner = returns.get(LEARNER)
    mix = [v for m, v in returns.items() if m != LEARNER and np.isfinite(v)]
    if learner is None or not np.isfinite(learner) or not mix:
        return False, float("nan"), float("nan")
    mix_mean = float(np.mean(mix))
    return bool(learner - mix_mean > margin * max(1.0, abs(mix_mean))), float(learner), mix_mean


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


class LeagueCallback(RewardTermsCallback):
    """Adds a snapshot of the learner when it beats the current mix (module docstring).

    ``env_config["league"] = {"pool": [...], "team_seats": [...], "margin": float, "gap": int}``;
    ``result["league"]`` reports the mix, the comparison and whether a snapshot was added.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        league = algorithm.config.env_config.get("league")
        if not league:
            return
        pool = getattr(algorithm, "_league_pool", list(league["pool"]))
        since = getattr(algorithm, "_league_since", 0) + 1
        returns = result.get("env_runners", {}).get("module_episode_returns_mean", {})
        beats, learner, mix = learner_beats_mix({m: float(v) for m, v in returns.items() if m in (*pool, LEARNER)},
                                                league["margin"])
        added = None
        if beats and since >= league["gap"]:
            added = f"{SNAPSHOT_PREFIX}{sum(m.startswith(SNAPSHOT_PREFIX) for m in pool) + 1}"
            add_snapshot(algorithm, added, pool, league["team_seats"])
            pool = [*pool, added]
            since = 0
        algorithm._league_pool = pool
        algorithm._league_since = since
        result["league"] = {"mix": list(pool), "learner_return": learner, "mix_return": mix, "snapshot": added}


__all__ = [
    "LEARNER",
    "LeagueCallback",
    "add_snapshot",
    "league_mapping",
    "learner_beats_mix",
    "mapping_for",
    "scripted_member_specs",
]
