// The fleet page: plain JavaScript, no build step, nothing from the internet.
// Everything a device sends is shown as text (textContent), never as HTML.
"use strict";

const state = {
  csrf: "", approvals: false, stream: false, broker: false, devices: new Map(), history: new Map(), events: [], pending: new Map(),
  tools: [], selected: "", sort: { key: "device", desc: false }, filter: "",
  // The table is fetched from the server a page at a time (sorted and filtered there): `order` holds
  // the device at each position of the list as far as fetched, `matched` how many the list has.
  order: [], matched: 0, counts: {}, asked: new Set(), query: 0, rollouts: new Map(),
};
const ROW_H = 29;  // px: every row of the device list is this tall (style.css), so only those on screen are drawn
const PAGE = 200;  // rows fetched at a time
const OVERSCAN = 10;  // rows drawn above and below the visible ones
const MAX_EVENTS = 200;
const $ = (id) => document.getElementById(id);

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-CSRF-Token": state.csrf },
  };
  const response = await fetch(path, { credentials: "same-origin", ...options });
  if (response.status === 401) { location.href = "/login"; throw new Error("logged out"); }
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

// -- the table ---------------------------------------------------------------------------
function ago(ts) {
  if (!ts) return "—";
  const s = Math.max(0, Math.round(Date.now() / 1000 - ts));
  return s < 90 ? `${s} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
}
function fixed(v, digits) { return v === null || v === undefined ? "—" : Number(v).toFixed(digits); }

const COLUMNS = [
  ["device", (r) => r.device], ["state", (r) => r.state], ["last_seen", (r) => ago(r.last_seen)],
  ["version", (r) => r.version || "—"], ["board", (r) => r.board || "—"],
  ["cpu_temp_c", (r) => fixed(r.cpu_temp_c, 1)], ["load_1m", (r) => fixed(r.load_1m, 2)],
  ["mem_used_pct", (r) => fixed(r.mem_used_pct, 1)], ["outbox_depth", (r) => fixed(r.outbox_depth, 0)],
  ["sandbox", (r) => r.sandbox || "—"], ["groups", (r) => (r.groups || []).join(", ")],
  ["trust", (r) => trustText(r)], ["update", (r) => updateText(r)],
];
// Where the device is with updates: "deferred 0.3.0" while its update lock holds one back.
function updateText(r) {
  if (!r.update) return "—";
  return r.update_version && r.update !== "idle" ? `${r.update} ${r.update_version}` : r.update;
}
// What the page could check of a device's key (docs/fleet.md#device-keys).
const TRUST = { verified: "verified", unverifiable: "unverifiable", key_changed: "KEY CHANGED", forged: "forged" };
function trustText(r) {
  const base = TRUST[r.trust] || "unverifiable";
  return r.forged ? `${base} (${r.forged} forged dropped)` : base;
}
// A question is answerable only when its device signed it; copies in its name are listed apart.
const questionKey = (q) => q.trust === "verified" ? `${q.device}/${q.id}` : `${q.device}/${q.id}/${q.trust}`;

function query(offset) {
  const sort = (state.sort.desc ? "-" : "") + state.sort.key;
  const q = encodeURIComponent(state.filter.trim());
  return `/api/devices?offset=${offset}&limit=${PAGE}&sort=${sort}&q=${q}`;
}

// The rows between `first` and `last` fetched, unless already there or asked for.
async function fetchRows(first, last) {
  const generation = state.query;
  for (let offset = Math.floor(first / PAGE) * PAGE; offset <= last; offset += PAGE) {
    const have = state.order.slice(offset, offset + PAGE);
    if (state.asked.has(offset) || (have.length === PAGE && !have.includes(undefined))) continue;
    state.asked.add(offset);
    try {
      const page = await api(query(offset));
      if (generation !== state.query) return;  // the sort or the filter changed meanwhile
      state.matched = page.matched;
      state.counts = page.counts;
      state.order.length = Math.min(state.order.length, page.matched);
      page.rows.forEach((r, i) => { state.order[offset + i] = r.device; state.devices.set(r.device, r); });
    } finally { state.asked.delete(offset); }
    scheduleTable();
  }
}

// Forget the fetched order (the sort, the filter or the list changed) and fetch what is on screen.
function refetch() {
  state.query += 1;
  state.order = []; state.asked.clear();
  const { first, last } = visible();
  fetchRows(first, last).catch(() => {});
}

function visible() {
  const box = $("device-list");
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - OVERSCAN);
  const last = Math.min(Math.max(state.matched, 1), Math.ceil((box.scrollTop + box.clientHeight) / ROW_H) + OVERSCAN);
  return { first, last };
}

function rowNode(r) {
  const tr = el("tr", null, { "data-device": r.device, "data-state": r.state });
  if (r.device === state.selected) tr.classList.add("selected");
  for (const [name, show] of COLUMNS) {
    const td = el("td", show(r), { "data-key": name });
    if (name === "state") td.className = `state-${r.state}`;
    if (name === "trust") {
      td.className = `trust-${r.trust}`;
      if (r.trust_note) td.title = r.trust_note;
    }
    if (name === "update") {
      td.className = `update-${r.update || "none"}`;
      if (r.update_reason) td.title = r.update_reason;
    }
    tr.append(td);
  }
  tr.addEventListener("click", () => openDevice(r.device));
  return tr;
}

// Only the rows on screen (and a few around) are in the document: 10,000 devices draw as fast as 30.
function renderTable() {
  const { first, last } = visible();
  const shown = [];
  let missing = false;
  for (let i = first; i < Math.min(last, state.matched); i++) {
    const r = state.devices.get(state.order[i]);
    if (r) shown.push(rowNode(r)); else missing = true;
  }
  if (missing) fetchRows(first, last).catch(() => {});
  $("device-sizer").style.height = `${state.matched * ROW_H}px`;
  $("devices").style.transform = `translateY(${(shown.length ? first : 0) * ROW_H}px)`;
  $("devices").querySelector("tbody").replaceChildren(...shown);
  const { key, desc } = state.sort;
  for (const th of $("devices").querySelectorAll("th")) {
    th.classList.toggle("sorted", th.dataset.key === key);
    th.classList.toggle("desc", th.dataset.key === key && desc);
  }
  const c = state.counts;
  $("counts").textContent = c.devices === undefined ? "" : `${c.online} online, ${c.devices - c.online} offline` +
    (state.matched !== c.devices ? ` (${state.matched} shown)` : "");
  const groups = new Set([...state.devices.values()].flatMap((r) => r.groups || []));
  for (const select of [$("bc-group"), $("up-group")]) {
    const have = new Set([...select.options].map((o) => o.value));
    for (const g of [...groups].sort()) if (!have.has(g)) select.append(el("option", `group ${g}`, { value: g }));
  }
}

// A batch of rows changed: those held are updated in place; the order is fetched again (at most
// every REORDER_MS) when devices came or went or the list is sorted by what changes.
const REORDER_MS = 2000;
let reorderTimer = 0;
function takeBatch(batch) {
  const before = state.counts.devices;
  state.counts = batch.counts;
  let reorder = batch.gone.length > 0 || batch.counts.devices !== before;
  for (const r of batch.rows) {
    if (!state.devices.has(r.device)) continue;  // not fetched: not on screen either
    state.devices.set(r.device, r);
    reorder = reorder || state.sort.key !== "device" || state.filter.trim() !== "";
  }
  for (const name of batch.gone) state.devices.delete(name);
  if (reorder && !reorderTimer) reorderTimer = setTimeout(() => { reorderTimer = 0; refetch(); }, REORDER_MS);
  for (const h of batch.points) {
    if (h.device !== state.selected) continue;
    const points = state.history.get(h.device) || [];
    points.push(h.point);
    while (points.length > 720) points.shift();
    state.history.set(h.device, points);
    renderCharts();
  }
  scheduleTable();
}

// -- events and approvals --------------------------------------------------------------------
function eventLine(e) {
  const t = new Date((e.ts || 0) * 1000).toLocaleTimeString();
  const what = e.kind ? `${e.kind} ${e.decision || e.outcome || e.what || ""}` : `${e.tool} ${e.outcome || ""}`;
  const who = e.by || e.caller;  // a decision names who decided; a call, who called
  return `${t} ${e.device} ${what} ${who ? "by " + who : ""}`.trim();
}
function renderEvents() {
  const recent = state.events.slice(-100).reverse();
  $("events").replaceChildren(...recent.map((e) => el("li", eventLine(e))));
  if (state.selected) {
    const mine = state.events.filter((e) => e.device === state.selected).slice(-50).reverse();
    $("device-events").replaceChildren(...mine.map((e) => el("li", eventLine(e))));
  }
}

function renderApprovals() {
  const now = Date.now() / 1000;
  for (const [k, q] of state.pending) if (q.expires_at && q.expires_at < now) state.pending.delete(k);
  $("approvals-count").textContent = String([...state.pending.values()].filter((q) => q.trust === "verified").length);
  $("approvals-off").hidden = state.approvals;
  $("approval-list").replaceChildren(...[...state.pending.values()].map((q) => {
    const li = el("li", null, { "data-approval": q.id, "data-device": q.device, "data-trust": q.trust });
    if (q.trust !== "verified") {
      // Never answerable here: shown so the operator knows someone publishes in the device's name.
      li.className = "suspect";
      li.append(el("strong", q.trust === "forged"
        ? `FORGED in the name of ${q.device}: not signed with its key — do not act on it`
        : `UNVERIFIABLE: ${q.device}'s signature cannot be checked — answer it elsewhere`));
      li.append(el("div", `claims: ${q.tool}`, { class: "note" }), el("code", q.summary || ""));
      return li;
    }
    li.append(el("strong", `${q.device}: ${q.tool}`), el("code", q.summary || ""));
    li.append(el("div", `asked by ${q.caller || q.sender || "?"}, expires ${ago(q.expires_at).replace(" ago", "")}`,
      { class: "note" }));
    for (const [decision, label] of [["allow-once", "Approve once"], ["allow-always", "Approve always"], ["deny", "Deny"]]) {
      const b = el("button", label, { type: "button", "data-decision": decision });
      b.disabled = !state.approvals;
      b.addEventListener("click", () => decide(q, decision, li));
      li.append(b);
    }
    return li;
  }));
}

