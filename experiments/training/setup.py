"""What a run's arguments mean, resolved once: :class:`RunSetup`.

:func:`resolve` parses the scenarios (once; the env runners receive the parsed configs as
data), decides the learning seats (the experiment kind's seat plan, ``kinds.py``), reads the background population file, and
names each learning seat's codec and history; it raises ``ValueError`` naming what to fix,
before Ray starts or anything is written. :func:`measure` adds what is computed from
episodes and kept in the run folder (so ``--resume`` reuses it): the observation scales and
the reference allocators' returns on the held-out seeds. Everything downstream (the RLlib
config, evaluations, checkpoints) receives the setup instead of re-deriving it from names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.files import write_file
from commons_arena.inputs import load_json
from commons_arena.scenario import MAX_RETURN, ScenarioConfig
from experiments.evaluation.engine import Observer, Tick, play
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS
from experiments.training.args import TrainArgs
from experiments.training.kind import SPLIT_PREFIX
from experiments.training.mixture import Mixture, load_mixture
from experiments.training.networks import check_warm_start
from experiments.training.references import References, anchor_means, cached_reference_returns
from experiments.training.seats import SeatPlan, module_scales
from policies.checkpoint_format import MAX_SCALE, MIN_SCALE, SIDECAR
from policies.learned import check_fits, read_sidecar
from policies.policy_set import SET_DIR
from policies.population import Population

SCALE_EPISODES = 8  # episodes per (scenario, allocator) that observation scales are fitted on
# Observation scales are fitted on episodes of their own seed stream: seeds drawn from
# SeedSequence([SCALE_STREAM, run seed]), distinct from training's and the held-out seeds' rules.
SCALE_STREAM = 0x5CA1E


@dataclass(frozen=True)
class RunSetup:
    """A run's arguments resolved: the parsed scenarios, who learns, who plays the rest."""

    args: TrainArgs
    stages: tuple[ScenarioConfig, ...]  # args.stages parsed, same order, less the validation scenarios
    plan: SeatPlan
    background: Population  # the seats that do not learn (a population file or the scenario's own)
    mix_background: Population | None  # replaces `background` in a share of training episodes (args.mix_share)
    scripted_in_env: bool  # the background plays inside the env (else as RLlib modules)
    codecs: Mapping[str, str]  # learning seat -> action codec (raw seats absent; seat_codecs.py)
    histories: Mapping[str, int]  # learning seat -> ticks of observation its module sees
    eval_seeds: tuple[int, ...]  # held-out: never trained on
    scales: Mapping[str, np.ndarray] = field(default_factory=dict)  # learning seat -> observation scale
    references: Mapping[str, References] = field(default_factory=dict)  # scenario name -> reference returns
    mixture: Mixture | None = None  # replaces `background` in training episodes: one entry drawn per episode
    # held out of `stages` (Kind.carve): never trained on, the held-out evaluations play them (Kind.judged)
    validation: tuple[ScenarioConfig, ...] = ()

    @property
    def anchors(self) -> dict[str, dict[str, float]]:
        """Scenario name -> reference allocator -> mean held-out return."""
        return anchor_means(self.references)

    @property
    def allocator_learns(self) -> bool:
        return ALLOCATOR in self.plan.seats


def resolve(args: TrainArgs) -> RunSetup:
    """Parse and check everything the arguments name (see the module docstring)."""
    args.validate()
    kind = args.kind
    loaded = load_stages(args.stages)
    refuse_heldout_stages(loaded)  # the validation scenarios too: they are carved from what training may read
    stages, validation = kind.carve(loaded, args)
    plan = kind.seat_plan(stages[0], args.learners, args.team_modules)  # names a bad learner
    args.net.check_run(plan.seats, loaded, args.init_from)  # the validation scenarios must fit the network too
    if args.use_lstm and plan.seats != [ALLOCATOR]:
        raise ValueError(f"--use-lstm is for the allocator learning alone; {args.experiment} trains {plan.seats}")
    learns = ALLOCATOR in plan.seats
    if args.init_from is not None:
        if plan.seats != [ALLOCATOR] or args.use_lstm:
            raise ValueError(f"--init-from starts the allocator learning alone (no LSTM); {args.experiment} trains "
                             f"{plan.seats}")
        check_warm_start(args.init_from, stages, args.codec, args.history, args.hidden, args.net)
    if args.mix_background is not None and not args.scripted_in_env:
        raise ValueError("--mix-background plays inside the env: drop --no-scripted-in-env")
    if args.mixture is not None and not args.scripted_in_env:
        raise ValueError("--mixture plays inside the env: drop --no-scripted-in-env")
    if args.sampler != "stock" and (why := batched_refusal(args, plan, kind.scripted_in_env(args))) is not None:
        raise ValueError(f"--sampler {args.sampler} cannot play this run ({why}); use --sampler stock")
    setup = RunSetup(
        args=args,
        stages=stages,
        plan=plan,
        background=background_population(args.background, stages[0]),  # a bad population file says what is wrong
        mix_background=None if args.mix_background is None else background_population(args.mix_background, stages[0]),
        # a curriculum, a mix or a league switches populations (or members): those play in the env
        scripted_in_env=kind.scripted_in_env(args),
        codecs=kind.seat_codecs(stages[0], plan, args),
        histories={ALLOCATOR: args.history} if learns else {},
        eval_seeds=tuple(range(args.eval_first_seed, args.eval_first_seed + args.eval_seeds)),
        mixture=None if args.mixture is None else load_mixture(args.mixture, stages),  # every roster on every stage
        validation=validation,
    )
    if args.resume is not None:  # what a resume reads back, checked before the record is rewritten or Ray starts
        run = Path(args.resume)
        saved_scales(setup, run), saved_references(setup, run)
        check_saved_checkpoint(setup, run)
    return setup


