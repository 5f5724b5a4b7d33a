"""What every subcommand shares: the program's name, the usage error, the rule for output paths,
number and seed checks, and the expansion of ``all`` to every shipped scenario."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import commons_arena
from commons_arena.files import check_tree
from commons_arena.inputs import what_is
from commons_arena.spaces import MAX_SEED
from experiments.seeds import validate_seeds

PROG = "commons-arena"
MAX_SEEDS = 100_000  # episodes per scenario and policy in one command (evaluate, tournament flags, analyze)


class UsageError(ValueError):
    """A command-line input that cannot work; the message names what to fix."""


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths are one file: by identity (device and inode: a hard link, a symlink, another
    spelling), or by resolved name when the output does not exist yet."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == Path(b).resolve()


def refuse_overwrite(path: Path, force: bool, inputs: Iterable[Path] = (), what: str = "file") -> None:
    """The one rule for every output path (see docs/limits.md).

    Never one of the command's ``inputs`` (by file identity, with or without ``--force``); an
    existing file, or a folder that holds anything, only with ``--force``; an output file's
    folder must exist (nothing creates it silently); a folder output is a folder; never a symlink. Each file
    is then written by :func:`commons_arena.files.write_file`, which holds the same rules file by file."""
    for source in inputs:
        if same_file(path, Path(source)):
            raise UsageError(f"{path} is also the input {source}: writing there would destroy it; choose another "
                             "output")
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink: a command never writes through one (commons_arena.files); remove it or "
                         "choose another output")
    if what == "file":
        if path.is_dir():
            raise UsageError(f"{path} is a folder; give a file name")
        if not path.parent.is_dir():
            raise UsageError(f"the folder {path.parent} does not exist; create it first or choose another output")
    elif path.exists() and not path.is_dir():
        raise UsageError(f"{path} is {what_is(path)}; give a folder for the output")
    exists = path.is_file() or (path.is_dir() and any(path.iterdir()))
    if exists and not force:
        kind = "holds files" if path.is_dir() else "exists"
        raise UsageError(f"{path} already {kind}; pass --force to overwrite, or choose another output")
    if what == "folder" and path.is_dir():
        check_tree(path)  # a link inside is refused now, not after the work


def check_number(flag: str, value: float, low: float, high: float) -> None:
    """A flag's number: finite and in [low, high] (the bounds docs/limits.md lists), before any work."""
    if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{flag} must be a finite number in [{_num(low)}, {_num(high)}], got {value}")


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def scenario_names(names: tuple[str, ...]) -> list[str]:
    """The scenarios a ``--scenarios`` flag names: ``all`` is every shipped one."""
    return commons_arena.list_scenarios() if names == ("all",) else list(names)


def paired_seed_list(first: int, count: int) -> list[int]:
    """:func:`seed_list` for a paired comparison, which needs at least two seeds for its CI."""
    if count < 2:
        raise UsageError(f"--seeds must be at least 2 (a paired CI), got {count}")
    return seed_list(first, count)


def seed_list(first: int, count: int) -> list[int]:
    """The seeds of ``--first-seed`` and ``--seeds`` (a count), checked before any episode is played."""
    check_number("--seeds", count, 1, MAX_SEEDS)  # before the list is built
    check_number("--first-seed", first, 0, MAX_SEED - count + 1)
    seeds = list(range(first, first + count))
    validate_seeds(seeds)
    return seeds

