"""Codecs for teams (``bluff``, ``bluff_per_tier``) and the broker (``markup``) (issue 17):
what they express, that the scripted policies are fixed codes of them, that decoded actions
are in the space and never repaired, the role-aware registry, and that ``learned:`` decodes
them from a checkpoint's sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, Stance
from commons_arena.spaces import observation_layout
from policies import Population
from policies.checkpoint_format import SIDECAR, CheckpointError, NetworkSpec, PolicyNetwork
from policies.codecs import (
    CODECS,
    DEFAULT_CODECS,
    BluffTeamCodec,
    CodedPolicy,
    MarkupBrokerCodec,
    PerTierBluffTeamCodec,
    codecs_for_role,
    make_codec,
)
from policies.focal import policy_seed
from policies.learned import LearnedPolicy, ModuleInterface, read_sidecar, save_policy
from policies.registry import make_policy
from tests.policies.test_policies import team_obs
from tests.sweeps import swept

ARCHETYPES = ("truthful", "safety_first", "reliability", "growth", "greedy_bluffer")


def shadow_play(scenario: str, seat: str, shadows: dict, seeds=(0, 1)) -> int:
    """Play the scenario's default population; on every tick, each ``shadows`` policy pair
    (scripted, coded) acts on ``seat``'s observation and must agree. Returns ticks compared."""
    env = commons_arena.parallel_env(scenario)
    background = Population.default(env.config).build(env.config, env=env)
    index = env.possible_agents.index(seat)
    compared = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for i, agent in enumerate(env.possible_agents):
            background[agent].reset(policy_seed(seed, i))
        for scripted, coded in shadows.values():
            scripted.reset(policy_seed(seed, index))
            coded.reset(policy_seed(seed, index))
        while env.agents:
            for name, (scripted, coded) in shadows.items():
                mine, theirs = coded.act(obs[seat]), scripted.act(obs[seat])
                assert mine.tolist() == theirs.tolist(), (name, seed, mine, theirs)
                compared += 1
            obs, *_ = env.step({a: background[a].act(obs[a]) for a in env.agents})
    return compared


@pytest.mark.parametrize("scenario", ["standard", "crisis"])
def test_every_team_archetype_is_one_fixed_code_of_both_team_codecs(scenario):
    config = commons_arena.load_scenario(scenario)
    shadows = {
        f"{name}/{archetype}": (make_policy(archetype, config, "search"),
                                CodedPolicy(codec, codec.archetype_code(archetype)))
        for name in ("bluff", "bluff_per_tier") for archetype in ARCHETYPES
        for codec in [make_codec(name, config, "search")]
    }
    assert shadow_play(scenario, "search", shadows) > 10 * len(shadows)


@pytest.mark.parametrize("scenario", swept(["standard", "crisis", "market_baseline"]))
def test_both_scripted_brokers_are_fixed_markup_codes(scenario):
    config = commons_arena.load_scenario(scenario)
    codec = MarkupBrokerCodec(config)
    shadows = {
        "demand_priced": (make_policy("demand_priced", config, BROKER), CodedPolicy(codec, codec.zero_code)),
        "fixed_price": (make_policy("fixed_price", config, BROKER),
                        CodedPolicy(MarkupBrokerCodec(config), codec.code(1.5, 0, 0))),
        "demand_priced(gain=2,crisis=2)": (make_policy("demand_priced", config, BROKER, demand_gain=2, crisis_levels=2),
                                           CodedPolicy(MarkupBrokerCodec(config), codec.code(1.2, 2, 2))),
    }
    assert shadow_play(scenario, BROKER, shadows) > 0


def test_zero_codes_are_truthful_and_demand_priced():
    config = commons_arena.load_scenario("standard")
    for cls in (BluffTeamCodec, PerTierBluffTeamCodec):
        codec = cls(config, "robotics")
        assert codec.zero_code.tolist() == codec.archetype_code("truthful").tolist()
        assert codec.describe(codec.zero_code).startswith("x1")
        assert codec.describe(codec.zero_code).endswith("escalate_2")
    broker = MarkupBrokerCodec(config)
    assert broker.describe(broker.zero_code) == "margin 1.2/1.2/1.2, slope 3, crisis +1, supply 1"


def team_observation(config, **fields) -> np.ndarray:
    return team_obs(config, "search", **fields)


