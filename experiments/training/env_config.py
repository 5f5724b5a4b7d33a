"""What RLlib's env (:class:`experiments.training.env.ArenaRLlibEnv`) and the run's callbacks read:
:class:`ArenaEnvConfig`, one frozen, typed, checked value.

RLlib hands its ``env_config`` dict to every env and callback; a run puts one entry in it,
:meth:`ArenaEnvConfig.for_rllib`, and they read it back with :meth:`ArenaEnvConfig.of`. Built by
:func:`experiments.training.algorithm.algorithm_config` from the run's setup (and the kind's part,
:meth:`experiments.training.kinds.Kind.configure`); pickled to the env runners as data.

Light on purpose (the kinds build their parts of it): no RLlib, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig
from experiments.training.networks import MLP, Network

# A scenario as the env config carries it: parsed once by the run's setup (a ScenarioConfig,
# pickled to the env runners as data) or a shipped scenario's name (tests, stand-in envs).
Scenario = ScenarioConfig | str
RLLIB_KEY = "arena"  # the one entry of RLlib's env_config dict: an ArenaEnvConfig


@dataclass(frozen=True)
class BackgroundMix:
    """``background`` (a ``Population.to_dict()``) replaces the run's in a ``share`` of training episodes."""

    background: Mapping[str, Any]
    share: float


@dataclass(frozen=True)
class BackgroundMixture:
    """Entry ``i`` (a ``Population.to_dict()``, or None: each scenario's own) plays instead of the run's
    background with probability ``weights[i] / sum(weights)`` (:mod:`experiments.training.mixture`)."""

    names: tuple[str, ...]
    backgrounds: tuple[Mapping[str, Any] | None, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True)
class Curriculum:
    """Promote every env to the next of ``stages`` when the training episodes' normalised score reaches
    ``promote_at``, at least ``min_iterations`` apart (:class:`experiments.training.callbacks.CurriculumCallback`)."""

    stages: tuple[Scenario, ...]
    promote_at: float
    min_iterations: int = 5
    stage: int = 0


@dataclass(frozen=True)
class LeagueSettings:
    """The league's members (``pool``), its team seats and when a snapshot joins (experiments.training.league)."""

    pool: tuple[str, ...]
    team_seats: tuple[str, ...]
    margin: float
    gap: int


@dataclass(frozen=True)
class ArenaEnvConfig:
    """Everything the env and the run's callbacks read; refused on construction if inconsistent."""

    scenario: Scenario = "standard"
    """the scenario every episode plays (without ``scenarios``)"""
    scenarios: tuple[Scenario, ...] = ()
    """a mix: each episode draws one (their spaces must match unless every learning seat sees the cell view)"""
    scenario_weights: tuple[float, ...] | None = None
    """the mix's draw weights, one per scenario (None: alike); a family run's extra scenarios at their share"""
    env_factory: Callable[..., Any] | str | None = None
    """a callable or ``"module:attr"`` with ``commons_arena.parallel_env``'s signature (stand-in envs in tests)"""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """extra keyword arguments of the factory"""
    learned_agents: tuple[str, ...] = ()
    """the learning seats (with ``scripted_in_env``: the only seats RLlib sees)"""
    scripted_in_env: bool = False
    """the background plays every other seat inside the env (policies.focal.FocalEnv), not as RLlib modules"""
    background: Mapping[str, Any] | None = None
    """the background, a ``Population.to_dict()`` (None: each scenario's own population)"""
    background_mix: BackgroundMix | None = None
    """replaces ``background`` in a share of episodes (tagged ``mix_background`` in every seat's infos)"""
    background_mixture: BackgroundMixture | None = None
    """one entry drawn per episode instead of ``background`` (tagged ``mixture_entry``)"""
    checkpoints: tuple[Any, ...] = ()
    """the backgrounds' ``learned:`` checkpoints as bytes (policies.shipping): a runner may not see the driver's disk"""
    observation_scale: Mapping[str, np.ndarray] = field(default_factory=dict)
    """learning seat -> per-dimension observation scale"""
    action_codec: Mapping[str, str] = field(default_factory=dict)
    """learning seat -> action codec name (policies.codecs)"""
    history: Mapping[str, int] = field(default_factory=dict)
    """learning seat -> ticks of observation stacked"""
    network: Mapping[str, Network] = field(default_factory=dict)
    """learning seat -> its network (experiments.training.networks; absent: mlp), which picks its view"""
    seat_identity: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """seat of a shared module -> (index, size) of its appended one-hot identity (experiments.training.seats)"""
    reward_scale: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """seat -> scenario hash -> factor on its training reward (the episode's own totals stay unscaled)"""
    score_anchors: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """scenario hash -> reference allocator -> mean held-out return (the metrics callback's normalised score)"""
    curriculum: Curriculum | None = None
    """a curriculum's stages and promotion (read by its callback)"""
    league: LeagueSettings | None = None
    """a league's pool and snapshot rule (read by its callback)"""

    def __post_init__(self) -> None:
        weights = self.scenario_weights
        if weights is not None and len(weights) != len(self.scenarios):
            raise ValueError(f"scenario_weights has {len(weights)} weights for {len(self.scenarios)} scenarios")
        if weights is not None and not (min(weights) >= 0 and sum(weights) > 0):
            raise ValueError(f"scenario_weights must be non-negative with a positive sum, got {list(weights)[:5]}")
        if self.background_mix is not None and self.background_mixture is not None:
            raise ValueError("background_mix and background_mixture both replace the background: give one")
        unknown = sorted(set(self.network) - set(self.learned_agents)) if self.learned_agents else []
        if unknown:
            raise ValueError(f"network given for {unknown}, which do not learn (learned_agents {list(self.learned_agents)})")

    def network_of(self, seat: str) -> Network:
        return self.network.get(seat, MLP)

    @property
    def viewed_seats(self) -> set[str]:
        """The seats that see the game through an interface (scale, codec, identity or network)."""
        return set(self.observation_scale) | set(self.action_codec) | set(self.seat_identity) | set(self.network)

    def for_rllib(self) -> dict[str, Any]:
        """RLlib's ``env_config`` (a dict it hands to every env and callback)."""
        return {RLLIB_KEY: self}

    @classmethod
    def of(cls, config: ArenaEnvConfig | Mapping[str, Any] | None) -> ArenaEnvConfig:
        """The config itself, or the one RLlib's ``env_config`` (an ``EnvContext``) carries; None: the defaults."""
        if config is None or isinstance(config, ArenaEnvConfig):
            return config or cls()
        found = config.get(RLLIB_KEY, cls()) if not set(config) - {RLLIB_KEY} else None
        if not isinstance(found, ArenaEnvConfig):
            raise TypeError(f"the env takes an ArenaEnvConfig (RLlib's env_config {{{RLLIB_KEY!r}: it}}), "
                            f"got keys {sorted(config)[:8]}")
        return found


__all__ = ["RLLIB_KEY", "ArenaEnvConfig", "BackgroundMix", "BackgroundMixture", "Curriculum", "LeagueSettings",
           "Scenario"]
