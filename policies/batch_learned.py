"""Learned policies over a batch of arenas: a data-only network acting on N observations at once.

:class:`BatchInterface` is :class:`~policies.learned.ModuleInterface` for ``num_envs`` arenas (row *i*
is what arena *i*'s interface gives: the scaled observation, the codec's features in N arenas
(:func:`policies.codecs.make_batch_codec`), the stacked history, the seat's identity); training's batched
samplers show a learning seat's module the same rows (:mod:`experiments.training.batched_env`).
:class:`BatchLearned` is :class:`~policies.learned.LearnedPolicy` of a checkpoint with the scenario's
own view (an ``mlp`` network) or the padded cell view (a universal allocator) in N arenas: one forward pass per step, the greedy action of each row,
decoded by the batched codec; row *i* equals the per-arena policy's action (``tests/policies/test_batch_learned.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.batch import reset_indices
from policies.checkpoint_format import PolicyNetwork
from policies.codecs import make_batch_codec
from policies.learned import LearnedPolicy, ModuleInterface, ObservationInterface
from policies.universal import BatchUniversalInterface, CellNetwork, UniversalInterface


class BatchInterface:
    """:class:`~policies.learned.ModuleInterface` ``one`` in ``num_envs`` arenas, as arrays."""

    def __init__(self, one: ModuleInterface, num_envs: int) -> None:
        self.one, self.num_envs = one, num_envs
        self.scale, self.history, self.frame_size = one.scale, one.history, one.frame_size
        spec = one.codec_spec
        name = spec if spec is None or isinstance(spec, str) else spec["name"]
        params = {} if spec is None or isinstance(spec, str) else dict(spec.get("params", {}))
        self.codec = None if name is None else make_batch_codec(name, one.config, num_envs, one.agent, **params)
        self.frames = np.zeros((num_envs, self.history, self.frame_size), dtype=np.float32)
        identity = np.zeros((num_envs, 0 if one.identity is None else one.identity[1]), dtype=np.float32)
        if one.identity is not None:
            identity[:, one.identity[0]] = 1.0
        self.identity = identity
        self.no_action = np.zeros(one.action_space().shape, dtype=np.int64)  # an arena no module acted in

    def reset(self, index: np.ndarray) -> None:
        self.frames[index] = 0.0
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
        if self.identity.shape[1]:
            frame = np.concatenate([frame, self.identity[: len(frame)]], axis=1)
        return frame.astype(np.float32)

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray:
        return module_actions if self.codec is None else self.codec.decode(observations, module_actions)


class BatchLearned:
    """A :class:`~policies.learned.LearnedPolicy` with a plain network and interface, in ``num_envs`` arenas."""

    def __init__(self, policy: LearnedPolicy, num_envs: int) -> None:
        if not batchable(policy):
            raise ValueError("only a learned network over its scenario's own or the cell view acts as a batch")
        self.num_envs = num_envs
        self.network: PolicyNetwork | CellNetwork = policy.module  # type: ignore[assignment]
        self.interface = batch_interface(policy.interface, num_envs)

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        rows = reset_indices(self.num_envs, seeds, index)  # greedy: nothing random to seed
        self.interface.reset(rows)
        # a recurrent network: those arenas start their episodes from the zero state (all of them: a new batch)
        self.network.reset(None if index is None else rows)

    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations)
        return self.interface.act(obs, self.network.greedy_rows(self.interface.observe(obs)))


def batch_interface(one: ObservationInterface, num_envs: int) -> BatchInterface | BatchUniversalInterface:
    """The batched form of a seat's interface: the scenario's own view or the padded cell view."""
    if isinstance(one, UniversalInterface):
        return BatchUniversalInterface(one, num_envs)
    if type(one) is not ModuleInterface:
        raise ValueError(f"no batched form of {type(one).__name__}")
    return BatchInterface(one, num_envs)


def batchable(policy: object) -> bool:
    """Whether ``policy`` has a batched form here: a learned network over its scenario's own view."""
    if not isinstance(policy, LearnedPolicy):
        return False
    return ((isinstance(policy.module, PolicyNetwork) and type(policy.interface) is ModuleInterface)
            or (isinstance(policy.module, CellNetwork) and isinstance(policy.interface, UniversalInterface)))


__all__ = ["BatchInterface", "BatchLearned", "batch_interface", "batchable"]
