"""How you did: what reference policies score in your seat on the same seed, computed by the server.

At the end of an episode a seat's return is shown beside the returns of reference policies
played in that same seat, against the same background, on the same seed, with the same
engine and the one seeding rule (:func:`policies.focal.run_episode`: every policy seeded by
``policy_seed(seed, seat)``; so the background acts exactly as it did for the player while
the episode's states agree). The references per role:

* allocator: ``proportional``, ``planner`` and the ``oracle`` (it reads the hidden state and
  plans with a MILP per tick: the ceiling);
* team: ``truthful`` and ``greedy_bluffer``;
* broker: ``demand_priced`` and ``fixed_price``.

They are computed lazily (only when an ended episode asks) and cached per (scenario content,
seed, seat, background), so nothing here touches the step path. One set is computed at a time
whatever clients ask (the oracle is a solver): a request waits at most :data:`WAIT_SECONDS`
for the slot, then gets :class:`ReferencesBusy` (HTTP 503 ``REFERENCES_BUSY``). A session with no seed
(the server drew one) has one too: the drawn seed is the session's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import commons_arena
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import role_of
from policies.focal import run_episode
from policies.population import Population
from serving.briefing import split_totals
from serving.session import ServeError, Session

REFERENCES: dict[str, tuple[str, ...]] = {
    "allocator": ("proportional", "planner", "oracle"),
    "team": ("truthful", "greedy_bluffer"),
    "broker": ("demand_priced", "fixed_price"),
}
MAX_CACHED = 512
WAIT_SECONDS = 30.0
"""longest a request waits while another computes references (one computation at a time: the oracle is a solver)"""
_cache: OrderedDict[tuple[str, int, str, str], dict[str, float]] = OrderedDict()
_lock = threading.Lock()  # the cache
_computing = threading.Lock()  # one computation at a time, whatever clients ask


class ReferencesBusy(RuntimeError):
    """Another computation held the server's one reference slot for longer than :data:`WAIT_SECONDS`."""


def _key(config: ScenarioConfig, seed: int, seat: str, population: Population) -> tuple[str, int, str, str]:
    resolved = population.resolve(config, strict=False)
    background = repr(sorted((a, e.policy, sorted(e.params.items())) for a, e in resolved.items() if a != seat))
    return config.content_hash, int(seed), seat, background


def seat_reference_returns(config: ScenarioConfig, seed: int, seat: str, population: Population | None = None
                      ) -> dict[str, float]:
    """Policy name -> the return it scores in ``seat`` on ``seed`` against ``population``'s other seats."""
    population = population or Population.default(config)
    key = _key(config, seed, seat, population)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return dict(_cache[key])
    if not _computing.acquire(timeout=WAIT_SECONDS):
        raise ReferencesBusy(f"the server is computing other references; ask again in a few seconds "
                             f"(it computes one set at a time, each well under {WAIT_SECONDS:g} s)")
    try:
        with _lock:
            cached = _cache.get(key)
        if cached is not None:  # computed while this request waited
            return dict(cached)
        role = role_of(config, seat)
        out: dict[str, float] = {}
        env = commons_arena.parallel_env(config)
        for name in REFERENCES[role]:
            episode = run_episode(env, population.with_agent(seat, name), seed=seed, strict=False)
            out[name] = float(episode[seat]["return"])
    finally:
        _computing.release()
    with _lock:
        _cache[key] = out
        while len(_cache) > MAX_CACHED:
            _cache.popitem(last=False)
    return dict(out)


def summary_args(session: Session) -> tuple[Any, ...]:
    """What an ended session's summary needs, read where the session lives (the event loop): it may change later."""
    if session.options is None or not session.done:
        raise ServeError(409, "EPISODE_RUNNING", "the summary and the references are computed once the episode has "
                         "ended")
    seat = session.options.seats[0]
    episode = dict(session.env.seat_infos.get(seat, {}).get("episode", {}))
    return (session.options.config, int(session.seed or 0), seat, float(session.returns[seat]),
            session.options.population, episode)


def summary_of(config: ScenarioConfig, seed: int, seat: str, own: float, population: Population | None,
               episode: dict[str, Any]) -> dict[str, Any]:
    """The seat's own totals, the episode's, and the references on the same seed (off the event loop: the
    references may play whole episodes). Busy references are a 503 ``REFERENCES_BUSY``."""
    totals = split_totals(episode)
    try:
        refs = how_you_did(config, seed, seat, own, population)
    except ReferencesBusy as err:
        raise ServeError(503, "REFERENCES_BUSY", str(err), your_totals=totals["yours"],
                         episode_totals=totals["episode"]) from None
    return {**refs, "your_totals": totals["yours"], "episode_totals": totals["episode"]}


def how_you_did(config: ScenarioConfig, seed: int, seat: str, own_return: float,
                population: Population | None = None) -> dict[str, Any]:
    """The seat's return beside the references', with one line of text saying where it stands."""
    refs = seat_reference_returns(config, seed, seat, population)
    best_name = max(refs, key=lambda n: refs[n])
    beaten = [n for n, r in refs.items() if own_return >= r - 1e-9]
    text = (f"Your return {own_return:.1f}; on the same seed in your seat "
            + ", ".join(f"{n} scored {r:.1f}" for n, r in refs.items())
            + (f". You matched or beat {', '.join(beaten)}." if beaten else ". You scored below every reference.")
            )
    return {"seat": seat, "seed": seed, "scenario": config.name, "return": own_return, "references": refs,
            "best": best_name, "beaten": beaten, "text": text}


__all__ = ["REFERENCES", "WAIT_SECONDS", "ReferencesBusy", "how_you_did", "seat_reference_returns", "summary_args",
           "summary_of"]
