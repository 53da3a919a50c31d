// recursa web: one event record as the elements that show it (text nodes only).
"use strict";

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
