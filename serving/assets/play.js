// The play page: a person takes one seat; the server plays every other seat.
// Talks only to the server that served it (same origin: /info, /play/spec, /reset, /step, /close).
// Reset and step bodies are openenv's models: the session's metadata is observation.metadata.
// Every value from the server reaches the page through textContent or attributes, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const STANCES = ["accept", "counter", "escalate"];
const state = {meta: null, spec: null, session: null, rewards: [], done: false, busy: false, observation: null,
               previewToken: 0, previewTimer: null, folded: false};
// Observation parts shown across the whole panel: their columns would not fit a grid cell.
const WIDE_FIELDS = new Set(["shocks_seen", "shocks_active", "stance", "revealed_need"]);
// What a seat reads to decide: shown beside the form (the rest of the observation is below).
const KEY_FIELDS = {
  allocator: ["declared", "online", "budget", "carbon_used", "carbon_cap"],  // the offer: in the tier costs table
  team: ["jobs", "need", "last_grant", "others_declared"],
  broker: ["inventory", "unit_cost", "demand", "crisis", "last_sold"],
};
// The jobs table beside the form: the columns that decide first, short headings (the legend says what each means).
const JOB_COLUMNS = [["gpus", "GPUs"], ["tier", "tier"], ["ticks_to_deadline", "due in"], ["value", "value"],
                     ["remaining_work", "work"], ["min_memory_gb", "GB"], ["priority", "prio"], ["ready", "ready"]];

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}
const fmt = (v) => (v === null || v === undefined) ? "–" :
  (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(2)) : String(v));

