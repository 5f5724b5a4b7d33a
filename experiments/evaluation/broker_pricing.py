"""How a broker prices by demand, and what its offers sell: a learned broker beside
``demand_priced`` and fixed ``markup`` codes, against one allocator, on the same seeds.

    python -m experiments.evaluation.broker_pricing learned:<run>/best --allocator planner \\
        --scenario crisis --codes 3,0,2 3,2,0

Prints each broker's profit (its return) and price/demand correlation, then the best-response
report's "Pricing by demand" table (:func:`experiments.evaluation.best_response.pricing_by_demand`):
every broker's ticks in the quartiles of the demand the first one saw, with its mean price
level, GPUs offered and GPUs of that offer sold. Use it on checkpoints whose report predates
that table, or to set other fixed codes beside one (``--codes margin,slope,crisis_levels``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tyro

from commons_arena.enums import BROKER
from experiments.evaluation.best_response import Recorder, demand_quartiles, pricing_by_demand
from experiments.evaluation.fixed_codes import Arena
from experiments.evaluation.tables import markdown_table
from experiments.seeds import SEED_RANGES
from policies.base import Policy
from policies.codecs import CodedPolicy, MarkupBrokerCodec
from policies.registry import make_policy


@dataclass
class Args:
    broker: tyro.conf.Positional[str]
    """the broker to read: 'learned:<checkpoint>' or a scripted broker"""
    allocator: str = "planner"
    """the allocator it sells to (the rest: the scenario's own population)"""
    scenario: str = "crisis"
    codes: tuple[str, ...] = ()
    """fixed markup codes to set beside it, each 'margin,slope,crisis_levels' (e.g. 3,0,2)"""
    seeds: int = 100
    first_seed: int = SEED_RANGES["best_response_report"].first
    """seeds first_seed .. first_seed + seeds - 1 (default: the best-response report's)"""


def brokers(args: Args, arena: Arena) -> dict[str, Policy]:
    codec = MarkupBrokerCodec(arena.config)
    out: dict[str, Policy] = {args.broker: make_policy(args.broker, arena.config, BROKER),
                              "demand_priced": make_policy("demand_priced", arena.config, BROKER)}
    for text in args.codes:
        try:
            margin, slope, crisis = (float(x) for x in text.split(","))
            out[f"fixed margin {margin:g}, slope {slope:g}, crisis +{crisis:g}"] = CodedPolicy(
                codec, codec.code(margin, int(slope), int(crisis)))
        except ValueError as err:
            raise SystemExit(f"--codes {text!r}: give margin,slope,crisis_levels from the markup grid ({err})") from None
    return out


def main(args: Args) -> list[dict]:
    arena = Arena(args.scenario, args.allocator, BROKER)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    lineup = brokers(args, arena)
    recorders = {name: Recorder(arena.config, BROKER) for name in lineup}
    for name, recorder in recorders.items():
        profit = float(np.mean([e[BROKER]["return"] for e in arena.episodes(lineup[name], seeds, recorder)]))
        print(f"{name}: profit {profit:.2f}, price/demand correlation {recorder.price_correlation():.2f}")
    rows = pricing_by_demand(recorders, demand_quartiles(recorders[args.broker]))
    print(markdown_table(rows))
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
