"""What a seat is taught: tier costs, placement, previews that match the rules, references on the same seed.

serving/explain.py and serving/seat_references.py are the one source the page, the text briefing and
the MCP tools read; these tests hold them to the env itself.
"""

from __future__ import annotations

import pytest

import commons_arena
from policies.focal import FocalEnv, run_episode
from policies.population import Population
from policies.registry import make_policy
from serving.briefing import render_briefing, seat_guide, split_totals
from serving.explain import fitting_tier, placement, preview, tier_costs
from serving.seat_references import (
    NOTHING,
    REFERENCES,
    biggest_losses,
    how_you_did,
    seat_reference_episodes,
    seat_reference_returns,
)
from serving.wire import ActionError, encode_action, encode_observation, seat_spec
from tests.sweeps import swept

CONFIG = commons_arena.load_scenario("standard")


@pytest.mark.parametrize("scenario", swept(["standard", "crisis", "cost_pressure"]))
def test_the_allocators_preview_is_the_spend_and_cuts_the_rules_charge(scenario):
    """Spend, invalid units and the carbon bound of a preview equal what the tick then charges (a shock firing in
    the tick, e.g. an incident taking GPUs offline after the action, is the one thing it cannot know)."""
    config = commons_arena.load_scenario(scenario)
    spec = seat_spec(config, "allocator")
    env = FocalEnv.from_scenario(config, ["allocator"])
    policy = make_policy("proportional", config, "allocator")
    policy.reset(1)
    observations, _ = env.reset(seed=3)
    checked = 0
    while env.agents:
        action = policy.act(observations["allocator"])
        seen = encode_observation(spec, observations["allocator"])
        shown = preview(spec, seen, encode_action(spec, action))
        observations, _, _, _, infos = env.step({"allocator": action})
        info = infos["allocator"]
        after = encode_observation(spec, observations["allocator"])
        if any(e["kind"] == "production_incident" for e in info["events"]):
            continue
        spiked = after["shocks_active"][4] or seen["shocks_active"][4]  # a grid spike: not in the published forecast
        terms = info["reward_terms"]
        assert shown["reward_terms"]["spend"] == pytest.approx(terms["spend"], abs=1e-6)
        assert shown["reward_terms"]["invalid"] == pytest.approx(terms["invalid"], abs=1e-6)
        if not spiked:
            assert after["carbon_used"] - seen["carbon_used"] <= shown["carbon_kg_if_all_busy"] + 1e-5
        checked += 1
    assert checked >= config.max_ticks // 2


def test_a_teams_preview_places_jobs_by_the_rule():
    """A job takes all its GPUs on its smallest fitting tier with room; GPUs of two tiers never add up."""
    spec = seat_spec(CONFIG, "search")
    small, medium, large = (t.memory_gb for t in CONFIG.gpu_tiers)
    jobs = [[0] * 8 for _ in range(CONFIG.queue_slots)]
    # present, gpus, min_memory_gb, remaining_work, ticks_to_deadline, value, priority, ready
    jobs[0] = [1, 2, small, 1, 1, 10, 1, 1]
    jobs[1] = [1, 1, medium, 9, 3, 20, 1, 1]
    jobs[2] = [1, 1, small, 1, 4, 5, 1, 0]
    observation = {"jobs": jobs}
    shown = preview(spec, observation, {"request": {"small": 1, "medium": 2}})
    where = {j["slot"]: j["runs_on"] for j in shown["jobs"]}
    # slot0 needs 2 GPUs of >= small memory: small has 1, so it takes medium (both), leaving slot1 no medium
    assert where == {"slot0": "medium", "slot1": None, "slot2": None}
    assert shown["idle_total"] == 1 and shown["idle_if_granted"]["small"] == 1
    assert shown["jobs"][0]["finishes"] and not shown["jobs"][2]["ready"]
    assert any("would NOT run" in line for line in shown["lines"])
    assert [j["tier"] for j in placement(spec, observation)["jobs"]] == ["small", "medium", "small"]
    assert CONFIG.tier_names[fitting_tier(spec, large)] == "large" and fitting_tier(spec, large + 1) is None
    with pytest.raises(ActionError, match=r"request.small = 99"):
        preview(spec, observation, {"request": {"small": 99}})


