"""Run folders: where a run writes, what survives a crash, and how ``--resume`` continues.

Every run gets its own folder: ``<out>/<run name>`` must be new (the default name is numbered
``-2``, ``-3``, ... when taken; a taken ``--run-name`` is refused) and ``<out>/latest`` points
at the newest one. Only ``--resume`` writes into an existing run folder; the saved run's
arguments then win, except those of this session (:data:`SESSION_ARGS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from commons_arena.scenario import ScenarioConfig
from experiments.training.args import LATEST, TrainArgs
from experiments.training.config_file import write_experiment

# On resume the saved run's arguments win, except these, which belong to this session.
SESSION_ARGS = ("minutes", "iterations", "quiet", "address", "resume")
# A run saved before one of these flags existed trained with this value (RLlib's default then):
# resuming it keeps that, not today's default.
VALUE_BEFORE_FLAG: dict[str, Any] = {"gae_lambda": 1.0, "vf_clip": 10.0}


@dataclass
class RunState:
    """What survives a crash: written after every evaluation."""

    stage: int = 0
    iterations: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    best_score: float = float("-inf")  # best held-out score of the last stage reached
    history: list[dict[str, Any]] = field(default_factory=list)


def _holds_files(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def run_folder(args: TrainArgs) -> Path:
    """The folder this run writes to. Never another run's: ``--resume`` names the run to
    continue; otherwise the folder must be new. Without ``--run-name`` the default name gets
    a number (``-2``, ``-3``, ...) when taken; an explicit ``--run-name`` that is taken is refused."""
    if args.resume is not None:
        run = Path(args.resume)
        if not (run / "args.json").is_file():
            raise ValueError(f"nothing to resume in {run}: it has no args.json (not a run folder of `commons-arena train`)")
        return run.resolve()
    run = args.out / args.name
    if not _holds_files(run):
        return run.resolve()
    if args.run_name is not None:
        raise ValueError(
            f"run folder {run} already holds a run; continue it with --resume {run}, or choose another --run-name"
        )
    number = 2
    while _holds_files(args.out / f"{args.name}-{number}"):
        number += 1
    return (args.out / f"{args.name}-{number}").resolve()


def point_latest(run: Path) -> None:
    """Point ``<run's parent>/latest`` at ``run`` (replaced atomically; a real folder of that
    name is left alone)."""
    link = run.parent / LATEST
    if link.exists() and not link.is_symlink():
        return
    tmp = run.parent / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(run.name, tmp)
    os.replace(tmp, link)


def resumed_args(saved: dict[str, Any], current: TrainArgs) -> TrainArgs:
    """The saved run's arguments, with this session's (:data:`SESSION_ARGS`) and, for flags
    added since, the value the run trained with."""
    values: dict[str, Any] = {}
    for f in fields(TrainArgs):
        if f.name in SESSION_ARGS:
            values[f.name] = getattr(current, f.name)
        elif f.name not in saved:
            values[f.name] = VALUE_BEFORE_FLAG.get(f.name, getattr(current, f.name))
        elif f.name == "out":
            values[f.name] = Path(saved[f.name])
        elif f.name == "hidden":
            values[f.name] = tuple(saved[f.name])
        else:
            values[f.name] = saved[f.name]
    return TrainArgs(**values)


def run_args(args: TrainArgs) -> TrainArgs:
    """The arguments this session runs with: ``args``, or with ``--resume`` the saved run's
    (:func:`resumed_args`)."""
    if args.resume is None:
        return args
    run = run_folder(args)
    saved = saved_args(run)
    resumed = resumed_args(saved, args)
    try:  # the saved arguments pass the same checks as flags, before anything is written
        replace(resumed, resume=None, run_name=None).validate()
    except (TypeError, ValueError) as err:
        raise ValueError(f"cannot resume {run}: {err}") from None
    return resumed


def saved_args(run: Path) -> dict[str, Any]:
    """A run folder's ``args.json``, refused (ValueError) unless it is an object of TrainArgs' fields with
    values of their types: a hand-made or damaged file stops ``--resume`` before anything is written."""
    path = Path(run) / "args.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err}): not a run folder of `commons-arena train`") from None
    defaults = {f.name: getattr(TrainArgs(), f.name) for f in fields(TrainArgs)}
    unknown = sorted(set(saved) - set(defaults)) if isinstance(saved, dict) else []
    if not isinstance(saved, dict) or "experiment" not in saved or unknown:
        what = f"unknown key(s) {unknown[:5]}" if unknown else "no \"experiment\"" if isinstance(saved, dict) \
            else f"a JSON {type(saved).__name__}, not an object"
        raise ValueError(f"{path} is not the arguments of a `commons-arena train` run: {what}")
    for key, value in saved.items():
        default = defaults[key]
        kind = (int, float) if isinstance(default, float) else list if isinstance(default, tuple) else str \
            if isinstance(default, Path) else type(default)
        if default is not None and value is not None and (not isinstance(value, kind) or isinstance(value, bool) is not
                                                          isinstance(default, bool)):
            raise ValueError(f"{path}: {key} must be a {'list' if kind is list else type(default).__name__}, got {value!r:.60}")
    return saved


def open_run(args: TrainArgs, configs: Sequence[ScenarioConfig] | None = None) -> tuple[Path, TrainArgs, RunState]:
    """The run folder (created, or the one resumed), the arguments as written to its
    ``args.json`` (a new run's with its folder name) and its state so far; ``<out>/latest``
    then points at it. ``configs``: the run's stages, parsed once by its setup."""
    run = run_folder(args)
    state = RunState()
    if args.resume is not None:
        if (run / "state.json").is_file():  # absent if killed before the first evaluation
            state = RunState(**json.loads((run / "state.json").read_text()))
    else:
        if run.name != args.name:
            print(f"{args.out / args.name} holds an earlier run (kept); this run writes to {run}")
        args = replace(args, run_name=run.name)
        run.mkdir(parents=True, exist_ok=False)
    (run / "args.json").write_text(json.dumps(asdict(args), default=str, indent=1))
    write_experiment(run / "experiment.toml", args, configs)  # `train --config <run>/experiment.toml` reruns it
    point_latest(run)
    return run, args, state


def save_state(run: Path, state: RunState) -> None:
    (run / "state.json").write_text(json.dumps(asdict(state), indent=1))
    (run / "history.json").write_text(json.dumps(state.history, indent=1))


__all__ = ["RunState", "open_run", "point_latest", "resumed_args", "run_args", "run_folder", "save_state", "saved_args"]
