"""commons_arena: a PettingZoo arena for strategic GPU allocation under bluffing, shocks and a carbon cap.

The environment class lives in :mod:`commons_arena.arena`; ``commons_arena.env`` is the
AEC factory function (PettingZoo's convention), not a module.
"""

from __future__ import annotations

from pettingzoo.utils import parallel_to_aec
from pettingzoo.utils.conversions import parallel_to_aec_wrapper

from commons_arena.arena import ArenaEnv
from commons_arena.batched import VectorArenaEnv
from commons_arena.errors import EpisodeStateError
from commons_arena.scenario import ScenarioConfig, ScenarioError, list_scenarios, load_scenario
from commons_arena.spaces import action_layout, observation_layout
from commons_arena.version import ENV_NAME, __version__


def parallel_env(scenario: str | ScenarioConfig = "standard", render_mode: str | None = None) -> ArenaEnv:
    """The game as a PettingZoo ``ParallelEnv`` (all agents act every tick)."""
    return ArenaEnv(scenario=scenario, render_mode=render_mode)


def raw_env(scenario: str | ScenarioConfig = "standard", render_mode: str | None = None):
    """The AEC form without wrappers (PettingZoo's parallel → AEC conversion)."""
    return parallel_to_aec_wrapper(parallel_env(scenario=scenario, render_mode=render_mode))


def env(scenario: str | ScenarioConfig = "standard", render_mode: str | None = None):
    """The AEC form with PettingZoo's order-enforcing wrapper (``parallel_to_aec``)."""
    return parallel_to_aec(parallel_env(scenario=scenario, render_mode=render_mode))


def vector_env(scenario: str | ScenarioConfig = "standard", num_envs: int = 1) -> VectorArenaEnv:
    """``num_envs`` arenas of the game stepped at once (the batched core): PettingZoo's dicts with
    every value stacked over the arenas, ended arenas reset in place (docs/environment.md)."""
    return VectorArenaEnv(scenario=scenario, num_envs=num_envs)


make = parallel_env

__all__ = [
    "ArenaEnv",
    "ENV_NAME",
    "EpisodeStateError",
    "ScenarioConfig",
    "ScenarioError",
    "VectorArenaEnv",
    "__version__",
    "action_layout",
    "env",
    "list_scenarios",
    "load_scenario",
    "make",
    "observation_layout",
    "parallel_env",
    "raw_env",
    "vector_env",
]
