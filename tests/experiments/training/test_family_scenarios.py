"""allocator_family with scenarios beside its split (--family-scenarios) at a share of the episodes."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.training.args import TrainArgs
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.kinds import scenario_weights
from experiments.training.mixture import draw, thresholds


def test_the_extra_scenarios_get_their_share_and_the_split_the_rest() -> None:
    weights = scenario_weights(203, 3, 0.5)
    assert sum(weights) == pytest.approx(1.0)
    assert weights[-3:] == [pytest.approx(1 / 6)] * 3 and weights[0] == pytest.approx(0.5 / 200)
    with pytest.raises(ValueError, match="cannot weight"):
        scenario_weights(3, 3, 0.5)


def test_the_family_run_plays_the_split_then_the_named_scenarios() -> None:
    args = TrainArgs(experiment="allocator_family", network="cells", action_codec="need",
                     family_scenarios=("standard", "crisis"), family_share=0.5)
    args.validate()
    assert args.stages == ("split:broad-train", "standard", "crisis")


@pytest.mark.parametrize("fields, message", [
    ({"experiment": "allocator_family", "network": "cells", "action_codec": "need", "family_share": 0.5},
     "name them with --family-scenarios"),
    ({"experiment": "allocator_mixed", "family_scenarios": ("standard",)}, "for --experiment allocator_family"),
    ({"experiment": "allocator_family", "network": "cells", "action_codec": "need", "family_scenarios": ("crisis",),
      "family_share": 1.0}, "--family-share must be"),
])
def test_bad_family_settings_are_refused(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        TrainArgs(**fields).validate()


@pytest.mark.slow
@pytest.mark.rllib
def test_the_weighted_draw_plays_each_scenario_at_its_weight() -> None:
    from experiments.training.env import ArenaRLlibEnv  # RLlib's MultiAgentEnv

    env = ArenaRLlibEnv(ArenaEnvConfig(scenarios=("standard", "elevated", "crisis"), scenario_weights=(0.0, 0.2, 0.8)))
    drawn = []
    for seed in range(60):
        env.reset(seed=seed)
        drawn.append(env.par_env.config.name)
    assert "standard" not in drawn
    assert 30 <= drawn.count("crisis") <= 59  # 0.8 of 60 is 48


def test_the_env_config_refuses_weights_that_do_not_fit_its_scenarios() -> None:
    with pytest.raises(ValueError, match="2 weights for 3 scenarios"):
        ArenaEnvConfig(scenarios=("standard", "elevated", "crisis"), scenario_weights=(0.5, 0.5))
    with pytest.raises(ValueError, match="non-negative with a positive sum"):
        ArenaEnvConfig(scenarios=("standard", "crisis"), scenario_weights=(0.0, 0.0))


def test_the_named_scenarios_are_drawn_at_the_family_share_and_each_split_scenario_alike() -> None:
    """The weights follow the stages' order (the split, then --family-scenarios), at a share that is not
    its own complement (0.2), through the draw training episodes use (experiments.training.mixture)."""
    args = TrainArgs(experiment="allocator_family", network="cells", action_codec="need",
                     family_scenarios=("standard", "crisis"), family_share=0.2)
    n_split = 4  # a split of 4 scenarios, then standard and crisis
    weights = args.kind.draw_weights(args, n_split + 2)
    assert weights == pytest.approx([0.8 / 4] * 4 + [0.1, 0.1])
    rng = np.random.default_rng(0)
    drawn = np.bincount([draw(rng, thresholds(weights)) for _ in range(20_000)], minlength=6) / 20_000
    assert drawn[n_split:].sum() == pytest.approx(0.2, abs=0.015)  # ~5 standard errors
    assert np.allclose(drawn, weights, atol=0.015)
    unweighted = TrainArgs(experiment="allocator_family", network="cells", family_scenarios=("standard",))
    assert unweighted.kind.draw_weights(unweighted, 5) is None  # no --family-share: every scenario alike
