"""Invariants over many random rollouts of every scenario (a seed loop; fast).

Each tick is re-derived independently from what the agents observe (grants from the
teams' ``last_grant``, purchases from the broker's ``last_sold``), the shock events in
``infos`` and the hidden job list before and after the tick:

* capacity: granted per tier <= online + bought; grants and buys never exceed the action;
* budget >= 0, non-increasing, and it falls by exactly what was bought x posted price;
* jobs: an independent re-implementation of the placement rule (EDF, memory fit, gang on
  one tier, smallest fitting tier, readiness fixed at the start of the tick) predicts every
  job's progress, completion and miss;
* carbon ledger: carbon_used grows by exactly used GPUs x power x intensity (profile,
  repeated last value, grid spikes); a hard cap is never exceeded;
* conservation: every job ends done, missed or pending; values are paid once;
* rewards: every term recomputed, reward == sum(reward_terms); observations in their spaces.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena import action_layout, observation_layout
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()
PENDING, DONE, MISSED = 0, 1, 2
TOL = 1e-6


def random_actions(env: commons_arena.ArenaEnv, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Mixed styles per agent: uniform over the space, modest, or nothing at all."""
    out = {}
    for agent in env.agents:
        nvec = env.action_space(agent).nvec
        style = rng.integers(3)
        if style == 0:
            out[agent] = rng.integers(0, nvec)
        elif style == 1:
            out[agent] = rng.integers(0, np.minimum(nvec, 3))
        else:
            out[agent] = np.zeros_like(nvec)
    return out


def _job_rows(state) -> list[list[tuple[int, float]]]:
    return [[(j.status, j.remaining) for j in team] for team in state.jobs]


