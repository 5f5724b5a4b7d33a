"""Human-readable views of the state: ``ansi`` text and the ``rgb_array`` dashboard.

The dashboard (one frame per call, ``H x W x 3`` uint8) shows, for the last played tick:

* per team and tier: declared request (made last tick for this tick), true need (hidden)
  and granted GPUs, as grouped bars;
* each team's jobs: done, missed, running (arrived, unfinished; with work progress) and
  not yet arrived;
* the broker: GPUs sold per tier (bars) and the offer's unit price per tier (lines);
* budget left and carbon used, as a share of the starting budget and of the cap;
* shocks as shaded spans on the time panels, plus a text log of the tick: events,
  repairs, rewards, stances, credibility and revealed needs.

Frames are drawn from the same tick records as a recording (see ``recording.py``), so a
recorded episode can be turned back into frames with :func:`frames_from_recording`.
The figure is built once per environment (matplotlib's Agg canvas, no display) and
redrawn per frame; matplotlib is imported when the first dashboard is built, so making an
env (or starting the command line) does not pay for it. A live env's frames come from its public :class:`TickReport`
(``env.last_tick``) and state; time series need one ``render()`` per tick, and a skipped
tick leaves a gap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from commons_arena.recording import header_record, read_recording, tick_record
from commons_arena.scenario import ScenarioConfig
from commons_arena.view import ArenaState, TickReport

FRAME_SIZE = (12.8, 7.2)  # inches
FRAME_DPI = 75  # -> 960 x 540 pixels
COLORS = {"declared": "#f28e2b", "need": "#4e79a7", "granted": "#59a14f"}
JOB_COLORS = {"done": "#59a14f", "missed": "#e15759", "running": "#4e79a7", "upcoming": "#bab0ac"}
SHOCK_COLORS = {
    "compliance_audit": "#b07aa1",
    "customer_escalation": "#f28e2b",
    "production_incident": "#e15759",
    "market_crisis": "#edc948",
    "grid_spike": "#76b7b2",
}
TIER_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1")


def render_ansi(config: ScenarioConfig, s: ArenaState, last: TickReport | None) -> str:
    """A text summary of ``last`` (the tick just played, if any) and the state it left."""
    tiers = config.tier_names
    lines = [f"== {config.name} tick {s.t}/{config.max_ticks} | budget {s.budget:.1f} | "
             f"carbon {s.carbon_used:.1f}/{config.carbon.cap_kg:.1f} kg =="]
    if last is not None:
        lines.append(f"played tick {last.tick}: bought {dict(zip(tiers, last.bought.tolist(), strict=True))}")
        width = max(len(t) for t in config.team_names)
        for i, team in enumerate(config.team_names):
            declared = s.declared[i].tolist()
            lines.append(
                f"  {team:<{width}} granted {last.granted[i].tolist()} need {last.need[i].tolist()} "
                f"-> declares {declared} cred {s.credibility[i]:.2f}"
                + (" REVEALED" if s.revealed[i] else "")
            )
        for event in last.events:
            lines.append(f"  shock: {event}")
        cut = {k: v for k, v in last.repairs.as_dict().items() if v}
        if cut:
            lines.append(f"  repaired: {cut}")
        lines.append("  reward: " + ", ".join(f"{a} {r:+.2f}" for a, r in last.rewards.items()))
    lines.append(f"  offer for tick {s.t}: qty {s.offer_qty.tolist()} price {[round(p, 2) for p in s.offer_price.tolist()]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- rgb_array
class Dashboard:
    """One reusable figure; draws a frame from a header and the tick records so far.

    Axes, ticks and artists are built once per scenario layout (:meth:`_build`); a frame
    only updates their data, which keeps a frame well under 100 ms."""

    def __init__(self, size: tuple[float, float] = FRAME_SIZE, dpi: int = FRAME_DPI) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=size, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        grid = self.fig.add_gridspec(2, 3, left=0.05, right=0.96, top=0.9, bottom=0.08, hspace=0.42, wspace=0.36)
        self.ax_bars = self.fig.add_subplot(grid[0, :2])
        self.ax_jobs = self.fig.add_subplot(grid[0, 2])
        self.ax_broker = self.fig.add_subplot(grid[1, 0])
        self.ax_price = self.ax_broker.twinx()
        self.ax_money = self.fig.add_subplot(grid[1, 1])
        self.ax_log = self.fig.add_subplot(grid[1, 2])
        self.title = self.fig.suptitle("", fontsize=13, fontweight="bold")
        self._layout: tuple | None = None
        self._shocks: list[Any] = []
        self._dynamic: list[Any] = []  # artists redrawn every frame over a cached background
        self._background: Any = None
        # live play: the episode's state object, its header and tick records so far
        self._state: ArenaState | None = None
        self._header: dict[str, Any] | None = None
        self._ticks: list[dict[str, Any]] = []

    # ------------------------------------------------------------- sources
    def frame_from_play(self, config: ScenarioConfig, state: ArenaState | None, last: TickReport | None) -> np.ndarray:
        """The frame of a live env: ``state`` now, ``last`` the tick just played (``None`` after a reset).

        Ticks played without a frame are not in the time series (a gap)."""
        if state is None:
            return self.blank(f"{config.name}: call reset() before render()")
        if state is not self._state:  # a reset made a new state: new episode
            self._state = state
            self._header = header_record(config, None, 0, state)
            self._ticks = []
        if last is not None and (not self._ticks or self._ticks[-1]["tick"] < last.tick):
            self._ticks.append(tick_record(config, state, last))
        assert self._header is not None
        return self.draw(self._header, self._ticks)

    def blank(self, message: str) -> np.ndarray:
        for ax in self.fig.axes:
            ax.cla()
            ax.set_axis_off()
        self._layout = None
        self._dynamic, self._shocks, self._background = [], [], None
        self.title.set_animated(False)
        self.title.set_text(message)
        self.canvas.draw()
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()

    # ------------------------------------------------------------- layout (once per scenario)
    def _build(self, header: Mapping[str, Any]) -> None:
        from matplotlib.ticker import MaxNLocator

        for ax in self.fig.axes:
            ax.cla()
            ax.set_axis_on()
        self._shocks = []
        teams, tiers = list(header["teams"]), [t["name"] for t in header["tiers"]]
        N, T, H = len(teams), len(tiers), int(header["max_ticks"])
        capacity = max(t["owned"] + t["spot_inventory"] for t in header["tiers"])

        ax = self.ax_bars  # declared / need / granted per (team, tier)
        x = np.arange(N * T, dtype=float) + np.repeat(np.arange(N), T) * 0.6
        width = 0.27
        self.bars = {}
        for key, label, offset in (("declared", "declared", -width), ("need", "true need", 0.0),
                                   ("granted", "granted", width)):
            self.bars[key] = ax.bar(x + offset, np.zeros(N * T), width, color=COLORS[key], label=label)
        ax.set_xticks(x, [f"{team}\n{tier}" if j == 0 else tier for team in teams for j, tier in enumerate(tiers)],
                      fontsize=8)
        ax.set_xlim(x[0] - 0.6, x[-1] + 0.6)
        self.bars_top = capacity * 1.25 + 0.5
        ax.set_ylim(0, self.bars_top)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(axis="y", labelsize=8)
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=3, frameon=False,
                  borderaxespad=0.2)
        self.bars_title = ax.set_title("", fontsize=10, loc="left")
        self.revealed_marks = [ax.text(x[i * T] - width, self.bars_top * 0.93, "", fontsize=7, color=COLORS["need"])
                               for i in range(N)]

        ax = self.ax_jobs  # per team: done / missed / running / upcoming
        ax.set_title("jobs (hidden): done / missed / running / not arrived", fontsize=10)
        y = np.arange(N)[::-1].astype(float)
        self.job_bars = {key: ax.barh(y, np.zeros(N), height=0.6, color=color, label=key)
                         for key, color in JOB_COLORS.items()}
        self.job_progress = ax.barh(y, np.zeros(N), height=0.22, color="#1f3b5a")
        self.job_labels = {key: [ax.text(0, yi, "", ha="center", va="center", fontsize=8, color="white") for yi in y]
                           for key in JOB_COLORS}
        ax.set_yticks(y, teams, fontsize=8)
        ax.set_ylim(-0.6, N - 0.4)
        self.jobs_right = 1.0
        ax.set_xlim(0, self.jobs_right)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("jobs (dark strip: work done on running jobs)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)

        ax, axp = self.ax_broker, self.ax_price  # GPUs sold per tier (stacked bars), prices
        axp.yaxis.tick_right()  # cla() put the twin's axis back on the left
        axp.yaxis.set_label_position("right")
        axp.patch.set_visible(False)
        ax.set_title("broker: GPUs sold (bars), unit price (lines)", fontsize=10)
        ticks_x = np.arange(H, dtype=float)
        self.sold_bars = [ax.bar(ticks_x, np.zeros(H), 0.7, color=TIER_COLORS[k % 6], alpha=0.55) for k in range(T)]
        self.price_lines = [axp.plot([], [], marker=".", color=TIER_COLORS[k % 6], label=tiers[k])[0]
                            for k in range(T)]
        axp.legend(loc="upper left", fontsize=7, frameon=False, ncol=T)
        ax.set_xlim(-0.5, H - 0.5)
        ax.set_ylim(0, max(2.0, sum(t["spot_inventory"] for t in header["tiers"])) * 1.3)
        axp.set_ylim(0, max(t["max_price"] for t in header["tiers"]) * 1.3)
        ax.set_ylabel("GPUs sold", fontsize=8)
        axp.set_ylabel("price", fontsize=8)
        ax.set_xlabel("tick", fontsize=8)
        ax.tick_params(labelsize=8)
        axp.tick_params(labelsize=8)

        ax = self.ax_money  # budget and carbon, % of start / cap
        cap, budget = header["carbon"]["cap_kg"], header["budget"]
        ax.set_title(f"budget left (of {budget:g}) and carbon used (of {cap:g} kg cap, {header['carbon']['mode']})",
                     fontsize=10)
        self.budget_line = ax.plot([], [], color="#4e79a7", marker=".", label="budget left %")[0]
        self.carbon_line = ax.plot([], [], color="#9c755f", marker=".", label="carbon % of cap")[0]
        ax.axhline(100.0, color="#e15759", linestyle="--", linewidth=1)
        ax.text(H - 0.5, 101, "cap", color="#e15759", fontsize=7, ha="right", va="bottom")
        ax.set_xlim(-0.5, H - 0.5)
        self.money_top = 130.0
        ax.set_ylim(0, self.money_top)
        ax.set_xlabel("tick (value at the end of the tick)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(loc="center left", fontsize=7, frameon=False)

        ax = self.ax_log
        ax.set_axis_off()
        ax.set_title("this tick", fontsize=10)
        self.log_text = ax.text(0.0, 1.0, "", transform=ax.transAxes, fontsize=8, va="top", family="monospace")
        self._layout = (header.get("scenario_hash"), tuple(teams), tuple(tiers), H)
        self._dynamic = [
            self.title, self.bars_title, *self.revealed_marks,
            *(r for c in self.bars.values() for r in c),
            *(r for c in self.job_bars.values() for r in c), *self.job_progress,
            *(t for texts in self.job_labels.values() for t in texts),
            *(r for c in self.sold_bars for r in c), *self.price_lines,
            self.budget_line, self.carbon_line, self.log_text,
        ]
        for artist in self._dynamic:
            artist.set_animated(True)
        self._background = None

    # ------------------------------------------------------------- a frame
    def draw(self, header: Mapping[str, Any], ticks: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Frame for the last record in ``ticks`` (the reset state when ``ticks`` is empty)."""
        teams, tiers = list(header["teams"]), [t["name"] for t in header["tiers"]]
        if self._layout != (header.get("scenario_hash"), tuple(teams), tuple(tiers), int(header["max_ticks"])):
            self._build(header)
        last = ticks[-1] if ticks else None
        if last:
            ret = sum(t["rewards"].get("allocator", 0.0) for t in ticks)
            self.title.set_text(
                f"{header['scenario']}  |  tick {last['tick']} of {header['max_ticks']}  |  "
                f"allocator reward {last['rewards'].get('allocator', 0.0):+.1f} (return {ret:+.1f})"
            )
        else:
            self.title.set_text(f"{header['scenario']}  |  reset: no tick played yet")
        self._update_bars(header, last, len(teams))
        self._update_jobs(header, last, teams)
        self._update_broker(ticks, len(tiers), int(header["max_ticks"]))
        self._update_money(header, ticks)
        self._update_shocks(ticks)
        self._update_log(header, last, teams)
        return self._pixels()

    def _update_bars(self, header, last, N) -> None:
        if last is None:
            values = {"declared": None, "need": header["hidden"]["true_need"], "granted": None}
            self.bars_title.set_text("tick 0 not played: true need (hidden)")
        else:
            seen = last.get("seen")
            values = {"declared": seen["declared"] if seen else None, "need": last["hidden"]["true_need"],
                      "granted": last["outcome"]["granted"]}
            self.bars_title.set_text(f"tick {last['tick']}: GPUs per team and tier"
                                     + ("" if seen else " (declared unknown)"))
        top = 0.0
        for key, container in self.bars.items():
            flat = np.zeros(len(container)) if values[key] is None else np.asarray(values[key], float).ravel()
            top = max(top, float(flat.max(initial=0.0)))
            for rect, h in zip(container, flat, strict=True):
                rect.set_height(h)
        if top * 1.1 > self.bars_top:
            self.bars_top = top * 1.25
            self.ax_bars.set_ylim(0, self.bars_top)
            self._background = None
            for mark in self.revealed_marks:
                mark.set_y(self.bars_top * 0.93)
        revealed = last["after"]["revealed"] if last else [False] * N
        for mark, flag in zip(self.revealed_marks, revealed, strict=True):
            mark.set_text("need revealed to allocator" if flag else "")

    def _update_jobs(self, header, last, teams) -> None:
        jobs = (last or header)["hidden"]["jobs"]
        now = (last["tick"] + 1) if last else 0
        widest = 1
        for i, team in enumerate(teams):
            counts = {"done": 0, "missed": 0, "running": 0, "upcoming": 0}
            progress = 0.0
            for job in jobs[team]:
                if job["status"] != "pending":
                    counts[job["status"]] += 1
                elif job["arrival"] < now:
                    counts["running"] += 1
                    progress += (1.0 - job["remaining"] / job["work"]) if job["work"] else 0.0
                else:
                    counts["upcoming"] += 1
            left = 0.0
            for key, n in counts.items():
                rect = self.job_bars[key][i]
                rect.set_x(left)
                rect.set_width(n)
                label = self.job_labels[key][i]
                label.set_x(left + n / 2)
                label.set_text(str(n) if n else "")
                if key == "running":
                    self.job_progress[i].set_x(left)
                    self.job_progress[i].set_width(progress)
                left += n
            widest = max(widest, int(left))
        if widest != self.jobs_right:
            self.jobs_right = widest
            self.ax_jobs.set_xlim(0, widest * 1.05)
            self._background = None

    def _update_broker(self, ticks, T, H) -> None:
        sold = np.zeros((H, T))
        price = np.full((H, T), np.nan)
        for t in ticks:
            if 0 <= t["tick"] < H:
                sold[t["tick"]] = t["outcome"]["bought"]
                price[t["tick"]] = t["after"]["price_paid"]
        bottom = np.zeros(H)
        for k in range(T):
            for rect, b, h in zip(self.sold_bars[k], bottom, sold[:, k], strict=True):
                rect.set_y(b)
                rect.set_height(h)
            bottom += sold[:, k]
        played = np.array([t["tick"] for t in ticks if 0 <= t["tick"] < H], dtype=int)
        for k, line in enumerate(self.price_lines):
            line.set_data(played, price[played, k])

    def _update_money(self, header, ticks) -> None:
        cap, budget = header["carbon"]["cap_kg"], header["budget"]
        xs = [t["tick"] for t in ticks]
        self.budget_line.set_data(xs, [100.0 * t["after"]["budget"] / budget if budget else 0.0 for t in ticks])
        co2 = [100.0 * t["after"]["carbon_used"] / cap for t in ticks]
        self.carbon_line.set_data(xs, co2)
        top = max(130.0, max(co2, default=0.0) * 1.1)
        if top != self.money_top:
            self.money_top = top
            self.ax_money.set_ylim(0, top)
            self._background = None

    def _update_shocks(self, ticks) -> None:
        for artist in self._shocks:
            artist.remove()
        self._shocks = []
        for t in ticks:
            for event in t["outcome"]["events"]:
                color = SHOCK_COLORS.get(event["kind"], "#999999")
                for ax in (self.ax_broker, self.ax_money):
                    top = ax.get_ylim()[1]
                    self._shocks.append(ax.axvspan(event["tick"] - 0.5, event["until"] + 0.5, color=color,
                                                   alpha=0.18, linewidth=0, animated=True))
                    self._shocks.append(ax.text(event["tick"] - 0.45, top * 0.97, event["kind"].replace("_", " "),
                                                fontsize=6, color=color, va="top", rotation=90, animated=True))

    def _update_log(self, header, last, teams) -> None:
        if last is None:
            lines = [f"{len(teams)} teams, {len(header['tiers'])} tiers, {header['max_ticks']} ticks",
                     f"budget {header['budget']:g}, carbon cap {header['carbon']['cap_kg']:g} kg"]
        else:
            after = last["after"]
            lines = []
            for event in last["outcome"]["events"]:
                where = event.get("team") or event.get("tier") or ""
                lines.append(f"SHOCK {event['kind']} {where} (to tick {event['until']})")
            if after["active_shocks"]:
                lines.append("still active next tick: " + ", ".join(after["active_shocks"]))
            cut = {k: v for k, v in last["outcome"]["repairs"].items() if v}
            if cut:
                lines.append("repaired units:")
                lines.extend(f"  {k} {v}" for k, v in cut.items())
            lines.append("rewards:")
            items = [f"{a} {r:+.1f}" for a, r in last["rewards"].items()]
            lines.extend("  " + ", ".join(items[i:i + 3]) for i in range(0, len(items), 3))
            lines.append("stance on last grant, credibility:")
            for i, team in enumerate(teams):
                flag = ", need revealed" if after["revealed"][i] else ""
                lines.append(f"  {team}: {after['stance'][i]}, {after['credibility'][i]:.2f}{flag}")
            lines.append(f"budget {after['budget']:.1f}, carbon {after['carbon_used']:.1f} kg")
        self.log_text.set_text("\n".join(_shorten(line, 52) for line in lines[:18]))

    def _pixels(self) -> np.ndarray:
        """Blit: static parts (axes, ticks, legends) are drawn once per layout and cached;
        each frame restores them and draws only the artists whose data changes."""
        if self._background is None:
            self.canvas.draw()  # animated artists are left out of this pass
            self._background = self.canvas.copy_from_bbox(self.fig.bbox)
        self.canvas.restore_region(self._background)
        for artist in (*self._shocks, *self._dynamic):
            self.fig.draw_artist(artist)
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def frames_from_recording(path: str | os.PathLike[str], episode: int = 0) -> Iterator[np.ndarray]:
    """Dashboard frames of one recorded episode: the reset state, then one per tick."""
    recorded = read_recording(path)[episode]
    dashboard = Dashboard()
    ticks = recorded["ticks"]
    for n in range(len(ticks) + 1):
        yield dashboard.draw(recorded["header"], ticks[:n])
