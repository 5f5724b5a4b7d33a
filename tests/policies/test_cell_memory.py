"""The universal allocator's memory of declarations (``cells_v2``, policies/universal.py): every memory feature
against a plain reference computed tick by tick, the same bit for bit per arena and batched over real episodes
whose arenas restart at different times, forgotten at an episode's start; a ``cells_v2`` checkpoint saved, loaded
and played per arena and batched alike; ``cells_v1`` checkpoints as before; a version that does not match refused
(docs/training.md, "Memory of declarations")."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.family import generate_scenarios
from commons_arena.scenario import ScenarioConfig
from experiments.training.networks import NETWORKS, check_warm_start
from policies.batch_learned import BatchLearned
from policies.checkpoint_format import SIDECAR, CheckpointError, NetworkSpec, PolicyNetwork, Universal
from policies.focal import FocalEnv
from policies.learned import LearnedPolicy, read_sidecar, save_universal_policy
from policies.registry import batch_policy
from policies.universal import (
    CELL_VIEWS,
    CELLS,
    FEATURE_NAMES,
    MAX_TEAMS,
    MAX_TIERS,
    MEMORY_FEATURES,
    BatchUniversalInterface,
    CellNetwork,
    UniversalInterface,
    cell_view,
    split_view,
)
from tests.policies.batch_cases import assert_equivalent, record_episodes
from tests.policies.test_universal import SHAPES

V1, V2 = CELL_VIEWS["cells_v1"], CELL_VIEWS["cells_v2"]


def cell_network(features: str, seed: int = 0, hidden: int = 16) -> PolicyNetwork:
    """A per-cell network of ``features`` with random weights, the memory inputs' weights large enough that they
    change its greedy codes."""
    n = cell_view(features).n_features
    gen = torch.Generator().manual_seed(seed)
    layers = [{"type": "linear", "in": n, "out": hidden}, {"type": "tanh"}, {"type": "linear", "in": hidden, "out": 5}]
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": [5]}})
    weight = torch.randn(hidden, n, generator=gen)
    weight[:, V1.n_features:] *= 5.0
    return PolicyNetwork(spec, {"layers.0.weight": weight, "layers.0.bias": torch.randn(hidden, generator=gen),
                                "layers.2.weight": torch.randn(5, hidden, generator=gen),
                                "layers.2.bias": torch.randn(5, generator=gen)})


def memory_of(view: np.ndarray, config: ScenarioConfig) -> np.ndarray:
    """The memory features (teams x tiers x 8) of the real cells of a cells_v2 view."""
    cells = split_view(view)[0].reshape(MAX_TEAMS, MAX_TIERS, V2.n_features)
    return cells[: len(config.teams), : len(config.gpu_tiers), V1.n_features:]


def test_the_versions_are_the_sidecars_and_v2_is_v1_then_the_memory():
    assert typing.get_args(Universal.model_fields["features"].annotation) == tuple(CELL_VIEWS)
    assert V1.feature_names == FEATURE_NAMES and V2.feature_names == FEATURE_NAMES + MEMORY_FEATURES
    assert len(set(V2.feature_names)) == V2.n_features == V1.n_features + 8
    assert not V1.memory and V2.memory and V1.obs_size == CELLS * (V1.n_features + 1)
    with pytest.raises(CheckpointError, match=r"cell features 'cells_v3' are not ones.*\(cells_v1, cells_v2\)"):
        cell_view("cells_v3")


class Reference:
    """The memory features of one arena, computed the plain way: lists of every tick seen, then the formulas of
    MEMORY_FEATURES cell by cell (the spec DeclarationMemory's arrays must meet)."""

    def __init__(self, config: ScenarioConfig) -> None:
        from commons_arena.spaces import observation_layout

        self.layout = observation_layout(config, ALLOCATOR)
        self.N, self.T = len(config.teams), len(config.gpu_tiers)
        interface = UniversalInterface(config)
        self.cap = interface.batched.encoder.capacity
        self.ticks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # declared, revealed, need, grant

    def _seen(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = {f: np.asarray(obs, np.float64)[self.layout.slices[f]] for f in ("declared", "revealed", "revealed_need")}
        return (v["declared"].reshape(self.N, self.T), v["revealed"] > 0.5,
                v["revealed_need"].reshape(self.N, self.T))

    def record(self, obs: np.ndarray, action: np.ndarray) -> None:
        self.ticks.append((*self._seen(obs), np.asarray(action, np.float64)[self.T:].reshape(self.N, self.T)))

    def features(self, obs: np.ndarray) -> np.ndarray:
        declared, revealed, need = self._seen(obs)
        past = self.ticks
        seen = [(d, r, n) for d, r, n, _ in past] + [(declared, revealed, need)]
        out = np.zeros((self.N, self.T, 8))
        for i in range(self.N):
            shown = [(d[i], n[i]) for d, r, n in seen if r[i]]
            given = sum(g[i].sum() for *_, g in past)
            asked = sum(d[i].sum() for d, *_ in past)
            asked_revealed, needed = sum(d.sum() for d, _ in shown), sum(n.sum() for _, n in shown)
            team = [given / asked if asked > 0 else 0.0, len(shown) / len(seen),
                    asked_revealed / needed if needed > 0 else 0.0]
            for t in range(self.T):
                cap = self.cap[t]
                out[i, t] = [
                    np.mean([d[i, t] for d, *_ in seen]) / cap,
                    (np.mean([g[i, t] for *_, g in past]) if past else 0.0) / cap,
                    (past[-1][3][i, t] if past else 0.0) / cap,
                    (declared[i, t] - past[-1][0][i, t] if past else 0.0) / cap,
                    (np.mean([d[t] - n[t] for d, n in shown]) if shown else 0.0) / cap,
                    *team,
                ]
        return np.clip(out, -10.0, 10.0)


def _scenarios() -> dict[str, ScenarioConfig]:
    return {"crisis": commons_arena.load_scenario("crisis"), "broad": generate_scenarios("broad", 6, seed=9)[-1],
            "octet_four_tiers": SHAPES["octet_four_tiers"], "duo_one_tier_hard": SHAPES["duo_one_tier_hard"]}


SCENARIOS = _scenarios()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_memory_is_the_reference_and_the_same_per_arena_and_batched_over_real_episodes(name):
    """Arenas of real episodes (the scenario's background inside, random corrections so grants vary), each
    restarting when its episode ends or, at random, mid-episode: every view and action of the batched interface
    is the per-arena interface's bit for bit, and its memory the plain reference's."""
    config, arenas = SCENARIOS[name], 3
    rng = np.random.default_rng(0)
    envs = [FocalEnv.from_scenario(config, [ALLOCATOR]) for _ in range(arenas)]
    ones = [UniversalInterface(config, features="cells_v2") for _ in range(arenas)]
    batch = BatchUniversalInterface(config, features="cells_v2", num_envs=arenas)
    references = [Reference(config) for _ in range(arenas)]
    seeds = iter(range(100, 10_000))
    obs = [env.reset(seed=next(seeds))[0][ALLOCATOR] for env in envs]
    for one in ones:
        one.reset()
    batch.reset(np.arange(arenas))
    restarts = revealed = 0
    for _ in range(60):
        rows = np.stack(obs)
        views = batch.observe(rows)
        for i in range(arenas):
            np.testing.assert_array_equal(views[i], ones[i].observe(obs[i]))
            np.testing.assert_allclose(memory_of(views[i], config), references[i].features(obs[i]), rtol=1e-6,
                                       atol=1e-6)
        revealed += int(np.abs(np.stack([memory_of(v, config)[..., 4] for v in views])).sum() > 0)
        codes = rng.integers(0, 5, size=(arenas, CELLS))
        actions = batch.act(rows, codes)
        for i in range(arenas):
            np.testing.assert_array_equal(actions[i], ones[i].act(obs[i], codes[i]))
            references[i].record(obs[i], actions[i])
            step, *_ = envs[i].step({ALLOCATOR: actions[i]})
            if not envs[i].agents or rng.random() < 0.05:  # ended, or restarted early: this arena alone
                step, _ = envs[i].reset(seed=next(seeds))
                ones[i].reset()
                batch.reset(np.array([i]))
                references[i] = Reference(config)
                restarts += 1
            obs[i] = step[ALLOCATOR]
    assert restarts >= 2
    if name == "crisis":
        assert revealed  # a team was revealed: the overclaim was computed where the truth is known


def test_memory_starts_empty_at_every_episode_and_a_batch_forgets_only_the_arenas_reset():
    config = SCENARIOS["crisis"]
    episode = record_episodes(config, episodes=1, seed=4)[ALLOCATOR][0]
    interface = UniversalInterface(config, features="cells_v2")
    interface.reset()
    first = interface.observe(episode[0])
    empty = memory_of(first, config)
    declared = split_view(first)[0].reshape(MAX_TEAMS, MAX_TIERS, -1)[: len(config.teams), : len(config.gpu_tiers),
                                                                       FEATURE_NAMES.index("declared")]
    np.testing.assert_array_equal(empty[..., 0], declared)  # the mean of one declaration is the declaration
    assert not empty[..., [1, 2, 3, 5]].any()  # no grant yet, no change since a last tick
    for obs in episode[:-1]:
        interface.observe(obs)
        interface.act(obs, np.full(CELLS, 3))  # raise every cell: grants the memory remembers
    assert memory_of(interface.observe(episode[-1]), config)[..., 1].any()
    interface.reset()
    np.testing.assert_array_equal(interface.observe(episode[0]), first)  # forgotten: the first tick's view again

    batch = BatchUniversalInterface(config, features="cells_v2", num_envs=3)
    batch.reset(np.arange(3))
    rows = np.stack([episode[0]] * 3)
    for _ in range(3):
        batch.observe(rows)
        batch.act(rows, np.full((3, CELLS), 3))
    before = batch.observe(rows)
    batch.reset(np.array([1]))
    after = batch.observe(rows)
    np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
    np.testing.assert_array_equal(after[1], first)


def test_a_v1_interface_keeps_no_memory_and_sees_what_it_saw():
    config = SCENARIOS["crisis"]
    episode = record_episodes(config, episodes=1, seed=4)[ALLOCATOR][0]
    v1, v2 = UniversalInterface(config), UniversalInterface(config, features="cells_v2")
    assert v1.batched.memory is None and v1.input_size == V1.obs_size and v2.input_size == V2.obs_size
    v1.reset(), v2.reset()
    for obs in episode:
        cells1, mask1 = split_view(v1.observe(obs))
        cells2, mask2 = split_view(v2.observe(obs))
        np.testing.assert_array_equal(cells2[:, : V1.n_features], cells1)  # v2 = v1, then the memory
        np.testing.assert_array_equal(mask1, mask2)
        code = np.full(CELLS, 1)
        np.testing.assert_array_equal(v1.act(obs, code), v2.act(obs, code))


@pytest.fixture
def v2_checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "v2"
    save_universal_policy(folder, cell_network("cells_v2", seed=3), "split:test", "", features="cells_v2")
    return folder


@pytest.mark.parametrize("name", ["crisis", "broad"])
def test_a_v2_checkpoint_plays_through_learned_per_arena_and_batched_alike(v2_checkpoint, name):
    config = SCENARIOS[name]
    meta = read_sidecar(v2_checkpoint)
    assert meta["universal"] == V2.fields() and meta["input_size"] == V2.n_features
    assert meta["observation_shape"] == [V2.obs_size]
    policy = LearnedPolicy.load(v2_checkpoint, config, ALLOCATOR)
    assert policy.interface.batched.view is V2
    spec = f"learned:{v2_checkpoint}"
    assert isinstance(batch_policy(spec, config, ALLOCATOR, 2), BatchLearned)
    episodes = record_episodes(config, episodes=4, seed=5)[ALLOCATOR]
    assert assert_equivalent(spec, config, ALLOCATOR, episodes, num_envs=4, seed=2) > 20


def test_the_memory_changes_what_a_v2_checkpoint_plays(v2_checkpoint):
    """Its memory inputs are read: the same ticks played with memory forgotten every tick give other codes."""
    config = SCENARIOS["crisis"]
    episode = record_episodes(config, episodes=1, seed=6)[ALLOCATOR][0]
    remembering, forgetting = (LearnedPolicy.load(v2_checkpoint, config, ALLOCATOR) for _ in range(2))
    remembering.reset()
    differ = 0
    for obs in episode:
        forgetting.reset()
        differ += int(not np.array_equal(remembering.act(obs), forgetting.act(obs)))
    assert differ > 0


def test_v1_checkpoints_load_as_before(tmp_path):
    save_universal_policy(tmp_path, cell_network("cells_v1"), "split:test", "")
    assert read_sidecar(tmp_path)["universal"] == V1.fields()
    for checkpoint in (tmp_path, Path(commons_arena.__file__).parents[1] / "checkpoints" / "universal"):
        policy = LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)
        assert policy.interface.batched.view is V1 and policy.interface.batched.memory is None


@pytest.mark.parametrize(("features", "cell_features", "network", "error"), [
    ("cells_v2", 59, "cells_v1", r"its universal view .*'cells_v2'.* is not this commons_arena's"),
    ("cells_v1", 67, "cells_v2", r"its universal view .*'cells_v1'.* is not this commons_arena's"),
    ("cells_v3", 67, "cells_v2", r"universal.features: Input should be 'cells_v1' or 'cells_v2' \(got 'cells_v3'\)"),
])
def test_a_version_that_does_not_match_the_features_is_refused(tmp_path, features, cell_features, network, error):
    """A sidecar whose version is not what its network reads (edited, or written by another commons_arena)."""
    save_universal_policy(tmp_path, cell_network(network), "split:test", "", features=network)
    path = tmp_path / SIDECAR
    meta = json.loads(path.read_text())
    meta["universal"] = {**meta["universal"], "features": features, "cell_features": cell_features}
    path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=error):
        LearnedPolicy.load(tmp_path, "standard", ALLOCATOR)


