"""Tournament aggregates: scores with CIs, the win matrix, openskill ratings and meta-game rankings.

All of it is computed from the stored episode rows of one roster:

* **scores** per player x scenario x background: the focal return, the normalised score
  ``(R - R_low) / (R_high - R_low)`` against the anchors' mean returns on the same seeds,
  and the plain ratio ``R / R_high`` (``return / oracle_return`` in the allocator seat),
  each a mean with its 95% Student-t CI over the seeds;
* the **win matrix**: how often the row player's focal return beats the column player's
  in the same cell (scenario, background, seed), ties counting one half;
* **ratings**: openskill's Plackett-Luce model, one match per cell, every player ranked by
  focal return (``mu``, ``sigma``, and ``mu - 3 sigma`` as a conservative rating), averaged
  over seeded random orders of the cells: openskill is an online filter whose last matches
  weigh most, and in the order of the table (scenario, background, seed) it once rated first
  a team that lost most of its pairwise comparisons (:func:`_openskill`);
* two **meta-game rankings** (Nash averaging, Balduzzi et al. 2018, *Re-evaluating
  evaluation*), each the maximin of a zero-sum game solved as a linear programme with
  ``scipy.optimize.linprog`` (HiGHS, shipped with scipy; no extra dependency):

  - entrant x background: the entrants' mean scores against each background, with each
    background's column centred on its mean over entrants so that the adversary weights
    the backgrounds that *separate* the entrants rather than the ones hard for everyone.
    ``nash_background_score`` is an entrant's mean score against the adversary's Nash
    mixture of backgrounds (the centring shifts every entrant equally, so the order is
    that of the centred game);
  - entrant x entrant: the antisymmetric game ``win - 1/2``; ``nash_win_rate`` is the win
    rate against the Nash mixture of entrants. Beating only weak entrants earns nothing
    here, because the Nash mixture puts no weight on dominated entrants.

  A zero-sum game's value is unique but its equilibrium may not be; HiGHS returns one
  vertex, deterministically. (Balduzzi's max-entropy Nash would pick the unique central one
  with a convex solver; the LP vertex keeps the dependency list as it is.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from experiments.evaluation.evaluate import STAT_COLUMNS, normalised_score, plain_ratio
from experiments.evaluation.roster import Roster
from experiments.evaluation.store import by_seed
from experiments.statistics import mean_ci95


def match_ranks(returns: Sequence[float]) -> list[int]:
    """Competition ranks, 1 = best: higher return ranks better, ties share the rank."""
    order = sorted(set(returns), reverse=True)
    position = {value: 1 + sum(1 for r in returns if r > value) for value in order}
    return [position[r] for r in returns]


def zero_sum_nash(payoff: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Maximin strategies of the zero-sum game where the row player gets ``payoff[i, j]``.

    Returns ``(row strategy, column strategy, value)``; both solved with HiGHS.
    """
    from scipy.optimize import linprog

    a = np.asarray(payoff, dtype=float)
    m, n = a.shape

    def maximin(matrix: np.ndarray) -> tuple[np.ndarray, float]:
        rows, cols = matrix.shape
        # variables: strategy x (rows), value v; maximise v s.t. matrix^T x >= v, sum x = 1
        c = np.zeros(rows + 1)
        c[-1] = -1.0
        a_ub = np.hstack([-matrix.T, np.ones((cols, 1))])
        a_eq = np.hstack([np.ones((1, rows)), np.zeros((1, 1))])
        res = linprog(c, A_ub=a_ub, b_ub=np.zeros(cols), A_eq=a_eq, b_eq=[1.0],
                      bounds=[(0, None)] * rows + [(None, None)], method="highs")
        if not res.success:  # a bounded LP with a feasible point: HiGHS does not fail on it
            raise RuntimeError(f"linprog failed on the meta-game: {res.message}")
        x = np.clip(res.x[:rows], 0.0, None)
        return x / x.sum(), float(res.x[-1])

    row, value = maximin(a)
    col, _ = maximin(-a.T)
    if m == 0 or n == 0:
        raise ValueError("empty meta-game")
    return row, col, value


