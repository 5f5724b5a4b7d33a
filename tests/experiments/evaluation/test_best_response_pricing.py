"""The broker rows of the best-response report: what each offer sold, read in the right tick.

An offer posted at tick t is bought at t + 1 and shows in the broker's ``last_sold`` at t + 2
(commons_arena/batched/tick.py). A broker that offers nothing on odd ticks therefore sells nothing from
its odd-tick rows; reading the sales one tick early or late would put sales there.
"""

from __future__ import annotations

import numpy as np

import commons_arena
from commons_arena.enums import BROKER
from commons_arena.spaces import action_layout
from experiments.evaluation.best_response import Recorder, demand_quartiles, pricing_by_demand
from experiments.evaluation.fixed_codes import Arena
from experiments.evaluation.tables import markdown_table
from policies.registry import make_policy


class EveryOtherTick:
    """``demand_priced``, offering nothing on odd ticks."""

    def __init__(self, config: commons_arena.ScenarioConfig) -> None:
        self.inner = make_policy("demand_priced", config, BROKER)
        self.quantity = action_layout(config, BROKER).slices["quantity"]
        self.tick = 0

    def reset(self, seed: int | None = None) -> None:
        self.inner.reset(seed)
        self.tick = 0

    def act(self, observation: np.ndarray) -> np.ndarray:
        action = np.array(self.inner.act(observation), copy=True)
        if self.tick % 2:
            action[self.quantity] = 0
        self.tick += 1
        return action


def test_each_offer_is_credited_with_what_it_sold():
    arena = Arena("crisis", "best_fit", BROKER)
    recorder = Recorder(arena.config, BROKER)
    seeds = range(5)
    episodes = arena.episodes(EveryOtherTick(arena.config), seeds, recorder)
    sales = np.asarray(recorder.sales)
    ticks = len(sales) // len(seeds)
    assert len(sales) == ticks * len(seeds) and ticks > 4
    tick = np.tile(np.arange(ticks), len(seeds))
    known = ~np.isnan(sales[:, 3])
    assert not known[tick >= ticks - 2].any() and known[tick < ticks - 2].all()  # the last two offers: never seen sold
    assert (sales[known, 3] <= sales[known, 2]).all()  # nothing sells beyond its offer
    assert sales[known & (tick % 2 == 1), 3].sum() == 0  # nothing offered, nothing sold
    assert sales[known & (tick % 2 == 0), 3].sum() > 0  # best_fit buys from the offers that were there
    assert all(np.isfinite(e[BROKER]["return"]) for e in episodes)


def test_pricing_by_demand_reads_every_row_in_the_same_quartiles():
    arena = Arena("crisis", "planner", BROKER)
    recorders = {name: Recorder(arena.config, BROKER) for name in ("demand_priced", "fixed_price")}
    for name, recorder in recorders.items():
        arena.episodes(make_policy(name, arena.config, BROKER), range(6), recorder)
    edges = demand_quartiles(recorders["demand_priced"])
    rows = pricing_by_demand(recorders, edges)
    by_name = {name: [r for r in rows if r["policy"] == name] for name in recorders}
    for name, recorder in recorders.items():
        assert sum(r["ticks"] for r in by_name[name]) == len(recorder.sales)
    levels = [r["price_level"] for r in by_name["demand_priced"]]
    assert levels == sorted(levels) and levels[-1] > levels[0]  # demand_priced's price follows demand by design
    flat = {round(r["price_level"], 6) for r in by_name["fixed_price"]}
    assert len(flat) == 1  # fixed_price: one level whatever the demand
    assert all(r["most_chosen_code"] == "" for r in rows)  # scripted: no module codes
    assert "| fixed_price | 4 |" in markdown_table(rows)  # every row renders in the report's table


def test_broker_pricing_reads_any_broker_beside_fixed_codes_and_names_a_bad_code(capsys):
    import pytest

    from commands.cli import main
    from commands.measure import BrokerPricing

    command = BrokerPricing("fixed_price", allocator="proportional", codes=("3,0,2",), seeds=3)
    command.validate()
    rows = command.run()
    assert {r["policy"] for r in rows} == {"fixed_price", "demand_priced", "fixed margin 3, slope 0, crisis +2"}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # slope 4 is not on the grid: one line, before any episode
        main(["broker-pricing", "fixed_price", "--codes", "3,4,0", "--seeds", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--codes '3,4,0': give margin,slope,crisis_levels" in err
    assert len(err.strip().splitlines()) == 1