async function api(method, path, body) {
  const options = {method, headers: {}};
  if (body !== undefined) {
    options.headers["content-type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json();
  if (!response.ok) {
    const error = new Error((data.error && data.error.message) || data.detail || response.statusText);
    error.data = data.error || {};
    throw error;
  }
  return data;
}

function showError(message) { $("error").textContent = message || ""; }

// ------------------------------------------------------------------ setup
function fillSeats() {
  const scenario = state.meta.scenarios.find((s) => s.name === $("scenario").value);
  const select = $("seat"), previous = select.value;
  select.replaceChildren();
  for (const seat of scenario.seats) select.appendChild(el("option", {value: seat}, seat));
  select.value = scenario.seats.includes(previous) ? previous : (state.meta.default_seats[0] || scenario.seats[0]);
  if (!select.value) select.value = scenario.seats[0];
}

// Before an episode: every scenario this server offers, each with what it is about.
function drawScenarioList() {
  const list = el("ul", {id: "scenario-list"});
  for (const s of state.meta.scenarios) {
    const item = el("li", {"data-scenario": s.name});
    item.append(el("strong", {}, s.name), document.createTextNode(`: ${s.description || "no description"} ` +
      `(${s.max_ticks} ticks; teams ${s.teams.join(", ")})`));
    list.appendChild(item);
  }
  $("guide").append(el("h3", {}, "the scenarios on this server"), list);
}

async function init() {
  state.meta = await api("GET", "/info");
  for (const s of state.meta.scenarios) $("scenario").appendChild(el("option", {value: s.name, title: s.description}, s.name));
  $("scenario").value = state.meta.default_scenario;
  fillSeats();
  drawScenarioList();
  $("scenario").addEventListener("change", fillSeats);
  $("setup").addEventListener("submit", (ev) => { ev.preventDefault(); start().catch((e) => showError(e.message)); });
  $("action-form").addEventListener("submit", (ev) => { ev.preventDefault(); playTick().catch((e) => showError(e.message)); });
  $("zero").addEventListener("click", () => {
    for (const input of document.querySelectorAll("#action-fields [data-index]")) input.value = "0";
    if (state.observation) limitEntries(state.observation);
  });
  window.addEventListener("pagehide", closeSession);
  $("action-fields").addEventListener("input", () => {
    if (state.observation) limitEntries(state.observation);
    if ($("error").textContent) showError(rangeProblem());  // the line says what is wrong now, or goes
    schedulePreview();
  });
  $("action-fields").addEventListener("change", schedulePreview);
  let resizing = null;
  window.addEventListener("resize", () => {  // the chart is drawn in pixels: redraw it at the new size
    clearTimeout(resizing);
    resizing = setTimeout(() => { if (state.spec) drawRewards(); }, 100);
  });
}

// Leaving the page (closing the tab, navigating away) closes the session at once, not after the idle expiry.
function closeSession() {
  if (state.session) {
    const body = new Blob([JSON.stringify({session_id: state.session})], {type: "application/json"});
    navigator.sendBeacon("/close", body);
  }
  state.session = null;
}

async function start() {
  showError("");
  const scenario = $("scenario").value, seat = $("seat").value, seed = Number($("seed").value);
  if (!Number.isInteger(seed) || seed < 0) { showError("the seed must be a whole number, 0 or more"); return; }
  state.spec = await api("GET", `/play/spec?scenario=${encodeURIComponent(scenario)}&seat=${encodeURIComponent(seat)}`);
  if (state.session) await api("POST", "/close", {session_id: state.session}).catch(() => null);
  const first = await api("POST", "/reset", {seed, scenario, seats: [seat], record: true});
  state.session = first.observation.metadata.session_id;
  state.rewards = [];
  state.done = false;
  state.folded = false;
  $("guide-box").open = true;
  $("setup-box").open = false;
  buildForm(state.spec);
  drawGuide(state.spec);
  $("title").textContent = seat === state.spec.role ? `commons_arena: you are the ${seat}` :
    `commons_arena: you are ${seat} (a ${state.spec.role})`;
  $("role-badge").textContent = seat === state.spec.role ? seat : `${seat} · ${state.spec.role}`;
  const info = state.meta.scenarios.find((s) => s.name === scenario);
  $("meta").textContent = `scenario ${scenario} (hash ${info.hash}) · seed ${seed} · ${info.max_ticks} ticks · ` +
    `teams ${info.teams.join(", ")} · tiers ${info.tiers.join(", ")} · every other seat is played by the server`;
  $("download").hidden = true;
  $("download").removeAttribute("href");
  $("summary").replaceChildren(el("p", {class: "muted"}, "when the episode ends: your return beside what reference " +
    "policies scored in your seat on the same seed, your totals and the episode's"));
  $("log").replaceChildren(el("p", {class: "muted"}, "no tick played yet"));
  show(first);
}

// ------------------------------------------------------------------ what the seat is for
function drawGuide(spec) {
  const guide = spec.guide, box = $("guide");
  $("guide-title").textContent = `your seat: ${spec.seat === spec.role ? spec.seat : `${spec.seat} (a ${spec.role})`}: ` +
    "what it is for, what things cost, how you are scored";
  box.replaceChildren(el("p", {}, guide.purpose));
  box.appendChild(el("p", {class: "muted", id: "description"}, "About this scenario: " + guide.description));
  const tiers = el("table", {id: "tier-table"}), top = el("tr");
  for (const label of ["tier", "memory GB", "speed", "operating cost per granted GPU-tick", "power kW when busy"]) {
    top.appendChild(el("th", {}, label));
  }
  tiers.appendChild(top);
  for (const row of guide.tiers) {
    const tr = el("tr");
    for (const key of ["tier", "memory_gb", "speed", "op_cost", "power_kw"]) tr.appendChild(el("td", {}, fmt(row[key])));
    tiers.appendChild(tr);
  }
  box.appendChild(tiers);
  const rules = el("ul", {id: "rules"});
  for (const [label, text] of [["Where a job runs: ", guide.placement], ["", guide.lag], ["", guide.preview]]) {
    const item = el("li", {}, text);
    if (label) item.prepend(el("strong", {}, label));
    rules.appendChild(item);
  }
  box.appendChild(rules);
  box.appendChild(el("p", {}, "How you are scored: each tick's reward is the sum of these terms, each times its weight."));
  const table = el("table", {id: "scoring"});
  const head = el("tr");
  for (const label of ["term", "", "weight", "what it counts"]) head.appendChild(el("th", {}, label));
  table.appendChild(head);
  for (const row of guide.scoring) {
    const tr = el("tr", {"data-term": row.term});
    tr.appendChild(el("td", {}, row.term));
    tr.appendChild(el("td", {class: row.kind}, row.kind === "cost" ? "− cost" : "+ gain"));
    tr.appendChild(el("td", {}, `× ${fmt(row.weight)}`));
    tr.appendChild(el("td", {class: "meaning"}, row.meaning));
    table.appendChild(tr);
  }
  box.appendChild(table);
  const notes = el("ul");
  for (const note of guide.notes) notes.appendChild(el("li", {}, note));
  box.appendChild(notes);
  const facts = el("ul", {class: "muted"});
  for (const fact of guide.facts) facts.appendChild(el("li", {}, fact.trim()));
  box.appendChild(facts);
}

// ------------------------------------------------------------------ each tick's entries
// Each tick the form starts from a default a person can play as is (GET /sessions/{id}/default: the rule is said on
// the page, and what it lowered to stay in range is said under the form), not from last tick's entries.
function inputsOf(part) {
  return [...document.querySelectorAll(`fieldset[data-part="${part}"] [data-index]`)];
}

// The most each entry may be this tick (not the space's maximum) and why, from what the seat sees now.
function available(role, obs, part, flat) {
  const high = part.high[flat], tiers = part.shape[part.shape.length - 1], t = flat % tiers;
  if (role === "allocator" && part.name === "buy") {
    const price = obs.offer_price[t], afford = price > 0 ? Math.floor(obs.budget / price + 1e-9) : high;
    return [Math.min(high, obs.offer_qty[t], afford), `offered ${fmt(obs.offer_qty[t])}, budget ${fmt(obs.budget)} ` +
      `at ${fmt(price)} each`];
  }
  if (role === "allocator" && part.name === "grant") {
    const bought = Number(inputsOf("buy")[t].value) || 0;
    return [Math.min(high, obs.online[t] + bought), `online ${fmt(obs.online[t])} + bought ${bought}`];
  }
  if (role === "broker" && part.name === "quantity") return [Math.min(high, obs.inventory[t]), "your inventory now"];
  return [high, ""];
}

async function startEntries(obs) {
  const start = await api("GET", `/sessions/${encodeURIComponent(state.session)}/default`);
  if (state.observation !== obs) return;  // a newer tick arrived meanwhile
  for (const part of state.spec.action) {
    const values = [start.action[part.name]].flat(2);  // one number, a row, or rows: flat, in the inputs' order
    for (const input of inputsOf(part.name)) input.value = String(values[Number(input.dataset.index)]);
  }
  $("default-rule").textContent = start.rule;
  $("default-notes").textContent = start.notes.length ? "the default was lowered to stay in range: " +
    start.notes.join("; ") : "";
  limitEntries(obs);
  rangeProblem();
  schedulePreview();
  document.body.dataset.tick = String(obs.metadata.tick);  // the tick is ready to play (tests wait for this)
}

function limitEntries(obs) {
  for (const part of state.spec.action) {
    if (part.name === "stance") continue;
    for (const input of inputsOf(part.name)) {
      const [most, why] = available(state.spec.role, obs, part, Number(input.dataset.index));
      input.dataset.high = String(most);
      input.dataset.why = why;
      input.title = `${input.name}: ${input.dataset.low} to ${most}` + (why ? ` (${why})` : "");
      input.parentNode.querySelector(".range").textContent = `${input.dataset.low}–${most}`;
    }
  }
  warnOverGrant(obs);
}

// Grants above a tier's GPUs are the rules' business (cut, charged as invalid): said before, not refused.
function warnOverGrant(obs) {
  const box = document.querySelector('fieldset[data-part="grant"]');
  if (!box || state.spec.role !== "allocator") return;
  const part = state.spec.action.find((p) => p.name === "grant"), tiers = part.shape[1];
  const totals = new Array(tiers).fill(0), refused = new Array(tiers).fill(false);
  for (const input of inputsOf("grant")) {
    const t = Number(input.dataset.index) % tiers, value = Number(input.value) || 0;
    totals[t] += value;
    refused[t] = refused[t] || value > Number(input.dataset.high);  // the entry's own range error speaks for it
  }
  const lines = [];
  totals.forEach((total, t) => {
    const buy = Number(inputsOf("buy")[t].value) || 0, have = obs.online[t] + buy;
    if (total > have && !refused[t]) {
      lines.push(`${part.labels[1][t]}: ${total} granted, ${have} available (online ${fmt(obs.online[t])} + bought ` +
        `${buy}); the rules cut ${total - have} and charge them as invalid`);
    }
  });
  let warn = box.querySelector(".warn");
  if (!warn) { warn = el("p", {class: "warn", role: "status"}); box.appendChild(warn); }
  warn.textContent = lines.join("; ");
}

// ------------------------------------------------------------------ the action form
function inputFor(part, flat, labels) {
  const name = [part.name, ...labels].join(".");
  const low = part.low[flat], high = part.high[flat];
  const cell = el("td");
  if (part.name === "stance") {
    const select = el("select", {name, "data-index": flat, "aria-label": name});
    STANCES.forEach((label, i) => select.appendChild(el("option", {value: i}, `${i} ${label}`)));
    cell.appendChild(select);
  } else {
    // a text field, not type=number: a browser empties a number field holding "two", and the page could not say so
    cell.appendChild(el("input", {type: "text", inputmode: "numeric", autocomplete: "off", name, value: 0,
                                  "data-index": flat, "data-low": low, "data-high": high, "aria-label": name}));
    cell.appendChild(el("span", {class: "range"}, `${low}–${high}`));
  }
  return cell;
}

function buildForm(spec) {
  const box = $("action-fields");
  box.replaceChildren();
  for (const part of spec.action) {
    const fieldset = el("fieldset", {"data-part": part.name});
    const legend = el("legend", {}, part.name + " ");
    legend.appendChild(el("span", {class: "doc"}, part.doc + (part.axes.length ? ` (${part.axes.join(" × ")})` : "")));
    fieldset.appendChild(legend);
    const table = el("table");
    if (part.axes.length === 0) {
      const row = el("tr");
      row.appendChild(inputFor(part, 0, []));
      table.appendChild(row);
    } else {
      const columns = part.labels[part.axes.length - 1];
      const head = el("tr");
      if (part.axes.length === 2) head.appendChild(el("th", {}, part.axes[0]));
      for (const label of columns) head.appendChild(el("th", {}, label));
      table.appendChild(head);
      const rows = part.axes.length === 2 ? part.labels[0] : [null];
      rows.forEach((rowLabel, r) => {
        const row = el("tr");
        if (rowLabel !== null) row.appendChild(el("th", {}, rowLabel));
        columns.forEach((label, c) => {
          row.appendChild(inputFor(part, r * columns.length + c, rowLabel === null ? [label] : [rowLabel, label]));
        });
        table.appendChild(row);
      });
    }
    fieldset.appendChild(table);
    box.appendChild(fieldset);
  }
  $("play-tick").disabled = false;
  $("zero").disabled = false;
}

function readAction() {
  const action = {};
  for (const part of state.spec.action) {
    const size = part.shape.reduce((a, b) => a * b, 1), flat = new Array(size).fill(0);
    for (const input of document.querySelectorAll(`fieldset[data-part="${part.name}"] [data-index]`)) {
      const text = input.value.trim();
      // a number goes as a number; anything else goes as typed, and the server says what is wrong with it
      flat[Number(input.dataset.index)] = /^-?\d+$/.test(text) ? Number(text) : text;
    }
    if (part.axes.length === 0) action[part.name] = flat[0];
    else if (part.axes.length === 1) action[part.name] = flat;
    else {
      const width = part.shape[1];
      action[part.name] = part.labels[0].map((_, r) => flat.slice(r * width, (r + 1) * width));
    }
  }
  return action;
}

// The server checks every action; checking here first keeps a typo from costing a round trip.
function rangeProblem() {
  let problem = "";
  for (const input of document.querySelectorAll("#action-fields input[data-index]")) {
    const text = input.value.trim(), low = Number(input.dataset.low), high = Number(input.dataset.high);
    const value = /^-?\d+$/.test(text) ? Number(text) : NaN;
    let message = "";
    if (!Number.isInteger(value)) message = `${input.name} must be a whole number in [${low}, ${high}], got "${text}"`;
    else if (value < low || value > high) {
      message = `${input.name} = ${value} is outside its allowed range [${low}, ${high}]` +
        (input.dataset.why ? ` (${input.dataset.why})` : "");
    }
    input.classList.toggle("bad", message !== "");  // marked whenever checked: "marked red" is then true
    problem = problem || message;
  }
  return problem;
}

async function playTick() {
  if (!state.session || state.done || state.busy) return;
  const problem = rangeProblem();
  if (problem) { showError(problem); return; }
  state.busy = true;
  $("play-tick").disabled = true;
  try {
    showError("");
    show(await api("POST", "/step", {session_id: state.session, action: readAction()}));
  } catch (error) {
    showError(error.message);  // e.g. "grant.search.small = 9 is outside its allowed range [0, 6]"
  } finally {
    state.busy = false;
    $("play-tick").disabled = state.done;
  }
}

// ------------------------------------------------------------------ what the seat sees
function cellsFor(value) { return Array.isArray(value) ? value : [value]; }

function drawJobs(observation, div) {
  const guide = state.spec.guide, fields = state.spec.observation.find((p) => p.name === "jobs").labels[1];
  const table = el("table", {id: "jobs-table"}), head = el("tr");
  head.appendChild(el("th", {}, "job"));
  for (const [key, label] of JOB_COLUMNS) {
    const th = el("th", {}, label);
    th.title = key === "tier" ? guide.placement : guide.job_columns[key];
    if (key !== "tier") th.appendChild(el("span", {class: "unit"}, guide.job_columns[key]));
    head.appendChild(th);
  }
  table.appendChild(head);
  observation.jobs.forEach((row, r) => {
    if (!row[0]) return;  // an empty slot
    const tr = el("tr", {"data-slot": `slot${r}`});
    tr.appendChild(el("th", {}, `slot${r}`));
    for (const [key] of JOB_COLUMNS) {
      if (key === "tier") tr.appendChild(el("td", {"data-tier": `slot${r}`}, "…"));
      else tr.appendChild(el("td", {}, key === "ready" ? (row[fields.indexOf(key)] ? "yes" : "no") : fmt(row[fields.indexOf(key)])));
    }
    table.appendChild(tr);
  });
  if (table.children.length === 1) div.appendChild(el("p", {class: "muted"}, "no job waiting"));
  else div.appendChild(table);
  const legend = el("p", {class: "doc jobs-legend"}, JOB_COLUMNS.map(([key, label]) =>
    `${label}: ${key === "tier" ? "where it runs: the smallest tier whose memory fits, if the grant has its GPUs there" : guide.job_columns[key]}`).join(" · "));
  div.appendChild(legend);
}

function drawObservation(observation) {
  const box = $("observation"), keys = $("key-facts");
  box.replaceChildren();
  keys.replaceChildren();
  const guide = state.spec.guide, key = new Set(KEY_FIELDS[state.spec.role]), keyed = {};
  if (observation.tick === 0) keys.appendChild(el("p", {class: "note muted"}, guide.declarations_at_tick0));
  for (const part of state.spec.observation) {
    if (part.name === "tick") continue;
    const div = el("div", WIDE_FIELDS.has(part.name) ? {class: "wide-field", "data-field": part.name} :
      {"data-field": part.name, class: part.axes.length ? "" : "scalar"});
    if (part.name === "jobs") {
      div.appendChild(el("h3", {}, "your jobs "));
      div.firstChild.appendChild(el("span", {class: "doc"}, guide.fields.jobs));
      drawJobs(observation, div);
      keyed.jobs = div;
      continue;
    }
    const title = el("h3", {}, part.name + " ");
    title.appendChild(el("span", {class: "doc"}, guide.fields[part.name] || part.doc));
    div.appendChild(title);
    const table = el("table"), value = observation[part.name];
    if (part.axes.length === 0) {
      const row = el("tr");
      row.appendChild(el("td", {"data-field": part.name}, fmt(value)));
      table.appendChild(row);
    } else {
      const columns = part.labels[part.axes.length - 1], head = el("tr");
      if (part.axes.length === 2) head.appendChild(el("th", {}, ""));
      for (const label of columns) {
        const th = el("th", {}, label.replace(/_/g, " "));
        if (part.name === "jobs" && guide.job_columns[label]) {
          th.title = guide.job_columns[label];
          th.appendChild(el("span", {class: "unit"}, guide.job_columns[label]));
        }
        head.appendChild(th);
      }
      table.appendChild(head);
      const rows = part.axes.length === 2 ? value.map((row, r) => [part.labels[0][r], row]) : [[null, value]];
      for (const [label, values] of rows) {
        const row = el("tr");
        if (label !== null) row.appendChild(el("th", {}, label));
        for (const v of cellsFor(values)) row.appendChild(el("td", {}, fmt(v)));
        table.appendChild(row);
      }
    }
    div.appendChild(table);
    if (key.has(part.name)) keyed[part.name] = div;
    else box.appendChild(div);
  }
  for (const name of KEY_FIELDS[state.spec.role]) if (keyed[name]) keys.appendChild(keyed[name]);  // most telling first
}

// ------------------------------------------------------------------ the preview (POST /preview: serving/explain.py)
function schedulePreview() {
  clearTimeout(state.previewTimer);
  state.previewTimer = setTimeout(() => preview().catch((e) => showPreview([`no preview: ${e.message}`])), 120);
}

function showPreview(lines) {
  const list = $("preview-lines");
  list.replaceChildren();
  for (const line of lines) list.appendChild(el("li", {}, line));
}

async function preview() {
  if (!state.session || state.done) return;
  const token = ++state.previewToken;
  if (rangeProblem()) { showPreview(["fix the entries marked red to see what this action would do"]); return; }
  const result = await api("POST", "/preview", {session_id: state.session, action: readAction()});
  if (token !== state.previewToken) return;  // a newer preview is on its way
  showPreview(result.lines);
  drawTierCosts(result.tiers);
  for (const job of result.jobs || []) {
    const cell = document.querySelector(`[data-tier="${job.slot}"]`);
    if (cell) cell.textContent = job.smallest_fit || "none fits";
  }
  document.body.dataset.preview = String(state.observation.metadata.tick);
}

function drawTierCosts(rows) {
  const box = $("tier-costs");
  box.replaceChildren(el("h3", {}, "what one GPU costs this tick"));
  const columns = [["tier", "tier"], ["memory_gb", "GB"], ["op_cost", "operating cost"], ["power_kw", "kW"]];
  if (rows.length && rows[0].kg_co2_if_busy !== undefined) columns.push(["kg_co2_if_busy", "kg CO2 if busy"]);
  if (rows.length && rows[0].spot_price !== undefined) columns.push(["spot_offered", "spot offered"], ["spot_price", "spot price"]);
  const table = el("table", {id: "tier-costs-table"}), head = el("tr");
  for (const [, label] of columns) head.appendChild(el("th", {}, label));
  table.appendChild(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const [keyName] of columns) tr.appendChild(el("td", {}, fmt(row[keyName])));
    table.appendChild(tr);
  }
  box.appendChild(table);
}

// Round axis values: a step of 1, 2 or 5 times a power of ten, about `count` of them, from below lo to above hi.
function niceTicks(lo, hi, count) {
  if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  const raw = (hi - lo) / count, power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw - 1e-12);
  const out = [];
  for (let v = Math.floor(lo / step) * step; v < hi + step - 1e-9; v += step) out.push(Math.round(v / step) * step);
  return out;
}

