"""Learned policies: a trained RLlib module loaded from a checkpoint, as a :class:`Policy`.

No Ray is started: only the module is loaded (``RLModule.from_checkpoint``), with
the observation scaling it was trained with, from the checkpoint's sidecar file
``arena_policy.json`` (written by ``commons-arena train``). A checkpoint whose spaces do
not fit the scenario raises ``ValueError`` naming both.

Use it anywhere a scripted policy goes, by the name ``learned:<checkpoint dir>``::

    commons-arena evaluate --allocators edf learned:runs/allocator_ppo-standard-s0/checkpoint
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import make_action_space, make_observation_space

LEARNED_PREFIX = "learned:"
SIDECAR = "arena_policy.json"


class RelativeAllocatorCodec:
    """An action parameterisation for learned allocators: grants relative to demand.

    The module chooses one *share level* per team and one *buy level* per tier:

    * a team's grant on each tier is ``round(share x demand)``, where demand is its
      revealed true need once revealed, else its declaration, and ``share`` is one of
      ``GRANT_SHARES``; the last level grants the demand plus one GPU on each tier it asks for;
    * a tier's purchase is none, the shortfall (granted demand above the online GPUs), or
      everything offered; the env cuts it to the offer and the budget as usual.

    Grants above a tier's online + bought GPUs are scaled down with the env's own repair rule,
    so the codec never asks for more than exists. Learning one discount per team is far
    easier for a categorical policy than absolute GPU counts per (team, tier) — bluffs are
    per team — and the result is an ordinary allocator action: nothing in the game changes.
    """

    GRANT_SHARES = (0.0, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 1.0)  # then one more level: demand + 1
    BUY_LEVELS = 3  # none, shortfall, all offered
    name = "relative"

    def __init__(self, config: ScenarioConfig) -> None:
        from commons_arena.spaces import observation_layout

        self.obs = observation_layout(config, "allocator")
        self.n_teams, self.n_tiers = len(config.teams), len(config.gpu_tiers)
        self.shares = np.array(self.GRANT_SHARES)
        self.env_nvec = make_action_space(config, "allocator").nvec

    @property
    def nvec(self) -> np.ndarray:
        return np.array([self.BUY_LEVELS] * self.n_tiers + [len(self.GRANT_SHARES) + 1] * self.n_teams)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        from commons_arena.mechanics.grants import repair_grants

        view = self.obs.view(observation)
        code = np.asarray(code, dtype=np.int64)
        buy_level, share_level = code[: self.n_tiers], code[self.n_tiers :]
        demand = np.where(view["revealed"][:, None] > 0, view["revealed_need"], view["declared"]).astype(np.int64)
        plus_one = (share_level == len(self.GRANT_SHARES))[:, None]
        share = self.shares[np.minimum(share_level, len(self.GRANT_SHARES) - 1)][:, None]
        wanted = np.where(plus_one, demand + (demand > 0), np.rint(share * demand)).astype(np.int64)
        online = view["online"].astype(np.int64)
        offered = view["offer_qty"].astype(np.int64)
        shortfall = np.maximum(wanted.sum(axis=0) - online, 0)
        buy = np.select([buy_level == 1, buy_level == 2], [np.minimum(shortfall, offered), offered], 0)
        grants, _ = repair_grants(wanted, online + buy)
        return np.minimum(np.concatenate([buy, grants.ravel()]), self.env_nvec - 1)


CODECS = {RelativeAllocatorCodec.name: RelativeAllocatorCodec}


def module_dir(checkpoint: str | Path, module_id: str) -> Path:
    return Path(checkpoint) / "learner_group" / "learner" / "rl_module" / module_id


def write_sidecar(
    checkpoint: str | Path, config: ScenarioConfig, agent: str, observation_scale: np.ndarray, codec: str | None = None
) -> Path:
    """Record what the module needs to act: the agent, spaces and observation scale."""
    path = Path(checkpoint) / SIDECAR
    path.write_text(
        json.dumps(
            {
                "env": "commons_arena_v0",
                "agent": agent,
                "scenario": config.name,
                "scenario_hash": config.content_hash,
                "observation_shape": list(make_observation_space(config, agent).shape),
                "action_nvec": make_action_space(config, agent).nvec.tolist(),
                "observation_scale": [float(x) for x in observation_scale],
                "action_codec": codec,
            },
            indent=1,
        )
    )
    return path


def read_sidecar(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / SIDECAR
    if not path.is_file():
        raise ValueError(
            f"{checkpoint} is not a commons_arena policy checkpoint: {SIDECAR} is missing "
            "(checkpoints written by `commons-arena train` have it)"
        )
    return json.loads(path.read_text())


def check_fits(meta: dict[str, Any], config: ScenarioConfig, agent: str, checkpoint: str | Path) -> None:
    """Raise ValueError unless the checkpoint's spaces are the scenario's spaces for ``agent``."""
    obs_shape = list(make_observation_space(config, agent).shape)
    nvec = make_action_space(config, agent).nvec.tolist()
    problems = []
    if meta["observation_shape"] != obs_shape:
        problems.append(f"observation shape {tuple(meta['observation_shape'])} vs {tuple(obs_shape)}")
    if meta["action_nvec"] != nvec:
        problems.append(f"action space MultiDiscrete{meta['action_nvec']} vs MultiDiscrete{nvec}")
    if problems:
        raise ValueError(
            f"checkpoint {checkpoint} (trained as {meta['agent']!r} on scenario {meta['scenario']!r}) does not fit "
            f"agent {agent!r} of scenario {config.name!r}: " + "; ".join(problems)
        )


class LearnedPolicy:
    """Greedy actions of a trained module: ``argmax`` of each MultiDiscrete sub-space.

    Build it from a checkpoint with :meth:`load`, or around a live module (training-time
    evaluation) with the constructor."""

    def __init__(self, module: Any, observation_scale: np.ndarray, codec: RelativeAllocatorCodec | None = None) -> None:
        import torch

        torch.set_num_threads(1)  # one small forward pass per tick: threads only add overhead
        self.module = module
        self.scale = np.asarray(observation_scale, dtype=np.float32)
        self.codec = codec

    @classmethod
    def load(cls, checkpoint: str | Path, config: ScenarioConfig | str, agent: str, seed: int | None = None) -> LearnedPolicy:
        from ray.rllib.core.rl_module.rl_module import RLModule

        config = load_scenario(config)
        checkpoint = Path(checkpoint).resolve()  # RLlib reads checkpoints as URIs: relative paths fail
        meta = read_sidecar(checkpoint)
        check_fits(meta, config, agent, checkpoint)
        path = module_dir(checkpoint, meta["agent"])
        if not path.is_dir():
            raise ValueError(f"checkpoint {checkpoint} has no module {meta['agent']!r} (looked in {path})")
        module = RLModule.from_checkpoint(path)
        module.eval()
        codec = CODECS[meta["action_codec"]](config) if meta.get("action_codec") else None
        return cls(module, np.asarray(meta["observation_scale"], dtype=np.float32), codec)

    def reset(self, seed: int | None = None) -> None:
        """Greedy and stateless: nothing to reset."""

    def act(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation, dtype=np.float32)
        action = module_action(self.module, observation / self.scale)
        return action if self.codec is None else self.codec.decode(observation, action)


def module_action(module: Any, obs: np.ndarray) -> np.ndarray:
    """Greedy action of an RLModule for one observation, as an int64 array (MultiDiscrete).

    Default RLlib modules return only ``ACTION_DIST_INPUTS`` (concatenated logits of all
    sub-spaces) from ``forward_inference``; the module's own inference distribution turns
    them into the per-sub-space argmax. Modules that return ``ACTIONS`` are used as-is.
    """
    import torch
    from ray.rllib.core.columns import Columns

    obs = np.asarray(obs, dtype=np.float32)
    expected = getattr(module.observation_space, "shape", None)
    if obs.shape != expected:
        raise ValueError(f"observation shape mismatch: module expects {expected}, got {obs.shape}")
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.from_numpy(obs[None])})
        if Columns.ACTIONS in out:
            action = out[Columns.ACTIONS]
        else:
            dist = module.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            action = dist.to_deterministic().sample()
    action = action.cpu().numpy() if isinstance(action, torch.Tensor) else np.asarray(action)
    return action[0].astype(np.int64)


def observation_scale(samples: np.ndarray) -> np.ndarray:
    """Per-dimension scale from sample observations: the largest magnitude seen, at least 1.

    Dividing by it puts every feature in about [-1, 1] for the network; dimensions that
    never exceed 1 (flags, one-hots, shares) are left as they are.
    """
    return np.maximum(np.abs(samples).max(axis=0), 1.0).astype(np.float32)
