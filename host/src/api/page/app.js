// The live status page: reads the API with the token kept in this tab, and follows
// /api/v1/events (read with fetch, so the token goes in the Authorization header).
"use strict";

const TOKEN_KEY = "steward-token";
const state = { objects: new Map(), selected: null, overview: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function headers() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: "Bearer " + t } : {};
}

class Unauthorized extends Error {}

async function api(path, method) {
  const r = await fetch(path, { method: method || "GET", headers: headers() });
  if (r.status === 401) throw new Unauthorized();
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
  return body;
}

function phaseBadge(p) { return el("span", { class: "phase " + (p || "") }, p || "?"); }
function time(t) { return t ? new Date(t).toLocaleTimeString() : ""; }
function keyOf(o) { return o.kind + "/" + o.namespace + "/" + o.name; }

// ---- overview -------------------------------------------------------------------------------

function renderOverview(o) {
  state.overview = o;
  $("mode").textContent = o.mode + " mode" + (o.ready ? "" : " (starting)");
  const counters = $("counters");
  counters.replaceChildren(...[["queued", o.queueLength], ["running", o.running], ["scheduled", o.scheduled],
    ["objects", state.objects.size]].map(([k, v]) => el("div", {}, el("b", {}, v), el("span", { class: "muted" }, k))));
  $("kinds").tBodies[0].replaceChildren(...o.kinds.map((k) => {
    const counts = el("span", { class: "counts" }, ...Object.entries(k.phases).map(([p, n]) => el("span", {}, phaseBadge(p), " " + n)));
    const toggle = el("button", { type: "button", title: "enable or disable reconciling this kind" }, k.enabled ? "disable" : "enable");
    toggle.onclick = () => act("/api/v1/kinds/" + encodeURIComponent(k.kind) + "/" + (k.enabled ? "disable" : "enable"));
    return el("tr", { "data-kind": k.kind }, el("td", {}, k.kind), el("td", {}, k.plugin || "none"), el("td", {}, counts),
      el("td", {}, k.enabled ? "yes " : "no ", toggle));
  }));
  $("plugins").tBodies[0].replaceChildren(...o.plugins.map((p) => el("tr", {},
    el("td", { title: p.file }, p.name || p.file), el("td", {}, p.version || ""),
    el("td", { title: p.message || "" }, phaseBadge(p.state), p.message ? el("div", { class: "muted" }, p.message) : null),
    el("td", {}, p.kinds.join(", ")))));
  $("problems").replaceChildren(...o.problems.map((p) => el("li", {}, p)));
  renderHostConditions(o.conditions || []);
  const kindSel = $("filter-kind"), want = kindSel.value;
  const kinds = new Set(o.kinds.map((k) => k.kind));
  for (const obj of state.objects.values()) kinds.add(obj.kind);
  kindSel.replaceChildren(el("option", { value: "" }, "all"), ...[...kinds].sort().map((k) => el("option", { value: k }, k)));
  kindSel.value = want;
}

// The host's own conditions, at the top: those that do not hold in red with their message,
// those that hold as one muted line.
function renderHostConditions(conds) {
  const bad = conds.filter((c) => c.status !== "True");
  const good = conds.filter((c) => c.status === "True");
  const name = (c) => c.type + (c.subject ? " (" + c.subject + ")" : "");
  const items = bad.map((c) => el("li", { class: "bad", "data-type": c.type, title: "since " + c.lastTransitionTime },
    el("b", {}, name(c) + " " + c.status), " " + c.reason + ": " + c.message));
  if (good.length) items.push(el("li", { class: "muted" }, good.map((c) => name(c) + " True").join(", ")));
  $("host-conditions").replaceChildren(...items);
}

// ---- objects --------------------------------------------------------------------------------

// `N warning(s): first`, as `steward status` shows an object's warnings; empty when none.
function warned(v) {
  const w = v.warnings || [];
  return w.length ? w.length + " warning(s): " + w[0].path + ": " + w[0].message : "";
}

// The object's summary as the API computed it: the phase, coloured by the verdict (green only when
// synced and not unready), its Ready condition and reason, and its kind's own columns.
function summaryBadge(s) { return el("span", { class: "phase verdict-" + s.verdict }, s.phase); }
function readyCell(s) {
  const text = s.ready === "Absent" ? "-" : s.ready + (s.reason ? " (" + s.reason + ")" : "");
  return el("td", { class: s.verdict === "failing" ? "bad" : "", title: s.message || "" }, text);
}
function columnsCell(s) {
  return el("td", {}, (s.columns || []).map((c) => c.name + ": " + (c.value ?? "<none>")).join(" · "));
}

