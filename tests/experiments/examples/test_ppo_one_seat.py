"""The plain-PyTorch PPO example on the one-seat vector env runs, and learns: the allocator's episode return
rises from its random start on `standard` within a small budget."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.examples.ppo_one_seat import Args, train_ppo


def test_the_example_trains_a_few_updates():
    returns = train_ppo(Args(num_envs=32, steps=8, total_steps=32 * 8 * 2, epochs=1))
    assert len(returns) == 2


@pytest.mark.slow
def test_the_example_learns():
    returns = train_ppo(Args(num_envs=128, steps=16, total_steps=128 * 16 * 20))
    first, last = np.nanmean(returns[:3]), np.nanmean(returns[-3:])
    assert last > first + 20, f"episode return {first:.1f} -> {last:.1f}"
