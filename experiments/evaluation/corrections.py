"""What a learned allocator learned on top of ``planner``: its mean correction per tick.

For a checkpoint whose codec corrects the planner (``need``: its need estimates;
``residual``: its grants), plays ``--seeds`` held-out episodes per scenario against the
scenario's population and prints, per tick, the mean correction per (team, tier) — the
ticks where every mean is below 0.05 in size are left out.

    python -m experiments.evaluation.corrections runs/allocator_mixed-mixed-s0/best --seeds 30
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.seeds import SEED_RANGES
from policies import Population
from policies.codecs import ResidualPlannerCodec
from policies.focal import run_episode
from policies.learned import LearnedPolicy


@dataclass
class Args:
    checkpoint: tyro.conf.Positional[Path]
    """checkpoint folder (with arena_policy.json) of a need or residual allocator"""
    scenarios: tuple[str, ...] = ("standard", "elevated", "crisis")
    """scenarios to play"""
    seeds: int = 30
    """episodes per scenario"""
    first_seed: int = SEED_RANGES["compare"].first
    """seeds are first_seed .. first_seed + seeds - 1"""


class CorrectionRecorder:
    """Plays the learned policy and sums its corrections per tick (a Policy)."""

    def __init__(self, policy: LearnedPolicy, codec: ResidualPlannerCodec) -> None:
        self.policy, self.codec = policy, codec
        shape = (codec.config.max_ticks + 1, codec.n_teams, codec.n_tiers)
        self.total, self.count = np.zeros(shape), np.zeros(shape[0])
        self._tick = codec.obs.slices["tick"]

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        action = self.policy.act(observation)
        assert self.policy.last_module_action is not None
        tick = min(int(observation[self._tick][0]), len(self.count) - 1)
        self.total[tick] += self.codec.correction(self.policy.last_module_action)
        self.count[tick] += 1
        return action


def mean_corrections(checkpoint: Path, scenario: str, seeds: range) -> dict[int, np.ndarray]:
    """Tick -> mean correction (teams x tiers) over the episodes that reached it."""
    env = commons_arena.parallel_env(scenario=scenario)
    policy = LearnedPolicy.load(checkpoint, env.config, ALLOCATOR)
    if not isinstance(policy.codec, ResidualPlannerCodec):
        raise ValueError(f"checkpoint {checkpoint} does not correct the planner (its codec is "
                         f"{getattr(policy.codec, 'name', None)!r}; need or residual do)")
    recorder = CorrectionRecorder(policy, policy.codec)
    policies = dict(Population.default(env.config).build(env.config, env=env))
    policies[ALLOCATOR] = recorder
    for seed in seeds:
        run_episode(env, policies, seed)
    return {t: recorder.total[t] / n for t, n in enumerate(recorder.count) if n > 0}


def main(args: Args) -> None:
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for scenario in args.scenarios:
        config = commons_arena.load_scenario(scenario)
        print(f"{scenario}: mean correction per tick, rows {config.team_names}, columns "
              f"{[t.name for t in config.gpu_tiers]} ({args.seeds} seeds from {args.first_seed})")
        for tick, mean in mean_corrections(args.checkpoint, scenario, seeds).items():
            if np.abs(mean).max() >= 0.05:
                print(f"  tick {tick:2d}: {np.round(mean, 2).tolist()}")


if __name__ == "__main__":
    main(tyro.cli(Args))
