"""Allocators respect every limit they observe: no avoidable ``invalid`` unit (issue 28).

Every unit the env cuts from an allocator action is charged ``invalid`` and listed per
rule in ``infos["allocator"]["repairs"]`` (docs/rules.md §5). A cut is the allocator's
doing unless a shock that fired in the same tick (§5 step 4, after the actions) caused it:

* ``buy_over_offer``, ``buy_over_budget``: always avoidable (offer and budget are observed);
* ``grant_over_capacity``: avoidable beyond the GPUs taken offline by incidents that fired
  this tick (``infos["allocator"]["events"]``);
* ``grant_over_carbon_cap``: avoidable unless a grid spike fired this tick.

:func:`avoidable_units` counts them per tick, :func:`check` over scenarios x seeds x every
scripted allocator, ``planner`` and the reference mechanisms; :func:`perturbed_scenarios` draws valid variants of the
shipped scenarios with the limits that bind (hard carbon caps, no budget, empty or huge spot
markets, huge budgets, fewer teams or tiers, strong grid spikes). The full sweep::

    python -m tests.limits_property --count 1000 --seeds 3             # perturbed shipped scenarios
    python -m tests.limits_property --family broad --count 1000 --seeds 3  # the generated family
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig, scenario_from_dict
from policies.allocators import SCRIPTED_ALLOCATORS
from policies.focal import FocalEnv
from policies.mechanisms import REFERENCE_MECHANISMS
from policies.registry import make_policy

ALLOCATORS = (*SCRIPTED_ALLOCATORS, "planner", *REFERENCE_MECHANISMS)


def avoidable_units(repairs: Mapping[str, int], events: Iterable[Mapping[str, Any]]) -> int:
    """Units of one tick's repairs the allocator could have avoided from what it observed."""
    events = list(events)
    offline = sum(int(e.get("gpus_offline", 0)) for e in events if e["kind"] == "production_incident")
    spiked = any(e["kind"] == "grid_spike" for e in events)
    units = repairs["buy_over_offer"] + repairs["buy_over_budget"]
    units += max(0, repairs["grant_over_capacity"] - offline)
    if not spiked:
        units += repairs["grant_over_carbon_cap"]
    return int(units)


def make_allocator(name: str, config: ScenarioConfig) -> Any:
    return make_policy(name, config, ALLOCATOR)


def episode_units(config: ScenarioConfig, allocator: str | Any, seed: int, env: FocalEnv | None = None) -> tuple[int, int]:
    """(avoidable, all) invalid units of one episode with ``allocator`` (a name or a built
    policy) in the seat and the scenario's own population around it (``env``: a
    ``FocalEnv`` of ``config`` with the allocator focal, reused; default a new one)."""
    env = env if env is not None else FocalEnv.from_scenario(config, [ALLOCATOR])
    policy = make_allocator(allocator, config) if isinstance(allocator, str) else allocator
    policy.reset(seed)
    obs, _ = env.reset(seed=seed)
    avoidable = total = 0
    while not env.episode_over:
        obs, _, _, _, infos = env.step({ALLOCATOR: policy.act(obs[ALLOCATOR])})
        info = infos[ALLOCATOR]
        avoidable += avoidable_units(info["repairs"], info["events"])
        total += sum(v for k, v in info["repairs"].items() if k != "offer_over_inventory")
    return avoidable, total


def check(
    configs: Iterable[ScenarioConfig], seeds: Iterable[int], allocators: Iterable[str] = ALLOCATORS
) -> Iterator[tuple[str, str, int, int, int]]:
    """(scenario, allocator, seed, avoidable, all invalid units) for every combination."""
    seeds, allocators = list(seeds), list(allocators)
    for config in configs:
        env = FocalEnv.from_scenario(config, [ALLOCATOR])  # one per scenario: building one costs an episode
        for name in allocators:
            policy = make_allocator(name, config)
            for seed in seeds:
                yield (config.name, name, seed, *episode_units(config, policy, seed, env))


# ---------------------------------------------------------------------------- scenarios
def _shipped_dicts() -> list[dict[str, Any]]:
    return [commons_arena.load_scenario(name).model_dump(mode="json") for name in commons_arena.list_scenarios()]


