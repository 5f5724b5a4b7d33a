"""Named constants of the game: roles, stances, job statuses, shock kinds, carbon modes,
difficulty levels.

Enums, not bare ints, so that a reader of an action or an event never has to remember
what ``2`` meant.
"""

from __future__ import annotations

import enum

ALLOCATOR = "allocator"  # agent id of the allocator (its role's name too)
BROKER = "broker"  # agent id of the broker


class Role(enum.StrEnum):
    """What an agent plays. A str, so ``Role.TEAM == "team"`` and rosters keep plain names."""

    ALLOCATOR = "allocator"
    TEAM = "team"  # every team agent (ids are the team names)
    BROKER = "broker"


class Stance(enum.IntEnum):
    """A team's answer to the grant it received last tick (the last entry of its action)."""

    ACCEPT = 0
    COUNTER = 1  # non-binding signal, visible to the allocator
    ESCALATE = 2  # justified if the team was truly starved last tick


class JobStatus(enum.IntEnum):
    PENDING = 0  # not resolved yet (arrived or not)
    DONE = 1  # completed: its value was paid
    MISSED = 2  # its deadline passed unfinished

    @property
    def label(self) -> str:
        return self.name.lower()


class ShockKind(enum.IntEnum):
    COMPLIANCE_AUDIT = 0
    CUSTOMER_ESCALATION = 1
    PRODUCTION_INCIDENT = 2
    MARKET_CRISIS = 3
    GRID_SPIKE = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> ShockKind:
        return cls[label.upper()]


# Which team a job-injecting shock targets when the scenario does not say.
DEFAULT_SHOCK_TEAM = {
    ShockKind.COMPLIANCE_AUDIT: "safety",
    ShockKind.CUSTOMER_ESCALATION: "search",
    ShockKind.PRODUCTION_INCIDENT: "robotics",
}


class CarbonMode(enum.StrEnum):
    HARD = "hard"  # grants that would exceed the cap are cut before jobs run
    SOFT = "soft"  # emissions over the cap are penalised per kg


class Difficulty(enum.StrEnum):
    """A scenario's difficulty level on the curriculum (``difficulty`` in the scenario file)."""

    STANDARD = "standard"
    ELEVATED = "elevated"
    CRISIS = "crisis"


# the tiers in curriculum order; each is also the name of the shipped scenario of that difficulty
TIERS: tuple[str, ...] = tuple(d.value for d in Difficulty)


DIFFICULTIES = tuple(d.value for d in Difficulty)
