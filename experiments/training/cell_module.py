"""The shape-free allocator as an RLlib module: :class:`CellPPOModule` (new API stack).

Its input is the padded cell view of :mod:`policies.universal` (every (team, tier) cell's
features, then the mask of real cells). The **policy** is one MLP applied to every cell
with shared weights (``pi``: cell features -> the logits of that cell's code); padded
cells get fixed logits that make their code the zero correction with probability ~1 (no
gradient, no entropy, and the codec ignores them anyway). The **value function** embeds
every cell with a second MLP, averages the real cells' embeddings and maps the mean to one
number. Neither network's size depends on the number of teams or tiers.

:func:`network_from_cell_module` copies ``pi`` into the data-only per-cell
:class:`~policies.checkpoint_format.PolicyNetwork` a universal checkpoint stores (checked:
same logits); :func:`load_cell_policy` is the reverse (``--init-from``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from policies.checkpoint_format import CheckpointError, NetworkSpec, PolicyNetwork
from policies.universal import CELLS, N_FEATURES

PADDED_LOGIT = -30.0  # a padded cell's logit for every code but the zero one (which gets 0)


def _mlp(sizes: list[int], out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.Tanh()]
    layers.append(nn.Linear(sizes[-1], out))
    return nn.Sequential(*layers)


class CellPPOModule(TorchRLModule, ValueFunctionAPI):
    """Per-cell policy, pooled value function (see the module docstring).

    ``model_config``: ``hidden`` (layer sizes of both MLPs), ``n_actions`` (codes per cell),
    ``zero`` (the zero correction's code)."""

    def setup(self) -> None:
        cfg: dict[str, Any] = dict(self.model_config) if isinstance(self.model_config, dict) else {}
        hidden = [int(h) for h in cfg.get("hidden", [128, 128])]
        self.n_actions = int(cfg.get("n_actions", 5))
        self.zero = int(cfg.get("zero", self.n_actions // 2))
        shape = getattr(self.observation_space, "shape", None)
        if shape != (CELLS * N_FEATURES + CELLS,):
            raise ValueError(f"CellPPOModule takes the padded cell view ({CELLS * N_FEATURES + CELLS},), got {shape}")
        self.pi = _mlp([N_FEATURES, *hidden], self.n_actions)
        self.vf_embed = _mlp([N_FEATURES, *hidden[:-1]], hidden[-1])
        self.vf_head = nn.Sequential(nn.Tanh(), nn.Linear(hidden[-1], 1))
        padded = torch.full((self.n_actions,), PADDED_LOGIT)
        padded[self.zero] = 0.0
        self.register_buffer("padded_logits", padded, persistent=False)
        self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(  # type: ignore[misc]
            input_lens=[self.n_actions] * CELLS)

    def _split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cells = obs[..., : CELLS * N_FEATURES].reshape(*obs.shape[:-1], CELLS, N_FEATURES)
        return cells, obs[..., CELLS * N_FEATURES:]

    def _logits(self, obs: torch.Tensor) -> torch.Tensor:
        cells, mask = self._split(obs)
        logits = self.pi(cells)  # (..., cells, n_actions)
        logits = torch.where(mask.unsqueeze(-1) > 0.5, logits, self.padded_logits)
        return logits.reshape(*obs.shape[:-1], CELLS * self.n_actions)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch[Columns.OBS])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        cells, mask = self._split(batch[Columns.OBS])
        embedded = self.vf_embed(cells)
        weights = mask / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        pooled = (embedded * weights.unsqueeze(-1)).sum(dim=-2)
        return self.vf_head(pooled).squeeze(-1)


def _pi_layers(module: Any) -> nn.Sequential:
    pi = getattr(module, "pi", None)
    if not isinstance(module, CellPPOModule) or not isinstance(pi, nn.Sequential):
        raise CheckpointError(f"{type(module).__name__} is not a CellPPOModule")
    return pi


def network_from_cell_module(module: Any) -> PolicyNetwork:
    """The per-cell policy of a :class:`CellPPOModule` as a data-only :class:`PolicyNetwork`
    (one cell's features -> its code's logits); checked against the module on random cells."""
    layers: list[dict[str, Any]] = []
    tensors: dict[str, torch.Tensor] = {}
    for i, child in enumerate(_pi_layers(module)):
        if isinstance(child, nn.Linear):
            layers.append({"type": "linear", "in": child.in_features, "out": child.out_features})
            tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"] = child.weight, child.bias
        elif isinstance(child, nn.Tanh):
            layers.append({"type": "tanh"})
        else:  # pragma: no cover - _mlp builds only these
            raise CheckpointError(f"cannot export layer {type(child).__name__}")
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": [module.n_actions]}})
    network = PolicyNetwork(spec, {k: v.detach().clone().float() for k, v in tensors.items()})
    probe = np.random.default_rng(0).normal(size=(16, N_FEATURES)).astype(np.float32)
    with torch.no_grad():
        theirs = module.pi(torch.from_numpy(probe)).numpy()
    if not np.allclose(network.logits(probe), theirs, atol=1e-5, rtol=1e-5):
        raise CheckpointError("exporting the cell module changed its outputs")
    return network


def load_cell_policy(module: Any, network: PolicyNetwork) -> None:
    """Copy a per-cell network's weights into ``module.pi`` (shapes must match)."""
    tensors = network.tensors()
    with torch.no_grad():
        for i, child in enumerate(_pi_layers(module)):
            if isinstance(child, nn.Linear):
                child.weight.copy_(tensors[f"layers.{i}.weight"])
                child.bias.copy_(tensors[f"layers.{i}.bias"])


def favour_cell_code(module: Any, code: int, strength: float) -> None:
    """Start every real cell at ``code`` (``strength`` more logit, output weights scaled 10x down),
    as :func:`experiments.training.weights.favour_code` does for an MLP module."""
    last = [layer for layer in _pi_layers(module) if isinstance(layer, nn.Linear)][-1]
    with torch.no_grad():
        last.bias.copy_(torch.as_tensor(np.where(np.arange(last.out_features) == code, strength, 0.0),
                                        dtype=last.bias.dtype))
        last.weight.mul_(0.1)


def cell_linears(hidden: list[int] | tuple[int, ...], n_actions: int) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of a cell policy with these hidden sizes."""
    sizes = [N_FEATURES, *hidden, n_actions]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


__all__ = ["CellPPOModule", "cell_linears", "favour_cell_code", "load_cell_policy", "network_from_cell_module"]
