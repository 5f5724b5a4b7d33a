"""The ``planner`` decides bit for bit as it did before it was vectorised (issue 19).

A digest of everything it computed on many states (every tick of episodes of each tier,
its own play and a need-corrected plan per tick, as the ``need`` codec asks for) was
recorded with the loop-per-team planner (``tests/data/planner_digests.json``). Re-record
only for a deliberate change of its decisions: ``python -m tests.policies.test_planner_identical``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies import Population
from policies.focal import FocalEnv
from policies.registry import make_policy
from tests.sweeps import swept

DIGESTS = Path(__file__).parents[1] / "data" / "planner_digests.json"
TIERS = ("standard", "elevated", "crisis")
EPISODES = 40


def planner_digest(scenario: str, episodes: int = EPISODES) -> str:
    """SHA-256 of the planner's estimates, log-weights, actions and need-corrected plans."""
    config = commons_arena.load_scenario(scenario)
    planner = make_policy("planner", config, ALLOCATOR)
    batched = planner.batched  # the planner's state and plan, a batch of one
    env = FocalEnv.from_scenario(config, [ALLOCATOR], Population.default(config))
    rng = np.random.default_rng(7)
    h = hashlib.sha256()
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        planner.reset(seed)
        while not env.episode_over:
            action = planner.act(obs[ALLOCATOR])
            estimate = batched.last_estimate[0]
            corrected = np.clip(estimate + rng.integers(-2, 3, estimate.shape), 0, None)
            replanned = batched.plan(obs[ALLOCATOR][None], corrected[None])[0]
            for part in (action, estimate, batched.log_w[0], replanned):
                h.update(np.ascontiguousarray(part).tobytes())
            obs, *_ = env.step({ALLOCATOR: action})
    return h.hexdigest()


@pytest.mark.parametrize("scenario", swept(TIERS))
def test_the_planner_decides_as_recorded(scenario):
    assert planner_digest(scenario) == json.loads(DIGESTS.read_text())[scenario]


if __name__ == "__main__":
    DIGESTS.write_text(json.dumps({s: planner_digest(s) for s in TIERS}, indent=1) + "\n")
    print(DIGESTS.read_text())
