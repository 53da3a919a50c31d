// recursa web: the Agents View in a browser. Plain JS, no framework, no CDN.
//
// Everything the page knows comes from its own server: POST /api/op/NAME (the
// daemon's people's operations), GET /api/feed (server-sent events of every
// session: which sessions changed), GET /api/events/ID (one session's events,
// live) and GET /api/events/ID/page (its history, backwards, a page at a time).
//
// Text from models and sessions is hostile: it only ever enters the page as
// text nodes (el() and textContent), never as markup.
"use strict";

const PAGE = 300;          // records per history page
const BIG_PAGE = 2000;     // the most the server gives in one page
const FOLD_LINES = 12;     // outputs longer than this are folded
const FOLD_CHARS = 1500;
const REFRESH_MS = 250;    // coalesces tree refreshes when events pour in

// -- small helpers --------------------------------------------------------------------------

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(kind, message, status) {
    super(message);
    this.kind = kind;
    this.status = status;
  }
}

async function op(name, body) {
  const response = await fetch(`/api/op/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    credentials: "same-origin",
    body: JSON.stringify(body || {}),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { /* no body */ }
  if (!response.ok) {
    const kind = (data && data.kind) || "error";
    const message = (data && data.message) || `${name}: HTTP ${response.status}`;
    throw new ApiError(kind, message, response.status);
  }
  return data;
}

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(data && data.kind, (data && data.message) || url, response.status);
  return data;
}

let noticeTimer = null;
function notice(text, level) {
  const bar = $("#notice");
  bar.textContent = text;
  bar.className = level || "error";
  bar.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { bar.hidden = true; }, level === "info" ? 4000 : 10000);
}

// Runs an action; its failure is one line in the notice bar.
async function act(work, done) {
  try {
    const result = await work();
    if (done) notice(done, "info");
    return result;
  } catch (err) {
    notice(err.message || String(err));
    return undefined;
  }
}

const short = (id) => id || "";  // ids made together share long prefixes: show them whole
const label = (info) => (info ? info.name || short(info.id) : "?");

function tokens(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 10000 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

function cost(usage) {
  if (!usage.cost && usage.unknown_cost_calls) return "?";
  const c = usage.cost;
  const text = !c ? "$0" : c < 0.001 ? "<$0.001" : `$${c.toFixed(c < 0.01 ? 3 : 2)}`;
  return usage.unknown_cost_calls ? `${text}+?` : text;
}

function ago(seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

const clock = (ts) => new Date(ts * 1000).toLocaleTimeString();
const now = () => Date.now() / 1000;

// -- state ------------------------------------------------------------------------------------

const state = {
  sessions: new Map(),   // id -> SessionInfo
  selected: null,        // session id
  tab: "session",
  dirty: new Set(),      // session ids to re-read
  refreshTimer: null,
  entry: null,           // HarnessDetail shown
};

// -- the session tree ---------------------------------------------------------------------------

function treeRows() {
  // Roots oldest first, each followed by its descendants; a session whose
  // parent is not known is a root here.
  const children = new Map();
  for (const info of state.sessions.values()) {
    const parent = info.parent_id && state.sessions.has(info.parent_id) ? info.parent_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(info);
  }
  for (const list of children.values()) list.sort((a, b) => a.created_at - b.created_at);
  const rows = [];
  const subtree = new Map();
  const walk = (info, level) => {
    const row = { info, level, total: { input_tokens: 0, output_tokens: 0, cost: 0, unknown_cost_calls: 0 } };
    rows.push(row);
    const add = (u) => {
      row.total.input_tokens += u.input_tokens; row.total.output_tokens += u.output_tokens;
      row.total.cost += u.cost; row.total.unknown_cost_calls += u.unknown_cost_calls;
    };
    add(info.usage);
    for (const child of children.get(info.id) || []) add(walk(child, level + 1));
    subtree.set(info.id, row.total);
    return row.total;
  };
  for (const root of children.get(null) || []) walk(root, 0);
  return rows;
}

function matches(info) {
  const status = $("#status-filter").value;
  if (status === "active" && !(info.status === "running" || info.status === "admitted")) return false;
  if (status !== "all" && status !== "active" && info.status !== status) return false;
  const text = $("#filter").value.trim().toLowerCase();
  if (!text) return true;
  return info.id.toLowerCase().includes(text) || (info.name || "").toLowerCase().includes(text);
}

function renderTree() {
  const rows = treeRows();
  // A row is shown when it matches, or when a descendant does (its context).
  const shown = new Set();
  for (const row of rows) {
    if (!matches(row.info)) continue;
    for (let id = row.info.id; id && !shown.has(id); id = (state.sessions.get(id) || {}).parent_id) shown.add(id);
  }
  const body = el("tbody");
  for (const { info, level, total } of rows) {
    if (!shown.has(info.id)) continue;
    const own = info.usage.input_tokens + info.usage.output_tokens;
    const all = total.input_tokens + total.output_tokens;
    const tr = el("tr", {
      class: `status-${info.status}${info.id === state.selected ? " selected" : ""}`,
      dataset: { id: info.id },
      onclick: () => select(info.id),
    },
      el("td", { class: "name", title: info.id },
        el("span", { class: "indent", text: level ? "  ".repeat(level - 1) + "└ " : "" }),
        el("span", { text: info.name || "(unnamed)" }), " ", el("span", { class: "dim mono", text: short(info.id) })),
      el("td", {}, el("span", { class: `badge s-${info.status}`, text: info.status })),
      el("td", { class: "dim", text: info.model }),
      el("td", { class: "num dim", text: info.depth ?? level }),
      el("td", { class: "num", title: `own ${own} / subtree ${all} tokens`, text: `${tokens(own)} / ${tokens(all)}` }),
      el("td", { class: "num", text: `${cost(info.usage)} / ${cost(total)}` }),
      el("td", { class: `num${info.pending ? " warn" : " dim"}`, text: info.pending || 0 }),
      el("td", { class: "num dim", dataset: { since: info.last_activity }, text: ago(now() - info.last_activity) }),
      el("td", { class: "num", dataset: info.cell_started_at ? { cell: info.cell_started_at } : {}, text: info.cell_started_at ? ago(now() - info.cell_started_at) : "" }),
    );
    body.append(tr);
  }
  $("#tree tbody").replaceWith(body);
  $("#tree-empty").hidden = state.sessions.size > 0;
}

function tickClocks() {
  for (const cell of document.querySelectorAll("#tree td[data-since]")) cell.textContent = ago(now() - Number(cell.dataset.since));
  for (const cell of document.querySelectorAll("#tree td[data-cell]")) cell.textContent = ago(now() - Number(cell.dataset.cell));
  for (const badge of document.querySelectorAll(".ev.cell .running[data-started]")) badge.textContent = `running ${ago(now() - Number(badge.dataset.started))}`;
}

async function loadSessions() {
  const list = await op("sessions", {});
  state.sessions = new Map(list.map((info) => [info.id, info]));
  renderTree();
}

function markDirty(id) {
  state.dirty.add(id);
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(refreshDirty, REFRESH_MS);
}

async function refreshDirty() {
  state.refreshTimer = null;
  const ids = [...state.dirty];
  state.dirty.clear();
  if (!ids.length) return;
  try {
    const infos = await op("sessions", { ids: ids.join(",") });
    for (const info of infos) state.sessions.set(info.id, info);
  } catch (err) {
    notice(err.message);
    return;
  }
  renderTree();
  if (state.selected && ids.includes(state.selected)) renderSessionTitle();
  if ($("#follow").checked) followRunning();
}

function followRunning() {
  const running = [...state.sessions.values()].filter((i) => i.status === "running");
  if (!running.length) return;
  running.sort((a, b) => (b.cell_started_at || b.last_activity) - (a.cell_started_at || a.last_activity));
  if (!running.some((i) => i.id === state.selected)) select(running[0].id);
}

function jump(text) {
  const wanted = text.trim();
  if (!wanted) return;
  const infos = [...state.sessions.values()];
  const found = infos.find((i) => i.id === wanted) || infos.find((i) => i.name === wanted)
    || infos.filter((i) => i.id.startsWith(wanted)).sort((a, b) => a.created_at - b.created_at)[0]
    || infos.find((i) => (i.name || "").toLowerCase().includes(wanted.toLowerCase()));
  if (!found) { notice(`no session ${wanted}`); return; }
  select(found.id);
}

// The feed: every stored record of every session says "this session changed".
// When the daemon is gone the stream ends with a failure: the page says so and
// tries again every few seconds, from the last record it saw, and re-reads the
// whole tree once it is back (what changed meanwhile).
const FEED_RETRY_MS = 5000;
let feedSeq = 0;
function openFeed(recovering) {
  const source = new EventSource(feedSeq ? `/api/feed?after=${feedSeq}` : "/api/feed");
  const badge = (text, cls) => { $("#live").textContent = text; $("#live").className = `badge ${cls}`; };
  source.onopen = () => {
    badge("live", "good");
    if (recovering) { recovering = false; act(loadSessions); }
  };
  source.onerror = () => badge("reconnecting", "warn");
  source.addEventListener("failure", (e) => {
    notice(JSON.parse(e.data).message);
    source.close();
    badge("offline", "bad");
    setTimeout(() => openFeed(true), FEED_RETRY_MS);
  });
  source.onmessage = (e) => {
    const record = JSON.parse(e.data);
    if (record.seq) feedSeq = record.seq;
    markDirty(record.session_id);
    if (record.type === "notice" && record.text.startsWith("harness: ")) harnessChanged();
  };
}

// -- the session pane ---------------------------------------------------------------------------

const view = {
  id: null,
  source: null,
  oldest: null,     // seq of the oldest record shown
  newest: 0,        // seq of the newest stored record shown
  exhausted: false, // no records before `oldest`
  streaming: null,  // the block a streamed reply is being written into
  liveCells: new Map(), // cell number -> live output element of a running cell
  runningBadges: new Map(), // cell number -> its "running" badge, until it finishes
  finished: new Set(),  // cells whose outcome is shown
};

async function select(id) {
  if (!state.sessions.has(id)) return;
  state.selected = id;
  renderTree();
  const row = document.querySelector(`#tree tr[data-id="${CSS.escape(id)}"]`);
  if (row) row.scrollIntoView({ block: "nearest" });
  renderSessionTitle();
  if (state.tab === "usage") loadUsage();
  await openSession(id);
}

function renderSessionTitle() {
  const info = state.sessions.get(state.selected);
  if (!info) return;
  const bits = [info.status, info.model, `depth ${info.depth ?? "?"}`, `cwd ${info.cwd}`];
  if (info.pending) bits.push(`${info.pending} pending`);
  if (info.parent_id) bits.push(`parent ${label(state.sessions.get(info.parent_id)) || short(info.parent_id)}`);
  $("#session-title").replaceChildren(el("strong", { text: info.name || "(unnamed)" }), " ",
    el("span", { class: "mono dim", text: info.id }), el("div", { class: "dim", text: bits.join(" · ") }));
  $("#session-actions").hidden = false;
  $("#send-form").hidden = false;
  $("#act-interrupt").disabled = info.status !== "running";
  $("#act-unload").disabled = info.status !== "idle";
  $("#act-stop").disabled = info.status === "inactive" || info.status === "deleted";
}

async function openSession(id) {
  if (view.source) view.source.close();
  Object.assign(view, { id, source: null, oldest: null, newest: 0, exhausted: false, streaming: null });
  view.liveCells = new Map();
  view.runningBadges = new Map();
  view.finished = new Set();
  $("#event-list").replaceChildren();
  const records = await act(() => getJson(`/api/events/${encodeURIComponent(id)}/page?limit=${PAGE}`));
  if (view.id !== id || !records) return;
  const frag = document.createDocumentFragment();
  for (const record of records) frag.append(...renderRecord(record));
  $("#event-list").append(frag);
  view.oldest = records.length ? records[0].seq : null;
  view.newest = records.length ? records[records.length - 1].seq : 0;
  view.exhausted = records.length < PAGE;
  $("#earlier").hidden = view.exhausted;
  scrollToEnd(true);
  followSession(id);
  loadControls();
}

// The session's live stream, after the newest record shown; after a failure
// (the daemon went away) it is tried again while the session stays selected.
function followSession(id) {
  const source = new EventSource(`/api/events/${encodeURIComponent(id)}?after=${view.newest}`);
  view.source = source;
  source.onmessage = (e) => { if (view.id === id) queueLive(JSON.parse(e.data)); };
  source.addEventListener("failure", (e) => {
    notice(JSON.parse(e.data).message);
    source.close();
    setTimeout(() => { if (view.id === id && view.source === source) followSession(id); }, FEED_RETRY_MS);
  });
}

async function loadEarlier(limit) {
  if (view.exhausted || view.oldest === null) return false;
  const id = view.id;
  const size = typeof limit === "number" ? limit : PAGE;
  const records = await act(() => getJson(`/api/events/${encodeURIComponent(id)}/page?before=${view.oldest}&limit=${size}`));
  if (view.id !== id || !records) return false;
  const box = $("#events");
  const height = box.scrollHeight;
  const frag = document.createDocumentFragment();
  for (const record of records) frag.append(...renderRecord(record, true));
  $("#event-list").prepend(frag);
  box.scrollTop += box.scrollHeight - height;  // keep what the reader was looking at in place
  if (records.length) view.oldest = records[0].seq;
  view.exhausted = records.length < size;
  $("#earlier").hidden = view.exhausted;
  return records.length > 0;
}

// Live records are drawn once per frame, however fast they come: reading the
// scroll position forces a layout, so it is read once per batch, not per record.
let liveQueue = [];
function queueLive(record) {
  liveQueue.push(record);
  if (liveQueue.length === 1) requestAnimationFrame(flushLive);
}

function flushLive() {
  const batch = liveQueue;
  liveQueue = [];
  liveRecords(batch);
}

function liveRecords(records) {
  const stick = nearEnd();
  for (const record of records) liveRecord(record);
  if (stick) scrollToEnd(true);
}

function liveRecord(record) {
  if (record.seq && record.seq <= view.newest) return;  // already shown
  if (record.seq) view.newest = record.seq;
  if (record.type === "text_delta") {
    if (!view.streaming) {
      view.streaming = el("div", { class: "ev assistant streaming" }, el("div", { class: "who", text: "assistant (streaming)" }), el("div", { class: "text" }));
      $("#event-list").append(view.streaming);
    }
    view.streaming.lastChild.append(document.createTextNode(record.text));
  } else if (record.type === "cell_output") {
    const live = view.liveCells.get(record.cell);
    if (live) { live.hidden = false; live.append(document.createTextNode(record.text)); }
  } else {
    // The complete reply replaces its streamed pieces; a turn that ends without
    // one (interrupted mid-reply) drops them too: the log has what was kept.
    if ((record.type === "assistant_reply" || record.type === "turn_ended") && view.streaming) {
      view.streaming.remove();
      view.streaming = null;
    }
    $("#event-list").append(...renderRecord(record));
  }
}

function nearEnd() {
  const box = $("#events");
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function scrollToEnd(force) {
  const box = $("#events");
  if (force || nearEnd()) box.scrollTop = box.scrollHeight;
}

// Python, lightly: comments, strings, keywords, numbers. Text nodes only.
const PY = /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|\b(and|as|assert|async|await|break|class|continue|def|del|elif|else|except|finally|for|from|global|if|import|in|is|lambda|None|nonlocal|not|or|pass|raise|return|True|False|try|while|with|yield)\b|\b(\d+(?:\.\d+)?)\b/g;
function highlight(code) {
  const pre = el("pre", { class: "code" });
  let last = 0;
  for (const m of code.matchAll(PY)) {
    if (m.index > last) pre.append(document.createTextNode(code.slice(last, m.index)));
    const kind = m[1] ? "c" : m[2] ? "s" : m[3] ? "k" : "n";
    pre.append(el("span", { class: `hl-${kind}`, text: m[0] }));
    last = m.index + m[0].length;
  }
  if (last < code.length) pre.append(document.createTextNode(code.slice(last)));
  return pre;
}

function folded(text, title) {
  const lines = text.split("\n");
  if (lines.length <= FOLD_LINES && text.length <= FOLD_CHARS) return el("pre", { class: "out", text });
  return el("details", { class: "fold" },
    el("summary", { text: `${title}: ${lines.length} lines, ${text.length.toLocaleString()} chars (click to unfold)` }),
    el("pre", { class: "out", text }));
}

const SOURCES = {
  user: "person", system: "system", parent: "from parent", child: "from child",
  sibling: "from sibling", schedule: "schedule tick", goal: "goal continuation", gate: "gate result",
};

function senderName(id) {
  return id ? `${label(state.sessions.get(id))}${state.sessions.has(id) ? "" : ` ${short(id)}`}` : "";
}

// One stored or streamed record as the elements that show it.
function renderRecord(r) {
  const block = (cls, who, ...body) => {
    const node = el("div", { class: `ev ${cls}`, id: r.seq ? `ev-${r.seq}` : null, dataset: { seq: r.seq, type: r.type } },
      el("div", { class: "who" }, who, el("span", { class: "when", text: `#${r.seq} ${clock(r.ts)}` })), ...body);
    return [node];
  };
  const line = (cls, text, extra) => block(`line ${cls}`, text, extra || null);
  switch (r.type) {
    case "session_created":
      return line("dim", `session created · ${r.model} · ${r.cwd}${r.parent_id ? ` · child of ${senderName(r.parent_id)}` : ""}`);
    case "user_input": {
      const from = SOURCES[r.source] || r.source;
      const who = [from, r.sender ? senderName(r.sender) : "", r.mode === "steer" ? "· steer (between cells)" : ""].filter(Boolean).join(" ");
      return block(`input src-${r.source}${r.mode === "steer" ? " steer" : ""}`, who, el("div", { class: "text", text: r.text }));
    }
    case "input_placed":
      return line("dim", `input placed in the kernel as ${r.name} (${r.origin}${r.label ? ` ${r.label}` : ""}, ${r.chars.toLocaleString()} chars)`);
    case "turn_started":
      return line("turn", `turn ${r.turn}`);
    case "assistant_reply":
      return block(`assistant${r.cut_off ? " cut" : ""}`, `assistant · step ${r.step}${r.cut_off ? " · cut off at the output limit" : ""}`,
        el("div", { class: "text", text: r.text || (r.tool_calls && r.tool_calls.length ? "(code only)" : "(empty)") }));
    case "model_usage":
      return line("dim usage", `${r.kind === "llm" ? "llm() call" : "model call"} · ${r.model} · ${r.input_tokens.toLocaleString()} in / ${r.output_tokens.toLocaleString()} out${r.cached_tokens ? ` (${r.cached_tokens.toLocaleString()} cached)` : ""} · ${r.cost === null || r.cost === undefined ? "cost unknown" : `$${r.cost.toFixed(4)}`} · ${r.latency.toFixed(1)}s${r.estimated ? " · estimated" : ""}`);
    case "model_retry":
      return line("warn", `model retry ${r.attempt} (${r.kind}) in ${r.delay.toFixed(1)}s: ${r.message}`);
    case "cell_started": {
      // A cell whose outcome is already shown (an earlier page read later) is not running.
      const done = view.finished.has(r.cell);
      const live = done ? null : el("pre", { class: "out live", hidden: true });
      const running = done ? null : el("span", { class: "badge running", dataset: { started: r.ts }, text: "running" });
      if (!done) { view.liveCells.set(r.cell, live); view.runningBadges.set(r.cell, running); }
      const node = block("cell", el("span", {}, `cell ${r.cell} `, running), highlight(r.code), live);
      node[0].dataset.cell = r.cell;
      return node;
    }
    case "cell_finished": {
      view.finished.add(r.cell);
      const started = view.runningBadges.get(r.cell);
      if (started) { started.remove(); view.runningBadges.delete(r.cell); }
      const live = view.liveCells.get(r.cell);
      if (live) { live.remove(); view.liveCells.delete(r.cell); }
      const status = el("span", { class: `badge c-${r.status}`, text: r.status });
      const size = r.truncated ? ` · ${r.chars.toLocaleString()} chars, the model saw the first part (the rest is _out[${r.cell}])` : "";
      return block(`output c-${r.status}`, el("span", {}, `output of cell ${r.cell} `, status, ` ${r.duration.toFixed(1)}s${size}`),
        r.output ? folded(r.output, "output") : el("div", { class: "dim", text: "(no output)" }));
    }
    case "kernel_status":
      return line("dim", `kernel ${r.state}${r.detail ? `: ${r.detail}` : ""}`);
    case "notice": {
      const m = /^harness: .*\(([^()\s]+)\)\s*$/.exec(r.text);
      const link = m ? el("a", { href: "#", class: "entry-link", dataset: { entry: m[1] }, text: "open in the harness pane", onclick: (e) => { e.preventDefault(); showEntry(m[1]); } }) : null;
      return line(`notice ${r.level}${m ? " harness" : ""}`, r.text, link ? el("div", {}, link) : null);
    }
    case "turn_ended":
      return block(`ended r-${r.reason}`, `turn ${r.turn} ended: ${r.reason}${r.detail ? ` · ${r.detail}` : ""}`,
        r.answer !== null && r.answer !== undefined ? el("div", { class: "text answer", text: r.answer }) : null);
    case "compacted":
      return block("compacted", `compacted (${r.reason}) through #${r.through}: ${r.tokens_before.toLocaleString()} → ${r.tokens_after.toLocaleString()} tokens`,
        el("details", {}, el("summary", { text: "summary" }), el("pre", { class: "out", text: r.summary })));
    case "inbox_read":
      return block("input inbox", `inbox read by a cell (${r.messages.length})`,
        ...r.messages.map((m) => el("div", { class: "text" }, el("span", { class: "dim", text: `${SOURCES[m.source] || m.source} ${senderName(m.sender)}: ` }), m.text)));
    case "status_changed":
      return line("dim", `status → ${r.status}`);
    case "gate_checked":
      return block(`gate g-${r.status}`, el("span", {}, `gate after turn ${r.turn}: `, el("code", { text: r.gate }), " ", el("span", { class: `badge g-${r.status}`, text: r.status }),
        r.exit_code !== null && r.exit_code !== undefined ? ` exit ${r.exit_code}` : ""), r.output ? folded(r.output, "gate output") : null);
    case "autonomous_ended":
      return line(r.outcome === "passed" ? "good" : "warn", `autonomous run ended: ${r.detail}`);
    default:
      return line("dim", `${r.type}`);
  }
}

async function jumpToSeq(sessionId, seq) {
  showTab("session");
  if (view.id !== sessionId) await select(sessionId);
  while (!document.getElementById(`ev-${seq}`) && !view.exhausted && view.oldest !== null && view.oldest > seq) {
    // Far back (a trigger event of an old edit): bigger pages, fewer round trips.
    if (!(await loadEarlier(Math.min(BIG_PAGE, Math.max(PAGE, view.oldest - seq + 1))))) break;
  }
  const target = document.getElementById(`ev-${seq}`);
  if (!target) { notice(`event #${seq} is not in ${label(state.sessions.get(sessionId))}'s log`); return; }
  for (const old of document.querySelectorAll(".ev.flash")) old.classList.remove("flash");
  target.classList.add("flash");
  target.scrollIntoView({ block: "center" });
}

// -- actions on the selected session -------------------------------------------------------------

async function sendMessage() {
  const text = $("#message").value;
  if (!text.trim() || !state.selected) return;
  const mode = $("#mode").value;
  const receipt = await act(() => op("send", { session: state.selected, text, mode }));
  if (receipt) { $("#message").value = ""; notice(`message ${receipt.message_id} ${receipt.status} (${mode})`, "info"); }
}

async function sessionAction(name, done) {
  if (!state.selected) return;
  const info = await act(() => op(name, { session: state.selected }), done);
  if (info) { state.sessions.set(info.id, { ...state.sessions.get(info.id), ...info }); renderTree(); renderSessionTitle(); }
}

async function loadControls() {
  const id = state.selected;
  const [goal, jobs] = await Promise.all([
    op("goal", { session: id }).catch(() => null),
    op("schedules", { session: id }).catch(() => []),
  ]);
  if (id !== state.selected) return;
  $("#goal-line").textContent = goal
    ? `goal (${goal.status}): ${goal.objective} · used ${goal.used.toLocaleString()}${goal.budget ? ` of ${goal.budget.toLocaleString()}` : ""} tokens · continued ${goal.continued}${goal.detail ? ` · ${goal.detail}` : ""}`
    : "no goal";
  const body = el("tbody");
  if (!jobs.length) body.append(el("tr", {}, el("td", { class: "dim", text: "no schedules" })));
  for (const job of jobs) {
    body.append(el("tr", {},
      el("td", { class: "mono", text: `#${job.id}` }), el("td", { text: job.spec }), el("td", { text: job.label || "" }),
      el("td", { class: "dim", text: job.prompt }), el("td", { text: job.status }),
      el("td", { class: "dim", text: job.next_at ? `next ${clock(job.next_at)}` : "" }),
      el("td", {}, el("button", { text: "Cancel", onclick: async () => { if (await act(() => op("cancel_schedule", { job: job.id }), `schedule #${job.id} cancelled`)) loadControls(); } }))));
  }
  $("#schedules tbody").replaceWith(body);
}

async function goalAction(action) {
  if (await act(() => op("change_goal", { session: state.selected, action }), `goal: ${action}`)) loadControls();
}

async function setGoal() {
  const objective = $("#goal-objective").value.trim();
  if (!objective) { notice("a goal needs an objective"); return; }
  const budget = $("#goal-budget").value ? Number($("#goal-budget").value) : null;
  if (await act(() => op("set_goal", { session: state.selected, objective, budget }), "goal set")) {
    $("#goal-objective").value = "";
    loadControls();
  }
}

// -- the harness pane -------------------------------------------------------------------------------

let harnessTimer = null;
function harnessChanged() {
  clearTimeout(harnessTimer);
  harnessTimer = setTimeout(() => { loadEntries(); if (state.entry) showEntry(state.entry.entry.id, true); }, REFRESH_MS);
}

async function loadEntries() {
  const query = {};
  for (const key of ["kind", "scope", "status"]) { const v = $(`#h-${key}`).value; if (v) query[key] = v; }
  const entries = await act(() => op("harness_list", query));
  if (!entries) return;
  // Proposals waiting for a person first, then newest first.
  entries.sort((a, b) => (b.status === "proposed") - (a.status === "proposed") || b.created_at - a.created_at);
  const proposals = entries.filter((e) => e.status === "proposed").length;
  $("#proposals").hidden = !proposals;
  $("#proposals").textContent = proposals ? `${proposals} proposed` : "";
  const body = el("tbody");
  for (const entry of entries) {
    body.append(el("tr", {
      class: `${entry.status === "proposed" ? "proposed" : ""}${state.entry && state.entry.entry.id === entry.id ? " selected" : ""}`,
      dataset: { entry: entry.id }, onclick: () => showEntry(entry.id),
    },
      el("td", {}, el("span", { class: `badge h-${entry.status}`, text: entry.status })),
      el("td", { text: entry.kind }), el("td", { text: entry.scope }), el("td", { class: "title", text: entry.title }),
      el("td", { class: "num", text: `v${entry.version}` }), el("td", { text: entry.actor }),
      el("td", { class: "dim", text: entry.session_id ? senderName(entry.session_id) : "" })));
  }
  if (!entries.length) body.append(el("tr", {}, el("td", { class: "dim", colspan: 7, text: "no harness entries" })));
  $("#entries tbody").replaceWith(body);
}

// quiet: a refresh (a harness edit came by on the feed): the pane stays where
// the person is, the diff they chose stays.
async function showEntry(ref, quiet) {
  if (!quiet) showTab("harness");
  const detail = await act(() => op("harness_show", { entry: ref }));
  if (!detail) return;
  state.entry = detail;
  const e = detail.entry;
  $("#entry").hidden = false;
  $("#entry-title").textContent = e.title;
  $("#entry-meta").textContent = `${e.kind} · ${e.scope} · ${e.status} · v${e.version} · in force: ${detail.effective ? `v${detail.effective}` : "none"} · ${e.id}`;
  $("#approve").hidden = $("#reject").hidden = $("#decision-reason").hidden = e.status !== "proposed";
  const previous = previousVersion(detail);
  $("#revert-prev").hidden = previous === null;
  $("#revert-prev").textContent = previous !== null ? `Revert to v${previous}` : "";
  const body = el("tbody");
  for (const v of [...detail.history].reverse()) {
    const triggers = el("td", { class: "triggers" });
    for (const seq of v.source_events) {
      triggers.append(el("a", { href: "#", class: "seq-link", dataset: { seq }, text: `#${seq}`,
        onclick: (ev) => { ev.preventDefault(); if (v.session_id) jumpToSeq(v.session_id, seq); } }), " ");
    }
    if (v.session_id) triggers.prepend(el("span", { class: "dim", text: `${senderName(v.session_id)} ` }));
    body.append(el("tr", { dataset: { version: v.version } },
      el("td", { class: "num", text: `v${v.version}` }), el("td", { text: v.action }), el("td", { text: v.actor }),
      el("td", {}, el("span", { class: `badge h-${v.status}`, text: v.status })),
      el("td", { text: v.reason }), el("td", { class: "dim", text: v.effect }), triggers,
      el("td", { class: "dim", text: clock(v.created_at) }),
      el("td", {}, v.version !== e.version ? el("button", { text: `revert to v${v.version}`, onclick: () => revertTo(v.version) }) : null)));
  }
  $("#versions tbody").replaceWith(body);
  const versions = detail.history.map((v) => v.version);
  const options = (sel, chosen) => {
    sel.replaceChildren(el("option", { value: 0, text: "nothing (v0)" }), ...versions.map((n) => el("option", { value: n, text: `v${n}` })));
    sel.value = String(chosen);
  };
  if (!quiet || !$("#diff tbody").childElementCount) {
    options($("#diff-from"), versions.length > 1 ? versions[versions.length - 2] : 0);
    options($("#diff-to"), e.version);
    await showDiff();
  }
  loadEntries();
}

function previousVersion(detail) {
  // The version before the newest that has content to go back to.
  const versions = detail.history.map((v) => v.version).filter((n) => n < detail.entry.version);
  return versions.length ? versions[versions.length - 1] : null;
}

async function revertTo(version) {
  const e = state.entry.entry;
  const result = await act(() => op("harness_revert", { entry: e.id, to: version }), `${e.title}: reverted to v${version}`);
  if (result) showEntry(e.id);
}

async function decide(name) {
  const e = state.entry.entry;
  const reason = $("#decision-reason").value;
  const result = await act(() => op(name, { entry: e.id, reason }), `${e.title}: ${name === "harness_approve" ? "approved" : "rejected"}`);
  if (result) { $("#decision-reason").value = ""; showEntry(e.id); }
}

async function showDiff() {
  const e = state.entry.entry;
  const from = Number($("#diff-from").value), to = Number($("#diff-to").value);
  const reply = await act(() => op("harness_diff", { entry: e.id, from_version: from, to_version: to }));
  if (!reply) return;
  $("#diff tbody").replaceWith(sideBySide(reply.diff, from, to));
}

// A unified diff as two columns: removed lines on the left, added on the right.
function sideBySide(diff, from, to) {
  const body = el("tbody");
  body.append(el("tr", { class: "head" }, el("th", { colspan: 2, text: from ? `v${from}` : "nothing" }), el("th", { colspan: 2, text: `v${to}` })));
  let left = [], right = [], oldNo = 0, newNo = 0;
  const flush = () => {
    for (let i = 0; i < Math.max(left.length, right.length); i++) {
      const l = left[i], r = right[i];
      body.append(el("tr", {},
        el("td", { class: "no", text: l ? l[0] : "" }), el("td", { class: l ? "del" : "empty", text: l ? l[1] : "" }),
        el("td", { class: "no", text: r ? r[0] : "" }), el("td", { class: r ? "add" : "empty", text: r ? r[1] : "" })));
    }
    left = []; right = [];
  };
  for (const raw of diff.split("\n")) {
    if (raw.startsWith("---") || raw.startsWith("+++")) continue;
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(raw);
    if (hunk) { flush(); oldNo = Number(hunk[1]); newNo = Number(hunk[2]); body.append(el("tr", { class: "hunk" }, el("td", { colspan: 4, text: raw }))); continue; }
    if (raw.startsWith("-")) left.push([oldNo++, raw.slice(1)]);
    else if (raw.startsWith("+")) right.push([newNo++, raw.slice(1)]);
    else if (raw.startsWith(" ")) {
      flush();
      body.append(el("tr", {}, el("td", { class: "no", text: oldNo++ }), el("td", { text: raw.slice(1) }),
        el("td", { class: "no", text: newNo++ }), el("td", { text: raw.slice(1) })));
    }
  }
  flush();
  if (!diff.trim()) body.append(el("tr", {}, el("td", { colspan: 4, class: "dim", text: "no difference" })));
  return body;
}

// -- the usage pane ---------------------------------------------------------------------------------

async function loadUsage() {
  const id = state.selected;
  if (!id) return;
  const node = await act(() => op("usage", { session: id }));
  if (!node || id !== state.selected) return;
  $("#usage-title").textContent = `usage of ${label(state.sessions.get(id))}'s subtree: ${tokens(node.total.input_tokens + node.total.output_tokens)} tokens, ${cost(node.total)}`;
  const body = el("tbody");
  const weight = (u) => u.cost || u.input_tokens + u.output_tokens;
  const walk = (n, level, parentTotal) => {
    const share = parentTotal ? weight(n.total) / parentTotal : 1;
    const info = state.sessions.get(n.id);
    body.append(el("tr", { dataset: { id: n.id } },
      el("td", {}, el("span", { class: "indent", text: level ? "  ".repeat(level - 1) + "└ " : "" }), n.name || "(unnamed)", " ", el("span", { class: "dim mono", text: short(n.id) })),
      el("td", { class: "dim", text: info ? info.model : "" }),
      el("td", { class: "num", text: n.own.calls }),
      el("td", { class: "num", text: `${tokens(n.own.input_tokens)} / ${tokens(n.own.output_tokens)}` }),
      el("td", { class: "num", text: cost(n.own) }),
      el("td", { class: "num", text: tokens(n.total.input_tokens + n.total.output_tokens) }),
      el("td", { class: "num", text: cost(n.total) }),
      el("td", { class: "share" }, level ? shareBar(share) : el("span", { class: "dim", text: "(this subtree)" }))));
    const total = weight(n.total);
    for (const child of n.children) walk(child, level + 1, total);
  };
  walk(node, 0, 0);
  $("#usage tbody").replaceWith(body);
  $("#usage-models tbody").replaceWith(byModel(node));
}

// The subtree's own usage summed per model (each session runs one model).
function byModel(node) {
  const models = new Map();
  const add = (n) => {
    const info = state.sessions.get(n.id);
    const model = info ? info.model : "?";
    const sum = models.get(model) || { sessions: 0, calls: 0, input_tokens: 0, output_tokens: 0, cost: 0, unknown_cost_calls: 0 };
    sum.sessions += 1;
    for (const key of ["calls", "input_tokens", "output_tokens", "cost", "unknown_cost_calls"]) sum[key] += n.own[key];
    models.set(model, sum);
    n.children.forEach(add);
  };
  add(node);
  const body = el("tbody");
  const all = node.total.cost || node.total.input_tokens + node.total.output_tokens;
  for (const [model, sum] of [...models.entries()].sort((a, b) => b[1].input_tokens - a[1].input_tokens)) {
    const share = all ? (node.total.cost ? sum.cost : sum.input_tokens + sum.output_tokens) / all : 0;
    body.append(el("tr", {},
      el("td", { text: model }), el("td", { class: "num", text: sum.sessions }), el("td", { class: "num", text: sum.calls }),
      el("td", { class: "num", text: `${tokens(sum.input_tokens)} / ${tokens(sum.output_tokens)}` }),
      el("td", { class: "num", text: cost(sum) }), el("td", { class: "share" }, shareBar(share))));
  }
  return body;
}

function shareBar(share) {
  const bar = el("span", { class: "bar-fill" });
  bar.style.width = `${Math.round(share * 100)}%`;
  return el("span", { class: "share-cell" }, el("span", { class: "bar-track" }, bar), ` ${(share * 100).toFixed(0)}%`);
}

// -- tabs, keys and start ---------------------------------------------------------------------------

function showTab(tab) {
  state.tab = tab;
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("on", button.dataset.tab === tab);
  $("#session-pane").hidden = tab !== "session";
  $("#harness-pane").hidden = tab !== "harness";
  $("#usage-pane").hidden = tab !== "usage";
  if (tab === "harness") loadEntries();
  if (tab === "usage") loadUsage();
}

// Up and down the rows the tree shows.
function moveSelection(step) {
  const ids = [...document.querySelectorAll("#tree tbody tr")].map((tr) => tr.dataset.id);
  if (!ids.length) return;
  const at = ids.indexOf(state.selected);
  const next = at < 0 ? (step > 0 ? 0 : ids.length - 1) : Math.min(ids.length - 1, Math.max(0, at + step));
  if (ids[next] !== state.selected) select(ids[next]);
}

function typing(target) {
  return target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
}

function wire() {
  $("#filter").addEventListener("input", renderTree);
  $("#status-filter").addEventListener("change", renderTree);
  $("#follow").addEventListener("change", () => { if ($("#follow").checked) followRunning(); });
  $("#jump-form").addEventListener("submit", (e) => { e.preventDefault(); jump($("#jump").value); });
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button.dataset.tab));
  $("#earlier").addEventListener("click", () => loadEarlier());
  $("#send-form").addEventListener("submit", (e) => { e.preventDefault(); sendMessage(); });
  $("#message").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); sendMessage(); } });
  $("#act-interrupt").addEventListener("click", () => sessionAction("interrupt", "interrupted"));
  $("#act-stop").addEventListener("click", () => sessionAction("stop", "stopped"));
  $("#act-unload").addEventListener("click", () => sessionAction("unload", "unloaded"));
  $("#goal-form").addEventListener("submit", (e) => { e.preventDefault(); setGoal(); });
  for (const button of document.querySelectorAll("[data-goal]")) button.addEventListener("click", () => goalAction(button.dataset.goal));
  $("#controls").addEventListener("toggle", () => { if ($("#controls").open) loadControls(); });
  for (const key of ["kind", "scope", "status"]) $(`#h-${key}`).addEventListener("change", loadEntries);
  $("#h-refresh").addEventListener("click", loadEntries);
  $("#approve").addEventListener("click", () => decide("harness_approve"));
  $("#reject").addEventListener("click", () => decide("harness_reject"));
  $("#revert-prev").addEventListener("click", () => { const v = previousVersion(state.entry); if (v !== null) revertTo(v); });
  $("#diff-form").addEventListener("submit", (e) => { e.preventDefault(); showDiff(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && typing(e.target)) { e.target.blur(); return; }
    if (typing(e.target) || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp" || e.key === "j" || e.key === "k") {
      e.preventDefault();
      moveSelection(e.key === "ArrowDown" || e.key === "j" ? 1 : -1);
      return;
    }
    const keys = { "/": () => $("#filter").focus(), g: () => $("#jump").focus(), 1: () => showTab("session"), 2: () => showTab("harness"), 3: () => showTab("usage") };
    if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
  });
}

async function start() {
  wire();
  const status = await act(() => op("status", {}));
  if (status) $("#daemon").textContent = ` · daemon pid ${status.pid} · v${status.version}`;
  await act(loadSessions);
  openFeed();
  setInterval(tickClocks, 1000);
  loadEntries();
  const wanted = new URLSearchParams(location.search).get("session");
  if (wanted) jump(wanted);
}

document.addEventListener("DOMContentLoaded", start);
