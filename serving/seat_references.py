"""How you did: what reference policies score in your seat on the same seed, computed by the server.

At the end of an episode a seat's return is shown beside the returns of reference policies
played in that same seat, against the same background, on the same seed, with the same
engine and the one seeding rule (:func:`policies.focal.run_episode`: every policy seeded by
``policy_seed(seed, seat)``; so the background acts exactly as it did for the player while
the episode's states agree). The references per role:

* allocator: ``proportional``, ``planner`` and the ``oracle`` (it reads the hidden state and
  plans with a MILP per tick: the ceiling);
* team: ``truthful``, ``greedy_bluffer`` and ``declares_nothing`` (the seat sends all zeros every tick:
  no declaration, no escalation; if it scores as much as ``truthful``, nothing the seat does mattered on
  that seed, and the page says so);
* broker: ``demand_priced`` and ``fixed_price``.

Each reference's reward terms (``term/...``, the same keys as the seat's own totals) are kept beside its
return, so an ended episode says which term lost the person the most against each reference.

They are computed lazily (only when an ended episode asks) and cached per (scenario content,
seed, seat, background), so nothing here touches the step path. One set is computed at a time
whatever clients ask (the oracle is a solver): a request waits at most :data:`WAIT_SECONDS`
for the slot, then gets :class:`ReferencesBusy` (HTTP 503 ``REFERENCES_BUSY``). A session with no seed
(the server drew one) has one too: the drawn seed is the session's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import commons_arena
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import role_of
from policies.focal import FocalEnv, run_episode
from policies.population import Population
from serving.briefing import split_totals
from serving.causes import PREFIX, CauseCounter, cause_lines
from serving.session import ServeError, Session

REFERENCES: dict[str, tuple[str, ...]] = {
    "allocator": ("proportional", "planner", "oracle"),
    "team": ("truthful", "greedy_bluffer", "declares_nothing"),
    "broker": ("demand_priced", "fixed_price"),
}
NOTHING = "declares_nothing"
"""the team reference that is no policy: the seat plays all-zero actions (FocalEnv's no-op)"""
MAX_CACHED = 512
WAIT_SECONDS = 30.0
"""longest a request waits while another computes references (one computation at a time: the oracle is a solver)"""
_cache: OrderedDict[tuple[str, int, str, str], dict[str, dict[str, float]]] = OrderedDict()
_lock = threading.Lock()  # the cache
_computing = threading.Lock()  # one computation at a time, whatever clients ask


class ReferencesBusy(RuntimeError):
    """Another computation held the server's one reference slot for longer than :data:`WAIT_SECONDS`."""


def _key(config: ScenarioConfig, seed: int, seat: str, population: Population) -> tuple[str, int, str, str]:
    resolved = population.resolve(config, strict=False)
    background = repr(sorted((a, e.policy, sorted(e.params.items())) for a, e in resolved.items() if a != seat))
    return config.content_hash, int(seed), seat, background


def _own(episode: Mapping[str, Any]) -> dict[str, float]:
    """A seat's return and reward terms out of its episode summary (the rest is the whole episode's)."""
    return {k: float(v) for k, v in episode.items() if k == "return" or k.startswith("term/")}


def seat_reference_episodes(config: ScenarioConfig, seed: int, seat: str, population: Population | None = None
                            ) -> dict[str, dict[str, float]]:
    """Reference name -> its ``return``, reward terms (``term/...``) and causes (``cause/...``,
    :mod:`serving.causes`) in ``seat`` on ``seed`` against ``population``'s other seats."""
    population = population or Population.default(config)
    key = _key(config, seed, seat, population)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return {n: dict(e) for n, e in _cache[key].items()}
    if not _computing.acquire(timeout=WAIT_SECONDS):
        raise ReferencesBusy(f"the server is computing other references; ask again in a few seconds "
                             f"(it computes one set at a time, each well under {WAIT_SECONDS:g} s)")
    try:
        with _lock:
            cached = _cache.get(key)
        if cached is not None:  # computed while this request waited
            return {n: dict(e) for n, e in cached.items()}
        role = role_of(config, seat)
        out: dict[str, dict[str, float]] = {}
        env = CauseCounter(commons_arena.parallel_env(config), seat)
        for name in REFERENCES[role]:
            if name == NOTHING:  # the seat is focal and never acts: all zeros every tick
                focal = FocalEnv(env, (seat,), population)
                focal.reset(seed=seed)
                out[name] = _own(focal.play_out()[seat]["episode"])
            else:
                out[name] = _own(run_episode(env, population.with_agent(seat, name), seed=seed, strict=False)[seat])
            out[name].update({PREFIX + k: float(v) for k, v in env.counts.items()})
    finally:
        _computing.release()
    with _lock:
        _cache[key] = out
        while len(_cache) > MAX_CACHED:
            _cache.popitem(last=False)
    return {n: dict(e) for n, e in out.items()}


def seat_reference_returns(config: ScenarioConfig, seed: int, seat: str, population: Population | None = None
                           ) -> dict[str, float]:
    """Policy name -> the return it scores in ``seat`` on ``seed`` against ``population``'s other seats."""
    return {n: e["return"] for n, e in seat_reference_episodes(config, seed, seat, population).items()}


def summary_args(session: Session) -> tuple[Any, ...]:
    """What an ended session's summary needs, read where the session lives (the event loop): it may change later."""
    if session.options is None or not session.done:
        raise ServeError(409, "EPISODE_RUNNING", "the summary and the references are computed once the episode has "
                         "ended")
    seat = session.options.seats[0]
    episode = dict(session.env.seat_infos.get(seat, {}).get("episode", {}))
    return (session.options.config, int(session.seed or 0), seat, float(session.returns[seat]),
            session.options.population, episode, dict(session.causes.counts) if session.causes else None)


def summary_of(config: ScenarioConfig, seed: int, seat: str, own: float, population: Population | None,
               episode: dict[str, Any], causes: dict[str, int] | None = None) -> dict[str, Any]:
    """The seat's own totals, the episode's, and the references on the same seed (off the event loop: the
    references may play whole episodes). Busy references are a 503 ``REFERENCES_BUSY``."""
    totals = split_totals(episode)
    try:
        refs = how_you_did(config, seed, seat, own, population, own_terms=totals["yours"], own_causes=causes)
    except ReferencesBusy as err:
        raise ServeError(503, "REFERENCES_BUSY", str(err), your_totals=totals["yours"],
                         episode_totals=totals["episode"]) from None
    return {**refs, "your_totals": totals["yours"], "episode_totals": totals["episode"]}


def _term_name(key: str) -> str:
    return key.removeprefix("term/").replace("_", " ")


def biggest_losses(own_terms: Mapping[str, float], reference_terms: Mapping[str, Mapping[str, float]]
                   ) -> dict[str, dict[str, Any] | None]:
    """Per reference, the reward term on which the seat fell furthest below it (``term``, ``yours``, ``theirs``,
    ``behind``), or None when the seat was at or above the reference on every term."""
    out: dict[str, dict[str, Any] | None] = {}
    for name, theirs in reference_terms.items():
        gaps = {t: float(own_terms.get(t, 0.0)) - float(v) for t, v in theirs.items() if t.startswith("term/")}
        worst = min(gaps, key=lambda t: gaps[t], default=None)
        out[name] = None if worst is None or gaps[worst] > -0.05 else {
            "term": worst.removeprefix("term/"), "yours": float(own_terms.get(worst, 0.0)),
            "theirs": float(theirs[worst]), "behind": -gaps[worst]}
    return out


def how_you_did(config: ScenarioConfig, seed: int, seat: str, own_return: float,
                population: Population | None = None, own_terms: Mapping[str, float] | None = None,
                own_causes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The seat's return beside the references', each reference's reward terms, the term that lost the seat the
    most against each (when ``own_terms``, the seat's ``term/...`` totals, are given), the causes in the game's
    words beside the references' (when ``own_causes`` are given) and lines of text saying where it stands."""
    episodes = seat_reference_episodes(config, seed, seat, population)
    refs = {n: e["return"] for n, e in episodes.items()}
    terms = {n: {k: v for k, v in e.items() if k.startswith("term/")} for n, e in episodes.items()}
    their_causes = {n: {k.removeprefix(PREFIX): v for k, v in e.items() if k.startswith(PREFIX)}
                    for n, e in episodes.items()}
    causes = cause_lines(role_of(config, seat), dict(own_causes), their_causes) if own_causes is not None else []
    best_name = max(refs, key=lambda n: refs[n])
    beaten = [n for n, r in refs.items() if own_return >= r - 1e-9]
    text = (f"Your return {own_return:.1f}; on the same seed in your seat "
            + ", ".join(f"{n} scored {r:.1f}" for n, r in refs.items())
            + (f". You matched or beat {', '.join(beaten)}." if beaten else ". You scored below every reference.")
            )
    losses = biggest_losses(own_terms, terms) if own_terms is not None else {}
    for name, loss in losses.items():
        if loss is not None and refs[name] > own_return + 1e-9:
            text += (f" Against {name} you lost most on {_term_name('term/' + loss['term'])}: yours "
                     f"{loss['yours']:.1f}, {name}'s {loss['theirs']:.1f}.")
    if NOTHING in refs and refs[NOTHING] >= max(r for n, r in refs.items() if n != NOTHING) - 1e-9:
        text += (" Declaring nothing at all scored as much as every other reference on this seed: against this "
                 "allocator, what this seat declares did not pay here (the allocator seat, or a scenario where teams "
                 "compete for scarce GPUs, is where choices count).")
    return {"seat": seat, "seed": seed, "scenario": config.name, "return": own_return, "references": refs,
            "reference_terms": terms, "causes": causes, "biggest_loss": losses, "best": best_name, "beaten": beaten, "text": text}


__all__ = ["NOTHING", "REFERENCES", "WAIT_SECONDS", "ReferencesBusy", "biggest_losses", "how_you_did",
           "seat_reference_episodes", "seat_reference_returns", "summary_args", "summary_of"]
