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

**Its PPO loss is per cell** (:class:`CellPPOLearner`). RLlib's PPO treats the 32 codes of a
tick as one action: the probability ratio is the product of every cell's ratio, and the KL
and entropy are sums over cells. With ~20 real cells the joint ratio leaves PPO's clip range
(0.8..1.2) when each cell's ratio moves by about 1 %, and the summed KL meets its target
(0.01, the coefficient then grows 1.5x per iteration) when each cell's moves by about 0.0005:
each cell may change about twenty times less per update than a single action would, and the
first universal runs' greedy actions never left ``planner`` (docs/training.md). Here each
cell's ratio is clipped on its own (the clipped surrogate of factored action spaces), and
KL and entropy are means over the real cells.

**The advantage** is the tick's one advantage, shared by every cell, with the pooled critic (``critic``
``pooled``, the default). With ``cells`` (``--critic cells``) the module also holds a critic of the cells'
joint action, Q(s, a) (:class:`~experiments.training.cell_critic.CellQCritic`), fitted to the value targets
beside V(s), and every cell gets an advantage of its own, ``A_c = return - b_c(s, a_-c)``
(:meth:`CellPPOModule.cell_baselines`, computed by the lean update: ``advantages`` ``[rows, cells]``); V(s)
still bootstraps GAE. ``privileged`` is the same critic reading per-cell inputs the policy never sees
(:mod:`experiments.training.privileged`). Only ``pi`` is exported: the critics are training-only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.torch_utils import explained_variance
from torch import nn

from experiments.training.cell_critic import CellQCritic
from experiments.training.cell_mlp import cell_mlp, network_from_cell_mlp
from experiments.training.privileged import CRITICS
from policies.checkpoint_format import CheckpointError, PolicyNetwork
from policies.universal import CELLS, cell_view

PADDED_LOGIT = -30.0  # a padded cell's logit for every code but the zero one (which gets 0)
PRIVILEGED = "privileged"  # the batch column of --critic privileged's per-cell inputs ([rows, CELLS * width])


