"""What a choice costs, where a job runs, what an action would do: one source for every seat.

The play page (``/play/spec`` and ``POST /preview``), the text briefing
(:func:`serving.briefing.render_briefing`) and the MCP tools (``preview``) all read this
module, so a person, a program and a language model are told the same numbers:

* :func:`tier_costs`: per tier, what one granted GPU costs this tick (operating cost:
  spend; power x this tick's published grid intensity: kg CO2 when it runs) and what a
  spot GPU costs now;
* :func:`placement`: the placement rule (docs/rules.md section 4) and, for a team, which
  tier each of its visible jobs runs on;
* :func:`default_action`: the entries the page's form starts from each tick (a move a person can
  play as is: the allocator's is ``proportional``'s, a team's is its true need within its range);
* :func:`preview`: what the pending action would do this tick, before it is sent:
  spend, carbon, grants beyond the declarations and the reward terms they make, for the allocator; where each
  job would run next tick (when the request is granted: a job due this tick is left out) and how many
  requested GPUs would sit idle, for a team; prices, cuts and
  profit if everything sells, for the broker.

Everything here reads the seat's own observation and the scenario's public facts only
(what the seat may know), never hidden state; so the allocator's preview gives no idle
figure (which granted GPUs sit idle depends on the teams' true jobs: declarations lag a
tick and may be bluffs), only the GPUs granted beyond a team's declaration. Nothing
here runs on the WebSocket step path: a preview is computed when asked.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from commons_arena.batched.tick import repair_purchases_rows
from policies.base import Policy
from policies.registry import make_policy
from serving.wire import SeatSpec, decode_action, encode_action

PLACEMENT_RULE = ("A job runs only with ALL its GPUs at once on ONE tier whose memory per GPU fits it; among the "
                  "fitting tiers with enough GPUs left it takes the one with the least memory (so GPUs of two "
                  "tiers never add up for one job, and a GPU no job can use sits idle).")
LAG_RULE = {
    "allocator": ("Declaration lag: the declared needs you see were sent LAST tick, from the teams' jobs then; a job "
                  "that arrived since is not in them. A grant equal to the declaration can still starve a team, and "
                  "a team starved this tick that escalates next tick costs you its board pressure."),
    "team": ("Declaration lag: your request is for the NEXT tick; the allocator decides this tick's grant from what "
             "you declared last tick. A job that arrives now can only be asked for from the next tick on."),
    "broker": ("Offer lag: the offer you post now is bought from next tick; the demand you see is the teams' "
               "declarations for this tick."),
}


def _tiers(spec: SeatSpec) -> tuple[Any, ...]:
    return spec.config.gpu_tiers


def fitting_tier(spec: SeatSpec, min_memory_gb: float) -> int | None:
    """The smallest tier whose memory fits ``min_memory_gb`` (ties: the lower tier), or None."""
    tiers = _tiers(spec)
    order = sorted(range(len(tiers)), key=lambda i: (tiers[i].memory_gb, i))
    return next((i for i in order if tiers[i].memory_gb >= min_memory_gb), None)


def _fits(spec: SeatSpec, min_memory_gb: float) -> list[int]:
    tiers = _tiers(spec)
    order = sorted(range(len(tiers)), key=lambda i: (tiers[i].memory_gb, i))
    return [i for i in order if tiers[i].memory_gb >= min_memory_gb]


def intensity_now(spec: SeatSpec, observation: dict[str, Any]) -> float | None:
    """This tick's published grid intensity (kg CO2 per kWh) if the seat sees it (the allocator), else None."""
    forecast = observation.get("intensity_forecast")
    if forecast is None:
        return None
    return float(forecast[0] if isinstance(forecast, list) else forecast)


def tier_costs(spec: SeatSpec, observation: dict[str, Any]) -> list[dict[str, Any]]:
    """Per tier: memory, speed, and what one granted GPU costs this tick (see the module docstring)."""
    intensity = intensity_now(spec, observation)
    prices = observation.get("offer_price")
    offered = observation.get("offer_qty")
    rows = []
    for k, t in enumerate(_tiers(spec)):
        row: dict[str, Any] = {"tier": t.name, "memory_gb": t.memory_gb, "speed": t.speed, "op_cost": t.op_cost,
                               "power_kw": t.power_kw}
        if intensity is not None:
            row["kg_co2_if_busy"] = round(t.power_kw * intensity, 4)
        if prices is not None and offered is not None:
            row["spot_price"] = float(prices[k])
            row["spot_offered"] = int(offered[k])
        rows.append(row)
    return rows