def test_team_codec_declares_factors_of_its_true_need_and_follows_the_stance_rule():
    config = commons_arena.load_scenario("standard")  # tiers: small 4+2, medium 3+2, large 1+1
    one, per_tier = BluffTeamCodec(config, "search"), PerTierBluffTeamCodec(config, "search")
    F, rules = one.FACTORS, [r.name for r in one.STANCE_RULES]
    obs = team_observation(config, need=[2, 1, 0])
    assert one.decode(obs, [F.index(1.5), rules.index("accept")]).tolist() == [3, 2, 0, Stance.ACCEPT]
    assert one.decode(obs, [F.index(0.5), rules.index("accept")]).tolist() == [1, 1, 0, Stance.ACCEPT]
    assert one.decode(obs, [F.index(3.0), rules.index("accept")]).tolist() == [6, 3, 0, Stance.ACCEPT]
    code = [F.index(0.5), F.index(3.0), F.index(2.0), rules.index("accept")]
    assert per_tier.decode(team_observation(config, need=[2, 1, 1]), code).tolist() == [1, 3, 2, Stance.ACCEPT]
    big = team_observation(config, need=[5, 4, 2])
    assert one.decode(big, [F.index(3.0), 0])[:3].tolist() == [6, 5, 2]  # cut to owned + spot per tier

    def stance_of(rule: str, streak: int, grant, declared_before) -> int:
        codec = BluffTeamCodec(config, "search")
        codec.decode(team_observation(config, declared=declared_before), [F.index(1.0), rules.index(rule)])
        later = team_observation(config, need=[1, 0, 0], starved_streak=streak, last_grant=grant)
        return int(codec.decode(later, [F.index(1.0), rules.index(rule)])[-1])

    short, full = [0, 0, 0], [2, 0, 0]
    assert stance_of("accept", 3, short, [2, 0, 0]) == Stance.ACCEPT
    assert stance_of("counter", 3, short, [2, 0, 0]) == Stance.COUNTER
    assert stance_of("counter", 3, full, [2, 0, 0]) == Stance.ACCEPT
    assert stance_of("escalate_2", 1, short, [2, 0, 0]) == Stance.COUNTER
    assert stance_of("escalate_2", 2, short, [2, 0, 0]) == Stance.ESCALATE
    assert stance_of("escalate_3", 2, short, [2, 0, 0]) == Stance.COUNTER
    assert stance_of("escalate", 0, full, [2, 0, 0]) == Stance.ESCALATE


def test_team_codec_features_say_what_was_granted_against_declared_and_needed():
    config = commons_arena.load_scenario("standard")
    codec = BluffTeamCodec(config, "search")
    ceiling = np.array([6, 5, 2])
    first = team_observation(config, need=[3, 1, 0], declared=[4, 2, 0])
    assert codec.features(first).tolist() == [0.0] * 6 + [1.0]  # nothing answered yet
    codec.decode(first, codec.zero_code)
    second = team_observation(config, need=[1, 1, 0], last_grant=[2, 2, 0])
    features = codec.features(second)
    assert features.shape == (codec.n_features,) == (7,)
    np.testing.assert_allclose(features[:3], (np.array([4, 2, 0]) - [2, 2, 0]) / ceiling)
    np.testing.assert_allclose(features[3:6], (np.array([3, 1, 0]) - [2, 2, 0]) / ceiling)
    assert features[6] == pytest.approx(4 / 6)  # granted 4 of the 6 declared
    codec.reset()
    assert codec.features(second).tolist() == [0.0] * 6 + [1.0]


def test_markup_codec_prices_relative_to_cost_demand_and_crisis():
    config = commons_arena.load_scenario("standard")  # unit cost 1/2/4, max price 6/10/16, 11 levels
    codec = MarkupBrokerCodec(config)
    layout = observation_layout(config, BROKER)
    T = len(config.gpu_tiers)

    def decode(code, demand, crisis=0.0, inventory=(2, 2, 1)):
        obs = np.zeros(layout.size, dtype=np.float32)
        view = layout.view(obs)
        view["inventory"][...], view["demand"][...], view["crisis"][...] = inventory, demand, crisis
        action = codec.decode(obs, code)
        return action[:T].tolist(), action[T:].tolist()

    flat = codec.code(1.0, 0, 0)
    assert decode(flat, [0, 0, 0]) == decode(flat, [20, 20, 20]) == ([2, 2, 1], [2, 2, 3])  # covers unit cost
    assert decode(codec.code(3.0, 0, 0), [0, 0, 0])[1] == [5, 6, 8]  # 3 x unit cost
    steep = codec.code(1.0, 5, 0)
    levels = [decode(steep, [d, d, d])[1] for d in range(0, 14)]
    assert (np.diff(np.array(levels), axis=0) >= 0).all()  # never falls as demand rises
    assert levels[-1] == [10, 10, 10] and levels[-1] != levels[0]  # cut at the top of the grid
    assert decode(codec.code(1.0, 0, 3), [0, 0, 0], crisis=1.0)[1] == [5, 5, 6]
    half, none = codec.code(1.0, 0, 0, 0.5), codec.code(1.0, 0, 0, 0.0)
    assert decode(half, [0, 0, 0])[0] == [1, 1, 1] and decode(none, [0, 0, 0])[0] == [0, 0, 0]
    assert decode(half, [0, 0, 0], inventory=(1, 0, 0))[0] == [1, 0, 0]
    assert codec.features(np.zeros(layout.size, dtype=np.float32)).shape == (codec.n_features,) == (T,)
    with pytest.raises(ValueError, match="codec 'markup' has no slope 4; slopes: \\[0, 1, 2, 3, 5\\]"):
        codec.code(1.2, 4, 1)


