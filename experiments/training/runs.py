"""Run folders: where a run writes, what survives a crash, and how ``--resume`` continues.

Every run gets its own folder: ``<out>/<run name>`` must be new (the default name is numbered
``-2``, ``-3``, ... when taken; a taken ``--run-name`` is refused) and ``<out>/latest`` points
at the newest one. Only ``--resume`` writes into an existing run folder; the saved run's
arguments then win, except those of this session (``config_file.SESSION_FIELDS``) and a budget given
now (:data:`BUDGET`).

A run's arguments are saved once, as its experiment file (:data:`RECORD`, ``config_file.py``): what
``train --config`` reruns is what ``--resume``, ``analyze`` and ``seed-report`` read back, through the same
strict loader. Run folders made before that hold only ``args.json`` (:data:`LEGACY_RECORD`): still read,
checked the way they always were.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import takewhile
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from commons_arena.errors import format_validation_error
from commons_arena.files import check_tree, make_folder, point_link, refuse_link, write_file
from commons_arena.inputs import InputError, load_json, load_json_object, loads_json, read_text, tree_sha256
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.evaluate import MAX_SCORE
from experiments.training.args import LATEST, MAX_ITERATIONS, MAX_MINUTES, TrainArgs
from experiments.training.config_file import SESSION_FIELDS, load_experiment, write_experiment

RECORD = "experiment.toml"  # a run's arguments (config_file.py): `train --config` reruns it, --resume reads it
LEGACY_RECORD = "args.json"  # the record of runs made before experiment.toml was the only one (read, never written)
REFERENCE_CACHE = ".references"  # <out>/.references: reference returns shared by the runs of one --out
SEEDS_PARENT = "seeds.json"  # marks the parent of --train-seeds runs: its experiment.toml is for reruns, not a run's
# On resume the saved run's arguments win, except config_file.SESSION_FIELDS (this session's) and the
# budget (a total over the run's sessions), which stays the recorded one unless this session gives one.
BUDGET = ("minutes", "iterations")
# A run saved before one of these flags existed trained with this value (RLlib's default then):
# resuming it keeps that, not today's default.
VALUE_BEFORE_FLAG: dict[str, Any] = {"gae_lambda": 1.0, "vf_clip": 10.0, "validation_scenarios": 0, "patience": 0,
                                     "cell_features": "v1", "critic": "pooled"}
MAX_HISTORY_ROWS = 1_000_000
MAX_STAGES = 100_000  # curriculum stages / scenarios of a run (a state's stage indexes them)
MAX_ENV_STEPS = 2**62  # environment steps of one run (a results row stores int64)


@dataclass
class RunState:
    """What survives a crash: written after every evaluation."""

    stage: int = 0
    iterations: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    best_score: float = float("-inf")  # best held-out score of the last stage reached
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_sha256: str = ""  # of every file under <run>/checkpoint as saved (its pickles: --resume checks them)


def _holds_files(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def run_folder(args: TrainArgs) -> Path:
    """The folder this run writes to. Never another run's: ``--resume`` names the run to
    continue; otherwise the folder must be new. Without ``--run-name`` the default name gets
    a number (``-2``, ``-3``, ...) when taken; an explicit ``--run-name`` that is taken is refused."""
    if args.resume is not None:
        run = Path(args.resume)
        if (run / SEEDS_PARENT).is_file():
            raise ValueError(f"{run} holds the runs of --train-seeds, one folder per seed: resume one of them "
                             f"(--resume {run / 's0'}, ...)")
        if not has_record(run):
            raise ValueError(f"nothing to resume in {run}: it has no {RECORD} (not a run folder of `commons-arena train`)")
        run = run.resolve()
        check_reference_cache(run.parent)
        return run
    refuse_link(args.out, "runs")  # as every command's --out (commons_arena.files): not through a link
    check_reference_cache(args.out)
    run = args.out / args.name
    if _holds_files(run) and not run.is_symlink():
        if args.run_name is not None:
            raise ValueError(
                f"run folder {run} already holds a run; continue it with --resume {run}, or choose another --run-name"
            )
        number = 2
        while _holds_files(args.out / f"{args.name}-{number}"):
            number += 1
        run = args.out / f"{args.name}-{number}"
    # a link at the name, dangling or not, would carry the whole run (pickles included) to its target
    refuse_link(run, "a run folder")
    return run.resolve()


def check_reference_cache(out: Path) -> None:
    """``<out>/.references`` (the reference returns a run reads, or computes and writes there) a plain folder
    holding no link or special file, checked before the run folder is made (else refused after it)."""
    cache = out / REFERENCE_CACHE
    refuse_link(cache, "a reference cache")
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"{cache} is not a folder: it holds the runs' reference returns; remove it")
    if cache.is_dir():
        check_tree(cache)


def point_latest(run: Path) -> None:
    """Point ``<run's parent>/latest`` at ``run`` (replaced atomically; a real folder of that
    name is left alone)."""
    link = run.parent / LATEST
    if link.exists() and not link.is_symlink():
        return
    point_link(link, run.name)


def has_record(run: Path) -> bool:
    """Whether ``run`` holds a run's record of its arguments (:data:`RECORD`, or an older run's :data:`LEGACY_RECORD`)."""
    return ((run / RECORD).is_file() and not (run / SEEDS_PARENT).is_file()) or (run / LEGACY_RECORD).is_file()


def resumed_args(saved: dict[str, Any], current: TrainArgs) -> TrainArgs:
    """The saved run's arguments, with this session's (``config_file.SESSION_FIELDS``, and the budget when
    given now: :data:`BUDGET`) and, for flags added since, the value the run trained with."""
    values: dict[str, Any] = {}
    defaults = TrainArgs()
    keep_budget = current.iterations is None and current.minutes == defaults.minutes  # no budget given now
    for f in fields(TrainArgs):
        if f.name in BUDGET and keep_budget and f.name in saved:
            values[f.name] = saved[f.name]  # the run's recorded budget, not today's default
        elif f.name in BUDGET or f.name in SESSION_FIELDS:
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
    run = run_folder(args)  # a new run's folder is checked here too: before RLlib loads
    if args.resume is None:
        return args
    saved = saved_args(run)
    # the run's name and place are its folder's: a record's `out` (an edited one too) never sends a file elsewhere
    resumed = replace(resumed_args(saved, args), run_name=run.name, out=run.parent)
    try:  # the saved arguments pass the same checks as flags, before anything is written
        replace(resumed, resume=None, run_name=None).validate()
    except (TypeError, ValueError) as err:
        raise ValueError(f"cannot resume {run}: {err}") from None
    if not (run / RECORD).is_file():  # a legacy record: a key it lacks would be today's default, not the run's
        lacking = [f.name for f in fields(TrainArgs) if f.name not in saved and f.name not in VALUE_BEFORE_FLAG
                   and f.name not in SESSION_FIELDS and f.name not in BUDGET]
        if lacking:
            raise ValueError(f"cannot resume {run}: its {LEGACY_RECORD} lacks {lacking[:6]}"
                             f"{' ...' if len(lacking) > 6 else ''}: the values the run trained with are unknown "
                             "(today's defaults may not fit its checkpoint); add them, or start a new run")
    check_saved_files(run)
    state = saved_state(run, len(resumed.stages))
    check_checkpoint(run, state.checkpoint_sha256, args.trust_checkpoint)
    done = state.iterations
    if resumed.iterations is not None and done >= resumed.iterations:
        raise ValueError(f"cannot resume {run}: it has trained {done} of its {resumed.iterations} iterations; pass "
                         f"--iterations with a larger total to train on")
    return resumed


def check_checkpoint(run: Path, recorded: str, trust: bool) -> None:
    """Before RLlib unpickles ``<run>/checkpoint``: its files must hash as the run recorded when it saved them
    (``state.json``), unless ``trust`` (``--trust-checkpoint``): a planted or changed pickle runs code."""
    folder = run / "checkpoint"
    if trust or not (folder.exists() or folder.is_symlink()):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise ValueError(f"{folder} is a link or not a folder: not the checkpoint this run saved")
    if not recorded:
        raise ValueError(f"{folder}: the run recorded no sha256 of its checkpoint (a run made before they were "
                         "recorded): its pickles run code when restored; pass --trust-checkpoint if you made this folder")
    if tree_sha256(folder, "checkpoint") != recorded:
        raise ValueError(f"{folder}: its files differ from what the run saved (state.json's checkpoint_sha256): "
                         "its pickles run code when restored; pass --trust-checkpoint only if you trust every file there")


def check_saved_files(run: Path) -> None:
    """The league's log of a resumed run, checked before anything is written (its scales and references are
    checked against the run by ``setup.resolve``): a damaged or planted one is one line naming it."""
    league = run / "league.json"
    if league.exists():
        for number, line in enumerate(read_text(league, "league log", MAX_LOG_BYTES, own=True).splitlines(), 1):
            row = loads_json(line, f"{league}:{number}", allow_nan=True) if line.strip() else {}
            if line.strip() and (not isinstance(row, dict) or isinstance(row.get("iteration"), bool)
                                 or not isinstance(row.get("iteration"), int) or not isinstance(row.get("mix", []), list)):
                raise ValueError(f"{league}:{number}: not a league log row (iteration, mix, snapshot)")


class SavedState(BaseModel):
    """``state.json`` as a resumed run may use it: every number bounded, read before Ray starts."""

    model_config = ConfigDict(extra="forbid")
    stage: Annotated[int, Strict(), Field(ge=0, le=MAX_STAGES)] = 0
    iterations: Annotated[int, Strict(), Field(ge=0, le=MAX_ITERATIONS)] = 0
    env_steps: Annotated[int, Strict(), Field(ge=0, le=MAX_ENV_STEPS)] = 0
    seconds: Annotated[float, Strict(), Field(ge=0, le=MAX_MINUTES * 60 * 1000, allow_inf_nan=False)] = 0.0
    best_score: Annotated[float, Strict(), Field(allow_inf_nan=True)] = float("-inf")  # -inf: no evaluation yet
    history: Annotated[list[dict[str, Any]], Field(max_length=MAX_HISTORY_ROWS)] = []
    checkpoint_sha256: Annotated[str, Strict(), Field(pattern="^([0-9a-f]{64})?$")] = ""  # "": an older run's

    @model_validator(mode="after")
    def _agrees(self) -> SavedState:
        if self.best_score != -math.inf and not abs(self.best_score) <= MAX_SCORE:  # NaN too: never beaten
            raise ValueError(f"best_score must be a score (magnitude at most {MAX_SCORE:.0e}) or -inf (none yet), "
                             f"got {self.best_score}")
        for i, row in enumerate(self.history):
            try:
                HistoryRow.model_validate(row)
            except ValidationError as err:
                raise ValueError(f"history row {i}: {format_validation_error(err)}") from None
        done = [row["iteration"] for row in self.history]
        if done != sorted(set(done)) or (done and done[-1] > self.iterations):
            raise ValueError(f"history's iterations must rise and end at most at iterations ({self.iterations}), "
                             f"got {done[-5:]}")
        return self


def saved_state(run: Path, stages: int | None = None) -> RunState:
    """A run folder's ``state.json`` (a fresh state if it was killed before the first evaluation), read by the
    one reader into :class:`SavedState` (bounded numbers, no unknown key) and checked against the run: its
    ``stage`` must be one of the run's ``stages`` (a count) when given. Refused (ValueError, one line naming
    the file) before anything is written or Ray starts."""
    path = run / "state.json"
    if not path.exists():
        return RunState()
    data = load_json_object(path, "run state", allow_nan=True, own=True)  # the run rewrites it: its own record
    try:
        state = SavedState.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"{path} is not the state of a `commons-arena train` run: "
                         f"{format_validation_error(err)}") from None
    if stages is not None and state.stage >= stages:
        raise ValueError(f"{path}: stage {state.stage} is not one of this run's {stages} stage(s) (0 .. {stages - 1})")
    return RunState(**state.model_dump())


def saved_args(run: Path) -> dict[str, Any]:
    """A run folder's recorded arguments, field -> value: its :data:`RECORD` read by the experiment file's
    strict loader (keys it leaves out: the value before the flag existed, :data:`VALUE_BEFORE_FLAG`), or an older
    run's :data:`LEGACY_RECORD`. A hand-made or damaged record is refused (ValueError, one line naming the
    file and key) before anything is written."""
    run = Path(run)
    if (run / RECORD).is_file() or not (run / LEGACY_RECORD).is_file():
        args = load_experiment(run / RECORD, missing=VALUE_BEFORE_FLAG, current=False, own=True)
        return {f.name: getattr(args, f.name) for f in fields(TrainArgs) if f.name not in SESSION_FIELDS}
    return legacy_args(run / LEGACY_RECORD)


def legacy_args(path: Path) -> dict[str, Any]:
    """An older run's ``args.json``, refused (ValueError) unless it is an object of TrainArgs' fields with
    values of their types."""
    try:
        saved = load_json(path, "run arguments", allow_nan=True)
    except InputError as err:
        raise ValueError(f"{err}: not a run folder of `commons-arena train`") from None
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


def _score(value: float) -> float:
    """A held-out score or return as a run writes it: NaN (undefined where random = oracle) or of magnitude at
    most :data:`MAX_SCORE` (an inf or 1e300 is not one: it would win every table it reaches)."""
    if not (math.isnan(value) or abs(value) <= MAX_SCORE):
        raise ValueError(f"must be a score of magnitude at most {MAX_SCORE:.0e} (or NaN: undefined), got {value}")
    return value


class HistoryRow(BaseModel):
    """One held-out evaluation of ``history.json``, as the readers of a run folder use it (aggregate,
    analyze, the learning curve); other keys are the run's own figures and are kept."""

    model_config = ConfigDict(extra="allow")
    iteration: Annotated[int, Strict(), Field(ge=0)]
    env_steps: Annotated[int, Strict(), Field(ge=0)] = 0
    scenario: Annotated[str, Strict(), Field(min_length=1, max_length=200)]
    minutes: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    score: Annotated[float, AfterValidator(_score)] | None = None
    returns: dict[str, Annotated[float, AfterValidator(_score)]] | None = None
    declared_to_need: dict[str, Annotated[float, Field(allow_inf_nan=True)]] | None = None

    @model_validator(mode="after")
    def _tier_scores(self) -> HistoryRow:
        for key, value in (self.model_extra or {}).items():
            if key.startswith("score/") and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"{key} must be a number, got {value!r:.40}")
            if key.startswith("score/"):
                _score(value)
        if self.score is None and not any(k.startswith("score/") for k in self.model_extra or {}):
            raise ValueError("a row needs its held-out score (score, or score/<tier> for each tier of a mix)")
        return self