def batched_refusal(args: TrainArgs, plan: SeatPlan, scripted_in_env: bool) -> str | None:
    """Why the batched or lean sampler cannot play this run, asked of its arguments (before the run folder,
    references or Ray); ``batched_env.unsupported_reason`` asks the built env config the same when RLlib builds it."""
    lean = args.sampler == "lean"
    refusal = args.kind.sampler_refusal(args.sampler)
    reasons = ((refusal, refusal),
               (not scripted_in_env, "the background plays as RLlib modules (scripted_in_env is off)"),
               (args.use_lstm and not lean, "use_lstm: its modules carry a state only the lean runner carries"),
               (lean and args.algo != "PPO", f"{args.algo}: the lean update is PPO's"))
    return next((why for part, why in reasons if part), None)


def load_stages(names: Sequence[str]) -> tuple[ScenarioConfig, ...]:
    """The scenarios a run plays: each stage a scenario (name or file), or ``split:<name>``, a
    scenario family's split (commons_arena.family)."""
    out: list[ScenarioConfig] = []
    for name in names:
        if name.startswith(SPLIT_PREFIX):
            from commons_arena.family import load_split

            out += load_split(name.removeprefix(SPLIT_PREFIX))
        else:
            out.append(commons_arena.load_scenario(name))
    return tuple(out)


def refuse_heldout_stages(stages: Sequence[ScenarioConfig]) -> None:
    """No training run plays a scenario of a held-out split (docs/rules.md §14): ValueError naming it."""
    from commons_arena.family import refuse_heldout

    refuse_heldout(stages, "training")


def background_population(path: Path | None, config: ScenarioConfig) -> Population:
    """The non-learning seats: a population file (scripted or ``learned:`` entries) or the scenario's own."""
    return Population.default(config) if path is None else Population.from_toml(path, config)


def scale_sample_seeds(run_seed: int, episodes: int = SCALE_EPISODES) -> list[int]:
    """The episodes observation scales are fitted on (their own stream of the run's seed)."""
    return [int(s) for s in np.random.SeedSequence([SCALE_STREAM, run_seed]).generate_state(episodes)]


def sample_observations(configs: Sequence[ScenarioConfig], run_seed: int) -> dict[str, np.ndarray]:
    """Every seat's observations from the scenario's population with a random and a
    proportional allocator (the spread the observation scales are fitted on)."""
    samples = Observations()
    for config in configs:
        for allocator in ("random", "proportional"):
            list(play(config, Population.default(config).with_agent(ALLOCATOR, allocator), scale_sample_seeds(run_seed),
                      samples))
    return {seat: np.stack(obs) for seat, obs in samples.rows.items()}


class Observations(Observer):
    """Every seat's observation of every tick played (as it acted on it)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[np.ndarray]] = {}

    def tick(self, tick: Tick) -> None:
        for seat, obs in tick.observations.items():
            self.rows.setdefault(seat, []).append(obs)


def fit_scales(setup: RunSetup) -> dict[str, np.ndarray]:
    """Learning seat -> observation scale, fitted per module on every seat it plays."""
    return setup.args.net.scales(lambda: module_scales(setup.plan, sample_observations(setup.stages, setup.args.seed),
                                                       setup.args.kind.fit_scale))


def with_unit_scales(setup: RunSetup) -> RunSetup:
    """``setup`` with scale 1 for every learning seat (benchmarks and tests of the wiring,
    where the learning signal does not matter)."""
    env = commons_arena.parallel_env(setup.stages[0])
    return replace(setup, scales=setup.args.net.scales(
        lambda: {s: np.ones(env.observation_space(s).shape, np.float32) for s in setup.plan.seats}))


def saved_scales(setup: RunSetup, run: Path) -> dict[str, np.ndarray] | None:
    """A run's ``observation_scale.json`` (None if it has none): one scale per learning seat, of the seat's
    observation shape, every entry in the sidecar's bounds; else ValueError naming the file."""
    path = run / "observation_scale.json"  # learning seat -> scale (a list alone: the allocator's)
    if not os.path.lexists(path):  # a FIFO or a folder there is refused by the reader
        return None
    saved = load_json(path, "saved record", own=True)  # strict: a NaN is not a scale
    saved = saved if isinstance(saved, dict) else {ALLOCATOR: saved}
    env = commons_arena.parallel_env(setup.stages[0])
    wanted = {} if setup.args.net.cell_view else {s: env.observation_space(s).shape for s in setup.plan.seats}
    if set(saved) != set(wanted):
        raise ValueError(f"{path}: scales for {sorted(saved)[:8]}, but the run's learning seats are {sorted(wanted)}")
    scales = {}
    for seat, values in saved.items():
        if (not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values)
                or (len(values),) != wanted[seat] or not all(MIN_SCALE <= v <= MAX_SCALE for v in values)):
            raise ValueError(f"{path}: {seat}'s scale must be {wanted[seat][0]} numbers in [{MIN_SCALE}, {MAX_SCALE:.0e}] "
                             "(its observation's size)")
        scales[seat] = np.asarray(values, dtype=np.float32)
    return scales


