"""Experiment kinds: what ``commons-arena train --experiment NAME`` trains, one class per kind.

Each kind overrides the hooks of :class:`~experiments.training.kind.Kind` (whose defaults are the
``allocator_ppo`` kind) where it differs: a curriculum's promotion, a mix's draw, a family's split and
validation scenarios, the seats that learn, a league's members and snapshots, a best response's start and
report. A new experiment is one class here, added to :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR, TIERS
from commons_arena.scenario import ScenarioConfig
from experiments.training.env_config import ArenaEnvConfig, Curriculum, LeagueSettings
from experiments.training.kind import FAMILY, SPLIT_PREFIX, Kind
from experiments.training.seats import ALL_ROLES, SeatPlan, TeamModules

# In self-play the other seats move as well and the allocator's gradient is noisier: at 3.0 its
# greedy action never left the zero code in 6.5 minutes on crisis (+0.00 ± 0.00 against planner);
# at 1.0 it did within 4 iterations, no worse than planner (docs/training.md, "Self-play").
SELFPLAY_ZERO_BIAS = 1.0
# A best response starts from no favoured code: at 3.0 a team best response on crisis against
# proportional still played truthful on 100% of ticks after 11 iterations (+0 over truthful);
# at 0 (with lr 1e-3) it reached +23.2 ± 7.0 in 13 (docs/negotiation.md).
BEST_RESPONSE_ZERO_BIAS = 0.0
# allocator_family evaluates on a fixed draw of its training split's scenarios (the same for every run seed)
EVAL_SCENARIO_STREAM = 0xE5A1


class AllocatorCurriculum(Kind):
    """The allocator learns standard -> elevated -> crisis, promoted on its held-out score."""

    name = "allocator_curriculum"
    switches_populations = True
    batched_refusal = "curriculum: a curriculum switches every env's scenario"
    lean_plays = True

    def stages(self, args: Any) -> tuple[str, ...]:
        return TIERS

    def configure(self, setup: Any, env: ArenaEnvConfig, stage: int) -> tuple[ArenaEnvConfig, Any, dict[str, Any]]:
        from experiments.training.callbacks import CurriculumCallback

        args = setup.args
        curriculum = Curriculum(tuple(setup.stages), args.promote_at, args.promote_after, stage)
        return replace(env, curriculum=curriculum), CurriculumCallback, {}

    def after_iteration(self, algo: Any, setup: Any, run: Path, result: dict[str, Any], state: Any) -> None:
        if result.get("curriculum_stage", state.stage) != state.stage:  # its callback promoted every env
            state.stage = result["curriculum_stage"]
            print(f"  promoted to {setup.args.stages[state.stage]}")


class AllocatorMixed(Kind):
    """The allocator learns on every tier at once: each episode one of standard / elevated / crisis."""

    name = "allocator_mixed"
    switches_populations = True

    def stages(self, args: Any) -> tuple[str, ...]:
        return TIERS

    def judged(self, setup: Any, stage: int | None = None) -> tuple[ScenarioConfig, ...]:
        return tuple(setup.stages)

    def judged_as(self, scenarios: Sequence[ScenarioConfig]) -> str:
        return "mixed"

    def label(self, stages: Sequence[str]) -> str:
        return super().label(stages) if len(stages) == 1 else "mixed"

    def describe(self, setup: Any, stage: int) -> str:
        return f"{len(setup.stages)} scenarios of {'+'.join(setup.args.stages)}"

    def configure(self, setup: Any, env: ArenaEnvConfig, stage: int) -> tuple[ArenaEnvConfig, Any, dict[str, Any]]:
        return replace(env, scenarios=tuple(setup.stages)), None, {}  # each episode draws one

    def start(self, algo: Any, setup: Any, stage: int) -> None:
        """Every episode draws its scenario: nothing to set."""


class AllocatorFamily(AllocatorMixed):
    """The shape-free allocator (--network cells) learns on a scenario family's training split (--split):
    each episode one of its scenarios; its evaluations play a fixed draw of --eval-scenarios of them, or with
    --validation-scenarios K the K scenarios of the split held out of training (commons_arena.family.hold_out)."""

    name = FAMILY
    shape_free = True

    def stages(self, args: Any) -> tuple[str, ...]:
        return (SPLIT_PREFIX + args.split, *args.family_scenarios)

    def problems(self, args: Any) -> list[str]:
        unnamed = ("--family-share gives --family-scenarios a share of the episodes: name them with --family-scenarios"
                   if args.family_share != 0 and not args.family_scenarios else None)
        return [problem for problem in (args.net.shape_problem(self.name), unnamed) if problem]

    def carve(self, stages: tuple[ScenarioConfig, ...], args: Any
              ) -> tuple[tuple[ScenarioConfig, ...], tuple[ScenarioConfig, ...]]:
        """``--validation-scenarios`` of the split (the first stages; --family-scenarios follow) held out of training."""
        if not args.validation_scenarios:
            return stages, ()
        from commons_arena.family import hold_out, split_file

        n_split = len(split_file(args.split).hashes)  # the split's scenarios come first (stages())
        if args.validation_scenarios >= n_split:
            raise ValueError(f"--validation-scenarios {args.validation_scenarios} must leave some of split "
                             f"{args.split!r}'s {n_split} scenarios to train on")
        train, validation = hold_out(stages[:n_split], args.validation_scenarios)
        return (*train, *stages[n_split:]), validation

    def judged(self, setup: Any, stage: int | None = None) -> tuple[ScenarioConfig, ...]:
        """Its validation scenarios (never trained on), else a fixed draw of ``--eval-scenarios`` of its training
        scenarios (the same for every run seed)."""
        if setup.validation:
            return tuple(setup.validation)
        stages, n = tuple(setup.stages), setup.args.eval_scenarios
        order = np.random.default_rng(EVAL_SCENARIO_STREAM).permutation(len(stages))[:n]
        return stages if len(stages) <= n else tuple(stages[i] for i in sorted(order.tolist()))

    def describe(self, setup: Any, stage: int) -> str:
        held = f" ({len(setup.validation)} of the split held out for validation)" if setup.validation else ""
        return super().describe(setup, stage) + held

    def after_training(self, setup: Any, run: Path) -> None:
        learned = setup.args.net.learned(run)
        if learned is not None:  # training never reads the held-out split: the benchmark does
            print(f"held-out split: commons-arena benchmark {learned} --suite heldout-allocator")

    def configure(self, setup: Any, env: ArenaEnvConfig, stage: int) -> tuple[ArenaEnvConfig, Any, dict[str, Any]]:
        """The family's scenarios' returns differ by 100x: the allocator's training reward is brought to one
        scale per scenario (experiments.training.references.reward_scales), so no scenario's scale
        dominates the gradient or the value function; evaluations and reports stay unscaled. With
        ``--family-share`` the ``--family-scenarios`` (the last stages) play that share of the episodes."""
        from experiments.training.references import reward_scales

        env, _, _ = super().configure(setup, env, stage)
        return replace(env, reward_scale={ALLOCATOR: reward_scales(setup.stages, setup.args.seed)},
                       scenario_weights=self.draw_weights(setup.args, len(setup.stages))), None, {}

    def draw_weights(self, args: Any, n_stages: int) -> tuple[float, ...] | None:
        """Each stage's weight in the draw of a training episode's scenario: ``--family-scenarios`` (the last
        stages, :meth:`stages`) share ``--family-share`` of the episodes, the split the rest (None: all alike)."""
        if args.family_share == 0:
            return None
        return tuple(scenario_weights(n_stages, len(args.family_scenarios), args.family_share))


def scenario_weights(n_stages: int, n_extra: int, share: float) -> list[float]:
    """Draw weights of ``n_stages`` scenarios whose last ``n_extra`` share ``share`` of the episodes
    (each of them alike) and the others the rest (each alike)."""
    n_split = n_stages - n_extra
    if n_extra < 1 or n_split < 1 or not 0 < share < 1:
        raise ValueError(f"cannot weight {n_extra} of {n_stages} scenarios at a share of {share}")
    return [(1 - share) / n_split] * n_split + [share / n_extra] * n_extra


class SeatsPPO(Kind):
    """The --learners seats learn (seat ids or roles), the rest are the background."""

    name = "seats_ppo"
    chooses_learners = True

    def plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        return SeatPlan.build(config, learners, team_modules)


class SelfPlay(Kind):
    """Allocator, teams and broker all learn."""

    name = "selfplay"
    zero_bias = SELFPLAY_ZERO_BIAS

    def plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        return SeatPlan.build(config, ALL_ROLES, team_modules)


class League(Kind):
    """A shared team module learns against a mix of scripted teams and frozen snapshots of itself
    (experiments/training/league.py); the payoff matrix of its snapshots is its report."""

    name = "league"
    switches_populations = True
    batched_refusal = "league: league members switch per episode"
    lean_plays = True
    league = True

    def plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        return SeatPlan.build(config, ["team"], "shared")

    def allocator_learns(self, learners: Sequence[str]) -> bool:
        return False

    def configure(self, setup: Any, env: ArenaEnvConfig, stage: int) -> tuple[ArenaEnvConfig, Any, dict[str, Any]]:
        from experiments.training import league

        args, teams, first = setup.args, setup.plan.seats, setup.stages[0]
        pool = (league.LEARNER, *(f"{league.SCRIPTED_PREFIX}{name}" for name in args.league_scripted))
        settings = LeagueSettings(pool, tuple(teams), args.snapshot_margin, args.snapshot_gap)
        parts = {"extra_modules": league.scripted_member_specs(args.league_scripted, first, teams,
                                                               setup.scales[teams[0]]),
                 "mapping_fn": league.mapping_for(list(pool), teams)}
        return replace(env, league=settings), league.LeagueCallback, parts

    def after_iteration(self, algo: Any, setup: Any, run: Path, result: dict[str, Any], state: Any) -> None:
        from experiments.training import league
        from experiments.training.export import save_snapshot

        snapshot = result.get("league", {}).get("snapshot")
        if snapshot:  # a frozen copy of the learner joined the mix: learned: plays it from here
            save_snapshot(algo, setup, snapshot, run / league.SNAPSHOTS / snapshot, setup.stages[0])

    def before_restore(self, algo: Any, setup: Any, run: Path, iterations: int) -> None:
        from experiments.training import league

        mix, since = league.last_mix(run, iterations)  # the snapshots' modules must exist before their weights load
        league.restore_mix(algo, mix, setup.plan.seats, since)

    def after_training(self, setup: Any, run: Path) -> None:
        from experiments.training import league

        if (run / league.SNAPSHOTS).is_dir():
            payoff = league.payoff_matrix(run, setup.stages[0], setup.eval_seeds)
            print(f"league payoff matrix ({len(payoff['snapshots'])} snapshots) and Nash mixture: "
                  f"{run / 'league_payoff.json'}; Nash {payoff['nash']}")


class BestResponse(Kind):
    """The one --learners seat (a team, or the broker) learns against a frozen --background, then
    is reported against every scripted policy of its role (experiments/evaluation/best_response.py)."""

    name = "best_response"
    zero_bias = BEST_RESPONSE_ZERO_BIAS
    chooses_learners = True

    def plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        seats = SeatPlan.build(config, learners, team_modules).seats
        if len(seats) != 1 or seats[0] == "allocator":
            raise ValueError(f"--experiment best_response trains one team or the broker: name it with --learners "
                             f"(one of {[a for a in config.agents if a != 'allocator']}), got {list(learners)}")
        return SeatPlan.build(config, seats, "per_team")

    def allocator_learns(self, learners: Sequence[str]) -> bool:
        return False  # its one learner is a team or the broker

    def start_weights(self, algo: Any, setup: Any, run: Path) -> None:
        """The learner starts at its codec's best fixed code (experiments/evaluation/best_code.py), searched on
        the report's selection seeds; with ``--best-code-bias 0`` or a seat without a codec, as every kind."""
        from experiments.evaluation.best_code import cached_search
        from experiments.evaluation.best_response import refine_seeds, selection_seeds
        from experiments.evaluation.fixed_codes import Arena
        from experiments.training.weights import favour_code
        from policies.codecs import make_codec

        args, seat = setup.args, setup.plan.seats[0]
        codec_name = setup.codecs.get(seat)
        if args.best_code_bias == 0 or not codec_name:
            return super().start_weights(algo, setup, run)
        config = setup.stages[0]
        codec = make_codec(codec_name, config, seat)
        found = cached_search(run, Arena(config, None, seat, setup.background), codec,  # the report's seeds too
                              selection_seeds(args.selection_seeds), refine_seeds(args.selection_seeds, args.selection_refine))
        print(f"  search: best fixed {found.codec} code of {found.codes_tried} on {len(found.seeds)} selection "
              f"seeds: {found.description} (mean return {found.selection_mean:.2f}); learning starts there "
              f"(logit advantage {args.best_code_bias:g})")
        favour_code(algo, setup.plan.module_of[seat], np.asarray(codec.nvec), np.asarray(found.code), args.best_code_bias)

    def after_training(self, setup: Any, run: Path) -> None:
        from experiments.evaluation.best_response import refine_seeds, selection_seeds, write_report

        args, seat = setup.args, setup.plan.seats[0]
        seeds = list(range(args.report_first_seed, args.report_first_seed + args.report_seeds))
        write_report(setup.stages[0], seat, run / "best", setup.background, setup.codecs.get(seat), seeds,
                     selection_seeds(args.selection_seeds), run, refine_seeds(args.selection_seeds, args.selection_refine))


KINDS: dict[str, Kind] = {kind.name: kind for kind in (Kind(), AllocatorCurriculum(), AllocatorMixed(), AllocatorFamily(),
                                                       SeatsPPO(), SelfPlay(), League(), BestResponse())}


ALLOCATOR_KINDS = tuple(name for name, kind in KINDS.items() if kind.continues_allocator())


def kind_of(name: str) -> Kind:
    """The kind named ``name`` (``--experiment``)."""
    if name not in KINDS:
        raise ValueError(f"--experiment must be one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def plan_for(experiment: str, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
    """The learning seats ``experiment`` trains on ``config`` (:meth:`Kind.seat_plan`)."""
    return kind_of(experiment).seat_plan(config, learners, team_modules)


__all__ = ["ALLOCATOR_KINDS", "KINDS", "kind_of", "plan_for"]
