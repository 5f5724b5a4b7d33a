"""The reference env's full (hidden) state as one typed, mutable record (the batched core's
is ``commons_arena.batched.state.BatchState``; one arena of it is read as ``commons_arena.view.ArenaState``).

Observations are projections of this record (see observations.py); nothing else leaves
the environment except through :meth:`tests.reference.arena.ReferenceEnv.hidden_state`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commons_arena.enums import ShockKind
from commons_arena.mechanics.jobs import Job, TeamJobSource
from commons_arena.mechanics.shocks import Effect
from commons_arena.scenario import ScenarioConfig
from tests.reference.mechanics.jobs import edf_order


@dataclass
class ArenaState:
    t: int  # the tick about to be played
    budget: float
    carbon_used: float  # kg CO2 so far
    online: np.ndarray  # (T,) owned GPUs not offline
    offer_qty: np.ndarray  # (T,) the broker's offer for this tick
    offer_price: np.ndarray  # (T,) its unit prices
    last_sold: np.ndarray  # (T,) GPUs bought last tick
    last_price: np.ndarray  # (T,) prices of last tick's offer
    declared: np.ndarray  # (N, T) requests declared last tick for this tick
    stance: np.ndarray  # (N,) latest stance of each team
    last_grant: np.ndarray  # (N, T) grants of last tick
    need: np.ndarray  # (N, T) true need this tick (hidden)
    starved_last: np.ndarray  # (N,) bool: starved last tick (hidden)
    streak: np.ndarray  # (N,) consecutive starved ticks
    revealed: np.ndarray  # (N,) bool
    credibility: np.ndarray  # (N,)
    escalations: np.ndarray  # (N,) escalations so far
    shocks_seen: np.ndarray  # (kinds,) shocks fired so far
    jobs: list[list[Job]]  # per team (hidden)
    orders: list[list[int]]  # per team: EDF execution order of its jobs
    effects: list[Effect] = field(default_factory=list)
    injected: int = 0  # jobs injected by shocks so far (for their ids)


def initial_state(
    config: ScenarioConfig, rng: np.random.Generator, job_sources: Sequence[TeamJobSource] | None = None
) -> ArenaState:
    """Tick 0 of an episode; ``job_sources`` (one per team, seed-independent) saves
    preparing them again at every reset."""
    T, N = len(config.gpu_tiers), len(config.teams)
    if job_sources is None:
        job_sources = [TeamJobSource(team, config.gpu_tiers) for team in config.teams]
    jobs = [source.draw(rng) for source in job_sources]
    return ArenaState(
        t=0,
        budget=config.budget,
        carbon_used=0.0,
        online=np.array([t.owned for t in config.gpu_tiers], dtype=np.int64),
        # Nothing was posted before tick 0, so nothing can be bought at tick 0.
        offer_qty=np.zeros(T, dtype=np.int64),
        offer_price=np.zeros(T),
        last_sold=np.zeros(T, dtype=np.int64),
        last_price=np.zeros(T),
        declared=np.zeros((N, T), dtype=np.int64),
        stance=np.zeros(N, dtype=np.int64),
        last_grant=np.zeros((N, T), dtype=np.int64),
        need=np.zeros((N, T), dtype=np.int64),
        starved_last=np.zeros(N, dtype=bool),
        streak=np.zeros(N, dtype=np.int64),
        revealed=np.zeros(N, dtype=bool),
        credibility=np.ones(N),
        escalations=np.zeros(N, dtype=np.int64),
        shocks_seen=np.zeros(len(ShockKind), dtype=np.int64),
        jobs=jobs,
        orders=[edf_order(team_jobs) for team_jobs in jobs],
    )