@pytest.mark.parametrize("scenario", swept(["crisis", "market_baseline"]))
def test_random_codes_decode_in_space_and_are_never_repaired(scenario):
    env = commons_arena.parallel_env(scenario)
    background = Population.default(env.config).build(env.config, env=env)
    coded = {BROKER: MarkupBrokerCodec(env.config)}
    for i, team in enumerate(env.config.team_names):
        coded[team] = (BluffTeamCodec if i % 2 else PerTierBluffTeamCodec)(env.config, team)
    rng = np.random.default_rng(0)
    ticks = 0
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        for agent in env.possible_agents:
            background[agent].reset(seed)
        for codec in coded.values():
            codec.reset()
        while env.agents:
            actions = {a: background[a].act(obs[a]) for a in env.agents}
            for agent, codec in coded.items():
                assert codec.features(obs[agent]).shape == (codec.n_features,)
                actions[agent] = codec.decode(obs[agent], rng.integers(0, codec.nvec))
                assert env.action_space(agent).contains(actions[agent]), (agent, actions[agent])
            obs, *_ = env.step(actions)
            assert env.unwrapped.last_tick.repairs.offer_over_inventory == 0
            ticks += 1
    assert ticks > 20


def test_codec_registry_is_role_aware():
    config = commons_arena.load_scenario("standard")
    assert codecs_for_role("allocator") == ["relative", "absolute", "residual", "need", "need_fair", "need_impartial",
                                              "need_thrifty"]
    assert codecs_for_role("team") == ["bluff", "bluff_per_tier"]
    assert codecs_for_role("broker") == ["markup"]
    assert sum(len(codecs_for_role(r)) for r in ("allocator", "team", "broker")) == len(CODECS)
    assert all(DEFAULT_CODECS[role] in codecs_for_role(role) for role in ("allocator", "team", "broker"))
    with pytest.raises(ValueError, match="unknown role 'judge'"):
        codecs_for_role("judge")
    with pytest.raises(ValueError, match="action codec 'need' drives allocator seats, but 'search' of scenario "
                                         "'standard' plays the team role; codecs for team seats: bluff, bluff_per_tier"):
        make_codec("need", config, "search")
    with pytest.raises(ValueError, match="action codec 'bluff' drives team seats, but 'broker' .* codecs for broker "
                                         "seats: markup \\(or none: raw actions\\)"):
        make_codec("bluff", config, BROKER)
    with pytest.raises(ValueError, match="action codec 'markup' drives broker seats, but 'allocator'"):
        make_codec("markup", config)
    with pytest.raises(ValueError, match="unknown action codec 'truthful'; codecs for team seats: bluff"):
        make_codec("truthful", config, "safety")
    with pytest.raises(ValueError, match="code \\[9, 0\\] is not in codec 'bluff'"):
        CodedPolicy(make_codec("bluff", config, "safety"), np.array([9, 0]))


def test_module_interface_with_team_and_broker_codecs():
    config = commons_arena.load_scenario("standard")
    T = len(config.gpu_tiers)
    for agent, name, extra in (("search", "bluff", 2 * T + 1), (BROKER, "markup", T)):
        size = observation_layout(config, agent).size
        interface = ModuleInterface(config, agent, np.ones(size, np.float32), name, history=2)
        assert interface.batched.frame_size == size + extra
        assert interface.input_size == 2 * (size + extra)
        assert interface.action_space().nvec.tolist() == interface.codec.nvec.tolist()


