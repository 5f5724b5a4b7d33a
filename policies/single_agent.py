"""A single-agent Gymnasium view of the arena: you play one role, a population plays the rest.

::

    import policies  # registers the id
    env = gymnasium.make("commons_arena/SingleAgent-v0", scenario="standard", agent="allocator")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

================  ===============================================================
observation       the agent's flat ``Box(float32)`` observation (its layout names it)
action            the agent's ``MultiDiscrete`` action
reward            the agent's own reward (its rubric; ``info["reward_terms"]``)
episode end       the arena's (termination when every job is resolved, truncation
                  at ``max_ticks``); the final ``info`` carries ``episode``
others            a :class:`~policies.population.Population` (default: the
                  scenario's background); ``oracle`` may play another agent
================  ===============================================================

It is the one-seat case of :class:`~policies.focal.FocalEnv` (the others are its
background), so seeding is the substrate's one rule: ``reset(seed=s)`` seeds the arena with
``s`` and every other agent's policy from ``s`` and its seat (as
:func:`~policies.focal.run_episode` does); a reset without a seed draws the next
episode seed from the env's ``np_random``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from commons_arena.arena import ArenaEnv
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from policies.focal import FocalEnv
from policies.population import Population

ENV_ID = "commons_arena/SingleAgent-v0"


class SingleAgentEnv(gym.Env):
    """One agent of the arena as a ``gymnasium.Env`` (see the module docstring)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        scenario: str | ScenarioConfig = "standard",
        agent: str = ALLOCATOR,
        population: Population | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} not supported; choose from {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.arena = ArenaEnv(scenario=scenario)
        self.config = self.arena.config
        if agent not in self.arena.possible_agents:
            raise ValueError(
                f"unknown agent {agent!r}; agents of {self.config.name!r} are {self.arena.possible_agents}"
            )
        self.agent = agent
        self.population = population if population is not None else Population.default(self.config)
        self.roles = {a: e.policy for a, e in self.population.resolve(self.config, strict=False).items() if a != agent}
        self.focal = FocalEnv(self.arena, [agent], self.population)
        self.observation_space = self.arena.observation_space(agent)
        self.action_space = self.arena.action_space(agent)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        observations, infos = self.focal.reset(seed=episode_seed, options=options)
        return observations[self.agent], infos[self.agent]

    def step(self, action):
        if self.focal.episode_over:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        obs, rewards, terminations, truncations, infos = self.focal.step({self.agent: action})
        return (
            obs[self.agent],
            rewards[self.agent],
            terminations[self.agent],
            truncations[self.agent],
            infos[self.agent],
        )

    # gymnasium types render() with a TypeVar bound nowhere (RenderFrame), which no concrete type overrides
    def render(self) -> str | None:  # type: ignore[override]
        if self.render_mode is None:
            return None
        self.arena.render_mode = "ansi"
        try:
            text = self.arena.render()  # ansi mode: always the text
            return text if isinstance(text, str) else None
        finally:
            self.arena.render_mode = None

    def close(self) -> None:
        self.arena.close()


def register_gymnasium_env() -> None:
    """Register ``commons_arena/SingleAgent-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="policies.single_agent:SingleAgentEnv")


register_gymnasium_env()

__all__ = ["ENV_ID", "SingleAgentEnv", "register_gymnasium_env"]
