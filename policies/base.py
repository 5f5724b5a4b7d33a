"""The Policy protocol every scripted, learned or human agent implements.

A policy maps one agent's observation to one action from that agent's action space. It
has no hidden side effects: all randomness comes from the generator seeded in
``reset(seed)``, so the same seed and observations give the same actions.

:class:`ScriptedPolicy` is the small shared base of the scripted policies in this
package: it holds the scenario config, the agent id, the agent's observation/action
layouts (built once, cached per scenario) and the seeded generator, reads observation
fields by name and clips every action into the agent's ``MultiDiscrete`` space.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout, role_of


@runtime_checkable
class Policy(Protocol):
    """``reset(seed)`` once per episode, then ``act(observation)`` once per tick."""

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, observation: np.ndarray) -> np.ndarray: ...


class ScriptedPolicy:
    """Base of the scripted policies: config, agent, layouts, seeded generator.

    Subclasses set ``role`` (``"allocator"``, ``"team"`` or ``"broker"``) and ``name``,
    implement :meth:`decide` (observation fields → action vector) and, when they keep
    state across ticks, :meth:`clear` (called by ``reset``). Fields are read through
    ``self.obs_layout`` — the same named slices ``observation_layout(config, agent).view``
    gives — precomputed once so that a tick allocates no layout. Static, public scenario
    facts (tier memory, speed, prices, owned counts, horizon) may be read from
    ``self.config``; the teams' job lists in the config are hidden truth and are never read.
    """

    role: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __init__(self, config: ScenarioConfig, agent: str, seed: int | None = None) -> None:
        role = role_of(config, agent)
        if role != self.role:
            raise ValueError(
                f"policy {self.name!r} plays the {self.role} role, but agent {agent!r} of scenario "
                f"{config.name!r} is a {role}"
            )
        self.config = config
        self.agent = agent
        self.obs_layout = observation_layout(config, agent)
        self.act_layout = action_layout(config, agent)
        # every action entry lies in [0, high]; nvec = high + 1
        self.high = self.act_layout.high.astype(np.int64)
        self._fields = {f.name: (self.obs_layout.slices[f.name], f.shape) for f in self.obs_layout.fields}
        self.n_tiers = len(config.gpu_tiers)
        self.n_teams = len(config.teams)
        self.rng = np.random.default_rng(seed)
        self.clear()

    # ---------------------------------------------------------------- protocol
    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.clear()

    def act(self, observation: np.ndarray) -> np.ndarray:
        action = np.array(self.decide(np.asarray(observation)), dtype=np.int64)
        np.minimum(action, self.high, out=action)
        np.maximum(action, 0, out=action)
        return action

    # ---------------------------------------------------------------- for subclasses
    def clear(self) -> None:
        """Forget per-episode state (called by ``__init__`` and ``reset``)."""

    def decide(self, obs: np.ndarray) -> np.ndarray | list[int]:
        """The action for one observation (clipped into the space by ``act``)."""
        raise NotImplementedError

    def field(self, obs: np.ndarray, name: str) -> np.ndarray:
        """One named observation field in its shape (a view of ``obs``)."""
        sl, shape = self._fields[name]
        return obs[sl].reshape(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, agent={self.agent!r}, scenario={self.config.name!r})"

    @property
    def params(self) -> dict[str, Any]:
        """The policy's tunable parameters (for reports and rosters)."""
        return {}


class UniformRandomPolicy:
    """Uniform random actions over a ``MultiDiscrete`` space, from the generator ``reset``
    seeds (``commons-arena play`` gives every seat one when no population is named)."""

    def __init__(self, nvec: np.ndarray) -> None:
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        return self.rng.integers(0, self.nvec)


def uniform_random_policies(env: Any, agents: Iterable[str]) -> dict[str, Policy]:
    """A :class:`UniformRandomPolicy` for each of ``agents`` over its action space in ``env``: the one
    place a seat is made to act uniformly at random (``play`` without a population, a tournament's
    ``random`` anchor in a team or broker seat, analysis's scale of random teams)."""
    return {agent: UniformRandomPolicy(env.action_space(agent).nvec) for agent in agents}
