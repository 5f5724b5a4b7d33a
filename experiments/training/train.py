"""Train seats of the arena with RLlib (new API stack) against a background population.

The experiment kinds (one class each in ``kinds.py``), read top to bottom:

* ``allocator_ppo``: the allocator learns on one scenario, fixed background population.
* ``allocator_curriculum``: ``standard → elevated → crisis``; an RLlib callback
  (``CurriculumCallback``) promotes every env to the next stage when the training
  episodes' normalised score reaches ``promote_at``.
* ``seats_ppo`` / ``selfplay``: the ``--learners`` seats, or every seat, learn at once
  (the seat plan and module sharing in ``seats.py``).
* ``league``: the shared team module learns against scripted teams and frozen snapshots of
  itself (``experiments/training/league.py``).
* ``best_response``: one team or the broker (``--learners``) learns against a frozen
  background, then is reported beside every scripted policy of its role and its codec's
  best fixed code on held-out seeds (``best_response.py``).
* ``allocator_mixed``: every training episode plays one of ``standard``, ``elevated``,
  ``crisis`` at random (each with its own population); held-out evaluations play all
  three and the run keeps the checkpoint with the best mean score over them.

The allocator acts through an action codec (``policies.codecs``; default ``need``:
corrections to the ``planner``'s need estimates, starting from the zero correction, see
:func:`~experiments.training.weights.favour_code`) and may see the last ``history``
ticks stacked (``policies.learned.ModuleInterface``) or carry an LSTM (``use_lstm``). Learning
teams and the broker act through their role's codec too (``bluff``, ``markup``; ``--seat-codec``,
``seat_codecs.py``), each started at its zero code (truthful, demand_priced).

Every ``eval_every`` iterations the current allocator module plays ``eval_seeds``
held-out seeds (never used for training) outside RLlib; its normalised score
``(R - R_random) / (R_oracle - R_random)`` on those same seeds, the baselines' scores,
a checkpoint (plus ``arena_policy.json``, what ``learned:<dir>`` needs), ``history.json``
and ``learning_curve.png`` are written to the run folder. The per-term reward breakdown and
the training episodes' normalised score are RLlib custom metrics
(``result["env_runners"]["allocator_reward_terms"]``, ``["allocator_episode"]``) and go to
TensorBoard (tensorboardX) in ``<run>/tb``.

    commons-arena train --experiment allocator_ppo --scenario standard --minutes 10
    commons-arena train --resume runs/allocator_ppo-standard-s0     # continue a killed run

    RAY_ADDRESS=ray://head:10001 commons-arena train ...            # on an existing cluster

Every run gets its own folder (``runs.py``). The parts, in the order a run uses them:
``args.py`` (the flags), ``setup.py`` (what they mean, resolved once: scenarios parsed, seat
plan, background, codecs, observation scales, references), ``algorithm.py`` (the RLlib
algorithm: ``env.py``, ``scripted.py``, ``callbacks.py``, ``league.py``, ``weights.py``),
this loop, ``heldout.py`` (held-out evaluation), ``export.py`` (checkpoints) and
``reporting.py`` (lines, TensorBoard, the learning curve). A new experiment is one class in
``kinds.py`` (its seat plan, stages, env config and callbacks, resume and after-training
hooks), added to ``kinds.KINDS``: this loop and the setup ask the kind, never its name.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, write_file
from commons_arena.inputs import load_json, tree_sha256
from experiments.cluster import start_ray
from experiments.training.algorithm import build_algorithm
from experiments.training.args import TrainArgs
from experiments.training.callbacks import MIX_SHARE_KEY, MIXTURE_SHARES_KEY
from experiments.training.export import keep_best, save_checkpoint, save_untrained, seat_networks
from experiments.training.heldout import allocator_reports, describe, held_out_evaluation
from experiments.training.reporting import Reporter, plot, scalars
from experiments.training.runs import RunState, open_run, out_of_patience, run_args, save_state
from experiments.training.seat_codecs import codec_summary
from experiments.training.setup import RunSetup, measure, resolve
from experiments.training.warm_start import load_warm_start
from experiments.training.weight_sync import push_learner_weights


def train(args: TrainArgs, setup: RunSetup | None = None) -> Path:
    """Train until the budget (``--minutes``) or ``--iterations`` runs out; returns the checkpoint.
    ``setup``: ``resolve(run_args(args))`` when the caller has resolved it already (the command line does,
    to refuse bad arguments before RLlib loads)."""
    launched = time.perf_counter()  # the budget counts everything: references, Ray, building
    # ---- the arguments resolved once (refused before anything is written), the run folder
    setup = setup or resolve(run_args(args))
    run, args, state = open_run(setup.args, setup.stages)  # the scenarios parsed once, by resolve
    setup = measure(replace(setup, args=args), run)  # observation scales, held-out references
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    print(f"learning: {setup.plan.describe()}; codecs: {codec_summary(setup.codecs, setup.plan)}")

    # ---- Ray: a cluster if asked for, else local with what this machine has
    # (on a cluster the code ships to the nodes; the background's checkpoints travel in the env config)
    start_ray(args.address)
    algo = build_algorithm(setup, stage=state.stage)
    checkpoint = run / "checkpoint"
    if args.resume is not None and checkpoint.is_dir():
        args.kind.before_restore(algo, setup, run, state.iterations)  # a league's snapshots' modules
        algo.restore_from_path(str(checkpoint))
        # RLlib's own push of the restored weights may be dropped (see push_learner_weights);
        # this one also brings a league's snapshots, which add_module gave random weights
        push_learner_weights(algo)
    else:
        if args.init_from is not None:  # the allocator continues a checkpoint's policy (warm_start.py)
            load_warm_start(algo, setup.plan.module_of[ALLOCATOR], args.init_from)
        else:  # its codec's zero code (a best response: its best fixed code)
            args.kind.start_weights(algo, setup, run)
        keep_untrained(algo, setup, run)
    args.kind.start(algo, setup, state.stage)  # every env on the current stage (a mix draws its own)
    reporter = Reporter(run, args.quiet)
    print(f"run {run}: {args.experiment} on {args.kind.describe(setup, state.stage)}, {args.algo}, "
          f"{args.num_envs_per_env_runner} envs/runner, batch {args.train_batch_size}")

    # ---- train; evaluate on held-out seeds and checkpoint every eval_every iterations (--patience: stop when the
    # best score has not improved for that many evaluations: the run ends on an evaluated, checkpointed iteration)
    start = launched - state.seconds
    session_iterations = 0
    while True:
        elapsed = time.perf_counter() - start
        # at least one iteration per session, so a checkpoint is always written
        out_of_budget = elapsed >= args.minutes * 60 and session_iterations > 0
        # --iterations is the run's total (a resumed run trains up to it), like --minutes
        if out_of_budget or (args.iterations is not None and state.iterations >= args.iterations):
            break
        # the history changes at evaluations only: the run stops right after one (a resumed run that had stopped: at once)
        if out_of_patience(state.history, args.patience):
            print(f"stopped early: {args.patience} held-out evaluation(s) without a new best score (--patience)")
            break
        result = algo.train()
        state.iterations += 1
        session_iterations += 1
        state.env_steps = int(result.get("num_env_steps_sampled_lifetime", state.env_steps))
        args.kind.after_iteration(algo, setup, run, result, state)  # a curriculum's promotion, a league's snapshot
        values = scalars(result)
        reporter.iteration(state, result, values, elapsed / 60)
        due = state.iterations % args.eval_every == 0
        out_of_time = time.perf_counter() - start >= args.minutes * 60
        last = args.iterations is not None and state.iterations >= args.iterations
        if due or out_of_time or last:
            evaluate_and_save(algo, setup, state, run, result, values.get("return_mean"), reporter, start)

    # ---- the allocator's final scores on every stage or tier (a run to the budget, or several stages)
    if setup.allocator_learns and (len(setup.stages) > 1 or args.iterations is None):
        final = allocator_reports(setup, seat_networks(algo, setup.plan)[ALLOCATOR], args.kind.judged(setup))
        for name, report in final.items():
            print(f"final on {name}: {describe(report)}")
        write_file(run / "final_scores.json", json.dumps(final, indent=1))
    reporter.close()
    algo.stop()
    args.kind.after_training(setup, run)  # a best response's report, a league's payoff matrix
    print(f"checkpoints: {checkpoint} (latest), {run / 'best'} (best held-out score {state.best_score:.3f})")
    if (learned := args.net.learned(run)) is not None:  # --network padded is a measurement: no learned: files
        print(f"use one as: {learned}")
    return checkpoint


UNTRAINED = "iteration_0"


def keep_untrained(algo: Any, setup: RunSetup, run: Path) -> None:
    """``<run>/iteration_0/``: the learning seats' data-only policies before the first update
    and their held-out evaluation (``heldout.json``, a history row at 0 env steps): the
    untrained reference of the learning curve and of ``commons-arena analyze``."""
    scenarios = setup.args.kind.judged(setup, 0)
    networks = save_untrained(algo, setup, run / UNTRAINED, scenarios[0])
    results, _ = held_out_evaluation(setup, networks, scenarios)
    row = {"iteration": 0, "env_steps": 0, "scenario": setup.args.kind.judged_as(scenarios), **results}
    make_folder(run / UNTRAINED)
    write_file(run / UNTRAINED / "heldout.json", json.dumps(row, indent=1))
    print(f"  untrained (iteration 0) on held-out seeds: return {row['eval_return']:.2f}, "
          f"score {row['score']:.3f}" + (f"; {row['returns']}" if "returns" in row else ""))


def mix_share(result: dict[str, Any]) -> dict[str, Any]:
    """``train_mix_share``: the share of the smoothing window's training episodes that played
    ``--mix-background`` (absent without one); ``train_mixture_shares``: per entry of a ``--mixture``."""
    runners = result.get("env_runners", {})
    share, shares = runners.get(MIX_SHARE_KEY), runners.get(MIXTURE_SHARES_KEY)
    return {**({} if share is None else {"train_mix_share": float(share)}),
            **({} if shares is None else {"train_mixture_shares": {k: float(v) for k, v in shares.items()}})}


def untrained_row(run: Path) -> dict[str, Any] | None:
    path = run / UNTRAINED / "heldout.json"
    return load_json(path, "saved record", allow_nan=True, own=True) if path.is_file() else None


def evaluate_and_save(algo: Any, setup: RunSetup, state: RunState, run: Path, result: dict[str, Any],
                      train_return: float | None, reporter: Reporter, start: float) -> None:
    """Held-out evaluation of what the checkpoint stores, the checkpoint itself (``best`` too
    when the score is the best on this stage), the run's state and its learning curve.
    ``train_return`` is None while no training episode has finished (kept as null, not NaN)."""
    # a mix is judged on every tier (its score: the mean), a stage on itself
    scenarios = setup.args.kind.judged(setup, state.stage)
    networks = seat_networks(algo, setup.plan)  # what the checkpoint stores is what is evaluated
    results, reports = held_out_evaluation(setup, networks, scenarios)
    if "returns" in results:
        reporter.seats(scenarios[0].name, len(setup.eval_seeds), results["returns"], state.env_steps)
    reporter.allocator(reports, len(setup.eval_seeds))
    state.seconds = time.perf_counter() - start
    scenario = setup.args.kind.judged_as(scenarios)
    row = {"iteration": state.iterations, "env_steps": state.env_steps, "scenario": scenario,
           "train_return": train_return, **({"league": result["league"]} if "league" in result else {}),
           **mix_share(result),
           **{k: v for k, v in results.items() if k not in ("eval_return", "score")},
           "minutes": state.seconds / 60, "eval_return": results["eval_return"], "score": results["score"]}
    state.history.append(row)
    reporter.evaluation(row)
    # the sidecar names a scenario whose spaces the networks fit (every tier shares them)
    save_checkpoint(algo, run / "checkpoint", networks, setup, scenarios[0])
    state.checkpoint_sha256 = tree_sha256(run / "checkpoint", "checkpoint")  # what --resume may unpickle
    # `checkpoint` is the latest (resume continues from it); `best` the best held-out
    # score on the current stage (a report should then use seeds other than these).
    new_stage = len(state.history) > 1 and state.history[-2]["scenario"] != scenario
    if row["score"] > state.best_score or new_stage:
        state.best_score = row["score"]
        keep_best(run / "checkpoint", run / "best")
    save_state(run, state)
    plot(state.history, setup.anchors, run / "learning_curve.png", allocator=setup.allocator_learns,
         untrained=untrained_row(run))


__all__ = ["TrainArgs", "train"]