def test_a_cell_network_of_one_version_refuses_the_others_weights():
    with pytest.raises(CheckpointError, match="of cells_v1 takes 59 features.*this one takes 67"):
        CellNetwork(cell_network("cells_v2"), zero=2)
    with pytest.raises(CheckpointError, match="of cells_v2 takes 67 features.*this one takes 59"):
        CellNetwork(cell_network("cells_v1"), zero=2, features="cells_v2")


def test_a_v1_checkpoint_starts_a_v2_run_and_not_the_reverse(tmp_path, v2_checkpoint):
    stages = [commons_arena.load_scenario("standard")]
    save_universal_policy(tmp_path / "v1", cell_network("cells_v1"), "split:test", "")
    v2 = NETWORKS["cells"].with_features("cells_v2")
    check_warm_start(f"learned:{tmp_path / 'v1'}", stages, "need", 1, [16], v2)  # widened: new inputs at weight 0
    check_warm_start(f"learned:{v2_checkpoint}", stages, "need", 1, [16], v2)
    with pytest.raises(ValueError, match=r"reads cell features cells_v2, which the run's cells_v1 do not extend "
                                         r"\(pass --cell-features v2\)"):
        check_warm_start(f"learned:{v2_checkpoint}", stages, "need", 1, [16], NETWORKS["cells"])
