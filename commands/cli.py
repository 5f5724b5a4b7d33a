"""The ``commons-arena`` command line: every subcommand by name, and the one error path they share.

Each subcommand is a dataclass of arguments (one docstring per field, shown by ``--help``)
parsed by tyro, in the module of its group: ``commands/play.py`` (scenarios, play, replay,
verify), ``commands/evaluate.py`` (evaluate, tournament, benchmark, analyze), ``commands/train.py``
(train, exploit, arms-race, psro, distil, convert-checkpoint), ``commands/measure.py`` (compare-checkpoint,
fixed-codes, frontier, need-gap, corrections, broker-pricing, seed-report) and ``commands/serve.py``; what they share
is ``commands/common.py``. Heavy imports (Ray, torch, matplotlib) happen inside the
subcommand that needs them, so ``commons-arena scenarios`` stays instant.

One error path for every subcommand (:func:`main`): a subcommand may define ``validate()``,
run before ``run()`` so bad input is refused before any work starts; any domain error
either raises (``ValueError`` and its subclasses: ``ScenarioError``, ``CheckpointError``,
``PopulationError``, :class:`~commands.common.UsageError`; ``OSError``) becomes one line on
stderr and exit code 2, no traceback. ``--debug`` (anywhere on the line) shows the traceback
instead. A new subcommand gets all of this by being added to :func:`subcommands`; files it
writes go through :func:`~commands.common.refuse_overwrite` so an existing file is only
replaced with ``--force``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sqlite3
import sys
import traceback
from typing import Annotated, Any, Protocol

import numpy as np
import tyro

from commands.common import PROG
from commands.evaluate import Analyze, Benchmark, Evaluate, Tournament
from commands.measure import BrokerPricing, CompareCheckpoint, Corrections, FixedCodes, Frontier, NeedGap, SeedReport
from commands.play import Play, Replay, Scenarios, Verify
from commands.serve import Serve, ServeCheck
from commands.train import ArmsRace, ConvertCheckpoint, Distil, Exploit, Psro, Train, config_defaults
from commons_arena.errors import one_line
from commons_arena.inputs import forget_inputs
from experiments.hash_seed import pin_hash_seed

DEBUG_FLAG = "--debug"
EXIT_DOMAIN_ERROR = 2  # like argparse's usage errors; `verify`: the recording cannot be checked
EXIT_BUG = 3  # an error the command did not foresee (a traceback): never 1, which `verify` uses for "differs"
TRAINING_COMMANDS = frozenset({"train", "exploit", "arms-race", "psro", "distil"})  # they pin the string-hash seed (experiments/hash_seed.py)


class Command(Protocol):
    """A parsed subcommand (it may also define ``validate()``, run first)."""

    def run(self) -> Any: ...


def subcommands(train_defaults: Train | None = None) -> Any:
    """Every subcommand, by name (the union tyro parses); ``train_defaults``: the values of
    ``train --config FILE``, read before parsing, which the flags beside it override."""
    return _default_subcommands() if train_defaults is None else _union(train_defaults)


@functools.cache
def _default_subcommands() -> Any:
    """The union of every command line without ``--config``, built once: tyro's own caches then know it again
    (about 3 ms less a parse)."""
    return _union(None)


def _union(train_defaults: Train | None) -> Any:
    train = (tyro.conf.subcommand("train") if train_defaults is None
             else tyro.conf.subcommand("train", default=train_defaults))
    return (
        Annotated[Scenarios, tyro.conf.subcommand("scenarios")]
        | Annotated[Play, tyro.conf.subcommand("play")]
        | Annotated[Evaluate, tyro.conf.subcommand("evaluate")]
        | Annotated[Tournament, tyro.conf.subcommand("tournament")]
        | Annotated[Benchmark, tyro.conf.subcommand("benchmark")]
        | Annotated[Train, train]
        | Annotated[Exploit, tyro.conf.subcommand("exploit")]
        | Annotated[ArmsRace, tyro.conf.subcommand("arms-race")]
        | Annotated[Psro, tyro.conf.subcommand("psro")]
        | Annotated[Distil, tyro.conf.subcommand("distil")]
        | Annotated[Replay, tyro.conf.subcommand("replay")]
        | Annotated[Analyze, tyro.conf.subcommand("analyze")]
        | Annotated[Serve, tyro.conf.subcommand("serve")]
        | Annotated[ServeCheck, tyro.conf.subcommand("serve-check")]
        | Annotated[Verify, tyro.conf.subcommand("verify")]
        | Annotated[ConvertCheckpoint, tyro.conf.subcommand("convert-checkpoint")]
        | Annotated[CompareCheckpoint, tyro.conf.subcommand("compare-checkpoint")]
        | Annotated[FixedCodes, tyro.conf.subcommand("fixed-codes")]
        | Annotated[Frontier, tyro.conf.subcommand("frontier")]
        | Annotated[NeedGap, tyro.conf.subcommand("need-gap")]
        | Annotated[Corrections, tyro.conf.subcommand("corrections")]
        | Annotated[BrokerPricing, tyro.conf.subcommand("broker-pricing")]
        | Annotated[SeedReport, tyro.conf.subcommand("seed-report")]
    )


def _parse(args: list[str], debug: bool, train_defaults: Train | None) -> Command:
    """tyro's parse, with its boxed usage errors cut to their first line (the full box with --debug)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(
                subcommands(train_defaults),
                args=args,
                prog=PROG,
                description="Play, evaluate, train and view the commons_arena game. Errors are one line; "
                f"add {DEBUG_FLAG} anywhere for the details.",
            )
    except SystemExit as exc:
        text = captured.getvalue()
        if exc.code in (0, None) or debug or not text.strip():
            sys.stderr.write(text)
            raise
        print(f"{PROG}: error: {_usage_message(text)} (see {PROG} --help)", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None


def _usage_message(boxed: str) -> str:
    """The first sentence of tyro's error report (a heading ending in ':' takes the next line).

    On a terminal tyro draws a box with the title in its top border; elsewhere it prints the
    title as a first line underlined with dashes. Both lose the frame and the title here."""
    lines: list[str] = []
    separators = 0
    for raw in boxed.splitlines():
        line = raw.strip()
        if line.startswith(("╭", "╰")):
            continue
        line = line.strip("│").strip()
        if not line:
            continue
        if set(line) <= set("-─ "):
            separators += 1
            if separators == 1 and len(lines) == 1 and not boxed.lstrip().startswith("╭"):
                lines.clear()  # the unboxed title
            continue
        lines.append(line)
    if not lines:
        return " ".join(boxed.split())
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


# What a user can cause and fix: reported as one line. Anything else is a bug: traceback, exit 3.
DOMAIN_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, sqlite3.DatabaseError)


def main(argv: list[str] | None = None) -> None:
    """Parse, validate, run; domain errors exit 2 with one line on stderr (see the module docstring)."""
    if argv is None:  # the whole process is this command: training pins the string-hash seed first
        pin_hash_seed(next((a for a in sys.argv[1:] if not a.startswith("-")), None) in TRAINING_COMMANDS)
    args = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in args or os.environ.get("COMMONS_ARENA_DEBUG") == "1"
    args = [a for a in args if a != DEBUG_FLAG]
    np.set_printoptions(precision=3, suppress=True)
    forget_inputs()  # this command's inputs are the files it reads from here on (commons_arena.files)
    try:
        train_defaults = config_defaults(args)
    except DOMAIN_ERRORS as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None
    command = _parse(args, debug, train_defaults)
    try:
        validate = getattr(command, "validate", None)
        if validate is not None:
            validate()
        command.run()
    except DOMAIN_ERRORS as exc:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception:  # a bug: the traceback, and an exit code no command gives a meaning to
        traceback.print_exc()
        print(f"{PROG}: internal error (a bug; please report it with the traceback above)", file=sys.stderr)
        raise SystemExit(EXIT_BUG) from None


if __name__ == "__main__":
    main()