function drawRewards() {
  const canvas = $("rewards"), dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 500, h = canvas.clientHeight || 220;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  const H = state.meta.scenarios.find((s) => s.name === state.spec.scenario).max_ticks;
  let sum = 0;
  const cumulative = state.rewards.map((r) => (sum += r));
  const values = [0, ...state.rewards, ...cumulative];
  const ticks = niceTicks(Math.min(...values), Math.max(...values), 4), lo = ticks[0], hi = ticks[ticks.length - 1];
  const box = {x0: 44, y0: 14, x1: w - 10, y1: h - 22};
  const ys = (v) => box.y1 - (v - lo) / (hi - lo) * (box.y1 - box.y0);
  const xs = (t) => box.x0 + (t + 0.5) / H * (box.x1 - box.x0);
  ctx.strokeStyle = "#e5e5e5"; ctx.fillStyle = "#666"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
  const digits = Math.max(0, -Math.floor(Math.log10(ticks[1] - ticks[0]) + 1e-9));
  for (const v of ticks) {
    ctx.beginPath(); ctx.moveTo(box.x0, ys(v)); ctx.lineTo(box.x1, ys(v)); ctx.stroke();
    ctx.fillText(v.toFixed(digits), box.x0 - 4, ys(v));
  }
  ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(box.x0, ys(0)); ctx.lineTo(box.x1, ys(0)); ctx.stroke();
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (let t = 0; t < H; t += Math.max(1, Math.ceil(H / 12))) ctx.fillText(String(t), xs(t), box.y1 + 4);
  const bw = (box.x1 - box.x0) / H * 0.6;
  state.rewards.forEach((r, t) => {
    ctx.fillStyle = r < 0 ? "#e15759" : "#59a14f";
    ctx.fillRect(xs(t) - bw / 2, Math.min(ys(r), ys(0)), bw, Math.abs(ys(r) - ys(0)) || 1);
  });
  ctx.strokeStyle = "#4e79a7"; ctx.fillStyle = "#4e79a7"; ctx.lineWidth = 2; ctx.beginPath();
  cumulative.forEach((v, t) => (t ? ctx.lineTo(xs(t), ys(v)) : ctx.moveTo(xs(t), ys(v))));
  ctx.stroke(); ctx.lineWidth = 1;
  for (const [t, v] of cumulative.entries()) { ctx.beginPath(); ctx.arc(xs(t), ys(v), 2.5, 0, 2 * Math.PI); ctx.fill(); }
}

