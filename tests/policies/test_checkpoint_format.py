"""Data-only checkpoints: loading a policy reads JSON + safetensors and never runs a pickle.

These tests build RLlib's default PPO module directly (no Ray session, no training) and save
it the way ``commons-arena train`` does; tests/experiments/training/test_training.py repeats the trojan test on a
real trained checkpoint and converts an old pickled one.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.training.rl_modules import module_action, network_from_rl_module
from policies.checkpoint_format import SIDECAR, WEIGHTS, CheckpointError, load_network
from policies.focal import run_episode
from policies.learned import CODECS, LearnedPolicy, read_sidecar, save_policy
from policies.population import Population
from policies.registry import make_policy, policy_spec

pytestmark = [pytest.mark.slow, pytest.mark.rllib]  # exports RLlib modules it builds

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")


class Trojan:
    """Unpickling this writes ``marker``: the proof that a load ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def plant_trojans(folder: Path, marker: Path, names=("module_state.pkl", "class_and_ctor_args.pkl")) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(pickle.dumps(Trojan(marker)))


def rllib_module(obs_size: int, nvec: list[int], hidden=(16, 16), activation="tanh", layernorm=False, lstm=False):
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    torch.manual_seed(0)
    return RLModuleSpec(
        module_class=DefaultPPOTorchRLModule,
        observation_space=gym.spaces.Box(-1, 1, (obs_size,), np.float32),
        action_space=gym.spaces.MultiDiscrete(nvec),
        model_config=DefaultModelConfig(fcnet_hiddens=list(hidden), fcnet_activation=activation,
                                        fcnet_use_layernorm=layernorm, vf_share_layers=False, use_lstm=lstm,
                                        lstm_cell_size=8),
    ).build()


def save_agent(folder: Path, scenario: str, agent: str, codec: str | None = None, **module_kwargs) -> Path:
    """A fresh (untrained) default module for ``agent``, saved as a data-only checkpoint."""
    env = commons_arena.parallel_env(scenario)
    obs_size = env.observation_space(agent).shape[0]
    nvec = [int(n) for n in (CODECS[codec](env.config).nvec if codec else env.action_space(agent).nvec)]
    network = network_from_rl_module(rllib_module(obs_size, nvec, **module_kwargs), nvec)
    save_policy(folder, network, env.config, agent, np.ones(obs_size, np.float32), codec)
    return folder


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    return save_agent(tmp_path / "ckpt", "standard", ALLOCATOR, codec="relative")


def test_exported_network_acts_exactly_like_the_rllib_module(tmp_path):
    """Every layer kind the exporter knows, checked against the module's own greedy action."""
    for kwargs in ({"activation": "tanh"}, {"activation": "relu", "layernorm": True, "hidden": (8,)}):
        module = rllib_module(6, [3, 4, 2], **kwargs)
        network = network_from_rl_module(module, [3, 4, 2])
        for obs in np.random.default_rng(1).normal(size=(20, 6)).astype(np.float32):
            assert np.array_equal(network.greedy(obs), module_action(module, obs))


def test_an_exported_lstm_acts_like_the_module_with_its_state_carried_and_reset_per_arena():
    """The ``lstm`` layer: a sequence of greedy actions equals the module's own (state carried), ``reset()``
    starts again from the zero state, and N arenas in one batch each carry their own row, a reset row only."""
    module = rllib_module(6, [3, 4, 2], lstm=True)
    network = network_from_rl_module(module, [3, 4, 2])
    steps = np.random.default_rng(2).normal(size=(10, 6)).astype(np.float32) * 3
    state, theirs = None, []
    for obs in steps:
        action, state = module_action(module, obs, state)
        theirs.append(action)
    for _ in range(2):
        network.reset()
        assert all(np.array_equal(network.greedy(obs), a) for obs, a in zip(steps, theirs, strict=True))
    network.reset()
    rows = np.stack([steps, steps[::-1]], axis=1)  # two arenas
    first = np.stack([network.greedy_rows(r) for r in rows[:5]])
    network.reset(np.array([1]))  # arena 1 starts a new episode: it plays its rows again from zero
    again = np.stack([network.greedy_rows(np.stack([steps[5 + t], steps[::-1][t]])) for t in range(5)])
    assert np.array_equal(first[:, 0], np.stack(theirs[:5])) and np.array_equal(again[:, 0], np.stack(theirs[5:]))
    assert np.array_equal(again[:, 1], first[:, 1])
    with pytest.raises(ValueError, match="carries the state of 2 rows"):
        network.greedy(steps[0])