async function decide(q, decision, li) {
  for (const b of li.querySelectorAll("button")) b.disabled = true;
  try {
    const r = await api("/api/approve", { device: q.device, id: q.id, decision });
    if (r.answer && r.answer.ok === false) throw new Error(r.answer.error || r.answer.code);
    state.pending.delete(questionKey(q));
    renderApprovals();
  } catch (err) {
    li.append(el("p", String(err.message || err), { class: "error" }));
    for (const b of li.querySelectorAll("button")) b.disabled = false;
  }
}

// -- the device view -------------------------------------------------------------------------
async function openDevice(name) {
  state.selected = name;
  $("device").hidden = false;
  $("device-name").textContent = name;
  renderTable();
  try {
    const detail = await api(`/api/device/${encodeURIComponent(name)}`);
    state.history.set(name, detail.history);
    const s = detail.status || {};
    const u = s.update || {};
    const update = u.state && u.state !== "idle" &&
      `update ${[u.state, u.version].filter(Boolean).join(" ")}${u.reason ? ` (${u.reason})` : ""}`;
    $("device-facts").textContent = [s.hostname, s.os, s.kernel, s.machine, s.python && `Python ${s.python}`,
      (s.addresses || []).join(" "), update].filter(Boolean).join(" · ");
  } catch (err) { $("device-facts").textContent = String(err.message || err); }
  renderCharts();
  renderEvents();
  $("device").scrollIntoView({ behavior: "smooth", block: "start" });
}