def tier_cost_lines(spec: SeatSpec, observation: dict[str, Any]) -> list[str]:
    """:func:`tier_costs` as text: one line per tier, with the formula and this tick's numbers."""
    intensity = intensity_now(spec, observation)
    head = "What one GPU costs per tick, per tier (spend = operating cost of every GPU granted, used or not"
    head += (f"; carbon = power kW x this tick's intensity {intensity:.3g} kg/kWh when a job runs on it):"
             if intensity is not None else "):")
    lines = [head]
    for row in tier_costs(spec, observation):
        text = (f"  {row['tier']}: {row['memory_gb']:g} GB, speed {row['speed']:g}; operating cost {row['op_cost']:g}, "
                f"power {row['power_kw']:g} kW")
        if "kg_co2_if_busy" in row:
            text += f" -> {row['kg_co2_if_busy']:.3g} kg CO2 if busy"
        if row.get("spot_offered"):
            text += f"; spot: {row['spot_offered']} offered at {row['spot_price']:.3g} each"
        lines.append(text)
    return lines


# --------------------------------------------------------------------------- placement
def _job_rows(observation: dict[str, Any]) -> list[dict[str, Any]]:
    """The team's visible jobs as dicts (``present`` rows only), in the observation's (EDF) order."""
    from commons_arena.spaces import JOB_SLOT_FIELDS

    rows = []
    for i, row in enumerate(observation.get("jobs") or []):
        if row[0]:
            rows.append({"slot": f"slot{i}", **{name: float(v) for name, v in zip(JOB_SLOT_FIELDS, row, strict=True)}})
    return rows


def placement(spec: SeatSpec, observation: dict[str, Any]) -> dict[str, Any]:
    """The placement rule, and for a team where each visible job runs (its smallest fitting tier)."""
    out: dict[str, Any] = {"rule": PLACEMENT_RULE, "lag": LAG_RULE[spec.role]}
    if spec.role == "team":
        names = spec.config.tier_names
        jobs = []
        for job in _job_rows(observation):
            tier = fitting_tier(spec, job["min_memory_gb"])
            jobs.append({"slot": job["slot"], "gpus": int(job["gpus"]), "tier": None if tier is None else names[tier],
                         "ready": bool(job["ready"]), "ticks_to_deadline": int(job["ticks_to_deadline"]),
                         "value": job["value"]})
        out["jobs"] = jobs
    return out


def placement_lines(spec: SeatSpec, observation: dict[str, Any]) -> list[str]:
    info = placement(spec, observation)
    lines = [f"Placement: {info['rule']}", info["lag"]]
    if spec.role == "team":
        jobs = info["jobs"]
        lines.append("Your jobs' tiers: " + ("; ".join(
            f"{j['slot']} {j['gpus']} GPU(s) on {j['tier'] or 'no tier fits'}" + ("" if j["ready"] else " (not ready)")
            for j in jobs) if jobs else "no job waiting"))
    return lines


# --------------------------------------------------------------------------- the form's default
DEFAULT_RULES = {
    "allocator": ("Each tick the entries start from proportional's move (a reference on the end screen): buy the "
                  "shortfall between the teams' declarations and the GPUs online from the cheapest offer, paced over "
                  "the budget; grant each team its declaration, or, where a tier is asked for more than it has, "
                  "shares proportional to the declarations that hand out every GPU of the tier (largest "
                  "remainder). At tick 0 no team has declared yet, so it grants nothing."),
    "team": ("Each tick the entries start from: request = your true need this tick (a truthful declaration), "
             "lowered to the most a request may ask where the need is more; stance accept."),
    "broker": "Each tick the entries start from: quantity = your whole inventory; price level = the middle of the grid.",
}


_PROPORTIONAL: dict[tuple[str, str], Policy] = {}