def save_untrained(folder: Path, config, agent: str, codec: str | None, hidden: int = 16) -> Path:
    """A network with random weights for ``agent`` behind ``codec``, saved the way training saves (the
    network as an RLlib module exports it: tests/policies/test_checkpoint_format.py; here no RLlib)."""
    import torch

    size = observation_layout(config, agent).size
    interface = ModuleInterface(config, agent, np.ones(size, np.float32), codec)
    nvec = [int(n) for n in interface.action_space().nvec]
    layers = [{"type": "linear", "in": interface.input_size, "out": hidden}, {"type": "tanh"},
              {"type": "linear", "in": hidden, "out": sum(nvec)}]
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": nvec}})
    gen = torch.Generator().manual_seed(0)
    tensors = {"layers.0.weight": torch.randn(hidden, interface.input_size, generator=gen),
               "layers.0.bias": torch.randn(hidden, generator=gen),
               "layers.2.weight": torch.randn(sum(nvec), hidden, generator=gen),
               "layers.2.bias": torch.randn(sum(nvec), generator=gen)}
    save_policy(folder, PolicyNetwork(spec, tensors), config, agent, np.ones(size, np.float32), codec)
    return folder


def test_learned_team_and_broker_checkpoints_decode_through_their_codecs(tmp_path):
    pytest.importorskip("torch")
    env = commons_arena.parallel_env("crisis")
    config = env.config
    team_dir = save_untrained(tmp_path / "team", config, "search", "bluff")
    broker_dir = save_untrained(tmp_path / "broker", config, BROKER, "markup")
    assert read_sidecar(team_dir)["action_codec"] == {"name": "bluff", "params": {}}
    assert read_sidecar(team_dir)["role"] == "team"
    assert read_sidecar(broker_dir)["action_codec"] == {"name": "markup", "params": {}}

    population = (Population.default(config).with_agent("search", f"learned:{team_dir}")
                  .with_agent(BROKER, f"learned:{broker_dir}").with_agent(ALLOCATOR, "proportional"))
    policies = population.build(config, env=env)
    team, broker = policies["search"], policies[BROKER]
    assert isinstance(team, LearnedPolicy) and isinstance(team.codec, BluffTeamCodec)
    assert isinstance(broker, LearnedPolicy) and isinstance(broker.codec, MarkupBrokerCodec)
    obs, _ = env.reset(seed=3)
    for agent, policy in policies.items():
        policy.reset(policy_seed(3, env.possible_agents.index(agent)))
    ticks = 0
    while env.agents:
        actions = {a: policies[a].act(obs[a]) for a in env.agents}
        for agent, policy in (("search", team), (BROKER, broker)):
            assert env.action_space(agent).contains(actions[agent])
            module_action = policy.last_module_action
            assert module_action is not None and ((0 <= module_action) & (module_action < policy.codec.nvec)).all()
        factor = team.codec.FACTORS[int(team.last_module_action[0])]
        need = obs["search"][team.codec.obs.slices["need"]]
        expected = np.minimum(np.ceil(need * factor - 1e-6), env.action_space("search").nvec[:-1] - 1)
        assert actions["search"][:-1].tolist() == expected.astype(int).tolist()
        obs, *_ = env.step(actions)
        assert env.unwrapped.last_tick.repairs.offer_over_inventory == 0
        ticks += 1
    assert ticks > 3


def test_a_sidecar_naming_another_roles_codec_is_refused(tmp_path):
    pytest.importorskip("torch")
    config = commons_arena.load_scenario("standard")
    folder = save_untrained(tmp_path / "team", config, "search", "bluff")
    for wrong, message in (("need", "drives allocator seats.*codecs for team seats: bluff, bluff_per_tier"),
                           ("markup", "drives broker seats.*codecs for team seats: bluff, bluff_per_tier")):
        sidecar = json.loads((folder / SIDECAR).read_text())
        sidecar["action_codec"]["name"] = wrong
        (folder / SIDECAR).write_text(json.dumps(sidecar))
        with pytest.raises(CheckpointError, match=f"checkpoint {folder}: action codec '{wrong}' {message}"):
            LearnedPolicy.load(folder, config, "search")
        with pytest.raises(ValueError, match=f"action codec '{wrong}'"):
            Population(agents={"search": f"learned:{folder}"}).build(config)
    with pytest.raises(CheckpointError, match="action codec 'bluff' drives team seats, but 'allocator'"):
        save_untrained(tmp_path / "alloc", config, ALLOCATOR, "bluff")
    assert not (tmp_path / "alloc" / SIDECAR).exists()


def test_fixed_codes_reproduction_table_shows_no_difference():
    from experiments.evaluation.fixed_codes import reproduction

    rows = reproduction(["standard"], ["proportional"], range(2))
    assert {r["scripted"] for r in rows} == {*ARCHETYPES, "demand_priced", "fixed_price"}
    assert all(r["diff"] == 0.0 and r["diff_ci95"] == 0.0 for r in rows)
