"""Jobs: the hidden truth behind every declaration (SPEC §4).

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

from dataclasses import dataclass, field

import numpy as np

from commons_arena.scenario import GpuTierConfig, JobGenerator, JobSpec, TeamConfig, UrgentJob

PENDING, DONE, MISSED = 0, 1, 2


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
    status: int = PENDING
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

    need: np.ndarray  # GPUs per tier to run every ready job (true need)
    used: np.ndarray  # granted GPUs per tier that ran a job
    ready_gpus: int = 0
    placed_gpus: int = 0
    completed: list[Job] = field(default_factory=list)
    missed: list[Job] = field(default_factory=list)

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


def build_team_jobs(
    team: TeamConfig, tiers: tuple[GpuTierConfig, ...], rng: np.random.Generator
) -> list[Job]:
    """The team's jobs for one episode: fixed list (values drawn within ±noise) then the
    generator's stream. Draws happen in file order, so a seed fixes every job."""
    jobs: list[Job] = []
    index_of = {spec.id: i for i, spec in enumerate(team.jobs)}
    for spec in team.jobs:
        jobs.append(_job_from_spec(spec, index_of, tiers, rng))
    if team.generator is not None:
        jobs.extend(_generate(team.name, team.generator, tiers, rng))
    return jobs


def _job_from_spec(
    spec: JobSpec, index_of: dict[str, int], tiers: tuple[GpuTierConfig, ...], rng: np.random.Generator
) -> Job:
    value = spec.value
    if spec.value_noise > 0:
        value = float(rng.uniform(spec.value - spec.value_noise, spec.value + spec.value_noise))
    return Job(
        id=spec.id,
        gpus=spec.gpus,
        min_memory_gb=spec.min_memory_gb,
        work=spec.work,
        arrival=spec.arrival,
        deadline=spec.deadline,
        value=value,
        priority=spec.priority,
        deps=tuple(index_of[d] for d in spec.depends_on),
        fits=fitting_tiers(spec.min_memory_gb, tiers),
        remaining=spec.work,
    )


def _generate(
    team_name: str, gen: JobGenerator, tiers: tuple[GpuTierConfig, ...], rng: np.random.Generator
) -> list[Job]:
    jobs = []
    for t in range(gen.first_tick, gen.last_tick + 1):
        if rng.random() >= gen.rate:
            continue
        memory = float(gen.min_memory_gb[rng.integers(len(gen.min_memory_gb))])
        work = float(round(rng.uniform(*gen.work), 2))
        jobs.append(
            Job(
                id=f"{team_name}_g{t}",
                gpus=int(rng.integers(gen.gpus[0], gen.gpus[1] + 1)),
                min_memory_gb=memory,
                work=work,
                arrival=t,
                deadline=t + int(rng.integers(gen.slack[0], gen.slack[1] + 1)),
                value=float(round(rng.uniform(*gen.value), 2)),
                priority=int(rng.integers(gen.priority[0], gen.priority[1] + 1)),
                fits=fitting_tiers(memory, tiers),
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


def true_need(jobs: list[Job], order: list[int], t: int, n_tiers: int) -> np.ndarray:
    need = np.zeros(n_tiers, dtype=np.int64)
    for i in order:
        job = jobs[i]
        if job.ready(t, jobs):
            need[job.fits[0]] += job.gpus
    return need


def run_team_jobs(
    jobs: list[Job], order: list[int], grant: np.ndarray, speeds: np.ndarray, t: int
) -> TeamTick:
    """Advance one team's jobs by one tick on ``grant`` (GPUs per tier), in place.

    Returns the tick's measurements: true need, GPUs used, completed and missed jobs.
    """
    n_tiers = len(grant)
    free = [int(g) for g in grant]
    need = np.zeros(n_tiers, dtype=np.int64)
    used = np.zeros(n_tiers, dtype=np.int64)
    result = TeamTick(need=need, used=used)
    # Readiness is decided for everyone before anything runs: a dependency completing
    # this tick unlocks its dependants from the next tick on.
    ready = [
        job for job in (jobs[i] for i in order)
        if job.status == PENDING and job.arrival <= t and (not job.deps or all(jobs[d].status == DONE for d in job.deps))
    ]
    for job in ready:
        need[job.fits[0]] += job.gpus
        result.ready_gpus += job.gpus
        for tier in job.fits:
            if free[tier] >= job.gpus:
                free[tier] -= job.gpus
                used[tier] += job.gpus
                result.placed_gpus += job.gpus
                job.remaining -= job.gpus * speeds[tier]
                if job.remaining <= 1e-9:
                    job.remaining = 0.0
                    job.status = DONE
                    job.done_tick = t
                    result.completed.append(job)
                break
    for i in order:
        job = jobs[i]
        if job.deadline > t:
            break  # EDF order: every later job is due later
        if job.status == PENDING:
            job.status = MISSED
            result.missed.append(job)
    return result


def all_resolved(jobs: list[Job]) -> bool:
    return all(job.status != PENDING for job in jobs)
