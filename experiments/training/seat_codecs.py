"""Which action codec each learning seat acts through (docs/codecs.md, docs/negotiation.md).

``--action-codec`` keeps meaning the allocator's codec; ``--seat-codec KEY=CODEC ...`` names
any learning seat's, by seat (``search=bluff_per_tier``) or role (``team=bluff``,
``broker=markup``, ``allocator=need``); a seat key wins over its role key, and ``none`` is
raw actions. A learning team or broker seat named nowhere gets ``DEFAULT_CODECS``'s codec.
Everything is checked here (``check_codec``: a team codec on the allocator seat is refused,
naming the right ones) before Ray starts or anything is written.

A league's team seats stay raw: its scripted members play those seats through the same env
interface, and a codec would decode their raw actions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import role_of
from experiments.training.seats import SeatPlan
from policies.codecs import DEFAULT_CODECS, check_codec

RAW = "none"
ROLE_KEYS = ("allocator", "team", "broker")


def parse_seat_codecs(pairs: Sequence[str]) -> dict[str, str]:
    """``["search=bluff", "broker=markup"]`` -> ``{"search": "bluff", "broker": "markup"}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, name = pair.partition("=")
        if not sep or not key or not name:
            raise ValueError(f"--seat-codec takes KEY=CODEC (a seat or role, e.g. search=bluff or team=bluff), got {pair!r}")
        if key in out:
            raise ValueError(f"--seat-codec names {key!r} twice")
        out[key] = name
    return out


def seat_codecs(config: ScenarioConfig, plan: SeatPlan, allocator_codec: str | None, pairs: Sequence[str],
                league: bool = False) -> dict[str, str]:
    """Learning seat -> codec name (raw seats left out); ValueError naming what to fix."""
    chosen = parse_seat_codecs(pairs)
    unknown = [k for k in chosen if k not in ROLE_KEYS and k not in config.agents]
    if unknown:
        raise ValueError(f"--seat-codec: unknown seat or role {unknown[0]!r} for scenario {config.name!r}; "
                         f"name a seat {list(config.agents)} or a role {list(ROLE_KEYS)}")
    idle = [k for k in chosen if k not in ROLE_KEYS and k not in plan.seats]
    if idle:
        raise ValueError(f"--seat-codec: seat {idle[0]!r} does not learn in this run (learning: {plan.seats})")
    out: dict[str, str] = {}
    for seat in plan.seats:
        role = role_of(config, seat)
        default = allocator_codec if role == ALLOCATOR else (None if league else DEFAULT_CODECS[role])
        name = chosen.get(seat, chosen.get(role, default or RAW))
        if name == RAW:
            continue
        if league and role == "team":
            raise ValueError(f"--seat-codec {seat}={name}: a league's team seats act in raw actions (its scripted "
                             "members play them too); use none")
        check_codec(name, config, seat)  # unknown, or another role's codec: names the right ones
        out[seat] = name
    for module, seats in plan.modules.items():
        names = {out.get(seat, RAW) for seat in seats}
        if len(names) > 1:
            raise ValueError(f"--seat-codec: the shared module {module!r} plays {seats} with different codecs "
                             f"{sorted(names)}; give them one (e.g. team=bluff) or use --team-modules per_team")
    return out


def codec_summary(codecs: Mapping[str, str], plan: SeatPlan) -> str:
    return ", ".join(f"{seat}: {codecs.get(seat, RAW)}" for seat in plan.seats)


__all__ = ["RAW", "codec_summary", "parse_seat_codecs", "seat_codecs"]
