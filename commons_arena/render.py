"""Human-readable views of the state: ``ansi`` text (one block per tick)."""

from __future__ import annotations

from typing import Any

from commons_arena.scenario import ScenarioConfig
from commons_arena.state import ArenaState


def render_ansi(config: ScenarioConfig, s: ArenaState, last: dict[str, Any]) -> str:
    tiers = config.tier_names
    lines = [f"== {config.name} tick {s.t}/{config.max_ticks} | budget {s.budget:.1f} | "
             f"carbon {s.carbon_used:.1f}/{config.carbon.cap_kg:.1f} kg =="]
    if last:
        lines.append(f"played tick {last['tick']}: bought {dict(zip(tiers, last['bought'].tolist()))}")
        width = max(len(t) for t in config.team_names)
        for i, team in enumerate(config.team_names):
            declared = s.declared[i].tolist()
            lines.append(
                f"  {team:<{width}} granted {last['granted'][i].tolist()} need {last['need'][i].tolist()} "
                f"-> declares {declared} cred {s.credibility[i]:.2f}"
                + (" REVEALED" if s.revealed[i] else "")
            )
        for event in last["events"]:
            lines.append(f"  shock: {event}")
        cut = {k: v for k, v in last["repairs"].items() if v}
        if cut:
            lines.append(f"  repaired: {cut}")
        lines.append("  reward: " + ", ".join(f"{a} {sum(v.values()):+.2f}" for a, v in last["terms"].items()))
    lines.append(f"  offer for tick {s.t}: qty {s.offer_qty.tolist()} price {[round(p, 2) for p in s.offer_price.tolist()]}")
    return "\n".join(lines)
