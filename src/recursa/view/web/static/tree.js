// recursa web: the session tree (live from the feed), its filters, jump and follow.
"use strict";

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
      class: `status-${info.status}${info.id === state.selected ? " selected" : ""}${info.id === state.attached ? " attached" : ""}`,
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

// One refresh at a time: ids that change while one is in flight wait for the
// next, so an older reply never lands after a newer one.
function markDirty(id) {
  state.dirty.add(id);
  if (state.refreshing) return;
  state.refreshing = true;
  setTimeout(refreshDirty, REFRESH_MS);
}

async function refreshDirty() {
  const ids = [...state.dirty];
  state.dirty.clear();
  try {
    const infos = await op("sessions", { ids: ids.join(",") });
    for (const info of infos) state.sessions.set(info.id, info);
    renderTree();
    if (state.selected && ids.includes(state.selected)) renderSessionTitle();
    if ($("#follow").checked) followRunning();
  } catch (err) {
    // Not read: they are still to be read, with whatever came meanwhile.
    for (const id of ids) state.dirty.add(id);
    notice(err.message);
  } finally {
    state.refreshing = false;
    if (state.dirty.size) {
      state.refreshing = true;
      setTimeout(refreshDirty, REFRESH_MS);
    }
  }
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
let feedSeq = null;  // null: from now (the server's newest seq)
function setFeedCursor(seq) { feedSeq = seq; }
function openFeed(recovering) {
  const source = new EventSource(withToken(feedSeq !== null ? `/api/feed?after=${feedSeq}` : "/api/feed"));
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