def test_sidecar_is_versioned_json_and_weights_are_safetensors(checkpoint):
    meta = json.loads((checkpoint / SIDECAR).read_text())
    assert meta["format"] == "commons_arena.policy" and meta["format_version"] == 2
    assert meta["role"] == "allocator" and meta["action_codec"] == {"name": "relative", "params": {}}
    assert [layer["type"] for layer in meta["network"]["layers"]] == ["linear", "tanh", "linear", "tanh", "linear"]
    assert meta["network"]["action_distribution"]["type"] == "multi_categorical"
    from safetensors.torch import load_file

    assert set(load_file(str(checkpoint / WEIGHTS))) == {f"layers.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")}


def test_checkpoint_plays_a_whole_episode(checkpoint):
    env = commons_arena.parallel_env("standard")
    population = Population.default(env.config).with_agent(ALLOCATOR, f"learned:{checkpoint}")
    first, again = run_episode(env, population, seed=4), run_episode(env, population, seed=4)
    assert first == again and np.isfinite(first[ALLOCATOR]["return"])


@pytest.mark.parametrize("agent", ["search", "broker"])
def test_any_role_can_be_stored_and_loaded(tmp_path, agent):
    folder = save_agent(tmp_path / agent, "standard", agent)
    role = "broker" if agent == "broker" else "team"
    assert read_sidecar(folder)["role"] == role and policy_spec(f"learned:{folder}").role == role
    env = commons_arena.parallel_env("standard")
    obs, _ = env.reset(seed=0)
    # a team checkpoint plays any team whose spaces match, not only the one it was trained as
    other = "robotics" if agent == "search" else agent
    policy = make_policy(f"learned:{folder}", env.config, other)
    assert env.action_space(other).contains(policy.act(obs[other]))


def test_crafted_folder_with_trojan_pickles_loads_without_running_them(checkpoint, tmp_path):
    marker = tmp_path / "ran"
    plant_trojans(checkpoint / "learner_group" / "learner" / "rl_module" / ALLOCATOR, marker)
    plant_trojans(checkpoint, marker, names=("algorithm_state.pkl", "class_and_ctor_args.pkl"))
    env = commons_arena.parallel_env("standard")
    population = Population.default(env.config).with_agent(ALLOCATOR, f"learned:{checkpoint}")
    run_episode(env, population, seed=0)
    assert not marker.exists()
    # the trojan is live: unpickling it does write the marker
    pickle.loads((checkpoint / "algorithm_state.pkl").read_bytes())
    assert marker.exists()


def test_old_pickled_checkpoint_is_refused_with_the_conversion_command(tmp_path):
    marker = tmp_path / "ran"
    folder = tmp_path / "old"
    plant_trojans(folder / "learner_group" / "learner" / "rl_module" / ALLOCATOR, marker)
    (folder / SIDECAR).write_text(json.dumps({"env": "commons_arena_v0", "agent": ALLOCATOR, "scenario": "standard",
                                              "observation_shape": [166], "action_nvec": [3], "observation_scale": [1.0],
                                              "action_codec": None}))
    with pytest.raises(CheckpointError, match=r"old pickled checkpoint.*convert-checkpoint .*--i-trust-this-checkpoint"):
        make_policy(f"learned:{folder}", "standard", ALLOCATOR)
    assert not marker.exists()


def edit_sidecar(folder: Path, change) -> None:
    meta = json.loads((folder / SIDECAR).read_text())
    change(meta)
    (folder / SIDECAR).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["observation_scale"].__setitem__(0, float("nan")), "NaN is not a JSON number"),
        (lambda m: m["observation_scale"].__setitem__(0, -1.0), "observation_scale.0"),
        (lambda m: m["network"]["layers"].__setitem__(0, {"type": "linear", "in": 166, "out": 10**9}), "out"),
        (lambda m: m["network"]["layers"].__setitem__(1, {"type": "eval"}), "layers.1"),
        (lambda m: m["network"]["layers"].__setitem__(0, {"type": "linear", "in": 5, "out": 16}), "takes 5 inputs"),
        (lambda m: m["network"]["action_distribution"].__setitem__("nvec", [3]), "needs 3 logits"),
        (lambda m: m.__setitem__("format_version", 3), "format_version 3"),
        (lambda m: m.__setitem__("role", "god"), "role"),
        (lambda m: m.__setitem__("action_codec", {"name": "os.system", "params": {}}), "unknown action codec"),
        (lambda m: m["network"].__setitem__("weights_sha256", "0" * 64), "does not match the weights_sha256"),
        (lambda m: m.__setitem__("class", "ray.rllib.Module"), "class"),
    ],
)
def test_tampered_sidecar_is_refused_naming_the_problem(checkpoint, change, message):
    edit_sidecar(checkpoint, change)
    with pytest.raises(CheckpointError, match=message):
        LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)


