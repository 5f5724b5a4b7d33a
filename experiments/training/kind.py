"""The experiment kind: what ``commons-arena train`` asks of every ``--experiment``, and the defaults.

A kind is asked, never switched on (its flags are read by the kinds' own hooks only,
``tests/test_layout.py``): which seats learn, which scenarios a run plays, holds out and is judged on,
what is wrong with its arguments, where learning starts, what it adds to the RLlib config, and its work
around each iteration, a resume and the end of training: one method each below. The defaults are the
``allocator_ppo`` kind's; the other kinds, registered by name, are in ``kinds.py``.

Light on purpose (``args.py`` and the command line import it): RLlib and the reports are
imported inside the hooks that need them. A hook's ``setup`` is the run's
:class:`~experiments.training.setup.RunSetup` and ``args`` its ``TrainArgs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.seats import SeatPlan, TeamModules, exact_scale
from policies.learned import observation_scale

ZERO_BIAS = 3.0  # the allocator starts at its codec's base policy (planner), ~0.93 per sub-action
SPLIT_PREFIX = "split:"  # a stage naming a scenario family's split (allocator_family) instead of one scenario
FAMILY = "allocator_family"  # the one kind that plays a family's split (kinds.AllocatorFamily)


class Kind:
    """The allocator learns alone on one scenario (``allocator_ppo``); the defaults of every kind."""

    name: ClassVar[str] = "allocator_ppo"
    zero_bias: ClassVar[float] = ZERO_BIAS  # the default of --zero-bias
    switches_populations: ClassVar[bool] = False  # a curriculum, a mix or a league: scripted seats play in the env
    league: ClassVar[bool] = False  # team seats shared by learned and scripted members: exact scales, league codecs
    chooses_learners: ClassVar[bool] = False  # --learners names the learning seats
    shape_free: ClassVar[bool] = False  # plays clusters of every shape: needs --network cells
    batched_refusal: ClassVar[str | None] = None  # why --sampler batched cannot play this kind (None: it can)
    lean_plays: ClassVar[bool] = False  # the lean sampler plays it all the same (it restarts its arenas at a switch)

    def stages(self, args: Any) -> tuple[str, ...]:
        """The scenarios of a run (curriculum stages, mixed tiers, a family's split, or ``--scenario``)."""
        return (args.scenario,)

    def sampler_refusal(self, sampler: str) -> str | None:
        """Why ``--sampler`` batched or lean cannot play this kind (None: it can)."""
        return None if sampler == "lean" and self.lean_plays else self.batched_refusal

    def seat_plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        """The learning seats (and their modules) of a run on ``config``."""
        if not self.chooses_learners and tuple(learners) != ("allocator",):
            raise ValueError(f"--learners is for --experiment seats_ppo or best_response; {self.name} decides its "
                             "learners itself")
        return self.plan(config, learners, team_modules)

    def plan(self, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules) -> SeatPlan:
        return SeatPlan.single("allocator")

    def allocator_learns(self, learners: Sequence[str]) -> bool:
        """Whether the allocator learns in a run given ``--learners`` (what a report of the run may compare
        with the scripted allocators), without a scenario to plan on."""
        return ALLOCATOR in learners if self.chooses_learners else True

    def problems(self, args: Any) -> list[str]:
        """What is wrong with ``args`` for this kind (``TrainArgs.validate`` raises the first)."""
        if args.family_scenarios or args.family_share:
            return [f"--family-scenarios and --family-share are for --experiment {FAMILY}"]
        if args.validation_scenarios:
            return [f"--validation-scenarios holds scenarios of a family's training split out of training: it is for "
                    f"--experiment {FAMILY} (--experiment {self.name} plays no split)"]
        return []

    def carve(self, stages: tuple[ScenarioConfig, ...], args: Any
              ) -> tuple[tuple[ScenarioConfig, ...], tuple[ScenarioConfig, ...]]:
        """The run's parsed stages parted into (what training plays, its validation scenarios): none held out."""
        return stages, ()

    def continues_allocator(self) -> bool:
        """The allocator learns alone (the kind keeps the default :meth:`plan`) through each scenario's own view:
        a PSRO allocator step or the arms race's second round may continue a learned allocator in this kind."""
        return type(self).plan is Kind.plan and not self.shape_free

    def scripted_in_env(self, args: Any) -> bool:
        """The background plays inside the env: asked for, or this kind switches populations (a curriculum,
        a mix, a league: its scripted seats must follow each scenario or member)."""
        return bool(args.scripted_in_env) or self.switches_populations

    def seat_codecs(self, config: ScenarioConfig, plan: SeatPlan, args: Any) -> dict[str, str]:
        """Learning seat -> its action codec (a league's teams share theirs with scripted members)."""
        from experiments.training.seat_codecs import seat_codecs

        return seat_codecs(config, plan, args.codec, args.seat_codec, league=self.league)

    def fit_scale(self, samples: np.ndarray) -> np.ndarray:
        """A learning seat's observation scale from its sample observations (a league's: exact powers of two,
        shared by learned and scripted members)."""
        scale = observation_scale(samples)
        return exact_scale(scale) if self.league else scale

    def judged(self, setup: Any, stage: int | None = None) -> tuple[ScenarioConfig, ...]:
        """The scenarios a held-out evaluation plays: at curriculum stage ``stage``, or over the whole run
        (None: its final scores and references); a mix is judged on all of them (a family: a fixed draw) either way."""
        return tuple(setup.stages) if stage is None else (setup.stages[stage],)

    def judged_as(self, scenarios: Sequence[ScenarioConfig]) -> str:
        """The ``scenario`` of a held-out evaluation's history row (a mix's: ``mixed``)."""
        return scenarios[0].name

    def label(self, stages: Sequence[str]) -> str:
        """What a run's default name says it played (one stage's name; several: ``curriculum``)."""
        return stages[0].removeprefix(SPLIT_PREFIX) if len(stages) == 1 else "curriculum"

    def describe(self, setup: Any, stage: int) -> str:
        """What the run's first line says it trains on."""
        return str(setup.args.stages[stage])

    def file_defaults(self) -> dict[str, Any]:
        """What an experiment file writes for fields left unset whose default this kind decides (pinned: a later
        default must not move a rerun)."""
        return {"zero_bias": self.zero_bias}

    def configure(self, setup: Any, env: ArenaEnvConfig, stage: int) -> tuple[ArenaEnvConfig, Any, dict[str, Any]]:
        """``env`` with this kind's part of the env config, its callbacks class (None: the default
        metrics) and extra arguments of ``build_algorithm_config`` (modules, mapping)."""
        return env, None, {}

    def start(self, algo: Any, setup: Any, stage: int) -> None:
        """Before a session's first iteration: every env plays the current stage (a mix draws its own)."""
        from experiments.training.callbacks import set_scenario_everywhere

        set_scenario_everywhere(algo, setup.stages[stage])

    def after_iteration(self, algo: Any, setup: Any, run: Path, result: dict[str, Any], state: Any) -> None:
        """This kind's work after each training iteration (a curriculum's promotion, a league's snapshot)."""

    def start_weights(self, algo: Any, setup: Any, run: Path) -> None:
        """Where a new run's learning starts: every coded module at its codec's base policy (the allocator's
        ``need``: the planner; a team's ``bluff``: truthful; the broker's ``markup``: demand_priced), its
        zero code ``--zero-bias`` more logit, as its network places it. A module's seats share one codec."""
        from policies.codecs import make_codec

        for module, seats in setup.plan.modules.items():
            codec_name = setup.codecs.get(seats[0])
            if codec_name and setup.args.favour_strength != 0:
                setup.args.net.favour_zero(algo, module, make_codec(codec_name, setup.stages[0], seats[0]),
                                           setup.args.favour_strength)

    def before_restore(self, algo: Any, setup: Any, run: Path, iterations: int) -> None:
        """What must exist in ``algo`` before a resumed run's checkpoint loads into it."""

    def after_training(self, setup: Any, run: Path) -> None:
        """The kind's report, written into the run folder once training has stopped."""


__all__ = ["FAMILY", "SPLIT_PREFIX", "ZERO_BIAS", "Kind"]