function row(v) {
  const s = v.summary;
  const tr = el("tr", { "data-key": keyOf(v), "data-phase": v.phase, "data-kind": v.kind, "data-verdict": s.verdict, "data-ready": s.ready },
    el("td", {}, v.kind), el("td", {}, v.namespace), el("td", {}, v.name), el("td", {}, summaryBadge(s)), readyCell(s), columnsCell(s),
    el("td", {}, v.observedGeneration === v.generation ? v.generation : v.generation + " (observed " + (v.observedGeneration ?? "none") + ")"),
    el("td", {}, time(v.lastReconcileTime)), el("td", { class: "bad" }, s.verdict === "failing" ? s.message || v.sourceProblem || warned(v) : v.sourceProblem || warned(v) || s.message));
  tr.onclick = () => select(keyOf(v));
  if (state.selected === keyOf(v)) tr.classList.add("selected");
  return tr;
}

function renderObjects() {
  const kind = $("filter-kind").value, phase = $("filter-phase").value;
  const shown = [...state.objects.values()].filter((v) => (!kind || v.kind === kind) && (!phase || v.phase === phase));
  shown.sort((a, b) => keyOf(a).localeCompare(keyOf(b)));
  $("objects").tBodies[0].replaceChildren(...shown.map(row));
  $("shown").textContent = shown.length + " of " + state.objects.size;
}

// ---- one object -----------------------------------------------------------------------------

function path(key) { return "/api/v1/resources/" + key.split("/").map(encodeURIComponent).join("/"); }

async function renderDetail() {
  const key = state.selected;
  if (!key) { $("detail").hidden = true; return; }
  let v;
  try { v = await api(path(key)); } catch (e) { $("detail-note").textContent = e.message; return; }
  const spec = await api(path(key) + "/spec").catch((e) => "(" + e.message + ")");
  const events = await api(path(key) + "/events").catch(() => []);
  if (state.selected !== key) return;
  $("detail").hidden = false;
  $("detail-key").textContent = key;
  const facts = [["phase", summaryBadge(v.summary)], ["ready", readyCell(v.summary).textContent], ["generation", v.generation + " (observed " + (v.observedGeneration ?? "none") + ")"],
    ["plugin", (v.plugin || "") + (v.pluginVersion ? " " + v.pluginVersion : "")], ["source", v.source || ""],
    ["last reconcile", v.lastReconcileTime || ""], ["last success", v.lastSuccessTime || ""],
    ["retries", v.retryCount], ["next attempt", v.nextAttemptTime || ""], ["last error", v.lastError || ""],
    ["source problem", v.sourceProblem || ""],
    ["warnings", (v.warnings || []).map((w) => w.path + ": " + w.message).join("; ")],
    ["deleting", v.deleting ? "yes" : "no"], ["kind disabled", v.disabled ? "yes" : "no"]];
  $("detail-facts").replaceChildren(...facts.filter(([, x]) => x !== "").flatMap(([k, x]) => [el("dt", {}, k), el("dd", {}, x)]));
  $("detail-spec").textContent = typeof spec === "string" ? spec : JSON.stringify(spec, null, 2);
  $("detail-status").textContent = v.status === null || v.status === undefined ? "(none)" : JSON.stringify(v.status, null, 2);
  $("detail-conditions").tBodies[0].replaceChildren(...v.conditions.map((c) => el("tr", {},
    el("td", {}, c.type), el("td", {}, c.status), el("td", {}, c.reason || ""), el("td", {}, c.message || ""))));
  $("detail-services").replaceChildren(services(v.status));
  $("detail-history").tBodies[0].replaceChildren(...v.history.slice().reverse().map((h) => el("tr", {},
    el("td", { title: h.time }, time(h.time)), el("td", {}, h.reason),
    el("td", h.count > 1 ? { title: h.count + " in a row since " + h.firstTime } : {}, h.count > 1 ? h.outcome + " \u00d7" + h.count : h.outcome), el("td", {}, h.durationMs + " ms"),
    el("td", {}, h.traceId ? el("code", {}, h.traceId) : ""))));
  $("detail-events").tBodies[0].replaceChildren(...events.slice().reverse().map((e) => el("tr", {},
    el("td", { title: new Date(e.time).toISOString() }, time(e.time)),
    el("td", e.type === "Warning" ? { class: "bad" } : {}, e.type), el("td", {}, e.reason), el("td", {}, e.message))));
  for (const tr of $("objects").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.key === key);
}

