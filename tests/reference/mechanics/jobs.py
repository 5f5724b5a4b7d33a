"""The reference's jobs (docs/rules.md §4): EDF order, the queue and true need, one team's tick, injected jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commons_arena.mechanics.jobs import DONE, MISSED, PENDING, Job, TeamJobSource, fitting_tiers
from commons_arena.scenario import GpuTierConfig, UrgentJob

__all__ = ['DONE', 'Job', 'MISSED', 'PENDING', 'Queue', 'TeamJobSource', 'TeamTick', 'edf_key', 'edf_order', 'fitting_tiers', 'queue_at', 'run_team_jobs', 'true_need', 'urgent_job']


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


def edf_key(job: Job, index: int) -> tuple[int, int, int]:
    return (job.deadline, -job.priority, index)


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
