"""Learned policies over a batch of arenas: a data-only network acting on N observations at once.

:class:`BatchLearned` is :class:`~policies.learned.LearnedPolicy` of a checkpoint with the scenario's
own view (an ``mlp`` network) or the padded cell view (a universal allocator) in N arenas: one forward pass per
step through the batched form of the policy's interface (:class:`~policies.learned.BatchInterface`,
:class:`~policies.universal.BatchUniversalInterface`: the per-arena interface is a batch of one of it), the
greedy action of each row, decoded by the batched codec; row *i* equals the per-arena policy's action
(``tests/policies/test_batch_learned.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.batch import reset_indices
from policies.checkpoint_format import PolicyNetwork
from policies.learned import LearnedPolicy, ModuleInterface
from policies.universal import CellNetwork, UniversalInterface


class BatchLearned:
    """A :class:`~policies.learned.LearnedPolicy` with a plain network and interface, in ``num_envs`` arenas."""

    def __init__(self, policy: LearnedPolicy, num_envs: int) -> None:
        if not batchable(policy):
            raise ValueError("only a learned network over its scenario's own or the cell view acts as a batch")
        self.num_envs = num_envs
        self.network: PolicyNetwork | CellNetwork = policy.module  # type: ignore[assignment]
        self.interface = policy.interface.batched.resized(num_envs)

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        rows = reset_indices(self.num_envs, seeds, index)  # greedy: nothing random to seed
        self.interface.reset(rows)
        # a recurrent network: those arenas start their episodes from the zero state (all of them: a new batch)
        self.network.reset(None if index is None else rows)

    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations)
        return self.interface.act(obs, self.network.greedy_rows(self.interface.observe(obs)))


def batchable(policy: object) -> bool:
    """Whether ``policy`` has a batched form here: a learned network over its scenario's own view or the cell view."""
    if not isinstance(policy, LearnedPolicy):
        return False
    return ((isinstance(policy.module, PolicyNetwork) and isinstance(policy.interface, ModuleInterface))
            or (isinstance(policy.module, CellNetwork) and isinstance(policy.interface, UniversalInterface)))


__all__ = ["BatchLearned", "batchable"]