const FIGURES = [["cpu_temp_c", "CPU °C", 1], ["load_1m", "load (1 min)", 2], ["mem_used_pct", "memory %", 2]];
function renderCharts() {
  const points = (state.history.get(state.selected) || []).filter((p) => p[0] >= Date.now() / 1000 - 3600);
  const charts = FIGURES.map(([, label], i) => {
    const values = points.map((p) => [p[0], p[i + 1]]).filter((p) => p[1] !== null && p[1] !== undefined);
    const box = el("div", null, { class: "chart", "data-figure": FIGURES[i][0] });
    const last = values.length ? values[values.length - 1][1] : null;
    box.append(el("div", `${label}: ${last === null ? "—" : Number(last).toFixed(FIGURES[i][2])}`, { class: "label" }));
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 300 60");
    svg.setAttribute("preserveAspectRatio", "none");
    if (values.length > 1) {
      const t0 = values[0][0], t1 = values[values.length - 1][0] || t0 + 1;
      const lo = Math.min(...values.map((v) => v[1])), hi = Math.max(...values.map((v) => v[1]));
      const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      line.setAttribute("points", values.map(([t, v]) =>
        `${((t - t0) / (t1 - t0 || 1) * 300).toFixed(1)},${(56 - (v - lo) / (hi - lo || 1) * 52).toFixed(1)}`).join(" "));
      svg.append(line);
    }
    box.append(svg);
    return box;
  });
  $("charts").replaceChildren(...charts);
}

