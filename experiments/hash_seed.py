"""Python's string-hash seed, pinned for every process that trains.

RLlib gathers a multi-agent batch in the order of a *set* of agent ids
(``MultiAgentEpisode.get_agents_that_stepped``), and the iteration order of a set of strings
depends on the interpreter's string-hash seed. When several modules (or the agents of one
shared module) sample their actions from torch's one generator, that order decides which
random number each agent draws: two self-play runs of one experiment file and seed diverged
in their first iteration under ``PYTHONHASHSEED`` 1 and 2, and matched bit for bit under the
same value. (A single learning seat, the main job, draws in one order whatever the seed.)

So the commands that train re-execute themselves once with a fixed hash seed before they
import anything heavy, and Ray workers get the same value through ``runtime_env``
(:func:`experiments.cluster.runtime_env`). Light on purpose: the CLI imports it at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

TRAINING_HASH_SEED = "0"


def needs_pinning(trains: bool, environ: Mapping[str, str]) -> bool:
    """A command that trains, in a process whose string hashing is not the pinned one."""
    return trains and environ.get("PYTHONHASHSEED") != TRAINING_HASH_SEED


def pin_hash_seed(trains: bool) -> None:
    """Re-execute this command line with ``PYTHONHASHSEED`` pinned, if it trains and is not pinned
    (which commands train is the command line's to say: :data:`commands.cli.TRAINING_COMMANDS`).

    Call only from the console entry point (the whole process is this command): the new
    process runs the same interpreter with the same arguments (``sys.orig_argv``).
    """
    if needs_pinning(trains, os.environ):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": TRAINING_HASH_SEED})


__all__ = ["TRAINING_HASH_SEED", "needs_pinning", "pin_hash_seed"]