def test_weights_file_that_is_a_pickle_is_refused_and_not_run(checkpoint, tmp_path):
    import hashlib

    marker = tmp_path / "ran"
    for payload in (pickle.dumps(Trojan(marker)), _torch_save_bytes(Trojan(marker), tmp_path)):
        (checkpoint / WEIGHTS).write_bytes(payload)
        edit_sidecar(checkpoint, lambda m, p=payload: m["network"].__setitem__("weights_sha256", hashlib.sha256(p).hexdigest()))
        with pytest.raises(CheckpointError, match="not a safetensors file"):
            LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)
    assert not marker.exists()


def _torch_save_bytes(obj, tmp_path: Path) -> bytes:
    path = tmp_path / "saved.pt"
    torch.save(obj, path)
    return path.read_bytes()


def test_weights_with_wrong_shapes_or_values_are_refused(checkpoint, tmp_path):
    import hashlib

    from safetensors.torch import load_file, save_file

    good = load_file(str(checkpoint / WEIGHTS))
    for name, bad, message in [
        ("layers.0.weight", torch.zeros(3, 3), "expected float32"),
        ("layers.0.bias", torch.full_like(good["layers.0.bias"], float("inf")), "NaN or infinite"),
        ("layers.0.bias", good["layers.0.bias"].double(), "expected float32"),
    ]:
        save_file({**good, name: bad}, str(checkpoint / WEIGHTS))
        digest = hashlib.sha256((checkpoint / WEIGHTS).read_bytes()).hexdigest()
        edit_sidecar(checkpoint, lambda m, d=digest: m["network"].__setitem__("weights_sha256", d))
        with pytest.raises(CheckpointError, match=message):
            load_network(checkpoint)


def test_checkpoint_that_does_not_fit_names_both(checkpoint, tmp_path):
    with pytest.raises(ValueError, match=r"trained as 'allocator' on scenario 'standard'.*scenario 'market_baseline'"):
        LearnedPolicy.load(checkpoint, "market_baseline", ALLOCATOR)
    shutil.rmtree(checkpoint)
    with pytest.raises(ValueError, match="not a commons_arena policy checkpoint"):
        LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)


def test_corrections_benchmark_reads_what_a_need_checkpoint_played(tmp_path):
    """experiments.evaluation.corrections: recording a need-codec checkpoint's corrections does not
    change its play, and the recorded mean at tick 0 is the module's own tick-0 correction."""
    from experiments.evaluation.corrections import CorrectionRecorder, mean_corrections
    from experiments.evaluation.engine import play, returns_of
    from policies.learned import ModuleInterface

    env = commons_arena.parallel_env("crisis")
    raw = env.observation_space(ALLOCATOR).shape[0]
    size = ModuleInterface(env.config, ALLOCATOR, np.ones(raw, np.float32), "need").input_size
    nvec = [int(n) for n in CODECS["need"](env.config).nvec]
    folder = tmp_path / "need"
    save_policy(folder, network_from_rl_module(rllib_module(size, nvec), nvec), env.config, ALLOCATOR,
                np.ones(raw, np.float32), "need")
    means = mean_corrections(folder, "crisis", range(2))
    assert len(means) > 1 and set(means) <= set(range(env.config.max_ticks + 1))
    policy = LearnedPolicy.load(folder, env.config, ALLOCATOR)
    policy.reset()
    obs, _ = env.reset(seed=0)
    policy.act(obs[ALLOCATOR])  # tick 0 looks the same in every episode
    np.testing.assert_array_equal(means[0], policy.codec.correction(policy.last_module_action))

    built = dict(Population.default(env.config).with_agent(ALLOCATOR, f"learned:{folder}").build(env.config, env=env))
    plain = run_episode(env, built, 5)[ALLOCATOR]["return"]
    watched = returns_of(play(env, built, [5], CorrectionRecorder(policy.codec)), ALLOCATOR)
    assert watched == [plain]  # an observer does not change the play
