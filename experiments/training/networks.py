"""The learning allocator's network (``commons-arena train --network NAME``), one class per network.

A network says how its seat sees the game (:meth:`Network.interface`: the scenario's own scaled view,
or the padded cell view of :mod:`policies.universal`), which RLlib module learns (:meth:`Network.module`),
its greedy policy (:meth:`Network.policy`), where it starts (:meth:`Network.favour_zero`), what a
checkpoint stores (:meth:`Network.save`) and what a run or an ``--init-from`` checkpoint must satisfy
(:meth:`Network.check_run`, :func:`check_warm_start`). Code asks the object, never its name; a new
network is one class here, added to :data:`NETWORKS`. Light on purpose (``args.py`` imports it): RLlib
and torch load inside the methods that need them. A method's ``setup`` is the run's ``RunSetup``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_observation_space
from experiments.training.privileged import CRITICS, privileged_width
from experiments.training.warm_start import check_cells_start, check_mlp_start, checkpoint_dir, warm_scale
from policies.batch import OneArenaInterface
from policies.learned import LearnedPolicy, ModuleInterface, read_sidecar, save_policy


class Network:
    """``mlp`` (the default): RLlib's MLP over the scenario's own scaled observation; one cluster shape only."""

    name: ClassVar[str] = "mlp"
    cell_view: ClassVar[bool] = False  # sees the padded cell view (policies.universal): any cluster's shape
    features: str = "cells_v1"  # the cell view's version (policies.universal.CELL_VIEWS): a cell network's only
    critics: ClassVar[tuple[str, ...]] = ("pooled",)  # the --critic choices its module has

    def with_features(self, features: str) -> Network:
        """This network reading cell ``features`` (``--cell-features``); a network without the cell view reads
        none (``TrainArgs.validate`` refuses another version for it)."""
        return self

    def interface(self, config: ScenarioConfig, seat: str, scale: np.ndarray | None = None, codec: Any = None,
                  history: int = 1, identity: tuple[int, int] | None = None) -> OneArenaInterface[Any]:
        """What ``seat``'s module sees the game through (no ``scale``: 1 on every dimension)."""
        scale = np.ones(make_observation_space(config, seat).shape, np.float32) if scale is None else scale
        return ModuleInterface(config, seat, scale, codec, history, identity)

    def policy(self, network: Any, setup: Any, seat: str, config: ScenarioConfig) -> LearnedPolicy:
        """``seat``'s greedy policy from its module's data-only ``network``, as its checkpoint stores it."""
        return LearnedPolicy(network, self.interface(config, seat, setup.scales.get(seat), setup.codecs.get(seat),
                                                     setup.histories.get(seat, 1)))

    def module(self, setup: Any) -> tuple[Any, type | None, type | None]:
        """RLlib's model config, module class (None: the algorithm's default) and PPO learner class (None: PPO's)."""
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        args = setup.args
        return DefaultModelConfig(fcnet_hiddens=list(args.hidden), fcnet_activation="tanh", vf_share_layers=False,
                                  use_lstm=args.use_lstm, lstm_cell_size=64, max_seq_len=16), None, None

    def favour_zero(self, algo: Any, module: str, codec: Any, strength: float) -> None:
        """Start ``module`` at ``codec``'s zero code (:func:`experiments.training.weights.favour_code`)."""
        from experiments.training.weights import favour_code

        if codec.zero_code is not None:
            favour_code(algo, module, codec.nvec, codec.zero_code, strength)

    def save(self, folder: Path, network: Any, setup: Any, config: ScenarioConfig) -> None:
        """The data-only files ``learned:<folder>`` reads, of the allocator learning alone."""
        save_policy(folder, network, config, ALLOCATOR, setup.scales[ALLOCATOR], codec=setup.codecs.get(ALLOCATOR),
                    history=setup.histories.get(ALLOCATOR, 1))

    def check_run(self, seats: Sequence[str], stages: Sequence[ScenarioConfig], init_from: str | None) -> None:
        """ValueError unless this network can play a run of these learning seats and scenarios."""

    def start_scale(self, init_from: str | None) -> np.ndarray | None:
        """The allocator's observation scale when it starts from a checkpoint (its weights were trained on it)."""
        return None if init_from is None else warm_scale(init_from)

    def scales(self, fit: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The learning seats' observation scales: ``fit()``'s (a view in the scenario's own units)."""
        return fit()

    def shape_problem(self, who: str) -> str | None:
        """Why ``who``, which plays clusters of every shape, cannot learn with this network (None: it can)."""
        return f"{who} plays clusters of every shape: pass --network cells"

    def check_start(self, spec: str, meta: Mapping[str, Any], stages: Sequence[ScenarioConfig], codec: str | None,
                    history: int, hidden: Sequence[int]) -> None:
        """ValueError unless ``--init-from``'s checkpoint (its sidecar ``meta``) fits this network's module."""
        check_mlp_start(spec, meta, stages, codec, history, hidden)

    def learned(self, run: Path) -> str | None:
        """How ``learned:`` names the best policy ``run`` trained (None: it writes none)."""
        return f"learned:{run / 'best'}"


class Cells(Network):
    """``cells``: one MLP shared by every (team, tier) cell of the padded view (policies/universal.py): any cluster
    up to 8 teams x 4 tiers; the allocator learns alone through a per-cell codec (need or residual)."""

    name = "cells"
    cell_view = True
    critics: ClassVar[tuple[str, ...]] = CRITICS

    def __init__(self, features: str = "cells_v1") -> None:
        self.features = features

    def with_features(self, features: str) -> Network:
        return self if features == self.features else type(self)(features)

    def interface(self, config: ScenarioConfig, seat: str, scale: np.ndarray | None = None, codec: Any = None,
                  history: int = 1, identity: tuple[int, int] | None = None) -> OneArenaInterface[Any]:
        from policies.universal import UniversalInterface

        return UniversalInterface(config, seat, codec, self.features)

    def policy(self, network: Any, setup: Any, seat: str, config: ScenarioConfig) -> LearnedPolicy:
        return LearnedPolicy.cells(network, config, seat, setup.codecs[seat], features=self.features)

    def module(self, setup: Any) -> tuple[Any, type | None, type | None]:
        from experiments.training.cell_module import CellPPOLearner, CellPPOModule
        from policies.codecs import CODECS, ResidualPlannerCodec

        codec = CODECS[setup.codecs[ALLOCATOR]]
        assert issubclass(codec, ResidualPlannerCodec)
        critic = setup.args.critic
        return ({"hidden": list(setup.args.hidden), "n_actions": len(codec.DELTAS), "zero": codec.DELTAS.index(0),
                 "features": self.features, "critic": critic, "privileged": privileged_width(critic)},
                CellPPOModule, CellPPOLearner)

    def favour_zero(self, algo: Any, module: str, codec: Any, strength: float) -> None:
        from experiments.training.weights import favour_cells

        favour_cells(algo, module, int(codec.zero_code[0]), strength)  # one cell's code: the same bias on every cell

    def save(self, folder: Path, network: Any, setup: Any, config: ScenarioConfig) -> None:
        from policies.learned import save_universal_policy

        save_universal_policy(folder, network, "+".join(setup.args.stages),
                              config.content_hash if len(setup.stages) == 1 else "", codec=setup.codecs[ALLOCATOR],
                              features=self.features)

    def check_run(self, seats: Sequence[str], stages: Sequence[ScenarioConfig], init_from: str | None) -> None:
        from policies.universal import check_shape

        if list(seats) != [ALLOCATOR]:
            raise ValueError(f"--network {self.name} is the allocator learning alone; the run trains {list(seats)}")
        for config in stages:
            check_shape(config, f"--network {self.name}")

    def start_scale(self, init_from: str | None) -> np.ndarray | None:
        return None  # cell features are normalised by each scenario's public parameters

    def scales(self, fit: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {}  # cell features are normalised by each scenario's public parameters

    def shape_problem(self, who: str) -> str | None:
        return None

    def check_start(self, spec: str, meta: Mapping[str, Any], stages: Sequence[ScenarioConfig], codec: str | None,
                    history: int, hidden: Sequence[int]) -> None:
        check_cells_start(spec, meta, stages, hidden, self.features)


class Padded(Cells):
    """``padded``: RLlib's MLP over the same padded view, weights per cell slot (what ``cells`` was measured
    against, docs/training.md); a measurement: it writes no ``learned:`` files and starts from no checkpoint."""

    name = "padded"
    critics = Network.critics
    policy = Network.policy  # one code per padded cell slot, from the whole view
    module = Network.module

    def favour_zero(self, algo: Any, module: str, codec: Any, strength: float) -> None:
        from experiments.training.weights import favour_code
        from policies.universal import CELLS

        favour_code(algo, module, np.full(CELLS, codec.nvec[0]), np.full(CELLS, codec.zero_code[0]), strength)

    def save(self, folder: Path, network: Any, setup: Any, config: ScenarioConfig) -> None:
        print("  (--network padded is a measurement: no learned:<dir> files written)")

    def check_run(self, seats: Sequence[str], stages: Sequence[ScenarioConfig], init_from: str | None) -> None:
        super().check_run(seats, stages, init_from)
        if init_from is not None:
            raise ValueError("--init-from starts a cells or mlp network, not padded")

    def learned(self, run: Path) -> str | None:
        return None


NETWORKS: dict[str, Network] = {network.name: network for network in (Network(), Cells(), Padded())}
MLP = NETWORKS["mlp"]


def network_of(name: str) -> Network:
    """The network named ``name`` (``--network``)."""
    if name not in NETWORKS:
        raise ValueError(f"--network must be one of {', '.join(NETWORKS)}, got {name!r}")
    return NETWORKS[name]


def check_warm_start(spec: str, stages: Sequence[ScenarioConfig], codec: str | None, history: int,
                     hidden: Sequence[int], network: Network = MLP, where: str | None = None) -> dict[str, Any]:
    """``--init-from``'s sidecar (or, ``where`` saying so, a resumed run's checkpoint's), if its policy fits the
    run's allocator module; else ValueError naming the flag."""
    where = where or f"--init-from {spec}"
    try:
        meta = read_sidecar(checkpoint_dir(spec))
    except ValueError as err:  # a CheckpointError: what is wrong with the folder
        raise ValueError(f"{where}: {err}") from None
    if meta["role"] != ALLOCATOR:
        raise ValueError(f"{where}: a {meta['role']} policy; --init-from starts the allocator")
    theirs = NETWORKS["cells"] if meta.get("universal") is not None else MLP  # what the checkpoint holds
    if theirs.name != network.name:
        raise ValueError(f"{where}: its network is {theirs.name!r}, the run's {network.name!r} "
                         f"(pass --network {theirs.name})")
    coded = (meta["action_codec"] or {}).get("name")
    if coded != codec:
        raise ValueError(f"{where}: it acts through codec {coded or 'none'!r}, the run through {codec or 'none'!r} "
                         f"(pass --action-codec {coded or 'none'})")
    try:
        network.check_start(spec, meta, stages, codec, history, hidden)
    except ValueError as err:  # its checks name --init-from; a resume's checkpoint is named as `where` says
        raise ValueError(str(err).replace(f"--init-from {spec}", where, 1)) from None
    return meta


__all__ = ["MLP", "NETWORKS", "Cells", "Network", "Padded", "check_warm_start", "network_of"]
