"""How a broker prices by demand, and what its offers sell: a learned broker beside
``demand_priced`` and fixed ``markup`` codes, against one allocator, on the same seeds.

    commons-arena broker-pricing learned:<run>/best --allocator planner \\
        --scenario crisis --codes 3,0,2 3,2,0

Prints each broker's profit (its return) and price/demand correlation, then the best-response
report's "Pricing by demand" table (:func:`experiments.evaluation.best_response.pricing_by_demand`):
every broker's ticks in the quartiles of the demand the first one saw, with its mean price
level, GPUs offered and GPUs of that offer sold. Use it on checkpoints whose report predates
that table, or to set other fixed codes beside one (``--codes margin,slope,crisis_levels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from commons_arena.enums import BROKER
from experiments.evaluation.best_response import Recorder, demand_quartiles, pricing_by_demand
from experiments.evaluation.fixed_codes import Arena
from experiments.evaluation.tables import markdown_table
from policies.base import Policy
from policies.codecs import CodedPolicy, MarkupBrokerCodec
from policies.registry import make_policy

MarkupCode = tuple[float, int, int]  # margin, slope, crisis levels


def parse_codes(texts: Sequence[str], scenario: str) -> list[MarkupCode]:
    """``--codes`` as markup codes, each 'margin,slope,crisis_levels' on the codec's grid (checked)."""
    from commons_arena import load_scenario

    codec = MarkupBrokerCodec(load_scenario(scenario))
    codes = []
    for text in texts:
        try:
            margin, slope, crisis = (float(x) for x in text.split(","))
            codec.code(margin, int(slope), int(crisis))
        except ValueError as err:
            raise ValueError(f"--codes {text!r}: give margin,slope,crisis_levels from the markup grid ({err})") from None
        codes.append((margin, int(slope), int(crisis)))
    return codes


def brokers(broker: str, codes: Sequence[MarkupCode], arena: Arena) -> dict[str, Policy]:
    codec = MarkupBrokerCodec(arena.config)
    out: dict[str, Policy] = {broker: make_policy(broker, arena.config, BROKER),
                              "demand_priced": make_policy("demand_priced", arena.config, BROKER)}
    for margin, slope, crisis in codes:
        out[f"fixed margin {margin:g}, slope {slope:g}, crisis +{crisis:g}"] = CodedPolicy(
            codec, codec.code(margin, slope, crisis))
    return out


def broker_pricing_report(broker: str, allocator: str, scenario: str, codes: Sequence[MarkupCode], seeds: Sequence[int]
           ) -> list[dict[str, Any]]:
    """``commons-arena broker-pricing``: each broker's profit and price/demand correlation, then the table."""
    arena = Arena(scenario, allocator, BROKER)
    lineup = brokers(broker, codes, arena)
    recorders = {name: Recorder(arena.config, BROKER) for name in lineup}
    for name, recorder in recorders.items():
        profit = float(np.mean([e[BROKER]["return"] for e in arena.episodes(lineup[name], seeds, recorder)]))
        print(f"{name}: profit {profit:.2f}, price/demand correlation {recorder.price_correlation():.2f}")
    rows = pricing_by_demand(recorders, demand_quartiles(recorders[broker]))
    print(markdown_table(rows))
    return rows
