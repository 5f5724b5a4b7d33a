"""Scenario families (commons_arena.family): the family file, the generator, the TOML writer,
the splits and their guard, and ``commons-arena scenarios generate``."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commons_arena
from commons_arena import family as fam_mod
from commons_arena.family import (
    FamilyConfig,
    FamilyError,
    generate_scenarios,
    heldout_hashes,
    list_splits,
    load_family,
    load_split,
    refuse_heldout,
    regenerate_split,
    scenario_to_toml,
    split_file,
)
from commons_arena.scenario import scenario_from_dict
from policies.base import uniform_random_policies
from policies.focal import run_episode
from policies.population import Population
from tests.commands.test_cli_errors import assert_one_line_error, run_cli

SHIPPED = [
    "cost_pressure", "crisis", "deadline_crunch", "elevated", "job_mix", "market_baseline", "policy_shift",
    "price_shock", "reserve_large_gpu", "standard", "tight_capacity", "wait_for_capacity",
]  # fmt: skip


FAMILY_FILE = Path(fam_mod.__file__).parents[1] / "scenarios" / "families" / "broad.toml"


@pytest.fixture(scope="module")
def broad() -> FamilyConfig:
    return load_family("broad")


@pytest.fixture(scope="module")
def many(broad) -> tuple:
    return generate_scenarios(broad, 300, 7)


def family_dict(broad: FamilyConfig) -> dict:
    return broad.model_dump(mode="json")


# ------------------------------------------------------------------ the generator


def test_shipped_scenarios_are_unchanged_by_the_family_folders():
    assert commons_arena.list_scenarios() == SHIPPED  # families/ and splits/ are not scenarios


def play_both_ways(config, seed: int) -> None:
    env = commons_arena.parallel_env(config)
    for background in (uniform_random_policies(env, env.possible_agents), Population.default(config)):
        totals = run_episode(env, background, seed=seed)
        assert set(totals) == set(env.possible_agents)
        assert all(abs(t["return"]) < float("inf") for t in totals.values())


def check_scenarios(configs) -> None:
    for i, config in enumerate(configs):
        text = scenario_to_toml(config)
        back = scenario_from_dict(tomllib.loads(text), source=config.name)
        assert back.content_hash == config.content_hash and back == config
        play_both_ways(config, seed=i)


def test_generated_scenarios_validate_round_trip_and_play(many):
    check_scenarios(many[:25])


@pytest.mark.slow  # 300 generated scenarios x 2 episodes
def test_many_generated_scenarios_play(many):  # slow: 300 scenarios x 2 episodes
    check_scenarios(many)


def test_the_family_reaches_its_extremes(many):
    teams = Counter(len(c.teams) for c in many)
    tiers = Counter(len(c.gpu_tiers) for c in many)
    ticks = {c.max_ticks for c in many}
    assert {2, 8} <= set(teams) and {1, 4} <= set(tiers), (teams, tiers)
    assert {8, 24} <= ticks
    assert {c.carbon.mode for c in many} == {"hard", "soft"}
    assert any(c.budget == 0.0 for c in many) and any(c.budget > 0 for c in many)
    assert any(all(t.spot_inventory == 0 for t in c.gpu_tiers) for c in many)  # an empty spot market
    assert any(not c.shocks for c in many) and any(len(c.shocks) >= 4 for c in many)
    archetypes = {t.archetype for c in many for t in c.teams}
    assert archetypes == set(load_family("broad").archetypes)
    # all at once, as in issue 28's second cluster: one tier, a hard cap, an empty spot market and no budget
    assert any(len(c.gpu_tiers) == 1 and c.carbon.mode == "hard" and c.budget == 0.0
               and c.gpu_tiers[0].spot_inventory == 0 for c in many)


def test_generation_is_deterministic_and_index_i_ignores_count(broad):
    a = [c.content_hash for c in generate_scenarios(broad, 12, 5)]
    assert a == [c.content_hash for c in generate_scenarios("broad", 12, 5)]
    assert [c.content_hash for c in generate_scenarios(broad, 4, 5)] == a[:4]
    assert set(a).isdisjoint(c.content_hash for c in generate_scenarios(broad, 12, 6))
    assert len(set(a)) == len(a)
    first = generate_scenarios(broad, 1, 5)[0]
    assert first.name == "broad_5_0" and "family 'broad'" in first.description and "seed 5, index 0" in first.description
    assert generate_scenarios(broad, 0, 5) == ()


def test_every_shipped_scenario_round_trips_through_the_writer():
    for name in SHIPPED:
        config = commons_arena.load_scenario(name)
        assert scenario_from_dict(tomllib.loads(scenario_to_toml(config))).content_hash == config.content_hash


# ------------------------------------------------------------------ the family file


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(colour="red"), "colour: Extra inputs are not permitted"),
        (lambda d: d.update(teams=[5, 3]), "teams range [5, 3] has lo > hi"),
        (lambda d: d.update(teams=[1, 3]), "teams.0: Input should be greater than or equal to 2"),
        (lambda d: d.update(teams=[2, 9]), "teams.1: Input should be less than or equal to 8"),
        (lambda d: d.update(archetypes=["bully"]), "archetypes.0: Input should be"),
        (lambda d: d["tier"].update(memory_gb=[16.0, 40.0]), "tier.memory_gb has 2 choices but up to 4 tiers"),
        (lambda d: d["tier"].update(owned=[0, 3]), "tier.owned.0: Input should be greater than or equal to 1"),
        (lambda d: d["carbon"].update(hard=1.5), "carbon.hard: Input should be less than or equal to 1"),
        (lambda d: d["jobs"].update(value=[1.0, float("inf")]), "jobs.value.1: Input should be a finite number"),
        (lambda d: d["shocks"][3].update(price_multiplier=[1.0, 20.0], duration=[3, 3]), "keep the worst case"),
        (lambda d: d["shocks"][0].pop("job"), "needs 'job'"),
        (lambda d: d.update(budget=["1", "2"]), "budget.0: Input should be a valid number"),
    ],
)
def test_bad_family_files_are_refused_with_the_key(broad, tmp_path, change, match):
    data = family_dict(broad)
    change(data)
    with pytest.raises(FamilyError) as err:
        fam_mod.family_from_dict(data, source="bad.toml")
    assert "invalid family bad.toml" in str(err.value)
    assert match in str(err.value)


def test_a_family_is_loaded_by_name_or_path(broad, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(FAMILY_FILE.read_text())
    assert load_family(path) == broad == load_family(str(path))
    with pytest.raises(FamilyError, match="no family named 'nope'; known families: broad"):
        load_family("nope")
    with pytest.raises(FamilyError, match="family file not found"):
        load_family(tmp_path / "missing.toml")
    (tmp_path / "broken.toml").write_text("teams = [")
    with pytest.raises(FamilyError, match="not valid TOML"):
        load_family(tmp_path / "broken.toml")


# ------------------------------------------------------------------ splits


def test_the_shipped_splits(broad):
    assert list_splits() == ("broad-heldout", "broad-train")
    train, held = load_split("broad-train"), load_split("broad-heldout")
    assert len(train) >= 200 and len(held) >= 60
    train_hashes = {c.content_hash for c in train}
    assert len(train_hashes) == len(train) and heldout_hashes() == {c.content_hash for c in held}
    assert train_hashes.isdisjoint(heldout_hashes())
    assert split_file("broad-heldout").heldout and not split_file("broad-train").heldout
    assert split_file("broad-heldout").family_hash == broad.content_hash


def test_a_split_refuses_to_load_when_the_generator_or_family_drifted(monkeypatch):
    split = split_file("broad-heldout")
    short = split.model_copy(update={"hashes": split.hashes[:3], "game_hashes": split.game_hashes[:3]})
    assert [c.content_hash for c in regenerate_split(short)] == list(split.hashes[:3])
    assert [c.game_hash for c in regenerate_split(short)] == list(split.game_hashes[:3])
    tampered = short.model_copy(update={"hashes": (split.hashes[0], "0" * 12, split.hashes[2])})
    with pytest.raises(FamilyError, match="scenario 1 regenerates with hashes .* the generator drifted"):
        regenerate_split(tampered)
    tampered = short.model_copy(update={"game_hashes": (split.game_hashes[0], "0" * 12, split.game_hashes[2])})
    with pytest.raises(FamilyError, match="scenario 1 regenerates with hashes .* the generator drifted"):
        regenerate_split(tampered)
    with pytest.raises(FamilyError, match="the family changed"):
        regenerate_split(short.model_copy(update={"family_hash": "0" * 12}))
    # an edit to the generator (here: its pool of team names) is caught the same way
    monkeypatch.setattr(fam_mod, "TEAM_NAMES", tuple(reversed(fam_mod.TEAM_NAMES)))
    with pytest.raises(FamilyError, match="scenario 0 regenerates .* the generator drifted"):
        regenerate_split(short)


def test_refuse_heldout_guards_training():
    held = load_split("broad-heldout")
    refuse_heldout(load_split("broad-train")[:5], "training")  # fine
    refuse_heldout([commons_arena.load_scenario("standard")], "training")
    with pytest.raises(FamilyError, match=r"training must not read held-out scenarios .*, got 1: broad_1001_7 \("):
        refuse_heldout([load_split("broad-train")[0], held[7]], "training")


@pytest.mark.parametrize("edit", [
    {"name": "innocent"}, {"description": "a scenario of my own"}, {"difficulty": "crisis"},
    {"name": "x", "description": "y", "population": {}},
])
def test_a_renamed_heldout_scenario_is_still_refused(edit):
    """Issue 44: the held-out refusal compares the game, not the name or the description."""
    held = load_split("broad-heldout")[3]
    copy = scenario_from_dict({**tomllib.loads(scenario_to_toml(held)), **edit})
    assert copy.content_hash != held.content_hash or edit == {"difficulty": held.difficulty}
    assert copy.game_hash == held.game_hash
    with pytest.raises(FamilyError, match="held-out"):
        refuse_heldout([copy], "training")


def test_the_game_hash_sees_every_rule_change():
    held = load_split("broad-heldout")[3]
    data = tomllib.loads(scenario_to_toml(held))
    changed = scenario_from_dict({**data, "budget": data["budget"] + 1.0})
    assert changed.game_hash != held.game_hash
    refuse_heldout([changed], "training")  # another game: fine


def test_the_split_files_list_one_game_hash_per_scenario():
    for name in list_splits():
        split = split_file(name)
        assert len(split.game_hashes) == len(split.hashes) == len(set(split.game_hashes))
    train = set(split_file("broad-train").game_hashes)
    assert train.isdisjoint(split_file("broad-heldout").game_hashes)


def test_unknown_split():
    with pytest.raises(FamilyError, match="no split named 'x'; known splits: broad-heldout, broad-train"):
        load_split("x")


# ------------------------------------------------------------------ the command


def test_scenarios_generate_writes_valid_hashed_files(capsys, tmp_path):
    out = tmp_path / "gen"
    code, stdout, err = run_cli(capsys, "scenarios", "generate", "broad", "--count", "6", "--seed", "3", "--out", str(out))
    assert code == 0, err
    assert "wrote 6 scenarios" in stdout
    expected = generate_scenarios("broad", 6, 3)
    index = json.loads((out / "index.json").read_text())
    assert [row["hash"] for row in index] == [c.content_hash for c in expected]
    for row, config in zip(index, expected, strict=True):
        assert row["file"] == f"{row['index']:05d}_{config.content_hash}.toml"
        assert commons_arena.load_scenario(out / row["file"]).content_hash == config.content_hash
    assert len(list(out.glob("*.toml"))) == 6
    # refused without --force, before any work; --force replaces what an earlier run wrote, nothing else
    assert_one_line_error(capsys, "scenarios", "generate", "broad", "--count", "2", "--seed", "3", "--out", str(out),
                          match="already holds files; pass --force")
    (out / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "scenarios", "generate", "broad", "--count", "2", "--seed", "4", "--out", str(out),
                           "--force")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["index.json", "notes.txt", *(f"{i:05d}_{c.content_hash}.toml" for i, c in
                                      enumerate(generate_scenarios("broad", 2, 4)))])


def test_scenarios_generate_checks_every_argument_first(capsys, tmp_path):
    out = tmp_path / "never"
    base = ["scenarios", "generate", "broad", "--seed", "1", "--out", str(out)]
    assert_one_line_error(capsys, *base, "--count", "0", match="--count must be a finite number in [1, 100000]")
    assert_one_line_error(capsys, *base, "--count", "100001", match="--count must be")
    assert_one_line_error(capsys, "scenarios", "generate", "broad", "--count", "2", "--seed", "-1", "--out", str(out),
                          match="--seed must be")
    assert_one_line_error(capsys, "scenarios", "generate", "nope", "--count", "2", "--seed", "1", "--out", str(out),
                          match="no family named 'nope'")
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    assert_one_line_error(capsys, "scenarios", "generate", str(bad), "--count", "2", "--seed", "1", "--out", str(out),
                          match="invalid family")
    unknown = tmp_path / "unknown_policy.toml"
    unknown.write_text(FAMILY_FILE.read_text().replace('name = "broad"', 'name = "odd"\nallocator = "nobody"'))
    assert_one_line_error(capsys, "scenarios", "generate", str(unknown), "--count", "2", "--seed", "1", "--out",
                          str(out), match="population.allocator: unknown policy 'nobody'")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_one_line_error(capsys, "scenarios", "generate", "broad", "--count", "2", "--seed", "1", "--out",
                          str(a_file), match="is a file")
    assert not out.exists()


def test_scenarios_listing_is_unchanged(capsys):
    code, stdout, _ = run_cli(capsys, "scenarios")
    assert code == 0
    assert [line.split()[0] for line in stdout.splitlines() if line[:1].strip()] == SHIPPED
    code, stdout, _ = run_cli(capsys, "scenarios", "--json")
    assert [row["name"] for row in json.loads(stdout)] == SHIPPED


# ------------------------------------------------------------------ any family, at its bounds


def ranged(draw, lo, hi, integer=False):
    """A [lo, hi] sub-range, often at an end of the bounds."""
    pick = st.integers(lo, hi) if integer else st.one_of(st.sampled_from([lo, hi]), st.floats(lo, hi))
    a, b = draw(pick), draw(pick)
    return [min(a, b), max(a, b)]


@st.composite
def families(draw):
    prob = st.sampled_from([0.0, 1.0, 0.5])
    tiers = ranged(draw, 1, 6, integer=True)
    memories = draw(st.lists(st.sampled_from([0.5, 1.0, 16.0, 40.0, 80.0, 141.0, 1e9]), min_size=tiers[1],
                             max_size=7, unique=True))
    shocks = []
    for kind in draw(st.lists(st.sampled_from(fam_mod.SHOCK_KINDS), max_size=6)):
        shock = {"kind": kind, "include": draw(prob), "scheduled": draw(prob), "rate": ranged(draw, 0.0, 1.0),
                 "duration": ranged(draw, 1, 3, integer=True), "gpus_offline": ranged(draw, 0, 100, integer=True),
                 "price_multiplier": ranged(draw, 1.0, 1.5), "inventory_factor": ranged(draw, 0.0, 1.0),
                 "intensity_multiplier": ranged(draw, 1.0, 1.5)}
        if kind in fam_mod.JOB_SHOCKS:
            shock["job"] = {"gpus": ranged(draw, 1, 50, integer=True), "work": ranged(draw, 0.01, 1e6),
                            "slack": ranged(draw, 0, 30, integer=True), "value": ranged(draw, 0.0, 1e9)}
        shocks.append(shock)
    return {
        "name": "edge", "description": "bounds", "teams": ranged(draw, 2, 8, integer=True),
        "archetypes": draw(st.lists(st.sampled_from(list(fam_mod.ARCHETYPES)), min_size=1, unique=True)),
        "board_pressure": ranged(draw, 0.0, 1000.0), "tiers": tiers,
        "tier": {"memory_gb": memories, "owned": ranged(draw, 1, 100_000, integer=True),
                 "speed": ranged(draw, 0.001, 1e9), "op_cost": ranged(draw, 0.0, 1e9), "power_kw": ranged(draw, 0.001, 1e9),
                 "spot_inventory": ranged(draw, 0, 100_000, integer=True), "spot_unit_cost": ranged(draw, 0.0, 1e9),
                 "max_price": ranged(draw, 0.001, 1e9), "empty_spot_market": draw(prob)},
        "max_ticks": ranged(draw, 2, 40, integer=True), "budget": ranged(draw, 0.0, 1e9), "no_budget": draw(prob),
        "reveal_after": ranged(draw, 1, 1000, integer=True), "queue_slots": ranged(draw, 1, 64, integer=True),
        "carbon": {"hard": draw(prob), "tightness": ranged(draw, 0.001, 1e9), "intensity": ranged(draw, 0.0, 1e9),
                   "variation": draw(st.floats(0.0, 1.0)), "forecast_horizon": ranged(draw, 1, 64, integer=True),
                   "weight": ranged(draw, 0.0, 1e4)},
        "jobs": {"count": ranged(draw, 0, 6, integer=True), "gpus": ranged(draw, 1, 100_000, integer=True),
                 "work": ranged(draw, 0.001, 1e9), "slack": ranged(draw, 0, 1000, integer=True),
                 "value": ranged(draw, 0.0, 1e9), "value_noise": draw(st.floats(0.0, 1.0)),
                 "priority": ranged(draw, 0, 1000, integer=True), "any_memory": draw(prob), "depends": draw(prob)},
        "generator": draw(st.none() | st.just({
            "present": draw(prob), "rate": ranged(draw, 0.0, 1.0), "gpus": ranged(draw, 1, 100_000, integer=True),
            "work": ranged(draw, 0.001, 1e9), "slack": ranged(draw, 0, 1000, integer=True),
            "value": ranged(draw, 0.0, 1e9), "priority": ranged(draw, 0, 1000, integer=True),
            "last_share": ranged(draw, 0.0, 1.0)})),
        "no_shocks": draw(prob), "shocks": shocks,
    }


@pytest.mark.slow  # hypothesis: 60 families at their bounds
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=families(), seed=st.integers(0, 2**63 - 1))
def test_any_valid_family_generates_valid_scenarios(data, seed):
    family = fam_mod.family_from_dict({k: v for k, v in data.items() if v is not None})
    for config in generate_scenarios(family, 3, seed % 10**6):
        assert scenario_from_dict(tomllib.loads(scenario_to_toml(config))).content_hash == config.content_hash
        for team in config.teams:  # every fixed job can be done in time on some tier that fits it
            for job in team.jobs:
                fits = [t for t in config.gpu_tiers if t.memory_gb >= job.min_memory_gb
                        and t.owned + t.spot_inventory >= job.gpus]
                assert any((job.deadline - job.arrival + 1) * job.gpus * t.speed >= job.work * (1 - 1e-9) for t in fits) \
                    or job.work / (job.gpus * max(t.speed for t in fits)) > config.max_ticks


def _relabel(data: dict, team: str, tier: str) -> dict:
    """``data`` with its first team and its first tier renamed, the shocks' references to them too."""
    out = json.loads(json.dumps(data))
    old_team, old_tier = out["teams"][0]["name"], out["gpu_tiers"][0]["name"]
    out["teams"][0]["name"], out["gpu_tiers"][0]["name"] = team, tier
    out.pop("population", None)  # names the seats; not the game
    for shock in out.get("shocks", []):
        if shock.get("team") == old_team:
            shock["team"] = team
        if shock.get("tier") == old_tier:
            shock["tier"] = tier
    return out