def nash_win_rates(wins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Nash mixture of the symmetric game ``wins - 1/2`` and each player's win rate against it."""
    wins = np.asarray(wins, dtype=float)
    mixture, _, _ = zero_sum_nash(wins - 0.5)
    return mixture, wins @ mixture


@dataclass
class Aggregates:
    scores: list[dict[str, Any]] = field(default_factory=list)  # player x scenario x background
    episode_scores: list[dict[str, Any]] = field(default_factory=list)  # one per episode (plots)
    standings: list[dict[str, Any]] = field(default_factory=list)
    win_matrix: list[dict[str, Any]] = field(default_factory=list)  # rows: player, then one column per player
    crossplay: list[dict[str, Any]] = field(default_factory=list)  # entrant x background mean score
    metagame: list[dict[str, Any]] = field(default_factory=list)  # the Nash mixtures


def aggregate(roster: Roster, rows: Sequence[Mapping[str, Any]]) -> Aggregates:
    """Every table of the tournament from its stored rows (one per planned episode)."""
    players = [p.name for p in roster.players]
    entrants = [p.name for p in roster.entrants]
    backgrounds = list(roster.backgrounds)
    scenarios = [c.name for c in roster.scenarios]
    low, high = roster.anchor("low"), roster.anchor("high")
    returns: dict[tuple[str, str, str], dict[int, float]] = by_seed(rows, lambda row: row["focal_return"])
    episodes: dict[tuple[str, str, str], dict[int, Mapping[str, Any]]] = by_seed(rows, lambda row: row["episode"])
    seeds = list(roster.seeds)
    missing = [k for k in ((s, b, p) for s in scenarios for b in backgrounds for p in players)
               if sorted(returns.get(k, {})) != sorted(seeds)]
    if missing:
        raise ValueError(f"the store lacks episodes of {missing[:3]}{' ...' if len(missing) > 3 else ''}")

    out = Aggregates()
    score_of: dict[tuple[str, str, str], list[float]] = {}
    for s in scenarios:
        config = next(c for c in roster.scenarios if c.name == s)
        focal = roster.focal_agents(config)
        for b in backgrounds:
            means = {p: float(np.mean(list(returns[(s, b, p)].values()))) for p in players}
            r_low = means[low.name] if low else min(means.values())
            r_high = means[high.name] if high else max(means[p] for p in entrants)
            for p in players:
                values = [returns[(s, b, p)][seed] for seed in seeds]
                scores = [normalised_score(v, r_low, r_high) for v in values]
                ratios = [plain_ratio(v, r_high) for v in values]
                score_of[(s, b, p)] = scores
                mean_r, ci_r = mean_ci95(values)
                mean_s, ci_s = mean_ci95(scores) if not any(math.isnan(x) for x in scores) else (math.nan, math.nan)
                mean_q, ci_q = mean_ci95(ratios) if not any(math.isnan(x) for x in ratios) else (math.nan, math.nan)
                row: dict[str, Any] = {"player": p, "scenario": s, "background": b, "episodes": len(values),
                                       "return_mean": mean_r, "return_ci95": ci_r, "score": mean_s, "score_ci95": ci_s,
                                       "ratio": mean_q, "ratio_ci95": ci_q}
                first = episodes[(s, b, p)][seeds[0]][focal[0]]
                for column in STAT_COLUMNS:
                    if column in first:
                        row[column] = float(np.mean([episodes[(s, b, p)][seed][focal[0]][column] for seed in seeds]))
                out.scores.append(row)
                out.episode_scores += [{"scenario": f"{s} / {b}", "policy": p, "seed": seed, "score": sc}
                                       for seed, sc in zip(seeds, scores, strict=True)]

    cells = [(s, b, seed) for s in scenarios for b in backgrounds for seed in seeds]
    table = np.array([[returns[(s, b, p)][seed] for p in players] for s, b, seed in cells])  # cells x players
    wins = np.zeros((len(players), len(players)))
    for i in range(len(players)):
        for j in range(len(players)):
            wins[i, j] = np.mean((table[:, i] > table[:, j]) + 0.5 * (table[:, i] == table[:, j]))
    out.win_matrix = [{"player": p, **{q: float(wins[i, j]) for j, q in enumerate(players)}} for i, p in enumerate(players)]

    ratings, first_places = _openskill(players, table)

    # entrant x background meta-game (centred columns), and entrant x entrant from the win matrix
    idx = [players.index(e) for e in entrants]
    payoff = np.array([[np.nanmean([x for s in scenarios for x in score_of[(s, b, e)]]) for b in backgrounds]
                       for e in entrants])
    payoff_ok = np.isfinite(payoff).all()
    if payoff_ok:
        _, q_bg, _ = zero_sum_nash(payoff - payoff.mean(axis=0, keepdims=True))
        nash_bg = payoff @ q_bg
    else:
        q_bg, nash_bg = np.full(len(backgrounds), np.nan), np.full(len(entrants), np.nan)
    p_en, nash_win = nash_win_rates(wins[np.ix_(idx, idx)])
    out.metagame = ([{"game": "entrant x background", "side": "background", "name": b, "weight": float(w)}
                     for b, w in zip(backgrounds, q_bg, strict=True)]
                    + [{"game": "entrant x entrant", "side": "entrant", "name": e, "weight": float(w)}
                       for e, w in zip(entrants, p_en, strict=True)])
    out.crossplay = [{"entrant": e, **{b: float(payoff[i, j]) for j, b in enumerate(backgrounds)}}
                     for i, e in enumerate(entrants)]

    for i, p in enumerate(players):
        mean_score = float(np.nanmean([x for s in scenarios for b in backgrounds for x in score_of[(s, b, p)]]))
        entrant = p in entrants
        row = {
            "player": p,
            "anchor": next(pl.anchor for pl in roster.players if pl.name == p) or "-",
            "rating": float(ratings[p].ordinal()),  # mu - 3 sigma: a conservative skill estimate
            "mu": float(ratings[p].mu),
            "sigma": float(ratings[p].sigma),
            "mean_score": mean_score,
            "nash_background_score": float(nash_bg[entrants.index(p)]) if entrant else math.nan,
            "nash_win_rate": float(nash_win[entrants.index(p)]) if entrant else math.nan,
            "mean_win_rate": float(np.mean(np.delete(wins[i], i))) if len(players) > 1 else math.nan,
            "wins": int(first_places[p]),
            "matches": len(cells),
        }
        out.standings.append(row)
    out.standings.sort(key=lambda r: r["rating"], reverse=True)
    return out


RATING_ORDERS = 16  # orders of the cells the openskill ratings are averaged over


def _openskill(players: Sequence[str], table: np.ndarray, orders: int = RATING_ORDERS
               ) -> tuple[dict[str, Any], dict[str, int]]:
    """Plackett-Luce ratings, the mean over ``orders`` seeded shuffles of the cells; first places per player.

    openskill is an online filter: each match moves the ratings, and its dynamics factor
    (tau) keeps sigma from shrinking, so the last matches weigh most. Fed the cells in table
    order (scenario, then background, then seed) a player that wins only in the last
    background came out rated first although it lost most of its pairwise comparisons
    (issue 18). The cells of a tournament are exchangeable, so the rating here is the mean
    ``mu`` and ``sigma`` over random orders (seeded: the same table always gives the same
    ratings); it then agrees with the win matrix on who is stronger."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    firsts = dict.fromkeys(players, 0)
    ranks_of = [match_ranks([float(x) for x in returns]) for returns in table]
    for ranks in ranks_of:
        for p, r in zip(players, ranks, strict=True):
            firsts[p] += r == 1
    if len(players) < 2:
        return {p: model.rating(name=p) for p in players}, firsts
    rng = np.random.default_rng(0)
    mus, sigmas = np.zeros(len(players)), np.zeros(len(players))
    for _ in range(orders):
        ratings = [model.rating(name=p) for p in players]
        for cell in rng.permutation(len(ranks_of)):
            ratings = [team[0] for team in model.rate([[r] for r in ratings], ranks=ranks_of[cell])]
        mus += [r.mu for r in ratings]
        sigmas += [r.sigma for r in ratings]
    return {p: model.rating(mu=mu / orders, sigma=sigma / orders, name=p)
            for p, mu, sigma in zip(players, mus, sigmas, strict=True)}, firsts


__all__ = ["Aggregates", "aggregate", "match_ranks", "nash_win_rates", "plain_ratio", "zero_sum_nash"]