// What a number means decides its colour: a cost (missed, idle, carbon, invalid, spend...) is red whatever its sign,
// a gain green; the score itself by its sign. kindOf gives "cost", "gain", "score" or "count".
function termKind(term) {
  const row = state.spec.guide.scoring.find((r) => r.term === term);
  return row ? row.kind : "count";
}

function statKind(key) {
  if (key.startsWith("term/")) return termKind(key.slice(5));
  const stat = state.spec.guide.episode_stats[key];
  return stat ? stat[0] : "count";
}

function statMeaning(key) {
  if (key.startsWith("term/")) {
    const row = state.spec.guide.scoring.find((r) => r.term === key.slice(5));
    return row ? `reward term, episode total: ${row.meaning.replace(/ this tick/g, "")}` : "";  // a total, not a tick
  }
  const stat = state.spec.guide.episode_stats[key];
  return stat ? stat[1] : "";
}

function weightOf(key) {
  const term = key.startsWith("term/") ? key.slice(5) : key;
  const row = state.spec.guide.scoring.find((r) => r.term === term);
  return row ? ` ×${fmt(row.weight)}` : "";
}

function keyValueTable(entries, kindOf, meaningOf, weights = false) {
  const table = el("table");
  for (const [key, value] of entries) {
    const row = el("tr", {"data-key": key});
    row.appendChild(el("td", {}, weights ? key + weightOf(key) : key));
    const cell = el("td", {}, fmt(value));
    let kind = kindOf(key);
    if (kind === "score") kind = value < 0 ? "cost" : value > 0 ? "gain" : "";
    if (kind === "cost" || kind === "gain") cell.className = kind + (value === 0 ? " zero" : "");
    row.appendChild(cell);
    const meaning = meaningOf(key);
    if (meaning) row.appendChild(el("td", {class: "muted meaning"}, meaning));
    table.appendChild(row);
  }
  return table;
}

