"""Text seats for language models: a briefing per role, and a parser for free-text answers.

:func:`render_briefing` turns a seat's observation (named fields) into plain text: who the
seat is, the scenario's public facts (tiers, teams, horizon, budget, carbon cap), what it
sees this tick, and the action format with every part's allowed range and an example.
It reads nothing but the seat's own observation and those public facts: never the
teams' job lists, true needs or another seat's observation (what the seat may know).

:func:`parse_text_action` extracts the action from a model's free text: a fenced
````json`` block if there is one, otherwise the last ``{...}`` object in the text that
decodes as JSON. What it finds is then checked like any structured action
(:func:`serving.wire.decode_action`); a text with no JSON object is a
:class:`~serving.wire.ActionError` with code ``UNPARSEABLE_TEXT``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from commons_arena.inputs import too_deep
from serving.explain import LAG_RULE, PLACEMENT_RULE, placement_lines, tier_cost_lines, tier_costs
from serving.wire import STANCES, ActionError, Part, SeatSpec, encode_action, strict_json

ROLE_INTRO = {
    "allocator": (
        "You are the ALLOCATOR of a shared GPU cluster. Each tick you grant GPUs per (team, tier) for this "
        "tick and may buy spot GPUs from the broker's visible offer. Teams declare what they need, but may "
        "overstate it (bluff)."
    ),
    "team": (
        "You are a PRODUCT TEAM competing for GPUs. Each tick you declare the GPUs per tier you need for the "
        "NEXT tick, and take a stance on the grant you received last tick (accept, counter, escalate)."
    ),
    "broker": (
        "You are the SPOT BROKER. Each tick you offer GPUs per tier for the next tick at a price level per "
        "tier; the allocator buys from that offer a tick later."
    ),
}
# What each reward term means: ("gain" or "cost", plain words). docs/rules.md section 8; the text briefing and
# the play page (/play/spec) both read it, so a person and a language model are told the same.
REWARD_TERMS: dict[str, dict[str, tuple[str, str]]] = {
    "allocator": {
        "job_value": ("gain", "value of the jobs completed this tick"),
        "spend": ("cost", "spot GPUs bought plus the operating cost of every GPU granted"),
        "missed": ("cost", "value of the jobs that missed their deadline"),
        "idle": ("cost", "GPUs granted that no job used"),
        "carbon": ("cost", "kg CO2 over the carbon cap (soft cap; a hard cap cuts grants instead)"),
        "escalation": ("cost", "board pressure of each justified escalation (a team you starved complained)"),
        "fairness": ("cost", "unfairness: 1 minus Jain's index of the teams' satisfaction"),
        "invalid": ("cost", "units of your action that were cut (over the offer, the budget or the GPUs available)"),
    },
    "team": {
        "job_value": ("gain", "value of your jobs completed this tick"),
        "missed": ("cost", "value of your jobs that missed their deadline"),
        "credibility": ("cost", "credibility lost: a bluff exposed by an audit, or an escalation when you were "
                                "not starved"),
    },
    "broker": {
        "profit": ("gain", "GPUs sold x (price - your unit cost)"),
        "invalid": ("cost", "GPUs offered above your inventory (they are cut)"),
    },
}
# The episode's totals (infos[seat]["episode"], commons_arena/ledger.py): which are costs, which gains.
EPISODE_STATS: dict[str, tuple[str, str]] = {
    "return": ("score", "your score: the sum of your rewards"),
    "completed": ("gain", "jobs completed"),
    "missed": ("cost", "jobs missed"),
    "completed_value": ("gain", "value of the jobs completed"),
    "missed_value": ("cost", "value of the jobs missed"),
    "spend": ("cost", "money spent: spot purchases plus operating cost"),
    "purchased_gpus": ("count", "spot GPUs bought"),
    "granted_gpu_ticks": ("count", "GPU-ticks granted"),
    "used_gpu_ticks": ("gain", "GPU-ticks that ran a job"),
    "idle_gpu_ticks": ("cost", "GPU-ticks granted and unused"),
    "invalid_units": ("cost", "units of the allocator's actions that were cut"),
    "carbon_kg": ("cost", "kg CO2 emitted"),
    "justified_escalations": ("cost", "escalations by starved teams (the allocator pays)"),
    "unjustified_escalations": ("cost", "escalations by teams that were not starved (they lose credibility)"),
    "exposed_bluffs": ("cost", "declarations an audit found above the true need"),
    "fairness": ("gain", "mean Jain index of the teams' satisfaction (1 is fair)"),
    "utilisation": ("gain", "share of GPU capacity that ran jobs"),
    "ticks": ("count", "ticks played"),
}
ROLE_NOTES = {
    "allocator": (
        "Grants above the GPUs available in a tier (online + bought this tick) are cut, and each unit cut counts "
        "as invalid; so are buys above the offer or the budget.",
        "A team's declaration may be a bluff: an audit exposes it (the team loses credibility), and a team starved "
        "{reveal_after} ticks in a row has its true need revealed to you (revealed_need).",
        "Stances are the teams' answers to your last grant: accept; counter (a signal only, it changes nothing); "
        "escalate (if you starved that team last tick you pay its board pressure).",
    ),
    "team": (
        "Stance on last tick's grant: accept; counter (a signal only, it changes nothing); escalate (complain to "
        "the board: if you were starved last tick the allocator pays, if not you lose credibility). At tick 0 "
        "there is no grant yet and the stance has no effect.",
        "You may declare more than you need (bluff), but an audit that finds your declared total above your need "
        "(plus a tolerance) costs you credibility. Starved {reveal_after} ticks in a row, your true need is shown "
        "to the allocator.",
    ),
    "broker": (
        "Price = max_price x level / {top_level} (times any crisis multiplier). An offer above your inventory is "
        "cut and counted as invalid.",
    ),
}
# Observation fields whose layout doc is not plain enough for a reader (same key for every role that has it).
PLAIN_FIELD_DOCS = {
    "budget": "money left for spot purchases, for the rest of the episode",
    "offer_price": "price per GPU of the broker's offer, crisis multipliers included",
    "intensity_forecast": "grid carbon intensity, kg CO2 per kWh: this tick, then the next ones",
    "stance": "each team's stance on your last grant, 1 marking it: accept, counter (a signal only) or escalate",
    "revealed_need": "true need of the teams revealed so far, 0 for the others",
    "inventory": "GPUs you may offer now; a market crisis shrinks it",
    "pressure": "public pressure on each team: 0 low, 1 medium, 2 high",
    "jobs": "your most urgent unresolved jobs, one row per slot, empty slots all 0",
}
# The job table's columns with their units (commons_arena.spaces.JOB_SLOT_FIELDS, in that order).
JOB_COLUMNS = {
    "present": "1 if the slot holds a job",
    "gpus": "GPUs the job runs on",
    "min_memory_gb": "GB of memory each GPU needs at least",
    "remaining_work": "work units left (a GPU does its tier's speed in units per tick)",
    "ticks_to_deadline": "ticks left before its deadline",
    "value": "reward when it completes (a cost when missed)",
    "priority": "higher runs first among jobs with the same deadline",
    "ready": "1 if it has arrived and its dependencies are done",
}
DECLARATION_FIELDS = {"allocator": "declared", "team": "others_declared", "broker": "demand"}
# What each role can check before acting (the preview: POST /preview, the MCP tool preview, the page's live line).
PREVIEW_NOTES = {
    "allocator": ("Before you act you can preview an action: spend = spot GPUs bought x their price + every granted "
                  "GPU x its tier's operating cost; carbon = busy GPUs x power x intensity (over the cap it costs, soft "
                  "cap); idle = granted GPUs no job uses (a GPU granted beyond a team's declaration on that tier is "
                  "usually idle)."),
    "team": ("Before you act you can preview a request: where each of your jobs would run on it, by the placement "
             "rule, and how many requested GPUs would sit idle."),
    "broker": "Before you act you can preview an offer: its prices, what is cut, the profit if everything sells.",
}
# The references an ended episode is compared with live in serving/seat_references.py (REFERENCES).


def split_totals(episode: dict[str, Any]) -> dict[str, dict[str, float]]:
    """An episode summary split into the seat's own totals (its return and reward terms) and the whole episode's
    statistics (every team's jobs, all GPUs, all carbon): a team's summary must not mix the two."""
    yours = {k: v for k, v in episode.items() if k == "return" or k.startswith("term/")}
    rest = {k: v for k, v in episode.items() if k not in yours}
    return {"yours": yours, "episode": rest}


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def field_doc(part: Part) -> str:
    """The plain description of an observation field (one source for the briefing and the play page)."""
    return PLAIN_FIELD_DOCS.get(part.name, part.doc)


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
             f"the allocator's budget for spot purchases {_fmt(cfg.budget)} (the whole episode); "
             f"carbon cap {_fmt(cfg.carbon.cap_kg)} kg CO2 ({cfg.carbon.mode}: "
             + ("grants are cut to stay under it)." if cfg.carbon.mode == "hard" else "emissions over it cost).")]
    if spec.role == "broker":
        lines.append(f"Price levels 0..{cfg.price_levels - 1}; price = max_price x level / {cfg.price_levels - 1}.")
    for t in cfg.gpu_tiers:
        lines.append(f"  tier {t.name}: {t.owned} owned, {_fmt(t.memory_gb)} GB, speed {_fmt(t.speed)} work units "
                     f"per GPU-tick, spot inventory {t.spot_inventory}, max price {_fmt(t.max_price)}")
    return lines


def seat_guide(spec: SeatSpec) -> dict[str, Any]:
    """What the seat is for and how it is scored, as data: the text briefing and the play page both show it."""
    cfg = spec.config
    weights = getattr(cfg.rewards, spec.role)
    scoring = [{"term": name, "kind": kind, "weight": float(getattr(weights, name)), "meaning": meaning}
               for name, (kind, meaning) in REWARD_TERMS[spec.role].items()]
    notes = [note.format(reveal_after=cfg.reveal_after, top_level=cfg.price_levels - 1)
             for note in ROLE_NOTES[spec.role]]
    return {"purpose": ROLE_INTRO[spec.role], "scoring": scoring, "notes": notes, "facts": public_facts(spec),
            "fields": {p.name: field_doc(p) for p in spec.observations},
            "job_columns": JOB_COLUMNS, "episode_stats": EPISODE_STATS,
            "declarations_at_tick0": _declarations_note(spec),
            "description": " ".join(cfg.description.split()), "placement": PLACEMENT_RULE, "lag": LAG_RULE[spec.role],
            "tiers": tier_costs(spec, {}), "preview": PREVIEW_NOTES[spec.role]}


def _declarations_note(spec: SeatSpec) -> str:
    field = DECLARATION_FIELDS[spec.role]
    return (f"At tick 0 {field} is all 0: teams declare for the NEXT tick, so the first declarations arrive at "
            "tick 1. The spot offer is 0 too: the broker's first offer, posted at tick 0, is for tick 1.")


def keyed_example(spec: SeatSpec) -> dict[str, Any]:
    """An action written as objects keyed by label (entries left out are 0), e.g. {"grant": {"search": {...}}}."""
    out: dict[str, Any] = {}
    for p in spec.actions:
        hi = int(p.high[0])
        if not p.axes:
            out[p.name] = STANCES[0] if p.name == "stance" else min(1, hi)
        elif len(p.axes) == 1:
            out[p.name] = {p.labels[0][0]: min(1, hi)}
        else:
            out[p.name] = {p.labels[0][0]: {p.labels[1][0]: min(2, hi)}}
    return out


def _scoring_lines(guide: dict[str, Any]) -> list[str]:
    lines = ["How you are scored (each tick's reward is the sum of these terms, each times its weight):"]
    for row in guide["scoring"]:
        sign = "+" if row["kind"] == "gain" else "-"
        lines.append(f"  {sign} {row['term']} (x{_fmt(row['weight'])}): {row['meaning']}")
    return lines


def render_briefing(spec: SeatSpec, observation: dict[str, Any], reward: float | None = None,
                    invalid: str | None = None) -> str:
    """The seat's briefing for this tick (see the module docstring for what it may contain)."""
    guide = seat_guide(spec)
    lines = [guide["purpose"], *_scoring_lines(guide), *guide["notes"], ""]
    if spec.role == "team":
        lines.append(f"Your team is {spec.seat}.")
    lines += guide["facts"]
    lines.append(f"About this scenario: {guide['description']}")
    lines += ["", *tier_cost_lines(spec, observation), *placement_lines(spec, observation), guide["preview"]]
    tick = int(observation["tick"])
    lines += ["", f"Tick {tick} of {spec.config.max_ticks}. What you see:"]
    for p in spec.observations:
        if p.name == "tick":
            continue
        doc = guide["fields"][p.name]
        if p.name == "jobs":
            doc += "; columns: " + "; ".join(f"{name} = {meaning}" for name, meaning in JOB_COLUMNS.items())
        lines.append(f"- {p.name} ({doc}): {_field_text(p, observation[p.name])}")
    if tick == 0:
        lines.append(guide["declarations_at_tick0"])
    if reward is not None:
        lines.append(f"Your reward last tick: {reward:.3f}")
    if invalid:
        lines.append(f"Your last answer was not a valid action: {invalid}")
    lines += ["", "Answer with ONE JSON object, the action, with these parts (a missing part or entry is 0):"]
    lines += [f"- {p.name}: {p.doc}; {_range_text(p)}" for p in spec.actions]
    example = encode_action(spec, [0] * spec.action_size)
    lines.append("Each part is nested lists in the order above, or an object keyed by name where entries left out "
                 "are 0. Both of these are actions:")
    lines.append("  " + json.dumps(example, separators=(", ", ": ")) + "   (do nothing)")
    lines.append("  " + json.dumps(keyed_example(spec), separators=(", ", ": ")))
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
        except (ValueError, RecursionError):  # 1,200 nested "[" inside braces: not an action, like any bad JSON
            if levels:
                found += [(v, fenced or inner) for v, inner in _objects(text, begin + 1, end - 1, levels - 1)]
            continue
        if isinstance(value, dict) and not too_deep(value, MAX_TEXT_DEPTH):
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


__all__ = ["MAX_TEXT_CHARS", "MAX_TEXT_DEPTH", "MAX_TEXT_OBJECTS", "ROLE_INTRO", "parse_text_action", "public_facts", "render_briefing",
           "split_totals"]
