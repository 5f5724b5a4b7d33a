"""Learned policies: a trained RLlib module loaded from a checkpoint, as a :class:`Policy`.

No Ray is started: only the module is loaded (``RLModule.from_checkpoint``), with
the observation scaling, action codec and stacked history it was trained with, from the
checkpoint's sidecar file ``arena_policy.json`` (written by ``commons-arena train``), and
put behind the same :class:`ModuleInterface` as in training. A checkpoint whose spaces do
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
from policies.codecs import CODECS, Codec, make_codec

LEARNED_PREFIX = "learned:"
SIDECAR = "arena_policy.json"


class ModuleInterface:
    """What sits between an agent's seat and its module, the same in training and play.

    Observation side, once per tick (:meth:`observe`): the raw observation divided by the
    recorded ``scale``, then the codec's features (``policies.codecs``), then — with
    ``history`` > 1 — the frames of the last ``history - 1`` ticks after it (zeros before
    the episode's first tick), newest first. Action side (:meth:`act`): the codec decodes
    the module's action with the raw observation; without a codec the module's action is
    the env action. :meth:`reset` starts an episode.
    """

    def __init__(
        self, config: ScenarioConfig, agent: str, scale: np.ndarray, codec: str | None = None, history: int = 1
    ) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1 ticks, got {history}")
        self.config, self.agent, self.history = config, agent, int(history)
        self.scale = np.asarray(scale, dtype=np.float32)
        raw = make_observation_space(config, agent)
        if self.scale.shape != raw.shape:
            raise ValueError(f"observation scale has shape {self.scale.shape}; {agent!r} observes {raw.shape}")
        self.codec: Codec | None = make_codec(codec, config) if codec else None
        self.frame_size = raw.shape[0] + (self.codec.n_features if self.codec else 0)
        self._raw_space = raw
        self._frames: list[np.ndarray] = []

    @property
    def codec_name(self) -> str | None:
        return self.codec.name if self.codec else None

    def observation_space(self) -> Any:
        import gymnasium as gym

        low = np.concatenate([self._raw_space.low / self.scale, np.zeros(self.frame_size - self._raw_space.shape[0])])
        high = np.concatenate([self._raw_space.high / self.scale, np.full(self.frame_size - self._raw_space.shape[0], np.inf)])
        # zero frames pad the history, so 0 must lie inside the bounds
        low, high = np.minimum(low, 0), np.maximum(high, 0)
        return gym.spaces.Box(np.tile(low, self.history).astype(np.float32), np.tile(high, self.history).astype(np.float32),
                              dtype=np.float32)

    def action_space(self) -> Any:
        import gymnasium as gym

        return gym.spaces.MultiDiscrete(self.codec.nvec) if self.codec else make_action_space(self.config, self.agent)

    def reset(self) -> None:
        self._frames = []
        if self.codec is not None:
            self.codec.reset()

    def observe(self, observation: np.ndarray) -> np.ndarray:
        frame = np.asarray(observation, dtype=np.float32) / self.scale
        if self.codec is not None and self.codec.n_features:
            frame = np.concatenate([frame, self.codec.features(observation)])
        if self.history == 1:
            return frame.astype(np.float32)
        self._frames = [frame, *self._frames[: self.history - 1]]
        pad = [np.zeros(self.frame_size, dtype=np.float32)] * (self.history - len(self._frames))
        return np.concatenate([*self._frames, *pad]).astype(np.float32)

    def act(self, observation: np.ndarray, module_action: np.ndarray) -> np.ndarray:
        return module_action if self.codec is None else self.codec.decode(observation, module_action)




def module_dir(checkpoint: str | Path, module_id: str) -> Path:
    return Path(checkpoint) / "learner_group" / "learner" / "rl_module" / module_id


def write_sidecar(
    checkpoint: str | Path, config: ScenarioConfig, agent: str, observation_scale: np.ndarray, codec: str | None = None,
    history: int = 1,
) -> Path:
    """Record what the module needs to act: the agent, spaces, observation scale, action
    codec and stacked history (everything :class:`ModuleInterface` is built from)."""
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
                "history": history,
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

    def __init__(self, module: Any, interface: ModuleInterface) -> None:
        import torch

        torch.set_num_threads(1)  # one small forward pass per tick: threads only add overhead
        self.module = module
        self.interface = interface
        self._state: Any = None  # a recurrent module's state (None: the initial one)

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
        codec = meta.get("action_codec")
        if codec and codec not in CODECS:
            raise ValueError(f"checkpoint {checkpoint} uses action codec {codec!r}, unknown here; codecs: {list(CODECS)}")
        module = RLModule.from_checkpoint(path)
        module.eval()
        interface = ModuleInterface(config, agent, np.asarray(meta["observation_scale"], dtype=np.float32), codec,
                                    int(meta.get("history", 1)))
        return cls(module, interface)

    def reset(self, seed: int | None = None) -> None:
        """Greedy: only per-episode state (stacked history, codec, recurrent state) is reset."""
        self.interface.reset()
        self._state = None

    def act(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation, dtype=np.float32)
        module_input = self.interface.observe(observation)
        if self.module.is_stateful():
            action, self._state = module_action(self.module, module_input, self._state)
        else:
            action = module_action(self.module, module_input)
        return self.interface.act(observation, action)


def module_action(module: Any, obs: np.ndarray, state: Any = None) -> Any:
    """Greedy action of an RLModule for one observation, as an int64 array (MultiDiscrete).

    Default RLlib modules return only ``ACTION_DIST_INPUTS`` (concatenated logits of all
    sub-spaces) from ``forward_inference``; the module's own inference distribution turns
    them into the per-sub-space argmax. Modules that return ``ACTIONS`` are used as-is.
    A recurrent module (``use_lstm``) takes and returns its ``state`` (``None``: the
    initial state); it is then called with a batch of one sequence of one step, and the
    result is ``(action, state)``.
    """
    import torch
    from ray.rllib.core.columns import Columns

    obs = np.asarray(obs, dtype=np.float32)
    expected = getattr(module.observation_space, "shape", None)
    if obs.shape != expected:
        raise ValueError(f"observation shape mismatch: module expects {expected}, got {obs.shape}")
    stateful = module.is_stateful()
    with torch.no_grad():
        if stateful:
            if state is None:
                state = torch.utils._pytree.tree_map(lambda s: s[None], module.get_initial_state())
            batch = {Columns.OBS: torch.from_numpy(obs[None, None]), Columns.STATE_IN: state}
        else:
            batch = {Columns.OBS: torch.from_numpy(obs[None])}
        out = module.forward_inference(batch)
        if Columns.ACTIONS in out:
            action = out[Columns.ACTIONS]
        else:
            logits = out[Columns.ACTION_DIST_INPUTS]
            dist = module.get_inference_action_dist_cls().from_logits(logits.reshape(1, -1))
            action = dist.to_deterministic().sample()
    action = action.cpu().numpy() if isinstance(action, torch.Tensor) else np.asarray(action)
    action = action.reshape(1, -1)[0].astype(np.int64)
    return (action, out[Columns.STATE_OUT]) if stateful else action


def observation_scale(samples: np.ndarray) -> np.ndarray:
    """Per-dimension scale from sample observations: the largest magnitude seen, at least 1.

    Dividing by it puts every feature in about [-1, 1] for the network; dimensions that
    never exceed 1 (flags, one-hots, shares) are left as they are.
    """
    return np.maximum(np.abs(samples).max(axis=0), 1.0).astype(np.float32)