def test_the_briefing_and_the_guide_explain_costs_placement_lag_and_weights():
    env = commons_arena.parallel_env("standard")
    observations, _ = env.reset(seed=1)
    for seat in CONFIG.agents:
        spec = seat_spec(CONFIG, seat)
        seen = encode_observation(spec, observations[seat])
        text = render_briefing(spec, seen)
        guide = seat_guide(spec)
        assert "About this scenario: Curriculum tier 1." in text and guide["description"].startswith("Curriculum")
        assert "Placement: A job runs only with ALL its GPUs at once on ONE tier" in text
        assert guide["lag"] in text and "lag" in guide["lag"].lower()
        assert [row["op_cost"] for row in guide["tiers"]] == [t.op_cost for t in CONFIG.gpu_tiers]
        for t in CONFIG.gpu_tiers:
            assert f"{t.name}: {t.memory_gb:g} GB, speed {t.speed:g}; operating cost {t.op_cost:g}, power {t.power_kw:g} kW" in text
        for row in guide["scoring"]:
            assert f"{row['term']} (x{row['weight']:.3g})" in text
    allocator = seat_spec(CONFIG, "allocator")
    seen = encode_observation(allocator, observations["allocator"])
    intensity = seen["intensity_forecast"][0]
    rows = tier_costs(allocator, seen)
    assert [r["kg_co2_if_busy"] for r in rows] == pytest.approx([t.power_kw * intensity for t in CONFIG.gpu_tiers])
    assert f"this tick's intensity {intensity:.3g} kg/kWh" in render_briefing(allocator, seen)
    assert "kg_co2_if_busy" not in tier_costs(seat_spec(CONFIG, "search"), {})  # a team does not see the grid


@pytest.mark.slow  # 4 oracle episodes
def test_references_are_the_engines_on_the_same_seed_and_cached():
    refs = seat_reference_returns(CONFIG, 7, "allocator")
    assert list(refs) == list(REFERENCES["allocator"])
    for name, value in refs.items():
        local = run_episode(commons_arena.parallel_env(CONFIG), Population.default(CONFIG).with_agent("allocator", name),
                            seed=7)
        assert value == local["allocator"]["return"]
    assert refs["oracle"] == max(refs.values())
    assert seat_reference_returns(CONFIG, 7, "allocator") == refs  # the cache answers
    team = how_you_did(CONFIG, 7, "search", 10.0)
    assert set(team["references"]) == {"truthful", "greedy_bluffer", NOTHING} and team["text"].startswith("Your return 10.0")
    broker = seat_reference_returns(CONFIG, 7, "broker", Population.default(CONFIG))
    assert set(broker) == {"demand_priced", "fixed_price"}


def test_each_reference_keeps_its_reward_terms_and_the_term_you_lost_most_on_is_named():
    """The issue's case: an allocator that completed every job but overspent learns that spend, not job value, is
    where it fell behind planner; the references' terms are the engine's and sum to their returns."""
    episodes = seat_reference_episodes(CONFIG, 3, "allocator")
    planner = run_episode(commons_arena.parallel_env(CONFIG), Population.default(CONFIG).with_agent("allocator", "planner"),
                          seed=3)["allocator"]
    assert {k: v for k, v in episodes["planner"].items() if not k.startswith("cause/")} == {
        k: v for k, v in planner.items() if k == "return" or k.startswith("term/")}
    for terms in episodes.values():
        assert sum(v for k, v in terms.items() if k.startswith("term/")) == pytest.approx(terms["return"])
    own = {**{k: v for k, v in episodes["planner"].items() if k.startswith("term/")}, "term/spend": -80.2}
    own_return = sum(own.values())
    done = how_you_did(CONFIG, 3, "allocator", own_return, own_terms=own)
    assert done["biggest_loss"]["planner"]["term"] == "spend"
    assert done["biggest_loss"]["planner"]["behind"] == pytest.approx(80.2 + planner["term/spend"])
    assert "Against planner you lost most on spend" in done["text"]
    assert done["reference_terms"]["oracle"] == {k: v for k, v in episodes["oracle"].items() if k.startswith("term/")}
    # at or above a reference on every term: nothing to name
    assert biggest_losses({"term/a": 2.0, "term/b": 0.0}, {"r": {"term/a": 1.0, "term/b": 0.0}}) == {"r": None}
    assert biggest_losses({"term/a": 2.0}, {"r": {"term/a": 1.0, "term/b": 3.0}})["r"] == {
        "term": "b", "yours": 0.0, "theirs": 3.0, "behind": 3.0}


