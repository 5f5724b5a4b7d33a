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

from experiments.serving.wire import STANCES, ActionError, Part, SeatSpec, encode_action, strict_json

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


MAX_TEXT_CHARS = 8_192
"""longest text action (characters); a model's answer is a few hundred"""
MAX_TEXT_DEPTH = 32
"""deepest brace nesting scanned in a text action (an action nests 3 deep)"""
MAX_TEXT_OBJECTS = 32
"""most ``{...}`` groups looked at in a text action"""
MAX_RESTARTS = 4  # unclosed braces the scanner steps past before it gives up
_TOKEN = re.compile(r'[{}"]|```')  # what the scanner stops at
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*"', re.S)  # the rest of a JSON string: one way to match, linear


def _spans(text: str, start: int, stop: int) -> list[tuple[int, int, bool]]:
    """The outermost balanced ``{...}`` spans of ``text[start:stop]`` as (start, end, fenced), in one pass.

    Quotes count only inside braces (prose may hold a stray one); a fence is a ``````` outside
    braces. After an unclosed ``{`` the scan restarts past it (at most :data:`MAX_RESTARTS`
    times). Nesting deeper than :data:`MAX_TEXT_DEPTH` is an error: the work stays linear."""
    spans: list[tuple[int, int, bool]] = []
    depth, opened, fenced, opened_fenced, restarts = 0, -1, False, False, 0
    pos = start
    while True:
        match = _TOKEN.search(text, pos, stop)
        if match is None:
            if not depth or restarts == MAX_RESTARTS:
                return spans
            # an unclosed brace: what follows it may still hold the action
            depth, pos, restarts = 0, opened + 1, restarts + 1
            continue
        token, pos = match.group(), match.end()
        if depth == 0:
            if token == "```":
                fenced = not fenced
            elif token == "{":
                depth, opened, opened_fenced = 1, match.start(), fenced
        elif token == '"':  # a string inside braces: skip to its end in one step
            string = _STRING_REST.match(text, pos, stop)
            pos = string.end() if string else stop
        elif token == "{":
            depth += 1
            if depth > MAX_TEXT_DEPTH:
                raise ActionError(f"the text nests braces deeper than {MAX_TEXT_DEPTH}; answer with one flat "
                                  "JSON action", "text", code="UNPARSEABLE_TEXT")
        elif token == "}":
            depth -= 1
            if depth == 0:
                spans.append((opened, pos, opened_fenced))
                if len(spans) > MAX_TEXT_OBJECTS:
                    raise ActionError(f"the text holds more than {MAX_TEXT_OBJECTS} brace groups; answer with one "
                                      "JSON action", "text", code="UNPARSEABLE_TEXT")


def _objects(text: str, start: int, stop: int, levels: int = 2) -> list[tuple[dict[str, Any], bool]]:
    """Every outermost JSON object of ``text[start:stop]`` that decodes, looking inside those that do not
    (prose in braces around the action) ``levels`` deep: each level is one more linear pass."""
    found: list[tuple[dict[str, Any], bool]] = []
    for begin, end, fenced in _spans(text, start, stop):
        try:
            value = strict_json(text[begin:end])
        except ValueError:
            if levels:
                found += [(v, fenced or inner) for v, inner in _objects(text, begin + 1, end - 1, levels - 1)]
            continue
        if isinstance(value, dict):
            found.append((value, fenced))
    return found


def parse_text_action(spec: SeatSpec, text: Any) -> dict[str, Any]:
    """The one JSON action inside a model's free text (not yet range-checked), or ActionError.

    An object made of the seat's action parts is an action; other JSON (a plan, notes) is
    ignored. Actions inside a ``````` fence win over actions outside one. Two different
    actions are an error naming both: the server does not guess which one was meant."""
    if not isinstance(text, str):
        raise ActionError(f"a text action must be a string, got {type(text).__name__}", "text")
    if len(text) > MAX_TEXT_CHARS:
        raise ActionError(f"the text has {len(text)} characters, over the limit of {MAX_TEXT_CHARS}", "text",
                          code="TEXT_TOO_LONG")
    candidates = _objects(text, 0, len(text))
    parts = {p.name for p in spec.actions}
    actions = [(value, fenced) for value, fenced in candidates if value and set(value) <= parts]
    if any(fenced for _, fenced in actions):
        actions = [(value, fenced) for value, fenced in actions if fenced]
    distinct: list[dict[str, Any]] = []
    for value, _ in actions:
        if value not in distinct:
            distinct.append(value)
    if len(distinct) == 1:
        return distinct[0]
    if len(distinct) > 1:
        shown = " and ".join(json.dumps(v, separators=(",", ":"))[:200] for v in distinct[:2])
        raise ActionError(f"the text holds {len(distinct)} different JSON actions ({shown}); answer with exactly "
                          "one", "text", code="AMBIGUOUS_TEXT")
    keys = sorted(set().union(*(v for v, _ in candidates))) if candidates else []
    raise ActionError(
        "no JSON action found in the text: answer with one JSON object with parts "
        f"{sorted(parts)}" + (f"; objects found had keys {keys[:20]}" if keys else ""),
        "text",
        code="UNPARSEABLE_TEXT",
    )


__all__ = ["MAX_TEXT_CHARS", "MAX_TEXT_DEPTH", "MAX_TEXT_OBJECTS", "ROLE_INTRO", "parse_text_action", "public_facts", "render_briefing"]
