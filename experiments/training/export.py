"""From RLlib modules to what a checkpoint stores and what evaluations play.

Each learning seat's module becomes the data-only greedy network of
``policies.checkpoint_format`` (a shared team module's identity folded in per seat,
``seats.fold_identity``) behind the seat's ``ModuleInterface``: what the checkpoint stores is
what is evaluated. One learning allocator is saved as ``learned:<checkpoint>``; several
learning seats as a policy set (``policies/<seat>/``, see :mod:`policies.policy_set`), so
``learned:<run>/checkpoint`` plays any of their roles.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from experiments.training.seats import SeatPlan, fold_identity
from experiments.training.setup import RunSetup
from policies.checkpoint_format import PolicyNetwork, network_from_rl_module
from policies.learned import save_policy
from policies.policy_set import SET_DIR


def seat_networks(algo: Any, plan: SeatPlan) -> dict[str, Any]:
    """Learning seat -> the data-only greedy network of its module (identity folded in); a
    recurrent module, which that format cannot hold yet, is returned as itself."""
    out: dict[str, Any] = {}
    for module_id, seats in plan.modules.items():
        module = algo.get_module(module_id)
        if module.is_stateful():
            if any(seat in plan.identity for seat in seats):
                raise ValueError(f"module {module_id!r} is recurrent: its seat identity cannot be folded in")
            out.update(dict.fromkeys(seats, module))
            continue
        network = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
        for seat in seats:
            out[seat] = fold_identity(network, plan.identity[seat]) if seat in plan.identity else network
    return out


def save_checkpoint(algo: Any, checkpoint: Path, networks: Mapping[str, Any], setup: RunSetup,
                    config: ScenarioConfig) -> None:
    """RLlib's full state (pickles: only ``--resume`` reads them) plus the data-only files
    ``learned:`` reads; ``config`` names a scenario whose spaces the networks fit."""
    algo.save_to_path(str(checkpoint))
    if setup.plan.seats != [ALLOCATOR]:
        for seat, network in networks.items():
            save_policy(checkpoint / SET_DIR / seat, network, config, seat, setup.scales[seat],
                        codec=setup.codecs.get(seat), history=setup.histories.get(seat, 1))
    elif isinstance(networks[ALLOCATOR], PolicyNetwork):
        save_policy(checkpoint, networks[ALLOCATOR], config, ALLOCATOR, setup.scales[ALLOCATOR],
                    codec=setup.codecs.get(ALLOCATOR), history=setup.histories.get(ALLOCATOR, 1))
    else:
        print("  (an LSTM module has no data-only export yet: no learned:<dir> files written)")


def keep_best(checkpoint: Path, best: Path) -> None:
    shutil.rmtree(best, ignore_errors=True)
    shutil.copytree(checkpoint, best)


__all__ = ["keep_best", "save_checkpoint", "seat_networks"]