def saved_references(setup: RunSetup, run: Path) -> dict[str, References] | None:
    """A run's ``references.json`` (None if it has none): every judged scenario's reference allocators, each
    with one finite, bounded return per held-out seed (an older run's: their means); else ValueError naming it."""
    path = run / "references.json"
    if not os.path.lexists(path):  # a FIFO or a folder there is refused by the reader
        return None
    saved = load_json(path, "saved record", own=True)  # strict: a NaN anchor would make every score NaN
    wanted = sorted({c.name for c in setup.args.kind.judged(setup)})
    if not isinstance(saved, dict) or sorted(saved) != wanted:
        raise ValueError(f"{path}: not the references of this run's held-out scenarios {wanted}")
    for scenario, refs in saved.items():
        needed = ("random", "oracle", *BASELINE_ALLOCATORS)
        if not isinstance(refs, dict) or any(name not in refs for name in needed):
            raise ValueError(f"{path}: {scenario} needs the returns of {list(needed)}")
        for name, values in refs.items():
            numbers = values if isinstance(values, list) else [values]
            if ((isinstance(values, list) and len(values) != len(setup.eval_seeds))
                    or any(isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= MAX_RETURN
                           for v in numbers)):
                raise ValueError(f"{path}: {scenario}/{name} must be {len(setup.eval_seeds)} returns (one per held-out "
                                 f"seed), each of magnitude at most {MAX_RETURN:.0e}")
    return saved


def check_saved_checkpoint(setup: RunSetup, run: Path) -> None:
    """A resumed run's checkpoint must be the networks its record describes: the allocator alone its spaces, codec,
    history and layers; several learning seats each its seat's spaces. Its data-only sidecars are read, never
    RLlib's pickles."""
    checkpoint = run / "checkpoint"
    if not os.path.lexists(checkpoint):
        return
    # every checkpoint the run saves holds these data-only files beside RLlib's (export.save_policies): without
    # them the record cannot be checked against it, and a mismatch would fail only after Ray
    if setup.plan.seats == [ALLOCATOR] and not setup.args.use_lstm and setup.args.net.learned(run) is not None:
        args = setup.args
        if not (checkpoint / SIDECAR).is_file():
            raise ValueError(f"--resume {run}: its checkpoint has no {SIDECAR}, which the run writes with every "
                             "checkpoint: not a checkpoint this run saved; start a new run")
        check_warm_start(str(checkpoint), setup.stages, args.codec, args.history, args.hidden, args.net,
                         where=f"--resume {run}: its checkpoint")
    for seat in setup.plan.seats if setup.plan.seats != [ALLOCATOR] else ():
        folder = checkpoint / SET_DIR / seat
        if not (folder / SIDECAR).is_file():
            raise ValueError(f"--resume {run}: its checkpoint has no {SET_DIR}/{seat}/{SIDECAR}, which the run writes "
                             "with every checkpoint: not a checkpoint this run saved; start a new run")
        check_fits(read_sidecar(folder), setup.stages[0], seat, folder)


def measure(setup: RunSetup, run: Path) -> RunSetup:
    """``setup`` with its observation scales and held-out references, read from the run folder
    when it has them (a resumed run, checked as :func:`saved_scales` and :func:`saved_references` say), else
    computed and written there."""
    scale_path = run / "observation_scale.json"
    scales = saved_scales(setup, run)
    if scales is None:
        scales = fit_scales(setup)
        if (start := setup.args.net.start_scale(setup.args.init_from)) is not None:  # its weights were trained on it
            scales[ALLOCATOR] = start
        write_file(scale_path, json.dumps({s: v.tolist() for s, v in scales.items()}))
    references_path = run / "references.json"  # per-seed returns of every reference allocator
    references = saved_references(setup, run)
    if references is None:
        cache = setup.args.out / ".references"
        references = {c.name: cached_reference_returns(cache, c, setup.eval_seeds) for c in setup.args.kind.judged(setup)}
        write_file(references_path, json.dumps(references, indent=1))
    return replace(setup, scales=scales, references=references)


__all__ = ["RunSetup", "background_population", "fit_scales", "load_stages", "measure",
           "refuse_heldout_stages", "resolve", "sample_observations", "saved_references", "saved_scales", "scale_sample_seeds",
           "with_unit_scales"]
