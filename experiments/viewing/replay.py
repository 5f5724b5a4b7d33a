"""Recording (JSONL) → one self-contained HTML replay page.

    commons-arena replay RUN.jsonl -o replay.html [--episode N]

The page needs no server and no network: styles, script and the episodes (as JSON) are
inline, and every panel is drawn by the page itself on ``<canvas>`` elements or as HTML.
A tick slider (also arrow keys, and a play button) moves through the episode; panels:

* GPUs per team and tier: declared (for this tick) vs true need (hidden) vs granted;
* jobs of every team (hidden): one chip per job, coloured by status, filled by progress;
* broker: GPUs sold per tier (bars) and the offer's unit price (lines);
* budget left and carbon used against the cap;
* cumulative reward per agent;
* the tick's log: shocks, repairs, actions, stances, credibility, reward terms.

Shocks are shaded on the time panels. Hidden truth is marked with a "hidden" badge.
"""

from __future__ import annotations

import html
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commons_arena.recording import jsonable, read_recording


def write_replay(jsonl_path: str | os.PathLike[str], html_path: str | os.PathLike[str],
                 episode: int | None = None) -> Path:
    """Write the replay page of the recording ``jsonl_path`` to ``html_path``.

    ``episode`` picks one episode (index in the file); ``None`` keeps them all, with an
    episode selector in the page. Returns the path written."""
    episodes = read_recording(jsonl_path)
    if episode is not None:
        if not -len(episodes) <= episode < len(episodes):
            raise ValueError(f"{jsonl_path}: episode {episode} out of range; the file has {len(episodes)}")
        episodes = [episodes[episode]]
    title = f"commons_arena replay: {episodes[0]['header']['scenario']} ({Path(jsonl_path).name})"
    page = render_page(episodes, title=title, source=Path(jsonl_path).name)
    out = Path(html_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def render_page(episodes: Sequence[dict[str, Any]], title: str, source: str = "") -> str:
    data = {"source": source, "episodes": [jsonable(e) for e in episodes]}
    # JSON inside <script>: escape what could end the element or confuse the HTML parser.
    blob = (
        json.dumps(data, separators=(",", ":"), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
    return (
        _TEMPLATE.replace("%%TITLE%%", html.escape(title))
        .replace("%%STYLE%%", _STYLE)
        .replace("%%SCRIPT%%", _SCRIPT)
        .replace("%%DATA%%", blob)
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m experiments.viewing.replay`` is ``commons-arena replay``: same defaults,
    same refusals, same one-line errors."""
    from experiments.cli import main as cli_main

    cli_main(["replay", *(sys.argv[1:] if argv is None else argv)])


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>%%TITLE%%</title>
<style>%%STYLE%%</style>
</head>
<body>
<header>
  <h1 id="title">commons_arena replay</h1>
  <div id="meta"></div>
  <div id="controls">
    <label id="episode-box">episode <select id="episode-select"></select></label>
    <button id="prev" type="button" title="previous tick (left arrow)">&#9664;</button>
    <input id="tick-slider" type="range" min="0" max="0" value="0" step="1" aria-label="tick">
    <button id="next" type="button" title="next tick (right arrow)">&#9654;</button>
    <button id="play" type="button">play</button>
    <span id="tick-label" data-tick=""></span>
  </div>
</header>
<main>
  <section class="panel wide"><h2>GPUs per team and tier <span class="hidden-badge">true need is hidden</span></h2>
    <canvas id="bars" class="chart tall"></canvas></section>
  <section class="panel"><h2>jobs <span class="hidden-badge">hidden</span></h2>
    <div id="jobs"></div>
    <div class="legend"><span class="chip done"></span>done <span class="chip missed"></span>missed
      <span class="chip running"><i style="width:50%"></i></span>running (fill: work done)
      <span class="chip upcoming"></span>not arrived</div></section>
  <section class="panel"><h2>broker: GPUs sold (bars) and unit price (lines)</h2>
    <canvas id="broker" class="chart"></canvas></section>
  <section class="panel"><h2>budget left and carbon used (% of start / of cap)</h2>
    <canvas id="money" class="chart"></canvas></section>
  <section class="panel"><h2>cumulative reward per agent</h2>
    <canvas id="returns" class="chart"></canvas></section>
  <section class="panel wide"><h2>this tick</h2><div id="log"></div></section>
  <section class="panel wide"><h2>episode summary</h2><div id="summary"></div></section>
</main>
<script type="application/json" id="replay-data">%%DATA%%</script>
<script>%%SCRIPT%%</script>
</body>
</html>
"""

_STYLE = """
:root { --fg:#222; --muted:#666; --line:#ddd; --bg:#fafafa; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { position:sticky; top:0; z-index:2; background:#fff; border-bottom:1px solid var(--line); padding:8px 16px; }
h1 { font-size:18px; margin:0 0 2px; }
h2 { font-size:14px; margin:0 0 6px; font-weight:600; }
#meta { color:var(--muted); font-size:12px; }
#controls { display:flex; align-items:center; gap:8px; margin-top:6px; flex-wrap:wrap; }
#tick-slider { flex:1 1 300px; min-width:200px; }
#tick-label { font-weight:600; min-width:150px; font-variant-numeric:tabular-nums; }
button { font:inherit; padding:2px 10px; }
main { display:grid; grid-template-columns:repeat(2, minmax(0, 1fr)); gap:12px; padding:12px 16px; }
.panel { background:#fff; border:1px solid var(--line); border-radius:6px; padding:10px; min-width:0; }
.panel.wide { grid-column:1 / -1; }
.chart { width:100%; height:220px; display:block; }
.chart.tall { height:260px; }
.hidden-badge { font-size:11px; font-weight:600; color:#fff; background:#7a3e9d; border-radius:3px; padding:1px 5px; margin-left:6px; }
.team-row { display:flex; align-items:flex-start; gap:8px; margin:4px 0; }
.team-name { width:90px; flex:none; font-weight:600; overflow:hidden; text-overflow:ellipsis; }
.chips { display:flex; flex-wrap:wrap; gap:3px; }
.chip { display:inline-block; position:relative; width:26px; height:16px; border-radius:3px; vertical-align:middle; overflow:hidden; }
.chip i { position:absolute; left:0; top:0; bottom:0; background:#1f3b5a; }
.chip.done { background:#59a14f; } .chip.missed { background:#e15759; }
.chip.running { background:#a0cbe8; } .chip.upcoming { background:#e0dcd8; }
.legend { color:var(--muted); font-size:12px; margin-top:6px; }
.legend .chip { width:14px; height:10px; margin-left:8px; }
#log { display:grid; grid-template-columns:repeat(auto-fit, minmax(320px, 1fr)); gap:10px; }
#log > div { overflow-x:auto; min-width:0; }
table { border-collapse:collapse; font-size:12px; font-variant-numeric:tabular-nums; }
th, td { border-bottom:1px solid var(--line); padding:2px 6px; text-align:right; }
th:first-child, td:first-child { text-align:left; }
.event { color:#b3261e; font-weight:600; }
.muted { color:var(--muted); }
.neg { color:#b3261e; } .pos { color:#2e7d32; }
@media (max-width: 900px) { main { grid-template-columns:1fr; } }
"""

_SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("replay-data").textContent);
const C = {declared:"#f28e2b", need:"#4e79a7", granted:"#59a14f", budget:"#4e79a7", carbon:"#9c755f", cap:"#e15759"};
const TIER = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"];
const AGENT = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const SHOCK = {compliance_audit:"#b07aa1", customer_escalation:"#f28e2b", production_incident:"#e15759",
               market_crisis:"#edc948", grid_spike:"#76b7b2"};
const STANCE = ["accept", "counter", "escalate"];
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;","'":"&#39;"}[c]));
const fmt = (v, d = 1) => (v === null || v === undefined) ? "–" : (typeof v === "number" ? v.toFixed(d) : String(v));
const signed = (v) => (v > 0 ? "+" : "") + fmt(v);
let ep = 0, idx = 0, timer = null;

function episode() { return DATA.episodes[ep]; }

// ------------------------------------------------------------------ canvas helpers
function canvas(id) {
  const el = $(id), dpr = window.devicePixelRatio || 1;
  const w = el.clientWidth || 600, h = el.clientHeight || 220;
  if (el.width !== Math.round(w * dpr) || el.height !== Math.round(h * dpr)) {
    el.width = Math.round(w * dpr); el.height = Math.round(h * dpr);
  }
  const ctx = el.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  return {ctx, w, h};
}
// An axis range [lo, hi] with a round step (about four steps; whole numbers if `integer`).
function scale(lo, hi, integer = false) {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / 4, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  let step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  if (integer) step = Math.max(1, Math.ceil(step));
  return {lo: Math.floor(lo / step + 1e-9) * step, hi: Math.ceil(hi / step - 1e-9) * step, step};
}
// A plot box with y grid and labels; returns the y scale (value -> pixel).
function frame(ctx, box, sc, opt = {}) {
  const {x0, y0, x1, y1} = box;
  const ys = (v) => y1 - ((v - sc.lo) / (sc.hi - sc.lo)) * (y1 - y0);
  ctx.strokeStyle = "#e5e5e5"; ctx.fillStyle = "#666"; ctx.lineWidth = 1;
  ctx.textAlign = opt.right ? "left" : "right"; ctx.textBaseline = "middle";
  const n = Math.round((sc.hi - sc.lo) / sc.step);
  for (let i = 0; i <= n; i++) {
    const v = sc.lo + i * sc.step, y = ys(v);
    if (!opt.noGrid) { ctx.beginPath(); ctx.moveTo(x0, y); ctx.lineTo(x1, y); ctx.stroke(); }
    const label = Math.abs(v - Math.round(v)) < 1e-9 ? String(Math.round(v)) : v.toFixed(1);
    ctx.fillText(label, opt.right ? x1 + 4 : x0 - 4, y);
  }
  ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(x0, y1); ctx.lineTo(x1, y1); ctx.stroke();
  return ys;
}
function legend(ctx, items, x, y) {
  ctx.textAlign = "left"; ctx.textBaseline = "middle";
  for (const [label, color] of items) {
    ctx.fillStyle = color; ctx.fillRect(x, y - 5, 10, 10);
    ctx.fillStyle = "#333"; ctx.fillText(label, x + 14, y);
    x += 24 + ctx.measureText(label).width;
  }
}
// Time axis shared by the broker, money and returns panels.
function timeAxis(ctx, box, H) {
  const xs = (t) => box.x0 + (t + 0.5) / H * (box.x1 - box.x0);
  ctx.fillStyle = "#666"; ctx.textAlign = "center"; ctx.textBaseline = "top";
  const step = Math.max(1, Math.ceil(H / 12));
  for (let t = 0; t < H; t += step) ctx.fillText(String(t), xs(t), box.y1 + 4);
  return xs;
}
function shocks(ctx, box, xs, H, ticks) {
  const slot = (box.x1 - box.x0) / H;
  for (const rec of ticks) rec.outcome.events.forEach((e, n) => {
    const color = SHOCK[e.kind] || "#999";
    const a = xs(e.tick) - slot / 2, b = xs(Math.min(e.until, H - 1)) + slot / 2;
    ctx.globalAlpha = e.tick <= currentTick() ? 0.22 : 0.08;
    ctx.fillStyle = color; ctx.fillRect(a, box.y0, b - a, box.y1 - box.y0);
    ctx.globalAlpha = 1;
    ctx.save(); ctx.translate(a + 3 + 12 * n, box.y0 + 2); ctx.rotate(Math.PI / 2);
    ctx.fillStyle = "#555"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
    ctx.fillText(e.kind.replace(/_/g, " "), 0, 0); ctx.restore();
  });
}
function cursor(ctx, box, xs) {
  const x = xs(currentTick());
  ctx.strokeStyle = "#222"; ctx.setLineDash([4, 3]); ctx.beginPath();
  ctx.moveTo(x, box.y0); ctx.lineTo(x, box.y1); ctx.stroke(); ctx.setLineDash([]);
}
function line(ctx, xs, ys, points, color, upto) {
  // Solid up to the current tick, faded after it (the future of the replay).
  for (const [faded, part] of [[false, points.filter((p) => p[0] <= upto)], [true, points.filter((p) => p[0] >= upto)]]) {
    if (!part.length) continue;
    ctx.globalAlpha = faded ? 0.25 : 1; ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 2;
    ctx.beginPath();
    part.forEach(([t, v], i) => { const X = xs(t), Y = ys(v); if (i) ctx.lineTo(X, Y); else ctx.moveTo(X, Y); });
    ctx.stroke();
    for (const [t, v] of part) { ctx.beginPath(); ctx.arc(xs(t), ys(v), 2.5, 0, 2 * Math.PI); ctx.fill(); }
  }
  ctx.globalAlpha = 1; ctx.lineWidth = 1;
}

// ------------------------------------------------------------------ state
function ticks() { return episode().ticks; }
function record() { return ticks()[idx] || null; }
function currentTick() { const r = record(); return r ? r.tick : 0; }

// ------------------------------------------------------------------ panels
function drawBars() {
  const {ctx, w, h} = canvas("bars"), head = episode().header, rec = record();
  const teams = head.teams, tiers = head.tiers.map((t) => t.name), N = teams.length, T = tiers.length;
  const need = rec ? rec.hidden.true_need : head.hidden.true_need;
  const declared = rec && rec.seen ? rec.seen.declared : null;
  const granted = rec ? rec.outcome.granted : null;
  const series = [["declared", declared], ["true need", need], ["granted", granted]];
  const colors = [C.declared, C.need, C.granted];
  let top = Math.max(...head.tiers.map((t) => t.owned + t.spot_inventory));
  for (const [, m] of series) if (m) for (const row of m) for (const v of row) top = Math.max(top, v);
  const box = {x0: 36, y0: 24, x1: w - 8, y1: h - 38};
  const ys = frame(ctx, box, scale(0, top * 1.1, true));
  const groups = N * T, gap = 0.6, units = groups + (N - 1) * gap;
  const gw = (box.x1 - box.x0) / units, bw = gw * 0.8 / 3;
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (let i = 0; i < N; i++) for (let k = 0; k < T; k++) {
    const gx = box.x0 + (i * T + k + i * gap) * gw + gw * 0.1;
    series.forEach(([, m], s) => {
      if (!m) return;
      const v = m[i][k];
      ctx.fillStyle = colors[s]; ctx.fillRect(gx + s * bw, ys(v), bw - 1, box.y1 - ys(v));
    });
    ctx.fillStyle = "#444"; ctx.fillText(tiers[k], gx + 1.5 * bw, box.y1 + 3);
    if (k === 0) {
      ctx.font = "bold 11px system-ui, sans-serif"; ctx.textAlign = "left";
      const revealed = rec && rec.after.revealed[i];
      ctx.fillText(teams[i] + (revealed ? "  (need revealed)" : ""), gx, box.y1 + 17);
      ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "center";
    }
  }
  legend(ctx, series.map(([label], s) => [label, colors[s]]), box.x0 + 4, 10);
  if (rec && !rec.seen) { ctx.fillStyle = "#999"; ctx.textAlign = "right"; ctx.fillText("declared unknown", box.x1, 10); }
}

function drawJobs() {
  const head = episode().header, rec = record();
  const jobs = rec ? rec.hidden.jobs : head.hidden.jobs;
  const now = rec ? rec.tick + 1 : 0;  // after the tick
  let out = "";
  for (const team of head.teams) {
    const counts = {done: 0, missed: 0, running: 0, upcoming: 0};
    let chips = "";
    for (const j of jobs[team] || []) {
      let cls = j.status;
      if (cls === "pending") cls = j.arrival < now ? "running" : "upcoming";
      counts[cls] += 1;
      const progress = j.work ? Math.max(0, Math.min(1, 1 - j.remaining / j.work)) : 0;
      const tip = `${j.id}: ${cls}; ${j.gpus} GPU(s) >=${j.min_memory_gb} GB, work ${fmt(j.work, 2)} ` +
        `(left ${fmt(j.remaining, 2)}), arrival ${j.arrival}, deadline ${j.deadline}, value ${fmt(j.value)}, priority ${j.priority}` +
        (j.done_tick >= 0 ? `, done at tick ${j.done_tick}` : "");
      chips += `<span class="chip ${cls}" title="${esc(tip)}">` +
        (cls === "running" ? `<i style="width:${(100 * progress).toFixed(0)}%"></i>` : "") + "</span>";
    }
    out += `<div class="team-row"><div class="team-name">${esc(team)}</div><div><div class="chips">${chips}</div>` +
      `<div class="muted">${counts.done} done, ${counts.missed} missed, ${counts.running} running, ${counts.upcoming} not arrived</div></div></div>`;
  }
  $("jobs").innerHTML = out;
}

function drawBroker() {
  const {ctx, w, h} = canvas("broker"), head = episode().header, recs = ticks();
  const H = head.max_ticks, T = head.tiers.length, now = currentTick();
  const box = {x0: 34, y0: 22, x1: w - 40, y1: h - 22};
  const soldMax = Math.max(2, ...recs.map((r) => r.outcome.bought.reduce((a, b) => a + b, 0))) * 1.2;
  const priceMax = Math.max(1, ...head.tiers.map((t) => t.max_price), ...recs.flatMap((r) => r.after.price_paid)) * 1.05;
  const ys = frame(ctx, box, scale(0, soldMax, true));
  const yp = frame(ctx, box, scale(0, priceMax), {right: true, noGrid: true});
  const xs = timeAxis(ctx, box, H);
  shocks(ctx, box, xs, H, recs);
  const bw = (box.x1 - box.x0) / H * 0.7;
  for (const r of recs) {
    let base = 0;
    r.outcome.bought.forEach((q, k) => {
      ctx.globalAlpha = r.tick <= now ? 0.6 : 0.2;
      ctx.fillStyle = TIER[k % TIER.length];
      ctx.fillRect(xs(r.tick) - bw / 2, ys(base + q), bw, ys(base) - ys(base + q));
      base += q;
    });
  }
  ctx.globalAlpha = 1;
  for (let k = 0; k < T; k++) line(ctx, xs, yp, recs.map((r) => [r.tick, r.after.price_paid[k]]), TIER[k % TIER.length], now);
  cursor(ctx, box, xs);
  legend(ctx, head.tiers.map((t, k) => [t.name, TIER[k % TIER.length]]), box.x0 + 4, 10);
  ctx.fillStyle = "#666"; ctx.textAlign = "right"; ctx.fillText("sold | price", box.x1 + 38, 10);
}

function drawMoney() {
  const {ctx, w, h} = canvas("money"), head = episode().header, recs = ticks();
  const H = head.max_ticks, now = currentTick(), cap = head.carbon.cap_kg, budget = head.budget;
  const box = {x0: 34, y0: 22, x1: w - 10, y1: h - 22};
  const money = recs.map((r) => [r.tick, budget ? 100 * r.after.budget / budget : 0]);
  const co2 = recs.map((r) => [r.tick, 100 * r.after.carbon_used / cap]);
  const ys = frame(ctx, box, scale(0, Math.max(120, ...co2.map((p) => p[1])) * 1.05));
  const xs = timeAxis(ctx, box, H);
  shocks(ctx, box, xs, H, recs);
  ctx.strokeStyle = C.cap; ctx.setLineDash([6, 4]); ctx.beginPath();
  ctx.moveTo(box.x0, ys(100)); ctx.lineTo(box.x1, ys(100)); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = C.cap; ctx.textAlign = "right"; ctx.textBaseline = "bottom";
  ctx.fillText(`carbon cap ${cap} kg (${head.carbon.mode})`, box.x1, ys(100) - 2);
  line(ctx, xs, ys, money, C.budget, now);
  line(ctx, xs, ys, co2, C.carbon, now);
  cursor(ctx, box, xs);
  legend(ctx, [[`budget left (of ${budget})`, C.budget], ["carbon used", C.carbon]], box.x0 + 4, 10);
}

function drawReturns() {
  const {ctx, w, h} = canvas("returns"), head = episode().header, recs = ticks();
  const H = head.max_ticks, now = currentTick();
  const box = {x0: 44, y0: 22, x1: w - 10, y1: h - 22};
  const series = head.agents.map((a) => { let s = 0; return recs.map((r) => [r.tick, (s += r.rewards[a] || 0)]); });
  const all = series.flat().map((p) => p[1]);
  const ys = frame(ctx, box, scale(Math.min(0, ...all), Math.max(0, ...all)));
  const xs = timeAxis(ctx, box, H);
  ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(box.x0, ys(0)); ctx.lineTo(box.x1, ys(0)); ctx.stroke();
  series.forEach((pts, i) => line(ctx, xs, ys, pts, AGENT[i % AGENT.length], now));
  cursor(ctx, box, xs);
  legend(ctx, head.agents.map((a, i) => [a, AGENT[i % AGENT.length]]), box.x0 + 4, 10);
}

function table(head, rows) {
  return "<table><tr>" + head.map((c) => `<th>${esc(c)}</th>`).join("") + "</tr>" +
    rows.map((r) => "<tr>" + r.map((c) => `<td>${c}</td>`).join("") + "</tr>").join("") + "</table>";
}
function num(v, d = 2) {
  if (typeof v !== "number") return esc(fmt(v));
  return `<span class="${v < 0 ? "neg" : v > 0 ? "pos" : ""}">${v.toFixed(d)}</span>`;
}

function drawLog() {
  const head = episode().header, rec = record();
  if (!rec) { $("log").innerHTML = '<p class="muted">no tick recorded in this episode</p>'; return; }
  const a = rec.after, tiers = head.tiers.map((t) => t.name);
  let events = rec.outcome.events.map((e) =>
    `<div class="event">shock: ${esc(e.kind)}${e.team ? " → " + esc(e.team) + (e.job ? " (job " + esc(e.job) + ")" : "") : ""}` +
    `${e.tier ? " on " + esc(e.tier) + " (" + e.gpus_offline + " GPUs offline)" : ""}, until tick ${e.until}</div>`).join("");
  if (!events) events = '<div class="muted">no shock fired this tick</div>';
  if (a.active_shocks.length) events += `<div>still active next tick: ${esc(a.active_shocks.join(", "))}</div>`;
  const cut = Object.entries(rec.outcome.repairs).filter(([, v]) => v);
  const repairs = cut.length ? "repaired (invalid units): " + cut.map(([k, v]) => `${esc(k)} ${v}`).join(", ")
                             : '<span class="muted">no repairs</span>';
  const state = `<div>budget ${fmt(a.budget)} · carbon ${fmt(a.carbon_used, 2)} / ${fmt(a.carbon_cap)} kg · ` +
    `intensity ${fmt(rec.outcome.intensity, 2)} · bought ${esc(JSON.stringify(rec.outcome.bought))} · ` +
    `used ${esc(JSON.stringify(rec.outcome.used))}</div>`;
  const teams = table(["team", "declared", "true need (hidden)", "granted", "stance", "credibility", "revealed", "starved (hidden)"],
    head.teams.map((t, i) => [esc(t), esc((rec.seen ? rec.seen.declared[i] : ["?"]).join(" ")),
      esc(rec.hidden.true_need[i].join(" ")), esc(rec.outcome.granted[i].join(" ")), esc(a.stance[i]),
      fmt(a.credibility[i], 2), a.revealed[i] ? "yes" : "no", rec.hidden.starved[i] ? "yes" : "no"]));
  const actions = rec.actions ? table(["agent", "action"], Object.entries(rec.actions).map(([agent, parts]) =>
    [esc(agent), esc(Object.entries(parts).map(([k, v]) =>
      k === "stance" ? `stance ${STANCE[v[0]] ?? v[0]}` : `${k} ${JSON.stringify(v)}`).join("; "))]))
    : '<span class="muted">actions not recorded</span>';
  const termNames = [...new Set(Object.values(rec.reward_terms).flatMap((t) => Object.keys(t)))];
  const agents = Object.keys(rec.reward_terms);
  const terms = table(["term", ...agents], [
    ["<b>reward</b>", ...agents.map((ag) => num(rec.rewards[ag] ?? Object.values(rec.reward_terms[ag]).reduce((x, y) => x + y, 0)))],
    ...termNames.map((n) => [esc(n), ...agents.map((ag) => n in rec.reward_terms[ag] ? num(rec.reward_terms[ag][n]) : "")]),
  ]);
  $("log").innerHTML = `<div>${events}<div>${repairs}</div>${state}<h2 style="margin-top:8px">teams (tiers: ${esc(tiers.join(", "))})</h2>${teams}</div>` +
    `<div><h2>actions</h2>${actions}<h2 style="margin-top:8px">reward terms</h2>${terms}</div>`;
}

function drawSummary() {
  const e = episode(), s = e.summary;
  if (!s) { $("summary").innerHTML = '<p class="muted">no summary line (the recording stopped mid-episode)</p>'; return; }
  const info = s.episode_info || {};
  const alloc = info.allocator || {};
  const keys = ["completed", "missed", "completed_value", "missed_value", "spend", "idle_gpu_ticks", "invalid_units",
                "carbon_kg", "fairness", "utilisation", "justified_escalations", "unjustified_escalations", "exposed_bluffs"];
  const stats = table(["statistic", "value"], keys.filter((k) => k in alloc).map((k) => [esc(k), fmt(alloc[k], 2)]));
  const returns = table(["agent", "return"], Object.entries(s.returns).map(([a, r]) => [esc(a), num(r)]));
  $("summary").innerHTML = `<div style="display:flex;gap:24px;flex-wrap:wrap"><div>${returns}` +
    `<p class="muted">${s.complete ? "complete" : "abandoned before the end"}, ${s.ticks} ticks</p></div><div>${stats}</div></div>`;
}

// ------------------------------------------------------------------ wiring
function show(i) {
  const n = ticks().length;
  idx = Math.max(0, Math.min(i, Math.max(0, n - 1)));
  $("tick-slider").value = String(idx);
  const rec = record(), head = episode().header;
  $("tick-label").textContent = rec ? `tick ${rec.tick} of ${head.max_ticks}` : "no ticks";
  $("tick-label").dataset.tick = rec ? String(rec.tick) : "";
  document.body.dataset.tick = rec ? String(rec.tick) : "";
  drawBars(); drawJobs(); drawBroker(); drawMoney(); drawReturns(); drawLog();
}

function selectEpisode(e) {
  ep = e;
  const head = episode().header, n = ticks().length;
  $("title").textContent = `commons_arena replay: ${head.scenario}`;
  $("meta").textContent = `scenario ${head.scenario} (hash ${head.scenario_hash}) · seed ${head.seed ?? "none"} · ` +
    `episode ${head.episode} · ${head.teams.length} teams · tiers ${head.tiers.map((t) => t.name).join(", ")} · ` +
    `${n} ticks recorded` + (DATA.source ? ` · ${DATA.source}` : "");
  $("tick-slider").max = String(Math.max(0, n - 1));
  drawSummary();
  show(0);
}

function stop() { if (timer) { clearInterval(timer); timer = null; $("play").textContent = "play"; } }

function init() {
  const select = $("episode-select");
  DATA.episodes.forEach((e, i) => {
    const opt = document.createElement("option");
    opt.value = String(i); opt.textContent = `${i}: ${e.header.scenario}, seed ${e.header.seed ?? "none"}`;
    select.appendChild(opt);
  });
  if (DATA.episodes.length < 2) $("episode-box").style.display = "none";
  select.addEventListener("change", () => { stop(); selectEpisode(Number(select.value)); });
  $("tick-slider").addEventListener("input", (ev) => show(Number(ev.target.value)));
  $("prev").addEventListener("click", () => { stop(); show(idx - 1); });
  $("next").addEventListener("click", () => { stop(); show(idx + 1); });
  $("play").addEventListener("click", () => {
    if (timer) { stop(); return; }
    if (idx >= ticks().length - 1) show(0);
    $("play").textContent = "pause";
    timer = setInterval(() => { if (idx >= ticks().length - 1) stop(); else show(idx + 1); }, 700);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.target === $("tick-slider") || ev.target.tagName === "SELECT") return;
    if (ev.key === "ArrowLeft") { stop(); show(idx - 1); }
    if (ev.key === "ArrowRight") { stop(); show(idx + 1); }
  });
  window.addEventListener("resize", () => show(idx));
  selectEpisode(0);
}

init();
"""


if __name__ == "__main__":
    main()