class CellPPOModule(TorchRLModule, ValueFunctionAPI):
    """Per-cell policy, pooled value function (see the module docstring).

    ``model_config``: ``hidden`` (layer sizes of both MLPs), ``n_actions`` (codes per cell),
    ``zero`` (the zero correction's code), ``features`` (the cell view's version, default ``cells_v1``),
    ``critic`` (:data:`~experiments.training.privileged.CRITICS`, default ``pooled``: V(s) alone) and ``privileged`` (the width of the per-cell
    inputs only the ``privileged`` critic reads)."""

    def setup(self) -> None:
        cfg: dict[str, Any] = dict(self.model_config) if isinstance(self.model_config, dict) else {}
        hidden = [int(h) for h in cfg.get("hidden", [128, 128])]
        self.n_actions = int(cfg.get("n_actions", 5))
        self.zero = int(cfg.get("zero", self.n_actions // 2))
        view = cell_view(str(cfg.get("features", "cells_v1")))
        self.n_features = view.n_features
        shape = getattr(self.observation_space, "shape", None)
        if shape != (view.obs_size,):
            raise ValueError(f"CellPPOModule takes the padded cell view of {view.name} ({view.obs_size},), got {shape}")
        self.pi = cell_mlp([view.n_features, *hidden], self.n_actions)
        self.vf_embed = cell_mlp([view.n_features, *hidden[:-1]], hidden[-1])
        self.vf_head = nn.Sequential(nn.Tanh(), nn.Linear(hidden[-1], 1))
        padded = torch.full((self.n_actions,), PADDED_LOGIT)
        padded[self.zero] = 0.0
        self.register_buffer("padded_logits", padded, persistent=False)
        self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(  # type: ignore[misc]
            input_lens=[self.n_actions] * CELLS)
        # built after pi and V: a pooled module's weights, and every module's pi, are the same for the same seed
        self.critic = str(cfg.get("critic", "pooled"))
        self.n_privileged = int(cfg.get("privileged", 0)) if self.critic == "privileged" else 0
        if self.critic not in CRITICS:
            raise ValueError(f"critic must be one of {list(CRITICS)}, got {self.critic!r}")
        if self.critic != "pooled":
            self.q_critic = CellQCritic(view.n_features + self.n_privileged, self.n_actions, hidden)

    def _split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        width = CELLS * self.n_features
        return obs[..., :width].reshape(*obs.shape[:-1], CELLS, self.n_features), obs[..., width:]

    def _logits(self, obs: torch.Tensor) -> torch.Tensor:
        cells, mask = self._split(obs)
        real = mask > 0.5  # the MLP runs on the real cells only: a cluster's padding costs nothing
        logits = self.padded_logits.expand(*mask.shape, self.n_actions).clone()
        logits[real] = self.pi(cells[real])
        return logits.reshape(*obs.shape[:-1], CELLS * self.n_actions)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch[Columns.OBS])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        cells, mask = self._split(batch[Columns.OBS])
        real = mask > 0.5
        width = int(self.vf_head[-1].in_features)  # type: ignore[arg-type]
        embedded = cells.new_zeros((*mask.shape, width))
        embedded[real] = self.vf_embed(cells[real])
        weights = mask / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        pooled = (embedded * weights.unsqueeze(-1)).sum(dim=-2)
        return self.vf_head(pooled).squeeze(-1)

    def _critic_inputs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        cells, mask = self._split(batch[Columns.OBS])
        if self.n_privileged:
            cells = torch.cat([cells, batch[PRIVILEGED].reshape(*mask.shape, self.n_privileged).to(cells.dtype)], -1)
        return cells, mask

    def q_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """Q(s, a) of the codes played (``actions``) ``[rows]`` (a per-cell critic's only)."""
        inputs, mask = self._critic_inputs(batch)
        return self.q_critic.q(inputs, mask, batch[Columns.ACTIONS])

    def cell_baselines(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """Each cell's baseline ``[rows, CELLS]`` (:meth:`CellQCritic.baselines`, under the policy whose
        ``action_dist_inputs`` the batch holds: the one that sampled it); None with the pooled critic."""
        if self.critic == "pooled":
            return None
        inputs, mask = self._critic_inputs(batch)
        logits = batch[Columns.ACTION_DIST_INPUTS].reshape(*mask.shape, self.n_actions)
        return self.q_critic.baselines(inputs, mask, batch[Columns.ACTIONS], torch.softmax(logits, -1))

    def cell_mask(self, obs: torch.Tensor) -> torch.Tensor:
        """The mask of real cells ``[..., CELLS]`` of the padded view ``obs``."""
        return self._split(obs)[1]


def per_cell_terms(logits: torch.Tensor, old_logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor,
                   n_actions: int) -> dict[str, torch.Tensor]:
    """Per row: each cell's probability ratio (new / old policy, at the action taken), KL(old ||
    new) and entropy of the new policy, as (rows, cells) tensors; padded cells (``mask`` 0) are
    ratio 1, KL 0 and entropy 0."""
    shape = (*logits.shape[:-1], CELLS, n_actions)
    new, old = torch.log_softmax(logits.reshape(shape), -1), torch.log_softmax(old_logits.reshape(shape), -1)
    taken = actions.long().unsqueeze(-1)
    log_ratio = (new.gather(-1, taken) - old.gather(-1, taken)).squeeze(-1)
    real = mask > 0.5
    kl = (old.exp() * (old - new)).sum(-1)
    entropy = -(new.exp() * new).sum(-1)
    zero = torch.zeros_like(log_ratio)
    return {"ratio": torch.where(real, log_ratio, zero).exp(), "kl": torch.where(real, kl, zero),
            "entropy": torch.where(real, entropy, zero)}


def clipped_cell_surrogate(ratio: torch.Tensor, advantage: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate per cell, averaged over each row's real cells (rows,); ``advantage`` is the tick's
    ``(rows,)`` or each cell's ``(rows, cells)``."""
    if advantage.dim() < ratio.dim():
        advantage = advantage.unsqueeze(-1)
    surrogate = torch.min(advantage * ratio, advantage * torch.clamp(ratio, 1 - clip, 1 + clip))
    return _cell_mean(surrogate, mask)


def _cell_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    real = (mask > 0.5).to(values.dtype)
    return (values * real).sum(-1) / real.sum(-1).clamp(min=1.0)


class CellPPOLearner(PPOTorchLearner):
    """PPO whose ratio is clipped per cell and whose KL and entropy are per-cell means (see the
    module docstring) for :class:`CellPPOModule`s; any other module gets RLlib's loss."""

    def compute_loss_for_module(self, *, module_id: Any, config: Any, batch: dict[str, Any],
                                fwd_out: dict[str, Any]) -> torch.Tensor:
        module = self.module[module_id].unwrapped()
        if not isinstance(module, CellPPOModule):
            loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
            return torch.as_tensor(loss)
        rows = batch.get(Columns.LOSS_MASK)  # PPO's artificial bootstrap step at each episode's end

        def mean(x: torch.Tensor) -> torch.Tensor:
            return torch.mean(x) if rows is None else torch.sum(x[rows]) / torch.sum(rows)
        _, mask = module._split(batch[Columns.OBS])
        terms = per_cell_terms(fwd_out[Columns.ACTION_DIST_INPUTS], batch[Columns.ACTION_DIST_INPUTS],
                               batch[Columns.ACTIONS], mask, module.n_actions)
        surrogate = clipped_cell_surrogate(terms["ratio"], batch[Postprocessing.ADVANTAGES], mask, config.clip_param)
        kl, entropy = _cell_mean(terms["kl"], mask), _cell_mean(terms["entropy"], mask)
        values = module.compute_values(batch)
        vf_loss = torch.pow(values - batch[Postprocessing.VALUE_TARGETS], 2.0)
        vf_loss_clipped = torch.clamp(vf_loss, 0, config.vf_clip_param)
        entropy_coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        total = mean(-surrogate + config.vf_loss_coeff * vf_loss_clipped - entropy_coeff * entropy)
        if module.critic != "pooled":  # Q(s, a) regressed on the same targets as V(s)
            q = module.q_values(batch)
            q_loss = torch.pow(q - batch[Postprocessing.VALUE_TARGETS], 2.0)
            total = total + config.vf_loss_coeff * mean(torch.clamp(q_loss, 0, config.vf_clip_param))
            self.metrics.log_dict({"q_loss": mean(q_loss), "q_explained_var": explained_variance(
                batch[Postprocessing.VALUE_TARGETS], q)}, key=module_id, window=1)
        mean_kl = mean(kl) if config.use_kl_loss else torch.tensor(0.0)
        if config.use_kl_loss:
            total = total + torch.as_tensor(self.curr_kl_coeffs_per_module[module_id]) * mean_kl
        self.metrics.log_dict({
            POLICY_LOSS_KEY: -mean(surrogate), VF_LOSS_KEY: mean(vf_loss_clipped),
            LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: mean(vf_loss),
            LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(batch[Postprocessing.VALUE_TARGETS], values),
            ENTROPY_KEY: mean(entropy), LEARNER_RESULTS_KL_KEY: mean_kl,
        }, key=module_id, window=1)
        return total


def _pi_layers(module: Any) -> nn.Sequential:
    pi = getattr(module, "pi", None)
    if not isinstance(module, CellPPOModule) or not isinstance(pi, nn.Sequential):
        raise CheckpointError(f"{type(module).__name__} is not a CellPPOModule")
    return pi


def network_from_cell_module(module: Any) -> PolicyNetwork:
    """The per-cell policy of a :class:`CellPPOModule` as a data-only :class:`PolicyNetwork`
    (one cell's features -> its code's logits); checked against the module on random cells."""
    return network_from_cell_mlp(_pi_layers(module), module.n_actions)


def load_cell_policy(module: Any, network: PolicyNetwork) -> None:
    """Copy a per-cell network's weights into ``module.pi`` (shapes must match, but for the first layer's inputs:
    a network of an earlier cell view, whose features the module's view starts with (cells_v1 in a cells_v2
    module), fills the first columns and the new inputs' weights are zero, so the module plays exactly as the
    network until training moves them)."""
    tensors = network.tensors()
    with torch.no_grad():
        for i, child in enumerate(_pi_layers(module)):
            if isinstance(child, nn.Linear):
                weight = tensors[f"layers.{i}.weight"]
                if i == 0 and weight.shape[1] < child.in_features:  # the new inputs, appended: weight 0
                    weight = nn.functional.pad(weight, (0, child.in_features - weight.shape[1]))
                child.weight.copy_(weight)
                child.bias.copy_(tensors[f"layers.{i}.bias"])


def favour_cell_code(module: Any, code: int, strength: float) -> None:
    """Start every real cell at ``code`` (``strength`` more logit, output weights scaled 10x down),
    as :func:`experiments.training.weights.favour_code` does for an MLP module."""
    last = [layer for layer in _pi_layers(module) if isinstance(layer, nn.Linear)][-1]
    with torch.no_grad():
        last.bias.copy_(torch.as_tensor(np.where(np.arange(last.out_features) == code, strength, 0.0),
                                        dtype=last.bias.dtype))
        last.weight.mul_(0.1)


__all__ = ["PRIVILEGED", "CellPPOLearner", "CellPPOModule", "clipped_cell_surrogate", "per_cell_terms", "favour_cell_code", "load_cell_policy", "network_from_cell_module"]
