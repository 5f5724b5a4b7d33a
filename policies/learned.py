"""Learned policies: a trained RLlib module loaded from a checkpoint, as a :class:`Policy`.

No Ray is started and nothing is unpickled: the checkpoint's data-only files
(``arena_policy.json`` + ``arena_policy.safetensors``, see :mod:`policies.checkpoint_format`;
written by ``commons-arena train``) rebuild the network with plain torch layers, with the
observation scaling and action codec it was trained with. A checkpoint whose spaces do not
fit the scenario raises ``CheckpointError`` (a ``ValueError``) naming both; an old pickled
checkpoint is refused with the command that converts a trusted one.

Use it anywhere a scripted policy goes, by the name ``learned:<checkpoint dir>``::

    commons-arena evaluate --allocators edf learned:runs/allocator_ppo-standard-s0/checkpoint
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import make_action_space, make_observation_space, role_of
from policies.checkpoint_format import (
    SIDECAR,
    CheckpointError,
    PolicyNetwork,
    load_network,
    write_checkpoint,
)
from policies.checkpoint_format import read_sidecar as read_sidecar_model

LEARNED_PREFIX = "learned:"


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


CODECS: dict[str, Any] = {RelativeAllocatorCodec.name: RelativeAllocatorCodec}


def module_dir(checkpoint: str | Path, module_id: str) -> Path:
    """Where RLlib keeps one module's (pickled) files inside an algorithm checkpoint."""
    return Path(checkpoint) / "learner_group" / "learner" / "rl_module" / module_id


def make_codec(spec: dict[str, Any] | str | None, config: ScenarioConfig) -> Any:
    """The action codec a sidecar names (``{"name", "params"}``, a bare name, or None)."""
    if spec is None:
        return None
    name, params = (spec, {}) if isinstance(spec, str) else (spec["name"], dict(spec.get("params", {})))
    if name not in CODECS:
        raise CheckpointError(f"unknown action codec {name!r}; known codecs: {sorted(CODECS)}")
    return CODECS[name](config, **params)


def sidecar_fields(
    config: ScenarioConfig, agent: str, observation_scale: np.ndarray, codec: dict[str, Any] | str | None = None
) -> dict[str, Any]:
    """Everything the sidecar records about a policy but its network (see checkpoint_format)."""
    scale = np.asarray(observation_scale, dtype=np.float64)
    if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError("observation_scale must be finite and positive")
    return {
        "env": "commons_arena_v0",
        "agent": agent,
        "role": role_of(config, agent),
        "scenario": config.name,
        "scenario_hash": config.content_hash,
        "observation_shape": list(make_observation_space(config, agent).shape),
        "action_nvec": make_action_space(config, agent).nvec.tolist(),
        "observation_scale": [float(x) for x in scale],
        "action_codec": {"name": codec, "params": {}} if isinstance(codec, str) else codec,
    }


def save_policy(
    checkpoint: str | Path,
    network: PolicyNetwork,
    config: ScenarioConfig,
    agent: str,
    observation_scale: np.ndarray,
    codec: dict[str, Any] | str | None = None,
) -> Path:
    """Write the data-only policy (sidecar + safetensors weights) into ``checkpoint``."""
    return write_checkpoint(checkpoint, sidecar_fields(config, agent, observation_scale, codec), network)


def read_sidecar(checkpoint: str | Path) -> dict[str, Any]:
    """The validated sidecar as a dict (raises :class:`CheckpointError`, a ValueError)."""
    return read_sidecar_model(checkpoint).model_dump(by_alias=True)


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
        raise CheckpointError(
            f"checkpoint {checkpoint} (trained as {meta['agent']!r} on scenario {meta['scenario']!r}) does not fit "
            f"agent {agent!r} of scenario {config.name!r}: " + "; ".join(problems)
        )


class LearnedPolicy:
    """Greedy actions of a trained network: ``argmax`` of each MultiDiscrete sub-space.

    Build it from a data-only checkpoint with :meth:`load`, or around a live network with the
    constructor: a :class:`PolicyNetwork` or (training-time evaluation) an RLlib module."""

    def __init__(self, module: Any, observation_scale: np.ndarray, codec: Any = None) -> None:
        import torch

        torch.set_num_threads(1)  # one small forward pass per tick: threads only add overhead
        self.module = module
        self.scale = np.asarray(observation_scale, dtype=np.float32)
        self.codec = codec

    @classmethod
    def load(cls, checkpoint: str | Path, config: ScenarioConfig | str, agent: str, seed: int | None = None) -> LearnedPolicy:
        """Load ``arena_policy.json`` + ``arena_policy.safetensors``; nothing is unpickled."""
        config = load_scenario(config)
        sidecar, network = load_network(checkpoint)
        meta = sidecar.model_dump(by_alias=True)
        check_fits(meta, config, agent, checkpoint)
        return cls(network, np.asarray(meta["observation_scale"], dtype=np.float32), make_codec(meta["action_codec"], config))

    def reset(self, seed: int | None = None) -> None:
        """Greedy; a stateful network clears its state."""
        if isinstance(self.module, PolicyNetwork):
            self.module.reset()

    def act(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation, dtype=np.float32)
        scaled = observation / self.scale
        if isinstance(self.module, PolicyNetwork):
            action = self.module.greedy(scaled)
        else:
            action = module_action(self.module, scaled)
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


def convert_pickled_checkpoint(checkpoint: str | Path) -> Path:
    """Write the data-only files for an old (format 1) checkpoint, from its RLlib pickles.

    This UNPICKLES the checkpoint's module files, which can run any code they contain: call it
    only on a checkpoint you trust (one you trained). ``commons-arena convert-checkpoint DIR
    --i-trust-this-checkpoint`` is the command-line form. The old files stay; ``learned:``
    reads only the new ones from then on.
    """
    from ray.rllib.core.rl_module.rl_module import RLModule

    from policies.checkpoint_format import network_from_rl_module

    checkpoint = Path(checkpoint).resolve()  # RLlib reads checkpoints as URIs: relative paths fail
    path = checkpoint / SIDECAR
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} has no {SIDECAR}: not a commons_arena checkpoint")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        old_format = isinstance(old, dict) and "format_version" not in old
        fields = {k: old[k] for k in ("agent", "scenario", "scenario_hash", "observation_shape", "action_nvec",
                                      "observation_scale")} if old_format else {}
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{path} is not a format-1 sidecar: {exc}") from None
    if not old_format:
        raise CheckpointError(f"{checkpoint} is already in the data-only format (format_version {old.get('format_version')})")
    source = module_dir(checkpoint, fields["agent"])
    if not source.is_dir():
        raise CheckpointError(f"checkpoint {checkpoint} has no module {fields['agent']!r} (looked in {source})")
    module = RLModule.from_checkpoint(source)
    module.eval()
    network = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
    codec = old.get("action_codec")
    fields |= {
        "env": "commons_arena_v0",
        "role": fields["agent"] if fields["agent"] in ("allocator", "broker") else "team",
        "action_codec": {"name": codec, "params": {}} if codec else None,
    }
    return write_checkpoint(checkpoint, fields, network)


__all__ = [
    "CODECS",
    "LEARNED_PREFIX",
    "SIDECAR",
    "CheckpointError",
    "LearnedPolicy",
    "PolicyNetwork",
    "RelativeAllocatorCodec",
    "check_fits",
    "convert_pickled_checkpoint",
    "make_codec",
    "module_action",
    "observation_scale",
    "read_sidecar",
    "save_policy",
]
