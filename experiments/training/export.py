"""From RLlib modules to what a checkpoint stores and what evaluations play.

Each learning seat's module becomes the data-only greedy network of
``policies.checkpoint_format`` (a shared team module's identity folded in per seat,
``seats.fold_identity``) behind the seat's ``ModuleInterface``: what the checkpoint stores is
what is evaluated. One learning allocator is saved as its network stores it (``learned:<checkpoint>``); several
learning seats as a policy set (``policies/<seat>/``, see :mod:`policies.policy_set`), so
``learned:<run>/checkpoint`` plays any of their roles. A ``setup`` here is the run's
:class:`~experiments.training.setup.RunSetup` (not imported: the setup imports the experiment
kinds, and a league's kind saves its snapshots here).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commons_arena.enums import ALLOCATOR
from commons_arena.files import copy_folder
from commons_arena.scenario import ScenarioConfig
from experiments.training.cell_module import CellPPOModule, network_from_cell_module
from experiments.training.rl_modules import network_from_rl_module
from experiments.training.seats import SeatPlan, fold_identity
from policies.learned import save_policy
from policies.policy_set import SET_DIR


def seat_networks(algo: Any, plan: SeatPlan) -> dict[str, Any]:
    """Learning seat -> the data-only greedy network of its module (identity folded in)."""
    out: dict[str, Any] = {}
    for module_id, seats in plan.modules.items():
        module = algo.get_module(module_id)
        if isinstance(module, CellPPOModule):  # the shape-free allocator: its per-cell policy
            out.update(dict.fromkeys(seats, network_from_cell_module(module)))
            continue
        network = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
        for seat in seats:
            out[seat] = fold_identity(network, plan.identity[seat]) if seat in plan.identity else network
    return out


def save_checkpoint(algo: Any, checkpoint: Path, networks: Mapping[str, Any], setup: Any,
                    config: ScenarioConfig) -> None:
    """RLlib's full state (pickles: only ``--resume`` reads them) plus the data-only files
    ``learned:`` reads; ``config`` names a scenario whose spaces the networks fit."""
    algo.save_to_path(str(checkpoint))
    save_policies(checkpoint, networks, setup, config)


def save_policies(folder: Path, networks: Mapping[str, Any], setup: Any, config: ScenarioConfig) -> None:
    """The data-only files ``learned:<folder>`` reads: one allocator as a single policy, several
    learning seats as a policy set (``<folder>/policies/<seat>/``)."""
    if setup.plan.seats != [ALLOCATOR]:
        for seat, network in networks.items():
            save_policy(folder / SET_DIR / seat, network, config, seat, setup.scales[seat],
                        codec=setup.codecs.get(seat), history=setup.histories.get(seat, 1))
    else:  # the allocator alone: as its network stores it
        setup.args.net.save(folder, networks[ALLOCATOR], setup, config)


def save_untrained(algo: Any, setup: Any, folder: Path, config: ScenarioConfig) -> dict[str, Any]:
    """``<run>/iteration_0/``: every learning seat's data-only policy before the first update
    (the untrained reference ``analyze`` and the learning curve compare with); returns the networks."""
    networks = seat_networks(algo, setup.plan)
    save_policies(folder, networks, setup, config)
    return networks


def save_snapshot(algo: Any, setup: Any, module_id: str, folder: Path, config: ScenarioConfig) -> None:
    """A league snapshot (a frozen copy of the shared team module) as a policy set, one
    identity-folded policy per team seat: ``learned:<folder>/policies/<team>`` plays it."""
    snapshot_plan = SeatPlan({seat: module_id for seat in setup.plan.seats}, setup.plan.identity,
                             {module_id: "team"})
    save_policies(folder, seat_networks(algo, snapshot_plan), setup, config)


def keep_best(checkpoint: Path, best: Path) -> None:
    copy_folder(checkpoint, best)  # regular files only; the earlier best removed first


__all__ = ["keep_best", "save_checkpoint", "save_policies", "save_snapshot", "save_untrained", "seat_networks"]