class Episode:
    """Checks one episode tick by tick."""

    def __init__(self, env: commons_arena.ArenaEnv) -> None:
        cfg = self.cfg = env.config
        self.env = env
        self.T, self.N = len(cfg.gpu_tiers), len(cfg.teams)
        self.owned = np.array([t.owned for t in cfg.gpu_tiers])
        self.inventory = np.array([t.spot_inventory for t in cfg.gpu_tiers])
        self.memory = np.array([t.memory_gb for t in cfg.gpu_tiers])
        self.speed = np.array([t.speed for t in cfg.gpu_tiers])
        self.power = np.array([t.power_kw for t in cfg.gpu_tiers])
        self.op_cost = np.array([t.op_cost for t in cfg.gpu_tiers])
        self.unit_cost = np.array([t.spot_unit_cost for t in cfg.gpu_tiers])
        self.by_memory = sorted(range(self.T), key=lambda k: (self.memory[k], k))
        self.alloc_parts = action_layout(cfg, "allocator")
        self.broker_parts = action_layout(cfg, "broker")
        self.events: list[dict] = []
        self.initial_jobs = sum(len(team) for team in env.hidden_state().jobs)
        self.returns = dict.fromkeys(env.possible_agents, 0.0)

    # ------------------------------------------------------------------ one tick
    def step(self, actions: dict[str, np.ndarray]):
        env, cfg, s = self.env, self.cfg, self.env.hidden_state()
        t = s.t
        budget, offer_qty, offer_price = s.budget, s.offer_qty.copy(), s.offer_price.copy()
        carbon_before, cred_before, revealed_before = s.carbon_used, s.credibility.copy(), s.revealed.copy()
        before = _job_rows(s)

        obs, rewards, term, trunc, infos = env.step(actions)
        s = env.hidden_state()
        assert s.t == t + 1
        events = infos["allocator"]["events"]
        assert all(e["tick"] == t for e in events)
        self.events += events

        # ---- observations and reward sums
        for agent, o in obs.items():
            assert env.observation_space(agent).contains(o), f"{agent} observation outside its space at tick {t}"
        for agent, r in rewards.items():
            assert math.isfinite(r)
            assert r == pytest.approx(sum(infos[agent]["reward_terms"].values()), abs=1e-9)
            self.returns[agent] += r

        # ---- what was granted and bought, read from public observations
        granted = np.stack([observation_layout(cfg, team).view(obs[team])["last_grant"] for team in cfg.team_names])
        granted = granted.astype(np.int64)
        bought = observation_layout(cfg, "broker").view(obs["broker"])["last_sold"].astype(np.int64)
        alloc = self.alloc_parts.view(np.asarray(actions.get("allocator", np.zeros(self.alloc_parts.size))))
        broker = self.broker_parts.view(np.asarray(actions.get("broker", np.zeros(self.broker_parts.size))))

        # ---- market and budget
        assert (bought >= 0).all() and (bought <= offer_qty).all() and (bought <= alloc["buy"]).all()
        cost = float(bought @ offer_price)
        assert 0.0 <= s.budget <= budget + TOL
        assert s.budget == pytest.approx(budget - cost, abs=1e-9)
        assert (s.offer_qty <= self.inventory).all() and (s.offer_qty <= broker["quantity"]).all()

        # ---- capacity
        offline = np.zeros(self.T, dtype=np.int64)
        for e in self.events:
            if e["kind"] == "production_incident" and e["tick"] <= t <= e["until"]:
                offline[cfg.tier_names.index(e["tier"])] += e["gpus_offline"]
        online = np.maximum(self.owned - offline, 0)
        assert (granted >= 0).all() and (granted <= alloc["grant"]).all()
        assert (granted.sum(axis=0) <= online + bought).all(), f"tick {t}: granted beyond online + bought"

        # ---- jobs, re-derived
        used, done_value, missed_value, satisfaction = self._replay_jobs(before, s.jobs, granted, t)
        assert (used <= granted.sum(axis=0)).all()

        # ---- carbon ledger
        kg = float(used @ self.power)
        intensities = self._possible_intensities(t)
        assert any(abs(s.carbon_used - carbon_before - kg * i) < 1e-7 for i in intensities), (
            f"tick {t}: carbon grew by {s.carbon_used - carbon_before}, expected {kg} x one of {intensities}")
        if cfg.carbon.mode == "hard":
            assert s.carbon_used <= cfg.carbon.cap_kg + 1e-7

        # ---- social state
        assert ((s.credibility >= 0) & (s.credibility <= 1) & (s.credibility <= cred_before + TOL)).all()
        assert (s.revealed >= revealed_before).all()

        # ---- every reward term, recomputed
        w = cfg.rewards
        a = infos["allocator"]["reward_terms"]
        repairs = infos["allocator"]["repairs"]
        assert repairs["buy_over_offer"] + repairs["buy_over_budget"] == int((alloc["buy"] - bought).sum())
        assert repairs["grant_over_capacity"] + repairs["grant_over_carbon_cap"] == int((alloc["grant"] - granted).sum())
        assert repairs["offer_over_inventory"] == int((broker["quantity"] - s.offer_qty).sum())
        assert a["job_value"] == pytest.approx(w.allocator.job_value * done_value.sum())
        assert a["missed"] == pytest.approx(-w.allocator.missed * missed_value.sum())
        assert a["spend"] == pytest.approx(-w.allocator.spend * (cost + float(granted.sum(axis=0) @ self.op_cost)))
        assert a["idle"] == pytest.approx(-w.allocator.idle * (granted.sum() - used.sum()))
        assert a["invalid"] == pytest.approx(-w.allocator.invalid * sum(
            repairs[k] for k in ("buy_over_offer", "buy_over_budget", "grant_over_capacity", "grant_over_carbon_cap")))
        squares = float(satisfaction @ satisfaction)  # Jain's index over teams with a ready job
        jain = satisfaction.sum() ** 2 / (len(satisfaction) * squares) if squares else 1.0
        assert a["fairness"] == pytest.approx(w.allocator.fairness * (jain - 1.0))
        over = max(0.0, s.carbon_used - cfg.carbon.cap_kg) - max(0.0, carbon_before - cfg.carbon.cap_kg)
        assert a["carbon"] == pytest.approx(-w.allocator.carbon * over if cfg.carbon.mode == "soft" else 0.0)
        for i, team in enumerate(cfg.team_names):
            terms = infos[team]["reward_terms"]
            assert terms["job_value"] == pytest.approx(w.team.job_value * done_value[i])
            assert terms["missed"] == pytest.approx(-w.team.missed * missed_value[i])
            assert terms["credibility"] == pytest.approx(-w.team.credibility * (cred_before[i] - s.credibility[i]))
        b = infos["broker"]["reward_terms"]
        assert b["profit"] == pytest.approx(w.broker.profit * float(bought @ (offer_price - self.unit_cost)))
        assert b["invalid"] == pytest.approx(-w.broker.invalid * repairs["offer_over_inventory"])
        return obs, rewards, term, trunc, infos

    def _replay_jobs(self, before, jobs, granted, t):
        """Independent placement; checks every job's new status and remaining work."""
        used = np.zeros(self.T, dtype=np.int64)
        done_value, missed_value = np.zeros(self.N), np.zeros(self.N)
        satisfaction = []
        for i, team_jobs in enumerate(jobs):
            prior = before[i] + [(PENDING, j.work) for j in team_jobs[len(before[i]):]]  # shock-injected now
            for j in team_jobs[len(before[i]):]:
                assert j.arrival == t, f"job {j.id} appeared at tick {t} but arrives at {j.arrival}"
            expect = [list(p) for p in prior]
            order = sorted(range(len(team_jobs)), key=lambda k: (team_jobs[k].deadline, -team_jobs[k].priority, k))
            ready = [k for k in order if prior[k][0] == PENDING and team_jobs[k].arrival <= t
                     and all(prior[d][0] == DONE for d in team_jobs[k].deps)]
            free = granted[i].copy()
            placed = 0
            for k in ready:
                job = team_jobs[k]
                for tier in self.by_memory:
                    if self.memory[tier] >= job.min_memory_gb and free[tier] >= job.gpus:
                        free[tier] -= job.gpus
                        used[tier] += job.gpus
                        placed += job.gpus
                        expect[k][1] = prior[k][1] - job.gpus * self.speed[tier]
                        if expect[k][1] <= 1e-9:
                            expect[k] = [DONE, 0.0]
                        break
            ready_gpus = sum(team_jobs[k].gpus for k in ready)
            if ready_gpus:
                satisfaction.append(placed / ready_gpus)
            for k in order:
                if expect[k][0] == PENDING and team_jobs[k].deadline <= t:
                    expect[k][0] = MISSED
            for k, job in enumerate(team_jobs):
                assert job.status == expect[k][0], f"tick {t}: job {job.id} status {job.status}, expected {expect[k][0]}"
                assert job.remaining == pytest.approx(expect[k][1], abs=1e-9), f"tick {t}: job {job.id} progress"
                if prior[k][0] != PENDING:
                    assert job.status == prior[k][0], f"job {job.id} was resolved twice"
                elif job.status == DONE:
                    assert job.done_tick == t and job.arrival <= t <= job.deadline
                    done_value[i] += job.value
                elif job.status == MISSED:
                    assert job.deadline == t
                    missed_value[i] += job.value
        return used, done_value, missed_value, np.array(satisfaction)

    def _possible_intensities(self, t: int) -> set[float]:
        profile = self.cfg.carbon.intensity
        base = profile[min(t, len(profile) - 1)]
        choices = []
        for e in self.events:
            if e["kind"] == "grid_spike" and e["tick"] <= t <= e["until"]:
                choices.append({spec.intensity_multiplier for spec in self.cfg.shocks
                                if spec.kind == "grid_spike" and spec.duration == e["until"] - e["tick"] + 1
                                and (spec.tick == e["tick"] or spec.rate is not None)})
        return {base * math.prod(combo) for combo in itertools.product(*choices)} if choices else {base}

    # ------------------------------------------------------------------ the end
    def finish(self, term, trunc, infos) -> None:
        env, s = self.env, self.env.hidden_state()
        assert env.agents == []
        assert len(set(term.values())) == 1 and len(set(trunc.values())) == 1  # all end together
        assert any(term.values()) != any(trunc.values())
        all_jobs = [j for team in s.jobs for j in team]
        assert len(all_jobs) == self.initial_jobs + sum("job" in e for e in self.events) == self.initial_jobs + s.injected
        counts = {status: sum(j.status == status for j in all_jobs) for status in (PENDING, DONE, MISSED)}
        assert sum(counts.values()) == len(all_jobs)  # exactly one state each
        if any(term.values()):
            assert counts[PENDING] == 0
        else:
            assert s.t == self.cfg.max_ticks
        episode = infos["allocator"]["episode"]
        assert episode["completed"] == counts[DONE] and episode["missed"] == counts[MISSED]
        assert episode["completed_value"] == pytest.approx(sum(j.value for j in all_jobs if j.status == DONE))
        assert episode["missed_value"] == pytest.approx(sum(j.value for j in all_jobs if j.status == MISSED))
        assert episode["carbon_kg"] == pytest.approx(s.carbon_used)
        assert episode["ticks"] == s.t
        for agent in env.possible_agents:
            assert infos[agent]["episode"]["return"] == pytest.approx(self.returns[agent], abs=1e-6)


