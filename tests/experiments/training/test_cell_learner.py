"""The shape-free allocator's PPO loss clips each cell's ratio on its own (experiments.training.cell_module):
pure tensor checks of the per-cell terms and surrogate, against the joint ratio RLlib would clip."""

from __future__ import annotations

import pytest
import torch

from experiments.training.cell_module import clipped_cell_surrogate, per_cell_terms
from policies.universal import CELLS

pytestmark = [pytest.mark.slow, pytest.mark.rllib]  # imports RLlib's PPO learner

N_ACTIONS = 5


def _mask(real: int) -> torch.Tensor:
    return (torch.arange(CELLS) < real).float().unsqueeze(0)


def test_an_unchanged_policy_has_ratio_one_no_kl_and_zero_padding():
    torch.manual_seed(0)
    logits = torch.randn(1, CELLS * N_ACTIONS)
    actions = torch.randint(0, N_ACTIONS, (1, CELLS))
    terms = per_cell_terms(logits, logits.clone(), actions, _mask(6), N_ACTIONS)
    assert torch.allclose(terms["ratio"], torch.ones(1, CELLS))
    assert torch.allclose(terms["kl"], torch.zeros(1, CELLS), atol=1e-6)
    assert (terms["entropy"][0, :6] > 0).all() and (terms["entropy"][0, 6:] == 0).all()


def test_a_moved_cell_changes_its_own_ratio_only():
    old = torch.zeros(1, CELLS * N_ACTIONS)
    new = old.clone()
    new[0, 2 * N_ACTIONS + 1] = 1.0  # cell 2 favours code 1 more
    actions = torch.ones(1, CELLS, dtype=torch.long)
    terms = per_cell_terms(new, old, actions, _mask(4), N_ACTIONS)
    moved = torch.exp(torch.tensor(1.0)) / (torch.exp(torch.tensor(1.0)) + 4) / 0.2
    assert terms["ratio"][0, 2].item() == pytest.approx(moved.item(), rel=1e-5)
    assert torch.allclose(terms["ratio"][0, [0, 1, 3]], torch.ones(3))
    assert terms["kl"][0, 2] > 0 and (terms["kl"][0, [0, 1, 3]].abs() < 1e-6).all()


def test_twenty_cells_each_moved_a_little_keep_their_gradient_where_the_joint_ratio_is_clipped():
    real, clip = 20, 0.2
    log_ratio = torch.full((1, CELLS), 0.02, requires_grad=True)  # each cell's ratio 1.02
    ratio = log_ratio.exp()
    advantage = torch.tensor([1.0])
    joint = ratio[:, :real].prod(-1)  # RLlib's ratio of the whole action: 1.02^20 = 1.49
    assert joint.item() > 1 + clip
    joint_surrogate = torch.min(advantage * joint, advantage * torch.clamp(joint, 1 - clip, 1 + clip))
    (joint_grad,) = torch.autograd.grad(joint_surrogate.sum(), log_ratio, retain_graph=True)
    assert torch.count_nonzero(joint_grad) == 0  # the joint clip stops every cell's gradient
    surrogate = clipped_cell_surrogate(ratio, advantage, _mask(real), clip)
    (cell_grad,) = torch.autograd.grad(surrogate.sum(), log_ratio)
    assert (cell_grad[0, :real] > 0).all() and (cell_grad[0, real:] == 0).all()
    assert surrogate.item() == pytest.approx(float(torch.exp(torch.tensor(0.02))), rel=1e-5)  # mean over real cells only


def test_a_cell_past_the_clip_stops_alone():
    ratio = torch.ones(1, CELLS)
    ratio[0, 0] = 1.5
    surrogate = clipped_cell_surrogate(ratio, torch.tensor([2.0]), _mask(2), 0.2)
    assert surrogate.item() == pytest.approx((2.0 * 1.2 + 2.0 * 1.0) / 2)