// -- forms from the tools' JSON schemas ------------------------------------------------------------
function toolOptions(select) {
  select.replaceChildren(...state.tools.map((t) => el("option", t.name, { value: t.name })));
}
function schemaOf(name) {
  const tool = state.tools.find((t) => t.name === name);
  return tool ? tool.parameters || {} : {};
}
function kinds(spec) {
  if (spec.type) return Array.isArray(spec.type) ? spec.type : [spec.type];
  return (spec.anyOf || spec.oneOf || []).flatMap(kinds);
}

function buildForm(container, name, prefix) {
  const schema = schemaOf(name);
  const required = new Set(schema.required || []);
  container.replaceChildren();
  for (const [key, spec] of Object.entries(schema.properties || {})) {
    const id = `${prefix}-${key}`;
    const label = el("label", key, { for: id, title: spec.description || "" });
    if (required.has(key)) label.classList.add("required");
    const types = kinds(spec);
    let input;
    if (spec.enum) {
      input = el("select", null, { id });
      if (!required.has(key)) input.append(el("option", "", { value: "" }));
      for (const v of spec.enum) input.append(el("option", v, { value: JSON.stringify(v) }));
      input.dataset.kind = "enum";
    } else if (types.length === 1 && types[0] === "boolean") {
      input = el("input", null, { id, type: "checkbox" });
      input.dataset.kind = "boolean";
    } else if (types.length === 1 && (types[0] === "integer" || types[0] === "number")) {
      input = el("input", null, { id, type: "number", step: types[0] === "integer" ? "1" : "any" });
      input.dataset.kind = "number";
    } else if (types.length === 1 && types[0] === "string") {
      input = el("input", null, { id, type: "text", placeholder: spec.description || "" });
      input.dataset.kind = "string";
    } else if (types.includes("object") || types.includes("array")) {
      input = el("textarea", null, { id, rows: "2", placeholder: "JSON" });
      input.dataset.kind = "json";
    } else {
      input = el("input", null, { id, type: "text", placeholder: spec.description || "" });
      input.dataset.kind = types.includes("integer") || types.includes("number") ? "number-or-text" : "string";
    }
    input.dataset.arg = key;
    container.append(label, input);
  }
  if (!Object.keys(schema.properties || {}).length) container.append(el("span", "no arguments", { class: "note" }));
}

function formArgs(container) {
  const args = {};
  for (const input of container.querySelectorAll("[data-arg]")) {
    const key = input.dataset.arg, kind = input.dataset.kind;
    if (kind === "boolean") { if (input.checked) args[key] = true; continue; }
    const text = input.value.trim();
    if (!text) continue;
    if (kind === "enum" || kind === "json") args[key] = JSON.parse(text);
    else if (kind === "number") args[key] = Number(text);
    else if (kind === "number-or-text") args[key] = /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : text;
    else args[key] = text;
  }
  return args;
}

