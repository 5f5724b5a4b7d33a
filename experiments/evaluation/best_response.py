"""The report of ``--experiment best_response``: what one learning seat (a team, or the broker)
takes against a frozen background, beside everything scripted that could sit in its seat.

On held-out report seeds (``--report-seeds``, from ``--report-first-seed``: never trained on,
never used to pick the checkpoint), the checkpoint plays its seat through ``learned:`` (what
anyone else would load), and so does every scripted policy of its role and the codec's best
fixed code (chosen on ``--selection-seeds`` other seeds, so its figure is not inflated by the
choice), each paired with the learned seat on the same seeds (95% Student-t CI). A team's
row also gives its declared / true need per tier (the mean over ticks with need on that
tier); the broker's, its profit (its return) and the correlation of its mean price level
with the demand it observed, and a table of its pricing by demand quartile (price level, GPUs
offered and sold, the learned broker's most chosen code): whether its price follows demand, and
what that sells. The codes the learned seat chose (its module's action, before
the codec) are counted, so the report can say which part is the codec and what is learned.

The **final best response** (:data:`FINAL`) is the better of the checkpoint and the best fixed
code on the selection seeds (the code found before training when the run searched it:
:mod:`experiments.evaluation.best_code`); its choice, and which part came from the search and which
from learning, is the report's last section and ``best_response_choice.json``.

Written to ``<run>/best_response.md`` and ``best_response.csv`` (and printed); the per-seed
returns of every row, and of the final best response, to ``best_response_returns.json``
(``commons-arena exploit`` reads the best fixed code's and the final one's from there).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import BROKER
from commons_arena.files import write_file
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout, role_of
from experiments.evaluation.best_code import CHOICE_FILE, LEARNING, CodeSearch, cached_search, choose
from experiments.evaluation.engine import Observer, Tick
from experiments.evaluation.fixed_codes import Arena
from experiments.evaluation.tables import markdown_table, write_csv
from experiments.evaluation.traces import price_demand_correlation
from experiments.seeds import SEED_RANGES
from experiments.statistics import paired_difference
from policies.base import Policy
from policies.codecs import DEFAULT_CODECS, CodedPolicy, make_codec
from policies.population import Population
from policies.registry import available_policies, make_policy

SELECTION_FIRST_SEED = SEED_RANGES["evaluate"].first  # as experiments.evaluation.fixed_codes: where fixed codes are chosen
LEARNED = "learned (best response)"
FINAL = "best response"  # the better of LEARNED and the best fixed code on the selection seeds (best_code.py)
FIXED_PREFIX = "best fixed "  # the row of the codec's best fixed code
RETURNS_FILE = "best_response_returns.json"  # policy -> {"seeds", "seat", "allocator"}: per-seed returns
PerSeed = dict[str, dict[str, list[int] | list[float]]]  # RETURNS_FILE's content


@dataclass
class Recorder(Observer):
    """What the report reads from each tick of a seat (an engine observer): a team's
    declaration against its true need per tier, a broker's price level against the demand
    it saw, and a learned module's code (its action before the codec)."""

    config: ScenarioConfig
    seat: str
    ratios: list[list[float]] = field(default_factory=list)  # per tier: declared / need on ticks with need
    # a broker's ticks: (demand seen, mean price level, GPUs offered, GPUs sold of that offer). An offer
    # posted at tick t is bought at t + 1 and shows as `last_sold` at t + 2, so an episode's last two
    # offers stay nan (their sales are never observed by the seat)
    sales: list[list[float]] = field(default_factory=list)
    tick_codes: list[str] = field(default_factory=list)  # a learned module's code per tick, described

    def __post_init__(self) -> None:
        self.observed = observation_layout(self.config, self.seat)
        self.acted = action_layout(self.config, self.seat)
        self.ratios = [[] for _ in self.config.gpu_tiers]
        self._unsold: list[list[float]] = []  # the last two sales rows, until their sales are seen

    def begin(self, seed: int) -> None:
        self._unsold = []

    def tick(self, tick: Tick) -> None:
        seen = self.observed.view(np.asarray(tick.observations[self.seat]))
        done = self.acted.view(np.asarray(tick.actions[self.seat]))
        if self.seat == BROKER:
            demand, level = float(seen["demand"].sum()), float(np.mean(done["price_level"]))
            if len(self._unsold) == 2:  # the offer of two ticks ago: its sales are `last_sold` now
                self._unsold.pop(0)[3] = float(seen["last_sold"].sum())
            self._unsold.append([demand, level, float(done["quantity"].sum()), float("nan")])
            self.sales.append(self._unsold[-1])
        else:
            for tier, (need, declared) in enumerate(zip(seen["need"], done["request"], strict=True)):
                if need > 0:
                    self.ratios[tier].append(float(declared) / float(need))
        policy = tick.policies[self.seat]
        code = getattr(policy, "last_module_action", None)
        describe = getattr(getattr(policy, "codec", None), "describe", None)  # team and broker codecs
        if code is not None and describe is not None:
            self.tick_codes.append(describe(np.asarray(code)))

    @property
    def codes(self) -> Counter[str]:
        """How often the learned module chose each code."""
        return Counter(self.tick_codes)

    def tier_ratios(self) -> list[float]:
        return [float(np.mean(r)) if r else float("nan") for r in self.ratios]

    def price_correlation(self) -> float:
        if len(self.sales) < 2:
            return float("nan")
        sales = np.asarray(self.sales)
        return price_demand_correlation(sales[:, 0], sales[:, 1])


