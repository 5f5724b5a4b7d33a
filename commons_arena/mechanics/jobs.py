"""Jobs: the hidden truth behind every declaration (docs/rules.md §4).

Each tick a team runs its ready jobs on the GPUs it was granted, earliest deadline first
(ties: higher priority, then creation order). A job runs only if it gets all of its
``gpus`` at once on one tier whose memory fits; it then advances by ``gpus x speed`` work
units. Among fitting tiers with enough free granted GPUs it takes the one with the least
memory (ties: lower tier index), so large-memory GPUs stay free for jobs that need them.

A job pays its value in the tick it completes and is missed at the end of its deadline
tick if unfinished. A job whose dependency was missed can never become ready and is
missed at its own deadline. The team's **true need** at tick t is, per tier, the GPUs
that would let every ready job run this tick, each on its smallest fitting tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from commons_arena.enums import JobStatus
from commons_arena.scenario import GpuTierConfig, JobGenerator, JobSpec, TeamConfig

# A job's status is stored as the plain int value of its JobStatus: the job loops compare it
# many times per tick, and Python compares exact ints faster than IntEnum members.
# ``JobStatus(job.status)`` names it.
PENDING, DONE, MISSED = int(JobStatus.PENDING), int(JobStatus.DONE), int(JobStatus.MISSED)


@dataclass(slots=True)
class Job:
    """One job's live state. ``deps`` are indices into the owning team's job list."""

    id: str
    gpus: int
    min_memory_gb: float
    work: float
    arrival: int
    deadline: int
    value: float
    priority: int
    deps: tuple[int, ...] = ()
    fits: tuple[int, ...] = ()  # tier indices with enough memory, smallest memory first
    remaining: float = 0.0
    status: int = PENDING  # a JobStatus value
    done_tick: int = -1

    def ready(self, t: int, jobs: list[Job]) -> bool:
        return (
            self.status == PENDING
            and self.arrival <= t
            and all(jobs[d].status == DONE for d in self.deps)
        )


def fitting_tiers(min_memory_gb: float, tiers: tuple[GpuTierConfig, ...]) -> tuple[int, ...]:
    order = sorted(range(len(tiers)), key=lambda i: (tiers[i].memory_gb, i))
    return tuple(i for i in order if tiers[i].memory_gb >= min_memory_gb)


class TeamJobSource:
    """Everything about a team's jobs that does not depend on the seed (ids, dependencies,
    fitting tiers, the numbers of the fixed jobs), prepared once per scenario so that each
    reset only makes the draws. Plain tuples: reading a pydantic field costs more."""

    def __init__(self, team: TeamConfig, tiers: tuple[GpuTierConfig, ...]) -> None:
        index_of = {spec.id: i for i, spec in enumerate(team.jobs)}
        self.fixed = [_FixedJob.of(spec, tuple(index_of[d] for d in spec.depends_on), tiers) for spec in team.jobs]
        self.name = team.name
        self.generator = team.generator
        memories = team.generator.min_memory_gb if team.generator is not None else ()
        self.fits_by_memory = {float(m): fitting_tiers(m, tiers) for m in memories}

    def draw(self, rng: np.random.Generator) -> list[Job]:
        jobs = [job.draw(rng) for job in self.fixed]
        if self.generator is not None:
            jobs.extend(_generate(self.name, self.generator, self.fits_by_memory, rng))
        return jobs


class _FixedJob(NamedTuple):
    """A job of the scenario file; only its value is drawn (within ±value_noise)."""

    id: str
    gpus: int
    min_memory_gb: float
    work: float
    arrival: int
    deadline: int
    value: float
    value_noise: float
    priority: int
    deps: tuple[int, ...]
    fits: tuple[int, ...]

    @classmethod
    def of(cls, spec: JobSpec, deps: tuple[int, ...], tiers: tuple[GpuTierConfig, ...]) -> _FixedJob:
        return cls(spec.id, spec.gpus, spec.min_memory_gb, spec.work, spec.arrival, spec.deadline, spec.value,
                   spec.value_noise, spec.priority, deps, fitting_tiers(spec.min_memory_gb, tiers))

    def draw(self, rng: np.random.Generator) -> Job:
        value = self.value
        if self.value_noise > 0:
            value = float(rng.uniform(self.value - self.value_noise, self.value + self.value_noise))
        return Job(
            id=self.id,
            gpus=self.gpus,
            min_memory_gb=self.min_memory_gb,
            work=self.work,
            arrival=self.arrival,
            deadline=self.deadline,
            value=value,
            priority=self.priority,
            deps=self.deps,
            fits=self.fits,
            remaining=self.work,
        )


def _generate(
    team_name: str, gen: JobGenerator, fits_by_memory: dict[float, tuple[int, ...]], rng: np.random.Generator
) -> list[Job]:
    # The draws and their order (one per line below) are the seed's contract: keep them.
    jobs = []
    rate, memories, (w_lo, w_hi), (g_lo, g_hi) = gen.rate, gen.min_memory_gb, gen.work, gen.gpus
    (s_lo, s_hi), (v_lo, v_hi), (p_lo, p_hi) = gen.slack, gen.value, gen.priority
    for t in range(gen.first_tick, gen.last_tick + 1):
        if rng.random() >= rate:
            continue
        memory = float(memories[rng.integers(len(memories))])
        work = float(round(rng.uniform(w_lo, w_hi), 2))
        jobs.append(
            Job(
                id=f"{team_name}_g{t}",
                gpus=int(rng.integers(g_lo, g_hi + 1)),
                min_memory_gb=memory,
                work=work,
                arrival=t,
                deadline=t + int(rng.integers(s_lo, s_hi + 1)),
                value=float(round(rng.uniform(v_lo, v_hi), 2)),
                priority=int(rng.integers(p_lo, p_hi + 1)),
                fits=fits_by_memory[memory],
                remaining=work,
            )
        )
    return jobs


