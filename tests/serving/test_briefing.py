"""The text briefing and the seat guide it shares with the play page: complete, plain, and its examples play."""

from __future__ import annotations

import json
import re

import pytest

import commons_arena
from serving.briefing import EPISODE_STATS, REWARD_TERMS, render_briefing, seat_guide
from serving.wire import decode_action, encode_observation, seat_spec

CONFIG = commons_arena.load_scenario("standard")


def first_and_second_tick(seed=1):
    env = commons_arena.parallel_env("standard")
    first, _ = env.reset(seed=seed)
    second, _, _, _, infos = env.step({a: env.action_space(a).sample() * 0 for a in env.agents})
    return first, second, infos


def test_every_reward_term_and_episode_total_is_explained():
    """A term or total the env reports but the guide does not explain would reach a reader unexplained."""
    env = commons_arena.parallel_env("standard")
    env.reset(seed=0)
    done, infos = False, {}
    while not done:
        _, _, terms, truncs, infos = env.step({a: env.action_space(a).sample() * 0 for a in env.agents})
        done = all(terms.values()) or all(truncs.values())
    for seat in CONFIG.agents:
        role = seat_spec(CONFIG, seat).role
        assert list(infos[seat]["reward_terms"]) == list(REWARD_TERMS[role]), seat
        totals = {k for k in infos[seat]["episode"] if not k.startswith("term/")}
        assert totals <= set(EPISODE_STATS), totals - set(EPISODE_STATS)
        kinds = {row["term"]: row["kind"] for row in seat_guide(seat_spec(CONFIG, seat))["scoring"]}
        assert all(kind in ("gain", "cost") for kind in kinds.values())
    assert REWARD_TERMS["allocator"]["idle"][0] == "cost" and EPISODE_STATS["missed"][0] == "cost"


@pytest.mark.parametrize("seat", ["allocator", "search", "broker"])
def test_both_example_actions_are_actions(seat):
    spec = seat_spec(CONFIG, seat)
    first, _, _ = first_and_second_tick()
    text = render_briefing(spec, encode_observation(spec, first[seat]))
    lines = text[text.index("Both of these are actions:"):].splitlines()[1:3]
    examples = [json.loads(line.split("   (")[0]) for line in lines]
    assert decode_action(spec, examples[0]) == [0] * spec.action_size
    assert any(decode_action(spec, examples[1]))  # the keyed form asks for something
    if seat == "allocator":
        assert examples[1]["grant"] == {"search": {"small": 2}}


def test_tick_zero_says_why_declarations_are_zero_and_words_are_plain():
    first, second, _ = first_and_second_tick()
    for seat in ("allocator", "search", "broker"):
        spec = seat_spec(CONFIG, seat)
        at0 = render_briefing(spec, encode_observation(spec, first[seat]))
        at1 = render_briefing(spec, encode_observation(spec, second[seat]))
        assert "declare for the NEXT tick" in at0 and "declare for the NEXT tick" not in at1
        for line in at0.splitlines():  # no description nests parentheses ("(money left (bound ...))")
            if line.startswith("- "):
                doc = line[line.index("(") + 1:line.index("):")] if "):" in line else ""
                assert not re.search(r"\([^)]*\(", doc.split("; columns:")[0]), line
    allocator = render_briefing(seat_spec(CONFIG, "allocator"), encode_observation(seat_spec(CONFIG, "allocator"),
                                                                                   first["allocator"]))
    assert "budget (money left for spot purchases, for the rest of the episode)" in allocator
    assert "counter (a signal only" in allocator
    team = render_briefing(seat_spec(CONFIG, "search"), encode_observation(seat_spec(CONFIG, "search"), first["search"]))
    assert "counter (a signal only" in team and "ticks_to_deadline = ticks left" in team
    assert "remaining_work = work units left" in team and "min_memory_gb = GB" in team