def demand_quartiles(recorder: Recorder) -> np.ndarray:
    """The inner edges of the demand quartiles of ``recorder``'s ticks (the bins every broker row is read in)."""
    return np.quantile(np.asarray([row[0] for row in recorder.sales]), [0.25, 0.5, 0.75])


def pricing_by_demand(recorders: Mapping[str, Recorder], edges: np.ndarray) -> list[dict[str, Any]]:
    """Per broker row and demand quartile (``edges``: inner edges): its mean price level, GPUs
    offered and sold per tick, and (a learned seat) the code it chose most there."""
    rows = []
    for name, recorder in recorders.items():
        sales = np.asarray(recorder.sales, dtype=np.float64).reshape(-1, 4)
        which = np.searchsorted(edges, sales[:, 0], side="right")
        for q in range(len(edges) + 1):
            here = which == q
            if not here.any():
                continue
            sold = sales[here, 3][~np.isnan(sales[here, 3])]
            row: dict[str, Any] = {"policy": name, "demand_quartile": q + 1,
                                   "demand": f"{sales[here, 0].min():g}-{sales[here, 0].max():g}",
                                   "ticks": int(here.sum()), "price_level": float(sales[here, 1].mean()),
                                   "offered": float(sales[here, 2].mean()),
                                   "sold": float(sold.mean()) if sold.size else float("nan"),
                                   "most_chosen_code": ""}  # a scripted row has no module codes
            if recorder.tick_codes:
                top, n = Counter(c for c, h in zip(recorder.tick_codes, here, strict=True) if h).most_common(1)[0]
                row["most_chosen_code"] = f"{top} ({n / here.sum():.0%})"
            rows.append(row)
    return rows


def contenders(config: ScenarioConfig, seat: str, codec_name: str | None, arena: Arena,
               selection: Sequence[int], folder: Path | None = None, refine: Sequence[int] = ()
               ) -> tuple[dict[str, Policy], CodeSearch]:
    """Every scripted policy of the seat's role, and the codec's best fixed code on ``selection``
    (the run's search before training when ``folder`` holds it: experiments/evaluation/best_code.py)."""
    role = role_of(config, seat)
    out: dict[str, Policy] = {name: make_policy(name, config, seat) for name in available_policies(role)}
    codec = make_codec(codec_name or DEFAULT_CODECS[role], config, seat)
    found = cached_search(folder, arena, codec, selection, refine)
    out[f"{FIXED_PREFIX}{codec.name} code: {found.description}"] = CodedPolicy(codec, np.asarray(found.code))
    return out, found


