"""The lean sampler and update (experiments/training/lean.py): its GAE is RLlib's per-episode GAE, its
distribution RLlib's multi-categorical, its logged returns the core's episode totals, and a run trained
on it is reproducible (the same weights from the same experiment and seed, in a fresh process too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.training.lean_module import PaddedMultiCategorical
from experiments.training.lean_update import gae
from experiments.training.train import TrainArgs, train

pytestmark = [pytest.mark.slow, pytest.mark.rllib]


def random_rollout(rng: np.random.Generator, steps: int = 40, n: int = 7):
    """Rewards, values and flags of ``n`` arenas over ``steps`` rows, the NEXT_STEP restart rows
    (the row after a done one) marked invalid, as the lean runner records them."""
    rewards = rng.normal(size=(steps, n)).astype(np.float32)
    values = rng.normal(size=(steps + 1, n)).astype(np.float32)
    ended = rng.random((steps, n)) < 0.15
    terminated = ended & (rng.random((steps, n)) < 0.6)
    truncated = ended & ~terminated
    valid = np.ones((steps, n), dtype=bool)
    valid[1:] = ~ended[:-1]
    valid[0] = rng.random(n) < 0.8  # some arenas start the sample on their restart row
    return rewards, values, terminated, truncated, valid


@pytest.mark.parametrize("seed", range(4))
def test_gae_over_arrays_is_rllibs_gae_per_episode_chunk(seed):
    from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

    rewards, values, terminated, truncated, valid = random_rollout(np.random.default_rng(seed))
    gamma, lam = 0.97, 0.9
    ours = gae(rewards, values, terminated, truncated, gamma, lam)
    steps, n = rewards.shape
    checked = 0
    for i in range(n):
        t = 0
        while t < steps:
            if not valid[t, i]:
                t += 1
                continue
            end = t  # the chunk t..end: up to the row that ends the episode or the sample's last row
            while end < steps - 1 and not (terminated[end, i] or truncated[end, i]):
                end += 1
            length = end - t + 1
            # RLlib's convention: the chunk elongated by one step (its bootstrap), its last real row
            # truncated unless terminated
            trunc = truncated[t:end + 1, i].astype(np.float32)
            trunc[-1] = 0.0 if terminated[end, i] else 1.0
            targets = compute_value_targets(
                values=values[t:end + 2, i], rewards=np.append(rewards[t:end + 1, i], 0.0),
                terminateds=np.append(terminated[t:end + 1, i].astype(np.float32), 0.0),
                truncateds=np.append(trunc, 1.0), gamma=gamma, lambda_=lam)
            theirs = targets[:length] - values[t:end + 1, i]
            np.testing.assert_allclose(ours[t:end + 1, i], theirs, atol=1e-5)
            checked += length
            t = end + 1
    assert checked == valid.sum()


@pytest.mark.parametrize("nvec", [[5] * 9, [3, 5, 2, 7]])
def test_the_one_distribution_is_rllibs_multi_categorical(nvec):
    from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical

    dist = PaddedMultiCategorical(nvec)
    logits = torch.randn(64, sum(nvec), generator=torch.Generator().manual_seed(1)) * 2
    actions, logp = dist.sample(logits, torch.Generator().manual_seed(2))
    assert actions.shape == (64, len(nvec))
    assert all(int(actions[:, j].max()) < n for j, n in enumerate(nvec))
    theirs = TorchMultiCategorical.from_logits(logits, input_lens=list(nvec))
    np.testing.assert_allclose(logp.numpy(), theirs.logp(actions).numpy(), rtol=1e-6, atol=1e-6)
    # samples follow the softmax: frequencies of the first sub-action over many draws
    many = logits[:1].repeat(20000, 1)
    drawn, _ = dist.sample(many, torch.Generator().manual_seed(3))
    freq = np.bincount(drawn[:, 0].numpy(), minlength=nvec[0]) / len(drawn)
    np.testing.assert_allclose(freq, torch.softmax(logits[0, :nvec[0]], -1).numpy(), atol=0.015)


@pytest.mark.parametrize("nvec", [[5] * 9, [3, 5, 2, 7]])
def test_the_learners_distribution_gives_rllibs_logp_entropy_and_kl(nvec):
    from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical

    from experiments.training.lean_module import LeanMultiCategorical

    gen = torch.Generator().manual_seed(4)
    logits, other = (torch.randn(256, sum(nvec), generator=gen) * 2 for _ in range(2))
    actions = torch.stack([torch.randint(0, n, (256,), generator=gen) for n in nvec], -1)
    leaves = [[x.clone().requires_grad_() for x in (logits, other)] for _ in range(2)]
    ours = [LeanMultiCategorical.from_logits(x, input_lens=nvec) for x in leaves[0]]
    theirs = [TorchMultiCategorical.from_logits(x, input_lens=nvec) for x in leaves[1]]
    for mine, rllib in ((ours[0].logp(actions), theirs[0].logp(actions)), (ours[0].entropy(), theirs[0].entropy()),
                        (ours[0].kl(ours[1]), theirs[0].kl(theirs[1]))):
        np.testing.assert_allclose(mine.detach().numpy(), rllib.detach().numpy(), rtol=1e-5, atol=1e-5)
        # the gradients PPO's loss takes through each term: finite (the padding of a smaller sub-space is -inf)
        # and RLlib's
        grads = [torch.autograd.grad(term.sum(), leaf, retain_graph=True, allow_unused=True, materialize_grads=True)
                 for term, leaf in ((mine, leaves[0]), (rllib, leaves[1]))]
        for g_ours, g_theirs in zip(*grads, strict=True):
            assert torch.isfinite(g_ours).all()
            np.testing.assert_allclose(g_ours.numpy(), g_theirs.numpy(), rtol=1e-4, atol=1e-5)
    greedy = ours[0].to_deterministic().sample()
    assert torch.equal(greedy, theirs[0].to_deterministic().sample().long())


TINY = dict(eval_every=2, eval_seeds=2, train_batch_size=256, minibatch_size=128, num_epochs=1,
            num_envs_per_env_runner=16, hidden=(8, 8), quiet=True, iterations=2, sampler="lean")


@pytest.mark.ray
@pytest.mark.timeout(900)
@pytest.mark.parametrize("lstm", [False, True])
def test_a_lean_run_is_reproducible_in_a_fresh_process(ray_session, tmp_path, lstm):
    weights = [(train(TrainArgs(out=tmp_path, run_name=name, experiment="allocator_mixed", use_lstm=lstm, **TINY))
                / "arena_policy.safetensors").read_bytes() for name in ("a", "b")]
    assert weights[0] == weights[1]
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k not in ("quiet", "hidden")]
    flags += ["--use-lstm"] if lstm else []
    cmd = [sys.executable, "-m", "commands", "train", "--experiment", "allocator_mixed", "--out", str(tmp_path),
           "--run-name", "fresh", "--hidden", "8", "8", "--quiet", *flags]
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root), "RAY_ADDRESS": ""}
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fresh" / "checkpoint" / "arena_policy.safetensors").read_bytes() == weights[0]


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_lean_metrics_are_the_cores_episode_totals_and_rows(ray_session):
    from experiments.training.algorithm import build_algorithm
    from experiments.training.setup import resolve, with_unit_scales

    args = TrainArgs(experiment="allocator_mixed", **{**TINY, "num_envs_per_env_runner": 24})
    algo = build_algorithm(with_unit_scales(resolve(args)))
    try:
        runner = algo.env_runner
        before = runner.env.focal.episode_seeds
        result = algo.train()
        runners = result["env_runners"]
        assert runners["num_episodes"] > 0
        # the summed rewards of every finished episode are the core's own episode totals (unit reward scale)
        assert runners["episode_return_mean"] == pytest.approx(runners["allocator_episode"]["return"], abs=1e-9)
        assert runners["agent_episode_returns_mean"]["allocator"] == pytest.approx(runners["episode_return_mean"])
        # env steps are transitions: every arena's rows but its NEXT_STEP resets
        steps = runner.steps_per_sample()
        assert steps * 24 - runners["num_episodes"] <= runners["num_env_steps_sampled"] <= steps * 24
        assert result["num_env_steps_sampled_lifetime"] == runners["num_env_steps_sampled"]
        assert runner.env.focal.episode_seeds != before  # arenas restarted with the core's next seeds
    finally:
        algo.stop()


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_family_run_plays_one_whole_episode_per_arena_of_a_fresh_draw_of_scenarios(ray_session):
    from experiments.training.algorithm import build_algorithm
    from experiments.training.lean import DRAWN_SCENARIOS
    from experiments.training.setup import resolve

    args = TrainArgs(experiment="allocator_family", network="cells", **{**TINY, "num_envs_per_env_runner": 32})
    algo = build_algorithm(resolve(args))
    try:
        runner = algo.env_runner
        drawn = []
        for i in range(2):
            runners = algo.train()["env_runners"]
            drawn.append({g.config.name for g in runner.env.groups})
            assert len(drawn[-1]) == DRAWN_SCENARIOS  # 16 of the split's 200, 2 arenas each
            assert runners["num_episodes"] == 32  # one whole episode per arena, no more
            if i == 0:  # every transition of the sample is in one of its episodes (the window holds only them)
                assert runners["num_env_steps_sampled"] == pytest.approx(32 * runners["episode_len_mean"])
        assert drawn[0] != drawn[1]
    finally:
        algo.stop()


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_an_overlapped_run_samples_on_a_remote_runner_during_the_update_reproducibly(ray_session, tmp_path):
    from experiments.training.algorithm import build_algorithm
    from experiments.training.lean_update import OverlappedLeanPPO
    from experiments.training.setup import resolve

    overlapped = {**TINY, "num_env_runners": 1, "overlap": True}
    weights = [(train(TrainArgs(out=tmp_path, run_name=name, experiment="allocator_mixed", **overlapped))
                / "arena_policy.safetensors").read_bytes() for name in ("a", "b")]
    assert weights[0] == weights[1]  # one runner, one sample in flight: the same order every run
    algo = build_algorithm(resolve(TrainArgs(experiment="allocator_mixed", **overlapped)))
    try:
        assert isinstance(algo, OverlappedLeanPPO)
        steps = [algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] for _ in range(3)]
        assert steps[0] > 0 and steps[0] < steps[1] < steps[2]  # each iteration trains on a fresh sample
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="--overlap"):
        TrainArgs(experiment="allocator_mixed", overlap=True, sampler="batched").validate()


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_module_goes_through_its_rows_num_epochs_times_in_the_same_steps(shuffle):
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from experiments.training.lean_update import EqualEpochsIterator

    rows = {"allocator": 70, "teams": 300, "broker": 71}  # teams: three seats' rows in one shared module
    batch = MultiAgentBatch({m: SampleBatch({"row": np.arange(n)}) for m, n in rows.items()}, env_steps=70)
    steps = list(EqualEpochsIterator(batch, num_epochs=3, minibatch_size=64, shuffle=shuffle))
    assert len(steps) == 3 * 5  # ceil(300 / 64) minibatches an epoch
    for step in steps:
        assert set(step.policy_batches) == set(rows)  # every module in every step: RLlib reads every gradient
        assert len(step.policy_batches["teams"]) <= 64
    for module, n in rows.items():
        seen = np.concatenate([step.policy_batches[module]["row"] for step in steps])
        assert np.array_equal(np.bincount(seen, minlength=n), np.full(n, 3))  # each row exactly num_epochs times
        first_epoch = np.concatenate([step.policy_batches[module]["row"] for step in steps[:5]])
        assert np.array_equal(np.sort(first_epoch), np.arange(n))
    with pytest.raises(ValueError, match="at least 5 rows"):
        EqualEpochsIterator(MultiAgentBatch({"a": SampleBatch({"row": np.arange(300)}),
                                             "b": SampleBatch({"row": np.arange(3)})}, 3), 1, 64, False)


@pytest.mark.parametrize("seed", range(3))
def test_sequences_cover_every_row_once_and_never_cross_an_episode_start(seed):
    from experiments.training.lean_update import Sequences

    rng = np.random.default_rng(seed)
    starts = rng.random((41, 6)) < 0.1
    cut = Sequences.cut(starts, 8)
    seen = np.zeros(starts.shape, dtype=int)
    np.add.at(seen, (cut.row[cut.mask], cut.arena[cut.mask]), 1)
    assert (seen == 1).all()
    assert (cut.lengths == cut.mask.sum(axis=1)).all() and cut.lengths.max() <= 8
    for b in range(len(cut.lengths)):
        rows, arena = cut.row[b, : cut.lengths[b]], cut.arena[b, : cut.lengths[b]]
        assert (np.diff(rows) == 1).all() and (arena == arena[0]).all()  # consecutive rows of one arena
        assert not starts[rows[1:], arena[0]].any()  # an episode's first row only ever opens a sequence
    values = rng.normal(size=starts.shape)
    np.testing.assert_array_equal(cut.scatter(cut.gather(values), starts.shape), values)


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_recurrent_learner_reads_the_state_the_runner_carried(ray_session):
    """--use-lstm on the lean path: the learner's sequences, each from the state the runner carried into it,
    give back the logits the runner acted on (a sample that starts mid-episode too), and the values of whole
    episodes run from their start."""
    from ray.rllib.core.columns import Columns

    from experiments.training.algorithm import build_algorithm
    from experiments.training.lean_update import Sequences, lean_batch, recurrent_values
    from experiments.training.setup import resolve, with_unit_scales

    args = TrainArgs(experiment="allocator_mixed", use_lstm=True,
                     **{**TINY, "num_envs_per_env_runner": 6, "train_batch_size": 6 * 30})
    algo = build_algorithm(with_unit_scales(resolve(args)))
    try:
        module = algo.learner_group._learner.module["allocator"]
        rollouts = [algo.env_runner.sample()[0] for _ in range(2)]
        assert all((~r.valid).any() for r in rollouts)  # episodes end inside each: sequences restart from zero
        assert any(np.abs(leaf[0]).max() > 0 for leaf in torch.utils._pytree.tree_leaves(rollouts[1].state))
        for rollout in rollouts:
            batch = lean_batch(algo, [rollout]).policy_batches["allocator"]
            with torch.no_grad():
                logits = module.forward_train(dict(batch))[Columns.ACTION_DIST_INPUTS]
            mask = batch[Columns.LOSS_MASK]
            assert int(mask.sum()) == int(rollout.valid.sum()) and batch[Columns.OBS].shape[1] == 16
            np.testing.assert_allclose(logits[mask].numpy(), batch[Columns.ACTION_DIST_INPUTS][mask].numpy(),
                                       atol=1e-5)
        # the first sample starts every episode at row 0: its values are the critic run over whole episodes
        rollout = rollouts[0]
        starts = np.zeros(rollout.obs.shape[:2], dtype=bool)
        starts[1:] = ~rollout.valid
        values = np.zeros(starts.shape, np.float32)
        zero = torch.utils._pytree.tree_map(lambda s: s[None], module.get_initial_state())
        for i in range(starts.shape[1]):
            bounds = [0, *[b for b in np.flatnonzero(starts[:, i]) if b > 0], starts.shape[0]]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                with torch.no_grad():
                    values[a:b, i] = module.compute_values({Columns.OBS: torch.from_numpy(rollout.obs[a:b, i][None]),
                                                            Columns.STATE_IN: zero})[0].numpy()
        cut = Sequences.cut(starts, 5)  # shorter sequences than episodes: the carried state joins them
        np.testing.assert_allclose(recurrent_values(algo, "allocator", rollout, cut), values, atol=1e-5)
        assert np.isfinite(algo.train()["learners"]["allocator"]["total_loss"])  # and an update runs on them
    finally:
        algo.stop()


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_curriculum_on_the_lean_path_restarts_every_arena_on_the_next_stage(ray_session):
    """allocator_curriculum on --sampler lean: a promotion switches the runner's batch to the next stage, every
    arena restarting there (no episode of the old stage logged after it); the batched sampler still refuses it."""
    from dataclasses import replace

    from experiments.training.algorithm import build_algorithm
    from experiments.training.setup import resolve, with_unit_scales

    args = TrainArgs(experiment="allocator_curriculum", action_codec="need", promote_at=0.0, promote_after=1,
                     **{**TINY, "num_envs_per_env_runner": 16})
    setup = with_unit_scales(resolve(args))  # anchors every training score lands above 0: promoted when allowed
    references = {c.name: {"random": [-1e4], "oracle": [1e4]} for c in setup.stages}
    algo = build_algorithm(replace(setup, references=references))
    try:
        runner = algo.env_runner
        names = []
        for _ in range(3):
            result = algo.train()
            names.append((result["curriculum_stage"], {g.config.name for g in runner.env.groups}))
        assert [stage for stage, _ in names] == [1, 2, 2] and names[-1][1] == {"crisis"}
        result = algo.train()  # a sample wholly on the last stage: its episodes are crisis's
        assert set(runner.env.scenario_names) == {"crisis"} and result["env_runners"]["num_episodes"] > 0
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="curriculum"):
        resolve(TrainArgs(experiment="allocator_curriculum", action_codec="need", sampler="batched"))


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_league_on_the_lean_path_plays_each_arenas_members_and_learns_from_the_learners_rows(ray_session):
    """--experiment league on --sampler lean: in each arena's episode every team seat is played by the member the
    run's mapping draws from the episode seed (the learner's rows are the ones trained), each member's return per
    seat is logged for the snapshot rule, and a snapshot joins the mix and plays from the next episodes."""
    from experiments.training import league
    from experiments.training.algorithm import build_algorithm
    from experiments.training.lean_update import lean_batch
    from experiments.training.setup import resolve, with_unit_scales

    teams, pool = ["search", "robotics", "safety"], ["team", "scripted_truthful", "scripted_greedy_bluffer"]
    args = TrainArgs(experiment="league", snapshot_margin=-1e9, snapshot_gap=1,
                     **{**TINY, "num_envs_per_env_runner": 24, "train_batch_size": 24 * 30})
    algo = build_algorithm(with_unit_scales(resolve(args)))
    try:
        runner = algo.env_runner
        rollouts = {r.seat: r for r in runner.sample()}
        seeds = runner._member_seeds  # the episodes the last row played
        for seat, rollout in rollouts.items():
            expected = np.array([league.member_of(pool, teams, seat, int(s)) == "team" for s in seeds])
            np.testing.assert_array_equal(rollout.mask[-1], expected)
            assert 0 < rollout.mask.mean() < 1  # the learner plays the seat in some arenas, members in others
        assert (sum(r.mask.astype(int) for r in rollouts.values()) >= 1).all()  # one seat a learner in every episode
        batch = lean_batch(algo, list(rollouts.values())).policy_batches
        assert set(batch) == {"team"} and len(batch["team"]) == sum(int(r.trained().sum()) for r in rollouts.values())
        first = algo.train()
        assert set(first["env_runners"][league.SEAT_RETURN_KEY]) == set(pool)
        assert first["league"]["snapshot"] == "team_v1"  # margin -1e9: the learner beats the mix at once
        mix = first["league"]["mix"]
        assert mix[-1] == "team_v1" and "team_v1" in runner.module
        later = [algo.train()["env_runners"][league.SEAT_RETURN_KEY] for _ in range(2)]
        assert any("team_v1" in returns for returns in later)  # the snapshot plays new episodes
    finally:
        algo.stop()
