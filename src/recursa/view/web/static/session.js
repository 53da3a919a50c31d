// recursa web: the session pane: history read backwards a page at a time, live records, actions.
"use strict";

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
  renderAttach();
}

async function openSession(id) {
  if (view.source) view.source.close();
  // What the last session's stream queued is not this one's to draw.
  liveQueue = [];
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
  const source = new EventSource(withToken(`/api/events/${encodeURIComponent(id)}?after=${view.newest}`));
  view.source = source;
  source.onmessage = (e) => { if (view.id === id) queueLive(id, JSON.parse(e.data)); };
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
// Each entry names its session: one queued before another session was opened
// is dropped, never drawn into the session shown.
let liveQueue = [];  // [{id, record}]
let liveFlushDue = false;
function queueLive(id, record) {
  liveQueue.push({ id, record });
  if (liveFlushDue) return;
  liveFlushDue = true;
  requestAnimationFrame(flushLive);
}

function flushLive() {
  liveFlushDue = false;
  const batch = liveQueue.filter((entry) => entry.id === view.id).map((entry) => entry.record);
  liveQueue = [];
  if (batch.length) liveRecords(batch);
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
  const session = messageTarget();
  if (!text.trim() || !session) return;
  const mode = $("#mode").value;
  const receipt = await act(() => op("send", { session, text, mode }));
  if (receipt) {
    $("#message").value = "";
    notice(`message ${receipt.message_id} to ${targetName(session)} ${receipt.status} (${mode})`, "info");
  }
}

// -- attach: the message box writes to one session, whatever session is shown ------------------

// The session a message goes to: the attached one while attached, else the one shown.
function messageTarget() {
  return state.attached || state.selected;
}

function targetName(id) {
  const info = state.sessions.get(id);
  return info ? label(info) : id;
}

// Attaches the message box to the session shown; on the attached session itself, detaches.
function toggleAttach() {
  if (!state.selected) return;
  state.attached = state.attached === state.selected ? null : state.selected;
  renderTree();
  renderAttach();
}

function detach() {
  state.attached = null;
  renderTree();
  renderAttach();
}

// The header badge, the Attach/Detach button and the message box say where a message goes.
function renderAttach() {
  const name = state.attached ? targetName(state.attached) : "";
  $("#attached").hidden = !state.attached;
  $("#attached-name").textContent = name;
  $("#act-attach").textContent = state.attached && state.attached === state.selected ? "Detach" : "Attach";
  const form = $("#send-form");
  form.classList.toggle("attached", Boolean(state.attached));
  if (state.attached) form.hidden = false;
  $("#message").placeholder = state.attached
    ? `message attached ${name} (Ctrl+Enter sends)`
    : "message the session shown (Ctrl+Enter sends)";
  $("#send").textContent = state.attached ? `Send to ${name}` : "Send";
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