def seat_rows(arena: Arena, policies: Mapping[str, Policy], seeds: Sequence[int], allocator: str = "allocator"
              ) -> tuple[list[dict[str, Any]], dict[str, Recorder], PerSeed]:
    """Each policy in the seat on ``seeds``: its return and the allocator's, paired with the first
    (the learned seat); what its recorder read; and the per-seed returns (policy -> seat / allocator)."""
    recorders = {name: Recorder(arena.config, arena.seat) for name in policies}
    episodes = {name: arena.episodes(policy, seeds, recorders[name]) for name, policy in policies.items()}
    seat_returns = {name: [e[arena.seat]["return"] for e in eps] for name, eps in episodes.items()}
    allocator_returns = {name: [e[allocator]["return"] for e in eps] for name, eps in episodes.items()}
    first = next(iter(policies))
    rows = []
    for name, recorder in recorders.items():
        diff, ci = paired_difference(seat_returns[first], seat_returns[name])
        row: dict[str, Any] = {"policy": name, "return": float(np.mean(seat_returns[name])),
                               "learned_minus_this": diff, "ci95": ci,
                               "allocator_return": float(np.mean(allocator_returns[name]))}
        if arena.seat == BROKER:
            row["price_demand_corr"] = recorder.price_correlation()
        else:
            row.update({f"declared/need {tier.name}": r
                        for tier, r in zip(arena.config.gpu_tiers, recorder.tier_ratios(), strict=True)})
        rows.append(row)
    per_seed: PerSeed = {name: {"seeds": list(seeds), "seat": seat_returns[name], "allocator": allocator_returns[name]}
                          for name in policies}
    return rows, recorders, per_seed


def best_response_report(config: ScenarioConfig, seat: str, checkpoint: Path, background: Population,
                         codec_name: str | None, seeds: Sequence[int], selection: Sequence[int], folder: Path | None = None,
                         refine: Sequence[int] = ()) -> tuple[list[dict[str, Any]], str, PerSeed]:
    """The report's rows, its markdown and the per-seed returns (see the module docstring); the
    final best response (:data:`FINAL`: the checkpoint or the best fixed code, the better on the
    selection seeds) is added to the per-seed returns, and its choice written to ``folder``."""
    arena = Arena(config, None, seat, background)
    learned = make_policy(f"learned:{checkpoint}", config, seat)  # as anyone would load it
    scripted, found = contenders(config, seat, codec_name, arena, selection, folder, refine)
    policies = {LEARNED: learned, **scripted}
    rows, recorders, per_seed = seat_rows(arena, policies, seeds)
    choice = final_choice(arena, learned, found, per_seed, folder)
    pricing = pricing_by_demand(recorders, demand_quartiles(recorders[LEARNED])) if seat == BROKER else []
    return rows, markdown(config, seat, checkpoint, background, codec_name, seeds, rows, recorders[LEARNED],
                          pricing, choice), per_seed


def final_choice(arena: Arena, learned: Policy, found: CodeSearch, per_seed: PerSeed, folder: Path | None
                 ) -> dict[str, Any]:
    """The final best response: the checkpoint if it beats the best fixed code on the selection seeds,
    else the fixed code (experiments/evaluation/best_code.py). Its per-seed returns join ``per_seed``
    as :data:`FINAL`; the choice is written to ``folder/best_response_choice.json``."""
    learned_mean = float(arena.returns(learned, found.seeds).mean())
    source = choose(learned_mean, found)
    fixed = next(name for name in per_seed if name.startswith(FIXED_PREFIX))
    per_seed[FINAL] = dict(per_seed[LEARNED if source == LEARNING else fixed])
    mine, theirs = per_seed[FINAL]["seat"], per_seed[fixed]["seat"]
    diff, ci = paired_difference([float(v) for v in mine], [float(v) for v in theirs])
    choice = {"source": source, "fixed_code": fixed.removeprefix(FIXED_PREFIX), "codes_tried": found.codes_tried,
              "selection_seeds": list(found.seeds), "fixed_selection_mean": found.selection_mean,
              "learned_selection_mean": learned_mean, "final_minus_fixed": diff, "final_minus_fixed_ci95": ci}
    if folder is not None:
        write_file(folder / CHOICE_FILE, json.dumps(choice, indent=1))
    return choice