def test_a_team_seat_is_compared_with_declaring_nothing():
    """declares_nothing is the seat playing all zeros (FocalEnv's no-op) against the same background; when it scores
    as much as every other reference, the text says that the seat's declarations did not pay on that seed."""
    env = commons_arena.parallel_env(CONFIG)
    for seed in range(6):
        refs = seat_reference_returns(CONFIG, seed, "search")
        focal = FocalEnv(env, ("search",), Population.default(CONFIG))
        focal.reset(seed=seed)
        assert refs[NOTHING] == focal.play_out()["search"]["episode"]["return"]
        text = how_you_did(CONFIG, seed, "search", 0.0, own_terms={})["text"]
        nothing_pays = refs[NOTHING] >= max(v for k, v in refs.items() if k != NOTHING) - 1e-9
        assert ("Declaring nothing at all scored as much" in text) == nothing_pays


def test_a_summary_separates_the_seats_totals_from_the_episodes():
    episode = {"return": 3.0, "term/job_value": 5.0, "term/missed": -2.0, "completed": 9.0, "spend": 4.0}
    assert split_totals(episode) == {"yours": {"return": 3.0, "term/job_value": 5.0, "term/missed": -2.0},
                                     "episode": {"completed": 9.0, "spend": 4.0}}


@pytest.mark.slow
@pytest.mark.server  # the app, a whole episode and its references
def test_http_preview_and_summary():
    """POST /preview answers for the session's seat without playing; GET /sessions/{id}/summary once it ended."""
    from fastapi.testclient import TestClient

    from serving.app import create_app

    with TestClient(create_app()) as client:
        first = client.post("/reset", json={"seed": 7}).json()
        sid = first["observation"]["metadata"]["session_id"]
        early = client.get(f"/sessions/{sid}/summary")
        assert early.status_code == 409 and "ended" in early.json()["detail"]
        shown = client.post("/preview", json={"session_id": sid, "action": {"grant": {"search": {"small": 2}}}}).json()
        assert shown["spend"] == pytest.approx(2 * CONFIG.gpu_tiers[0].op_cost) and shown["lines"][0].startswith("spend")
        bad = client.post("/preview", json={"session_id": sid, "action": {"grant": {"search": {"small": 99}}}})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "grant.search.small"
        assert client.get("/state", params={"session_id": sid}).json()["step_count"] == 0  # nothing was played
        frame = first
        while not frame["done"]:
            frame = client.post("/step", json={"session_id": sid, "action": {}}).json()
        summary = client.get(f"/sessions/{sid}/summary").json()
        local = seat_reference_returns(CONFIG, 7, "allocator")
        assert summary["references"] == local and summary["return"] == pytest.approx(summary["your_totals"]["return"])
        assert "completed" in summary["episode_totals"] and "completed" not in summary["your_totals"]
        after = client.post("/preview", json={"session_id": sid, "action": {}})
        assert after.status_code == 409


def test_one_reference_computation_at_a_time(monkeypatch):
    """The oracle is a solver: while one set is computed, another request waits, then hears 'busy' (HTTP 503)."""
    import serving.seat_references as references

    monkeypatch.setattr(references, "WAIT_SECONDS", 0.05)
    assert references._computing.acquire(timeout=5)
    try:
        with pytest.raises(references.ReferencesBusy, match="ask again in a few seconds"):
            seat_reference_returns(CONFIG, 987_654, "broker")
    finally:
        references._computing.release()


def test_a_teams_preview_says_when_the_smallest_tier_is_too_slow():
    """The case the issue saw: a 1-GPU job lands on small (the smallest tier with room) though medium was asked for
    too, and misses its deadline; the preview says so and names the tier that would make it."""
    spec = seat_spec(CONFIG, "search")
    jobs = [[0] * 8 for _ in range(CONFIG.queue_slots)]
    jobs[0] = [1, 1, CONFIG.gpu_tiers[0].memory_gb, 3, 2, 10, 1, 1]  # 3 work left, 2 ticks to its deadline
    shown = preview(spec, {"jobs": jobs}, {"request": {"small": 1, "medium": 1}})
    job = shown["jobs"][0]
    assert job["runs_on"] == "small" and job["ticks_needed"] == 3 and job["too_slow"] and job["in_time_on"] == "medium"
    assert "too slow for its deadline" in shown["lines"][0] and "ask for medium" in shown["lines"][0]
    fine = preview(spec, {"jobs": jobs}, {"request": {"medium": 1}})["jobs"][0]
    assert fine["runs_on"] == "medium" and not fine["too_slow"]
