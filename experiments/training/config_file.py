"""Experiment files: a training run as a TOML file another lab can rerun.

``commons-arena train --config FILE.toml`` reads one; every run writes its own
(``<run>/experiment.toml``), so ``--config <run>/experiment.toml`` reruns it. It is also the
run's one record of its arguments: ``--resume``, ``analyze`` and ``seed-report`` read it back
through this module's loader (``experiments/training/runs.py``). Flags given with ``--config``
override the file's values. The layout::

    [train]                 # every field of TrainArgs (experiments/training/args.py), by its name
    experiment = "allocator_mixed"
    seed = 0
    iterations = 40         # the budget: iterations are the reproducible unit
    minutes = 60.0          # a cap on the wall clock
    ...

    [scenarios]             # every scenario the run plays, by name and content hash
    standard = "3f1c..."    # a scenario whose content changed since is refused (both hashes named)

    [background]            # only with train.background: the population file's sha256
    sha256 = "..."
    [mix_background]        # only with train.mix_background: the same for that file
    sha256 = "..."
    [mixture]               # only with train.mixture: the sha256 of the mixture file and of every roster it names
    sha256 = "..."

Validated like scenarios and population files: unknown keys are refused with their path
(``train.lrr: Extra inputs are not permitted``), values are checked by type and then by
``TrainArgs.validate``. A key left out takes today's default; the files this module writes
hold every field, so a default that changes later cannot change a rerun.

Light on purpose (the CLI imports it at start-up): pydantic and the scenario loader, no Ray or torch.
"""

from __future__ import annotations

import functools
import hashlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Strict, ValidationError, create_model

import commons_arena
from commons_arena.errors import format_validation_error
from commons_arena.files import toml_key, toml_value, write_file
from commons_arena.inputs import load_toml_file, read_bytes
from commons_arena.scenario import ScenarioConfig
from experiments.training.args import TrainArgs
from experiments.training.kind import SPLIT_PREFIX

# Not part of an experiment: where and how this session runs (refused in a file, never written; on
# ``--resume`` they are this session's). The one list of them (the budget is recorded: runs.BUDGET).
SESSION_FIELDS = ("resume", "trust_checkpoint", "address", "quiet", "run_name")
POPULATION_FIELDS = ("background", "mix_background", "mixture")  # population (mixture) files whose sha256 the file records
HEADER = ("# commons-arena experiment file: `commons-arena train --config THIS.toml` reruns it\n"
          "# (flags given beside --config override its values; docs/training.md)\n")


class ExperimentFileError(ValueError):
    """An experiment file that cannot be used; the message names the key to fix."""


def _strict(hint: Any) -> Any:
    """``hint`` with its numbers, flags and strings strict: ``iterations = "2"``, ``seed = true`` and
    ``seed = 2.0`` are refused, as the command line refuses them (a float field still takes an integer)."""
    if hint in (int, float, bool, str):
        return Annotated[hint, Strict()]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return tuple[tuple(a if a is Ellipsis else _strict(a) for a in args)]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_strict(a) for a in args)]  # noqa: UP007
    return hint


@functools.cache  # built once: a model costs milliseconds, and every experiment file and resumed run is read by it
def _train_section() -> type[BaseModel]:
    """A pydantic model of TrainArgs' fields (types from its annotations, strict; defaults from it)."""
    hints = typing.get_type_hints(TrainArgs, include_extras=False)
    defaults = TrainArgs()
    spec: dict[str, Any] = {f.name: (_strict(hints[f.name]), getattr(defaults, f.name))
                            for f in fields(TrainArgs) if f.name not in SESSION_FIELDS}
    return create_model("TrainSection", __config__=ConfigDict(extra="forbid"), **spec)