def _nudged(data: dict) -> dict:
    out = json.loads(json.dumps(data))
    out["budget"] = out["budget"] + 1e-9
    out["gpu_tiers"][0]["op_cost"] = out["gpu_tiers"][0]["op_cost"] * (1 + 1e-9)
    return out


@pytest.mark.parametrize("change", [
    lambda d: _relabel(d, "innocent_team", d["gpu_tiers"][0]["name"]),
    lambda d: _relabel(d, d["teams"][0]["name"], "innocent_tier"),
    lambda d: _relabel(d, "x", "y"),
    _nudged,
])
def test_a_relabelled_or_nudged_heldout_game_is_still_refused(change):
    """Issue 52: held out by the game, not its labels: team and tier names count by place, numbers at the digits
    that change an episode (each of these played the held-out episodes exactly, and trained)."""
    held = load_split("broad-heldout")[3]
    data = tomllib.loads(scenario_to_toml(held))
    copy = scenario_from_dict(change(data))
    assert copy.game_hash != held.game_hash  # the pinned hash sees a label; the canonical one does not
    assert copy.canonical_game_hash == held.canonical_game_hash
    with pytest.raises(FamilyError, match="held-out"):
        refuse_heldout([copy], "training")


def test_the_canonical_game_hash_still_tells_splits_and_scenarios_apart():
    train = [c.canonical_game_hash for c in load_split("broad-train")]
    held = [c.canonical_game_hash for c in load_split("broad-heldout")]
    assert len(set(train)) == len(train) and len(set(held)) == len(held) and set(train).isdisjoint(held)
    shipped = [commons_arena.load_scenario(n).canonical_game_hash for n in commons_arena.list_scenarios()]
    assert len(set(shipped)) == len(shipped) and set(shipped).isdisjoint(held)