function showAnswer(result) {
  const box = $("answer");
  const a = result.answer || result;
  box.classList.toggle("failed", a.ok === false);
  $("answer-text").textContent = a.ok === false
    ? `${a.code || "error"}: ${a.error || ""}` : (a.for_user || a.for_llm || a.text || "");
  $("answer-data").textContent = a.data !== undefined ? JSON.stringify(a.data, null, 2) : "";
}
function showError(err) {
  $("answer").classList.add("failed");
  $("answer-text").textContent = String(err.message || err);
  $("answer-data").textContent = "";
}

async function callTool(event) {
  event.preventDefault();
  const tool = $("tool").value;
  let args;
  try {
    const raw = $("raw-args").value.trim();
    args = raw ? JSON.parse(raw) : formArgs($("tool-args"));
  } catch (err) { showError(`the arguments are not valid JSON: ${err.message}`); return; }
  $("answer-text").textContent = `calling ${tool} on ${state.selected}…`;
  $("answer-data").textContent = "";
  $("answer").classList.remove("failed");
  try { showAnswer(await api("/api/call", { device: state.selected, tool, args })); } catch (err) { showError(err); }
}

async function chat(event) {
  event.preventDefault();
  const text = $("chat-text").value;
  if (!text.trim()) return;
  $("answer-text").textContent = `sent to ${state.selected}…`;
  try { showAnswer(await api("/api/chat", { device: state.selected, text })); } catch (err) { showError(err); }
}

async function readSensors() {
  const body = $("sensors").querySelector("tbody");
  const waiting = el("tr");
  waiting.append(el("td", "reading…"));
  body.replaceChildren(waiting);
  try {
    const r = await api("/api/call", { device: state.selected, tool: "sensor", args: { action: "read" } });
    const a = r.answer;
    if (a.ok === false) throw new Error(`${a.code}: ${a.error}`);
    const rows = [];
    const walk = (prefix, value) => {
      if (value && typeof value === "object" && !Array.isArray(value)) {
        if ("value" in value && ("unit" in value || "units" in value)) {
          rows.push([prefix, `${value.value} ${value.unit || value.units}`]); return;
        }
        for (const [k, v] of Object.entries(value)) walk(prefix ? `${prefix} ${k}` : k, v);
      } else if (Array.isArray(value)) value.forEach((v, i) => walk(`${prefix} ${v && v.name ? v.name : i}`, v));
      else rows.push([prefix, String(value)]);
    };
    const readings = a.data && Array.isArray(a.data.readings) ? a.data.readings : null;
    if (readings) {  // the sensor tool's shape: a device, its part, values with quantity and unit
      for (const r of readings) {
        const values = (r.values || []).map((v) =>
          `${v.quantity} ${typeof v.value === "number" ? Number(v.value.toFixed(3)) : v.value} ${v.unit || ""}`.trim());
        rows.push([`${r.device}${r.part ? " (" + r.part + ")" : ""}`, r.error ? `error: ${r.error}` : values.join(", ")]);
      }
    } else if (a.data !== undefined) walk("", a.data); else rows.push(["", a.for_user || a.for_llm]);
    body.replaceChildren(...rows.map(([k, v]) => {
      const tr = el("tr", null, { "data-sensor": k }); tr.append(el("td", k), el("td", v)); return tr;
    }));
  } catch (err) {
    body.replaceChildren(el("tr")); body.firstChild.append(el("td", String(err.message || err), { class: "error" }));
  }
}

async function broadcast(event) {
  event.preventDefault();
  const group = $("bc-group").value, tool = $("bc-tool").value;
  let args;
  try { args = formArgs($("bc-args")); } catch (err) { $("bc-summary").textContent = String(err.message); return; }
  if ($("bc-waves").checked) { rollout(group, tool, args); return; }
  $("bc-summary").textContent = `sending ${tool} to ${group ? "group " + group : "every device"}…`;
  try {
    const r = await api("/api/broadcast", { group, tool, args });
    const ok = r.answers.filter((a) => a.ok).length;
    $("bc-summary").textContent = `${r.answers.length} answers (${ok} ok)` +
      (r.missing.length ? `; no answer from ${r.missing.join(", ")}` : "");
    $("bc-results").querySelector("tbody").replaceChildren(...r.answers.map((a) => {
      const tr = el("tr", null, { "data-device": a.device || "" });
      const who = a.verified === false ? `${a.device || "?"} (unverified)` : a.device || "?";
      tr.append(el("td", who), el("td", a.ok ? "ok" : a.code || "error"),
        el("td", a.ok ? (a.for_user || a.for_llm || "").split("\n")[0] : a.error || ""));
      return tr;
    }));
  } catch (err) { $("bc-summary").textContent = String(err.message || err); }
}

