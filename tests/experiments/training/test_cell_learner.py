"""The shape-free allocator's PPO loss clips each cell's ratio on its own (experiments.training.cell_module):
pure tensor checks of the per-cell terms and surrogate, against the joint ratio RLlib would clip; and the credit
per cell of ``--critic cells`` (experiments.training.cell_critic): each cell's baseline, blind to its own code, and
its advantage, normalised over the real cells."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from experiments.training.cell_critic import BASELINE_CHUNK
from experiments.training.cell_module import CellPPOModule, clipped_cell_surrogate, per_cell_terms
from experiments.training.lean_update import cell_advantages, normalised
from policies.universal import CELLS, MAX_TEAMS, MAX_TIERS, cell_view

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


# ------------------------------------------------------------------ credit per cell (--critic cells)

def _module(critic: str, hidden: tuple[int, ...] = (16, 16)) -> CellPPOModule:
    import gymnasium as gym

    view = cell_view("cells_v1")
    torch.manual_seed(0)
    return CellPPOModule(observation_space=gym.spaces.Box(-10, 10, (view.obs_size,), np.float32),
                         action_space=gym.spaces.MultiDiscrete([N_ACTIONS] * CELLS), inference_only=False,
                         model_config={"hidden": list(hidden), "n_actions": N_ACTIONS, "zero": 2, "critic": critic})


def _batch(rows: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Rows of random cells in clusters of 2-8 teams x 1-4 tiers (team-major padding), codes and logits."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((rows, MAX_TEAMS, MAX_TIERS), np.float32)
    for row, (teams, tiers) in enumerate(zip(rng.integers(2, 9, rows), rng.integers(1, 5, rows), strict=True)):
        mask[row, :teams, :tiers] = 1.0
    view = cell_view("cells_v1")
    cells = rng.normal(size=(rows, CELLS * view.n_features)).astype(np.float32)
    return {Columns.OBS: torch.from_numpy(np.concatenate([cells, mask.reshape(rows, CELLS)], axis=1)),
            Columns.ACTIONS: torch.from_numpy(rng.integers(0, N_ACTIONS, (rows, CELLS))),
            Columns.ACTION_DIST_INPUTS: torch.from_numpy(rng.normal(size=(rows, CELLS * N_ACTIONS)).astype(np.float32))}


def test_the_pooled_critic_is_todays_module_and_the_cells_critic_leaves_pi_and_v_as_they_start():
    pooled, cells = _module("pooled"), _module("cells")
    assert {name.split(".")[0] for name, _ in pooled.named_parameters()} == {"pi", "vf_embed", "vf_head"}
    assert pooled.cell_baselines(_batch(3)) is None
    theirs = dict(cells.named_parameters())
    for name, weight in pooled.named_parameters():  # the critic is built last: the same seed, the same policy
        assert torch.equal(weight, theirs[name])
    assert {name.split(".")[0] for name in theirs} == {"pi", "vf_embed", "vf_head", "q_critic"}
    with pytest.raises(ValueError, match="critic must be one of"):
        _module("per_team")


def test_a_cells_baseline_does_not_depend_on_its_own_code_and_the_others_do():
    module, batch = _module("cells"), _batch(64)
    with torch.no_grad():
        before = module.cell_baselines(batch)
        for cell in (0, 5, 13):  # team 0 tier 0, team 1 tier 1, team 3 tier 1
            moved = dict(batch)
            moved[Columns.ACTIONS] = batch[Columns.ACTIONS].clone()
            moved[Columns.ACTIONS][:, cell] = (moved[Columns.ACTIONS][:, cell] + 1) % N_ACTIONS
            after = module.cell_baselines(moved)
            real = batch[Columns.OBS][:, -CELLS + cell] > 0.5
            torch.testing.assert_close(after[:, cell], before[:, cell], atol=1e-5, rtol=1e-5)  # its own code: no change
            others = torch.ones(CELLS, dtype=torch.bool)
            others[cell] = False
            assert (after[real][:, others] - before[real][:, others]).abs().max() > 1e-4  # the other cells' do


def test_the_baseline_is_the_critics_value_with_the_cells_code_drawn_from_its_policy():
    module, batch = _module("cells"), _batch(BASELINE_CHUNK + 37, seed=1)  # two chunks
    with torch.no_grad():
        baselines = module.cell_baselines(batch)
        probs = torch.softmax(batch[Columns.ACTION_DIST_INPUTS].reshape(-1, CELLS, N_ACTIONS), -1)
        mask = module.cell_mask(batch[Columns.OBS])
        rows = torch.tensor([0, 1, BASELINE_CHUNK + 5])
        for cell in range(CELLS):
            expected = torch.zeros(len(rows))
            for code in range(N_ACTIONS):
                swapped = {key: value[rows] for key, value in batch.items()}
                swapped[Columns.ACTIONS] = swapped[Columns.ACTIONS].clone()
                swapped[Columns.ACTIONS][:, cell] = code
                expected += probs[rows, cell, code] * module.q_values(swapped)
            expected = torch.where(mask[rows, cell] > 0.5, expected, torch.zeros_like(expected))
            torch.testing.assert_close(baselines[rows, cell], expected, atol=1e-5, rtol=1e-4)
    assert (baselines[mask < 0.5] == 0).all()  # padded cells: no baseline


def _algorithm(module: CellPPOModule) -> SimpleNamespace:
    """What cell_advantages asks of an algorithm: its learner group's one local learner, holding ``module``."""
    learner = SimpleNamespace(module={"allocator": module})
    group = SimpleNamespace(foreach_learner=lambda fn: [SimpleNamespace(get=lambda: fn(learner))])
    return SimpleNamespace(learner_group=group)


def test_each_cells_advantage_is_the_return_minus_its_baseline_normalised_over_the_real_cells():
    module, batch = _module("cells"), _batch(300, seed=2)
    data = {key: value.numpy() for key, value in batch.items()}
    data["value_targets"] = np.random.default_rng(3).normal(5.0, 3.0, 300).astype(np.float32)
    advantages = cell_advantages(_algorithm(module), "allocator", data)
    assert advantages is not None and advantages.shape == (300, CELLS) and advantages.dtype == np.float32
    real = data[Columns.OBS][:, -CELLS:] > 0.5
    assert (advantages[~real] == 0).all()
    assert advantages[real].mean() == pytest.approx(0.0, abs=1e-5) and advantages[real].std() == pytest.approx(1.0, abs=1e-4)
    with torch.no_grad():
        raw = data["value_targets"][:, None] - module.cell_baselines(batch).numpy()
    np.testing.assert_allclose(advantages[real], normalised(raw[real]), atol=1e-5)
    assert cell_advantages(_algorithm(_module("pooled")), "allocator", data) is None  # the tick's one advantage


def test_each_cell_is_pushed_by_its_own_advantage_and_padded_cells_by_none():
    log_ratio = torch.zeros((1, CELLS), requires_grad=True)
    advantage = torch.zeros((1, CELLS))
    advantage[0, :3] = torch.tensor([1.0, -1.0, 0.0])
    advantage[0, 5] = 7.0  # a padded cell's (never set by cell_advantages): masked all the same
    surrogate = clipped_cell_surrogate(log_ratio.exp(), advantage, _mask(4), 0.2)
    (grad,) = torch.autograd.grad(surrogate.sum(), log_ratio)
    assert grad[0, 0] > 0 and grad[0, 1] < 0 and grad[0, 2] == 0 and grad[0, 3] == 0
    assert (grad[0, 4:] == 0).all()
    assert grad[0, 0].item() == pytest.approx(1 / 4)  # the mean over the 4 real cells
