"use strict";
const DATA = JSON.parse(document.getElementById("replay-data").textContent);
const C = {declared:"#f28e2b", need:"#4e79a7", granted:"#59a14f", budget:"#4e79a7", carbon:"#9c755f", cap:"#e15759"};
const TIER = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"];
const AGENT = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const SHOCK = {__proto__: null, compliance_audit:"#b07aa1", customer_escalation:"#f28e2b", production_incident:"#e15759",
               market_crisis:"#edc948", grid_spike:"#76b7b2"};
const STANCE = ["accept", "counter", "escalate"];
const $ = (id) => document.getElementById(id);
// Every value from the recording reaches the page as text. Elements are built with `h`, whose
// string children become text nodes (never parsed as HTML); no markup is assembled from
// strings anywhere. A recording is data someone else may have written: opening it must not
// run its content.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = String(v);
    else if (k === "title") el.title = String(v);
    else if (k === "width") el.style.width = String(v);
    else if (k === "style") el.style.cssText = String(v);  // fixed literals below, never data
    else throw new Error(`unexpected attribute ${k}`);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
function fill(id, ...children) { $(id).replaceChildren(...children.flat()); }
const str = (v) => (v === null || v === undefined) ? "" : (typeof v === "object" ? JSON.stringify(v) : String(v));
const fmt = (v, d = 1) => (v === null || v === undefined) ? "–" : (typeof v === "number" ? v.toFixed(d) : str(v));
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
    ctx.fillText(str(e.kind).replace(/_/g, " "), 0, 0); ctx.restore();
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

const JOB_CLASSES = ["done", "missed", "running", "upcoming"];
function drawJobs() {
  const head = episode().header, rec = record();
  const jobs = rec ? rec.hidden.jobs : head.hidden.jobs;
  const now = rec ? rec.tick + 1 : 0;  // after the tick
  const rows = [];
  for (const team of head.teams) {
    const counts = {done: 0, missed: 0, running: 0, upcoming: 0};
    const chips = [];
    const own = jobs && Object.hasOwn(jobs, team) && Array.isArray(jobs[team]) ? jobs[team] : [];
    for (const j of own) {
      let cls = j.status === "pending" ? (j.arrival < now ? "running" : "upcoming") : j.status;
      if (!JOB_CLASSES.includes(cls)) cls = "upcoming";  // an unknown status never becomes a class name
      counts[cls] += 1;
      const progress = Number(j.work) ? Math.max(0, Math.min(1, 1 - Number(j.remaining) / Number(j.work))) : 0;
      const tip = `${str(j.id)}: ${cls}; ${str(j.gpus)} GPU(s) >=${str(j.min_memory_gb)} GB, work ${fmt(j.work, 2)} ` +
        `(left ${fmt(j.remaining, 2)}), arrival ${str(j.arrival)}, deadline ${str(j.deadline)}, value ${fmt(j.value)}, ` +
        `priority ${str(j.priority)}` + (j.done_tick >= 0 ? `, done at tick ${str(j.done_tick)}` : "");
      chips.push(h("span", {class: `chip ${cls}`, title: tip},
        cls === "running" ? h("i", {width: `${(100 * (progress || 0)).toFixed(0)}%`}) : null));
    }
    rows.push(h("div", {class: "team-row"}, h("div", {class: "team-name"}, str(team)),
      h("div", {}, h("div", {class: "chips"}, chips),
        h("div", {class: "muted"}, `${counts.done} done, ${counts.missed} missed, ${counts.running} running, ` +
          `${counts.upcoming} not arrived`))));
  }
  fill("jobs", rows);
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

// A table of text cells; a cell may also be an element built with `h` (e.g. `num`).
function table(head, rows) {
  return h("table", {}, h("tr", {}, head.map((c) => h("th", {}, str(c)))),
    rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c instanceof Node ? c : str(c))))));
}
function num(v, d = 2) {
  if (typeof v !== "number") return fmt(v);
  return h("span", {class: v < 0 ? "neg" : v > 0 ? "pos" : ""}, v.toFixed(d));
}
const list = (v) => Array.isArray(v) ? v.map(str).join(" ") : str(v);

