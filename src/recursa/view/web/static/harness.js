// recursa web: the harness pane: entries (proposals first), versions, side-by-side diff, decisions, revert.
"use strict";

let harnessTimer = null;
function harnessChanged() {
  clearTimeout(harnessTimer);
  harnessTimer = setTimeout(() => { loadEntries(); if (state.entry) showEntry(state.entry.entry.id, true); }, REFRESH_MS);
}

const entriesTicket = tickets();
const entryTicket = tickets();
const diffTicket = tickets();

async function loadEntries() {
  const current = entriesTicket();
  const query = {};
  for (const key of ["kind", "scope", "status"]) { const v = $(`#h-${key}`).value; if (v) query[key] = v; }
  const entries = await act(() => op("harness_list", query));
  if (!entries || !current()) return;
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
  const current = entryTicket();
  const detail = await act(() => op("harness_show", { entry: ref }));
  if (!detail || !current()) return;
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
  const current = diffTicket();
  const reply = await act(() => op("harness_diff", { entry: e.id, from_version: from, to_version: to }));
  if (!reply || !current()) return;
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
