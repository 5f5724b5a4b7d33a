"""The per-scenario tables every part of the game reads, derived once.

A :class:`Rules` is what a scenario file means for play, laid out for use: per-tier
vectors (speed, power, operating cost, owned GPUs, spot inventory, unit cost, the
broker's price grid), per-team vectors (board pressure), name → index maps, and the few
facts the tick needs (hard or soft carbon cap, when the last job-injecting shock fires).
The env, the observations, the spaces, the oracle and the scripted brokers all take it
from :func:`rules_for`, so a table is never derived twice in two slightly different ways.

Arrays are read-only (``rules.owned[0] = 1`` raises): one ``Rules`` is shared by every
env of the scenario in a process. Tuples are for the rules that read a handful of
entries one at a time (cheaper than indexing numpy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from commons_arena.enums import CarbonMode
from commons_arena.mechanics import market
from commons_arena.mechanics.jobs import TeamJobSource
from commons_arena.scenario import ScenarioConfig


def _frozen(values, dtype) -> np.ndarray:
    array = np.array(values, dtype=dtype)
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class Rules:
    """Per-scenario tables (see the module docstring); build with :func:`rules_for`."""

    config: ScenarioConfig
    n_tiers: int
    n_teams: int
    tier_index: Mapping[str, int]  # tier name -> index
    team_index: Mapping[str, int]  # team name -> index
    # per tier
    speed: tuple[float, ...]  # work units per GPU-tick (read per job: Python floats keep job.remaining a float)
    memory_gb: np.ndarray  # memory per GPU
    power_kw: np.ndarray  # power of one busy GPU
    op_cost: np.ndarray  # operating cost per granted GPU-tick
    owned: np.ndarray  # int64, GPUs the organisation owns
    spot_inventory: tuple[int, ...]  # GPUs the broker may offer per tick (no crisis)
    spot_unit_cost: np.ndarray  # broker's cost per GPU sold
    max_price: np.ndarray  # top of the broker's price grid
    capacity: np.ndarray  # float64, owned + spot inventory: most GPUs a tick can ever grant
    price_grid: tuple[tuple[float, ...], ...]  # [tier][level] -> unit price before crisis multipliers
    # per team
    board_pressure: tuple[float, ...]  # what a justified escalation costs the allocator
    # facts of the tick
    hard_cap: bool  # carbon: cut grants (hard) rather than charge per kg (soft)
    job_sources: tuple[TeamJobSource, ...]  # seed-independent part of each team's jobs
    last_job_shock_tick: int  # a scheduled job-injecting shock keeps the episode open until then (-1: none)

    @classmethod
    def of(cls, config: ScenarioConfig) -> Rules:
        tiers, teams = config.gpu_tiers, config.teams
        owned = [t.owned for t in tiers]
        inventory = [t.spot_inventory for t in tiers]
        max_price = np.array([t.max_price for t in tiers])
        return cls(
            config=config,
            n_tiers=len(tiers),
            n_teams=len(teams),
            tier_index=MappingProxyType({name: k for k, name in enumerate(config.tier_names)}),
            team_index=MappingProxyType({name: i for i, name in enumerate(config.team_names)}),
            speed=tuple(t.speed for t in tiers),
            memory_gb=_frozen([t.memory_gb for t in tiers], np.float64),
            power_kw=_frozen([t.power_kw for t in tiers], np.float64),
            op_cost=_frozen([t.op_cost for t in tiers], np.float64),
            owned=_frozen(owned, np.int64),
            spot_inventory=tuple(inventory),
            spot_unit_cost=_frozen([t.spot_unit_cost for t in tiers], np.float64),
            max_price=_frozen(max_price, np.float64),
            capacity=_frozen([o + q for o, q in zip(owned, inventory, strict=True)], np.float64),
            price_grid=tuple(tuple(row) for row in market.price_grid(max_price, config.price_levels).tolist()),
            board_pressure=tuple(t.board_pressure for t in teams),
            hard_cap=config.carbon.carbon_mode is CarbonMode.HARD,
            job_sources=tuple(TeamJobSource(team, tiers) for team in teams),
            last_job_shock_tick=max(
                (spec.tick for spec in config.shocks if spec.tick is not None and spec.job is not None), default=-1
            ),
        )

    # Immutable and shared: a copied or unpickled env uses the scenario's one Rules.
    def __deepcopy__(self, memo: dict) -> Rules:
        return self

    def __reduce__(self):
        return rules_for, (self.config,)


_CACHE: dict[str, Rules] = {}


def rules_for(config: ScenarioConfig) -> Rules:
    """The scenario's :class:`Rules`, built at the first call per scenario content."""
    rules = _CACHE.get(config.content_hash)
    if rules is None:
        rules = _CACHE[config.content_hash] = Rules.of(config)
    return rules
