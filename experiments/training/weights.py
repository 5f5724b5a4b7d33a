"""Weight surgery on a built algorithm: start a learning module at a code of its codec.

The learner's module is changed and its weights are pushed to every env runner
(:func:`push_learner_weights`, which waits until each runner holds them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from experiments.training.weight_sync import push_learner_weights


def favour_cells(algo: Any, module_id: str, code: int, strength: float) -> None:
    """:func:`favour_code` for the shape-free allocator: every cell starts at ``code``."""
    from experiments.training.cell_module import favour_cell_code

    algo.learner_group.foreach_learner(lambda learner: favour_cell_code(learner.module[module_id], code, strength))
    push_learner_weights(algo)


def favour_code(algo: Any, agent: str, nvec: Any, code: Any, strength: float) -> None:
    """Make ``code`` the learned agent's likely action at the start of training.

    The output layer of the module's policy head gets bias ``strength`` on the chosen
    category of every MultiDiscrete sub-action (0 elsewhere) and its weights are scaled
    down 10x, so that every observation starts near the same distribution: with 5
    categories and ``strength=4`` each sub-action picks ``code`` with probability ~0.93,
    and the greedy action is ``code``. Used to start a residual codec at the zero
    correction (the base policy). The learner's module is changed and its weights are
    pushed to every env runner.
    """
    bias = np.concatenate([np.where(np.arange(n) == c, strength, 0.0) for n, c in zip(nvec, code, strict=True)])

    def patch(learner: Any) -> None:
        module = learner.module[agent]
        last = [layer for layer in module.pi.modules() if isinstance(layer, torch.nn.Linear)][-1]
        if last.out_features != len(bias):
            raise ValueError(f"{agent!r} policy head has {last.out_features} outputs, the code space {len(bias)}")
        with torch.no_grad():
            last.bias.copy_(torch.as_tensor(bias, dtype=last.bias.dtype))
            last.weight.mul_(0.1)

    algo.learner_group.foreach_learner(patch)
    push_learner_weights(algo)


__all__ = ["favour_cells", "favour_code"]