function drawLog(frame) {
  const info = (frame.observation.metadata.info || {})[state.spec.seat] || {};
  const box = $("log");
  box.replaceChildren();
  if (frame.reward === null || frame.reward === undefined) {
    box.appendChild(el("p", {class: "muted"}, "no tick played yet"));
    return;
  }
  box.appendChild(el("div", {}, `reward ${fmt(frame.reward)} on tick ${frame.observation.metadata.tick - 1}`));
  const last = state.meta.scenarios.find((s) => s.name === state.spec.scenario).max_ticks - 1;
  for (const event of info.events || []) {
    box.appendChild(el("div", {class: "event"}, `shock: ${String(event.kind).replace(/_/g, " ")}` +
      (event.team ? ` → ${event.team}` : "") + (event.tier ? ` on ${event.tier}` : "") +
      (event.until >= last ? ", until the episode ends" : `, until tick ${event.until}`)));
  }
  if (info.credibility_lost) {  // each cause in words: which rule took it
    const lost = el("div", {class: "event", id: "credibility-lost"},
      `credibility lost ${fmt(info.credibility_lost.amount)}: ` + info.credibility_lost.causes.join("; "));
    box.appendChild(lost);
  }
  const repairs = Object.entries(info.repairs || {}).filter(([, v]) => v);
  if (repairs.length) box.appendChild(el("div", {}, "cut as invalid: " + repairs.map(([k, v]) => `${k} ${v}`).join(", ")));
  if (info.reward_terms) {
    box.appendChild(keyValueTable(Object.entries(info.reward_terms), termKind, (term) => {
      const row = state.spec.guide.scoring.find((r) => r.term === term);
      return row ? row.meaning : "";
    }, true));
  }
}