def markdown(config: ScenarioConfig, seat: str, checkpoint: Path, background: Population, codec_name: str | None,
             seeds: Sequence[int], rows: Sequence[Mapping[str, Any]], learned: Recorder,
             pricing: Sequence[Mapping[str, Any]] = (), choice: Mapping[str, Any] | None = None) -> str:
    allocator = background.resolve(config, strict=False).get("allocator")
    scripted = [r for r in rows[1:] if not r["policy"].startswith(FIXED_PREFIX)]
    fixed = [r for r in rows if r["policy"].startswith(FIXED_PREFIX)]
    beaten = [r["policy"] for r in rows[1:] if r["learned_minus_this"] - r["ci95"] > 0]
    lost = [r["policy"] for r in rows[1:] if r["learned_minus_this"] + r["ci95"] < 0]
    total = sum(learned.codes.values()) or 1
    fixed_names = ", ".join(f"`{r['policy']}`" for r in fixed)
    chosen = ", ".join(f"{code} {n / total:.0%}" for code, n in learned.codes.most_common(5))
    lines = [
        f"# Best response: `{seat}` on `{config.name}`",
        "",
        f"Checkpoint `learned:{checkpoint}` in the `{seat}` seat (codec `{codec_name or 'none (raw actions)'}`), "
        f"the other seats the frozen background (allocator: `{allocator.policy if allocator else '?'}`). "
        f"{len(seeds)} held-out seeds {seeds[0]}..{seeds[-1]}; every row plays the same seeds, "
        "`learned_minus_this` is the learned seat's return minus the row's (paired, ± 95% CI).",
        "",
        markdown_table([dict(r) for r in rows]),
        "",
        "## What is the codec and what is learned",
        "",
        f"Codes the learned seat chose (share of its ticks): {chosen or 'n/a (raw actions)'}.",
        "",
        "A fixed code plays one codec choice every tick: every scripted policy of this role is one "
        "(docs/codecs.md), and the best of them on selection seeds is the row "
        f"{fixed_names}. What the codec gives a learner for free is everything a fixed "
        "code reaches; what the learner adds is only what it gains over the best fixed code (switching codes "
        "tick by tick on what it observes).",
        "",
        f"Beaten (CI above 0): {', '.join(beaten) or 'none'}. Beats the learned seat (CI below 0): "
        f"{', '.join(lost) or 'none'}. Scripted policies compared: {len(scripted)}.",
    ]
    if choice is not None:
        lines += ["", "## The best response: search, then learning", "", choice_words(choice)]
    if pricing:
        lines += ["", "## Pricing by demand", "",
                  "Every broker row's ticks in the quartiles of the demand the learned broker saw (Σ over tiers): "
                  "its mean price level, GPUs offered and GPUs of that offer sold per tick (an offer is bought the "
                  "tick after it is posted; an episode's last two offers are left out). A price that rises with "
                  "demand but sells less there is what `price_demand_corr` rewards and profit may not.", "",
                  markdown_table([dict(r) for r in pricing])]
    return "\n".join(lines) + "\n"


def choice_words(choice: Mapping[str, Any]) -> str:
    """The report's paragraph on which part of the final best response came from the search and which from learning."""
    seeds = choice["selection_seeds"]
    learned = "the learned checkpoint" if choice["source"] == LEARNING else "the fixed code itself"
    return (f"Search: `{choice['fixed_code']}`, the best of {choice['codes_tried']} fixed codes on {len(seeds)} "
            f"selection seeds ({seeds[0]}..{seeds[-1]}; mean return {choice['fixed_selection_mean']:.2f}); learning "
            f"started there and reached {choice['learned_selection_mean']:.2f} on the same seeds. The final best "
            f"response (`{FINAL}` in `{RETURNS_FILE}`) is {learned} (**{choice['source']}**); on the report seeds it "
            f"gets {choice['final_minus_fixed']:+.2f} ± {choice['final_minus_fixed_ci95']:.2f} over the best fixed "
            "code (0 when it is the code).")


def write_report(config: ScenarioConfig, seat: str, checkpoint: Path, background: Population,
                 codec_name: str | None, seeds: Sequence[int], selection: Sequence[int], out: Path,
                 refine: Sequence[int] = ()) -> list[dict[str, Any]]:
    """:func:`report`, written to ``out/best_response.{md,csv}`` (the per-seed returns to
    ``best_response_returns.json``) and printed."""
    rows, text, per_seed = best_response_report(config, seat, checkpoint, background, codec_name, seeds, selection, out,
                                                refine)
    write_file(out / "best_response.md", text)
    write_file(out / RETURNS_FILE, json.dumps(per_seed))
    write_csv(rows, out / "best_response.csv")
    print(text)
    return rows


def selection_seeds(count: int) -> list[int]:
    return list(range(SELECTION_FIRST_SEED, SELECTION_FIRST_SEED + count))


def refine_seeds(first_look: int, count: int) -> list[int]:
    """The best fixed code's second look: ``count`` selection seeds after the first look's ``first_look``."""
    return list(range(SELECTION_FIRST_SEED + first_look, SELECTION_FIRST_SEED + first_look + count))


__all__ = ["FINAL", "FIXED_PREFIX", "LEARNED", "RETURNS_FILE", "Recorder", "best_response_report", "demand_quartiles",
           "final_choice", "pricing_by_demand", "refine_seeds", "selection_seeds", "write_report"]
