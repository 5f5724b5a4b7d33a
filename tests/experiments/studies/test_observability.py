"""The observability study's pure parts (experiments/studies/observability.py)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.studies.observability import (
    HISTORY_FEATURES,
    ObservabilityArgs,
    _training_scenarios,
    held_out_auc,
    history_features,
)
from policies.universal import FEATURE_NAMES, N_FEATURES


def test_history_features_read_only_the_past_of_each_cell_and_team() -> None:
    ticks, teams, tiers = 4, 2, 2
    cells = np.zeros((ticks, teams * tiers, N_FEATURES))
    estimate = FEATURE_NAMES.index("estimate")
    cells[:, 0, estimate] = [0.0, 0.5, 0.25, 0.75]  # team 0, tier 0: rises 0.5, falls, rises 0.5
    cells[:, 3, estimate] = [1.0, 1.0, 1.0, 1.0]  # team 1, tier 1: flat
    history = history_features(cells, teams, tiers)
    assert history.shape == (ticks, teams * tiers, len(HISTORY_FEATURES))
    change, _, cell_rise, team_rise, last = np.moveaxis(history, 2, 0)
    assert change[:, 0].tolist() == [0.0, 0.5, -0.25, 0.5]
    assert cell_rise[:, 0].tolist() == [0.0, 0.25, 0.5 / 3, 0.25]  # mean rise over the ticks seen so far
    assert (team_rise[:, 1] == cell_rise[:, 0]).all() and (team_rise[:, 2:] == 0).all()  # the team's, on each tier
    assert last[:, 3].tolist() == [1.0, 1.0, 1.0, 1.0] and last[:, 0].tolist() == [0.0, 0.0, 0.5, 0.25]
    # a row's history does not depend on later ticks
    assert np.array_equal(history_features(cells[:2], teams, tiers), history[:2])


def test_the_auc_is_measured_on_held_out_rows() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 3))
    held = np.arange(4000) % 5 == 0
    assert held_out_auc(x, x[:, 0] > 0.5, held, steps=200) > 0.95  # readable from the input
    assert abs(held_out_auc(x, rng.random(4000) < 0.3, held, steps=200) - 0.5) < 0.1  # noise
    with pytest.raises(ValueError, match="only one class"):
        held_out_auc(x, np.zeros(4000, dtype=bool), held, steps=1)


def test_the_study_refuses_the_held_out_split() -> None:
    with pytest.raises(ValueError, match="held-out"):
        _training_scenarios(ObservabilityArgs("teacher", split="broad-heldout"))
