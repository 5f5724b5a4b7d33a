"""``--init-from learned:<dir>``: the learning allocator starts from a data-only checkpoint's policy.

The checkpoint (``arena_policy.json`` + ``.safetensors``, :mod:`policies.checkpoint_format`)
holds the greedy actor only: the module's actor encoder and policy head get its weights, the
value function starts fresh (PPO fits it from the first batch on), and the run observes
through the checkpoint's observation scale (the weights were trained on it). Nothing else is
taken over silently: a checkpoint whose role, spaces, codec, history or layer sizes are not
this run's is refused before Ray starts (:func:`experiments.training.networks.check_warm_start`), with one line naming the
flag to change; the one widening allowed is a universal checkpoint's cell view (``cells_v1`` into a ``cells_v2`` run:
the new inputs start at weight 0). The arms race (:mod:`experiments.studies.arms_race`) continues a learned
allocator this way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from policies.checkpoint_format import Linear
from policies.learned import LEARNED_PREFIX


def checkpoint_dir(spec: str) -> Path:
    """``learned:<dir>`` or ``<dir>`` -> the folder (a shipped checkpoint's name, ``universal``, -> its folder)."""
    from policies.shipping import on_disk

    return Path(on_disk(spec.removeprefix(LEARNED_PREFIX)))


def expected_linears(input_size: int, hidden: Sequence[int], outputs: int) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of the allocator's module: its MLP encoder, then the policy head."""
    sizes = [input_size, *hidden, outputs]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


def check_mlp_start(spec: str, meta: Mapping[str, Any], stages: Sequence[ScenarioConfig], codec: str | None,
                    history: int, hidden: Sequence[int]) -> None:
    """An mlp allocator's checkpoint: every stage's spaces, its history and layer sizes are the run's."""
    from policies.learned import ModuleInterface, check_fits

    for config in stages:
        check_fits(dict(meta), config, ALLOCATOR, checkpoint_dir(spec))
    if meta["history"] != history:
        raise ValueError(f"--init-from {spec}: it sees {meta['history']} tick(s), the run {history} "
                         f"(pass --history {meta['history']})")
    interface = ModuleInterface(stages[0], ALLOCATOR, np.asarray(meta["observation_scale"], np.float32), codec, history)
    check_layers(spec, meta, expected_linears(interface.input_size, hidden, int(sum(interface.action_space().nvec))))


def check_cells_start(spec: str, meta: Mapping[str, Any], stages: Sequence[ScenarioConfig], hidden: Sequence[int],
                      features: str = "cells_v1") -> None:
    """A shape-free allocator's checkpoint: its cell features are the run's ``features`` or the first of them (a
    cells_v1 checkpoint starts a cells_v2 run: :func:`~experiments.training.cell_module.load_cell_policy` gives the
    new inputs weight 0), its layer sizes are the run's; every stage fits its view."""
    from policies.universal import cell_view, check_shape

    theirs, ours = cell_view(meta["universal"]["features"]), cell_view(features)
    if ours.feature_names[: theirs.n_features] != theirs.feature_names:
        raise ValueError(f"--init-from {spec}: it reads cell features {theirs.name}, which the run's {ours.name} do not "
                         f"extend (pass --cell-features {theirs.name.removeprefix('cells_')})")
    for config in stages:
        check_shape(config, f"--init-from {spec}")
    check_layers(spec, meta, expected_linears(theirs.n_features, hidden, int(meta["action_nvec"][0])))


def check_layers(spec: str, meta: Mapping[str, Any], wanted: list[tuple[int, int]]) -> None:
    """ValueError unless the checkpoint's linear layers are ``wanted`` (in, out), naming the --hidden to pass."""
    from policies.checkpoint_format import NetworkSpec

    linears = [(layer.in_, layer.out) for layer in NetworkSpec.model_validate(meta["network"]).layers
               if isinstance(layer, Linear)]
    if linears != wanted:
        raise ValueError(f"--init-from {spec}: its network's layers {linears} are not the run's {wanted} "
                         f"(pass --hidden {' '.join(str(out) for _, out in linears[:-1])})")


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

    def copy(learner: Any) -> None:
        module = learner.module[module_id]
        encoder = getattr(module.encoder, "actor_encoder", module.encoder)
        children = [*encoder.net.mlp, *module.pi.net.mlp]
        with torch.no_grad():
            for i, child in enumerate(children):
                if isinstance(child, torch.nn.Linear | torch.nn.LayerNorm):
                    child.weight.copy_(tensors[f"layers.{i}.weight"])
                    child.bias.copy_(tensors[f"layers.{i}.bias"])

    if isinstance(algo.get_module(module_id), CellPPOModule):  # the shape-free allocator: its per-cell policy
        algo.learner_group.foreach_learner(lambda learner: load_cell_policy(learner.module[module_id], network))
        read: Any = network_from_cell_module
    else:
        algo.learner_group.foreach_learner(copy)
        read = lambda module: network_from_rl_module(module, [int(n) for n in module.action_space.nvec])  # noqa: E731
    push_learner_weights(algo)
    loaded = read(algo.get_module(module_id))
    # a module of a wider cell view (the checkpoint's inputs first, the new ones at weight 0) gives its logits too
    probe = np.random.default_rng(0).normal(size=(8, loaded.input_size)).astype(np.float32)
    if not np.allclose(loaded.logits(probe), network.logits(probe[:, : network.input_size]), atol=1e-5):
        raise RuntimeError(f"--init-from {spec}: the module's outputs differ from the checkpoint's after loading")


__all__ = ["LEARNED_PREFIX", "check_cells_start", "check_layers", "check_mlp_start", "checkpoint_dir",
           "expected_linears", "load_warm_start", "warm_scale"]
