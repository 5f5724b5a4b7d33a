"""What a learned allocator learned on top of ``planner``: its mean correction per tick.

For a checkpoint whose codec corrects the planner (``need``: its need estimates;
``residual``: its grants), plays ``--seeds`` held-out episodes per scenario against the
scenario's population and prints, per tick, the mean correction per (team, tier) — the
ticks where every mean is below 0.05 in size are left out.

    commons-arena corrections runs/allocator_mixed-mixed-s0/best --seeds 30
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.engine import Observer, Tick, play
from policies import Population
from policies.codecs import ResidualPlannerCodec
from policies.learned import LearnedPolicy


class CorrectionRecorder(Observer):
    """Sums the allocator's corrections per tick (an engine observer of a learned allocator
    whose codec corrects the planner)."""

    def __init__(self, codec: ResidualPlannerCodec) -> None:
        self.codec = codec
        shape = (codec.config.max_ticks + 1, codec.n_teams, codec.n_tiers)
        self.total, self.count = np.zeros(shape), np.zeros(shape[0])
        self._tick = codec.obs.slices["tick"]

    def tick(self, tick: Tick) -> None:
        module_action = getattr(tick.policies[ALLOCATOR], "last_module_action", None)
        assert module_action is not None
        index = min(int(tick.observations[ALLOCATOR][self._tick][0]), len(self.count) - 1)
        self.total[index] += self.codec.correction(module_action)
        self.count[index] += 1


def mean_corrections(checkpoint: Path, scenario: str, seeds: range) -> dict[int, np.ndarray]:
    """Tick -> mean correction (teams x tiers) over the episodes that reached it."""
    env = commons_arena.parallel_env(scenario=scenario)
    policy = LearnedPolicy.load(checkpoint, env.config, ALLOCATOR)
    if not isinstance(policy.codec, ResidualPlannerCodec):
        raise ValueError(f"checkpoint {checkpoint} does not correct the planner (its codec is "
                         f"{getattr(policy.codec, 'name', None)!r}; need or residual do)")
    recorder = CorrectionRecorder(policy.codec)
    policies = dict(Population.default(env.config).build(env.config, env=env))
    policies[ALLOCATOR] = policy
    list(play(env, policies, seeds, recorder))
    return {t: recorder.total[t] / n for t, n in enumerate(recorder.count) if n > 0}


def corrections_report(checkpoint: Path, scenarios: tuple[str, ...], seeds: range) -> None:
    """``commons-arena corrections``: per scenario, the ticks whose mean correction reaches 0.05."""
    for scenario in scenarios:
        config = commons_arena.load_scenario(scenario)
        print(f"{scenario}: mean correction per tick, rows {config.team_names}, columns "
              f"{[t.name for t in config.gpu_tiers]} ({len(seeds)} seeds from {seeds.start})")
        for tick, mean in mean_corrections(checkpoint, scenario, seeds).items():
            if np.abs(mean).max() >= 0.05:
                print(f"  tick {tick:2d}: {np.round(mean, 2).tolist()}")