function drawSummary(frame) {
  const box = $("summary"), session = state.session;
  box.replaceChildren(el("p", {}, `episode over after ${frame.observation.metadata.tick} ticks` +
    (frame.observation.metadata.terminated ? " (every job resolved)" : " (time limit)") +
    "; the server is playing the reference policies in your seat on the same seed…"));
  const ask = (tries) => api("GET", `/sessions/${encodeURIComponent(session)}/summary`).then((summary) => {
    if (state.session === session) drawReferences(box, summary);
  }).catch((e) => {  // the server computes one set at a time: busy means "ask again shortly"
    if (e.data && e.data.code === "REFERENCES_BUSY" && tries > 0) setTimeout(() => ask(tries - 1), 2000);
    else box.appendChild(el("p", {class: "warn"}, "no references: " + e.message));
  });
  ask(5);
  const link = $("download");
  link.href = `/sessions/${encodeURIComponent(state.session)}/recording`;
  link.setAttribute("download", `commons_arena_${state.spec.scenario}_${state.spec.seat}.jsonl`);
  link.hidden = false;
}

function drawReferences(box, summary) {
  box.replaceChildren(el("p", {id: "how-you-did"}, summary.text));
  if (summary.causes.length) {  // what happened, in the game's words, each reference's count beside yours
    const causes = el("ul", {id: "causes"});
    for (const line of summary.causes) causes.appendChild(el("li", {}, line));
    box.append(el("h3", {}, "what happened (yours, then each reference's on the same seed)"), causes);
  }
  const rows = [["you", summary.return], ...Object.entries(summary.references)];
  const values = rows.map(([, v]) => v), lo = Math.min(0, ...values), hi = Math.max(0, ...values, lo + 1);
  const x = (v) => Math.round(120 * (v - lo) / (hi - lo));  // one axis for every bar, zero included
  const table = el("table", {id: "references"}), head = el("tr");
  for (const label of ["in your seat, same seed", "return", ""]) head.appendChild(el("th", {}, label));
  table.appendChild(head);
  for (const [name, value] of rows) {
    const tr = el("tr", {"data-ref": name});
    tr.appendChild(el("td", name === "you" ? {class: "you"} : {}, name));
    tr.appendChild(el("td", name === "you" ? {class: "you"} : {}, fmt(value)));
    const bar = el("td"), axis = el("div", {class: "refaxis"});
    const span = el("span", {class: name === "you" ? "refbar you" : "refbar"});
    span.style.left = `${Math.min(x(0), x(value))}px`;  // a negative return grows left of zero, a positive right
    span.style.width = `${Math.abs(x(value) - x(0))}px`;
    const zero = el("span", {class: "refzero"});
    zero.style.left = `${x(0)}px`;
    axis.append(span, zero);
    bar.appendChild(axis);
    tr.appendChild(bar);
    table.appendChild(tr);
  }
  box.appendChild(table);
  drawTermComparison(box, summary);
  box.appendChild(el("h3", {}, "your totals (your return and your reward terms, weighted)"));
  box.appendChild(keyValueTable(Object.entries(summary.your_totals), statKind, statMeaning, true));
  box.appendChild(el("h3", {}, state.spec.role === "team" ?
    "the whole episode (every team and seat, not just yours)" : "the whole episode (every seat)"));
  box.appendChild(keyValueTable(Object.entries(summary.episode_totals), statKind, statMeaning));
  document.body.dataset.summary = "1";
}

