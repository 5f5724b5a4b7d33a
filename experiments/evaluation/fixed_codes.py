"""What the team and broker codecs express before anything is learned (issue 17; docs/codecs.md).

A *fixed code* plays the same codec choice every tick (:class:`policies.codecs.CodedPolicy`):
a scripted policy written in the codec's terms. Three measurements, every one paired on the
same seeds (the other seats unchanged) with a 95% CI:

1. **Reproduction**: each team archetype against its fixed ``bluff`` code, and both scripted
   brokers against their fixed ``markup`` codes (the difference must be exactly 0).
2. **Misreport gain of the best fixed team code**: every ``bluff`` code (factor x stance
   rule), and every per-tier factor triple of ``bluff_per_tier`` with the best stance rule,
   in one team seat against one allocator. The best is *chosen* on selection seeds and
   *reported* on other seeds, so its gain over ``truthful`` is not inflated by the choice.
3. **The best fixed broker code**: every ``markup`` code with one margin on all tiers,
   chosen and reported the same way, against ``demand_priced``.

    commons-arena fixed-codes --scenario crisis --allocator proportional --seat search
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.engine import Observer, play
from experiments.evaluation.tables import markdown_table
from experiments.seeds import first_seed
from experiments.statistics import mean_ci95, paired_difference
from policies.base import Policy
from policies.codecs import BluffTeamCodec, Codec, CodedPolicy, MarkupBrokerCodec, PerTierBluffTeamCodec, make_codec
from policies.population import Population
from policies.registry import make_policy

REPORT_SEEDS = range(first_seed("codes_report"), first_seed("codes_report") + 30)  # the figures in docs/codecs.md
SELECTION_SEEDS = range(first_seed("evaluate"), first_seed("evaluate") + 30)  # where the best fixed code is chosen


class Arena:
    """One scenario, one allocator, the default background (or ``background``, e.g. a roster):
    a seat's return per seed for any policy in it."""

    def __init__(self, scenario: str | ScenarioConfig, allocator: str | None, seat: str,
                 background: Population | None = None) -> None:
        self.env = commons_arena.parallel_env(scenario)
        self.config, self.seat = self.env.config, seat
        population = background if background is not None else Population.default(self.config)
        if allocator is not None:
            population = population.with_agent(ALLOCATOR, allocator)
        self.policies = dict(population.build(self.config, env=self.env, strict=False))

    def episodes(self, policy: Policy, seeds: Sequence[int], observer: Observer | None = None
                 ) -> list[dict[str, dict[str, float]]]:
        """Every agent's episode summary per seed, ``policy`` in the seat (the same seeds pair them)."""
        return [e.summaries for e in play(self.env, {**self.policies, self.seat: policy}, seeds, observer)]

    def returns(self, policy: Policy, seeds: Sequence[int]) -> np.ndarray:
        return np.array([episode[self.seat]["return"] for episode in self.episodes(policy, seeds)])

    def scripted(self, name: str, seeds: Sequence[int]) -> np.ndarray:
        return self.returns(make_policy(name, self.config, self.seat), seeds)

    def coded(self, codec_name: str, code: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        return self.returns(CodedPolicy(make_codec(codec_name, self.config, self.seat), code), seeds)


def paired_row(label: str, mine: np.ndarray, theirs: np.ndarray, **extra: Any) -> dict[str, Any]:
    diff, ci = paired_difference(mine.tolist(), theirs.tolist())
    return {**extra, "policy": label, "return": float(mine.mean()), "diff": diff, "diff_ci95": ci}


def reproduction(scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Each archetype (search seat) and each scripted broker beside its fixed code."""
    from policies.teams import ARCHETYPE_PROFILES

    rows = []
    for scenario, allocator in itertools.product(scenarios, allocators):
        team = Arena(scenario, allocator, "search")
        codec = BluffTeamCodec(team.config, "search")
        for archetype in ARCHETYPE_PROFILES:
            rows.append(paired_row(f"bluff {codec.describe(codec.archetype_code(archetype))}",
                                   team.coded("bluff", codec.archetype_code(archetype), seeds),
                                   team.scripted(archetype, seeds), scenario=scenario, allocator=allocator,
                                   seat="search", scripted=archetype))
        broker = Arena(scenario, allocator, BROKER)
        markup = MarkupBrokerCodec(broker.config)
        for name, code in (("demand_priced", markup.zero_code), ("fixed_price", markup.code(1.5, 0, 0))):
            rows.append(paired_row(f"markup {markup.describe(code)}", broker.coded("markup", code, seeds),
                                   broker.scripted(name, seeds), scenario=scenario, allocator=allocator,
                                   seat=BROKER, scripted=name))
    return rows


def uniform_codes(codec: Codec) -> list[np.ndarray]:
    """Every fixed code of a team or broker codec with one choice on every tier: ``bluff``'s
    48 (factor x stance), ``bluff_per_tier``'s 48 with the same factor on each tier,
    ``markup``'s 300 (margin x slope x crisis premium x supply)."""
    if isinstance(codec, BluffTeamCodec):
        tiers = codec.n_tiers if isinstance(codec, PerTierBluffTeamCodec) else 1
        return [np.array([f] * tiers + [s]) for f, s in
                itertools.product(range(len(codec.FACTORS)), range(len(codec.STANCE_RULES)))]
    if isinstance(codec, MarkupBrokerCodec):
        return [codec.code(*choice) for choice in
                itertools.product(codec.MARGINS, codec.SLOPES, codec.CRISIS_LEVELS, codec.SUPPLY)]
    raise ValueError(f"codec {codec.name!r} has no fixed-code search (team and broker codecs do)")


def best_code(arena: Arena, codec_name: str, codes: Sequence[np.ndarray], seeds: Sequence[int]) -> tuple[np.ndarray, float]:
    """The code with the highest mean return on ``seeds`` and that mean."""
    means = [float(arena.coded(codec_name, code, seeds).mean()) for code in codes]
    best = int(np.argmax(means))
    return codes[best], means[best]


def team_codes(scenario: str, allocator: str, seat: str, selection: Sequence[int], report: Sequence[int]) -> list[dict[str, Any]]:
    """Gain over ``truthful`` of the best fixed ``bluff`` and ``bluff_per_tier`` codes, and of
    ``greedy_bluffer``, on the report seeds."""
    arena = Arena(scenario, allocator, seat)
    one, per_tier = BluffTeamCodec(arena.config, seat), PerTierBluffTeamCodec(arena.config, seat)
    truthful = arena.scripted("truthful", report)
    rows = [paired_row("truthful", truthful, truthful, codes_tried=0),
            paired_row("greedy_bluffer", arena.scripted("greedy_bluffer", report), truthful, codes_tried=0)]
    codes = [np.array(c) for c in itertools.product(range(len(one.FACTORS)), range(len(one.STANCE_RULES)))]
    code, _ = best_code(arena, "bluff", codes, selection)
    rows.append(paired_row(f"best bluff: {one.describe(code)}", arena.coded("bluff", code, report), truthful,
                           codes_tried=len(codes)))
    # per tier: every factor triple with the stance rule the uniform search chose
    triples = [np.array([*f, code[-1]]) for f in itertools.product(range(len(one.FACTORS)), repeat=one.n_tiers)]
    tier_code, _ = best_code(arena, "bluff_per_tier", triples, selection)
    rows.append(paired_row(f"best bluff_per_tier: {per_tier.describe(tier_code)}",
                           arena.coded("bluff_per_tier", tier_code, report), truthful, codes_tried=len(triples)))
    for row in rows:
        row.update(scenario=scenario, allocator=allocator, seat=seat, vs="truthful")
    return rows


def broker_codes(scenario: str, allocator: str, selection: Sequence[int], report: Sequence[int]) -> list[dict[str, Any]]:
    """Profit over ``demand_priced`` of the best fixed ``markup`` code (one margin on every tier)."""
    arena = Arena(scenario, allocator, BROKER)
    markup = MarkupBrokerCodec(arena.config)
    codes = [markup.code(*choice) for choice in
             itertools.product(markup.MARGINS, markup.SLOPES, markup.CRISIS_LEVELS, markup.SUPPLY)]
    code, _ = best_code(arena, "markup", codes, selection)
    demand_priced = arena.scripted("demand_priced", report)
    rows = [paired_row("demand_priced", demand_priced, demand_priced, codes_tried=0),
            paired_row("fixed_price", arena.scripted("fixed_price", report), demand_priced, codes_tried=0),
            paired_row(f"best markup: {markup.describe(code)}", arena.coded("markup", code, report), demand_priced,
                       codes_tried=len(codes))]
    for row in rows:
        row.update(scenario=scenario, allocator=allocator, seat=BROKER, vs="demand_priced")
    return rows


def fixed_codes_report(scenario: str, allocator: str, seat: str, seeds: int, reproduction_seeds: int, parts: Sequence[str]) -> None:
    """``commons-arena fixed-codes``: the measurements of ``parts`` (see the module docstring), printed."""
    report_seeds = range(REPORT_SEEDS.start, REPORT_SEEDS.start + seeds)
    selection = range(SELECTION_SEEDS.start, SELECTION_SEEDS.start + seeds)
    started = time.perf_counter()
    if "reproduction" in parts:
        print(f"## Reproduction (seeds 0..{reproduction_seeds - 1}): fixed code minus the scripted policy\n")
        print(markdown_table(reproduction(["standard", scenario], ["proportional", "planner"], range(reproduction_seeds))))
    if "team" in parts:
        print(f"\n## Best fixed team codes, {scenario} vs {allocator}, seat {seat}: chosen on seeds "
              f"{selection.start}..{selection.stop - 1}, reported on seeds 0..{seeds - 1} (diff: minus truthful)\n")
        print(markdown_table(team_codes(scenario, allocator, seat, selection, report_seeds)))
    if "broker" in parts:
        print(f"\n## Best fixed broker code, {scenario} vs {allocator} (diff: minus demand_priced)\n")
        print(markdown_table(broker_codes(scenario, allocator, selection, report_seeds)))
    print(f"\n{time.perf_counter() - started:.0f} s; mean return of a seat is its episode return; CI: 95% Student t "
          f"({mean_ci95.__module__}.mean_ci95)")
