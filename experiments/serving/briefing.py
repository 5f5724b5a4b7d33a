"""Text seats for language models: a briefing per role, and a parser for free-text answers.

:func:`render_briefing` turns a seat's observation (named fields) into plain text: who the
seat is, the scenario's public facts (tiers, teams, horizon, budget, carbon cap), what it
sees this tick, and the action format with every part's allowed range and an example.
It reads nothing but the seat's own observation and those public facts: never the
teams' job lists, true needs or another seat's observation (what the seat may know).

:func:`parse_text_action` extracts the action from a model's free text: a fenced
````json`` block if there is one, otherwise the last ``{...}`` object in the text that
decodes as JSON. What it finds is then checked like any structured action
(:func:`experiments.serving.wire.decode_action`); a text with no JSON object is a
:class:`~experiments.serving.wire.ActionError` with code ``UNPARSEABLE_TEXT``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from experiments.serving.wire import STANCES, ActionError, Part, SeatSpec, encode_action

ROLE_INTRO = {
    "allocator": (
        "You are the ALLOCATOR of a shared GPU cluster. Each tick you grant GPUs per (team, tier) for this "
        "tick and may buy spot GPUs from the broker's visible offer. Teams declare what they need, but may "
        "overstate it. You are paid for the value of completed jobs and pay for spend, missed jobs, idle "
        "GPUs, carbon over the cap, justified escalations and unfairness. Grants above the GPUs you have "
        "(online + bought) are cut and count as invalid units."
    ),
    "team": (
        "You are a PRODUCT TEAM competing for GPUs. Each tick you declare the GPUs per tier you need for the "
        "NEXT tick, and take a stance on the grant you received last tick (accept, counter, escalate). You "
        "are paid for your completed jobs and lose credibility when an audit exposes a bluff or an "
        "escalation was not justified (you were not starved)."
    ),
    "broker": (
        "You are the SPOT BROKER. Each tick you offer GPUs per tier for the next tick at a price level per "
        "tier (price = max_price x level / (levels - 1)). You earn the price minus your unit cost on every "
        "GPU the allocator buys; offering more than your inventory is cut and counted as invalid."
    ),
}


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _field_text(part: Part, value: Any) -> str:
    if not part.axes:
        return _fmt(float(value))
    if len(part.axes) == 1:
        return ", ".join(f"{label} {_fmt(float(v))}" for label, v in zip(part.labels[0], value, strict=True))
    rows = [f"{row_label}: " + ", ".join(f"{label} {_fmt(float(v))}" for label, v in zip(part.labels[1], row, strict=True))
            for row_label, row in zip(part.labels[0], value, strict=True)
            if part.name != "jobs" or row[0]]  # empty job slots say nothing
    return "; ".join(rows) or "none"


def _range_text(part: Part) -> str:
    if not part.axes:
        lo, hi = int(part.low[0]), int(part.high[0])
        extra = f" (or one of {', '.join(STANCES)})" if part.name == "stance" else ""
        return f"one integer in [{lo}, {hi}]{extra}"
    if len(part.axes) == 1:
        bounds = ", ".join(f"{label} 0..{int(hi)}" for label, hi in zip(part.labels[0], part.high, strict=True))
        return f"per {part.axes[0]}: {bounds}"
    inner = ", ".join(f"{label} 0..{int(hi)}" for label, hi in zip(part.labels[1], part.high[:len(part.labels[1])],
                                                                       strict=True))
    return f"per {part.axes[0]} ({', '.join(part.labels[0])}), per {part.axes[1]}: {inner}"


def public_facts(spec: SeatSpec) -> list[str]:
    """The scenario's public facts (hardware, teams, horizon, budget, carbon): no jobs, no needs."""
    cfg = spec.config
    lines = [f"Scenario {cfg.name}: {cfg.max_ticks} ticks; teams {', '.join(cfg.team_names)}; "
             f"allocator budget {_fmt(cfg.budget)}; carbon cap {_fmt(cfg.carbon.cap_kg)} kg ({cfg.carbon.mode})."]
    if spec.role == "broker":
        lines.append(f"Price levels 0..{cfg.price_levels - 1}; price = max_price x level / {cfg.price_levels - 1}.")
    for t in cfg.gpu_tiers:
        lines.append(f"  tier {t.name}: {t.owned} owned, {_fmt(t.memory_gb)} GB, speed {_fmt(t.speed)}, "
                     f"spot inventory {t.spot_inventory}, max price {_fmt(t.max_price)}")
    return lines


def render_briefing(spec: SeatSpec, observation: dict[str, Any], reward: float | None = None,
                    invalid: str | None = None) -> str:
    """The seat's briefing for this tick (see the module docstring for what it may contain)."""
    lines = [ROLE_INTRO[spec.role], ""]
    if spec.role == "team":
        lines.append(f"Your team is {spec.seat}.")
    lines += public_facts(spec)
    lines += ["", f"Tick {int(observation['tick'])} of {spec.config.max_ticks}. What you see:"]
    lines += [f"- {p.name} ({p.doc}): {_field_text(p, observation[p.name])}" for p in spec.observations
              if p.name != "tick"]
    if reward is not None:
        lines.append(f"Your reward last tick: {reward:.3f}")
    if invalid:
        lines.append(f"Your last answer was not a valid action: {invalid}")
    lines += ["", "Answer with ONE JSON object, the action, with these parts (a missing part or entry is 0):"]
    lines += [f"- {p.name}: {p.doc}; {_range_text(p)}" for p in spec.actions]
    example = encode_action(spec, [0] * spec.action_size)
    lines.append("Example (do nothing): " + json.dumps(example, separators=(", ", ": ")))
    return "\n".join(lines)


_FENCE = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.S)


def _objects(text: str) -> list[Any]:
    """Every JSON object that starts at some ``{`` of ``text`` and decodes, outermost first."""
    decoder, found, i = json.JSONDecoder(), list[Any](), 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return found
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(value, dict):
            found.append(value)
        i = end


def parse_text_action(spec: SeatSpec, text: Any) -> dict[str, Any]:
    """The JSON action inside a model's free text (not yet range-checked), or ActionError."""
    if not isinstance(text, str):
        raise ActionError(f"a text action must be a string, got {type(text).__name__}", "text")
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    candidates = []
    for block in fenced:
        try:
            value = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            candidates.append(value)
    candidates += _objects(text)
    parts = {p.name for p in spec.actions}
    # prefer an object made of action parts; an answer may mention other JSON first
    for value in reversed(candidates):
        if value and set(value) <= parts:
            return value
    raise ActionError(
        "no JSON action found in the text: answer with one JSON object with parts "
        f"{sorted(parts)}" + (f"; objects found had keys {sorted(set().union(*candidates))}" if candidates else ""),
        "text",
        code="UNPARSEABLE_TEXT",
    )


__all__ = ["ROLE_INTRO", "parse_text_action", "public_facts", "render_briefing"]