MAX_LOG_BYTES = 256 * 2**20  # league.json: one line per iteration


def saved_history(run: Path, required: bool = True) -> list[dict[str, Any]]:
    """A run folder's ``history.json``: a list of :class:`HistoryRow` objects in rising iterations (checked:
    a damaged or hand-made file is one line naming the row, never a traceback later). Absent: ``[]``
    unless ``required``."""
    path = Path(run) / "history.json"
    if not path.exists() and not required:
        return []
    rows = load_json(path, "run history", MAX_LOG_BYTES, allow_nan=True, own=True)  # Python's json wrote it (NaN allowed)
    if not isinstance(rows, list) or len(rows) > MAX_HISTORY_ROWS:
        raise ValueError(f"{path} is not a run's history: a JSON list of evaluation rows")
    checked = []
    for i, row in enumerate(rows):
        try:  # the model's defaults filled in (an older row without minutes): what its readers use
            checked.append(HistoryRow.model_validate(row).model_dump())
        except ValidationError as err:
            raise ValueError(f"{path}: row {i}: {format_validation_error(err)}") from None
    iterations = [row["iteration"] for row in checked]
    if iterations != sorted(set(iterations)):
        raise ValueError(f"{path}: the rows' iterations must rise, got {iterations[:10]}")
    return checked


