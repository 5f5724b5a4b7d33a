"""Policies over a batch of arenas: one seat's policy in N arenas, acting on stacked observations.

A :class:`BatchPolicy` is N copies of one per-arena :class:`~policies.base.Policy` (same
scenario, same seat) held as arrays: ``act`` takes the seat's observations of every arena,
``(N, obs_dim)``, and returns every arena's action, ``(N, act_dim)`` int64, and row *i* is
exactly the action the per-arena policy returns for row *i* after the same ``reset`` seed and
the same observations. ``reset(seeds, index)`` starts new episodes in the arenas ``index``
(all of them when ``index`` is None): a vector env that resets one finished arena in place
resets that arena's policy state only.

:class:`LoopBatchPolicy` is the reference and the fallback: N per-arena policies stepped in
a Python loop. A batched policy is held to it bit for bit by the equivalence tests; a policy
with no batched form plays through it, so every policy can act in a batch.

:class:`BatchScripted` is the base of the batched scripted policies (``policies/teams.py``,
``policies/brokers.py``, ``policies/allocators.py``): one seat's layouts and bounds, any
number of arenas. Where the batched form is the policy's one definition (the teams and brokers),
the per-arena policy is :class:`OneArena`, the one batch-of-one adaptor.
``policies.registry.batch_policy`` gives a seat's batched form, or the loop.

A learned module's interface (what sits between a seat and its module: ``policies.learned.BatchInterface``,
``policies.universal.BatchUniversalInterface``) is likewise defined once over N arenas
(:class:`BatchedInterface`); one arena's is :class:`OneArenaInterface`, a batch of one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout, role_of
from policies.base import Policy


@runtime_checkable
class BatchPolicy(Protocol):
    """One seat's policy in ``num_envs`` arenas of one scenario."""

    num_envs: int

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        """New episodes in arenas ``index`` (every arena when None), seeded ``seeds`` (one per arena reset)."""
        ...

    def act(self, observations: np.ndarray) -> np.ndarray:
        """``(num_envs, obs_dim)`` observations -> ``(num_envs, act_dim)`` int64 actions."""
        ...


def reset_indices(num_envs: int, seeds: Sequence[int | None], index: np.ndarray | None) -> np.ndarray:
    """The arenas a ``reset(seeds, index)`` call names, checked against ``seeds``."""
    arenas = np.arange(num_envs) if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
    if len(seeds) != len(arenas):
        raise ValueError(f"reset got {len(seeds)} seed(s) for {len(arenas)} arena(s); give one seed per arena reset")
    if arenas.size and (arenas.min() < 0 or arenas.max() >= num_envs):
        raise ValueError(f"reset names arena(s) outside 0..{num_envs - 1}: {arenas.tolist()}")
    return arenas


class LoopBatchPolicy:
    """N per-arena policies stepped one by one: the reference every batched policy is held to,
    and how a policy with no batched form acts in a batch."""

    def __init__(self, make: Callable[[], Policy], num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.num_envs = num_envs
        self.policies = [make() for _ in range(num_envs)]

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        for i, seed in zip(reset_indices(self.num_envs, seeds, index).tolist(), seeds, strict=True):
            self.policies[i].reset(seed)

    def act(self, observations: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(p.act(o), dtype=np.int64) for p, o in zip(self.policies, observations, strict=True)])


class BatchScripted:
    """Base of the batched scripted policies: one seat of one scenario (its layouts and action
    bounds) played in ``num_envs`` arenas as arrays.

    Subclasses set ``role`` and ``name``, implement :meth:`decide` (``(N, obs_dim)`` observations
    -> ``(N, act_dim)`` actions, clipped into the space by :meth:`act`) and, when they keep
    per-episode state, :meth:`clear` (those arenas' state forgotten) or, when they draw random
    numbers, :meth:`reseed`. :attr:`arguments` are the keyword arguments that rebuild the policy
    (:meth:`resized`); :attr:`params` its tunable parameters (for reports and rosters).
    """

    role: ClassVar[str] = ""
    name: str = ""

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        role = role_of(config, agent)
        if role != self.role:
            raise ValueError(f"policy {self.name!r} plays the {self.role} role, but agent {agent!r} of scenario "
                             f"{config.name!r} is a {role}")
        self.config, self.agent, self.num_envs = config, agent, num_envs
        self.obs_layout = observation_layout(config, agent)
        self.act_layout = action_layout(config, agent)
        self.high = self.act_layout.high.astype(np.int64)  # every action entry lies in [0, high]
        self.obs_dim = self.obs_layout.size
        self.n_tiers, self.n_teams = len(config.gpu_tiers), len(config.teams)
        self.clear(np.arange(num_envs))

    @property
    def params(self) -> dict[str, Any]:
        return {}

    @property
    def arguments(self) -> dict[str, Any]:
        return self.params

    def resized(self, num_envs: int) -> BatchScripted:
        """The same policy (scenario, seat, parameters) in ``num_envs`` arenas, every arena unseeded."""
        return type(self)(self.config, self.agent, num_envs, **self.arguments)

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        arenas = reset_indices(self.num_envs, seeds, index)
        self.reseed(arenas, seeds)
        self.clear(arenas)

    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations)
        if obs.shape != (self.num_envs, self.obs_dim):
            raise ValueError(f"{self.name!r} for {self.agent!r} in {self.num_envs} arena(s) takes "
                             f"observations of shape ({self.num_envs}, {self.obs_dim}), got {obs.shape}")
        action = np.array(self.decide(obs), dtype=np.int64)
        np.minimum(action, self.high, out=action)
        np.maximum(action, 0, out=action)
        return action

    def clear(self, arenas: np.ndarray) -> None:
        """Forget the per-episode state of ``arenas`` (called by ``__init__`` and ``reset``)."""

    def reseed(self, arenas: np.ndarray, seeds: Sequence[int | None]) -> None:
        """New generators for ``arenas`` (a deterministic policy has none)."""

    def decide(self, obs: np.ndarray) -> np.ndarray:
        """Every arena's action for its observation (clipped into the space by ``act``)."""
        raise NotImplementedError


