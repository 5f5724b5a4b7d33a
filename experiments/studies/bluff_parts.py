"""Which part of a bluff pays against an allocator: the inflated declaration, the escalation, or both.

A team seat plays fixed ``bluff`` codes (declaration factor x stance rule) against the allocator and the
seat's default background; each code's seat return minus ``truthful``'s (x1, escalate after 2 starved
ticks), paired on the same seeds. ``x1, accept`` shows what escalating when starved is worth to a truthful
team; ``x3, accept`` what inflating alone takes; ``x3, escalate_1`` both (docs/negotiation.md). The
allocator's own return per tier (its welfare) is printed beside, so a change of the allocator is read on
both axes. ``--param`` sets the allocator's parameters (``heed_escalation=false``).

    python -m experiments.studies.bluff_parts --allocator fair_planner --param heed_escalation=false
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tyro

from commons_arena.enums import ALLOCATOR, TIERS
from experiments.evaluation.fixed_codes import Arena
from experiments.seeds import SEED_RANGES
from experiments.statistics import mean_ci95, paired_difference
from policies import Population
from policies.codecs import BluffTeamCodec

STANCES = tuple(rule.name for rule in BluffTeamCodec.STANCE_RULES)
CODES = ((1.0, "accept"), (1.0, "escalate"), (2.0, "accept"), (2.0, "escalate"), (3.0, "accept"), (3.0, "escalate_1"))


@dataclass
class Args:
    allocator: str = "planner"
    """the allocator (a registered name or learned:<checkpoint>)"""
    param: tuple[str, ...] = ()
    """the allocator's parameters as KEY=VALUE (true/false or a number)"""
    seat: str = "search"
    """the team seat that bluffs"""
    scenario: str = "crisis"
    """where the codes play"""
    seeds: int = 100
    """held-out seeds (the exploit range, as the frontier's)"""


def parsed(pairs: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = value.lower() == "true" if value.lower() in ("true", "false") else float(value)
    return out


def code_of(factor: float, stance: str) -> np.ndarray:
    return np.array([BluffTeamCodec.FACTORS.index(factor), STANCES.index(stance)])


def main(args: Args) -> None:
    seeds = SEED_RANGES["exploit"].seeds(args.seeds)
    params = parsed(args.param)
    for tier in TIERS:
        arena = Arena(tier, None, args.seat, Population.default(tier).with_agent(ALLOCATOR, args.allocator, **params))
        welfare = [e[ALLOCATOR]["return"] for e in arena.episodes(arena.policies[args.seat], seeds)]
        mean, ci = mean_ci95(welfare)
        print(f"{args.allocator} {params or ''} {tier}: welfare {mean:+.1f} ± {ci:.1f}")
    arena = Arena(args.scenario, None, args.seat, Population.default(args.scenario).with_agent(ALLOCATOR, args.allocator,
                                                                                                **params))
    truthful = arena.coded("bluff", code_of(1.0, "escalate_2"), seeds)
    for factor, stance in CODES:
        gain, ci = paired_difference(arena.coded("bluff", code_of(factor, stance), seeds), truthful)
        print(f"{args.scenario} {args.seat} x{factor:g}, {stance}: {gain:+.1f} ± {ci:.1f} over truthful")


if __name__ == "__main__":
    main(tyro.cli(Args))