def open_run(args: TrainArgs, configs: Sequence[ScenarioConfig] | None = None) -> tuple[Path, TrainArgs, RunState]:
    """The run folder (created, or the one resumed), the arguments as recorded in its :data:`RECORD` (a new
    run's with its folder name) and its state so far; ``<out>/latest`` then points at it. ``configs``: the
    run's stages, parsed once by its setup. A resumed run's scenarios and population files must still hash
    as its record says (checked before anything is written)."""
    run = run_folder(args)
    state = RunState()
    if args.resume is not None:
        if (run / RECORD).is_file():
            load_experiment(run / RECORD, missing=VALUE_BEFORE_FLAG, configs=configs, own=True)
        state = saved_state(run, len(args.stages))  # a fresh state if killed before the first evaluation
    else:
        if run.name != args.name:
            print(f"{args.out / args.name} holds an earlier run (kept); this run writes to {run}")
        args = replace(args, run_name=run.name)
        make_folder(run, new=True)
    write_experiment(run / RECORD, args, configs)  # `train --config <run>/experiment.toml` reruns it
    point_latest(run)
    return run, args, state


def evaluations_since_best(history: Sequence[dict[str, Any]]) -> int:
    """Held-out evaluations of the current stage (the trailing rows judged on the last row's ``scenario``) since
    the one with the best score so far (a score beats only a strictly lower one; an undefined, NaN, score never
    does), as the run keeps ``best``: 0 when the last evaluation set a new best."""
    stage = list(takewhile(lambda row: row["scenario"] == history[-1]["scenario"], reversed(history)))[::-1]
    best, since = -math.inf, 0
    for row in stage:
        score = row.get("score")
        if score is not None and score > best:
            best, since = score, 0
        else:
            since += 1
    return since


def out_of_patience(history: Sequence[dict[str, Any]], patience: int) -> bool:
    """The early stop (``--patience``): ``patience`` evaluations in a row without a new best score; 0: never."""
    return patience > 0 and len(history) > 0 and evaluations_since_best(history) >= patience


def save_state(run: Path, state: RunState) -> None:
    write_file(run / "state.json", json.dumps(asdict(state), indent=1))
    write_file(run / "history.json", json.dumps(state.history, indent=1))


__all__ = ["BUDGET", "HistoryRow", "LEGACY_RECORD", "RECORD", "RunState", "SEEDS_PARENT", "SavedState", "check_checkpoint", "check_saved_files", "has_record",
           "evaluations_since_best", "legacy_args", "open_run", "out_of_patience", "point_latest", "resumed_args",
           "run_args", "run_folder", "save_state",
           "saved_args", "saved_history", "saved_state"]
