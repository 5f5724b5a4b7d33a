"""Joining Ray for training and tournaments: one place that decides how (docs/cluster.md).

:func:`start_ray` joins the cluster at ``address`` (or ``$RAY_ADDRESS``) and ships this
checkout's code to its nodes through Ray's ``runtime_env`` (``py_modules``: the packages
``commons_arena``, ``policies`` and ``experiments``), so a node needs only the Python
dependencies, not the repository; without an address it starts a local Ray with
``num_cpus`` CPUs and ships nothing (the workers import what the driver imports, and
packing the code would cost every local run the upload and unpack; measured in
docs/cluster.md). Data travels as data: scenarios as parsed configs, checkpoints as bytes
(``policies.shipping``).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any


def cluster_address(address: str | None) -> str | None:
    """``address``, else ``$RAY_ADDRESS``; None (or empty) for a local Ray."""
    return address or os.environ.get("RAY_ADDRESS") or None


def code_packages() -> list[ModuleType]:
    """The packages every node imports: the arena, the policies, the experiments."""
    import commons_arena
    import experiments
    import policies

    return [commons_arena, policies, experiments]


def runtime_env() -> dict[str, Any]:
    """Ray's ``runtime_env`` that puts this checkout's packages on every worker's path and pins
    the workers' string-hash seed (experiments/hash_seed.py says why)."""
    return {"py_modules": code_packages(), **hash_seed_env()}


def hash_seed_env() -> dict[str, Any]:
    """The part of a ``runtime_env`` that gives Ray workers the training hash seed."""
    from experiments.hash_seed import TRAINING_HASH_SEED

    return {"env_vars": {"PYTHONHASHSEED": TRAINING_HASH_SEED}}


def start_ray(address: str | None, num_cpus: int | None = None, **kwargs: Any) -> bool:
    """Join the cluster at ``address``/``$RAY_ADDRESS`` (shipping the code) or start a local Ray.

    Returns True when this call started Ray (the caller then shuts it down); a Ray already
    initialised in this process (a notebook, a test session) is kept as it is.
    """
    import ray

    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", **kwargs}
    where = cluster_address(address)
    if where:
        ray.init(address=where, runtime_env=runtime_env(), **quiet)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, runtime_env=hash_seed_env(), **quiet)
    return True


__all__ = ["cluster_address", "code_packages", "hash_seed_env", "runtime_env", "start_ray"]