def perturb(base: dict[str, Any], rng: np.random.Generator, index: int) -> dict[str, Any]:
    """A variant of a scenario dict with binding limits (valid by construction, or refused by
    validation, then the caller draws again)."""
    d = copy.deepcopy(base)
    d["name"] = f"{d['name']}_limits{index}"
    d.pop("difficulty", None)
    tiers = d["gpu_tiers"]
    if len(tiers) > 1 and rng.random() < 0.3:  # fewer tiers: keep the largest-memory one
        keep = max(range(len(tiers)), key=lambda k: tiers[k]["memory_gb"])
        others = [k for k in range(len(tiers)) if k != keep]
        kept = sorted([keep, *rng.choice(others, size=int(rng.integers(0, len(others))), replace=False).tolist()])
        names = {tiers[k]["name"] for k in kept}
        d["gpu_tiers"] = tiers = [tiers[k] for k in kept]
        d["shocks"] = [s for s in d["shocks"] if s.get("tier") is None or s["tier"] in names]
    teams = d["teams"]
    if len(teams) > 2 and rng.random() < 0.3:  # fewer teams
        n = int(rng.integers(2, len(teams)))
        kept_names = {t["name"] for t in teams[:n]}
        d["teams"] = teams[:n]
        d["population"] = {a: p for a, p in d.get("population", {}).items() if a in kept_names or a in ("allocator", "broker")}
        d["shocks"] = [s for s in d["shocks"] if s.get("team") is None or s["team"] in kept_names]
    carbon = d["carbon"]
    if rng.random() < 0.8:
        carbon["mode"] = "hard"
    carbon["cap_kg"] = float(carbon["cap_kg"] * rng.choice([0.05, 0.2, 0.4, 0.7, 1.0, 1.5]))
    budget = rng.choice(["zero", "same", "huge", "odd"])
    d["budget"] = {"zero": 0.0, "same": d["budget"], "huge": 1.234567e6, "odd": 37.3}[budget]
    for tier in tiers:
        if rng.random() < 0.3:
            tier["spot_inventory"] = 0
        elif rng.random() < 0.2:
            tier["spot_inventory"] = int(tier["spot_inventory"]) * 10
        tier["owned"] = max(1, int(round(tier["owned"] * rng.choice([0.5, 1, 1, 2, 4]))))
    if rng.random() < 0.4:  # a strong grid spike, often active while the cap binds
        d["shocks"].append({"kind": "grid_spike", "rate": 0.3, "duration": 3, "intensity_multiplier": 3.0})
    if rng.random() < 0.3:  # incidents
        d["shocks"].append({"kind": "production_incident", "rate": 0.2, "tier": tiers[0]["name"],
                            "gpus_offline": max(1, tiers[0]["owned"] // 2), "duration": 2})
    return d


def perturbed_scenarios(count: int, seed: int) -> list[ScenarioConfig]:
    """``count`` valid variants of the shipped scenarios, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    bases = _shipped_dicts()
    out: list[ScenarioConfig] = []
    refused = 0
    while len(out) < count:
        base = bases[int(rng.integers(len(bases)))]
        try:
            out.append(scenario_from_dict(perturb(base, rng, len(out))))
        except ValueError:
            refused += 1
            if refused > 20 * count + 100:
                raise RuntimeError("perturbations are refused by validation far too often") from None
    return out


def family_scenarios(family: str, count: int, seed: int) -> list[ScenarioConfig]:
    from commons_arena.family import generate_scenarios, load_family  # type: ignore[attr-defined]

    return list(generate_scenarios(load_family(family), count, seed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", help="a scenario family (commons_arena.family); default: perturbed shipped scenarios")
    parser.add_argument("--count", type=int, default=100, help="scenarios")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per scenario and allocator")
    parser.add_argument("--scenario-seed", type=int, default=0, help="seed of the scenario draw")
    parser.add_argument("--part", default="0/1", help="I/N: play only the scenarios whose index is I modulo N")
    args = parser.parse_args(argv)
    part, parts = (int(x) for x in args.part.split("/"))
    start = time.perf_counter()
    configs = (family_scenarios(args.family, args.count, args.scenario_seed) if args.family
               else perturbed_scenarios(args.count, args.scenario_seed))[part::parts]
    hard = sum(c.carbon.mode == "hard" for c in configs)
    avoidable: Counter[str] = Counter()
    total: Counter[str] = Counter()
    bad: list[tuple[str, str, int, int]] = []
    for scenario, name, seed, a, t in check(configs, range(args.seeds)):
        avoidable[name] += a
        total[name] += t
        if a:
            bad.append((scenario, name, seed, a))
            print(f"AVOIDABLE: {scenario} {name} seed {seed}: {a} units", flush=True)
    print(f"part {part}/{parts}: {len(configs)} scenarios ({hard} with a hard cap) x {args.seeds} seeds x {len(ALLOCATORS)} allocators, "
          f"{time.perf_counter() - start:.0f} s")
    print("allocator      avoidable  all invalid units (shocks fired after the action included)")
    for name in ALLOCATORS:
        print(f"{name:14s} {avoidable[name]:9d}  {total[name]:d}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