def run_episodes(scenario: str | Path, seeds: range) -> int:
    env = commons_arena.parallel_env(scenario=scenario)
    ticks = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for agent, o in obs.items():
            assert env.observation_space(agent).contains(o)
        rng = np.random.default_rng(1000 + seed)
        episode = Episode(env)
        while env.agents:
            _, _, term, trunc, infos = episode.step(random_actions(env, rng))
            ticks += 1
        episode.finish(term, trunc, infos)
    return ticks


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_invariants_shipped(name: str) -> None:
    assert run_episodes(name, range(12)) > 0


def test_invariants_unusual(unusual_scenario: Path) -> None:
    assert run_episodes(unusual_scenario, range(25)) > 0


def test_invariants_under_scarcity(tiny, write_scenario) -> None:
    """Hard cap that binds, a tiny budget, an incident, a crisis and a spike all at once."""
    tiny.update(budget=4.0, max_ticks=8)
    tiny["carbon"] = {"cap_kg": 5.0, "mode": "hard", "intensity": [1.0, 0.5]}
    tiny["teams"][0]["jobs"].append({"id": "long", "gpus": 2, "work": 6.0, "arrival": 1, "deadline": 7,
                                     "value": 8.0})
    tiny["shocks"] = [
        {"kind": "production_incident", "rate": 0.3, "tier": "small", "gpus_offline": 1, "duration": 2},
        {"kind": "market_crisis", "rate": 0.3, "duration": 2, "price_multiplier": 1.5, "inventory_factor": 0.5},
        {"kind": "grid_spike", "rate": 0.3, "duration": 3, "intensity_multiplier": 2.0},
        {"kind": "grid_spike", "tick": 2, "duration": 1, "intensity_multiplier": 1.5},
        {"kind": "customer_escalation", "rate": 0.3, "job": {"gpus": 1, "work": 1.0, "slack": 1, "value": 3.0}},
    ]
    assert run_episodes(write_scenario(tiny), range(40)) > 0