class OneArena:
    """A batched scripted policy as a per-arena :class:`~policies.base.Policy`: a batch of one.

    The one adaptor: ``reset(seed)`` resets the single arena, ``act(observation)`` is row 0 of
    the batched ``act``. Its ``name``, ``agent``, ``config`` and ``params`` are the batched policy's.
    """

    def __init__(self, batched: BatchScripted, seed: int | None = None) -> None:
        if batched.num_envs != 1:
            raise ValueError(f"a per-arena policy wraps a batch of one, got {batched.num_envs} arenas")
        self.batched = batched
        self.reset(seed)

    @classmethod
    def maker(cls, batched_type: Callable[..., BatchScripted], **fixed: Any) -> Callable[..., OneArena]:
        """A per-arena factory ``(config, agent, seed=None, **params)`` of ``batched_type`` (for the registry)."""

        def make(config: ScenarioConfig, agent: str, seed: int | None = None, **params: Any) -> OneArena:
            return cls(batched_type(config, agent, 1, **fixed, **params), seed)

        return make

    @property
    def name(self) -> str:
        return self.batched.name

    @property
    def agent(self) -> str:
        return self.batched.agent

    @property
    def config(self) -> ScenarioConfig:
        return self.batched.config

    @property
    def params(self) -> dict[str, Any]:
        return self.batched.params

    def reset(self, seed: int | None = None) -> None:
        self.batched.reset([seed])

    def act(self, observation: np.ndarray) -> np.ndarray:
        return self.batched.act(np.asarray(observation)[None])[0]

    def __repr__(self) -> str:
        return f"OneArena(name={self.name!r}, agent={self.agent!r}, scenario={self.config.name!r})"


def batch_of(policy: OneArena, num_envs: int) -> BatchScripted:
    """The batched policy a :class:`OneArena` wraps, in ``num_envs`` arenas (``policies.registry.BATCHED``)."""
    return policy.batched.resized(num_envs)


class BatchedInterface(Protocol):
    """What sits between a seat and its module in ``num_envs`` arenas, the same in training and play: ``observe``
    turns ``(N, obs_dim)`` observations into the module's ``(N, input_size)`` inputs, ``act`` decodes its
    ``(N, k)`` actions into env actions; ``reset(index)`` starts episodes (every arena when None)."""

    num_envs: int

    @property
    def codec(self) -> Any: ...

    @property
    def input_size(self) -> int: ...

    def observation_space(self) -> Any: ...

    def action_space(self) -> Any: ...

    def reset(self, index: np.ndarray | None = None) -> None: ...

    def observe(self, observations: np.ndarray) -> np.ndarray: ...

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray: ...

    def resized(self, num_envs: int) -> BatchedInterface:
        """The same interface (scenario, seat, codec, view) in ``num_envs`` arenas, every episode new."""
        ...


BatchedT = TypeVar("BatchedT", bound=BatchedInterface)


class OneArenaInterface(Generic[BatchedT]):
    """A learned module's interface in one arena: its batched form, a batch of one (``observe`` and ``act`` are
    row 0 of the batched ones); ``batched.resized(n)`` is the same seat's interface in n arenas. What
    ``policies.learned.LearnedPolicy`` and training's per-arena env play through."""

    def __init__(self, batched: BatchedT) -> None:
        if batched.num_envs != 1:
            raise ValueError(f"a per-arena interface wraps a batch of one, got {batched.num_envs} arenas")
        self.batched = batched

    @property
    def codec(self) -> Any:
        """The codec in one arena (a batch of one: it also answers for one observation, see policies.codecs)."""
        return self.batched.codec

    @property
    def input_size(self) -> int:
        return self.batched.input_size

    def observation_space(self) -> Any:
        return self.batched.observation_space()

    def action_space(self) -> Any:
        return self.batched.action_space()

    def reset(self) -> None:
        self.batched.reset()

    def observe(self, observation: np.ndarray) -> np.ndarray:
        return self.batched.observe(np.asarray(observation)[None])[0]

    def act(self, observation: np.ndarray, module_action: np.ndarray) -> np.ndarray:
        return self.batched.act(np.asarray(observation)[None], np.asarray(module_action)[None])[0]
