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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from commons_arena.enums import JobStatus
from commons_arena.scenario import GpuTierConfig, JobGenerator, JobSpec, TeamConfig, UrgentJob

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


@dataclass(slots=True)
class TeamTick:
    """What happened to one team's jobs in one tick (raw measurements, no weights)."""

    # Per tier, as lists: cheap to build and to add up over a few tiers and teams.
    need_by_tier: list[int]  # GPUs to run every ready job (true need)
    used_by_tier: list[int]  # granted GPUs that ran a job
    ready_gpus: int = 0
    placed_gpus: int = 0
    completed: list[Job] = field(default_factory=list)
    missed: list[Job] = field(default_factory=list)
    completed_value: float = 0.0  # Σ value of ``completed``
    missed_value: float = 0.0  # Σ value of ``missed``

    @property
    def need(self) -> np.ndarray:
        return np.array(self.need_by_tier, dtype=np.int64)

    @property
    def used(self) -> np.ndarray:
        return np.array(self.used_by_tier, dtype=np.int64)

    @property
    def satisfaction(self) -> float:
        """Share of the true need that ran; 1.0 when nothing was needed."""
        return 1.0 if self.ready_gpus == 0 else self.placed_gpus / self.ready_gpus

    @property
    def starved(self) -> bool:
        return self.placed_gpus < self.ready_gpus


def fitting_tiers(min_memory_gb: float, tiers: tuple[GpuTierConfig, ...]) -> tuple[int, ...]:
    order = sorted(range(len(tiers)), key=lambda i: (tiers[i].memory_gb, i))
    return tuple(i for i in order if tiers[i].memory_gb >= min_memory_gb)


def edf_key(job: Job, index: int) -> tuple[int, int, int]:
    return (job.deadline, -job.priority, index)


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


def urgent_job(template: UrgentJob, job_id: str, t: int, tiers: tuple[GpuTierConfig, ...]) -> Job:
    """A job injected by a shock at tick t."""
    return Job(
        id=job_id,
        gpus=template.gpus,
        min_memory_gb=template.min_memory_gb,
        work=template.work,
        arrival=t,
        deadline=t + template.slack,
        value=template.value,
        priority=template.priority,
        fits=fitting_tiers(template.min_memory_gb, tiers),
        remaining=template.work,
    )


def edf_order(jobs: list[Job]) -> list[int]:
    """Indices of ``jobs`` in execution order. Deadlines never change, so the env keeps
    this list and recomputes it only when a shock adds a job."""
    return sorted(range(len(jobs)), key=lambda i: edf_key(jobs[i], i))


@dataclass(slots=True)
class Queue:
    """A team's unresolved jobs at the start of tick t, before anything runs."""

    need: list[int]  # true need per tier: GPUs that would let every ready job run
    waiting: list[tuple[Job, bool]]  # pending jobs that have arrived, EDF order, with readiness
    pending: int  # pending jobs, arrived or not (0: every job is resolved)


def queue_at(jobs: list[Job], order: list[int], t: int, n_tiers: int) -> Queue:
    """One pass over the queue gives what the env (true need, end of episode) and the
    observations (visible jobs, pressure) need, instead of one pass each."""
    need = [0] * n_tiers
    waiting = []
    pending = 0
    for i in order:
        job = jobs[i]
        if job.status != PENDING:
            continue
        pending += 1
        if job.arrival > t:
            continue
        ready = not job.deps or all(jobs[d].status == DONE for d in job.deps)
        if ready:
            need[job.fits[0]] += job.gpus
        waiting.append((job, ready))
    return Queue(need=need, waiting=waiting, pending=pending)


def true_need(jobs: list[Job], order: list[int], t: int, n_tiers: int) -> np.ndarray:
    return np.array(queue_at(jobs, order, t, n_tiers).need, dtype=np.int64)


def run_team_jobs(
    jobs: list[Job], order: list[int], grant: np.ndarray | list[int], speeds: Sequence[float], t: int
) -> TeamTick:
    """Advance one team's jobs by one tick on ``grant`` (GPUs per tier), in place.

    Returns the tick's measurements: true need, GPUs used, completed and missed jobs.
    """
    # Readiness is decided for everyone before anything runs: a dependency completing
    # this tick unlocks its dependants from the next tick on.
    queue = queue_at(jobs, order, t, len(grant))
    free = [int(g) for g in grant]
    used = [0] * len(grant)
    tick = TeamTick(need_by_tier=queue.need, used_by_tier=used, ready_gpus=sum(queue.need))
    for job, ready in queue.waiting:
        if not ready:
            continue
        gpus = job.gpus
        for tier in job.fits:
            if free[tier] >= gpus:
                free[tier] -= gpus
                used[tier] += gpus
                tick.placed_gpus += gpus
                job.remaining -= gpus * speeds[tier]
                if job.remaining <= 1e-9:
                    job.remaining = 0.0
                    job.status = DONE
                    job.done_tick = t
                    tick.completed.append(job)
                    tick.completed_value += job.value
                break
    for i in order:
        job = jobs[i]
        if job.deadline > t:
            break  # EDF order: every later job is due later
        if job.status == PENDING:
            job.status = MISSED
            tick.missed.append(job)
            tick.missed_value += job.value
    return tick