// -- staged rollouts ---------------------------------------------------------------------------------
async function rollout(group, tool, args) {
  const plan = {
    group, tool, args, canary: Number($("bc-canary").value), batch_size: Number($("bc-batch").value),
    max_failures: Number($("bc-max-failures").value),
  };
  $("bc-summary").textContent = `rolling ${tool} out to ${group ? "group " + group : "every device"} in waves…`;
  try {
    const r = await api("/api/rollout", plan);
    $("bc-summary").textContent = `rollout ${r.rollout.id} started: ${r.rollout.waves} waves`;
    showRollout(r.rollout);
  } catch (err) { $("bc-summary").textContent = String(err.message || err); }
}

// An update in waves: the page holds the admin key (else the form stays hidden); each device's
// outcome is what its own signed status says once it restarted: kept, or rolled back.
async function updateInWaves(event) {
  event.preventDefault();
  const update = { url: $("up-url").value.trim(), sha256: $("up-sha").value.trim() };
  if ($("up-signature").value.trim()) update.signature = $("up-signature").value.trim();
  const group = $("up-group").value;
  const plan = {
    kind: "update", update, group, canary: Number($("up-canary").value),
    batch_size: Number($("up-batch").value), max_failures: Number($("up-max-failures").value),
  };
  $("up-summary").textContent = `updating ${group ? "group " + group : "every device"} in waves…`;
  try {
    const r = await api("/api/rollout", plan);
    $("up-summary").textContent = `rollout ${r.rollout.id} started: ${r.rollout.waves} waves`;
    showRollout(r.rollout);
  } catch (err) { $("up-summary").textContent = String(err.message || err); }
}

function showRollout(view) {
  state.rollouts.set(view.id, { ...(state.rollouts.get(view.id) || {}), ...view });
  renderRollouts();
}

function renderRollouts() {
  const items = [...state.rollouts.values()].sort((a, b) => b.started - a.started).map((r) => {
    const c = r.counts;
    const li = el("li", null, { "data-rollout": r.id, class: `rollout ${r.state}` });
    const head = `${r.tool} to ${r.group ? "group " + r.group : "every device"}: ${r.state}` +
      (r.state === "running" ? `, wave ${r.wave} of ${r.waves}` : "") +
      ` — ${c.ok} ok, ${c.failed} failed, ${c.no_answer} no answer` + (c.deferred ? `, ${c.deferred} deferred` : "") +
      `, ${c.skipped} skipped, ${c.pending} pending`;
    li.append(el("span", head, { class: "rollout-head" }));
    if (r.reason) li.append(el("span", ` (${r.reason})`, { class: "note" }));
    if (r.state === "running") {
      const stop = el("button", "stop", { type: "button" });
      stop.addEventListener("click", () => api("/api/rollout/stop", { id: r.id }).then((x) => showRollout(x.rollout)));
      li.append(stop);
    }
    if (r.devices) {
      const details = el("details"); details.append(el("summary", "each device"));
      const table = el("table"); const body = el("tbody");
      for (const [device, o] of Object.entries(r.devices)) {
        const tr = el("tr", null, { "data-device": device, class: o.state });
        tr.append(el("td", device), el("td", o.wave ? `wave ${o.wave}` : ""), el("td", o.state), el("td", o.error || ""));
        body.append(tr);
      }
      table.append(body); details.append(table); li.append(details);
    }
    return li;
  });
  $("rollout-list").replaceChildren(...items);
}

// -- the live stream ---------------------------------------------------------------------------------
function renderLink() {
  const [text, up] = !state.stream ? ["reconnecting…", false]
    : state.broker ? ["live", true] : ["broker unreachable", false];
  $("link").textContent = text;
  $("link").className = `link ${up ? "up" : "down"}`;
}

