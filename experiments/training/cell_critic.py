"""A critic of the cells' joint action for the universal allocator (``--critic cells``): credit per cell.

:class:`~experiments.training.cell_module.CellPPOModule`'s pooled value V(s) gives every cell of a tick the tick's
one advantage, so a correction that helps one team is scored with every other cell's noise. This critic is the
action-dependent factorized baseline of Wu et al. 2018 ("Variance reduction for policy gradient with
action-dependent factorized baselines"; COMA's counterfactual baseline is the same idea):

* **Q(s, a)** (:meth:`CellQCritic.q`): every real cell is embedded by one MLP (shared weights) from its features and
  the one-hot of its code, the embeddings are averaged over the real cells, and a head maps the mean to one number.
  It is fitted by regression to the lean path's value targets (the GAE returns, :mod:`experiments.training.lean_update`).
* **A baseline per cell** (:meth:`CellQCritic.baselines`): ``b_c = sum_a' pi_c(a'|s) Q(s, a with a_c := a')``, the
  critic's value of the tick with cell c's code drawn again from its policy and every other cell's as played. It
  does not depend on cell c's own code, so ``A_c = return - b_c`` is an unbiased advantage for cell c's gradient
  (each cell's term of the policy gradient has its own baseline); it removes the other cells' part of the return.

Cheap to ask for every code: only the embedding's first layer reads the code, so a cell's pre-activations for its
five codes are its features' one linear map plus one weight column each (:meth:`CellQCritic.embeddings`), and a
cell's counterfactual mean is the tick's mean with that cell's own embedding swapped. Extra per-cell inputs the
policy never sees (the critic is training-only) go in ``inputs`` beside the cell features
(``--critic privileged``: :mod:`experiments.training.privileged`).
"""

from __future__ import annotations

import torch
from torch import nn

from experiments.training.cell_mlp import cell_mlp

# rows per pass of CellQCritic.baselines (every real cell x every code x width floats at once): on one thread, 12,000
# rows of 2-8 x 1-4 cells at width 128 took 2.0 s in chunks of 64, 2.2 s of 512, 3.3 s of 2048 (cache-sized is best)
BASELINE_CHUNK = 128


class CellQCritic(nn.Module):
    """Q(s, a) over the padded cells (``inputs`` ``[..., cells, n_inputs]``, ``mask`` ``[..., cells]``, ``codes``
    ``[..., cells]``); see the module docstring. ``hidden``: the embedding's layer sizes (the last is its width)."""

    def __init__(self, n_inputs: int, n_actions: int, hidden: list[int]) -> None:
        super().__init__()
        self.n_inputs, self.n_actions, self.width = n_inputs, n_actions, hidden[-1]
        self.embed = cell_mlp([n_inputs + n_actions, *hidden[:-1]], hidden[-1])  # [inputs, one-hot code] -> width
        self.head = nn.Sequential(nn.Tanh(), nn.Linear(self.width, self.width), nn.Tanh(), nn.Linear(self.width, 1))

    def _inputs_part(self, inputs: torch.Tensor) -> torch.Tensor:
        first: nn.Linear = self.embed[0]  # type: ignore[assignment]
        return nn.functional.linear(inputs, first.weight[:, : self.n_inputs], first.bias)

    def _code_columns(self) -> torch.Tensor:
        first: nn.Linear = self.embed[0]  # type: ignore[assignment]
        return first.weight[:, self.n_inputs:].T  # [n_actions, first width]: the one-hot's columns

    def embeddings(self, inputs: torch.Tensor) -> torch.Tensor:
        """Cells ``[M, n_inputs]`` -> their embedding with every code ``[M, n_actions, width]``."""
        pre = self._inputs_part(inputs).unsqueeze(-2) + self._code_columns()
        return self.embed[1:](pre)

    def embedded(self, inputs: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Cells ``[M, n_inputs]`` and their codes ``[M]`` -> their embedding ``[M, width]``."""
        return self.embed[1:](self._inputs_part(inputs) + self._code_columns()[codes.long()])

    def q(self, inputs: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Q of the codes played ``[...]``."""
        real = mask > 0.5
        embedded = inputs.new_zeros((*mask.shape, self.width))
        embedded[real] = self.embedded(inputs[real], codes[real])
        weights = mask / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        return self.head((embedded * weights.unsqueeze(-1)).sum(dim=-2)).squeeze(-1)

    def baselines(self, inputs: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor,
                  probs: torch.Tensor) -> torch.Tensor:
        """Each cell's baseline ``b_c = sum_a' probs_c(a') Q(s, a with a_c := a')`` ``[R, cells]`` (rows ``R``;
        ``probs`` ``[R, cells, n_actions]``: the policy's); 0 on padded cells. Computed :data:`BASELINE_CHUNK` rows
        at a time, on one torch thread: on the 2-core machine beside a training run, two threads took the same
        12,000 rows 4 to 20 times longer (9.9 s in chunks of 512, 38 s of 64; the OpenMP spin of RLLIB_NOTES)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._chunked_baselines(inputs, mask, codes, probs)
        finally:
            torch.set_num_threads(threads)

    def _chunked_baselines(self, inputs: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor,
                           probs: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._baselines(inputs[i:i + BASELINE_CHUNK], mask[i:i + BASELINE_CHUNK],
                                          codes[i:i + BASELINE_CHUNK], probs[i:i + BASELINE_CHUNK])
                          for i in range(0, len(mask), BASELINE_CHUNK)] or [mask.new_zeros(mask.shape)])

    def _baselines(self, inputs: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor,
                   probs: torch.Tensor) -> torch.Tensor:
        real = mask > 0.5
        row = real.nonzero()[:, 0]  # each real cell's row
        every = self.embeddings(inputs[real])  # [M, n_actions, width]
        taken = every.gather(1, codes[real].long().view(-1, 1, 1).expand(-1, 1, self.width)).squeeze(1)
        weight = (mask / mask.sum(dim=-1, keepdim=True).clamp(min=1.0))[real].unsqueeze(-1)  # [M, 1]
        mean = mask.new_zeros((len(mask), self.width)).index_add_(0, row, weight * taken)
        others = mean[row] - weight * taken  # the tick's mean without the cell's own embedding
        q = self.head(others.unsqueeze(1) + weight.unsqueeze(1) * every).squeeze(-1)  # [M, n_actions]
        out = mask.new_zeros(mask.shape)
        out[real] = (probs[real] * q).sum(-1)
        return out


__all__ = ["BASELINE_CHUNK", "CellQCritic"]
