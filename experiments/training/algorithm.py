"""The RLlib algorithm of a run: its config from the run's :class:`~experiments.training.setup.RunSetup`.

:func:`build_algorithm_config` wires the env, one trained module per module of the seat
plan, the never-trained modules (scripted seats, a league's members) and the callbacks;
:func:`build_algorithm` adds the run's experiment (a curriculum's, a league's), resources and
learning settings, and builds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from experiments.training.callbacks import RewardTermsCallback
from experiments.training.env import ArenaRLlibEnv
from experiments.training.env_config import ArenaEnvConfig, BackgroundMix, BackgroundMixture, Scenario
from experiments.training.scripted import PolicyFactory, ScriptedRLModule, registered_policy, row_tagging_connector
from experiments.training.seats import SeatPlan
from experiments.training.setup import RunSetup
from policies.shipping import pack_all

logger = logging.getLogger(__name__)


def fit_num_env_runners(requested: int, num_cpus_per_env_runner: float = 1.0) -> int:
    """Clamp ``requested`` remote env runners to what Ray can schedule right now.

    ``build_algo()`` waits forever (silently) for actors whose CPUs Ray does not have.
    The learner stays in the driver process (``num_learners=0``) and asks for none. Under
    Tune the trial's driver also reserves ``num_cpus_for_main_process`` (1 CPU), which is
    not counted here: ask for one runner fewer there.
    """
    if requested <= 0:
        return 0
    if not ray.is_initialized():
        raise RuntimeError("call ray.init() before asking for remote env runners")
    cpus = ray.available_resources().get("CPU", 0.0)
    fits = int(cpus // num_cpus_per_env_runner)
    if fits < requested:
        logger.warning("only %.1f CPUs available: %d env runners instead of %d", cpus, fits, requested)
    return min(requested, fits)


def build_algorithm_config(
    scenario: Scenario,
    plan: SeatPlan,
    *,
    scripted: Mapping[str, PolicyFactory | str] | None,
    env: ArenaEnvConfig | None = None,
    model_config: DefaultModelConfig | dict[str, Any] | None = None,
    algo_config: AlgorithmConfig | None = None,
    seed: int | None = None,
    callbacks: type[RLlibCallback] = RewardTermsCallback,
    extra_modules: Mapping[str, RLModuleSpec] | None = None,
    mapping_fn: Callable[..., str] | None = None,
    module_class: type | None = None,
) -> AlgorithmConfig:
    """A config where the seats of ``plan`` train (one module per plan module) and every other seat is background.

    ``scripted`` maps each other seat to its Policy factory, run as a ScriptedRLModule (seeded by the episode's
    seed and the seat, ``experiments.training.scripted``); ``None`` plays the background (``env.background``,
    default the scenario's own population) inside the env, where RLlib sees only the learning seats (the env is
    built once here to check every seat is covered). ``algo_config``: default ``PPOConfig()``, or any new-stack
    config. ``extra_modules`` (never trained) and ``mapping_fn`` (replacing the plan's) let a league map learning
    seats to opponents per episode (experiments.training.league). ``module_class``: the learning modules' (a
    network's, experiments.training.networks). Resources and learning settings are the caller's."""
    learning = plan.seats
    env = replace(env or ArenaEnvConfig(), scenario=scenario, seat_identity=dict(plan.identity))
    if scripted is None:  # the background plays inside the env; RLlib sees only the learning seats
        env = replace(env, scripted_in_env=True, learned_agents=tuple(learning))
    probe = ArenaRLlibEnv(env)
    agents: list[str] = [str(a) for a in probe.possible_agents]
    obs_spaces = {a: probe.get_observation_space(a) for a in agents}
    act_spaces = {a: probe.get_action_space(a) for a in agents}
    seat_index = {str(a): i for i, a in enumerate(probe.par_env.possible_agents)}
    probe.close()
    outside = [a for a in learning if a not in agents]
    if outside:
        raise ValueError(f"learned agent(s) {outside} not among the env's agents {agents}")
    scripted = scripted or {}
    missing = [a for a in agents if a not in learning and a not in scripted]
    unknown = [a for a in scripted if a not in agents or a in learning]
    if missing or unknown:
        raise ValueError(f"scripted policies: missing for {missing}, not scriptable {unknown}")

    specs: dict[str, RLModuleSpec] = {}
    for module, seats in plan.modules.items():
        first = seats[0]
        for seat in seats[1:]:
            if obs_spaces[seat].shape != obs_spaces[first].shape or act_spaces[seat] != act_spaces[first]:
                raise ValueError(f"module {module!r} cannot play both {first!r} and {seat!r}: their spaces differ")
        specs[module] = RLModuleSpec(module_class=module_class, observation_space=obs_spaces[first],
                                     action_space=act_spaces[first], model_config=model_config)
    for module_id, spec in (extra_modules or {}).items():
        options = spec.model_config if isinstance(spec.model_config, dict) else {}  # a DefaultModelConfig names no seat
        owner = options.get("agent_id")
        if spec.observation_space is None and owner in obs_spaces:
            spec.observation_space, spec.action_space = obs_spaces[owner], act_spaces[owner]
        specs[module_id] = spec
    for aid in (a for a in agents if a not in learning):  # a scripted seat: a never-trained module
        specs[aid] = RLModuleSpec(module_class=ScriptedRLModule, observation_space=obs_spaces[aid],
                                  action_space=act_spaces[aid], model_config={
                                      "policy_factory": scripted[aid], "agent_id": aid, "seat_index": {aid: seat_index[aid]}})

    config = algo_config if algo_config is not None else PPOConfig()
    config = (
        config.environment(ArenaRLlibEnv, env_config=env.for_rllib())
        # Replaces any env-to-module connector set before: scripted modules need it.
        .env_runners(env_to_module_connector=row_tagging_connector)
        # A remote learner would need its own CPU; on 2 cores the driver does the update.
        .learners(num_learners=0)
        .multi_agent(
            policies=list(specs),  # a list: a set would order the modules (and their seeded init) by string hash
            policy_mapping_fn=mapping_fn or plan.mapping_fn(),
            policies_to_train=list(plan.modules),
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .callbacks(callbacks)
    )
    if seed is not None:
        config = config.debugging(seed=seed)
    return config


def scripted_factories(setup: RunSetup) -> dict[str, PolicyFactory]:
    """Picklable policy factories for every seat that does not learn (the background)."""
    config = setup.stages[0]
    entries = setup.background.resolve(config, strict=False)
    return {seat: registered_policy(e.policy, config, **e.params) for seat, e in entries.items()
            if seat not in setup.plan.seats}


def build_algorithm(setup: RunSetup, stage: int = 0) -> Algorithm:
    """The RLlib algorithm of the run (curriculum stage ``stage`` when resuming one)."""
    return algorithm_config(setup, stage).build_algo()


def algorithm_config(setup: RunSetup, stage: int = 0) -> AlgorithmConfig:
    """The RLlib config of the run: its experiment's pieces, resources and learning settings."""
    args, plan, first = setup.args, setup.plan, setup.stages[0]
    backgrounds = [setup.background, *([setup.mix_background] if setup.mix_background else [])]
    mixture = [] if setup.mixture is None else setup.mixture.populations(first)  # each roster's, or the scenario's own
    backgrounds += [b for b, roster in zip(mixture, setup.mixture.rosters if setup.mixture else (), strict=True) if roster]
    env = ArenaEnvConfig(
        # none for the shape-free allocator
        observation_scale={seat: np.asarray(setup.scales[seat]) for seat in plan.seats if seat in setup.scales},
        background=setup.background.to_dict(),
        # its `learned:` checkpoints as bytes: env runners on other nodes cannot read the driver's paths
        checkpoints=tuple(pack_all(e.policy for c in setup.stages for b in backgrounds
                                   for e in b.resolve(c, strict=False).values())),
        action_codec=dict(setup.codecs),
        history=dict(setup.histories),
        # by scenario hash: lets the metrics callback report a normalised score per episode
        score_anchors={c.content_hash: setup.anchors[c.name] for c in setup.stages if c.name in setup.anchors},
        network={seat: args.net for seat in plan.seats},
        # drawn per training episode (experiments.training.env)
        background_mix=None if setup.mix_background is None else BackgroundMix(setup.mix_background.to_dict(),
                                                                                args.mix_share),
        background_mixture=None if setup.mixture is None else BackgroundMixture(
            tuple(setup.mixture.names), tuple(b.to_dict() if roster else None
                                              for b, roster in zip(mixture, setup.mixture.rosters, strict=True)),
            tuple(setup.mixture.weights)))
    env, kind_callbacks, kind_parts = args.kind.configure(setup, env, stage)  # a curriculum's, a league's
    callbacks: type[RLlibCallback] = kind_callbacks or RewardTermsCallback
    model_config, module_class, learner_class = args.net.module(setup)
    if args.sampler == "lean" and module_class is None:  # RLlib's default module with the one-tensor distribution
        from experiments.training.lean_module import LeanPPOModule

        module_class = LeanPPOModule
    config = build_algorithm_config(
        first, plan,
        scripted=None if setup.scripted_in_env else scripted_factories(setup),
        env=env,
        model_config=model_config,
        module_class=module_class,
        algo_config=PPOConfig() if args.algo == "PPO" else APPOConfig(),
        seed=args.seed,
        callbacks=callbacks,
        **kind_parts,
    )
    # No sample timeout: RLlib's 60 s default drops a sample that takes longer, but the remote call
    # runs on, and the next request queues behind it and times out too. On a loaded 2-core machine
    # one slow sample so turned into "sampled nothing" for every later iteration of a run (seen in
    # the universal runs and a fine-tune; docs/training.md). Waiting is what a local run wants.
    config = config.env_runners(num_env_runners=fit_num_env_runners(args.num_env_runners),
                                num_envs_per_env_runner=args.num_envs_per_env_runner, sample_timeout_s=None)
    if args.sampler != "stock":  # every sub-env of a runner in one call of the batched core
        from experiments.training.batched_env import BatchedEnvRunner, unsupported_reason

        why = unsupported_reason(config.env_config, lean=args.sampler == "lean")
        if why is not None:
            raise ValueError(f"--sampler {args.sampler} cannot play this run ({why}); use --sampler stock")
        config = config.env_runners(env_runner_cls=BatchedEnvRunner)
    if args.sampler == "lean":  # arrays, not episodes: the runner's rollouts, PPO's update from a batch
        from experiments.training.lean import LeanEnvRunner
        from experiments.training.lean_update import LeanPPO, OverlappedLeanPPO

        config = config.env_runners(env_runner_cls=LeanEnvRunner)
        config.algo_class = OverlappedLeanPPO if args.overlap else LeanPPO
    ppo_only: dict[str, Any] = {"vf_clip_param": args.vf_clip} if args.algo == "PPO" else {}  # APPO has none
    # typed as the base AlgorithmConfig, whose training() lacks PPO's and APPO's lambda_ and entropy_coeff
    config = config.training(  # type: ignore[call-arg]
        train_batch_size_per_learner=args.train_batch_size, minibatch_size=args.minibatch_size,
        num_epochs=args.num_epochs, lr=args.lr, gamma=args.gamma, lambda_=args.gae_lambda,
        entropy_coeff=args.entropy_coeff, **ppo_only)
    if args.sampler == "lean" and learner_class is None:  # modules of unequal rows: each its own epochs
        from experiments.training.lean_update import LeanPPOLearner

        learner_class = LeanPPOLearner
    if learner_class is not None and args.algo == "PPO":  # the shape-free allocator: PPO clipped per cell
        config = config.training(learner_class=learner_class)
    return config


__all__ = ["algorithm_config", "build_algorithm", "build_algorithm_config", "fit_num_env_runners", "scripted_factories"]