function takeSnapshot(snap) {
  state.broker = snap.broker;
  renderLink();
  state.counts = snap.counts;
  refetch();
  state.events = snap.events.slice(-MAX_EVENTS);
  state.pending = new Map(snap.approvals.map((q) => [questionKey(q), q]));
  renderTable(); renderEvents(); renderApprovals();
}

function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("open", () => { state.stream = true; renderLink(); });
  source.addEventListener("link", (m) => { state.broker = JSON.parse(m.data).broker; renderLink(); });
  source.addEventListener("error", () => {
    state.stream = false; renderLink();
    // Refused (the session ended) rather than cut: the browser gives up; back to the login if so.
    if (source.readyState === EventSource.CLOSED) {
      api("/api/session").then(() => setTimeout(connect, 2000), () => setTimeout(connect, 5000));
    }
  });
  source.addEventListener("snapshot", (m) => takeSnapshot(JSON.parse(m.data)));
  source.addEventListener("devices", (m) => takeBatch(JSON.parse(m.data)));
  source.addEventListener("event", (m) => {
    state.events.push(JSON.parse(m.data));
    if (state.events.length > MAX_EVENTS) state.events.shift();
    renderEvents();
  });
  source.addEventListener("rollout", (m) => showRollout(JSON.parse(m.data)));
  source.addEventListener("approval", (m) => {
    const q = JSON.parse(m.data); state.pending.set(questionKey(q), q); renderApprovals();
  });
  source.addEventListener("approval_done", (m) => {
    const d = JSON.parse(m.data);
    for (const [k, q] of state.pending) if (q.device === d.device && q.id === d.id) state.pending.delete(k);
    renderApprovals();
  });
}

let tableTimer = 0;
function scheduleTable() {  // many devices report at once: one redraw per frame at most
  if (!tableTimer) tableTimer = requestAnimationFrame(() => { tableTimer = 0; renderTable(); });
}

async function start() {
  const session = await api("/api/session");
  state.csrf = session.csrf;
  state.approvals = session.approvals;
  state.tools = await api("/api/tools");
  toolOptions($("tool")); toolOptions($("bc-tool"));
  buildForm($("tool-args"), $("tool").value, "arg");
  buildForm($("bc-args"), $("bc-tool").value, "bc-arg");
  $("tool").addEventListener("change", () => {
    buildForm($("tool-args"), $("tool").value, "arg");
    const t = state.tools.find((x) => x.name === $("tool").value);
    $("tool-description").textContent = t ? t.description : "";
  });
  $("bc-tool").addEventListener("change", () => buildForm($("bc-args"), $("bc-tool").value, "bc-arg"));
  $("call-form").addEventListener("submit", callTool);
  $("chat-form").addEventListener("submit", chat);
  $("broadcast-form").addEventListener("submit", broadcast);
  $("update-form").hidden = !session.updates;
  $("update-form").addEventListener("submit", updateInWaves);
  $("sensors-read").addEventListener("click", readSensors);
  for (const r of (await api("/api/rollouts")).rollouts) showRollout(r);
  $("device-close").addEventListener("click", () => { state.selected = ""; $("device").hidden = true; renderTable(); });
  let filterTimer = 0;  // one fetch when the typing pauses, not one a key
  $("filter").addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => { state.filter = $("filter").value; $("device-list").scrollTop = 0; refetch(); }, 150);
  });
  $("device-list").addEventListener("scroll", scheduleTable);
  for (const th of $("devices").querySelectorAll("th")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      state.sort = { key, desc: state.sort.key === key ? !state.sort.desc : false };
      refetch();
    });
  }
  $("logout").addEventListener("click", async () => {
    await fetch("/logout", { method: "POST", headers: { "X-CSRF-Token": state.csrf }, credentials: "same-origin" });
    location.href = "/login";
  });
  setInterval(() => { renderTable(); renderApprovals(); }, 5000);  // "last seen" ages
  refetch();
  connect();
  document.body.dataset.ready = "yes";
}

document.addEventListener("DOMContentLoaded", start);