// What a plugin reports of the services it owns: a state, a health, tools (MCPServer does).
function services(status) {
  if (!status || typeof status !== "object" || !("tools" in status || "health" in status)) {
    return el("p", { class: "muted" }, "none reported");
  }
  const tools = Array.isArray(status.tools) ? status.tools : [];
  return el("div", {},
    el("p", {}, "state ", el("b", {}, status.state ?? "?"), ", health ", el("b", {}, status.health ?? "?"),
      status.pid ? ", pid " + status.pid : "", status.restartCount ? ", restarts " + status.restartCount : ""),
    tools.length ? el("ul", { class: "tools" }, ...tools.map((t) => el("li", {}, el("code", {}, t)))) : el("p", { class: "muted" }, "no tools listed"));
}

function select(key) { state.selected = key; $("detail-note").textContent = ""; renderDetail(); }

async function act(url) {
  try { await api(url, "POST"); } catch (e) { alert(e.message); }
  loadOverview();
}

// ---- loading and the event stream -----------------------------------------------------------

async function loadOverview() { try { renderOverview(await api("/api/v1/overview")); } catch (e) { failed(e); } }

async function loadAll() {
  const [overview, views] = await Promise.all([api("/api/v1/overview"), api("/api/v1/resources")]);
  state.objects = new Map(views.map((v) => [keyOf(v), v]));
  renderOverview(overview);
  renderObjects();
  if (state.selected) renderDetail();
}

// Changed keys are read again at most every 100 ms, together.
const pending = new Set();
let flushTimer = null;
function changed(key) {
  pending.add(key);
  if (!flushTimer) flushTimer = setTimeout(flush, 100);
}
async function flush() {
  flushTimer = null;
  const keys = [...pending]; pending.clear();
  await Promise.all(keys.map(async (key) => {
    try { state.objects.set(key, await api(path(key))); } catch (e) { if (e instanceof Unauthorized) throw e; state.objects.delete(key); }
  })).catch(failed);
  renderObjects();
  loadOverview();
  if (state.selected && keys.includes(state.selected)) renderDetail();
}

function onEvent(name, data) {
  if (name === "object") changed(data.key);
  else if (name === "overview") loadOverview();
  else if (name === "resync") loadAll().catch(failed);
  else if (name === "hello") loadAll().catch(failed);
}

function setLive(on, text) { const l = $("live"); l.className = "live " + (on ? "on" : "off"); l.textContent = text; }

// Reads the server-sent events of /api/v1/events; reconnects with a growing pause.
async function follow() {
  let pause = 1000;
  for (;;) {
    try {
      const r = await fetch("/api/v1/events", { headers: headers() });
      if (r.status === 401) throw new Unauthorized();
      if (!r.ok || !r.body) throw new Error("events: " + r.status);
      setLive(true, "live");
      pause = 1000;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, end); buf = buf.slice(end + 2);
          let name = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (data) onEvent(name, JSON.parse(data));
        }
      }
    } catch (e) {
      if (e instanceof Unauthorized) { failed(e); return; }
    }
    setLive(false, "reconnecting");
    await new Promise((res) => setTimeout(res, pause));
    pause = Math.min(pause * 2, 10000);
  }
}

function failed(e) {
  if (e instanceof Unauthorized) {
    $("main").hidden = true;
    $("token-form").hidden = false;
    $("token-error").textContent = sessionStorage.getItem(TOKEN_KEY) ? "that token was refused" : "";
    setLive(false, "needs a token");
  } else {
    setLive(false, e.message);
  }
}

async function start() {
  try {
    await api("/api/v1/overview");
  } catch (e) {
    if (e instanceof Unauthorized) { failed(e); return; }
  }
  $("token-form").hidden = true;
  $("main").hidden = false;
  follow();
}

document.addEventListener("DOMContentLoaded", () => {
  $("token-form").onsubmit = (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    start();
  };
  $("filter-kind").onchange = renderObjects;
  $("filter-phase").onchange = renderObjects;
  $("close-detail").onclick = () => { state.selected = null; renderDetail(); renderObjects(); };
  $("reconcile").onclick = () => { if (state.selected) act(path(state.selected) + "/reconcile"); };
  start();
});
