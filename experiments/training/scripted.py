"""Scripted seats inside RLlib: :class:`ScriptedRLModule` runs a :class:`policies.base.Policy`
as an untrained RLModule, and :class:`TagRowsWithEnvIndex` (an env-to-module connector piece)
tags each batch row with what the module needs to keep one policy per sub-env and seed it.

Seeding is the rule every episode follows elsewhere (``policies.focal.policy_seed`` of the
episode's seed and the seat's index in env order, SPEC §12): a scripted module plays a seat
exactly as the same policy plays it as background in the env.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule

from experiments.training.env import resolve_obj
from experiments.training.env_config import Scenario
from policies.base import Policy
from policies.focal import policy_seed
from policies.registry import make_policy

# A factory builds the scripted Policy for one agent id. It travels to env runners and
# into checkpoints via cloudpickle, so module-level functions/classes (or
# ``functools.partial`` of them) are the safe choice; a "package.module:attr" string
# avoids pickling code at all.
PolicyFactory = Callable[[str], Policy]


def registered_policy(name: str, scenario: Scenario, **params: Any) -> PolicyFactory:
    """Factory for the ``policies.registry`` policy ``name`` (a picklable ``partial``).

    ``make_policy`` needs no env for the scripted teams, brokers and baselines; privileged
    policies (``oracle``) cannot run as an RLModule.
    """
    return functools.partial(_make_registered, name, scenario, params)


def _make_registered(name: str, scenario: Scenario, params: dict[str, Any], agent_id: str) -> Policy:
    return make_policy(name, scenario, agent_id, **params)


# Batch columns the row-tagging connector adds: which sub-env a row comes from, the
# agent's step in its episode (0 = the episode's first observation) and the episode's seed
# (from the focal env's reset info; -1 where unknown).
ENV_INDEX = "arena_env_index"
AGENT_T = "arena_agent_t"
EPISODE_SEED = "arena_episode_seed"


class TagRowsWithEnvIndex(ConnectorV2):
    """Env-to-module piece: tags every acting agent's row with its sub-env index, step and
    episode seed.

    A scripted Policy may keep per-episode state (``BatchScripted.clear``), so each
    vectorised sub-env needs its own instance, reset when its episode starts. Batch rows do
    not identify their sub-env (a sub-env that is auto-resetting contributes no row), hence
    these tags. All agents are tagged, not only scripted ones: RLlib's
    ``AgentToModuleMapping`` takes the row layout from the first batch column, which is
    this one, as custom pieces run before the default ones.
    """

    def __call__(
        self,
        *,
        rl_module: RLModule,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        env_index = {episode.id_: i for i, episode in enumerate(episodes)}
        # Same iterator (same order) as RLlib's AddObservationsFromEpisodesToBatch.
        for sa_episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            self.add_batch_item(batch, ENV_INDEX, env_index.get(sa_episode.multi_agent_episode_id, 0), sa_episode)
            # `t` counts from the episode's start across chunks (`len()` restarts per chunk).
            self.add_batch_item(batch, AGENT_T, sa_episode.t, sa_episode)
            seed = sa_episode.get_infos(-1).get("episode_seed") if sa_episode.t == 0 else None
            self.add_batch_item(batch, EPISODE_SEED, -1 if seed is None else int(seed), sa_episode)
        return batch


def row_tagging_connector(env: Any = None, spaces: Any = None, device: Any = None) -> ConnectorV2:
    return TagRowsWithEnvIndex()


class ScriptedRLModule(RLModule):
    """A scripted :class:`Policy` run as an (untrained) RLModule.

    ``model_config``: ``{"policy_factory": PolicyFactory | "module:attr", "agent_id": str,
    "seat_index": {seat: index in env order}}``. One Policy per sub-env, built on first use and
    ``reset`` at each episode start with ``policy_seed(episode seed, seat index)``, using the
    tags of :class:`TagRowsWithEnvIndex` (installed by ``experiments.training.algorithm``).
    Without tags (e.g. a direct ``forward_inference`` call) row ``i`` is treated as sub-env
    ``i`` and policies are reset, unseeded, only when built.

    Optional ``"seats"`` + ``"observation_scale"``: the module plays seats whose observations
    arrive scaled, with the seat's one-hot identity appended (a league's team seats, shared
    with learned modules): it recovers the raw observation (an exact power-of-two scale makes
    this exact) and the seat from the identity, and keeps one policy per (sub-env, seat).
    """

    def setup(self) -> None:
        cfg: dict[str, Any] = self.model_config if isinstance(self.model_config, dict) else {}
        self.agent_id: str = cfg["agent_id"]
        self._factory: PolicyFactory = resolve_obj(cfg["policy_factory"])
        self._seat_index: dict[str, int] = dict(cfg.get("seat_index", {}))
        self._seats: list[str] = list(cfg.get("seats", []))
        self._unscale = np.asarray(cfg["observation_scale"], np.float32) if self._seats else None
        # (sub-env index, seat) -> policy; built lazily, so the learner's copy builds none
        self.policies: dict[tuple[int, str], Policy] = {}

    def _policy_for(self, env_index: int, episode_seed: int | None, seat: str | None = None) -> Policy:
        """The policy of (sub-env, seat); ``episode_seed`` is given at an episode's start only."""
        seat = seat or self.agent_id
        episode_start = episode_seed is not None
        policy = self.policies.get((env_index, seat))
        if policy is None:
            policy = self.policies[(env_index, seat)] = self._factory(seat)
            if not isinstance(policy, Policy):
                raise TypeError(f"policy for {self.agent_id!r} does not implement reset()/act()")
            episode_start = True
        if episode_start:
            known = episode_seed is not None and episode_seed >= 0 and seat in self._seat_index
            policy.reset(policy_seed(episode_seed, self._seat_index[seat]) if known else None)
        return policy

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # Serves inference, exploration and train alike (the module is never trained;
        # keep it out of `policies_to_train`). Env runners hand in torch tensors and turn
        # the torch output back into numpy for the env.
        obs = _to_numpy(batch[Columns.OBS])
        env_index = _to_numpy(batch.get(ENV_INDEX, np.arange(len(obs))))
        agent_t = batch.get(AGENT_T)
        starts = _to_numpy(agent_t) == 0 if agent_t is not None else np.zeros(len(obs), bool)
        episode_seeds = _to_numpy(batch.get(EPISODE_SEED, np.full(len(obs), -1)))
        seats: list[str | None] = [None] * len(obs)
        if self._unscale is not None:
            size = len(self._unscale)
            seats = [self._seats[int(k)] for k in obs[:, size:].argmax(axis=1)]
            obs = obs[:, :size] * self._unscale
        actions = [
            np.asarray(self._policy_for(int(i), int(seed) if start else None, seat).act(row), dtype=np.int64)
            for row, i, start, seed, seat in zip(obs, env_index, starts, episode_seeds, seats, strict=True)
        ]
        out = np.stack(actions) if actions else np.zeros((0, *getattr(self.action_space, "shape", ())), np.int64)
        return {Columns.ACTIONS: torch.from_numpy(out)}


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