// Where the return went: each reward term, yours beside every reference's on the same seed, and per reference the
// term that cost you the most against it.
function drawTermComparison(box, summary) {
  const refs = Object.keys(summary.reference_terms || {});
  if (!refs.length) return;
  const terms = [...new Set([...Object.keys(summary.your_totals).filter((k) => k.startsWith("term/")),
    ...refs.flatMap((name) => Object.keys(summary.reference_terms[name]))])];
  box.appendChild(el("h3", {}, "where the return went: each reward term, yours beside the references'"));
  const wrap = el("div", {class: "scroll-x"}), table = el("table", {id: "term-comparison"}), head = el("tr");
  for (const label of ["term", "you", ...refs]) head.appendChild(el("th", label === "you" ? {class: "you"} : {}, label));
  table.appendChild(head);
  for (const key of terms) {
    const tr = el("tr", {"data-term": key.slice(5)});
    tr.appendChild(el("td", {}, key.slice(5).replace(/_/g, " ")));
    const yours = summary.your_totals[key] || 0;
    tr.appendChild(el("td", {class: "you"}, fmt(yours)));
    for (const name of refs) {
      const theirs = summary.reference_terms[name][key] || 0;
      const loss = (summary.biggest_loss || {})[name];
      const worst = loss && loss.term === key.slice(5);
      tr.appendChild(el("td", worst ? {class: "lost-most", title: `you lost the most against ${name} here`} : {},
        fmt(theirs)));
    }
    table.appendChild(tr);
  }
  wrap.appendChild(table);
  box.appendChild(wrap);
  const list = el("ul", {id: "biggest-loss"});
  for (const name of refs) {
    const loss = (summary.biggest_loss || {})[name];
    list.appendChild(el("li", {"data-ref": name}, loss ?
      `against ${name}: you lost the most on ${loss.term.replace(/_/g, " ")} (yours ${fmt(loss.yours)}, ` +
      `${name}'s ${fmt(loss.theirs)}: ${fmt(loss.behind)} behind)` :
      `against ${name}: you were at or above it on every term`));
  }
  box.appendChild(list);
}

