"""Learned policies: a trained RLlib module loaded from a checkpoint, as a :class:`Policy`.

No Ray is started and nothing is unpickled: the checkpoint's data-only files
(``arena_policy.json`` + ``arena_policy.safetensors``, see :mod:`policies.checkpoint_format`;
written by ``commons-arena train``) rebuild the network with plain torch layers, behind
the same :class:`ModuleInterface` it was trained with (observation scaling, action codec of
:mod:`policies.codecs`, stacked history). A checkpoint whose spaces do not fit the
scenario raises ``CheckpointError`` (a ``ValueError``) naming both; an old pickled
checkpoint is refused with the command that converts a trusted one.

Use it anywhere a scripted policy goes, by the name ``learned:<checkpoint dir>``::

    commons-arena evaluate --allocators edf learned:runs/allocator_ppo-standard-s0/checkpoint
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import make_action_space, make_observation_space, role_of
from policies.batch import OneArenaInterface
from policies.checkpoint_format import (
    SIDECAR,
    CheckpointError,
    PolicyNetwork,
    load_network,
    read_sidecar_model,
    write_checkpoint,
)
from policies.codecs import CODECS, Codec, RelativeAllocatorCodec, check_codec

LEARNED_PREFIX = "learned:"


class BatchInterface:
    """What sits between an agent's seat and its module in ``num_envs`` arenas, the same in training and play:
    the scenario's own view, as arrays (row *i* is arena *i*'s). :class:`ModuleInterface` is one arena's.

    Observation side, once per tick (:meth:`observe`): the raw observation divided by the
    recorded ``scale``, then the codec's features (``policies.codecs``), then — with
    ``history`` > 1 — the frames of the last ``history - 1`` ticks after it (zeros before
    the episode's first tick), newest first, then — for a seat of a module shared by several
    seats (``experiments.training.seats``) — the seat's one-hot ``identity`` ``(index, size)``.
    Action side (:meth:`act`): the codec decodes
    the module's action with the raw observation; without a codec the module's action is
    the env action. :meth:`reset` starts episodes.
    """

    def __init__(
        self, config: ScenarioConfig, agent: str, scale: np.ndarray, codec: dict[str, Any] | str | None = None,
        history: int = 1, identity: tuple[int, int] | None = None, num_envs: int = 1,
    ) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1 ticks, got {history}")
        if identity is not None and not 0 <= identity[0] < identity[1]:
            raise ValueError(f"identity must be (index, size) with 0 <= index < size, got {identity}")
        self.config, self.agent, self.history, self.num_envs = config, agent, int(history), num_envs
        self.identity = None if identity is None else (int(identity[0]), int(identity[1]))
        self.scale = np.asarray(scale, dtype=np.float32)
        self.raw_space = make_observation_space(config, agent)
        if self.scale.shape != self.raw_space.shape:
            raise ValueError(f"observation scale has shape {self.scale.shape}; {agent!r} observes {self.raw_space.shape}")
        self.codec_spec = codec  # as given: resized builds the same codec in another number of arenas
        self.codec: Codec | None = sidecar_codec(codec, config, agent, num_envs)
        self.frame_size = self.raw_space.shape[0] + (self.codec.n_features if self.codec else 0)
        self.frames = np.zeros((num_envs, self.history, self.frame_size), dtype=np.float32)  # newest first
        self.one_hot = np.zeros((num_envs, 0 if self.identity is None else self.identity[1]), dtype=np.float32)
        if self.identity is not None:
            self.one_hot[:, self.identity[0]] = 1.0
        self.no_action = np.zeros(self.action_space().shape, dtype=np.int64)  # an arena no module acted in

    def resized(self, num_envs: int) -> BatchInterface:
        return BatchInterface(self.config, self.agent, self.scale, self.codec_spec, self.history, self.identity,
                              num_envs)

    @property
    def input_size(self) -> int:
        """The module's input width: ``history`` frames of scaled observation + codec features,
        plus the identity."""
        return self.history * self.frame_size + self.one_hot.shape[1]

    def observation_space(self) -> Any:
        import gymnasium as gym

        raw, extra = self.raw_space, self.frame_size - self.raw_space.shape[0]
        low = np.concatenate([raw.low / self.scale, np.zeros(extra)])
        high = np.concatenate([raw.high / self.scale, np.full(extra, np.inf)])
        # zero frames pad the history, so 0 must lie inside the bounds
        low, high = np.minimum(low, 0), np.maximum(high, 0)
        size = self.one_hot.shape[1]
        low = np.concatenate([np.tile(low, self.history), np.zeros(size)])
        high = np.concatenate([np.tile(high, self.history), np.ones(size)])
        return gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def action_space(self) -> Any:
        import gymnasium as gym

        return gym.spaces.MultiDiscrete(self.codec.nvec) if self.codec else make_action_space(self.config, self.agent)

    def reset(self, index: np.ndarray | None = None) -> None:
        self.frames[slice(None) if index is None else index] = 0.0
        if self.codec is not None:
            self.codec.reset(index)

    def observe(self, observations: np.ndarray) -> np.ndarray:
        frame = np.asarray(observations, dtype=np.float32) / self.scale
        if self.codec is not None and self.codec.n_features:
            frame = np.concatenate([frame, self.codec.features(observations)], axis=1)
        if self.history > 1:
            self.frames[:, 1:] = self.frames[:, :-1]
            self.frames[:, 0] = frame
            frame = self.frames.reshape(len(frame), -1)
        if self.one_hot.shape[1]:
            frame = np.concatenate([frame, self.one_hot[: len(frame)]], axis=1)
        return frame.astype(np.float32)

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray:
        return module_actions if self.codec is None else self.codec.decode(observations, module_actions)


class ModuleInterface(OneArenaInterface[BatchInterface]):
    """:class:`BatchInterface` in one arena (a batch of one): what a checkpoint of the scenario's own view plays
    through, and training's per-arena env shows its module."""

    def __init__(
        self, config: ScenarioConfig, agent: str, scale: np.ndarray, codec: dict[str, Any] | str | None = None,
        history: int = 1, identity: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(BatchInterface(config, agent, scale, codec, history, identity))


MAX_TRAINED_ON = 500  # the sidecar's limit on its "scenario" field (policies/checkpoint_format.py)


def module_dir(checkpoint: str | Path, module_id: str) -> Path:
    """Where RLlib keeps one module's (pickled) files inside an algorithm checkpoint."""
    return Path(checkpoint) / "learner_group" / "learner" / "rl_module" / module_id


def sidecar_codec(spec: dict[str, Any] | str | None, config: ScenarioConfig, agent: str,
                  num_envs: int = 1) -> Codec | None:
    """The action codec a sidecar names (``{"name", "params"}``, a bare name, or None) for
    ``agent``'s seat in ``num_envs`` arenas; :class:`CheckpointError` if it is unknown or another role's codec."""
    if spec is None:
        return None
    name, params = (spec, {}) if isinstance(spec, str) else (spec["name"], dict(spec.get("params", {})))
    try:
        cls = check_codec(name, config, agent)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    return cls(config, agent, num_envs, **params)


def sidecar_fields(
    config: ScenarioConfig, agent: str, observation_scale: np.ndarray, codec: dict[str, Any] | str | None = None,
    history: int = 1,
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
        "history": int(history),
        "input_size": BatchInterface(config, agent, scale.astype(np.float32), codec, history).input_size,
    }


def save_policy(
    checkpoint: str | Path,
    network: PolicyNetwork,
    config: ScenarioConfig,
    agent: str,
    observation_scale: np.ndarray,
    codec: dict[str, Any] | str | None = None,
    history: int = 1,
) -> Path:
    """Write the data-only policy (sidecar + safetensors weights) into ``checkpoint``."""
    return write_checkpoint(checkpoint, sidecar_fields(config, agent, observation_scale, codec, history), network)


def save_universal_policy(checkpoint: str | Path, network: PolicyNetwork, trained_on: str, trained_hash: str,
                          codec: str = "need", features: str = "cells_v1") -> Path:
    """Write a shape-free allocator (one cell's network, policies.universal, reading cell ``features``) as a
    data-only checkpoint; ``trained_on`` longer than the sidecar holds (500 characters: a long list of
    scenarios) is stored as "mixed"."""
    from policies import universal

    trained_on = trained_on if len(trained_on) <= MAX_TRAINED_ON else "mixed"
    view = universal.cell_view(features)
    n_actions = int(network.nvec[0])
    fields = {
        "env": "commons_arena_v0", "agent": ALLOCATOR, "role": "allocator", "scenario": trained_on,
        "scenario_hash": trained_hash, "observation_shape": [view.obs_size],
        "action_nvec": [n_actions] * universal.CELLS, "observation_scale": [],
        "action_codec": {"name": codec, "params": {}}, "history": 1, "input_size": view.n_features,
        "universal": view.fields(),
    }
    return write_checkpoint(checkpoint, fields, network)


def read_sidecar(checkpoint: str | Path) -> dict[str, Any]:
    """The validated sidecar as a dict (raises :class:`CheckpointError`, a ValueError)."""
    return read_sidecar_model(checkpoint).model_dump(by_alias=True)


def check_fits(meta: dict[str, Any], config: ScenarioConfig, agent: str, checkpoint: str | Path) -> None:
    """Raise ValueError unless the checkpoint's spaces are the scenario's spaces for ``agent`` (a
    shape-free allocator: unless ``agent`` is the allocator and the scenario fits its padded view)."""
    if meta.get("universal") is not None:
        from policies.universal import check_shape

        if role_of(config, agent) != ALLOCATOR:
            raise CheckpointError(f"checkpoint {checkpoint} is a universal allocator; {agent!r} of scenario "
                                  f"{config.name!r} plays the {role_of(config, agent)} role")
        try:
            check_shape(config)
        except CheckpointError as err:
            raise CheckpointError(f"checkpoint {checkpoint}: {err}") from None
        return
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


class GreedyNetwork(Protocol):
    """What a :class:`LearnedPolicy` plays: a network's greedy action per (scaled) input."""

    def reset(self) -> None: ...

    def greedy(self, obs: np.ndarray) -> np.ndarray: ...


class LearnedPolicy:
    """Greedy actions of a trained network: ``argmax`` of each MultiDiscrete sub-space.

    Build it from a data-only checkpoint with :meth:`load`, or around a live network with the
    constructor: anything with ``reset()`` and ``greedy(obs) -> int64 array`` (a
    :class:`PolicyNetwork`; in training's held-out evaluation also a recurrent RLlib module
    behind ``experiments.training.rl_modules.ModuleActor``), behind the
    interface it was trained with (:class:`ModuleInterface`; :meth:`cells`: a shape-free allocator's,
    :class:`policies.universal.UniversalInterface`)."""

    def __init__(self, module: GreedyNetwork, interface: OneArenaInterface[Any]) -> None:
        import torch

        torch.set_num_threads(1)  # one small forward pass per tick: threads only add overhead
        self.module = module
        self.interface = interface
        self.last_module_action: np.ndarray | None = None  # the module's own action (before the codec) of the last tick

    @property
    def codec(self) -> Codec | None:
        return self.interface.codec

    @classmethod
    def load(cls, checkpoint: str | Path, config: ScenarioConfig | str, agent: str, seed: int | None = None,
             gate: float | None = None) -> LearnedPolicy:
        """Load ``arena_policy.json`` + ``arena_policy.safetensors``; nothing is unpickled. ``gate``: a
        universal allocator's (:class:`~policies.universal.CellNetwork`); other checkpoints refuse one."""
        config = load_scenario(config)
        sidecar, network = load_network(checkpoint)
        meta = sidecar.model_dump(by_alias=True)
        if sidecar.universal is not None:
            return cls._load_universal(checkpoint, meta, network, config, agent, gate or 0.0)
        if gate is not None:
            raise CheckpointError(f"checkpoint {checkpoint}: gate applies to a universal allocator's cells; "
                                  "this checkpoint plays one scenario's own view (drop the gate)")
        check_fits(meta, config, agent, checkpoint)
        try:
            interface = ModuleInterface(config, agent, np.asarray(meta["observation_scale"], dtype=np.float32),
                                        meta["action_codec"], meta["history"])
        except CheckpointError as err:
            raise CheckpointError(f"checkpoint {checkpoint}: {err}") from None
        if interface.input_size != network.input_size:
            raise CheckpointError(
                f"checkpoint {checkpoint}: its network takes {network.input_size} inputs but its codec and history "
                f"give {interface.input_size}"
            )
        return cls(network, interface)

    @classmethod
    def _load_universal(cls, checkpoint: str | Path, meta: dict[str, Any], network: PolicyNetwork,
                        config: ScenarioConfig, agent: str, gate: float = 0.0) -> LearnedPolicy:
        """A shape-free allocator (policies.universal): any scenario up to its maximum shape."""
        from policies import universal

        u = meta["universal"]
        try:  # the features its weights were trained on: computed alike, or refused
            view = universal.cell_view(u["features"])
        except CheckpointError as err:
            raise CheckpointError(f"checkpoint {checkpoint}: {err}") from None
        if u != view.fields():
            raise CheckpointError(f"checkpoint {checkpoint}: its universal view {u} is not this commons_arena's "
                                  f"{view.fields()}")
        try:
            return cls.cells(network, config, agent, meta["action_codec"], gate, view.name)
        except CheckpointError as err:
            raise CheckpointError(f"checkpoint {checkpoint}: {err}") from None

    @classmethod
    def cells(cls, network: PolicyNetwork, config: ScenarioConfig, agent: str = ALLOCATOR,
              codec: dict[str, Any] | str | None = "need", gate: float = 0.0, features: str = "cells_v1") -> LearnedPolicy:
        """A shape-free allocator: one cell's ``network`` played on every real cell of the padded view of
        ``features`` (policies.universal.CELL_VIEWS)."""
        from policies.universal import CellNetwork, UniversalInterface

        interface = UniversalInterface(config, agent, codec, features)
        return cls(CellNetwork(network, interface.batched.zero, gate, features), interface)

    def reset(self, seed: int | None = None) -> None:
        """Greedy: only per-episode state (stacked history, codec, a cell view's memory, recurrent state) is reset."""
        self.interface.reset()
        self.module.reset()

    def act(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation, dtype=np.float32)
        module_input = self.interface.observe(observation)
        action = self.module.greedy(module_input)
        self.last_module_action = action
        return self.interface.act(observation, action)


def observation_scale(samples: np.ndarray) -> np.ndarray:
    """Per-dimension scale from sample observations: the largest magnitude seen, at least 1.

    Dividing by it puts every feature in about [-1, 1] for the network; dimensions that
    never exceed 1 (flags, one-hots, shares) are left as they are.
    """
    return np.maximum(np.abs(samples).max(axis=0), 1.0).astype(np.float32)


__all__ = [
    "CODECS",
    "LEARNED_PREFIX",
    "SIDECAR",
    "BatchInterface",
    "CheckpointError",
    "GreedyNetwork",
    "LearnedPolicy",
    "ModuleInterface",
    "PolicyNetwork",
    "RelativeAllocatorCodec",
    "check_fits",
    "sidecar_codec",
    "observation_scale",
    "read_sidecar",
    "save_policy",
    "save_universal_policy",
]
