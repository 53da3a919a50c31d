// recursa web: tabs, keys, and the start.
"use strict";

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
  $("#act-attach").addEventListener("click", toggleAttach);
  $("#detach").addEventListener("click", detach);
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
    const keys = { "/": () => $("#filter").focus(), g: () => $("#jump").focus(), 1: () => showTab("session"), 2: () => showTab("harness"), 3: () => showTab("usage"), a: toggleAttach };
    if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
  });
}

async function start() {
  if (!TOKEN) {
    $("#no-token").hidden = false;
    $("#live").textContent = "no token";
    $("#live").className = "badge bad";
    return;
  }
  wire();
  const status = await act(() => op("status", {}));
  if (status) $("#daemon").textContent = ` · daemon pid ${status.pid} · v${status.version}`;
  // The feed starts at the newest record as of before the sessions are read,
  // so a change in between comes through it.
  if (status && Number.isInteger(status.last_seq)) setFeedCursor(status.last_seq);
  await act(loadSessions);
  openFeed();
  setInterval(tickClocks, 1000);
  loadEntries();
  const wanted = fragment.get("session") || new URLSearchParams(location.search).get("session");
  if (wanted) jump(wanted);
}

document.addEventListener("DOMContentLoaded", start);
