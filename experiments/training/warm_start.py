"""``--init-from learned:<dir>``: the learning allocator starts from a data-only checkpoint's policy.

The checkpoint (``arena_policy.json`` + ``.safetensors``, :mod:`policies.checkpoint_format`)
holds the greedy actor only: the module's actor encoder and policy head get its weights, the
value function starts fresh (PPO fits it from the first batch on), and the run observes
through the checkpoint's observation scale (the weights were trained on it). Nothing else is
taken over silently: a checkpoint whose role, spaces, codec, history or layer sizes are not
this run's is refused before Ray starts (:func:`check_warm_start`), with one line naming the
flag to change. The arms race (:mod:`experiments.studies.arms_race`) continues a learned
allocator this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from policies.checkpoint_format import Linear

LEARNED_PREFIX = "learned:"


def checkpoint_dir(spec: str) -> Path:
    """``learned:<dir>`` or ``<dir>`` -> the folder (a shipped checkpoint's name, ``universal``, -> its folder)."""
    from policies.shipping import on_disk

    return Path(on_disk(spec.removeprefix(LEARNED_PREFIX)))


def expected_linears(input_size: int, hidden: Sequence[int], outputs: int) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of the allocator's module: its MLP encoder, then the policy head."""
    sizes = [input_size, *hidden, outputs]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


def check_warm_start(spec: str, stages: Sequence[ScenarioConfig], codec: str | None, history: int,
                     hidden: Sequence[int], network: str = "mlp") -> dict[str, Any]:
    """The checkpoint's sidecar, if its policy fits the run's allocator module; else ValueError."""
    from policies.learned import ModuleInterface, check_fits, read_sidecar

    where = f"--init-from {spec}"
    try:
        meta = read_sidecar(checkpoint_dir(spec))
    except ValueError as err:  # a CheckpointError: what is wrong with the folder
        raise ValueError(f"{where}: {err}") from None
    if meta["role"] != ALLOCATOR:
        raise ValueError(f"{where}: a {meta['role']} policy; --init-from starts the allocator")
    if (meta["universal"] is not None) != (network == "cells"):
        kind = "cells" if meta["universal"] is not None else "mlp"
        raise ValueError(f"{where}: its network is {kind!r}, the run's {network!r} (pass --network {kind})")
    if network == "cells":
        return _check_cells(where, meta, stages, codec, hidden)
    for config in stages:
        check_fits(meta, config, ALLOCATOR, checkpoint_dir(spec))
    theirs = (meta["action_codec"] or {}).get("name")
    if theirs != codec:
        raise ValueError(f"{where}: it acts through codec {theirs or 'none'!r}, the run through {codec or 'none'!r} "
                         f"(pass --action-codec {theirs or 'none'})")
    if meta["history"] != history:
        raise ValueError(f"{where}: it sees {meta['history']} tick(s), the run {history} (pass --history {meta['history']})")
    interface = ModuleInterface(stages[0], ALLOCATOR, np.asarray(meta["observation_scale"], np.float32), codec, history)
    outputs = int(sum(interface.action_space().nvec))
    linears = [(layer.in_, layer.out) for layer in _layers(meta) if isinstance(layer, Linear)]
    wanted = expected_linears(interface.input_size, hidden, outputs)
    if linears != wanted:
        sizes = [out for _, out in linears[:-1]]
        raise ValueError(f"{where}: its network's layers {linears} are not the run's {wanted} "
                         f"(pass --hidden {' '.join(map(str, sizes))})")
    return meta


def _check_cells(where: str, meta: dict[str, Any], stages: Sequence[ScenarioConfig], codec: str | None,
                 hidden: Sequence[int]) -> dict[str, Any]:
    """A shape-free allocator's checkpoint: its codec and layer sizes are the run's; every stage fits its view."""
    from experiments.training.cell_module import cell_linears
    from policies.universal import check_shape

    theirs = (meta["action_codec"] or {}).get("name")
    if theirs != codec:
        raise ValueError(f"{where}: it acts through codec {theirs!r}, the run through {codec or 'none'!r} "
                         f"(pass --action-codec {theirs})")
    for config in stages:
        check_shape(config, where)
    linears = [(layer.in_, layer.out) for layer in _layers(meta) if isinstance(layer, Linear)]
    wanted = cell_linears(list(hidden), int(meta["action_nvec"][0]))
    if linears != wanted:
        sizes = [out for _, out in linears[:-1]]
        raise ValueError(f"{where}: its network's layers {linears} are not the run's {wanted} "
                         f"(pass --hidden {' '.join(map(str, sizes))})")
    return meta


def _layers(meta: dict[str, Any]) -> list[Any]:
    from policies.checkpoint_format import NetworkSpec

    return list(NetworkSpec.model_validate(meta["network"]).layers)


def warm_scale(spec: str) -> np.ndarray:
    """The observation scale the checkpoint's weights were trained on."""
    from policies.learned import read_sidecar

    return np.asarray(read_sidecar(checkpoint_dir(spec))["observation_scale"], dtype=np.float32)


def load_warm_start(algo: Any, module_id: str, spec: str) -> None:
    """Copy the checkpoint's weights into ``module_id``'s actor (encoder + policy head) on the
    learner, push them to every env runner, and check the module now gives the checkpoint's logits."""
    import torch

    from experiments.training.cell_module import CellPPOModule, load_cell_policy, network_from_cell_module
    from experiments.training.rl_modules import network_from_rl_module
    from experiments.training.weight_sync import push_learner_weights
    from policies.checkpoint_format import load_network

    _, network = load_network(checkpoint_dir(spec))
    tensors = network.tensors()
    if isinstance(algo.get_module(module_id), CellPPOModule):  # the shape-free allocator: its per-cell policy
        algo.learner_group.foreach_learner(lambda learner: load_cell_policy(learner.module[module_id], network))
        push_learner_weights(algo)
        started = network_from_cell_module(algo.get_module(module_id))
        probe = np.random.default_rng(0).normal(size=(8, network.input_size)).astype(np.float32)
        if not np.allclose(started.logits(probe), network.logits(probe), atol=1e-5):
            raise RuntimeError(f"--init-from {spec}: the module's outputs differ from the checkpoint's after loading")
        return

    def copy(learner: Any) -> None:
        module = learner.module[module_id]
        encoder = getattr(module.encoder, "actor_encoder", module.encoder)
        children = [*encoder.net.mlp, *module.pi.net.mlp]
        with torch.no_grad():
            for i, child in enumerate(children):
                if isinstance(child, torch.nn.Linear | torch.nn.LayerNorm):
                    child.weight.copy_(tensors[f"layers.{i}.weight"])
                    child.bias.copy_(tensors[f"layers.{i}.bias"])

    algo.learner_group.foreach_learner(copy)
    push_learner_weights(algo)
    module = algo.get_module(module_id)
    probe = np.random.default_rng(0).normal(size=(8, network.input_size)).astype(np.float32)
    started = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
    if not np.allclose(started.logits(probe), network.logits(probe), atol=1e-5):
        raise RuntimeError(f"--init-from {spec}: the module's outputs differ from the checkpoint's after loading")


__all__ = ["check_warm_start", "checkpoint_dir", "expected_linears", "load_warm_start", "warm_scale"]
