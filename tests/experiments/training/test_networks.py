"""The network as an object (experiments/training/networks.py) and RLlib's env config as one typed value
(experiments/training/env_config.py): no RLlib needed."""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.training.args import TrainArgs
from experiments.training.env_config import ArenaEnvConfig, BackgroundMix, BackgroundMixture
from experiments.training.networks import MLP, NETWORKS, network_of
from policies.learned import ModuleInterface
from policies.universal import OBS_SIZE, UniversalInterface


def test_every_network_is_one_registered_object_the_flag_names() -> None:
    assert list(NETWORKS) == ["mlp", "cells", "padded"]
    assert all(TrainArgs(network=name).net is NETWORKS[name] for name in NETWORKS)
    assert TrainArgs().net is MLP
    with pytest.raises(ValueError, match=r"--network must be one of \['mlp', 'cells', 'padded'\], got 'convolutional'"):
        TrainArgs(network="convolutional").validate()
    with pytest.raises(ValueError, match="--network must be one of"):
        network_of("convolutional")


def test_a_network_picks_its_seats_view() -> None:
    config = commons_arena.load_scenario("crisis")
    own = MLP.interface(config, ALLOCATOR, codec="need")
    assert isinstance(own, ModuleInterface) and np.all(own.batched.scale == 1)  # no scale: 1 on every dimension
    for name in ("cells", "padded"):  # the padded cell view, the same size in every scenario
        view = NETWORKS[name].interface(config, ALLOCATOR, codec="need")
        assert isinstance(view, UniversalInterface) and view.observation_space().shape == (OBS_SIZE,)


def test_a_cell_network_refuses_what_it_cannot_play() -> None:
    crisis = commons_arena.load_scenario("crisis")
    with pytest.raises(ValueError, match="--network cells is the allocator learning alone"):
        NETWORKS["cells"].check_run(["allocator", "search"], [crisis], None)
    with pytest.raises(ValueError, match="--init-from starts a cells or mlp network, not padded"):
        NETWORKS["padded"].check_run(["allocator"], [crisis], "learned:somewhere")
    NETWORKS["cells"].check_run(["allocator"], [crisis], None)
    MLP.check_run(["allocator", "search"], [crisis], None)  # the mlp plays any seats


def test_the_env_config_is_one_typed_value_and_refuses_an_untyped_dict() -> None:
    config = ArenaEnvConfig(scenario="crisis", learned_agents=(ALLOCATOR,), network={ALLOCATOR: NETWORKS["cells"]})
    assert ArenaEnvConfig.of(config.for_rllib()) is config  # what RLlib hands the env and the callbacks
    assert ArenaEnvConfig.of(None) == ArenaEnvConfig.of({}) == ArenaEnvConfig()
    assert config.network_of(ALLOCATOR).cell_view and config.network_of("search") is MLP
    with pytest.raises(TypeError, match=r"takes an ArenaEnvConfig .* got \['scenario', 'scripted_in_env'\]"):
        ArenaEnvConfig.of({"scenario": "crisis", "scripted_in_env": True})  # the old untyped keys
    with pytest.raises(ValueError, match="give one"):
        ArenaEnvConfig(background_mix=BackgroundMix({}, 0.5), background_mixture=BackgroundMixture(("a",), (None,), (1,)))
    with pytest.raises(AttributeError):
        config.scenario = "standard"  # type: ignore[misc]  # frozen


def test_the_cell_features_flag_picks_the_cell_views_version_and_a_file_keeps_it(tmp_path, monkeypatch) -> None:
    import sys
    from types import SimpleNamespace

    from commands import cli
    from experiments.training.config_file import experiment_text, load_experiment

    assert TrainArgs(network="cells").net.features == "cells_v1"  # the default: nothing changes unless asked
    v2 = TrainArgs(experiment="allocator_family", network="cells", cell_features="v2")
    assert v2.net.name == "cells" and v2.net.features == "cells_v2" and v2.net is not NETWORKS["cells"]
    assert v2.net.interface(commons_arena.load_scenario("crisis"), ALLOCATOR, codec="need").batched.view.name == "cells_v2"
    assert TrainArgs(network="padded", cell_features="v2").net.features == "cells_v2"
    with pytest.raises(ValueError, match="--cell-features v2 is the cell view's .*--network mlp reads the scenario's own"):
        TrainArgs(cell_features="v2").validate()
    with pytest.raises(ValueError, match=r"--cell-features must be one of \['v1', 'v2'\], got 'v3'"):
        TrainArgs(network="cells", cell_features="v3").validate()  # type: ignore[arg-type]
    path = tmp_path / "e.toml"
    path.write_text(experiment_text(v2))
    assert 'cell_features = "v2"' in path.read_text() and load_experiment(path).net.features == "cells_v2"
    seen: list[TrainArgs] = []
    monkeypatch.setitem(sys.modules, "experiments.training.train",  # keeps RLlib out: only the arguments matter
                        SimpleNamespace(train=lambda args, setup: seen.append(args)))
    cli.main(["train", "--experiment", "allocator_family", "--network", "cells", "--cell-features", "v2",
              "--iterations", "1"])
    assert seen[0].cell_features == "v2" and seen[0].net.features == "cells_v2"


def test_the_critic_flag_reaches_the_cell_module_and_a_file_keeps_it(tmp_path, monkeypatch) -> None:
    import sys
    from types import SimpleNamespace

    from commands import cli
    from experiments.training.config_file import experiment_text, load_experiment

    assert TrainArgs().critic == "pooled"  # the default: the tick's one advantage, as before the flag
    cells = TrainArgs(experiment="allocator_family", network="cells", sampler="lean", critic="cells")
    cells.validate()
    assert NETWORKS["cells"].critics == ("pooled", "cells", "privileged") and NETWORKS["mlp"].critics == ("pooled",)
    with pytest.raises(ValueError, match="--critic cells is the cell network's .*--network mlp has the pooled critic"):
        TrainArgs(sampler="lean", critic="cells").validate()
    with pytest.raises(ValueError, match="--critic privileged gives each cell its own advantage in the lean update"):
        TrainArgs(network="cells", critic="privileged").validate()  # the stock sampler
    with pytest.raises(ValueError, match=r"--critic must be one of \['pooled', 'cells', 'privileged'\], got 'team'"):
        TrainArgs(network="cells", sampler="lean", critic="team").validate()  # type: ignore[arg-type]
    path = tmp_path / "e.toml"
    path.write_text(experiment_text(cells))
    assert 'critic = "cells"' in path.read_text() and load_experiment(path).critic == "cells"
    seen: list[TrainArgs] = []
    monkeypatch.setitem(sys.modules, "experiments.training.train",  # keeps RLlib out: only the arguments matter
                        SimpleNamespace(train=lambda args, setup: seen.append(args)))
    cli.main(["train", "--experiment", "allocator_family", "--network", "cells", "--sampler", "lean",
              "--critic", "privileged", "--iterations", "1"])
    assert seen[0].critic == "privileged"
