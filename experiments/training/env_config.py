"""What RLlib's env (:class:`experiments.training.env.ArenaRLlibEnv`) and the run's callbacks read:
:class:`ArenaEnvConfig`, one frozen, typed value, checked when made.

RLlib hands its ``env_config`` dict to every env and callback: a run's holds this one value
(:meth:`ArenaEnvConfig.for_rllib`), read back with :meth:`ArenaEnvConfig.of`. Made by
:func:`experiments.training.algorithm.algorithm_config` from the run's setup and its kind's part
(:meth:`experiments.training.kinds.Kind.configure`); pickled to the env runners as data. Light on
purpose (the kinds build their parts of it): no RLlib, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig
from experiments.training.networks import MLP, Network
from policies.focal_vector import BackgroundMixture  # entry i (None: each scenario's own population), drawn per episode

# A scenario as the env config carries it: parsed once by the run's setup (a ScenarioConfig,
# pickled to the env runners as data) or a shipped scenario's name (tests, stand-in envs).
Scenario = ScenarioConfig | str
Background = Mapping[str, Any]  # a Population.to_dict() (policies.population)
RLLIB_KEY = "arena"  # the one entry of RLlib's env_config dict


@dataclass(frozen=True)
class BackgroundMix:
    """``background`` replaces the run's in a ``share`` of training episodes (``--mix-background``)."""

    background: Background
    share: float


@dataclass(frozen=True)
class Curriculum:
    """Every env moves to the next of ``stages`` when the training episodes' normalised score reaches
    ``promote_at``, at least ``min_iterations`` apart (:class:`~experiments.training.callbacks.CurriculumCallback`)."""

    stages: tuple[Scenario, ...]
    promote_at: float
    min_iterations: int = 5
    stage: int = 0


@dataclass(frozen=True)
class LeagueSettings:
    """A league's members, its team seats, and when a snapshot joins (:mod:`experiments.training.league`)."""

    pool: tuple[str, ...]
    team_seats: tuple[str, ...]
    margin: float
    gap: int


@dataclass(frozen=True)
class ArenaEnvConfig:
    """Everything the env and the run's callbacks read (the seat maps: learning seat -> its value)."""

    scenario: Scenario = "standard"  # every episode's (without `scenarios`)
    scenarios: tuple[Scenario, ...] = ()  # a mix: each episode draws one (same spaces, unless all see the cell view)
    scenario_weights: tuple[float, ...] | None = None  # the mix's draw weights (None: alike)
    learned_agents: tuple[str, ...] = ()  # the learning seats (with scripted_in_env the only ones RLlib sees)
    scripted_in_env: bool = False  # the background plays the other seats inside the env (policies.focal.FocalEnv)
    background: Background | None = None  # None: each scenario's own population
    background_mix: BackgroundMix | None = None  # drawn per episode, tagged "mix_background" in every seat's infos
    background_mixture: BackgroundMixture | None = None  # drawn per episode, tagged "mixture_entry"
    checkpoints: tuple[Any, ...] = ()  # the backgrounds' learned: checkpoints as bytes (policies.shipping)
    observation_scale: Mapping[str, np.ndarray] = field(default_factory=dict)
    action_codec: Mapping[str, str] = field(default_factory=dict)  # its codec's name (policies.codecs)
    history: Mapping[str, int] = field(default_factory=dict)  # ticks of observation stacked
    network: Mapping[str, Network] = field(default_factory=dict)  # its view and module (absent: mlp)
    seat_identity: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # a shared module's (index, size)
    reward_scale: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # scenario hash -> factor
    score_anchors: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # hash -> reference -> mean
    curriculum: Curriculum | None = None  # read by the curriculum's callback
    league: LeagueSettings | None = None  # read by the league's callback

    def __post_init__(self) -> None:
        weights = self.scenario_weights
        if weights is not None and len(weights) != len(self.scenarios):
            raise ValueError(f"scenario_weights has {len(weights)} weights for {len(self.scenarios)} scenarios")
        if weights is not None and not (min(weights) >= 0 and sum(weights) > 0):
            raise ValueError(f"scenario_weights must be non-negative with a positive sum, got {list(weights)[:5]}")
        if self.background_mix is not None and self.background_mixture is not None:
            raise ValueError("background_mix and background_mixture both replace the background: give one")

    def network_of(self, seat: str) -> Network:
        return self.network.get(seat, MLP)

    @property
    def viewed_seats(self) -> set[str]:
        """The seats that see the game through an interface (a scale, codec, identity or network)."""
        return set(self.observation_scale) | set(self.action_codec) | set(self.seat_identity) | set(self.network)

    def for_rllib(self) -> dict[str, Any]:
        """RLlib's ``env_config`` (a dict it hands to every env and callback)."""
        return {RLLIB_KEY: self}

    @classmethod
    def of(cls, config: ArenaEnvConfig | Mapping[str, Any] | None) -> ArenaEnvConfig:
        """The config itself, or the one RLlib's ``env_config`` (an ``EnvContext``) holds; None: the defaults."""
        found = config.get(RLLIB_KEY) if isinstance(config, Mapping) and set(config) <= {RLLIB_KEY} else config
        if not isinstance(found, ArenaEnvConfig | None):
            raise TypeError(f"the env takes an ArenaEnvConfig (RLlib's env_config {{{RLLIB_KEY!r}: it}}), got "
                            f"{sorted(config)[:8] if isinstance(config, Mapping) else type(config).__name__}")
        return found or cls()


__all__ = ["RLLIB_KEY", "ArenaEnvConfig", "BackgroundMix", "BackgroundMixture", "Curriculum", "LeagueSettings",
           "Scenario"]