function drawLog() {
  const head = episode().header, rec = record();
  if (!rec) { fill("log", h("p", {class: "muted"}, "no tick recorded in this episode")); return; }
  const a = rec.after, tiers = head.tiers.map((t) => str(t.name));
  const events = rec.outcome.events.map((e) => h("div", {class: "event"},
    `shock: ${str(e.kind)}`,
    e.team ? ` → ${str(e.team)}` + (e.job ? ` (job ${str(e.job)})` : "") : "",
    e.tier ? ` on ${str(e.tier)} (${str(e.gpus_offline)} GPUs offline)` : "",
    `, until tick ${str(e.until)}`));
  if (!events.length) events.push(h("div", {class: "muted"}, "no shock fired this tick"));
  if (a.active_shocks.length) events.push(h("div", {}, `still active next tick: ${a.active_shocks.map(str).join(", ")}`));
  const cut = Object.entries(rec.outcome.repairs).filter(([, v]) => v);
  const repairs = cut.length ? h("div", {}, "repaired (invalid units): " + cut.map(([k, v]) => `${k} ${str(v)}`).join(", "))
                             : h("div", {}, h("span", {class: "muted"}, "no repairs"));
  const state = h("div", {}, `budget ${fmt(a.budget)} · carbon ${fmt(a.carbon_used, 2)} / ${fmt(a.carbon_cap)} kg · ` +
    `intensity ${fmt(rec.outcome.intensity, 2)} · bought ${str(rec.outcome.bought)} · used ${str(rec.outcome.used)}`);
  const teams = table(["team", "declared", "true need (hidden)", "granted", "stance", "credibility", "revealed", "starved (hidden)"],
    head.teams.map((t, i) => [t, rec.seen ? list(rec.seen.declared[i]) : "?",
      list(rec.hidden.true_need[i]), list(rec.outcome.granted[i]), a.stance[i],
      fmt(a.credibility[i], 2), a.revealed[i] ? "yes" : "no", rec.hidden.starved[i] ? "yes" : "no"]));
  const actions = rec.actions ? table(["agent", "action"], Object.entries(rec.actions).map(([agent, parts]) =>
    [agent, Object.entries(parts).map(([k, v]) =>
      k === "stance" ? `stance ${STANCE[Array.isArray(v) ? v[0] : v] ?? str(v)}` : `${k} ${str(v)}`).join("; ")]))
    : h("span", {class: "muted"}, "actions not recorded");
  const termNames = [...new Set(Object.values(rec.reward_terms).flatMap((t) => Object.keys(t)))];
  const agents = Object.keys(rec.reward_terms);
  const terms = table(["term", ...agents], [
    [h("b", {}, "reward"), ...agents.map((ag) => num(rec.rewards[ag] ?? Object.values(rec.reward_terms[ag]).reduce((x, y) => x + y, 0)))],
    ...termNames.map((n) => [n, ...agents.map((ag) => Object.hasOwn(rec.reward_terms[ag], n) ? num(rec.reward_terms[ag][n]) : "")]),
  ]);
  fill("log",
    h("div", {}, events, repairs, state, h("h2", {style: "margin-top:8px"}, `teams (tiers: ${tiers.join(", ")})`), teams),
    h("div", {}, h("h2", {}, "actions"), actions, h("h2", {style: "margin-top:8px"}, "reward terms"), terms));
}

function drawSummary() {
  const e = episode(), s = e.summary;
  if (!s) { fill("summary", h("p", {class: "muted"}, "no summary line (the recording stopped mid-episode)")); return; }
  const info = s.episode_info || {};
  const alloc = info.allocator || {};
  const keys = ["completed", "missed", "completed_value", "missed_value", "spend", "idle_gpu_ticks", "invalid_units",
                "carbon_kg", "fairness", "utilisation", "justified_escalations", "unjustified_escalations", "exposed_bluffs"];
  const stats = table(["statistic", "value"], keys.filter((k) => Object.hasOwn(alloc, k)).map((k) => [k, fmt(alloc[k], 2)]));
  const returns = table(["agent", "return"], Object.entries(s.returns).map(([a, r]) => [a, num(r)]));
  fill("summary", h("div", {style: "display:flex;gap:24px;flex-wrap:wrap"},
    h("div", {}, returns, h("p", {class: "muted"}, `${s.complete ? "complete" : "abandoned before the end"}, ${str(s.ticks)} ticks`)),
    h("div", {}, stats)));
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
  $("title").textContent = `commons_arena replay: ${str(head.scenario)}`;
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