class _Background(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str


@functools.cache
def _file_model() -> type[BaseModel]:
    populations: dict[str, Any] = {name: (_Background | None, None) for name in POPULATION_FIELDS}
    return create_model("ExperimentFile", __config__=ConfigDict(extra="forbid"),
                        train=(_train_section(), ...), scenarios=(dict[str, str], ...), **populations)


def stage_hash(name: str, config: ScenarioConfig | None = None) -> str:
    """A stage's content hash: a scenario's (``config``, when already parsed), or for ``split:<name>`` the
    first 12 hex of the sha256 of its scenarios' hashes in order (the split file's list: a split that
    changed is refused too)."""
    if name.startswith(SPLIT_PREFIX):
        from commons_arena.family import split_file

        hashes = split_file(name.removeprefix(SPLIT_PREFIX)).hashes
        return hashlib.sha256(",".join(hashes).encode()).hexdigest()[:12]
    return (config or commons_arena.load_scenario(name)).content_hash


def scenario_hashes(args: TrainArgs, configs: Sequence[ScenarioConfig] | None = None) -> dict[str, str]:
    """Every scenario the run plays (its stages), name -> content hash; ``configs``: the stages already
    parsed (a run's setup), so the files are not read again (a split's stage is many configs: not passed)."""
    if configs is None or len(configs) != len(args.stages):
        return {name: stage_hash(name) for name in args.stages}
    return {name: stage_hash(name, config) for name, config in zip(args.stages, configs, strict=True)}


def file_hash(path: Path) -> str:
    return hashlib.sha256(read_bytes(path, "population file")).hexdigest()


def recorded_hash(name: str, path: Path) -> str:
    """What the experiment file records of ``train.<name>``: a population file's sha256, or a mixture's (its
    population files too)."""
    if name == "mixture":
        from experiments.training.mixture import mixture_hash

        return mixture_hash(path)
    return file_hash(path)


def args_from_dict(data: dict[str, Any], source: str = "<dict>", *, current: bool = True,
                   configs: Sequence[ScenarioConfig] | None = None) -> TrainArgs:
    """The arguments an experiment file's contents describe, checked (see the module docstring). With
    ``current`` the scenarios and population files must still hash as recorded (``configs``: the stages
    already parsed, not read again); without, only the file's own structure and values are checked (a run's
    record read for a report: a scenario edited since does not hide the run)."""
    try:
        model = _file_model().model_validate(data)
    except ValidationError as err:
        raise ExperimentFileError(f"invalid experiment file {source}: {format_validation_error(err)}") from None
    args = TrainArgs(**dict(model.train))  # type: ignore[attr-defined]
    try:
        args.validate()
    except ValueError as err:
        raise ExperimentFileError(f"invalid experiment file {source}: train: {err}") from None
    listed: dict[str, str] = model.scenarios  # type: ignore[attr-defined]
    if set(listed) != set(args.stages):
        raise ExperimentFileError(
            f"invalid experiment file {source}: scenarios must list exactly the scenarios the run plays "
            f"({', '.join(args.stages)}), got {', '.join(listed) or 'none'}")
    for name in POPULATION_FIELDS:
        if (getattr(model, name) is None) != (getattr(args, name) is None):
            raise ExperimentFileError(f"invalid experiment file {source}: {name}.sha256 goes with train.{name} "
                                      "(both or neither)")
    if not current:
        return args
    for name, now in scenario_hashes(args, configs).items():
        if now != listed[name]:
            raise ExperimentFileError(
                f"invalid experiment file {source}: scenarios.{name}: the scenario changed since the file was "
                f"written (file: {listed[name]}, now: {now}); rerun with the scenario as it was, or update the hash")
    for name in POPULATION_FIELDS:
        recorded, population = getattr(model, name), getattr(args, name)
        if recorded is not None and population is not None:
            now = recorded_hash(name, population)
            if now != recorded.sha256:
                raise ExperimentFileError(
                    f"invalid experiment file {source}: {name}.sha256: {population} changed since the file "
                    f"was written (file: {recorded.sha256}, now: {now})")
    return args


def read_experiment(path: str | Path, own: bool = False) -> dict[str, Any]:
    """An experiment file's TOML as a dict (one line naming the file when it cannot be read); ``own``: a run's
    record, which the run rewrites (not remembered as an input: ``commons_arena.inputs``)."""
    return load_toml_file(path, "experiment", ExperimentFileError, own=own)


def train_section(data: dict[str, Any], source: str) -> TrainArgs:
    """The arguments a ``[train]``-like table names (any field of TrainArgs but the session's; the rest their
    defaults), checked as an experiment file's are: used by study files (experiments/configs/psro.toml)."""
    try:
        model = _train_section().model_validate(data)
    except ValidationError as err:
        raise ExperimentFileError(f"invalid {source}: {format_validation_error(err)}") from None
    args = TrainArgs(**dict(model))
    try:
        args.validate()
    except ValueError as err:
        raise ExperimentFileError(f"invalid {source}: {err}") from None
    return args


def load_experiment(path: str | Path, *, missing: Mapping[str, Any] | None = None, current: bool = True,
                    configs: Sequence[ScenarioConfig] | None = None, own: bool = False) -> TrainArgs:
    """Read and check an experiment file (:func:`args_from_dict`). ``missing``: the values of ``[train]`` keys
    the file leaves out (a run's record: the value it trained with, not today's default)."""
    data = read_experiment(path, own)
    if missing and isinstance(data.get("train"), dict):
        data = {**data, "train": {**missing, **data["train"]}}
    return args_from_dict(data, str(path), current=current, configs=configs)


def _plain(value: Any) -> Any:
    """A field's value as TOML data (a path or a named object as its text), for the one TOML writer."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return str(value)


def experiment_text(args: TrainArgs, configs: Sequence[ScenarioConfig] | None = None) -> str:
    """The experiment file of ``args``: every field (but :data:`SESSION_FIELDS` and unset ones,
    which TOML cannot hold), the scenarios' hashes and the background's."""
    lines = [HEADER, "[train]"]
    pinned = args.kind.file_defaults()  # the kind's defaults, pinned: a later default must not move a rerun
    for f in fields(TrainArgs):
        value = getattr(args, f.name)
        if f.name in SESSION_FIELDS:
            continue
        if value is None:
            value = pinned.get(f.name)
        if value is None:
            lines.append(f"# {f.name}: not set")
            continue
        lines.append(f"{f.name} = {toml_value(_plain(value))}")
    lines += ["", "[scenarios]  # name = content hash (a changed scenario is refused)"]
    lines += [f"{toml_key(name)} = {toml_value(digest)}" for name, digest in scenario_hashes(args, configs).items()]
    for name in POPULATION_FIELDS:
        if getattr(args, name) is not None:
            lines += ["", f"[{name}]  # the population file's sha256",
                      f"sha256 = {toml_value(recorded_hash(name, getattr(args, name)))}"]
    return "\n".join(lines) + "\n"


def write_experiment(path: Path, args: TrainArgs, configs: Sequence[ScenarioConfig] | None = None) -> Path:
    """``path`` holding :func:`experiment_text` (left as it is when it holds that already: a resumed run's record,
    perhaps also this session's ``--config``, an input never written over)."""
    text = experiment_text(args, configs)
    if path.is_file() and not path.is_symlink() and read_bytes(path, "experiment file", own=True) == text.encode():
        return path
    write_file(path, text)
    return path


__all__ = ["ExperimentFileError", "SESSION_FIELDS", "args_from_dict", "experiment_text",
           "load_experiment", "read_experiment", "scenario_hashes", "train_section", "write_experiment"]
