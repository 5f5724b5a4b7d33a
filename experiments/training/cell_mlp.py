"""The per-cell policy network of the universal allocator, in torch alone (no RLlib): the MLP that
:class:`experiments.training.cell_module.CellPPOModule` trains with PPO and
:mod:`experiments.training.distil` fits by imitation, and its export to the data-only
:class:`~policies.checkpoint_format.PolicyNetwork` a universal checkpoint stores."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from policies.checkpoint_format import CheckpointError, NetworkSpec, PolicyNetwork


def cell_mlp(sizes: list[int], out: int) -> nn.Sequential:
    """Linear layers of ``sizes`` with tanh between, then a linear layer to ``out``."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.Tanh()]
    layers.append(nn.Linear(sizes[-1], out))
    return nn.Sequential(*layers)


def network_from_cell_mlp(pi: nn.Sequential, n_actions: int) -> PolicyNetwork:
    """A per-cell MLP (:func:`cell_mlp`: cell features -> ``n_actions`` logits) as a data-only
    :class:`PolicyNetwork`; checked against the MLP on random cells."""
    layers: list[dict[str, Any]] = []
    tensors: dict[str, torch.Tensor] = {}
    for i, child in enumerate(pi):
        if isinstance(child, nn.Linear):
            layers.append({"type": "linear", "in": child.in_features, "out": child.out_features})
            tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"] = child.weight, child.bias
        elif isinstance(child, nn.Tanh):
            layers.append({"type": "tanh"})
        else:  # pragma: no cover - cell_mlp builds only these
            raise CheckpointError(f"cannot export layer {type(child).__name__}")
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": [n_actions]}})
    network = PolicyNetwork(spec, {k: v.detach().clone().float() for k, v in tensors.items()})
    probe = np.random.default_rng(0).normal(size=(16, network.input_size)).astype(np.float32)
    with torch.no_grad():
        theirs = pi(torch.from_numpy(probe)).numpy()
    if not np.allclose(network.logits(probe), theirs, atol=1e-5, rtol=1e-5):
        raise CheckpointError("exporting the cell network changed its outputs")
    return network


__all__ = ["cell_mlp", "network_from_cell_mlp"]