def _proportional(spec: SeatSpec) -> Policy:
    """``proportional`` for the seat, built once per scenario content (it is deterministic and memoryless)."""
    key = (spec.config.content_hash, spec.seat)
    if key not in _PROPORTIONAL:
        _PROPORTIONAL[key] = make_policy("proportional", spec.config, spec.seat)
    return _PROPORTIONAL[key]


def default_action(spec: SeatSpec, observation: dict[str, Any], vector: np.ndarray) -> dict[str, Any]:
    """The form's starting entries this tick (``action``, named), what rule made them (``rule``) and what
    was changed to keep them in range (``notes``); ``vector`` is the seat's flat observation."""
    notes: list[str] = []
    if spec.role == "allocator":
        flat = [int(v) for v in np.asarray(_proportional(spec).act(vector)).tolist()]
    else:
        flat = [0] * spec.action_size
        for part in spec.actions:
            if spec.role == "team" and part.name == "request":
                want = [int(round(v)) for v in observation["need"]]
            elif spec.role == "broker" and part.name == "quantity":
                want = [int(round(v)) for v in observation["inventory"]]
            elif spec.role == "broker" and part.name == "price_level":
                want = [int(h) // 2 for h in part.high]
            else:
                continue
            for k, (value, high) in enumerate(zip(want, map(int, part.high), strict=True)):
                flat[part.start + k] = min(value, high)
                if value > high:
                    notes.append(f"{part.name}.{part.labels[0][k]}: {value} is more than this entry allows ({high}); "
                                 f"set to {high}")
    return {"action": encode_action(spec, flat), "rule": DEFAULT_RULES[spec.role], "notes": notes}


# --------------------------------------------------------------------------- preview
def _weights(spec: SeatSpec) -> Any:
    return getattr(spec.config.rewards, spec.role)


def _as_lists(spec: SeatSpec, flat: list[int]) -> dict[str, np.ndarray]:
    return {p.name: np.array(flat[p.start:p.start + p.size], dtype=np.int64).reshape(p.shape) for p in spec.actions}


def preview(spec: SeatSpec, observation: dict[str, Any], action: Any) -> dict[str, Any]:
    """What ``action`` (named JSON, checked like a step's) would do this tick (module docstring).

    Raises :class:`~serving.wire.ActionError` for an action the seat cannot play."""
    parts = _as_lists(spec, decode_action(spec, action))
    if spec.role == "allocator":
        out = _preview_allocator(spec, observation, parts)
    elif spec.role == "team":
        out = _preview_team(spec, observation, parts)
    else:
        out = _preview_broker(spec, observation, parts)
    out["lines"] = _lines(spec, out)
    out["tiers"] = tier_costs(spec, observation)
    return out


def _preview_allocator(spec: SeatSpec, obs: dict[str, Any], parts: dict[str, np.ndarray]) -> dict[str, Any]:
    cfg, w = spec.config, _weights(spec)
    names = cfg.tier_names
    price = np.asarray(obs["offer_price"], dtype=np.float64)
    offered = [int(q) for q in obs["offer_qty"]]
    purchase = repair_purchases_rows(parts["buy"].astype(np.int64)[None], np.array([offered], dtype=np.int64),
                                     price[None], np.array([float(obs["budget"])]))
    bought, buy_cost = purchase.bought[0], float(purchase.cost[0])
    offer_cut, budget_cut = int(purchase.offer_cut[0]), int(purchase.budget_cut[0])
    grant = parts["grant"]
    available = np.asarray(obs["online"], dtype=np.int64) + bought
    asked = grant.sum(axis=0)
    granted = np.minimum(asked, available)
    capacity_cut = int((asked - granted).sum())
    op_cost = np.array([t.op_cost for t in cfg.gpu_tiers])
    power = np.array([t.power_kw for t in cfg.gpu_tiers])
    operating = float(granted @ op_cost)
    intensity = intensity_now(spec, obs) or 0.0
    carbon_max = float(granted @ power) * intensity
    used, cap = float(obs["carbon_used"]), float(obs["carbon_cap"])
    over = max(0.0, used + carbon_max - cap) - max(0.0, used - cap)
    declared = np.asarray(obs["declared"], dtype=np.int64)
    beyond = int(np.maximum(grant - declared, 0).sum())
    short = [cfg.team_names[i] for i in range(len(cfg.team_names)) if (grant[i] < declared[i]).any()]
    invalid = offer_cut + budget_cut + capacity_cut
    spend = float(buy_cost) + operating
    terms = {"spend": -w.spend * spend, "invalid": -w.invalid * invalid}  # idle is not known before the tick
    hard = cfg.carbon.mode == "hard"
    if not hard:
        terms["carbon"] = -w.carbon * over
    return {
        "spend": round(spend, 6), "spot_cost": round(float(buy_cost), 6), "operating_cost": round(operating, 6),
        "bought": dict(zip(names, bought.tolist(), strict=True)),
        "granted": dict(zip(names, granted.tolist(), strict=True)),
        "carbon_kg_if_all_busy": round(carbon_max, 6), "carbon_over_cap_kg": round(over, 6), "carbon_mode": cfg.carbon.mode,
        "intensity": intensity, "beyond_declared": beyond, "idle_weight": w.idle, "short_of_declared": short,
        "declarations_yet": bool(declared.any()) or int(obs.get("tick", 0)) > 0,
        "invalid_units": {"over_offer": offer_cut, "over_budget": budget_cut, "over_capacity": capacity_cut},
        "reward_terms": {k: round(v, 6) + 0.0 for k, v in terms.items()},  # + 0.0: no -0
    }


def _preview_team(spec: SeatSpec, obs: dict[str, Any], parts: dict[str, np.ndarray]) -> dict[str, Any]:
    names = spec.config.tier_names
    free = parts["request"].astype(int).tolist()
    speeds = [t.speed for t in spec.config.gpu_tiers]
    jobs = []
    for job in _job_rows(obs):
        gpus, where = int(job["gpus"]), None
        # the request is next tick's grant: a job due this tick is past its deadline by then and takes no GPU of it
        due_now = int(job["ticks_to_deadline"]) < 1
        if job["ready"] and not due_now:
            for tier in _fits(spec, job["min_memory_gb"]):
                if free[tier] >= gpus:
                    free[tier] -= gpus
                    where = tier
                    break
        finishes = where is not None and job["remaining_work"] <= gpus * speeds[where] + 1e-9
        left = int(job["ticks_to_deadline"])  # ticks from the next one (the request's) to the deadline, inclusive

        def ticks(tier: int, job: dict[str, Any] = job, gpus: int = gpus) -> int:
            return max(1, math.ceil(job["remaining_work"] / (gpus * speeds[tier]) - 1e-9))

        late = where is not None and ticks(where) > left
        faster = next((names[t] for t in _fits(spec, job["min_memory_gb"]) if ticks(t) <= left), None) if late else None
        jobs.append({"slot": job["slot"], "gpus": gpus, "ready": bool(job["ready"]), "due_now": due_now,
                     "runs_on": None if where is None else names[where],
                     "ticks_needed": None if where is None else ticks(where), "too_slow": late, "in_time_on": faster,
                     "smallest_fit": (lambda t: None if t is None else names[t])(fitting_tier(spec, job["min_memory_gb"])),
                     "finishes": finishes, "ticks_to_deadline": int(job["ticks_to_deadline"]), "value": job["value"]})
    return {"jobs": jobs, "idle_if_granted": dict(zip(names, free, strict=True)), "idle_total": int(sum(free)),
            "requested": dict(zip(names, parts["request"].tolist(), strict=True))}


def _preview_broker(spec: SeatSpec, obs: dict[str, Any], parts: dict[str, np.ndarray]) -> dict[str, Any]:
    cfg = spec.config
    top = cfg.price_levels - 1
    qty = parts["quantity"]
    inventory = np.asarray(obs["inventory"], dtype=np.int64)
    offered = np.minimum(qty, inventory)
    prices = np.array([t.max_price * int(level) / top for t, level in zip(cfg.gpu_tiers, parts["price_level"],
                                                                           strict=True)])
    unit = np.asarray(obs["unit_cost"], dtype=np.float64)
    cut = int((qty - offered).sum())
    profit = float(offered @ (prices - unit))
    return {"offered": dict(zip(cfg.tier_names, offered.tolist(), strict=True)),
            "prices": dict(zip(cfg.tier_names, [round(float(p), 6) for p in prices], strict=True)),
            "crisis": bool(obs.get("crisis")), "invalid_units": cut, "profit_if_all_sold": round(profit, 6),
            "reward_terms": {"profit": round(_weights(spec).profit * profit, 6) + 0.0,
                             "invalid": round(-_weights(spec).invalid * cut, 6) + 0.0}}


def _lines(spec: SeatSpec, p: dict[str, Any]) -> list[str]:
    if spec.role == "allocator":
        bought = ", ".join(f"{k} {v}" for k, v in p["bought"].items() if v) or "nothing"
        granted = ", ".join(f"{k} {v}" for k, v in p["granted"].items())
        cuts = {k: v for k, v in p["invalid_units"].items() if v}
        lines = [f"spend {p['spend']:.3g} = spot {p['spot_cost']:.3g} (bought {bought}) + operating "
                 f"{p['operating_cost']:.3g} (granted {granted}, x each tier's operating cost)",
                 f"carbon at most {p['carbon_kg_if_all_busy']:.3g} kg (every granted GPU busy x power x published intensity "
                 f"{p['intensity']:.3g}; a grid spike raises it)" + (f", {p['carbon_over_cap_kg']:.3g} kg over the cap"
                                             if p["carbon_mode"] == "soft" else "; hard cap: grants over it are cut"),
                 (f"{p['beyond_declared']} GPU(s) granted beyond a team's declaration on that tier"
                  + (" (likely idle)" if p["beyond_declared"] else "")
                  + (f"; below the declaration for {', '.join(p['short_of_declared'])}" if p["short_of_declared"] else "")
                  if p["declarations_yet"] else "no declaration yet at tick 0 (they arrive at tick 1)"),
                 f"idle is known only after the tick (each idle GPU costs {p['idle_weight']:.3g}): a granted GPU sits "
                 "idle when no job of that team fits it, and declarations lag a tick and may be bluffs, so no estimate "
                 "is given here"]
        if cuts:
            lines.append("cut as invalid: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in cuts.items()))
        lines.append("reward terms from these: " + ", ".join(f"{k} {v:+.3g}" for k, v in p["reward_terms"].items()))
        return lines
    if spec.role == "team":
        lines = []
        for j in p["jobs"]:
            if j["due_now"]:
                lines.append(f"{j['slot']} ({j['gpus']} GPU) is due this tick: this request is for the next tick, too "
                             "late for it (it runs, or not, on this tick's grant)")
            elif not j["ready"]:
                lines.append(f"{j['slot']} ({j['gpus']} GPU) is not ready: it cannot run yet")
            elif j["runs_on"] is None:
                lines.append(f"{j['slot']} ({j['gpus']} GPU, needs {j['smallest_fit']} or larger) would NOT run: no "
                             f"fitting tier has {j['gpus']} requested GPU(s) left")
            else:
                text = (f"{j['slot']} ({j['gpus']} GPU) would run on {j['runs_on']}"
                        + (" and finish" if j["finishes"] else f", {j['ticks_needed']} tick(s) of work at its speed"))
                if j["too_slow"]:
                    text += (f": too slow for its deadline ({j['ticks_to_deadline']} tick(s) left)"
                             + (f"; on {j['in_time_on']} it would make it (ask for {j['in_time_on']}, not a smaller "
                                "tier it fits: it takes the smallest with room)" if j["in_time_on"] else ""))
                lines.append(text)
        lines.append(f"if granted exactly this, {p['idle_total']} requested GPU(s) would sit idle"
                     + (" (" + ", ".join(f"{k} {v}" for k, v in p["idle_if_granted"].items() if v) + ")"
                        if p["idle_total"] else ""))
        return lines
    return [f"offer {', '.join(f'{k} {v}' for k, v in p['offered'].items())} at "
            f"{', '.join(f'{k} {v:.3g}' for k, v in p['prices'].items())}"
            + (" (times the crisis multiplier)" if p["crisis"] else ""),
            f"profit if all sells {p['profit_if_all_sold']:.3g}; cut as invalid {p['invalid_units']}"]


__all__ = ["DEFAULT_RULES", "LAG_RULE", "default_action", "PLACEMENT_RULE", "fitting_tier", "intensity_now", "placement", "placement_lines", "preview",
           "tier_cost_lines", "tier_costs"]
