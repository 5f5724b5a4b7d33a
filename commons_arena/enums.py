"""Named constants of the game: roles, stances, shock kinds, carbon modes.

Enums, not bare ints, so that a reader of an action or an event never has to remember
what ``2`` meant.
"""

from __future__ import annotations

import enum

ALLOCATOR = "allocator"
BROKER = "broker"
DEFAULT_TEAMS = ("search", "robotics", "safety")


class Role(enum.Enum):
    ALLOCATOR = "allocator"
    TEAM = "team"
    BROKER = "broker"


class Stance(enum.IntEnum):
    """A team's answer to the grant it received last tick (the last entry of its action)."""

    ACCEPT = 0
    COUNTER = 1  # non-binding signal, visible to the allocator
    ESCALATE = 2  # justified if the team was truly starved last tick


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


class Tier(enum.StrEnum):
    """Curriculum difficulty tiers (SPEC §10)."""

    STANDARD = "standard"
    ELEVATED = "elevated"
    CRISIS = "crisis"