function show(frame) {
  const tick = frame.observation.metadata.tick, H = state.meta.scenarios.find((s) => s.name === state.spec.scenario).max_ticks;
  if (frame.reward !== null && frame.reward !== undefined) state.rewards.push(frame.reward);
  state.done = frame.done;
  $("tick-label").textContent = frame.done ? `episode over (${tick} ticks)` : `tick ${tick} of ${H}`;
  $("tick-label").dataset.tick = String(tick);
  if (frame.done) document.body.dataset.tick = String(tick);  // otherwise once the form holds the tick's defaults
  document.body.dataset.done = frame.done ? "1" : "";
  document.body.dataset.summary = "";
  state.observation = frame.observation;
  drawObservation(frame.observation);
  if (!frame.done) startEntries(frame.observation).catch((e) => showError(e.message));
  if (tick >= 1 && !state.folded) {  // read once, then out of the way; what is on screen stays where it was
    const before = $("decide").getBoundingClientRect().top;
    $("guide-box").open = false;
    state.folded = true;
    window.scrollBy(0, $("decide").getBoundingClientRect().top - before);
  }
  drawRewards();
  drawLog(frame);
  $("play-tick").disabled = frame.done;
  if (frame.done) drawSummary(frame);
}

init().catch((error) => showError("could not reach the server: " + error.message));
